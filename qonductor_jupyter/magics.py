"""``%%qonductor`` and ``%qonductor``: option parsing and display; the work is in ``api``.

The cell magic hands the cell to ``api.run_cell`` and shows what came of it; the line magic's
subcommands are a table in ``commands``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from kernel_server.core.circuits import check_shots
from kernel_server.core.deployment import (
    PRIORITIES,
    ConfigError,
    ConfigSource,
    DeploymentConfig,
    load_config,
)
from kernel_server.core.status import WorkflowState

from . import api, commands
from .commands import widgets_available
from .report import WorkflowReport
from .settings import Qonductor

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _named(marker: Any, name: str) -> Callable[[_Method], _Method]:
    """``cell_magic(name)`` / ``line_magic(name)``, typed: IPython 9 annotates the named form
    with an unsolved type variable, so mypy reads the decorator as taking ``Never``."""
    return cast(Callable[[_Method], _Method], marker(name))


if TYPE_CHECKING:
    from .handle import WorkflowHandle

NOT_QUANTUM = (
    "No sample() or estimate() call in this cell: it runs in the kernel as ordinary Python, not "
    "on the orchestrator."
)


def show_submission(
    handle: WorkflowHandle,
    shell: Any,
    name: str | None = None,
    ask: bool = False,
    preference: str = "balanced",
) -> None:
    """Show a workflow its cell did not wait for: where widgets render, its live job status (or
    its plan-selection widget, for ``--plan ask``); in text, what to do with it."""
    workflow_id = handle.workflow_id
    widgets = widgets_available(shell)
    if ask and widgets:
        from .plan_widget import PlanSelectionWidget

        display(PlanSelectionWidget(workflow_id, preference=preference))
    elif ask:
        print(
            f"Workflow {workflow_id} waits for a plan per quantum step: see them with "
            f"%qonductor plans {workflow_id}, pick with %qonductor choose {workflow_id} "
            "STEP PLAN; its names are set when it completes."
        )
    else:
        if widgets:
            show_live(workflow_id)
        print(
            f"Workflow {workflow_id} submitted; its names are set when it completes. "
            f"{name or 'The handle'}.status(), .result(timeout=), .cancel(), .wait_interactive()"
        )


def show_live(workflow_id: str) -> None:
    """The live job-status widget: it redraws from the orchestrator's events on its own thread."""
    from .widgets import JobStatusWidget

    display(JobStatusWidget(workflow_id))


@magics_class
class QonductorMagics(Magics):
    shell: Any  # IPython's Magics declares it None until a shell is given

    def __init__(self, shell: Any = None, settings: Qonductor | None = None) -> None:
        super().__init__(shell)
        self.settings = settings if settings is not None else Qonductor()

    @magic_arguments()
    @argument(
        "--dry-run", action="store_true", help="print the steps and their dependencies; run nothing"
    )
    @argument("--shots", type=int, default=None, help="shots per circuit (default 4000)")
    @argument(
        "--priority",
        choices=PRIORITIES,
        default=None,
        help="what the QPU placement favours (default balanced)",
    )
    @argument("--seed", type=int, default=None, help="seed the simulated QPUs (reproducible runs)")
    @argument("--name", default=None, help="name of the workflow image")
    @argument(
        "--config",
        default=None,
        nargs="+",
        help="deployment config: a YAML file, the name of a dict variable, or the mapping "
        "itself ({qpu: {min_qubits: 20}})",
    )
    @argument("--placement", default=None, help="QPU placement policy (a named baseline)")
    @argument(
        "--plan",
        default=None,
        help="resource plan per quantum step: auto (by --priority, default), ask (pick in a "
        "widget; the cell returns at once), N (plan N of the list shown under the cell) or off "
        "(unmitigated, scheduler's QPU)",
    )
    @argument("--timeout", type=float, default=None, help="give up waiting after this many s")
    @argument(
        "--no-wait",
        action="store_true",
        help="return a job handle at once; the cell's names are set when it completes",
    )
    @argument("-o", "--output", default=None, help="store the job handle under this name")
    @_named(cell_magic, "qonductor")
    def qonductor_cell(self, line: str, cell: str) -> None:
        """Run the cell as a hybrid workflow on the Qonductor orchestrator.

        Statements that call sample(...) or estimate(...) become quantum steps; the rest runs in
        classical steps; every name the cell assigns is set in the notebook when it finishes.
        """
        args = parse_argstring(self.qonductor_cell, line)
        try:
            check_shots(args.shots, "--shots")
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        if args.plan is not None:
            args.plan = _plan_option(args.plan)
        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"-o takes a Python name, got {args.output!r}")
        return self._run(args, self.shell.transform_cell(cell))

    def _run(self, args: Any, source: str) -> Any:
        shell, settings = self.shell, self.settings
        options = self._options(args)
        ask = options["plan"] == "ask"  # the cell returns at once; the run starts on a choice
        live = settings.live_status and widgets_available(shell)
        run = api.run_cell(
            source,
            shell.user_ns,
            config=self._config(args.config),
            name=args.name,
            dry_run=args.dry_run,
            detach=bool(args.no_wait or args.output or ask),
            timeout=args.timeout if args.timeout is not None else settings.timeout,
            on_slow=show_live if live else None,
            **options,
        )
        if args.dry_run:
            print(run.cell.graph.describe())
            return None
        if run.workflow_id is None:
            print(NOT_QUANTUM)
            return self._run_in_kernel(run.cell)
        if run.handle is not None:
            if args.output:
                shell.user_ns[args.output] = run.handle
            preference = options["priority"]
            show_submission(run.handle, shell, args.output, ask=ask, preference=preference)
            return run.handle if not args.output else None
        return self._finish(run)

    def _options(self, args: Any) -> dict[str, Any]:
        """The run's options: the cell's, else the settings' defaults."""
        settings = self.settings
        return {
            "shots": args.shots if args.shots is not None else settings.default_shots,
            "priority": args.priority or settings.default_priority,
            "seed": args.seed,
            "placement": args.placement or settings.placement,
            "plan": args.plan if args.plan is not None else settings.default_plan,
        }

    def _finish(self, run: api.CellRun) -> Any:
        """Under a cell that was waited for: its report; then its error, or its value."""
        reply, applied = run.reply, run.applied
        assert reply is not None and applied is not None
        if reply.state is not WorkflowState.DONE:
            # The steps that ran are worth seeing beside the error (what ran where, plans).
            display(WorkflowReport.from_reply(reply, applied.names))
            api.raise_final(reply, applied)
        display(WorkflowReport.from_reply(reply, applied.names, applied.notes()))
        return _last_value(run.cell.tree, self.shell.user_ns)

    def _run_in_kernel(self, cell: api.CellSplit) -> Any:
        """Run a cell without quantum calls here, as a plain cell runs: its last expression is
        the cell's value, and an error fails the cell, shown from the user's own lines."""
        shell = self.shell
        body = list(cell.tree.body)  # the split's tree, left as it is
        last = body[-1] if body and isinstance(body[-1], ast.Expr) else None
        if last is not None:
            body.pop()
        filename = shell.compile.cache(cell.source, shell.execution_count)
        try:
            module = ast.Module(body=body, type_ignores=[])
            exec(compile(module, filename, "exec"), shell.user_global_ns, shell.user_ns)
            if last is not None:
                expression = ast.Expression(last.value)
                return eval(
                    compile(expression, filename, "eval"), shell.user_global_ns, shell.user_ns
                )
        except Exception as exc:
            _show_from(exc, filename, shell)
            raise
        return None

    def _config(self, spec: list[str] | None) -> ConfigSource:
        """``--config``: the name of a dict in the notebook, the mapping itself (a Python or
        YAML literal), or a YAML file (load_config says clearly if it does not exist)."""
        if not spec:
            return None
        text = " ".join(spec).strip()
        value = self.shell.user_ns.get(text)
        if isinstance(value, dict):
            return value
        if text.startswith("{"):
            return _mapping_literal(text)
        return text

    @_named(line_magic, "qonductor")
    def qonductor_line(self, line: str) -> Any:
        return commands.run_line(line, self.shell)

    qonductor_line.__doc__ = commands.overview()


