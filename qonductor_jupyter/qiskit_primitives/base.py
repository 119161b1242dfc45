"""What the fleet's Sampler and Estimator share: mode, options, checks, and where they run."""

from __future__ import annotations

import abc
import copy
from typing import Any

import numpy as np

from kernel_server.core.isa import isa_misfit
from kernel_server.core.pubs import PubJob
from kernel_server.wire.calls import QuantumCall

from .execution import (
    primitive_result,
    report_metadata,
    run_in_step,
    step_executor,
    submit_workflow,
)
from .job import QonductorJob
from .modes import pin_of, resolve_mode
from .options import make_options
from .pin import Pin


class FleetPrimitive(abc.ABC):
    """A primitive whose PUBs run on the orchestrated fleet (see ``execution``); a subclass says
    what one of its PUBs asks the QPU to run and what its result is."""

    _qonductor_executor = True  # the splitter: ``x.run(...)`` is a quantum call
    _options_class: Any = None

    def __init__(self, mode: Any = None, options: Any = None) -> None:
        self._mode = resolve_mode(mode)
        self._options = make_options(self._options_class, copy.deepcopy(options))

    @property
    def mode(self) -> Any:
        return self._mode

    @property
    def options(self) -> Any:
        return self._options

    def _pin(self) -> Pin:
        return pin_of(self._mode)

    def _check_fits(self, circuit: Any, pin: Pin) -> None:
        """Refuse, before anything is queued, a circuit the pinned backend cannot run: an ISA
        circuit that does not fit it as laid out, or a circuit wider than it."""
        backend = pin.backend
        if backend is None:
            return
        if getattr(circuit, "layout", None) is not None:
            misfit = isa_misfit(circuit, backend.target, backend.name)
            if misfit:
                raise ValueError(
                    misfit + " Transpile the circuit for this backend "
                    "(generate_preset_pass_manager(backend=...)) or run it without a mode."
                )
        elif circuit.num_qubits > backend.num_qubits:
            raise ValueError(
                f"The circuit has {circuit.num_qubits} qubits but the target system "
                f"{backend.name} has only {backend.num_qubits}."
            )

    def _submit(self, pubs: list[Any]) -> QonductorJob:
        execute = step_executor()
        if execute is None:
            return submit_workflow(self, pubs, self._options.run_options())
        results, workflow_id = self._execute(execute, pubs)
        return QonductorJob(workflow_id, primitive_result(results))

    def _execute(self, execute: Any, pubs: list[Any]) -> tuple[list[Any], str]:
        """Run the PUBs as quantum calls of the running step; their PubResults."""
        pin = self._pin()
        jobs = [self._pub_job(pub) for pub in pubs]
        # A PUB whose observables are all identity needs no circuit at all.
        measured = [job for job in jobs if job.templates]
        calls = [
            QuantumCall(
                job.templates,
                job.shots,
                job.parameter_values if job.parameter_values.shape[1] else None,
                pin.qpus,
                pin.session,
                self._options.stacks(),
            )
            for job in measured
        ]
        results, workflow_id = run_in_step(execute, calls) if calls else ([], "")
        by_job = {id(job): result for job, result in zip(measured, results, strict=True)}
        rng = np.random.default_rng(self._options.simulator.seed_simulator)
        finished = []
        for pub, job in zip(pubs, jobs, strict=True):
            result = by_job.get(id(job))
            counts = result.counts if result is not None else []
            metadata = report_metadata(result, pin) if result is not None else {"qpu": None}
            finished.append(self._pub_result(pub, job, counts, metadata, rng))
        return finished, workflow_id

    @abc.abstractmethod
    def _pub_job(self, pub: Any) -> PubJob:
        """The QPU job of one coerced PUB."""

    @abc.abstractmethod
    def _pub_result(
        self, pub: Any, job: PubJob, counts: list[Any], metadata: dict[str, Any], rng: Any
    ) -> Any:
        """The PUB's result from its job's counts and the job's metadata."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self._pin().label}>"
