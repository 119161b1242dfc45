"""Run one workflow step in a worker process.

A step is a piece of the user's cell. It runs in a fresh namespace holding exactly the values it
reads; ``sample`` and ``estimate`` are bound to functions that send the circuits back to the
orchestrator over ZeroMQ (signed like every other message) and block until the QPU job is done. The
same mechanism serves quantum steps (one call) and hybrid steps (calls inside a loop), so a VQE loop
needs nothing special here.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from kernel_server.cell_functions import CELL_MODULE, rebind_cell_functions

CELL_FILENAME = "<qonductor cell>"

# One thread at a time runs our work in a process: a Dask worker with several threads would
# otherwise run qiskit and Aer concurrently in one process, which we saw end in SIGSEGV (with
# seceded step threads). A step lets go of it only while it waits for a QPU job.
_EXCLUSIVE = threading.Lock()

# Each thread's connection back to the orchestrator (a WorkerLink): a ZeroMQ socket must not be
# shared between threads, and a Dask worker may run steps on several.
_links = threading.local()
_link_config: tuple[str, str] | None = None


def init_worker(router_endpoint: str, key: str) -> None:
    """Process-pool initializer: remember where the orchestrator is; connect lazily."""
    from kernel_server.workers.lifeline import start_lifeline

    start_lifeline()
    configure_link(router_endpoint, key)


def configure_link(router_endpoint: str, key: str) -> None:
    """Point this process's quantum calls at an orchestrator (also used on Dask workers, which
    outlive any one orchestrator and so get no lifeline)."""
    global _link_config
    _link_config = (router_endpoint, key)
    _links.__dict__.clear()


def worker_address() -> str:
    """Where this code runs: the Dask worker's address, or ``local:<pid>`` in a local pool."""
    distributed = sys.modules.get("distributed")  # imported only where Dask runs us
    if distributed is not None:
        try:
            return distributed.get_worker().address
        except ValueError:  # not inside a Dask task
            pass
    return f"local:{os.getpid()}"


@dataclass
class StepSpec:
    workflow_id: str
    step_id: int
    kind: str
    code: str
    lineno: int
    cell_source: str
    inputs: dict[str, bytes]
    writes: list[str]
    shots: int = 4000
    timeout_s: float | None = None  # stop the step after this long (see _deadline)


@dataclass
class StepOutcome:
    ok: bool
    outputs: dict[str, bytes] = field(default_factory=dict)
    stdout: str = ""
    error: str | None = None
    error_type: str | None = None
    pid: int = 0
    worker: str = ""  # worker_address() of where the step ran


class StepError(Exception):
    """A step's failure as the user should read it (their traceback, not ours)."""


class QuantumCallError(RuntimeError):
    """The orchestrator refused or failed a sample/estimate call."""


class WorkerLink:
    """DEALER socket from a worker process to the orchestrator's ROUTER."""

    def __init__(self, endpoint: str, key: str, max_payload_bytes: int | None = None):
        import zmq

        from kernel_server.protocol import MAX_PAYLOAD_BYTES, Signer

        self.max_payload_bytes = max_payload_bytes or MAX_PAYLOAD_BYTES
        self._zmq = zmq
        self.signer = Signer(key.encode())
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.pid = os.getpid()
        self.config = (endpoint, key)

    def request(self, message: Any) -> Any:
        from kernel_server.protocol import (
            ErrorReply,
            RequestTooLarge,
            check_size,
            decode,
            encode,
            new_request_id,
        )

        rid = new_request_id()
        frames = encode(message, self.signer, rid)
        try:
            check_size(frames, self.max_payload_bytes)
        except RequestTooLarge as exc:
            raise QuantumCallError(str(exc)) from None
        self.sock.send_multipart(frames)
        with _others_may_run():
            while True:
                env = decode(self.sock.recv_multipart(), self.signer)
                if env.request_id != rid:
                    continue  # a late reply to an abandoned request
                if isinstance(env.message, ErrorReply):
                    raise QuantumCallError(f"{env.message.type}: {env.message.message}")
                return env.message


@contextlib.contextmanager
def _others_may_run() -> Any:
    """Let other work of this process run while the step waits for its QPU job."""
    _EXCLUSIVE.release()
    try:
        yield
    finally:
        _EXCLUSIVE.acquire()


def _get_link() -> WorkerLink:
    link = getattr(_links, "link", None)
    if link is None or link.pid != os.getpid() or link.config != _link_config:
        if _link_config is None:
            raise RuntimeError("worker was not initialised with the orchestrator's address")
        link = _links.link = WorkerLink(*_link_config)
    return link


def _check_circuit(circuit: Any, need_measurements: bool) -> None:
    from qiskit import QuantumCircuit

    if not isinstance(circuit, QuantumCircuit):
        raise TypeError(
            f"sample() takes a QuantumCircuit or a list of them, not {type(circuit).__name__}"
        )
    if circuit.parameters:
        names = ", ".join(sorted(p.name for p in circuit.parameters)[:5])
        raise ValueError(
            f"circuit {circuit.name!r} has unbound parameters ({names}); "
            "bind them with circuit.assign_parameters(...) first"
        )
    if need_measurements and not any(i.operation.name == "measure" for i in circuit.data):
        raise ValueError(
            f"circuit {circuit.name!r} has no measurements; add "
            "circuit.measure_all() (or use estimate() for expectation values)"
        )


