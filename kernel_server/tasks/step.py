"""Run one workflow step in a worker process.

A step is a piece of the user's cell. It runs in a fresh namespace holding exactly the values it
reads, with the ``sample`` and ``estimate`` of ``primitives.py``, under the step's timeout; what it
writes goes back pickled, and a failure comes back as the user's own traceback (their frames, not
ours). ``bootstrap.py`` prepares the process these steps run in.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import re
import signal
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
from kernel_server.core.circuits import DEFAULT_SHOTS
from kernel_server.tasks.primitives import make_primitives, step_context
from kernel_server.tasks.process import exclusive, worker_address

# Frames of these packages are ours, not the user's: a traceback shows the user's code only.
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_OWN_CODE = (f"{_PACKAGE_DIR}{os.sep}", f"{_PACKAGE_DIR.parent / 'qonductor_jupyter'}{os.sep}")


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
    shots: int = DEFAULT_SHOTS
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
    with exclusive():
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
    ns: dict[str, object] = {"__name__": CELL_MODULE, "__builtins__": __builtins__}
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
        ns.update(primitives.names())
    # Pad so that line numbers in tracebacks are the cell's own.
    code = "\n" * (spec.lineno - 1) + spec.code
    try:
        compiled = compile(code, filename, "exec")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            with step_context(primitives):
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


def _pickle_writes(spec: StepSpec, ns: dict[str, object]) -> tuple[dict[str, bytes], list[str]]:
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
