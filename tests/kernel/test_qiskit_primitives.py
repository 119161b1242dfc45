"""Qiskit's primitives on the real orchestrator (real ZeroMQ, Aer with the devices' noise):
results beside qiskit's StatevectorSampler/StatevectorEstimator, one QPU job per PUB, bad PUBs
refused as qiskit refuses them with nothing queued, Sessions, cancel, backends, and a
primitive's run inside a ``%%qonductor`` cell."""

import numpy as np
import pytest
from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.circuit import Parameter
from qiskit.primitives import (
    BackendSamplerV2,
    StatevectorEstimator,
    StatevectorSampler,
)
from qiskit.providers import JobStatus
from qiskit.quantum_info import SparsePauliOp
from qiskit.transpiler import generate_preset_pass_manager

import qonductor_jupyter as qj
from qonductor_jupyter.errors import WorkflowCancelled

pytestmark = pytest.mark.e2e

THETA = Parameter("theta")


def bell(measure=True):
    qc = QuantumCircuit(2)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(THETA, 0)
    if measure:
        qc.measure_all()
    return qc


def qpu_jobs(workflow_id):
    return [j for s in qj.workflow_info(workflow_id).steps for j in s.qpu_jobs]


def tvd(a, b, shots):
    return 0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) / shots


def test_sampler_sweep_is_one_qpu_job_with_qiskits_shapes_and_registers(orchestrator):
    q = QuantumRegister(2)
    alpha, beta = ClassicalRegister(1, "alpha"), ClassicalRegister(1, "beta")
    qc = QuantumCircuit(q, alpha, beta)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(THETA, 0)
    qc.measure(0, alpha)
    qc.measure(1, beta)
    values = np.linspace(0, np.pi, 6).reshape(2, 3, 1)
    job = qj.Sampler(options={"resilience_level": 0}).run([(qc, values)], shots=600)
    assert isinstance(job.job_id(), str) and job.job_id().startswith("wf-")
    result = job.result()
    reference = StatevectorSampler(seed=1).run([(qc, values)], shots=600).result()[0].data
    data = result[0].data
    assert sorted(data.keys()) == ["alpha", "beta"]
    for name in ("alpha", "beta"):
        assert getattr(data, name).shape == getattr(reference, name).shape == (2, 3)
        assert getattr(data, name).num_shots == 600
        for index in np.ndindex(2, 3):
            ours, theirs = (
                getattr(data, name).get_counts(index),
                getattr(reference, name).get_counts(index),
            )
            assert tvd(ours, theirs, 600) < 0.15, (name, index, ours, theirs)
    (qpu_job,) = qpu_jobs(job.job_id())
    assert qpu_job.num_circuits == 6 and qpu_job.mitigation == "none"
    metadata = result[0].metadata
    assert metadata["qpu"] == qpu_job.qpu and metadata["shots"] == 600
    assert metadata["mitigation"] == "none" and 0 < metadata["estimated_fidelity"] <= 1
    assert metadata["queue_s"] >= 0 and metadata["run_s"] > 0
    assert job.status() is JobStatus.DONE and job.done() and not job.running()


def test_estimator_pub_is_one_qpu_job_and_agrees_with_statevector_estimator(orchestrator):
    observables = [
        [SparsePauliOp.from_list([("ZZ", 1), ("ZX", -1), ("XZ", 1), ("XX", 1)])],
        [SparsePauliOp.from_list([("ZZ", 1), ("ZX", 1), ("XZ", -1), ("XX", 1)])],
    ]
    values = np.linspace(0, 2 * np.pi, 7).reshape(-1, 1)
    estimator = qj.Estimator(options={"resilience_level": 0, "default_precision": 0.04})
    job = estimator.run([(bell(False), observables, values)])
    result = job.result()[0]
    exact = StatevectorEstimator().run([(bell(False), observables, values)]).result()[0].data
    assert result.data.evs.shape == result.data.stds.shape == exact.evs.shape == (2, 7)
    # The device's noise shrinks the values a little; never beyond shot noise plus that.
    assert np.all(np.abs(result.data.evs - exact.evs) < 5 * result.data.stds + 0.25)
    (qpu_job,) = qpu_jobs(job.job_id())
    assert qpu_job.num_circuits == 4 * 7  # four measurement bases, seven parameter sets
    assert result.metadata["shots"] == 625 and result.metadata["target_precision"] == 0.04


