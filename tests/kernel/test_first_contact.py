"""A new user's first cells, against the real orchestrator (issue 14's points, one test or more
each): explicit imports, failures that fail and keep what ran, helpers across cells, bad shots,
messages in the user's words, in-place changes, plan cost in loops, --plan ask and names."""

import io
import textwrap

import pytest

import qonductor_jupyter as qj
from qonductor_jupyter.errors import InputError, QonductorError, WorkflowFailed
from qonductor_jupyter.splitter import split_cell

BELL = textwrap.dedent("""
    from qiskit import QuantumCircuit
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.cx(0, 1)
    qc.measure_all()
""")


def run(shell, cell, line=""):
    return shell.run_cell(f"%%qonductor {line}\n{textwrap.dedent(cell)}")


def last_workflow():
    return qj.list_workflows(1)[0].id


# ------------------------------------------------------------------ 1. explicit imports
def _shape(graph):
    return [(s.kind.value, s.quantum_calls) for s in graph.steps], graph.edges


def test_explicit_imports_split_like_the_names_the_magic_gives():
    plain = split_cell(BELL + "counts = sample(qc)\nz = estimate(qc, 'ZZ')\n")
    for header in (
        "from qonductor_jupyter import sample, estimate\n",
        "from qonductor_jupyter.primitives import sample, estimate\n",
    ):
        imported = split_cell(header + BELL + "counts = sample(qc)\nz = estimate(qc, 'ZZ')\n")
        assert _shape(imported) == _shape(plain)
    module = split_cell(
        "import qonductor_jupyter as qj\n"
        + BELL
        + "counts = qj.sample(qc)\nz = qj.estimate(qc, 'Z')\n"
    )
    assert _shape(module) == _shape(plain)
    alias = split_cell("from qonductor_jupyter import sample as run\nc = run(qc)\n")
    assert [s.kind.value for s in alias.steps] == ["classical", "quantum"]


def test_a_cell_that_imports_sample_runs_on_a_qpu(shell):
    result = run(
        shell, "from qonductor_jupyter import sample\n" + BELL + "counts = sample(qc, shots=64)\n"
    )
    assert result.success, result.error_in_exec
    assert sum(shell.user_ns["counts"].values()) == 64
    result = run(
        shell, "import qonductor_jupyter as qj\n" + BELL + "c2 = qj.sample(qc, shots=32)\n"
    )
    assert result.success, result.error_in_exec
    assert sum(shell.user_ns["c2"].values()) == 32
    steps = qj.workflow_info(last_workflow()).steps
    assert [s.kind for s in steps] == ["classical", "quantum"] and steps[1].qpu_jobs


def test_sample_outside_any_cell_is_a_one_step_workflow(orchestrator):
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(1)
    qc.x(0)
    qc.measure_all()
    counts = qj.sample(qc, shots=50)
    assert sum(counts.values()) == 50 and counts.get("1", 0) >= 40
    value = qj.estimate(QuantumCircuit(1), "Z", shots=100)
    assert value > 0.8
    with pytest.raises(ValueError, match="shots must be a positive whole number, got 0"):
        qj.sample(qc, shots=0)
    with pytest.raises(TypeError, match="sample\\(\\) takes a QuantumCircuit"):
        qj.sample("not a circuit")


# ------------------------------------------------------------------ 3. what ran is kept
def test_a_later_error_keeps_the_finished_quantum_results(shell):
    shell.user_ns.update(counts="stale", p="stale p")
    result = run(shell, BELL + "counts = sample(qc, shots=40)\np = counts['22']\n")
    error = result.error_in_exec
    assert isinstance(error, WorkflowFailed) and "KeyError: '22'" in str(error)
    assert sum(shell.user_ns["counts"].values()) == 40  # the paid-for counts are there
    assert shell.user_ns["qc"].num_qubits == 2
    assert shell.user_ns["p"] == "stale p"  # not assigned: keeps its value, as in Python
    assert error.applied.names == ["QuantumCircuit", "counts", "qc"]
    assert "Names set before the error" in "\n".join(error._render_traceback_())
    kept = qj.workflow_results(error.workflow_id, partial=True)
    assert sum(kept["counts"].values()) == 40 and "p" not in kept
    with pytest.raises(WorkflowFailed):
        qj.workflow_results(error.workflow_id)
    assert set(shell.run_line_magic("qonductor", f"result {error.workflow_id}")) == set(kept)


