"""Assertions shared by the end-to-end tests."""

from contextlib import contextmanager


def assert_mostly_zero(counts: dict, shots: int) -> None:
    """A |0> circuit on a noisy QPU: every shot came back, and readout flips are rare.

    The fleet simulates real readout error (about 1-3 % per qubit), so an exact ``{"0": shots}``
    would fail now and then.
    """
    assert sum(counts.values()) == shots, counts
    assert counts.get("0", 0) >= 0.8 * shots, counts


def wait_for(predicate, seconds: float = 90.0) -> None:
    """Poll ``predicate`` (test side only) until it holds, or fail after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


@contextmanager
def orchestrator_in(home, **start):
    """An orchestrator of its own in ``home`` (``start``: start_server's fleet, cluster, ...),
    with the process-wide client pointed at it; stopped afterwards."""
    import pytest

    from qonductor_jupyter import client as client_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QONDUCTOR_HOME", str(home))
        info = client_module.start_server(**start)
        mp.setattr(client_module, "_default", client_module.Client(info=info))
        try:
            yield info
        finally:
            client_module.stop_server()