def test_several_pubs_are_several_qpu_jobs_in_one_workflow(orchestrator):
    circuit = bell().assign_parameters([0.3])
    job = qj.Sampler(options={"resilience_level": 0}).run([circuit, (circuit, None, 100)])
    first, second = job.result()
    assert first.data.meas.num_shots == 4096 and second.data.meas.num_shots == 100
    assert len(qpu_jobs(job.job_id())) == 2


def workflow_count():
    return len(qj.list_workflows())


def refusal(run):
    try:
        run()
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize(
    "case",
    ["unbound parameters", "too few values", "shots zero", "not broadcastable", "observable width"],
)
def test_bad_pubs_are_refused_with_qiskits_errors_and_nothing_is_queued(orchestrator, case):
    measured, unmeasured = bell(), bell(False)
    two = bell()
    two.rz(Parameter("phi"), 1)
    sampler_cases = {
        "unbound parameters": ([measured], {}),
        "too few values": ([(two, [1.0])], {}),
        "shots zero": ([(measured, [1.0])], {"shots": 0}),
    }
    estimator_cases = {
        "not broadcastable": ([(unmeasured, ["ZZ", "XX", "YY"], np.zeros((2, 1)))], {}),
        "observable width": ([(unmeasured, "ZZZ", [1.0])], {}),
    }
    before = workflow_count()
    if case in sampler_cases:
        pubs, kwargs = sampler_cases[case]
        ours = refusal(lambda: qj.Sampler().run(pubs, **kwargs))
        theirs = refusal(lambda: StatevectorSampler().run(pubs, **kwargs))
    else:
        pubs, kwargs = estimator_cases[case]
        ours = refusal(lambda: qj.Estimator().run(pubs, **kwargs))
        theirs = refusal(lambda: StatevectorEstimator().run(pubs, **kwargs))
    assert ours is not None and ours == theirs
    assert workflow_count() == before


def test_precision_zero_and_an_isa_circuit_that_does_not_fit_are_refused(orchestrator):
    before = workflow_count()
    with pytest.raises(ValueError, match="strictly greater than 0"):
        qj.Estimator().run([(bell(False), "ZZ", [1.0])], precision=0)
    kolkata = qj.backend("fake_kolkata")
    isa = generate_preset_pass_manager(optimization_level=1, backend=kolkata).run(bell())
    # Qubits 0 and 2 share no coupler on Falcon's heavy-hex map.
    wrong = QuantumCircuit(isa.num_qubits, isa.num_clbits)
    wrong.ecr(0, 2) if "ecr" in kolkata.target.operation_names else wrong.cx(0, 2)
    wrong.measure(0, 0)
    wrong._layout = isa.layout
    with pytest.raises(ValueError, match=r"on qubits \(0, 2\) is not supported"):
        qj.Sampler(mode=kolkata).run([wrong])
    assert workflow_count() == before


def test_isa_circuit_keeps_its_layout_and_observables_follow_it(orchestrator):
    kolkata = qj.backend("fake_kolkata")
    assert kolkata.num_qubits == 27 and kolkata.members == ("fake_kolkata",)
    isa = generate_preset_pass_manager(optimization_level=2, backend=kolkata).run(bell(False))
    observable = SparsePauliOp("ZZ").apply_layout(isa.layout)
    estimator = qj.Estimator(mode=kolkata, options={"resilience_level": 0})
    result = estimator.run([(isa, observable, [0.0])], precision=0.05).result()[0]
    assert result.metadata["qpu"] == "fake_kolkata"
    assert result.data.evs > 0.75  # <ZZ> of a Bell state is 1; it only survives on the layout


