"""The ``sample`` and ``estimate`` a step's code calls, and how its code finds them.

Both send the circuits back to the orchestrator over this thread's link (``link.py``) and block
until the QPU job is done. The same mechanism serves quantum steps (one call) and hybrid steps
(calls inside a loop), so a VQE loop needs nothing special here.

The running step's primitives are also what ``qonductor_jupyter.sample`` (imported by the cell) and
a bare ``sample`` inside a function from another notebook cell reach: the step sets them as this
thread's current primitives, and the worker's builtins carry ``sample``/``estimate`` names that
call them (functions sent by value keep a globals dict of their own, without ``sample``).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle

from kernel_server.core.circuits import (
    _argument_text,
    check_circuits,
    check_shots,
    circuit_for_estimate,
)
from kernel_server.tasks.link import QuantumCallError, get_link
from kernel_server.wire.calls import CallResult, QuantumCall
from kernel_server.wire.messages import Sample


@dataclass(frozen=True)
class StepPrimitives:
    """The quantum calls of one running step: ``sample`` and ``estimate`` (the names a cell
    calls) and ``execute`` (a list of QuantumCalls at once: the Qiskit primitives' PUBs)."""

    sample: Callable[..., Any]
    estimate: Callable[..., Any]
    execute: Callable[[list[QuantumCall]], list[Any]]

    def names(self) -> dict[str, Callable[..., Any]]:
        """What a quantum step's namespace gets: the calls its code makes by name."""
        return {"sample": self.sample, "estimate": self.estimate}


class _StepContext(threading.local):
    primitives: StepPrimitives | None = None


_context = _StepContext()
# Thread id -> the primitives of the step that thread runs: a thread the user's code starts
# (a thread pool sampling in parallel) finds its step here when only one step is running.
_running: dict[int, StepPrimitives] = {}


def current_primitives() -> StepPrimitives | None:
    """The ``sample``/``estimate`` of the step running in this thread (or, from a thread the
    step's code started, of the only step running in this process); None outside any step."""
    if _context.primitives is not None:
        return _context.primitives
    running = list(_running.values())
    return running[0] if len(running) == 1 else None


@contextlib.contextmanager
def step_context(primitives: StepPrimitives) -> Any:
    """Make ``primitives`` this thread's current ones while the step's code runs."""
    previous = _context.primitives
    _context.primitives = primitives
    _running[threading.get_ident()] = primitives
    try:
        yield
    finally:
        _context.primitives = previous
        if previous is None:
            _running.pop(threading.get_ident(), None)
        else:
            _running[threading.get_ident()] = previous


def _builtin_primitive(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        primitives = current_primitives()
        if primitives is None:
            raise NameError(f"name {name!r} is not defined")
        return getattr(primitives, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"The running step's {name}() (see kernel_server.tasks.primitives)."
    return call


def install_builtin_primitives() -> None:
    """Give functions sent by value (defined in a plain notebook cell, methods of notebook
    classes) the running step's ``sample``/``estimate``: their own globals lack the names, so
    Python looks in builtins next. Outside a step the names raise NameError as before."""
    for name in ("sample", "estimate"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _builtin_primitive(name))


def _sample_message(workflow_id: str, step_id: int, call: QuantumCall) -> Sample:
    from kernel_server.wire.circuits import (
        CircuitFormatError,
        dump_circuits,
        dump_parameter_values,
    )

    try:
        circuits = dump_circuits(call.circuits)
    except CircuitFormatError as exc:
        raise QuantumCallError(str(exc)) from None
    values = b""
    if call.parameter_values is not None:
        values = dump_parameter_values(call.parameter_values)
    return Sample(
        workflow_id=workflow_id,
        step_id=step_id,
        circuits=circuits,
        shots=call.shots,
        parameter_values=values,
        qpus=list(call.qpus),
        session=call.session,
        stacks=list(call.stacks),
    )


def execute_calls(
    workflow_id: str, step_id: int, capability: str, calls: list[QuantumCall]
) -> list[Any]:
    """Each call one QPU job of the step, all sent at once; per call its counts (circuit-major
    over the rows of its parameter values) and report, or the error that refused or failed it."""
    messages = [_sample_message(workflow_id, step_id, call) for call in calls]
    replies = get_link(capability).request_all(messages)
    return [
        reply
        if isinstance(reply, QuantumCallError)
        else CallResult(cloudpickle.loads(reply.results), reply.report, workflow_id)
        for reply in replies
    ]


def make_primitives(
    workflow_id: str, step_id: int, default_shots: int, capability: str = ""
) -> StepPrimitives:
    """The ``sample``, ``estimate`` and ``execute`` (of primitives' PUBs) a step sees."""
    execute = functools.partial(execute_calls, workflow_id, step_id, capability)

    def run(batch: list[Any], shots: int) -> list[Any]:
        (result,) = execute([QuantumCall(batch, shots)])
        if isinstance(result, QuantumCallError):
            raise result
        return list(result.counts)

    def sample(circuits: Any, shots: int | None = None) -> Any:
        """Run circuit(s) on a QPU chosen by the orchestrator; return counts dict(s)."""
        batch, single = check_circuits(circuits, _argument_text(1))
        results = run(batch, check_shots(shots) or default_shots)
        return results[0] if single else results

    def estimate(circuit: Any, observables: Any, shots: int | None = None) -> Any:
        """Expectation value(s) of observable(s) on the circuit's state, measured on a QPU: one
        QPU job for all of them (an Estimator PUB: their terms grouped into measurement bases,
        ``shots`` per basis)."""
        from qiskit.primitives.containers.estimator_pub import EstimatorPub

        from kernel_server.backends.observables import as_observable
        from kernel_server.core.pubs import estimator_data, estimator_job

        circuit = circuit_for_estimate(circuit, _argument_text(1))
        n_shots = check_shots(shots) or default_shots
        single = not isinstance(observables, list)
        obs_list = [observables] if single else observables
        operators = [as_observable(obs, circuit.num_qubits) for obs in obs_list]
        pub = EstimatorPub.coerce((circuit, operators))
        job = estimator_job(pub, n_shots)
        counts: list[dict[str, int]] = []
        if job.templates:
            (result,) = execute([QuantumCall(job.templates, n_shots)])
            if isinstance(result, QuantumCallError):
                raise result
            counts = result.counts
        values = [float(v) for v in estimator_data(pub, job, counts).evs]
        return values[0] if single else values

    return StepPrimitives(sample, estimate, execute)
