"""PUBs as QPU jobs without an orchestrator: the circuits one PUB asks for and its result from
their counts, checked against qiskit's StatevectorSampler/StatevectorEstimator on the same PUBs
(the counts come from exact noiseless sampling of the job's own circuits); options mapped to
stacks; the splitter's view of executors."""

import numpy as np
import pytest
from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.circuit import Parameter
from qiskit.primitives import StatevectorEstimator, StatevectorSampler
from qiskit.primitives.containers.estimator_pub import EstimatorPub
from qiskit.primitives.containers.sampler_pub import SamplerPub
from qiskit.quantum_info import SparsePauliOp, Statevector

from kernel_server.core import pubs
from qonductor_jupyter.qiskit_primitives.options import EstimatorOptions, SamplerOptions
from qonductor_jupyter.splitter import NotebookContext, split_cell


def exact_counts(job, seed=0):
    """Counts of every circuit x row of a PubJob, sampled from the exact noiseless state."""
    rng = np.random.default_rng(seed)
    out = []
    for template in job.templates:
        for row in job.parameter_values:
            bound = template.assign_parameters(row) if template.num_parameters else template
            unmeasured = bound.remove_final_measurements(inplace=False)
            probabilities = Statevector(unmeasured).probabilities_dict()
            keys = list(probabilities)
            draws = rng.multinomial(job.shots, [probabilities[k] for k in keys])
            # Map qubit outcomes to clbits as the circuit's measurements do.
            measured = {}
            for instruction in bound.data:
                if instruction.operation.name == "measure":
                    measured[bound.find_bit(instruction.clbits[0]).index] = bound.find_bit(
                        instruction.qubits[0]
                    ).index
            counts = {}
            for key, n in zip(keys, draws, strict=True):
                if not n:
                    continue
                memory = ["0"] * bound.num_clbits
                for clbit, qubit in measured.items():
                    memory[bound.num_clbits - 1 - clbit] = key[len(key) - 1 - qubit]
                text = "".join(memory)
                counts[text] = counts.get(text, 0) + int(n)
            out.append(counts)
    return out


def two_register_circuit():
    a, b = Parameter("a"), Parameter("b")
    q = QuantumRegister(3)
    alpha, beta = ClassicalRegister(2, "alpha"), ClassicalRegister(1, "beta")
    qc = QuantumCircuit(q, alpha, beta)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(a, 0)
    qc.rz(b, 2)
    qc.h(2)
    qc.measure([0, 1], alpha)
    qc.measure([2], beta)
    return qc


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
def test_sampler_result_has_qiskits_shape_registers_and_distribution(shape):
    qc = two_register_circuit()
    values = np.random.default_rng(1).uniform(0, 3, (*shape, 2))
    pub = SamplerPub.coerce((qc, values), 2000)
    job = pubs.sampler_job(pub)
    assert len(job.templates) == 1 and job.rows == max(int(np.prod(shape)), 1)
    ours = pubs.sampler_data(pub, exact_counts(job), np.random.default_rng(0))
    theirs = StatevectorSampler(seed=3).run([(qc, values)], shots=2000).result()[0].data
    assert sorted(ours.keys()) == sorted(theirs.keys()) == ["alpha", "beta"]
    for name in ("alpha", "beta"):
        mine, ref = getattr(ours, name), getattr(theirs, name)
        assert mine.shape == ref.shape and mine.num_bits == ref.num_bits
        assert mine.num_shots == ref.num_shots == 2000
        for index in np.ndindex(shape):
            a, b = mine.get_counts(index), ref.get_counts(index)
            tvd = 0.5 * sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) / 2000
            assert tvd < 0.06, (index, a, b)


def test_sampler_shots_are_in_random_order_not_grouped():
    qc = QuantumCircuit(1)
    qc.h(0)
    qc.measure_all()
    pub = SamplerPub.coerce(qc, 1000)
    data = pubs.sampler_data(pub, [{"0": 500, "1": 500}], np.random.default_rng(0))
    bits = data.meas.array[:, 0]
    assert sorted(bits.tolist()) == [0] * 500 + [1] * 500
    assert 300 < int(np.sum(bits[:-1] != bits[1:])) < 700  # grouped counts would switch once


def test_sampler_refuses_counts_of_the_wrong_total():
    qc = QuantumCircuit(1)
    qc.measure_all()
    with pytest.raises(ValueError, match="returned 10 shots"):
        pubs.sampler_data(SamplerPub.coerce(qc, 20), [{"0": 10}], np.random.default_rng(0))


def estimator_case():
    a, b = Parameter("a"), Parameter("b")
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(a, 0)
    qc.rx(b, 2)
    qc.cx(1, 2)
    observables = [
        [SparsePauliOp.from_list([("ZZI", 1), ("XXI", -0.5), ("IYY", 0.3), ("III", 0.2)])],
        [SparsePauliOp("XIZ")],
    ]
    values = np.random.default_rng(1).uniform(0, 3, (1, 6, 2))
    return qc, observables, values


def test_estimator_groups_every_term_once_and_binds_every_row():
    qc, observables, values = estimator_case()
    pub = EstimatorPub.coerce((qc, observables, values), 0.02)
    job = pubs.estimator_job(pub, pubs.precision_shots(0.02))
    labels = sorted(label for group in job.groups for label in group.labels)
    assert labels == ["IYY", "XIZ", "XXI", "ZZI"]  # the identity needs no circuit
    assert len(job.templates) == 3 and job.rows == 6 and job.num_circuits == 18
    assert job.shots == 2500


