"""4500 workflows per hour (compressed 10x) from four concurrent clients: nothing lost."""

import pytest
from helpers import orchestrator_in

from qonductor_jupyter.loadtest import run_load


@pytest.fixture
def own_orchestrator(tmp_path):
    with orchestrator_in(tmp_path) as info:
        yield info


def test_load_from_concurrent_clients_loses_and_duplicates_nothing(own_orchestrator):
    report = run_load(clients=4, workflows_per_hour=4500, compression=10, duration_s=12)
    print(report.summary())  # the p99 latency, in the test log
    assert not report.errors, report.errors[:3]
    assert report.submitted >= 120  # 12.5 per second for 12 s
    assert report.final == {"done": report.submitted}
    assert report.lost == 0 and report.duplicated == 0
    # Bounded memory: about 150 workflows must not grow the orchestrator by much.
    assert max(report.rss_mb) - report.rss_mb[0] < 300
    assert report.latency_ms(0.99) < 1000