def _plan_option(value: str) -> str | int:
    """``--plan``, refused at once where no step could ever have that plan."""
    from kernel_server.core.plans import PLAN_LIMIT, PlanChoiceError, parse_plan_option

    try:
        plan = parse_plan_option(value)
    except PlanChoiceError as exc:
        raise UsageError(str(exc)) from None
    if isinstance(plan, int) and plan >= PLAN_LIMIT:
        raise UsageError(
            f"--plan {plan}: a step has at most {PLAN_LIMIT} plans (0-{PLAN_LIMIT - 1}); see a "
            "step's plans with --plan ask or %qonductor plans ID, or use --plan auto"
        )
    return plan


def _mapping_literal(text: str) -> DeploymentConfig:
    """``{'qpu': {'min_qubits': 20}}`` (Python) or ``{qpu: {min_qubits: 20}}`` (YAML)."""
    import yaml

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"--config {text}: not a mapping ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--config {text}: not a mapping")
    try:
        return load_config(value)
    except ConfigError as exc:
        raise UsageError(f"--config {text}: {exc}") from None


def _last_value(tree: ast.Module, namespace: dict[str, object]) -> Any:
    """A cell that ends in a name (``counts``, ``result.x``, ``data[0]``) shows its value, as a
    plain cell does. Only such plain lookups are evaluated again here: a call could repeat
    side effects that already happened on the orchestrator."""
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    node = tree.body[-1].value
    probe = node
    while isinstance(probe, (ast.Attribute, ast.Subscript)):
        if isinstance(probe, ast.Subscript) and not isinstance(probe.slice, ast.Constant):
            return None
        probe = probe.value
    if not isinstance(probe, ast.Name) or probe.id not in namespace:
        return None
    try:
        return eval(compile(ast.Expression(node), "<qonductor cell value>", "eval"), namespace)
    except Exception:  # the value is a courtesy; the cell itself succeeded
        return None


def _show_from(exc: BaseException, filename: str, shell: Any) -> None:
    """Make IPython show ``exc`` from the cell's own first frame: the magic's frames (ours and
    IPython's) are not the user's business. The exception keeps its type, so the kernel's
    reply (and nbconvert, papermill) name the real error."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if tb is None:
        return
    try:
        lines = shell.InteractiveTB.structured_traceback(type(exc), exc, tb, tb_offset=0)
    except Exception:  # a formatter problem must not hide the user's error
        return
    try:
        exc._render_traceback_ = lambda: lines  # type: ignore[attr-defined]
    except AttributeError:  # exceptions without a __dict__
        pass
