"""Run one workflow step in a worker process.

A step is a piece of the user's cell. It runs in a fresh namespace holding exactly the values it
reads; ``sample`` and ``estimate`` are bound to functions that send the circuits back to the
orchestrator over ZeroMQ (signed like every other message) and block until the QPU job is done. The
same mechanism serves quantum steps (one call) and hybrid steps (calls inside a loop), so a VQE loop
needs nothing special here.

The running step's primitives are also what ``qonductor_jupyter.sample`` (imported by the cell) and
a bare ``sample`` inside a function from another notebook cell reach: the step sets them as this
thread's current primitives, and the worker's builtins carry ``sample``/``estimate`` names that
call them (functions sent by value keep a globals dict of their own, without ``sample``).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import linecache
import os
import re
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from kernel_server.core.cell_functions import (
    CELL_MODULE,
    cell_filename,
    is_cell_file,
    mark_origin,
    rebind_cell_functions,
)
from kernel_server.core.circuits import (
    _argument_text,
    check_circuits,
    check_shots,
    circuit_for_estimate,
)

# Frames of these packages are ours, not the user's: a traceback shows the user's code only.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_OWN_CODE = (f"{_PACKAGE_DIR}{os.sep}", f"{_PACKAGE_DIR.parent / 'qonductor_jupyter'}{os.sep}")

# One thread at a time runs our work in a process: a Dask worker with several threads would
# otherwise run qiskit and Aer concurrently in one process, which we saw end in SIGSEGV (with
# seceded step threads). A step lets go of it only while it waits for a QPU job.
_EXCLUSIVE = threading.Lock()

# Each thread's connection back to the orchestrator (a WorkerLink): a ZeroMQ socket must not be
# shared between threads, and a Dask worker may run steps on several.
_links = threading.local()
_link_config: str | None = None  # the orchestrator's router endpoint


class _StepContext(threading.local):
    primitives: dict[str, Any] | None = None


_context = _StepContext()
# Thread id -> the primitives of the step that thread runs: a thread the user's code starts
# (a thread pool sampling in parallel) finds its step here when only one step is running.
_running: dict[int, dict[str, Any]] = {}


def current_primitives() -> dict[str, Any] | None:
    """The ``sample``/``estimate`` of the step running in this thread (or, from a thread the
    step's code started, of the only step running in this process); None outside any step."""
    if _context.primitives is not None:
        return _context.primitives
    running = list(_running.values())
    return running[0] if len(running) == 1 else None


@contextlib.contextmanager
def _step_context(primitives: dict[str, Any]) -> Any:
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
        return primitives[name](*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"The running step's {name}() (see kernel_server.tasks.step)."
    return call


def install_builtin_primitives() -> None:
    """Give functions sent by value (defined in a plain notebook cell, methods of notebook
    classes) the running step's ``sample``/``estimate``: their own globals lack the names, so
    Python looks in builtins next. Outside a step the names raise NameError as before."""
    for name in ("sample", "estimate"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _builtin_primitive(name))


def init_worker(
    router_endpoint: str, orchestrator_pid: int | None = None, sandbox: Any = None
) -> None:
    """Process-pool initializer: remember where the orchestrator is; connect lazily. Exit with
    the orchestrator (``orchestrator_pid``: its pid, from the orchestrator itself). A shared
    orchestrator's user's pool passes ``sandbox`` (workers.sandbox.Sandbox): the process confines
    itself before it runs any of their code."""
    from kernel_server.core.lifeline import start_lifeline

    start_lifeline(orchestrator_pid)
    configure_link(router_endpoint)
    if sandbox is not None:
        sandbox.enter()


def configure_link(router_endpoint: str) -> None:
    """Point this process's quantum calls at an orchestrator (also used on Dask workers, which
    outlive any one orchestrator and so get no lifeline). No key: each step's calls are signed
    with the capability that step brings (StepSpec.capability)."""
    global _link_config
    _link_config = router_endpoint
    _links.__dict__.clear()
    install_builtin_primitives()


def in_worker() -> bool:
    """True in a process that runs workflow steps (a pool worker or a configured Dask worker)."""
    return _link_config is not None


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
    deletes: list[str] = field(default_factory=list)  # names the step may ``del``
    owner: str = ""  # the shared orchestrator's user whose step this is ("": its owner)
    # What the step's quantum calls are signed with: valid for this workflow while it runs.
    capability: str = ""


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
    """DEALER socket from a worker process to the orchestrator's ROUTER, signing with one
    workflow's capability."""

    def __init__(self, endpoint: str, capability: str, max_payload_bytes: int | None = None):
        import zmq

        from kernel_server.wire.protocol import MAX_PAYLOAD_BYTES, capability_signer

        self.max_payload_bytes = max_payload_bytes or MAX_PAYLOAD_BYTES
        self._zmq = zmq
        self.signer = capability_signer(capability)
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.pid = os.getpid()
        self.config = (endpoint, capability)

    def close(self) -> None:
        self.sock.close()

    def request(self, message: Any) -> Any:
        from kernel_server.wire.protocol import (
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


# The thread that holds _EXCLUSIVE: a thread the step's own code started has nothing to let go.
_exclusive_owner: int | None = None


@contextlib.contextmanager
def _exclusive() -> Any:
    global _exclusive_owner
    with _EXCLUSIVE:
        _exclusive_owner = threading.get_ident()
        try:
            yield
        finally:
            _exclusive_owner = None


@contextlib.contextmanager
def _others_may_run() -> Any:
    """Let other work of this process run while the step waits for its QPU job."""
    global _exclusive_owner
    if _exclusive_owner != threading.get_ident():
        yield
        return
    _exclusive_owner = None
    _EXCLUSIVE.release()
    try:
        yield
    finally:
        _EXCLUSIVE.acquire()
        _exclusive_owner = threading.get_ident()


def _get_link(capability: str) -> WorkerLink:
    """This thread's link for the step's capability (a new one when the step changed)."""
    link = getattr(_links, "link", None)
    if link is None or link.pid != os.getpid() or link.config != (_link_config, capability):
        if _link_config is None:
            raise RuntimeError("worker was not initialised with the orchestrator's address")
        if not capability:
            raise QuantumCallError("this step was given no capability for quantum calls")
        if link is not None and link.pid == os.getpid():
            link.close()
        link = _links.link = WorkerLink(_link_config, capability)
    return link


def make_primitives(
    workflow_id: str, step_id: int, default_shots: int, capability: str = ""
) -> dict[str, Any]:
    """The ``sample`` and ``estimate`` a step sees."""
    from kernel_server.wire.protocol import Sample

    def run(batch: list[Any], shots: int) -> list[Any]:
        from kernel_server.wire.circuits import CircuitFormatError, dump_circuits

        try:
            circuits = dump_circuits(batch)
        except CircuitFormatError as exc:
            raise QuantumCallError(str(exc)) from None
        reply = _get_link(capability).request(
            Sample(workflow_id=workflow_id, step_id=step_id, circuits=circuits, shots=shots)
        )
        return cloudpickle.loads(reply.results)

    def sample(circuits: Any, shots: int | None = None) -> Any:
        """Run circuit(s) on a QPU chosen by the orchestrator; return counts dict(s)."""
        batch, single = check_circuits(circuits, _argument_text(1))
        results = run(batch, check_shots(shots) or default_shots)
        return results[0] if single else results

    def estimate(circuit: Any, observables: Any, shots: int | None = None) -> Any:
        """Expectation value(s) of observable(s) on the circuit's state, measured on a QPU."""
        from kernel_server.backends.observables import expectation_from_counts, measurement_circuits

        circuit = circuit_for_estimate(circuit, _argument_text(1))
        n_shots = check_shots(shots) or default_shots
        single = not isinstance(observables, list)
        obs_list = [observables] if single else observables
        values = []
        for obs in obs_list:
            pairs = measurement_circuits(circuit, obs)
            counts = run([c for c, _ in pairs], n_shots)
            values.append(expectation_from_counts(obs, [g for _, g in pairs], counts))
        return values[0] if single else values

    return {"sample": sample, "estimate": estimate}


def _users_frames(te: traceback.TracebackException) -> None:
    """Keep the frames of the user's cell and of the code it called (libraries included), not
    ours (the worker, the primitives), in this exception and the ones chained to it."""
    seen: set[int] = set()
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        frames = list(te.stack)
        while frames and not is_cell_file(frames[0].filename):
            frames.pop(0)  # the worker's frames above the cell
        te.stack = traceback.StackSummary.from_list(
            [f for f in frames if not f.filename.startswith(_OWN_CODE)]
        )
        te = te.__cause__ or te.__context__  # type: ignore[assignment]


def user_traceback(exc: BaseException) -> str:
    """The traceback as the user should read it (see _users_frames)."""
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    _users_frames(te)
    text = "".join(te.format())
    # Our exception types read as their own name: a module path says nothing to the user.
    return re.sub(r"^kernel_server(\.\w+)*\.(\w+:)", r"\2", text, flags=re.M)


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
    with _exclusive():
        try:
            with _deadline(spec.timeout_s):
                return _run_step(spec)
        except StepTimeout as exc:  # raised outside the user's code (loading inputs, pickling)
            return StepOutcome(
                False, error=str(exc), error_type="StepTimeout", worker=worker_address()
            )


def _run_step(spec: StepSpec) -> StepOutcome:
    filename = cell_filename(spec.workflow_id)
    lines = spec.cell_source.splitlines(keepends=True)
    linecache.cache[filename] = (len(spec.cell_source), None, lines, filename)
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
    rebind_cell_functions(ns, ns, fill=True)
    primitives = make_primitives(spec.workflow_id, spec.step_id, spec.shots, spec.capability)
    if spec.kind != "classical" or "sample" not in ns:
        ns.update(primitives)
    # Pad so that line numbers in tracebacks are the cell's own.
    code = "\n" * (spec.lineno - 1) + spec.code
    try:
        compiled = compile(code, filename, "exec")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            with _step_context(primitives):
                exec(compiled, ns)
    except (Exception, SystemExit, StepTimeout) as exc:  # whatever the user's code raises
        # What the step assigned before the error is kept, as Python keeps it.
        partial, _ = _pickle_writes(spec, ns)
        return StepOutcome(
            False,
            outputs=partial,
            stdout=out.getvalue(),
            error=user_traceback(exc),
            error_type=type(exc).__name__,
            pid=os.getpid(),
            worker=worker_address(),
        )
    outputs, problems = _pickle_writes(spec, ns)
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


def _pickle_writes(spec: StepSpec, ns: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """The step's values of the names it may write, and a line per value that cannot travel."""
    from kernel_server.core.dataflow import DELETED

    outputs: dict[str, bytes] = {}
    problems = []
    for name in spec.writes:
        if name not in ns:
            if name in spec.deletes:
                outputs[name] = DELETED  # ``del name`` ran: the notebook loses it too
            continue  # bound only on a branch that did not run
        mark_origin(ns[name])
        try:
            outputs[name] = cloudpickle.dumps(ns[name])
        except Exception as exc:  # pickling raises many types
            problems.append(f"  {name} ({type(ns[name]).__name__}): {exc}")
    return outputs, problems


def warm_up() -> int:
    """Import the heavy modules once, so the first real step does not pay for them."""
    import qiskit  # noqa: F401

    return os.getpid()
