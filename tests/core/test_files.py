"""Owner-only atomic writes (keys, users, images)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kernel_server.core.files import write_private

pytestmark = pytest.mark.unit


def test_a_private_file_is_0600_replaced_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "keys.json"
    write_private(path, "first")
    path.chmod(0o644)  # even a file someone opened up is private again after the next write
    write_private(path, "second")
    assert path.read_text() == "second"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["keys.json"]
