"""What a deployment config may name agrees with what the orchestrator implements."""

from __future__ import annotations

import pytest

from kernel_server.core.deployment import DEFAULT_PLACEMENT, PLACEMENT_POLICIES
from kernel_server.scheduler.placement import PLACEMENT_POLICIES as IMPLEMENTED

pytestmark = pytest.mark.unit


def test_the_placement_names_a_config_accepts_are_the_policies_the_scheduler_has() -> None:
    assert set(PLACEMENT_POLICIES) == set(IMPLEMENTED)
    assert DEFAULT_PLACEMENT in IMPLEMENTED
