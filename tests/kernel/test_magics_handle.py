"""%%qonductor --no-wait job handles, the line magics and %config settings (real orchestrator)."""

from __future__ import annotations

import io
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


def test_no_wait_returns_a_handle_and_sets_names_on_completion(shell):
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
    progress = io.StringIO()
    job.wait_interactive(interval=0.05, stream=progress)
    line = progress.getvalue()
    # The cell is two steps: building the circuit (classical) and sampling it (quantum).
    assert line.startswith(f"\r{job.workflow_id}: done") and "2/2 steps done" in line
    assert line.endswith("\n")


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
    wid = shell.run_line_magic("qonductor", "jobs")[0].id
    report = shell.run_line_magic("qonductor", f"status {wid}")
    assert report.state == "done"
    plans = shell.run_line_magic("qonductor", f"plans {wid}")
    assert "Resource plans" in repr(plans) and "est. fidelity" in repr(plans)
    values = shell.run_line_magic("qonductor", f"result {wid}")
    assert_mostly_zero(values["c"], 20)
    with pytest.raises(UsageError, match=r"usage: %qonductor plans \[-h\] WORKFLOW_ID"):
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
        wid = shell.run_line_magic("qonductor", "jobs")[0].id
        from qonductor_jupyter import api

        assert api.workflow_info(wid).info.options.priority == "jct"
        settings = next(c for c in shell.configurables if type(c).__name__ == "Qonductor")
        # %config logs a bad value and keeps the old one; set directly, it raises.
        shell.run_line_magic("config", "Qonductor.default_shots = 0")
        assert settings.default_shots == 7
        with pytest.raises(TraitError, match="positive whole number, got 0"):
            settings.default_shots = 0
        with pytest.raises(TraitError):
            settings.default_priority = "fast"
    finally:
        shell.run_line_magic("config", "Qonductor.default_shots = 4000")
        shell.run_line_magic("config", 'Qonductor.default_priority = "balanced"')


def test_a_handle_is_a_future_settled_by_the_one_watcher(shell):
    import asyncio
    import concurrent.futures
    import threading

    slow = "import time\ntime.sleep(1)\n"
    shell.run_cell(f"%%qonductor --no-wait -o first\n{slow}{ZERO}")
    shell.run_cell(f"%%qonductor --no-wait -o second\n{ZERO}")
    first, second = shell.user_ns["first"], shell.user_ns["second"]
    assert isinstance(first, concurrent.futures.Future)
    seen = []
    first.add_done_callback(lambda h: seen.append((threading.current_thread().name, h.status())))
    done, not_done = concurrent.futures.wait([first, second], timeout=90)
    assert done == {first, second} and not not_done
    assert seen == [("qonductor-watcher", "done")]  # on the watcher's thread, once final
    # Every handle of the kernel has the one watcher; none has a thread of its own.
    names = [t.name for t in threading.enumerate()]
    assert names.count("qonductor-watcher") == 1
    assert not any(name.startswith("qonductor-wf-") for name in names)
    assert first.exception() is None
    assert_mostly_zero(first.result(timeout=5)["c"], 20)
    assert repr(second) == f"<WorkflowHandle {second.workflow_id}: done>"

    shell.run_cell(f"%%qonductor --no-wait -o third\n{slow}{ZERO}")
    third = shell.user_ns["third"]

    async def awaited():
        return await asyncio.wait_for(asyncio.wrap_future(third), 90)

    assert_mostly_zero(asyncio.run(awaited())["c"], 20)  # the values, as result() gives them
    assert_mostly_zero(shell.user_ns["c"], 20)


def test_a_failed_workflows_handle_gives_its_error_as_the_futures_exception(shell):
    import concurrent.futures

    from qonductor_jupyter.errors import WorkflowFailed

    shell.run_cell(f"%%qonductor --no-wait -o broken\n{ZERO}p = c['7']\n")
    broken = shell.user_ns["broken"]
    concurrent.futures.wait([broken], timeout=90)
    assert broken.done() and broken.status() == "failed"
    error = broken.exception()
    assert isinstance(error, WorkflowFailed) and "KeyError" in str(error)
    with pytest.raises(WorkflowFailed):
        broken.result()
    assert {"q", "c"} <= set(broken.result(partial=True))  # what ran before the error


def test_a_cell_is_split_once_per_run(shell, monkeypatch):
    from qonductor_jupyter import api, notebook_names, splitter

    calls = {"split_cell": 0, "parse_cell": 0, "notebook_context": 0}

    def counting(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(api, "split_cell")
    counting(splitter, "parse_cell")
    counting(notebook_names, "notebook_context")
    for options, cell in [
        ("", ZERO + "n = len(c)\n"),  # submitted, waited for, names set, report shown
        ("", ZERO + "for i in range(2):\n    r = sample(q, shots=5)\nr\n"),  # a hybrid step
        ("--dry-run", ZERO),
        ("", "x = 1\nx\n"),  # no quantum call: runs in the kernel
        ("--no-wait -o job", ZERO),
    ]:
        calls.update(dict.fromkeys(calls, 0))
        assert shell.run_cell(f"%%qonductor {options}\n{cell}").success
        assert calls == {"split_cell": 1, "parse_cell": 1, "notebook_context": 1}, options
    shell.user_ns["job"].result(timeout=90)


def test_line_magic_dash_h_and_a_bad_argument(shell, capsys):
    assert shell.run_line_magic("qonductor", "cancel -h") is None
    assert capsys.readouterr().out.startswith("usage: %qonductor cancel [-h] WORKFLOW_ID")
    with pytest.raises(UsageError, match="error: argument STEP: a step number"):
        shell.run_line_magic("qonductor", "choose wf-1 x 0")
    result = shell.run_cell("%qonductor cancel wf-1 wf-2")
    assert isinstance(result.error_in_exec, UsageError)  # shown by IPython without a traceback
    assert "unrecognized arguments: wf-2" in str(result.error_in_exec)
