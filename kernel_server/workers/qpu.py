"""Tasks the orchestrator runs in its QPU worker processes: estimate a job per device, execute it.

Module-level functions with plain arguments, because they cross a process boundary. Circuits travel
as cloudpickle blobs; the heavy imports (qiskit, Aer, the fake provider) stay in these processes.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass
from typing import Any

import cloudpickle


@dataclass
class DeviceEstimate:
    device: str
    fidelity: float
    duration_s: float
    transpiled: bytes
    num_circuits: int
    seconds: float  # how long estimating took (transpilation dominates)


def device_catalogue(names: list[str]) -> list[dict[str, Any]]:
    from kernel_server.workers.devices import device_info

    return [device_info(n).to_dict() for n in names]


def estimate_on_device(circuits_blob: bytes, device: str, seed: int = 0) -> DeviceEstimate:
    """Transpile each circuit for the device; numerical fidelity (mean) and duration (sum)."""
    from kernel_server.estimator.numerical import numerical_estimate
    from kernel_server.workers.devices import load_backend

    t0 = time.perf_counter()
    backend = load_backend(device)
    circuits = cloudpickle.loads(circuits_blob)
    estimates = [numerical_estimate(c, backend, seed=seed) for c in circuits]
    fidelity = sum(e.fidelity for e in estimates) / len(estimates)
    duration = sum(e.duration_s for e in estimates)
    transpiled = cloudpickle.dumps([e.transpiled for e in estimates])
    return DeviceEstimate(
        device, fidelity, duration, transpiled, len(estimates), time.perf_counter() - t0
    )


@dataclass
class Execution:
    """What a QPU job returns: the counts (cloudpickled list, one dict per circuit) and how each
    circuit was simulated."""

    counts: bytes
    methods: list[str]


def execute_on_device(
    device: str, transpiled_blob: bytes, shots: int, seed: int | None
) -> Execution:
    """Run the transpiled circuits with the device's noise."""
    from kernel_server.workers.aer_sim import run_noisy_detailed
    from kernel_server.workers.devices import load_backend

    backend = load_backend(device)
    circuits = cloudpickle.loads(transpiled_blob)
    results, methods = [], []
    for i, circuit in enumerate(circuits):
        run = run_noisy_detailed(backend, circuit, shots, seed=None if seed is None else seed + i)
        results.append(dict(sorted(run.counts.items())))
        methods.append(run.method)
    return Execution(cloudpickle.dumps(results), methods)


def plan_step(circuits_blob: bytes, fleet: list[str], shots: int, k: int = 3) -> list[dict]:
    """Resource plans for a quantum step's first circuit over the fleet's templates.

    Advice shown with the results, not a condition for running: a circuit the estimator cannot
    take (a gate mitiq cannot convert, a model file missing) gives ``[{"error": ...}]`` and the
    job runs on the placement's choice regardless.
    """
    from kernel_server.estimator.plans import resource_plans, templates_for

    try:
        circuit = cloudpickle.loads(circuits_blob)[0]
        plans = resource_plans(circuit, k, backends=templates_for(fleet).values(), shots=shots)
    except Exception as exc:  # reported under the cell; the job itself goes on
        return [{"error": f"{type(exc).__name__}: {exc}"}]
    return [plan.to_dict() for plan in plans]


def warm_up(devices: list[str]) -> int:
    """Load the backends once per process so the first job does not pay for it."""
    from kernel_server.workers.devices import load_backend

    for d in devices:
        load_backend(d)
    try:  # the templates resource plans are made over (0.5-2 s for the default fleet)
        from kernel_server.estimator.plans import templates_for

        templates_for(devices)
    except Exception:  # plan_step reports the same failure where the user sees it
        pass
    # The fake backends are long-lived objects by the hundred thousand (~150k for fake_sherbrooke
    # and fake_kolkata): every full collection walked them again, a 0.12 s pause on ~10 ms jobs
    # (7 us once frozen). Collect first so the loading's garbage is not frozen with them.
    gc.collect()
    gc.freeze()
    return os.getpid()