def test_a_failing_hybrid_step_keeps_what_it_assigned_before_the_error(shell):
    shell.user_ns["history"] = []
    alias = shell.user_ns["history"]
    cell = BELL + textwrap.dedent("""
        for i in range(3):
            history.append(sample(qc, shots=16))
            if i == 1:
                raise RuntimeError("stop after two")
    """)
    result = run(shell, cell)
    assert isinstance(result.error_in_exec, WorkflowFailed)
    assert "RuntimeError: stop after two" in str(result.error_in_exec)
    assert shell.user_ns["i"] == 1
    assert len(alias) == 2 and shell.user_ns["history"] is alias  # changed in place


def test_steps_before_a_failing_line_still_finish(shell):
    # The quantum step is slow, the failing classical step after it is quick and independent:
    # in Python the sample would have run before the error, so its counts are kept.
    cell = BELL + "counts = sample(qc, shots=2000)\ny = 1 / 0\n"
    result = run(shell, cell)
    assert isinstance(result.error_in_exec, WorkflowFailed)
    assert "ZeroDivisionError" in str(result.error_in_exec)
    assert sum(shell.user_ns["counts"].values()) == 2000
    assert "y" not in shell.user_ns


# ------------------------------------------------------------------ 6. helpers across cells
def test_a_helper_from_an_earlier_cell_makes_its_caller_quantum(shell):
    assert run(
        shell, BELL + "def run_circ(c):\n    return sample(c, shots=20)\nfirst = run_circ(qc)\n"
    ).success
    result = run(shell, "again = run_circ(qc)\n")
    assert result.success, result.error_in_exec
    assert sum(shell.user_ns["again"].values()) == 20
    assert [s.kind for s in qj.workflow_info(last_workflow()).steps] == ["hybrid"]


def test_a_helper_from_a_plain_cell_reads_the_notebooks_globals(shell):
    assert shell.run_cell(
        "factor = 3\n"
        "def scaled(counts):\n    return {k: v * factor for k, v in counts.items()}\n"
        "def measure(c):\n    return scaled(sample(c, shots=10))\n"
    ).success
    assert run(shell, BELL).success
    shell.user_ns["factor"] = 5  # looked up when it runs, as in the notebook
    result = run(shell, "counts = measure(qc)\n")
    assert result.success, result.error_in_exec
    assert sum(shell.user_ns["counts"].values()) == 50


def test_a_notebook_class_whose_method_samples(shell):
    assert shell.run_cell(
        "class Runner:\n    def __init__(self, shots):\n        self.shots = shots\n"
        "    def run(self, c):\n        return sample(c, shots=self.shots)\n"
        "runner = Runner(12)\n"
    ).success
    assert run(shell, BELL).success
    result = run(shell, "out = runner.run(qc)\n")
    assert result.success, result.error_in_exec
    assert sum(shell.user_ns["out"].values()) == 12


# ------------------------------------------------------------------ 7. shots
@pytest.mark.parametrize(
    "shots, message",
    [
        ("0", "shots must be a positive whole number, got 0"),
        ("-3", "shots must be a positive whole number, got -3"),
        ("2.5", "shots must be a positive whole number, got 2.5"),
        ("'many'", "shots must be a positive whole number, got 'many'"),
        ("True", "shots must be a positive whole number, got True"),
    ],
)
def test_bad_shot_counts_are_refused_with_what_was_given(shell, shots, message):
    result = run(shell, BELL + f"c = sample(qc, shots={shots})\n")
    assert isinstance(result.error_in_exec, WorkflowFailed)
    assert message in str(result.error_in_exec)
    assert "invalid literal" not in str(result.error_in_exec)
    assert "c" not in shell.user_ns


