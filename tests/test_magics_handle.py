"""%%qonductor --no-wait job handles, the line magics and %config settings (real orchestrator)."""

from __future__ import annotations

import time

import pytest
from helpers import assert_mostly_zero
from IPython.core.error import UsageError

from qonductor_jupyter.errors import QonductorError, WorkflowCancelled
from qonductor_jupyter.handle import WorkflowHandle

ZERO = (
    "from qiskit import QuantumCircuit\nq = QuantumCircuit(1)\nq.measure_all()\n"
    "c = sample(q, shots=20)\n"
)


def test_no_wait_returns_a_handle_and_sets_names_on_completion(shell, capsys):
    shell.run_cell(f"%%qonductor --no-wait -o job\nimport time\ntime.sleep(1)\n{ZERO}")
    job = shell.user_ns["job"]
    assert isinstance(job, WorkflowHandle)
    assert "c" not in shell.user_ns  # the cell returned before the workflow finished
    assert job.status() in ("pending", "running", "done")
    values = job.result(timeout=90)
    assert_mostly_zero(values["c"], 20)
    deadline = time.monotonic() + 10
    while "c" not in shell.user_ns and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_mostly_zero(shell.user_ns["c"], 20)  # landed in the namespace by itself
    assert job.done() and job.status() == "done"
    job.wait_interactive(interval=0.05)
    assert "1/1 steps done" in capsys.readouterr().out or job.done()


def test_a_waiting_handle_does_not_stall_the_kernels_other_requests(shell):
    # The handle long-polls on its own connection: the notebook's requests (a widget's refresh,
    # %qonductor status) answer at once while the workflow runs.
    shell.run_cell(f"%%qonductor --no-wait -o busy\nimport time\ntime.sleep(6)\n{ZERO}")
    busy = shell.user_ns["busy"]
    time.sleep(0.5)  # the watch thread is inside its long poll now
    t0 = time.monotonic()
    assert busy.status() in ("pending", "running")
    assert time.monotonic() - t0 < 2.0
    busy.cancel()


def test_handle_timeout_and_cancel(shell):
    shell.run_cell(f"%%qonductor --no-wait -o slow\nimport time\ntime.sleep(30)\n{ZERO}")
    slow = shell.user_ns["slow"]
    with pytest.raises(TimeoutError, match="goes on running"):
        slow.result(timeout=0.2)
    slow.cancel()
    with pytest.raises(WorkflowCancelled):
        slow.result(timeout=60)
    assert slow.status() == "cancelled"


def test_line_magics_status_plans_result_jobs(shell):
    shell.run_cell(f"%%qonductor --seed 3\n{ZERO}")
    wid = shell.run_line_magic("qonductor", "jobs")[0]["id"]
    report = shell.run_line_magic("qonductor", f"status {wid}")
    assert report.state == "done"
    plans = shell.run_line_magic("qonductor", f"plans {wid}")
    assert "Resource plans" in repr(plans) and "est. fidelity" in repr(plans)
    values = shell.run_line_magic("qonductor", f"result {wid}")
    assert_mostly_zero(values["c"], 20)
    with pytest.raises(UsageError, match="usage: %qonductor plans WORKFLOW_ID"):
        shell.run_line_magic("qonductor", "plans")
    with pytest.raises(QonductorError, match="wf-nosuchthing"):
        shell.run_line_magic("qonductor", "status wf-nosuchthing")
    with pytest.raises(UsageError, match="-o takes a Python name"):
        shell.run_cell_magic("qonductor", "-o 1bad", ZERO)


def test_config_sets_defaults_and_rejects_bad_values(shell):
    from traitlets import TraitError

    try:
        shell.run_line_magic("config", "Qonductor.default_shots = 7")
        shell.run_line_magic("config", 'Qonductor.default_priority = "jct"')
        shell.run_cell(
            "%%qonductor\nfrom qiskit import QuantumCircuit\nq = QuantumCircuit(1)\n"
            "q.measure_all()\nc = sample(q)\n"
        )
        assert sum(shell.user_ns["c"].values()) == 7
        wid = shell.run_line_magic("qonductor", "jobs")[0]["id"]
        from qonductor_jupyter import api

        assert api.workflow_info(wid).info["options"]["priority"] == "jct"
        settings = next(c for c in shell.configurables if type(c).__name__ == "Qonductor")
        # %config logs a bad value and keeps the old one; set directly, it raises.
        shell.run_line_magic("config", "Qonductor.default_shots = 0")
        assert settings.default_shots == 7
        with pytest.raises(TraitError, match="at least 1"):
            settings.default_shots = 0
        with pytest.raises(TraitError):
            settings.default_priority = "fast"
    finally:
        shell.run_line_magic("config", "Qonductor.default_shots = 4000")
        shell.run_line_magic("config", 'Qonductor.default_priority = "balanced"')
