"""Statevector trajectories with the noise drawn here: each site's branches are its channel,
and the weighted, stratified mean is the exact noisy distribution."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from qiskit import QuantumCircuit
from qiskit.circuit.library import DiagonalGate
from qiskit.circuit.random import random_circuit
from qiskit.quantum_info import Kraus, SuperOp

from kernel_server.backends import aer_sim
from kernel_server.backends.compile import transpile_for
from kernel_server.backends.devices import load_backend
from kernel_server.backends.lazy_dm import LazyProgram, format_probabilities, plan_lazy, run_lazy
from kernel_server.backends.stratified import TrajectoryCircuits, noisy_sites, run_stratified
from kernel_server.backends.trajectories import _ideal_simulator, _with_readout


@pytest.fixture(scope="module")
def brisbane():
    # Qubits with T2 > T1 (amplitude damping, weighted jumps) and with T2 <= T1 (resets).
    return load_backend("fake_brisbane")


def _compact(circuit: QuantumCircuit, backend):
    transpiled = transpile_for(circuit, backend, seed=0)
    compact = aer_sim.compact_circuit(transpiled)
    program = plan_lazy(compact.circuit)
    assert isinstance(program, LazyProgram)
    return program, aer_sim.compact_noise(backend, compact.physical_qubits)


def _channel(program: LazyProgram, noise) -> np.ndarray:
    """The mean over every combination of events of the weighted trajectory circuits, as a
    superoperator (Aer's reset and the weight saved before it are the reset channel)."""
    sites = noisy_sites(program, noise)
    runner = TrajectoryCircuits(sites, sorted(program.measured), _ideal_simulator("CPU"))
    total = np.zeros((4**program.num_qubits,) * 2, dtype=complex)
    options = [[None, *range(len(site.events))] for site in sites.sites]
    for choice in itertools.product(*options):
        weight = sites.clean_weight
        events = []
        for site, k in zip(sites.sites, choice, strict=True):
            if k is None:
                weight *= 1.0 - site.probabilities.sum()
            else:
                weight *= site.probabilities[k] * site.factors[k] / site.none_factor
                events.append(site.events[k])
        instructions = runner.circuit(events)[0].data if events else runner.noisy.clean
        total += weight * _superop(instructions, program.num_qubits).data
    return total


def _superop(instructions, num_qubits: int) -> SuperOp:
    """The circuit's superoperator, its diagonals as Aer applies them: by their parameters
    (qiskit's own matrix of a DiagonalGate ignores parameters changed after it was built)."""
    total = SuperOp(np.eye(4**num_qubits))
    for instruction in instructions:
        operation = instruction.operation
        qargs = [q._index for q in instruction.qubits]
        if operation.name.startswith("save_"):
            continue
        if operation.name == "diagonal":
            step = SuperOp(Kraus([np.diag(np.asarray(operation.params, dtype=complex))]))
        else:
            step = SuperOp(operation)
        total = total.compose(step, qargs=qargs)
    return total


def _column_stacked(row_major: np.ndarray) -> np.ndarray:
    """A superoperator on row-major vec(rho) (the numpy engine's) as qiskit's SuperOp holds it."""
    d = int(round(np.sqrt(np.sqrt(row_major.size))))
    return row_major.reshape(d, d, d, d).transpose(1, 0, 3, 2).reshape(d * d, d * d)


def test_each_gates_branches_average_to_its_noise_channel(brisbane) -> None:
    # One gate at a time on qubits of both kinds: the weighted branches, placed as trajectories
    # place them, make the same channel as the numpy engine's superoperator of the gate and its
    # error (depolarizing, then relaxation of each qubit).
    t1_below_t2, t2_below_t1 = [], []
    for q in range(brisbane.num_qubits):
        props = brisbane.target.qubit_properties[q]
        (t1_below_t2 if props.t2 > props.t1 else t2_below_t1).append(q)
    for name in ("sx", "x", "ecr"):
        for physical in ([t1_below_t2[0]], [t2_below_t1[0]]) if name != "ecr" else [None]:
            circuit = QuantumCircuit(brisbane.num_qubits, 2)
            if name == "ecr":
                pair = next(
                    qargs
                    for qargs in brisbane.target["ecr"]
                    if (qargs[0] in t1_below_t2) != (qargs[1] in t1_below_t2)
                )
                circuit.ecr(*pair)
                circuit.measure(pair, [0, 1])
            else:
                getattr(circuit, name)(physical[0])
                circuit.measure(physical[0], 0)
            compact = aer_sim.compact_circuit(circuit)
            program = plan_lazy(compact.circuit)
            assert isinstance(program, LazyProgram)
            noise = aer_sim.compact_noise(brisbane, compact.physical_qubits)
            operation, qargs = program.ops[0]
            alone = QuantumCircuit(program.num_qubits)
            alone.append(operation, qargs)
            spec = noise.errors[(operation.name, qargs)]
            # The spec's superoperator is over the gate's qargs (qargs[0] the low bit).
            error = SuperOp(_column_stacked(spec.superop()))
            expected = SuperOp(alone).compose(error, qargs=list(qargs)).data
            assert np.allclose(_channel(program, noise), expected, atol=1e-12), (name, qargs)


def test_the_weighted_mean_is_the_exact_noisy_distribution(brisbane) -> None:
    # Relaxation five times stronger than the device's, so that jumps, resets, and trajectories
    # weighted far from 1 all happen; long enough for checkpoints (a trajectory starting from a
    # saved state). Readout is left out: it is applied to the mean afterwards, exactly.
    # One qubit left unmeasured: its weighted jumps change the trajectory's norm all the same.
    circuit = QuantumCircuit(5, 4)
    circuit.compose(random_circuit(5, 12, max_operands=2, seed=3), inplace=True)
    circuit.measure([0, 1, 2, 3], [0, 1, 2, 3])
    program, noise = _compact(circuit, brisbane)
    errors = {
        key: replace(spec, duration=5 * spec.duration) if spec.duration else spec
        for key, spec in noise.errors.items()
    }
    strong = replace(noise, errors=errors, readout={}, superops={}, simulators={})
    runner = TrajectoryCircuits(
        noisy_sites(program, strong), sorted(program.measured), _ideal_simulator("CPU")
    )
    assert runner.checkpoints and 0.01 < runner.noisy.clean_probability < 0.5
    exact_array, clbits = run_lazy(program, strong)
    exact = format_probabilities(exact_array, clbits, program)
    labels = sorted(program.measured)
    ours_clbits = [program.measured[q] for q in reversed(labels)]

    def ours(seed: int) -> dict[str, float]:
        run = run_stratified(
            program, strong, 5_000, np.random.default_rng(seed), _ideal_simulator("CPU"),
            bound=1.0, pilot=8, check=lambda done: None, learned=lambda n, s: None,
        )  # fmt: skip
        assert run is not None and np.isfinite(run.probabilities).all()
        return format_probabilities(
            _with_readout(run.probabilities, labels, strong), ours_clbits, program
        )

    def distance(a: dict[str, float], b: dict[str, float]) -> float:
        return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))

    first, second = ours(1), ours(2)
    # As close to the exact distribution as two independent estimates are to each other.
    assert distance(first, exact) < 1.5 * distance(first, second) + 0.005


def test_the_trajectory_simulator_keeps_a_weight_on_an_unmeasured_qubit() -> None:
    # Aer's truncation drops a qubit no saved outcome depends on, which is right for unitary
    # gates only: a jump on a routing ancilla after its last two-qubit gate weights the whole
    # trajectory (here by 1/4).
    circuit = QuantumCircuit(2)
    circuit.h(0)
    circuit.x(1)
    circuit.cx(1, 0)
    weight = DiagonalGate([1, 1])
    weight.params = [0.0, 0.5]
    circuit.append(weight, [1])
    circuit.save_probabilities([0])
    probabilities = _ideal_simulator("CPU").run(circuit, shots=1).result().data(0)["probabilities"]
    assert np.sum(probabilities) == pytest.approx(0.25)