def test_numpy_integer_shots_are_fine(shell):
    result = run(shell, "import numpy as np\n" + BELL + "c = sample(qc, shots=np.int64(24))\n")
    assert result.success, result.error_in_exec
    assert sum(shell.user_ns["c"].values()) == 24


# ------------------------------------------------------------------ 8. messages
def test_tracebacks_show_the_users_frames_only(shell):
    result = run(
        shell, "from qiskit import QuantumCircuit\nbare = QuantumCircuit(2)\nc = sample(bare)\n"
    )
    text = str(result.error_in_exec)
    assert "bare has no measurements" in text and "bare.measure_all()" in text
    assert "circuit-" not in text  # not qiskit's automatic name
    assert "kernel_server" not in text and "classical.py" not in text
    assert "line 3, in <module>\n    c = sample(bare)" in text


def test_estimate_takes_a_measured_circuit_and_explains_mid_circuit_measurement(shell):
    result = run(shell, BELL + "zz = estimate(qc, 'ZZ', shots=400)\n")
    assert result.success, result.error_in_exec
    assert shell.user_ns["zz"] > 0.5  # a Bell pair: <ZZ> = 1 up to noise
    cell = (
        "from qiskit import QuantumCircuit\nmid = QuantumCircuit(1, 1)\nmid.measure(0, 0)\n"
        "mid.h(0)\nv = estimate(mid, 'Z')\n"
    )
    text = str(run(shell, cell).error_in_exec)
    assert "mid measures in the middle of the circuit" in text
    assert "measurement_circuits" not in text


def test_what_the_text_shows_is_refused_before_anything_runs(shell):
    before = len(qj.list_workflows())
    cell = (
        "import time\ntime.sleep(5)\nfrom qiskit import QuantumCircuit\nbig = QuantumCircuit(200)\n"
    )
    result = run(shell, cell + "big.measure_all()\nc = sample(big)\n")
    assert isinstance(result.error_in_exec, InputError)
    assert "200 qubits" in str(result.error_in_exec)
    assert len(qj.list_workflows()) == before


def test_config_messages_and_inline_mappings(shell):
    result = run(shell, BELL + "c = sample(qc)\n", "--config {qpu: {min_qubits: 1000}}")
    text = str(result.error_in_exec)
    assert isinstance(result.error_in_exec, QonductorError)
    assert "no QPU satisfies the configuration qpu: {'min_qubits': 1000}" in text
    assert "0-qubit" not in text and "does not exist" not in text
    result = run(shell, BELL + "c = sample(qc, shots=20)\n", "--config {'qpu': {'min_qubits': 30}}")
    assert result.success, result.error_in_exec
    (job,) = qj.workflow_info(last_workflow()).steps[1].qpu_jobs
    assert job.qpu == "fake_prague"  # the only 33-qubit QPU of the small fleet


# ------------------------------------------------------------------ 9. in place
def test_changes_in_place_land_on_the_notebooks_objects(shell, tmp_path):
    import numpy as np

    shell.user_ns.update(all_counts=[], table={}, grid=np.zeros(3), untouched=[1, 2])
    aliases = {name: shell.user_ns[name] for name in ("all_counts", "table", "grid", "untouched")}
    cell = BELL + textwrap.dedent("""
        counts = sample(qc, shots=30)
        all_counts.append(counts)
        table["bell"] = sum(counts.values())
        grid[1] = 7.0
        n = untouched.count(1)
    """)
    result = run(shell, cell)
    assert result.success, result.error_in_exec
    ns = shell.user_ns
    for name, alias in aliases.items():
        assert ns[name] is alias, name
    assert len(aliases["all_counts"]) == 1 and aliases["table"] == {"bell": 30}
    assert aliases["grid"][1] == 7.0 and ns["n"] == 1


def test_a_file_handle_is_not_replaced_by_a_copy(shell, tmp_path):
    path = tmp_path / "angles.txt"
    path.write_text("0.1\n0.2\n")
    shell.user_ns["handle"] = open(path)  # noqa: SIM115
    try:
        cell = "angles = [float(x) for x in handle.read().split()]\n" + BELL
        result = run(shell, cell + "c = sample(qc, shots=8)\n")
        assert result.success, result.error_in_exec
        assert shell.user_ns["angles"] == [0.1, 0.2]
        assert not isinstance(shell.user_ns["handle"], io.StringIO)  # still the notebook's file
    finally:
        shell.user_ns["handle"].close()