def test_backend_run_and_qiskits_backend_sampler_run_on_the_fleet(orchestrator):
    device = qj.backend("fake_auckland")
    isa = generate_preset_pass_manager(optimization_level=2, backend=device).run(
        bell().assign_parameters([0.0])
    )
    counts = device.run([isa], shots=300).result().get_counts(0)
    assert sum(counts.values()) == 300 and counts.get("00", 0) + counts.get("11", 0) > 240
    sampler = BackendSamplerV2(backend=device)
    data = sampler.run([isa], shots=200).result()[0].data
    assert data.meas.num_shots == 200 and data.meas.get_counts().get("11", 0) > 60


def test_a_session_loop_stays_on_one_qpu(orchestrator):
    with qj.Session() as session:
        estimator = qj.Estimator(mode=session, options={"resilience_level": 0})
        runs = [
            estimator.run([(bell(False), "ZZ", [0.2 * i])], precision=0.1).result()[0]
            for i in range(4)
        ]
    assert len({r.metadata["qpu"] for r in runs}) == 1
    assert {r.metadata["session_id"] for r in runs} == {session.session_id}
    with pytest.raises(RuntimeError, match="closed"):
        estimator.run([(bell(False), "ZZ", [0.0])])


def test_a_template_mode_runs_on_one_of_its_members(orchestrator):
    estimator = qj.Estimator(mode="Falcon-27", options={"resilience_level": 0})
    result = estimator.run([(bell(False), "ZZ", [0.0])], precision=0.1).result()[0]
    assert result.metadata["qpu"] in ("fake_kolkata", "fake_auckland")


def test_resilience_level_one_runs_with_readout_mitigation(orchestrator):
    sampler = qj.Sampler(options={"resilience_level": 1, "default_shots": 400})
    job = sampler.run([bell().assign_parameters([0.0])])
    result = job.result()[0]
    assert result.metadata["mitigation"] == "rem"
    assert {j.mitigation for j in qpu_jobs(job.job_id())} == {"rem"}
    counts = result.data.meas.get_counts()
    assert sum(counts.values()) == 400 and counts.get("00", 0) + counts.get("11", 0) > 360


def test_a_primitive_job_can_be_cancelled(orchestrator):
    big = QuantumCircuit(6)
    for layer in range(30):
        for q in range(6):
            big.rx(0.1 * (layer + q), q)
        for q in range(5):
            big.cx(q, q + 1)
    big.measure_all()
    job = qj.Sampler(options={"resilience_level": 2}).run([big], shots=20000)
    assert job.cancel() is True
    with pytest.raises(WorkflowCancelled):
        job.result(timeout=60)
    assert job.status() is JobStatus.CANCELLED and job.cancelled() and job.in_final_state()
    assert job.cancel() is False


def test_a_primitive_run_inside_a_cell_is_a_quantum_step(shell, capsys):
    shell.user_ns["qc"] = bell().assign_parameters([0.0])
    cell = (
        "from qonductor_jupyter import Sampler\n"
        "sampler = Sampler(options={'resilience_level': 0})\n"
        "job = sampler.run([qc], shots=300)\n"
        "counts = job.result()[0].data.meas.get_counts()\n"
        "qpu = job.result()[0].metadata['qpu']\n"
    )
    result = shell.run_cell("%%qonductor --seed 2\n" + cell)
    assert result.error_in_exec is None, result.error_in_exec
    assert sum(shell.user_ns["counts"].values()) == 300
    assert shell.user_ns["qpu"].startswith("fake_")
    text = capsys.readouterr().out
    assert "quantum" in text and shell.user_ns["qpu"] in text
