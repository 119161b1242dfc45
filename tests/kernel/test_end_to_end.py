"""End to end: the real orchestrator process over real ZeroMQ, real Aer, real worker pools."""

import textwrap
import time

import pytest
from helpers import assert_mostly_zero

import qonductor_jupyter as qj
from qonductor_jupyter.errors import InputError, QonductorError, WorkflowFailed

PIPELINE = textwrap.dedent("""
    from qiskit import QuantumCircuit
    n = width + 1
    qc = QuantumCircuit(n)
    qc.h(0)
    for i in range(n - 1):
        qc.cx(i, i + 1)
    qc.measure_all()
    counts = sample(qc, shots=400)
    total = sum(counts.values())
    p_ghz = (counts.get("0" * n, 0) + counts.get("1" * n, 0)) / total
""")


def run(shell, cell, line=""):
    result = shell.run_cell(f"%%qonductor {line}\n{cell}")
    return result


def test_api_create_deploy_invoke_results(orchestrator):
    image = qj.create_workflow(PIPELINE, config={"shots": 400, "seed": 7}, name="ghz")
    assert image in [i.id for i in qj.list_images()]
    assert qj.deploy(image) == image
    wid = qj.invoke(image, {"width": 2})
    out = qj.workflow_results(wid, timeout=180)
    assert qj.workflow_status(wid) == "done"
    assert out["n"] == 3 and out["total"] == 400
    assert out["p_ghz"] > 0.7
    # The same image again with new inputs.
    out2 = qj.workflow_results(qj.invoke(image, {"width": 3}), timeout=180)
    assert out2["n"] == 4 and set(map(len, out2["counts"])) == {4}


def test_missing_inputs_are_named(orchestrator):
    image = qj.deploy(qj.create_workflow(PIPELINE))
    with pytest.raises(QonductorError, match="missing inputs: width"):
        qj.invoke(image, {})


def test_magic_sets_every_assigned_name_and_reports_the_qpu(shell, capsys):
    shell.user_ns["width"] = 1
    result = run(shell, PIPELINE, "--seed 3")
    assert result.error_in_exec is None, result.error_in_exec
    ns = shell.user_ns
    assert ns["n"] == 2 and ns["total"] == 400 and ns["p_ghz"] > 0.7
    assert type(ns["qc"]).__name__ == "QuantumCircuit"
    text = capsys.readouterr().out
    assert "quantum" in text and "fake_" in text and "done" in text
    assert "est. fidelity" in text and "queued" in text
    # The quantum step's resource plans over the fleet's templates, with their estimates.
    assert "Resource plans" in text and "QPU template" in text and "$" in text
    assert "Egret-33" in text or "Falcon-27" in text


def test_quantum_steps_record_pareto_ranked_plans(orchestrator):
    wid = qj.invoke(qj.deploy(qj.create_workflow(PIPELINE)), {"width": 2})
    qj.workflow_results(wid, timeout=180)
    (quantum,) = [s for s in qj.workflow_info(wid).steps if s.kind == "quantum"]
    job = quantum.qpu_jobs[0]
    plans = job.plans
    assert 3 <= len(plans) <= 12 and plans[0].rank == 0
    ranks = [p.rank for p in plans]
    assert ranks == sorted(ranks)
    for plan in plans:
        assert plan.backend in {"Falcon-27", "Egret-33"}
        assert 0 < plan.fidelity <= 1 and plan.quantum_seconds > 0 and plan.cost > 0
    # --plan auto (the default): one plan chosen, and the job ran as it says.
    (chosen,) = [p for p in plans if p.chosen]
    assert job.qpu in chosen.members
    expected = "mitigated:" + chosen.mitigation if chosen.mitigation != "none" else None
    assert expected is None or job.method == expected


