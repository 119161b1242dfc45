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


def three_qpu_workload(
    n: int,
    seed: int,
    fidelity_means: tuple[float, float, float],
    fidelity_noise: float,
    runtime_s: tuple[float, float],
    runtime_spread: float = 0.0,
):
    """n jobs in 10 minutes on 3 QPUs ("best", "good", "ok"): QPU 0 is the best and everyone's
    favourite. Runtimes are uniform in ``runtime_s`` per job, times a per-QPU factor within
    ``runtime_spread`` of 1 (0: the same on every QPU)."""
    import numpy as np

    from kernel_server.simulation.workload import SimQPU, Workload

    rng = np.random.default_rng(seed)
    qpus = [SimQPU("best", 127, "Eagle"), SimQPU("good", 27, "Falcon"), SimQPU("ok", 27, "Falcon")]
    fid = np.array(fidelity_means)[None, :] + rng.normal(0, fidelity_noise, (n, 3))
    arrival_s = np.sort(rng.uniform(0, 600, n))
    qubits = rng.integers(2, 20, n)
    base = rng.uniform(*runtime_s, (n, 1))
    spread = rng.uniform(1 - runtime_spread, 1 + runtime_spread, (n, 3)) if runtime_spread else 1.0
    return Workload(
        qpus=qpus,
        arrival_s=arrival_s,
        qubits=qubits,
        shots=np.full(n, 4000),
        circuit=["c"] * n,
        stack=["none"] * n,
        fidelity=np.clip(fid, 0, 1),
        quantum_s=base * spread * np.ones((1, 3)),
        classical_s=np.zeros(n),
    )


def ghz(n: int):
    """An n-qubit GHZ circuit, measured."""
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(n)
    qc.h(0)
    for q in range(n - 1):
        qc.cx(q, q + 1)
    qc.measure_all()
    return qc


def total_variation(counts: dict[str, int], exact: dict[str, float]) -> float:
    """Total variation distance between sampled counts and a distribution."""
    shots = sum(counts.values())
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(k, 0) / shots - exact.get(k, 0.0)) for k in keys)


def sampling_floor(exact: dict[str, float], shots: int) -> float:
    """Mean total variation of exact multinomial samples of ``shots`` (the sampling floor)."""
    import numpy as np

    keys = list(exact)
    probabilities = np.array([exact[k] for k in keys])
    rng = np.random.default_rng(0)
    draws = [rng.multinomial(shots, probabilities / probabilities.sum()) for _ in range(5)]
    return float(
        np.mean([total_variation(dict(zip(keys, d.tolist(), strict=True)), exact) for d in draws])
    )


def compact_program(circuit, backend):
    """(transpiled, the numpy engine's program, compact noise) of ``circuit`` on ``backend``."""
    from kernel_server.backends import aer_sim
    from kernel_server.backends.compile import transpile_for
    from kernel_server.backends.lazy_dm import LazyProgram, plan_lazy

    transpiled = transpile_for(circuit, backend, seed=0)
    compact = aer_sim.compact_circuit(transpiled)
    program = plan_lazy(compact.circuit)
    assert isinstance(program, LazyProgram)
    return transpiled, program, aer_sim.compact_noise(backend, compact.physical_qubits)
