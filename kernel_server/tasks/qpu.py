"""Tasks the orchestrator runs in its QPU worker processes: estimate a job per device, execute it.

Module-level functions with plain arguments, because they cross a process boundary. A step's
circuits arrive as QPY (``wire.circuits.dump_circuits``: data, never code, since these processes
serve every user); what these processes make themselves (transpiled circuits, counts) travels as
cloudpickle. The heavy imports (qiskit, Aer, the fake provider) stay in these processes.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass
from typing import Any

import cloudpickle

from kernel_server.core.circuits import DEFAULT_SHOTS
from kernel_server.core.plans import PLAN_LIMIT  # what --plan N picks from
from kernel_server.core.status import DeviceInfo, PlanError, Plans
from kernel_server.wire.circuits import load_circuits


@dataclass
class DeviceEstimate:
    device: str
    fidelity: float
    duration_s: float  # one shot of every circuit: the critical paths, summed
    transpiled: bytes
    num_circuits: int
    seconds: float  # how long estimating took (transpilation dominates)
    # Seconds the job holds the device, in what its queue measures (``job_run_seconds``), at the
    # scheduler's quantile; None where nothing predicts it (the QPU's mean job stands in).
    run_s: float | None = None


def describe_backend(name: str, fleet: list[str]) -> tuple[str, str, int, list[str], bytes]:
    """(name, kind, width, member QPUs, cloudpickled Target) of a fleet device or template
    (by its name, "Falcon-27", or its backend's, "template_falcon_27"); ValueError naming the
    valid ones otherwise."""
    from kernel_server.backends.devices import load_backend

    if name in fleet:
        backend = load_backend(name)
        return name, "device", backend.num_qubits, [name], cloudpickle.dumps(backend.target)
    from kernel_server.estimator.plans import templates_for

    templates = templates_for(fleet)
    for template in templates.values():
        if name in (template.name, template.as_backend().name):
            return (
                template.name,
                "template",
                template.num_qubits,
                list(template.members),
                cloudpickle.dumps(template.target),
            )
    raise ValueError(
        f"no device or template {name!r} in the fleet; devices: {', '.join(fleet)}; "
        f"templates: {', '.join(templates)}"
    )


def device_catalogue(names: list[str]) -> list[DeviceInfo]:
    from kernel_server.backends.devices import device_info

    return [device_info(n) for n in names]


MITIGATION_TAG = "qonductor_mitigation"  # set by qonductor_jupyter.lib.classical on its circuits


def _mitigated_by_hand(circuits: list[Any]) -> bool:
    return bool(circuits) and all(
        MITIGATION_TAG in (getattr(c, "metadata", None) or {}) for c in circuits
    )


def estimate_on_device(
    circuits_blob: bytes,
    device: str,
    seed: int = 0,
    rows: int = 1,
    shots: int = DEFAULT_SHOTS,
    on_ibm: bool = False,
    quantile: float = 0.5,
) -> DeviceEstimate:
    """Transpile each circuit for the device; numerical fidelity (mean), duration (sum) and the
    time the job will hold the device (``job_run_seconds``, at ``quantile``).

    ``rows`` parameter sets are bound into every circuit where the job runs: the circuits are
    transpiled once (unbound) and the job counts ``rows`` times as many. ISA circuits (with a
    layout) keep it (``backends.isa``); one that does not fit the device raises IsaMismatch.

    Circuits a cell mitigated by hand (ZNE.apply, REM.apply: tagged in their metadata) are laid
    out once, on the first circuit's qubits, and compiled at level 0 as the stacks' own runs are:
    REM's calibration circuits must measure the qubits they calibrate, and ZNE's folds must
    survive compilation.
    """
    from kernel_server.backends.devices import load_backend
    from kernel_server.estimator.numerical import fidelity_and_duration, numerical_estimate
    from kernel_server.wire.circuits import register_reducers

    register_reducers()  # the transpiled circuits travel back to the orchestrator
    t0 = time.perf_counter()
    backend = load_backend(device)
    circuits = load_circuits(circuits_blob)
    compiled: list[Any]
    if all(getattr(c, "layout", None) is not None for c in circuits):
        from kernel_server.backends.isa import compile_isa

        compiled = [compile_isa(c, backend) for c in circuits]
    elif _mitigated_by_hand(circuits):
        from kernel_server.backends.compile import choose_layout, transpile_mitigated

        layout = choose_layout(circuits[0], backend)
        compiled = [transpile_mitigated(c, backend, layout) for c in circuits]
    else:
        compiled = []
    if compiled:
        measured = [fidelity_and_duration(c, backend.target) for c in compiled]
    else:
        estimates = [numerical_estimate(c, backend, seed=seed) for c in circuits]
        measured = [(e.fidelity, e.duration_s) for e in estimates]
        compiled = [e.transpiled for e in estimates]
    return DeviceEstimate(
        device,
        sum(f for f, _ in measured) / len(measured),
        sum(d for _, d in measured) * rows,
        cloudpickle.dumps(compiled),
        len(compiled) * rows,
        time.perf_counter() - t0,
        job_run_seconds(compiled, backend, shots, rows, on_ibm, quantile),
    )


def job_run_seconds(
    compiled: list[Any], backend: Any, shots: int, rows: int, on_ibm: bool, quantile: float = 0.5
) -> float | None:
    """Seconds a job of these compiled circuits (``rows`` parameter sets each) will hold the
    device, in the seconds its queue measures: on an IBM device the runtime model's QPU time
    (its central value, or the upper end of its interval for a ``quantile`` above 0.5); on a
    simulated one the noisy simulation's predicted time (the cost model of
    ``backends.methods``, which has no interval). A plan's mitigation stack multiplies what the
    job runs; this prices the circuits as given. None where no model can price them.
    """
    if on_ibm:
        return _runtime_model_seconds(compiled, backend, shots, rows, quantile)
    from kernel_server.backends.aer_sim import plan_noisy_run

    seconds = 0.0
    for circuit in compiled:
        if circuit.parameters:
            # A sweep's rows are bound where the job runs; the price does not depend on the
            # angles (a generic one keeps a Clifford test from taking them for Clifford).
            circuit = circuit.assign_parameters([_PRICING_ANGLE] * circuit.num_parameters)
        try:
            # No MPS probe: an estimate on every device must not run seconds of simulation.
            plan = plan_noisy_run(circuit, shots, backend=backend, probe=False)
        except (ValueError, TypeError):  # what no method prices is left to the QPU's mean job
            return None
        seconds += plan.estimated_seconds[plan.method]
    return seconds * rows


_PRICING_ANGLE = 0.3217


def _runtime_model_seconds(
    compiled: list[Any], backend: Any, shots: int, rows: int, quantile: float
) -> float | None:
    from kernel_server.estimator.features import circuit_features, runtime_frame
    from kernel_server.estimator.runtime import RuntimeModel

    model = RuntimeModel.load()
    features = [
        circuit_features(c, backend.target, shots=shots, num_circuits=rows) for c in compiled
    ]
    frame = runtime_frame([features])
    if quantile > 0.5 and model.intervals is not None:
        # A central interval of coverage 2q - 1 has the q-quantile as its upper end.
        _, high = model.predict_interval(frame, coverage=2 * quantile - 1)
        return float(high[0])
    return float(model.predict(frame)[0])


@dataclass
class Execution:
    """What a QPU job returns: the counts (cloudpickled list, one dict per circuit) and how each
    circuit was simulated."""

    counts: bytes
    methods: list[str]
    worker: str = ""  # where it ran: a Dask worker's address or local:<pid>


def _rows(parameter_values: bytes) -> Any:
    if not parameter_values:
        return None
    from kernel_server.wire.circuits import load_parameter_values

    return load_parameter_values(parameter_values)


def execute_on_device(
    device: str,
    transpiled_blob: bytes,
    shots: int,
    seed: int | None,
    parameter_values: bytes = b"",
) -> Execution:
    """Run the transpiled circuits with the device's noise, each bound with every row of
    ``parameter_values`` (circuit-major) where there are rows."""
    from kernel_server.tasks.process import EXCLUSIVE

    with EXCLUSIVE:  # see tasks.process: a Dask worker also runs steps in this process
        return _execute_on_device(device, transpiled_blob, shots, seed, parameter_values)


def _execute_on_device(
    device: str, transpiled_blob: bytes, shots: int, seed: int | None, parameter_values: bytes
) -> Execution:
    from kernel_server.backends.aer_sim import run_noisy_detailed
    from kernel_server.backends.devices import load_backend
    from kernel_server.wire.circuits import bind_rows

    backend = load_backend(device)
    circuits = bind_rows(cloudpickle.loads(transpiled_blob), _rows(parameter_values))
    results, methods = [], []
    for i, circuit in enumerate(circuits):
        run = run_noisy_detailed(backend, circuit, shots, seed=None if seed is None else seed + i)
        results.append(dict(sorted(run.counts.items())))
        # The run record says when the guard gave up a method first (backends.guard).
        tried = [reason.split(" ", 1)[0] for reason in run.fallbacks]
        methods.append(f"{run.method} (after {', '.join(tried)})" if tried else run.method)
    from kernel_server.tasks.process import worker_address

    return Execution(cloudpickle.dumps(results), methods, worker_address())


def plan_step(
    circuits_blob: bytes,
    fleet: list[str],
    shots: int,
    k: int = PLAN_LIMIT,
    prices: dict[str, Any] | None = None,
    stacks: tuple[str, ...] = (),
    parameter_values: bytes = b"",
) -> Plans:
    """Resource plans for a quantum step's first circuit over the fleet's templates, best-first,
    each with the template's member QPUs (``members``) so the job can run where the plan says.

    ``stacks`` narrows the mitigation stacks (a primitive's resilience options); a parametrized
    circuit is planned with its first row of values bound, an ISA circuit over the templates of
    its width only (it runs where it is laid out). A circuit the estimator cannot take (a gate
    mitiq cannot convert, a model file missing) gives a ``PlanError``: the job then runs
    unmitigated on the scheduler's choice.
    """
    from kernel_server.estimator.plans import resource_plans, templates_for
    from kernel_server.wire.circuits import bind_rows

    try:
        circuits = load_circuits(circuits_blob)
        values = _rows(parameter_values)
        circuit = bind_rows(circuits[:1], None if values is None else values[:1])[0]
        templates = templates_for(fleet)
        if getattr(circuit, "layout", None) is not None:
            templates = {
                name: t for name, t in templates.items() if t.num_qubits == circuit.num_qubits
            }
        # Mitigation the cell applied by hand pins that part of the plan: only unmitigated
        # plans (QPU template and accelerator still chosen by the estimator).
        pinned: dict[str, Any] = {"stacks": ("none",)} if _mitigated_by_hand(circuits) else {}
        if stacks:
            pinned = {"stacks": tuple(stacks)}
        plans = resource_plans(
            circuit, k, backends=templates.values(), shots=shots, prices=prices, **pinned
        )
    except Exception as exc:  # reported under the cell; the job itself goes on
        return PlanError(error=f"{type(exc).__name__}: {exc}")
    return [plan.to_plan(templates[plan.estimate.backend].members) for plan in plans]


def counts_from_distribution(distribution: dict[str, float], shots: int) -> dict[str, int]:
    """Integer counts totalling ``shots`` closest to ``distribution`` (largest remainders), so a
    mitigated result reads like the counts ``sample()`` returns."""
    total = sum(max(v, 0.0) for v in distribution.values())
    if total <= 0:
        return {}
    exact = {k: max(v, 0.0) / total * shots for k, v in distribution.items()}
    counts = {k: int(v) for k, v in exact.items()}
    short = shots - sum(counts.values())
    for key in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)[:short]:
        counts[key] += 1
    return {k: v for k, v in sorted(counts.items()) if v > 0}


def bind_transpiled(transpiled_blob: bytes, parameter_values: bytes) -> bytes:
    """Transpiled circuits bound with every row (for backends that take bound circuits only)."""
    from kernel_server.wire.circuits import bind_rows, register_reducers

    register_reducers()
    return cloudpickle.dumps(bind_rows(cloudpickle.loads(transpiled_blob), _rows(parameter_values)))


def execute_mitigated(
    device: str,
    circuits_blob: bytes,
    stack: str,
    shots: int,
    seed: int | None,
    parameter_values: bytes = b"",
) -> Execution:
    """Run each circuit (bound with each row of ``parameter_values``) with a mitigation stack on
    the device's noise; the mitigated outcome distribution comes back as counts
    (``counts_from_distribution``)."""
    from kernel_server.tasks.process import EXCLUSIVE

    with EXCLUSIVE:  # see tasks.process
        return _execute_mitigated(device, circuits_blob, stack, shots, seed, parameter_values)


def _execute_mitigated(
    device: str,
    circuits_blob: bytes,
    stack: str,
    shots: int,
    seed: int | None,
    parameter_values: bytes,
) -> Execution:
    from kernel_server.backends.devices import load_backend
    from kernel_server.estimator.mitigation.run import run_mitigated_detailed
    from kernel_server.wire.circuits import bind_rows

    backend = load_backend(device)
    circuits = bind_rows(load_circuits(circuits_blob), _rows(parameter_values))
    results = []
    shared: dict[Any, Any] = {}  # calibrations the job's circuits have in common run once
    for i, circuit in enumerate(circuits):
        layout = None
        if getattr(circuit, "layout", None) is not None:
            # An ISA circuit keeps its qubits: the stack works on its active part, placed there
            # (mitigating the full-width circuit would pad every qubit of the device).
            from kernel_server.backends.aer_sim import compact_circuit

            compact = compact_circuit(circuit)
            circuit, layout = compact.circuit, compact.physical_qubits
        run = run_mitigated_detailed(
            circuit, backend, stack, shots, seed=None if seed is None else seed + i,
            per_outcome=True, layout=layout, shared=shared,
        )  # fmt: skip
        results.append(counts_from_distribution(dict(run.value), shots))
    from kernel_server.tasks.process import worker_address

    methods = [f"mitigated:{stack}"] * len(circuits)
    return Execution(cloudpickle.dumps(results), methods, worker_address())


def warm_up(devices: list[str]) -> int:
    """Load the backends once per process so the first job does not pay for it."""
    from kernel_server.backends.devices import load_backend

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