def test_plan_number_and_off_and_out_of_range(shell):
    cell = "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.x(0)\nq.measure_all()\n"
    cell += "c = sample(q, shots=200)\n"
    run(shell, cell, "--plan off --seed 1")
    wid = qj.list_workflows()[0].id
    (job,) = [j for s in qj.workflow_info(wid).steps for j in s.qpu_jobs]
    assert not any(p.chosen for p in job.plans) and "mitigated" not in job.method
    c = shell.user_ns["c"]
    assert sum(c.values()) == 200 and c.get("01", 0) >= 160
    # A plan with mitigation, picked by number.
    plans = job.plans
    number = next(i for i, p in enumerate(plans) if p.mitigation not in ("none", "dd"))
    run(shell, cell, f"--plan {number} --seed 1")
    wid = qj.list_workflows()[0].id
    (job,) = [j for s in qj.workflow_info(wid).steps for j in s.qpu_jobs]
    assert job.plans[number].chosen
    assert job.method == "mitigated:" + plans[number].mitigation
    assert sum(shell.user_ns["c"].values()) == 200  # mitigated counts still total the shots
    assert max(shell.user_ns["c"], key=shell.user_ns["c"].get) == "01"
    # A plan number that no step can have is refused before anything runs; one the step
    # lacks (it has fewer plans) when its plans are made.
    from IPython.core.error import UsageError

    before = len(qj.list_workflows())
    result = run(shell, cell, "--plan 99")
    assert isinstance(result.error_in_exec, UsageError)
    assert "--plan 99: a step has at most 12 plans" in str(result.error_in_exec)
    assert len(qj.list_workflows()) == before
    few = len(plans)
    if few < 12:
        result = run(shell, cell, f"--plan {few}")
        assert isinstance(result.error_in_exec, QonductorError)
        assert f"--plan {few}: this step has" in str(result.error_in_exec)

    with pytest.raises(UsageError, match="--plan takes auto, ask, off or a plan number"):
        shell.run_cell_magic("qonductor", "--plan best", cell)


def test_functions_defined_in_the_cell_work_in_the_notebook(shell):
    cell = textwrap.dedent("""
        from qiskit import QuantumCircuit
        scale = 10
        def decode(counts):
            return {k: v * scale for k, v in counts.items()}
        qc = QuantumCircuit(1)
        qc.x(0)
        qc.measure_all()
        counts = sample(qc, shots=50)
        scaled = decode(counts)
    """)
    assert run(shell, cell).error_in_exec is None
    assert sum(shell.user_ns["scaled"].values()) == 500
    shell.user_ns["scale"] = 1
    assert sum(shell.user_ns["decode"]({"1": 5}).values()) == 5  # looks up the notebook's globals


def test_dry_run_prints_steps_and_runs_nothing(shell, capsys):
    assert run(shell, "a = 1\nc = sample(qc)\nb = a + 1\n", "--dry-run").error_in_exec is None
    text = capsys.readouterr().out
    assert "quantum" in text and "classical" in text
    assert "b" not in shell.user_ns


def test_cell_without_quantum_call_runs_in_the_kernel(shell, capsys):
    assert run(shell, "x = 40 + 2\n").error_in_exec is None
    assert shell.user_ns["x"] == 42
    assert "ordinary Python" in capsys.readouterr().out


def test_syntax_error_is_clear_and_nothing_runs(shell):
    result = run(shell, "x = 1\ny = (2 +\n")
    assert isinstance(result.error_in_exec, QonductorError)
    assert "not valid Python" in str(result.error_in_exec)
    assert "x" not in shell.user_ns


def test_unpicklable_input_is_refused_before_queueing(shell):
    import threading

    shell.user_ns["lock"] = threading.Lock()
    shell.user_ns["qc"] = None
    result = run(shell, "y = str(lock)\nc = sample(qc)\n")
    assert isinstance(result.error_in_exec, InputError)
    assert "lock" in str(result.error_in_exec)


def test_undefined_name_fails_where_it_is_read(shell):
    # As in Python: the lines before it run (and keep their names), then a NameError.
    result = run(shell, "x = 41 + 1\nc = sample(not_defined_anywhere)\n")
    assert isinstance(result.error_in_exec, WorkflowFailed)
    assert "NameError: name 'not_defined_anywhere' is not defined" in str(result.error_in_exec)
    assert "line 2" in str(result.error_in_exec)
    assert shell.user_ns["x"] == 42