def make_primitives(workflow_id: str, step_id: int, default_shots: int) -> dict[str, Any]:
    """The ``sample`` and ``estimate`` a step sees."""
    from kernel_server.protocol import Sample

    def sample(circuits: Any, shots: int | None = None) -> Any:
        """Run circuit(s) on a QPU chosen by the orchestrator; return counts dict(s)."""
        single = not isinstance(circuits, (list, tuple))
        batch = [circuits] if single else list(circuits)
        if not batch:
            raise ValueError("sample() needs at least one circuit")
        for c in batch:
            _check_circuit(c, need_measurements=True)
        n_shots = int(shots or default_shots)
        if n_shots < 1:
            raise ValueError(f"shots must be positive, got {n_shots}")
        reply = _get_link().request(
            Sample(
                workflow_id=workflow_id,
                step_id=step_id,
                circuits=cloudpickle.dumps(batch),
                shots=n_shots,
                num_qubits=max(c.num_qubits for c in batch),
            )
        )
        results = cloudpickle.loads(reply.results)
        return results[0] if single else results

    def estimate(circuit: Any, observables: Any, shots: int | None = None) -> Any:
        """Expectation value(s) of observable(s) on the circuit's state, measured on a QPU."""
        from kernel_server.workers.expectation import expectation_from_counts, measurement_circuits

        _check_circuit(circuit, need_measurements=False)
        single = not isinstance(observables, list)
        obs_list = [observables] if single else observables
        values = []
        for obs in obs_list:
            pairs = measurement_circuits(circuit, obs)
            counts = sample([c for c, _ in pairs], shots=shots)
            values.append(expectation_from_counts(obs, [g for _, g in pairs], counts))
        return values[0] if single else values

    return {"sample": sample, "estimate": estimate}


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the cell's first frame on: our own frames are noise to the user."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL_FILENAME:
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb)
    return "".join(te.format())


class StepTimeout(BaseException):
    """The step ran past its timeout (a BaseException, so the cell's ``except Exception`` cannot
    swallow it)."""


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Any:
    """Raise StepTimeout inside the step's own code once ``seconds`` have passed.

    SIGALRM interrupts Python code and blocking calls (a sleep, a socket wait) of the process's
    main thread, which is where pool workers run steps; elsewhere (a Dask worker's thread) the
    orchestrator's own timer fails the step instead.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise StepTimeout(f"the step ran longer than its timeout of {seconds:g} s and was stopped")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_step(spec: StepSpec) -> StepOutcome:
    """Execute one step; never raises (failures come back in the outcome)."""
    with _EXCLUSIVE:
        try:
            with _deadline(spec.timeout_s):
                return _run_step(spec)
        except StepTimeout as exc:  # raised outside the user's code (loading inputs, pickling)
            return StepOutcome(
                False, error=str(exc), error_type="StepTimeout", worker=worker_address()
            )


def _run_step(spec: StepSpec) -> StepOutcome:
    lines = spec.cell_source.splitlines(keepends=True)
    linecache.cache[CELL_FILENAME] = (len(spec.cell_source), None, lines, CELL_FILENAME)
    out = io.StringIO()
    ns: dict[str, Any] = {"__name__": CELL_MODULE, "__builtins__": __builtins__}
    try:
        for name, blob in spec.inputs.items():
            ns[name] = cloudpickle.loads(blob)
    except Exception as exc:
        return StepOutcome(
            False,
            error=f"could not load input values: {exc!r}",
            error_type=type(exc).__name__,
            pid=os.getpid(),
            worker=worker_address(),
        )
    # The splitter made sure the names these functions use are inputs of this step.
    rebind_cell_functions(ns, ns)
    if spec.kind != "classical" or "sample" not in ns:
        ns.update(make_primitives(spec.workflow_id, spec.step_id, spec.shots))
    # Pad so that line numbers in tracebacks are the cell's own.
    code = "\n" * (spec.lineno - 1) + spec.code
    try:
        compiled = compile(code, CELL_FILENAME, "exec")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compiled, ns)
    except (Exception, SystemExit) as exc:  # anything the user's code raises is reported
        return StepOutcome(
            False,
            stdout=out.getvalue(),
            error=_user_traceback(exc),
            error_type=type(exc).__name__,
            pid=os.getpid(),
            worker=worker_address(),
        )
    outputs: dict[str, bytes] = {}
    problems = []
    for name in spec.writes:
        if name not in ns:
            continue  # bound only on a branch that did not run, or deleted
        try:
            outputs[name] = cloudpickle.dumps(ns[name])
        except Exception as exc:  # pickling raises many types
            problems.append(f"  {name} ({type(ns[name]).__name__}): {exc}")
    if problems:
        msg = (
            "these values cannot be sent between steps or back to the notebook:\n"
            + "\n".join(problems)
            + "\nKeep them local to one statement or `del` them at the end of the cell."
        )
        return StepOutcome(
            False,
            stdout=out.getvalue(),
            error=msg,
            error_type="PicklingError",
            pid=os.getpid(),
            worker=worker_address(),
        )
    return StepOutcome(
        True, outputs=outputs, stdout=out.getvalue(), pid=os.getpid(), worker=worker_address()
    )


def warm_up() -> int:
    """Import the heavy modules once, so the first real step does not pay for them."""
    import qiskit  # noqa: F401

    return os.getpid()