# ------------------------------------------------------------------ 10. plans in loops
def test_a_loop_weighs_its_plan_over_every_call(shell):
    # At the default shots one call of this circuit picks a mitigated plan (asserted below);
    # thirty calls must not each pay for it.
    cell = BELL + "for i in range(30):\n    c = sample(qc)\n"
    result = run(shell, cell, "--seed 2")
    assert result.success, result.error_in_exec
    (step,) = [s for s in qj.workflow_info(last_workflow()).steps if s.kind == "hybrid"]
    plans = step.qpu_jobs[0].plans
    chosen = next(p for p in plans if p.chosen)
    front = [p for p in plans if p.rank == 0]
    fastest = min(p.quantum_seconds + p.classical_seconds for p in front)
    single = qj.workflow_info(_single_call_workflow(shell))
    single_plans = single.steps[1].qpu_jobs[0].plans
    one = next(p for p in single_plans if p.chosen)
    budget = one.quantum_seconds + one.classical_seconds - fastest
    extra = chosen.quantum_seconds + chosen.classical_seconds - fastest
    assert budget > 0 and one.mitigation != "none"  # the one-call choice pays for mitigation
    assert 30 * extra <= budget + 1e-6  # the loop pays the plan 30 times
    assert len(step.qpu_jobs) == 30


def _single_call_workflow(shell):
    assert run(shell, BELL + "one = sample(qc)\n", "--seed 2").success
    return last_workflow()


def test_the_report_says_what_the_plan_cost(shell, capsys):
    assert run(shell, BELL + "for i in range(4):\n    c = sample(qc, shots=10)\n").success
    text = capsys.readouterr().out
    assert "4 QPU job(s) x" in text and "estimated QPU time" in text


# ------------------------------------------------------------------ 11. ask, names, headers
def test_choose_right_after_a_plan_ask_cell_waits_for_the_plans(shell):
    run(shell, "import time\ntime.sleep(1.5)\n" + BELL + "c = sample(qc, shots=20)\n", "--plan ask")
    wid = last_workflow()
    early = repr(shell.run_line_magic("qonductor", f"plans {wid}"))
    assert "no quantum step ran yet" not in early
    assert "when the steps it needs have run" in early or "estimating" in early or "plan" in early
    shell.run_line_magic("qonductor", f"choose {wid} 1 0")  # plans not there yet: it waits
    assert sum(qj.workflow_results(wid, timeout=120)["c"].values()) == 20


def test_unnamed_cells_do_not_inherit_an_earlier_name(shell):
    cell = BELL + "c = sample(qc, shots=10)\n"
    assert run(shell, cell, "--name bell-run").success
    assert qj.list_workflows(1)[0].name == "bell-run"
    assert run(shell, cell).success
    assert qj.list_workflows(1)[0].name != "bell-run"


def test_plan_header_does_not_say_none_marked_above_a_marked_plan(shell, capsys):
    assert run(shell, BELL + "c = sample(qc, shots=10)\n").success
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("Resource plans"))
    assert "none marked" not in header
    assert any(line.strip().startswith("* ") for line in text.splitlines())
    assert run(shell, BELL + "c = sample(qc, shots=10)\n", "--plan off").success
    assert "ran unmitigated" in capsys.readouterr().out


# ------------------------------------------------------------------ 15. valid Python runs
def test_a_name_that_may_be_assigned_first_is_not_a_required_input(shell):
    cell = (
        textwrap.dedent("""
        import json
        rows = []
        for text in ['1', 'x', '2']:
            try:
                value = json.loads(text)
            except ValueError:
                continue
            rows.append(value)
    """)
        + BELL
        + "c = sample(qc, shots=8)\n"
    )
    result = run(shell, cell)
    assert result.success, result.error_in_exec
    assert shell.user_ns["rows"] == [1, 2] and shell.user_ns["value"] == 2