def test_circuit_wider_than_every_qpu(shell):
    from qiskit import QuantumCircuit

    wide = QuantumCircuit(500)
    wide.measure_all()
    shell.user_ns["wide"] = wide
    result = run(shell, "c = sample(wide)\n")
    assert isinstance(result.error_in_exec, InputError)
    assert "500 qubits" in str(result.error_in_exec)


def test_circuit_too_wide_by_the_cells_own_text_is_refused_before_anything_runs(shell):
    cell = textwrap.dedent("""
        from qiskit import QuantumCircuit
        wide = QuantumCircuit(400)
        wide.measure_all()
        c = sample(wide)
    """)
    before = len(qj.list_workflows())
    result = run(shell, cell)
    assert isinstance(result.error_in_exec, InputError)
    assert "`wide = QuantumCircuit(400)` asks for 400 qubits" in str(result.error_in_exec)
    assert len(qj.list_workflows()) == before  # nothing was submitted


def test_circuit_built_too_wide_inside_the_cell_fails_the_workflow(shell):
    cell = textwrap.dedent("""
        from qiskit import QuantumCircuit
        wide = QuantumCircuit(4 * 100)
        wide.measure_all()
        c = sample(wide)
    """)
    result = run(shell, cell)
    assert isinstance(result.error_in_exec, WorkflowFailed)
    assert "400 qubits" in str(result.error_in_exec)
    assert shell.user_ns["wide"].num_qubits == 400  # assigned before the error: kept


def test_exception_in_a_classical_step_shows_its_traceback(shell, orchestrator):
    cell = (
        "from qiskit import QuantumCircuit\nqc = QuantumCircuit(1)\nqc.measure_all()\n"
        "c = sample(qc, shots=10)\nratio = c['0'] / 0\n"
    )
    result = run(shell, cell)
    err = result.error_in_exec
    assert isinstance(err, WorkflowFailed)
    assert "ZeroDivisionError" in err.user_traceback
    assert "line 5" in err.user_traceback and "ratio = c['0'] / 0" in err.user_traceback
    assert qj.workflow_status(err.workflow_id) == "failed"
    # Other workflows are unaffected.
    ok = run(
        shell,
        "from qiskit import QuantumCircuit\nq2 = QuantumCircuit(1)\nq2.measure_all()\n"
        "c2 = sample(q2, shots=10)\n",
    )
    assert ok.error_in_exec is None
    assert_mostly_zero(shell.user_ns["c2"], 10)


