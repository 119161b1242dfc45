"""``%%qonductor`` cells in a real Jupyter kernel (nbclient), where the point is the kernel's own
behaviour: a failing cell fails (Run All stops, the reply names the real error), and the
``--no-wait`` handle never crashes the kernel."""

import re
import threading
import time

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

BELL = (
    "from qiskit import QuantumCircuit\nqc = QuantumCircuit(2)\nqc.h(0)\nqc.cx(0, 1)\n"
    "qc.measure_all()\n"
)


def execute(*sources, allow_errors=False, timeout=300):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext qonductor_jupyter")]
    nb.cells += [nbformat.v4.new_code_cell(source) for source in sources]
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors).execute()
    return nb.cells[1:]


def plain(lines):
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(lines))


def errors(cell):
    return [out for out in cell.outputs if out.output_type == "error"]


def test_an_error_in_a_cell_that_runs_in_the_kernel_fails_the_cell(orchestrator):
    with pytest.raises(CellExecutionError) as info:
        execute("%%qonductor\nx = 1\ny = 1 / 0\n", "after = 1\n")
    assert info.value.ename == "ZeroDivisionError"  # the kernel's reply names the real error
    cells = execute("%%qonductor\nx = 1\ny = 1 / 0\n", "x\n", allow_errors=True)
    (error,) = errors(cells[0])
    text = plain(error.traceback)
    assert error.ename == "ZeroDivisionError" and "1 / 0" in text
    assert "magics.py" not in text and "run_cell_magic" not in text  # the user's frames only
    assert cells[1].outputs[0]["data"]["text/plain"] == "1"  # what ran before the error stays


def test_a_failing_workflow_fails_the_cell_and_run_all_stops(orchestrator):
    failing = "%%qonductor\n" + BELL + "counts = sample(qc, shots=20)\np = counts['22']\n"
    with pytest.raises(CellExecutionError) as info:
        execute(failing, "never = 1\n")
    assert info.value.ename == "WorkflowFailed"
    cells = execute(failing, "sum(counts.values())\n", allow_errors=True)
    assert errors(cells[0])
    assert cells[1].outputs[0]["data"]["text/plain"] == "20"  # kept: finished before the error


def test_a_kernel_cell_shows_its_last_expression(orchestrator):
    (cell,) = execute("%%qonductor\nz = 21 * 2\nz\n")
    (result,) = [out for out in cell.outputs if out.output_type == "execute_result"]
    assert result["data"]["text/plain"] == "42"


def test_no_wait_handles_never_crash_the_kernel(orchestrator):
    # The sequence that killed the kernel with SIGSEGV (the results were unpickled on the
    # handle's thread while the main thread used qiskit), many times over in one kernel.
    rounds = 6
    cells = []
    for i in range(rounds):
        cells += [
            f"%%qonductor --no-wait -o job{i}\n" + BELL + f"first{i} = sample(qc, shots=16)\n",
            f"r{i} = job{i}.result(timeout=120)",
            f"%%qonductor --no-wait -o again{i}\n" + BELL + f"second{i} = sample(qc, shots=16)\n",
            # The main thread builds and transpiles circuits while the second job finishes.
            "from qiskit import transpile\nstart = __import__('time').monotonic()\n"
            f"while not again{i}.done() or __import__('time').monotonic() - start < 0.3:\n"
            "    transpile(qc.copy(), basis_gates=['cx', 'rz', 'sx', 'x'], optimization_level=1)\n",
        ]
    cells.append(
        f"for i in range({rounds}):\n"
        "    assert sum(globals()[f'second{i}'].values()) == 16\n"
        "    assert sum(globals()[f'r{i}'][f'first{i}'].values()) == 16\n"
        "print('ok')"
    )
    out = execute(*cells, timeout=600)
    assert out[-1].outputs[0]["text"].strip() == "ok"


def test_handle_results_are_unpickled_on_the_main_thread_only(shell, monkeypatch):
    """Headless: the watch thread waits; the values come in on the main thread (before the
    next cell here, where no kernel loop runs)."""
    from qonductor_jupyter import namespace_update

    threads = []
    real_loads = namespace_update.cloudpickle.loads

    def recording_loads(blob):
        threads.append(threading.current_thread())
        return real_loads(blob)

    monkeypatch.setattr(namespace_update.cloudpickle, "loads", recording_loads)
    shell.run_cell("%%qonductor --no-wait -o job\n" + BELL + "counts = sample(qc, shots=16)\n")
    handle = shell.user_ns["job"]
    deadline = time.monotonic() + 120
    while not handle.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.done()  # the watcher has the final reply
    assert threads == []  # arrived, but nothing unpickled off the main thread
    assert shell.run_cell("n = sum(counts.values())").success  # applied before this cell
    assert shell.user_ns["n"] == 16
    assert threads and all(t is threading.main_thread() for t in threads)
