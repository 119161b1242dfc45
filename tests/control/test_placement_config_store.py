"""Pure parts: placement baselines, configuration checks, the SQLite store and registry."""

import json

import msgspec
import pytest
from test_machine import PLANS

from kernel_server.control.registry import Registry, UnknownImage
from kernel_server.control.store import Store
from kernel_server.core.deployment import (
    ConfigError,
    DeploymentConfig,
    QpuRequirements,
    RunOptions,
    load_config,
    run_options,
    stored_options,
    validate_config,
)
from kernel_server.core.graph import WorkflowGraph
from kernel_server.core.jobs import JobState, WorkflowRun, WorkflowState
from kernel_server.core.status import PlanError
from kernel_server.scheduler.placement import Candidate, NoCandidate, place

CANDS = [Candidate("a", 0.90, 30.0), Candidate("b", 0.89, 1.0), Candidate("c", 0.70, 0.0)]


def test_highest_fidelity_ignores_queues():
    assert place(CANDS, "highest-fidelity").qpu == "a"


def test_tolerance_trades_a_little_fidelity_for_the_queue():
    assert place(CANDS, "fidelity-tolerance", "balanced").qpu == "b"
    assert place(CANDS, "fidelity-tolerance", "fidelity").qpu == "a"
    assert place(CANDS, "least-busy").qpu == "c"


def test_placement_errors():
    with pytest.raises(NoCandidate):
        place([], "highest-fidelity")
    with pytest.raises(ValueError, match="unknown placement policy"):
        place(CANDS, "magic")


def test_config_validation():
    layer = validate_config({"qpu": {"min_qubits": 20}, "shots": 100})
    assert layer == DeploymentConfig(qpu=QpuRequirements(min_qubits=20), shots=100)
    assert layer.as_builtins() == {"qpu": {"min_qubits": 20}, "shots": 100}  # only what is set
    # An invocation's layer over a deployment's: what it sets wins, a section as a whole.
    invoked = validate_config({"shots": 7, "qpu": {"families": ["Eagle"]}})
    merged = invoked.over(layer)
    assert merged == DeploymentConfig(qpu=QpuRequirements(families=("Eagle",)), shots=7)
    # A checked layer checks again as itself (the orchestrator checks what the wire typed).
    assert load_config(merged) == merged
    assert merged.as_builtins() == {"qpu": {"families": ["Eagle"]}, "shots": 7}
    assert run_options(merged).priority == "balanced"  # defaulted where no layer sets it
    with pytest.raises(ConfigError, match="unknown option 'shot'"):
        validate_config({"shot": 100})
    with pytest.raises(ConfigError, match="qpu.'min_qbits'"):
        validate_config({"qpu": {"min_qbits": 3}})
    with pytest.raises(ConfigError, match="priority"):
        validate_config({"priority": "fast"})
    with pytest.raises(ConfigError, match="must be int"):
        validate_config({"shots": "many"})


def _graph():
    step = {
        "id": 0,
        "kind": "classical",
        "source": "x = 1\n",
        "lineno": 1,
        "end_lineno": 1,
        "reads": [],
        "writes": ["x"],
        "producers": {},
    }
    graph = {"steps": [step], "edges": [], "inputs": [], "outputs": {"x": 0}, "source": "x = 1\n"}
    return WorkflowGraph.from_dict(graph)


def test_store_persists_and_recovers_workflows(tmp_path):
    path = tmp_path / "state.db"
    store = Store(path)
    run = WorkflowRun.new("wf-1", "img-1", _graph())
    assert store.insert_workflow(run, "demo", run_options({"shots": 10}), {"a": b"blob"})
    # A resent request is not a new run.
    assert not store.insert_workflow(run, "demo", RunOptions(), {})
    run.start()
    run.steps[0].transition(JobState.QUEUED)
    store.save_job(run.steps[0])
    store.update_workflow(run)
    store.add_event(1.0, "wf-1", "wf-1.s0", "classical", "queued", "")
    store.close()

    again = Store(path)
    assert again.unfinished_workflow_ids() == ["wf-1"]
    loaded = again.load_run("wf-1")
    assert loaded.state is WorkflowState.RUNNING
    assert loaded.steps[0].state is JobState.QUEUED
    assert again.workflow_inputs("wf-1") == {"a": b"blob"}
    row = again.workflow_row("wf-1")
    assert row is not None and row.options.shots == 10
    assert again.events("wf-1")[0].state == "queued"
    assert (path.stat().st_mode & 0o777) == 0o600