def test_unknown_option_is_a_usage_error(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        shell.run_cell_magic("qonductor", "--frobnicate", "x = 1\n")


def test_hybrid_loop_is_pinned_to_one_qpu(shell):
    cell = textwrap.dedent("""
        from qiskit import QuantumCircuit
        values = []
        for theta in (0.0, 3.14159):
            qc = QuantumCircuit(1)
            qc.rx(theta, 0)
            qc.measure_all()
            values.append(sample(qc, shots=100).get("1", 0))
    """)
    result = run(shell, cell)
    assert result.error_in_exec is None
    assert shell.user_ns["values"][0] < 20 and shell.user_ns["values"][1] > 80
    workflows = qj.list_workflows(limit=1)
    from qonductor_jupyter.api import workflow_info

    info = workflow_info(workflows[0].id)
    hybrid = [s for s in info.steps if s.kind == "hybrid"]
    assert len(hybrid) == 1 and len(hybrid[0].qpu_jobs) == 2
    assert len({j.qpu for j in hybrid[0].qpu_jobs}) == 1


def test_events_are_published(orchestrator):
    import threading

    from qonductor_jupyter.client import get_client

    seen = []
    got_done = threading.Event()

    def on_event(ev):
        seen.append(ev)
        if ev.kind == "qpu" and ev.state == "done":
            got_done.set()

    sub = get_client().subscribe(on_event)
    try:
        image = qj.deploy(qj.create_workflow(PIPELINE))
        wid = qj.invoke(image, {"width": 1}, shots=100)
        qj.workflow_results(wid, timeout=120)
        assert got_done.wait(10)
        # The results reply can overtake the last events (the subscriber is another socket):
        # wait until every job whose events have arrived shows its end.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            mine = [e for e in seen if e.workflow_id == wid]
            if {e.job_id for e in mine} == {e.job_id for e in mine if e.state == "done"}:
                break
            time.sleep(0.05)
    finally:
        sub.close()
    states = [(e.kind, e.state) for e in seen if e.workflow_id == wid]
    assert ("qpu", "estimating") in states and ("qpu", "running") in states
    assert states[-1][1] == "done"


def test_function_list_form(orchestrator):
    from qiskit import QuantumCircuit

    def prepare(n):
        qc = QuantumCircuit(n)
        qc.x(range(n))
        qc.measure_all()
        return qc

    def decode(counts):
        return max(counts, key=counts.get)

    image = qj.deploy(qj.create_workflow([prepare, "sample", decode], name="listing"))
    assert qj.workflow_results(qj.invoke(image, {"n": 2}), timeout=120)["result"] == "11"


def test_cancel_reaches_every_child_job(orchestrator):
    cell = textwrap.dedent("""
        import time
        from qiskit import QuantumCircuit
        qc = QuantumCircuit(2)
        qc.h(0)
        qc.cx(0, 1)
        qc.measure_all()
        results = []
        for _ in range(100):
            time.sleep(0.2)
            results.append(sample(qc, shots=10))
    """)
    image = qj.deploy(qj.create_workflow(cell))
    wid = qj.invoke(image, {})
    import time

    time.sleep(3.0)
    qj.cancel(wid)
    assert qj.workflow_status(wid) == "cancelled"
    with pytest.raises(QonductorError, match="cancelled"):
        qj.workflow_results(wid, timeout=30)
    from qonductor_jupyter.api import workflow_info

    steps = workflow_info(wid).steps
    assert all(s.state in ("done", "cancelled") for s in steps)
    jobs = [j for s in steps for j in s.qpu_jobs]
    assert jobs and all(j.state in ("done", "cancelled") for j in jobs)
    assert len(jobs) < 100
    # The worker slot was given back: another workflow still runs.
    quick = qj.deploy(qj.create_workflow(PIPELINE))
    assert qj.workflow_results(qj.invoke(quick, {"width": 1}, shots=50), timeout=60)["n"] == 2


def test_workflow_is_persisted_before_it_is_acknowledged(orchestrator):
    import sqlite3
    from pathlib import Path

    image = qj.deploy(qj.create_workflow(PIPELINE))
    wid = qj.invoke(image, {"width": 1}, shots=20)
    db = sqlite3.connect(Path(orchestrator["home"]) / "state.db")
    row = db.execute("SELECT id, image_id FROM workflows WHERE id=?", (wid,)).fetchone()
    db.close()
    assert row == (wid, image)
    qj.workflow_results(wid, timeout=60)


def test_one_orchestrator_is_shared_by_every_kernel(orchestrator):
    import json
    import subprocess
    import sys

    code = (
        "import json; from qonductor_jupyter.client import start_server, server_status;"
        "start_server(); print(json.dumps(server_status()['pid']))"
    )
    pids = {
        json.loads(subprocess.check_output([sys.executable, "-c", code], timeout=60))
        for _ in range(2)
    }
    from qonductor_jupyter.client import server_status

    assert pids == {server_status()["pid"]}


def test_estimate_primitive_gives_expectation_values(shell):
    cell = textwrap.dedent("""
        from qiskit import QuantumCircuit
        bell = QuantumCircuit(2)
        bell.h(0)
        bell.cx(0, 1)
        zz, xx = estimate(bell, ["ZZ", "XX"], shots=2000)
    """)
    assert run(shell, cell, "--seed 5").error_in_exec is None
    assert shell.user_ns["zz"] > 0.8 and shell.user_ns["xx"] > 0.8


def test_timeout_keeps_the_workflow_and_says_how_to_get_it(shell):
    cell = (
        "import time\ntime.sleep(3)\nfrom qiskit import QuantumCircuit\nq = QuantumCircuit(1)\n"
        "q.measure_all()\nc = sample(q, shots=5)\n"
    )
    result = run(shell, cell, "--timeout 0.5")
    err = result.error_in_exec
    assert isinstance(err, QonductorError) and "workflow_results" in str(err)
    wid = str(err).split("Workflow ")[1].split()[0]
    assert_mostly_zero(qj.workflow_results(wid, timeout=60)["c"], 5)


def test_line_magic_server_status_and_lists(shell, capsys):
    shell.run_line_magic("qonductor", "server status")
    assert "orchestrator running" in capsys.readouterr().out
    devices = shell.run_line_magic("qonductor", "fleet")
    assert devices[0].name.startswith("fake_") and devices[0].num_qubits >= 5
    assert isinstance(shell.run_line_magic("qonductor", "workflows"), list)
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        shell.run_line_magic("qonductor", "frobnicate")


def test_deployment_config_restricts_the_qpus(shell):
    shell.user_ns["cfg"] = {"qpu": {"min_qubits": 30}}
    cell = (
        "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.h(0)\nq.cx(0, 1)\n"
        "q.measure_all()\nc = sample(q, shots=50)\n"
    )
    assert run(shell, cell, "--config cfg").error_in_exec is None
    from qonductor_jupyter.api import workflow_info

    steps = workflow_info(qj.list_workflows(limit=1)[0].id).steps
    qpus = {j.qpu for s in steps for j in s.qpu_jobs}
    big = {d.name for d in qj.fleet() if d.num_qubits >= 30}
    assert qpus and qpus <= big
    shell.user_ns["cfg"] = {"qpu": {"min_qubits": 5000}}
    err = run(shell, cell, "--config cfg").error_in_exec
    assert isinstance(err, QonductorError) and "no QPU satisfies" in str(err)
    shell.user_ns["cfg"] = {"qpu": {"min_qbits": 3}}
    err = run(shell, cell, "--config cfg").error_in_exec
    assert isinstance(err, QonductorError) and "unknown option" in str(err)


def test_badly_signed_messages_are_dropped_and_counted(orchestrator):
    import zmq

    from kernel_server.wire.envelope import Signer, encode
    from kernel_server.wire.messages import GetFleet, Shutdown
    from qonductor_jupyter.client import read_connection

    before = qj.api._ask(GetFleet()).dropped_messages
    info = read_connection()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(info.router)
    sock.send_multipart(encode(Shutdown(), Signer(b"not the key")))
    sock.send_multipart([b"just one frame"])
    assert not sock.poll(500)  # no reply, and above all no shutdown
    sock.close()
    after = qj.api._ask(GetFleet()).dropped_messages
    assert after == before + 2
    assert qj.list_workflows() is not None


def test_circuits_with_mid_circuit_measurement_run_on_aer(shell):
    cell = textwrap.dedent("""
        from qiskit import QuantumCircuit
        qc = QuantumCircuit(2, 3)
        qc.x(0)
        qc.measure(0, 0)  # mid-circuit: 1
        qc.reset(0)
        qc.x(1)
        qc.cx(1, 0)  # q0 was reset to 0, the CX flips it back to 1
        qc.measure([0, 1], [1, 2])
        counts = sample(qc, shots=200)
    """)
    # With the plan auto picks (REM is the one stack that takes mid-circuit measurements) ...
    assert run(shell, cell, "--seed 1").error_in_exec is None
    assert max(shell.user_ns["counts"], key=shell.user_ns["counts"].get) == "111"
    # ... and unmitigated, where Aer's method choice shows.
    assert run(shell, cell, "--seed 1 --plan off").error_in_exec is None
    assert max(shell.user_ns["counts"], key=shell.user_ns["counts"].get) == "111"
    from qonductor_jupyter.api import workflow_info

    steps = workflow_info(qj.list_workflows(limit=1)[0].id).steps
    methods = {j.method for s in steps for j in s.qpu_jobs}
    assert methods and all(m.startswith(("density_matrix", "statevector")) for m in methods)
    # Its plans offer only what can run mid-circuit measurements.
    plans = [p for s in steps for j in s.qpu_jobs for p in (j.plans or [])]
    assert plans and {p.mitigation for p in plans} <= {"none", "rem"}