def test_estimator_values_and_errors_match_statevector_estimator():
    qc, observables, values = estimator_case()
    pub = EstimatorPub.coerce((qc, observables, values), 0.02)
    job = pubs.estimator_job(pub, pubs.precision_shots(0.02))
    ours = pubs.estimator_data(pub, job, exact_counts(job, seed=4))
    exact = StatevectorEstimator().run([(qc, observables, values)]).result()[0].data
    assert ours.evs.shape == exact.evs.shape == ours.stds.shape == (2, 6)
    assert np.all(ours.stds > 0) and np.all(ours.stds < 0.05)
    assert np.all(np.abs(ours.evs - exact.evs) < 4 * ours.stds)


def test_estimator_standard_error_is_the_sampling_spread():
    qc = QuantumCircuit(2)
    qc.ry(0.7, 0)
    qc.cx(0, 1)
    observable = SparsePauliOp.from_list([("ZZ", 1.0), ("ZI", 0.5), ("XX", 0.25)])
    pub = EstimatorPub.coerce((qc, observable), 0.05)
    job = pubs.estimator_job(pub, pubs.precision_shots(0.05))
    draws = [pubs.estimator_data(pub, job, exact_counts(job, seed=s)) for s in range(200)]
    spread = np.std([float(d.evs) for d in draws])
    mean_std = np.mean([float(d.stds) for d in draws])
    assert abs(spread / mean_std - 1) < 0.15


def test_identity_only_observable_needs_no_circuit():
    qc = QuantumCircuit(2)
    pub = EstimatorPub.coerce((qc, SparsePauliOp("II", 2.5)), 0.1)
    job = pubs.estimator_job(pub, 100)
    assert job.templates == []
    data = pubs.estimator_data(pub, job, [])
    assert float(data.evs) == 2.5 and float(data.stds) == 0.0


# ------------------------------------------------------------------------------ options
@pytest.mark.parametrize(
    "options, stacks",
    [
        ({}, ()),
        ({"resilience_level": 0}, ("none",)),
        ({"resilience_level": 1}, ("rem",)),
        ({"resilience_level": 2}, ("zne+rem",)),
        ({"dynamical_decoupling": {"enable": True}}, ("dd",)),
        ({"twirling": {"enable_gates": True}}, ("twirl",)),
        (
            {
                "resilience_level": 2,
                "twirling": {"enable_gates": True},
                "dynamical_decoupling": {"enable": True},
            },  # noqa: E501
            ("twirl+zne+rem+dd",),
        ),
        ({"resilience_level": 1, "dynamical_decoupling": {"enable": True}}, ("rem+dd",)),
    ],
)
def test_runtime_options_name_the_stacks_plans_may_use(options, stacks):
    from kernel_server.estimator.mitigation import parse_stack

    made = EstimatorOptions()
    made.update(options)
    assert made.stacks() == stacks
    for stack in stacks:
        parse_stack(stack)  # a stack the estimator knows


def test_options_read_and_set_like_runtimes():
    options = SamplerOptions()
    options.default_shots = 1000
    options.dynamical_decoupling.enable = True
    options.simulator.seed_simulator = 5
    assert options.run_options() == {"priority": "balanced", "plan": "auto", "seed": 5}
    assert options.stacks() == ("dd",)


@pytest.mark.parametrize(
    "change, error, words",
    [
        ({"resilience_level": 3}, ValueError, "resilience_level must be 0, 1, 2"),
        ({"default_shots": 0}, ValueError, "default_shots must be a positive"),
        ({"priority": "fast"}, ValueError, "fidelity, balanced, jct"),
        ({"plan": "maybe"}, ValueError, "plan must be 'auto', 'off'"),
        ({"optimization_level": 1}, AttributeError, "valid options: .*default_shots"),
        ({"twirling": {"enable_measure": True}}, AttributeError, "valid options: enable_gates"),
        ({"dynamical_decoupling": {"enable": "yes"}}, TypeError, "True or False"),
    ],
)
def test_unknown_options_and_values_are_refused_naming_the_valid_ones(change, error, words):
    options = SamplerOptions()
    with pytest.raises(error, match=words):
        options.update(change)


def test_estimator_precision_must_be_positive():
    with pytest.raises(ValueError, match="default_precision must be a number > 0"):
        EstimatorOptions().update(default_precision=0)


# ------------------------------------------------------------------------------ splitter
def kinds(source, context=None):
    graph = split_cell(source, context or NotebookContext())
    return [step.kind.value for step in graph.steps]


def test_an_executors_run_is_a_quantum_call():
    cell = (
        "from qonductor_jupyter import Sampler\n"
        "sampler = Sampler()\n"
        "job = sampler.run([qc])\n"
        "counts = job.result()[0].data.meas.get_counts()\n"
    )
    assert kinds(cell) == ["classical", "quantum", "classical"]


def test_a_loop_over_an_executor_is_a_hybrid_step():
    cell = (
        "import qonductor_jupyter as qj\n"
        "estimator = qj.Estimator(mode=qj.Session())\n"
        "def cost(x):\n"
        "    return estimator.run([(ansatz, H, x)]).result()[0].data.evs\n"
        "result = minimize(cost, x0)\n"
    )
    assert kinds(cell)[-1] == "hybrid"


def test_a_notebook_executor_is_known_by_its_value():
    from qonductor_jupyter.notebook_names import notebook_context
    from qonductor_jupyter.qiskit_primitives import Estimator, Sampler

    namespace = {"est": Estimator(), "Sampler": Sampler}
    cell = "values = est.run([(qc, 'ZZ')]).result()\ns = Sampler()\njob = s.run([qc])\n"
    context = notebook_context(cell, namespace)
    assert "est" in context.modules and "Sampler" in context.factories
    assert kinds(cell, context) == ["quantum", "classical", "quantum"]