def test_registry_dedupes_and_deploys(tmp_path):
    reg = Registry(tmp_path)
    five = validate_config({"shots": 5})
    a = reg.create(_graph(), five, "one", {})
    again = reg.create(_graph(), five, "one", {})
    assert a.id == again.id and len(reg.list()) == 1
    # The same cell without --name is an image of its own: it does not carry the earlier name.
    unnamed = reg.create(_graph(), five, None, {})
    assert unnamed.id != a.id and unnamed.name != "one" and len(reg.list()) == 2
    deployed = reg.deploy(a.id, validate_config({"priority": "jct"})).deployed
    assert deployed == DeploymentConfig(shots=5, priority="jct")
    assert reg.get(a.id).deployed == deployed  # image.json keeps it
    with pytest.raises(UnknownImage):
        reg.get("img-nope")
    with pytest.raises(ConfigError, match="shots must be"):  # the wire types it, not its value
        reg.create(_graph(), DeploymentConfig(shots=0), None, {})


def test_unknown_placement_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown placement policy 'magic'"):
        validate_config({"placement": "magic"})
    assert validate_config({"placement": "least-busy"}).placement == "least-busy"


def test_store_keeps_plans_and_migrates_older_databases(tmp_path):
    import sqlite3

    from kernel_server.core.jobs import JobRecord

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)  # the jobs table as the first release made it: no plans column
    old.execute(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, workflow_id TEXT, step_id INTEGER, kind TEXT, "
        "state TEXT, qpu TEXT, est_fidelity REAL, est_duration_s REAL, shots INTEGER, "
        "num_circuits INTEGER, parent TEXT, created_at REAL, queued_at REAL, started_at REAL, "
        "finished_at REAL, error TEXT, method TEXT)"
    )
    old.execute("INSERT INTO jobs (id, workflow_id, kind, state) VALUES ('j0', 'w', 'qpu', 'done')")
    old.commit()
    old.close()
    store = Store(path)
    store.save_job(JobRecord(id="j1", workflow_id="w", kind="qpu", plans=PLANS))
    error = PlanError(error="QiskitError: no model")
    store.save_job(JobRecord(id="j2", workflow_id="w", kind="qpu", plans=error))
    store.save_job(JobRecord(id="j3", workflow_id="w", kind="qpu", plans=PLANS[:1]))
    store.save_job(JobRecord(id="j4", workflow_id="w", kind="qpu", awaiting_choice=True))
    # Rows of the version that kept plans as dicts: the error sentinel, a plan with its marks.
    old_plan = {**msgspec.to_builtins(PLANS[0]), "chosen": True, "number": 0}
    for job_id, text in (("j2", [{"error": "QiskitError: no model"}]), ("j3", [old_plan])):
        store._exec("UPDATE jobs SET plans=? WHERE id=?", (json.dumps(text), job_id))
    by_id = {j.id: j for j in store.jobs("w")}
    assert by_id["j0"].plans is None and by_id["j0"].state is JobState.DONE
    assert by_id["j1"].plans == PLANS and not by_id["j1"].awaiting_choice
    assert by_id["j2"].plans == error
    assert by_id["j3"].plans == [msgspec.structs.replace(PLANS[0], chosen=True)]
    assert by_id["j4"].awaiting_choice


def test_run_options_are_defaulted_once_and_survive_the_store(tmp_path):
    options = run_options({"shots": 10, "qpu": {"families": ["Eagle"]}, "plan": "2"})
    assert (options.shots, options.qpu.families, options.plan, options.priority) == (
        10,
        ("Eagle",),
        2,
        "balanced",
    )
    store = Store(tmp_path / "state.db")
    run = WorkflowRun.new("wf-2", "img-1", _graph())
    assert store.insert_workflow(run, "demo", options, {})
    row = store.workflow_row("wf-2")
    assert row is not None and row.options == options
    # A row an older orchestrator wrote (the config as given) decodes with the defaults.
    assert stored_options('{"priority": "jct"}') == RunOptions(priority="jct")
    with pytest.raises(ConfigError, match="shots must be at most 1000000, got 2000000"):
        run_options({"shots": 2_000_000})
    with pytest.raises(ConfigError, match="invalid option"):
        run_options({"qpu": {"families": [3]}})
