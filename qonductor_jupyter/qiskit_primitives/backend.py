"""``backend(name)``: a ``BackendV2`` view of a fleet device or template.

Its ``target`` is the device's (or the template's: the mean calibration of its members, their
shared couplers and gates), so ``generate_preset_pass_manager(backend=...)`` transpiles for it and
``observable.apply_layout(isa.layout)`` maps observables onto the result. ``run(circuits,
shots=...)`` is one QPU job of those circuits on the device (any member of the template), through
the orchestrator like a Sampler PUB; so qiskit's ``BackendSamplerV2(backend=...)`` and
``BackendEstimatorV2`` run on the fleet too. The view pickles without its Target (a step that
uses it only needs where it runs) and fetches it again where it is read.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from qiskit.providers import BackendV2, Options
from qiskit.result import Result

from .execution import run_in_step, step_executor, submit_workflow
from .job import QonductorJob

# The fleet's devices and templates by name: (name, kind, members, Target), asked for once.
Description = tuple[str, str, list[str], Any]
_targets: dict[str, Description] = {}
_lock = threading.Lock()


def _describe(name: str) -> Description:
    import cloudpickle

    from kernel_server.wire.messages import BackendReply, DescribeBackend

    from ..errors import OrchestratorError
    from ..workflows import _request

    reply = _request(DescribeBackend(name=name))
    if not isinstance(reply, BackendReply):
        raise OrchestratorError(f"describe_backend: the orchestrator answered {reply.op!r}")
    return reply.name, reply.kind, list(reply.members), cloudpickle.loads(reply.target)


class FleetBackend(BackendV2):
    """A device or template of the fleet as a qiskit backend (see the module docstring)."""

    _qonductor_executor = True  # the splitter: ``backend.run(...)`` is a quantum call

    def __init__(self, name: str, kind: str, members: list[str], target: Any = None) -> None:
        super().__init__(name=name, description=f"{kind} {name} of the Qonductor fleet")
        self.kind = kind
        self.members = tuple(members)
        self._target = target

    def __reduce__(self) -> Any:
        return (FleetBackend, (self.name, self.kind, list(self.members)))

    @property
    def target(self) -> Any:
        if self._target is None:
            with _lock:
                cached = _targets.get(self.name)
            if cached is None:
                cached = _describe(self.name)[3]
                with _lock:
                    _targets[self.name] = cached
            self._target = cached
        return self._target

    @property
    def max_circuits(self) -> int | None:
        return None

    @classmethod
    def _default_options(cls) -> Options:
        return Options(shots=4096, memory=False, seed_simulator=None)

    def run(self, run_input: Any, **options: Any) -> QonductorJob:
        """Run circuits as one QPU job on this device (any member of the template); the job's
        result is a qiskit ``Result`` with counts (and memory with ``memory=True``)."""
        circuits = list(run_input) if isinstance(run_input, (list, tuple)) else [run_input]
        shots = int(options.get("shots") or self.options.shots)
        memory = bool(options.get("memory", self.options.memory))
        seed = options.get("seed_simulator", self.options.seed_simulator)
        unknown = set(options) - {"shots", "memory", "seed_simulator"}
        if unknown:
            raise ValueError(
                f"unknown run options {sorted(unknown)}; valid: shots, memory, seed_simulator"
            )
        runner = _BackendRun(self, circuits, shots, memory, seed)
        execute = step_executor()
        if execute is None:
            # A workflow of one step that runs this same call (``primitive.run(pubs)``).
            return submit_workflow(runner, [], {"seed": seed})
        return runner.run([])

    def __repr__(self) -> str:
        return f"<FleetBackend {self.name} ({self.kind}: {', '.join(self.members)})>"


class _BackendRun:
    """One ``backend.run``: the step-side work (it pickles into the workflow's step)."""

    _qonductor_executor = True

    def __init__(
        self, backend: FleetBackend, circuits: list[Any], shots: int, memory: bool, seed: Any
    ) -> None:
        self.backend, self.circuits, self.shots = backend, circuits, shots
        self.memory, self.seed = memory, seed

    def run(self, pubs: Any) -> QonductorJob:
        from kernel_server.core.circuits import check_circuits
        from kernel_server.wire.calls import QuantumCall

        check_circuits(self.circuits)
        execute = step_executor()
        call = QuantumCall(self.circuits, self.shots, None, self.backend.members)
        (result,), workflow_id = run_in_step(execute, [call])
        rng = np.random.default_rng(self.seed)
        experiments = [
            _experiment(circuit, counts, self.shots, self.memory, rng)
            for circuit, counts in zip(self.circuits, result.counts, strict=True)
        ]
        report = result.report
        return QonductorJob(
            workflow_id,
            Result.from_dict(
                {
                    "backend_name": report.qpu if report is not None else self.backend.name,
                    "backend_version": "1",
                    "job_id": workflow_id,
                    "qobj_id": workflow_id,
                    "success": True,
                    "results": experiments,
                }
            ),
        )


def _experiment(
    circuit: Any, counts: dict[str, int], shots: int, memory: bool, rng: Any
) -> dict[str, Any]:
    """One circuit's entry of a qiskit ``Result``: counts (and shot memory) in hex, and the
    header that formats them back into bitstrings by register."""
    as_hex = {hex(int(key.replace(" ", ""), 2)): int(n) for key, n in counts.items()}
    data: dict[str, Any] = {"counts": as_hex}
    if memory:
        keys = list(as_hex)
        shots_of = np.array([as_hex[k] for k in keys])
        order = rng.permutation(np.repeat(np.arange(len(keys)), shots_of))
        data["memory"] = [keys[i] for i in order]
    return {
        "shots": shots,
        "success": True,
        "data": data,
        "header": {
            "name": circuit.name,
            "creg_sizes": [[creg.name, creg.size] for creg in circuit.cregs],
            "memory_slots": circuit.num_clbits,
            "metadata": circuit.metadata,
        },
    }


def backend(name: str) -> FleetBackend:
    """The ``BackendV2`` view of a fleet device (``"fake_kolkata"``) or template
    (``"Falcon-27"``, or its backend name ``"template_falcon_27"``)."""
    canonical, kind, members, target = _describe(name)
    with _lock:
        _targets[canonical] = target
    return FleetBackend(canonical, kind, members, target)
