"""``%%qonductor`` and ``%qonductor``: argument parsing only; the work is in ``api``."""

from __future__ import annotations

import ast
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import api
from .errors import QonductorError
from .report import WorkflowReport
from .settings import PRIORITIES, Qonductor

LIVE_AFTER_S = 0.5  # a cell still waiting after this long shows the live job-status widget

LINE_COMMANDS = (
    "server start|stop|status, status [ID], watch ID, jobs, plans ID, choose ID STEP PLAN, "
    "result ID, cancel ID, images, fleet"
)


def widgets_available(shell: Any) -> bool:
    """True in a kernel with a frontend that can show widgets (not plain IPython)."""
    return getattr(shell, "kernel", None) is not None


@magics_class
class QonductorMagics(Magics):
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
    @cell_magic("qonductor")
    def qonductor_cell(self, line: str, cell: str) -> None:
        """Run the cell as a hybrid workflow on the Qonductor orchestrator.

        Statements that call sample(...) or estimate(...) become quantum steps; the rest runs in
        classical steps; every name the cell assigns is set in the notebook when it finishes.
        """
        args = parse_argstring(self.qonductor_cell, line)
        if args.shots is not None and args.shots < 1:
            raise UsageError(f"--shots must be positive, got {args.shots}")
        if args.plan is not None:
            args.plan = _plan_option(args.plan)
        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"-o takes a Python name, got {args.output!r}")
        return self._run(args, self.shell.transform_cell(cell))

    def _run(self, args: Any, source: str) -> Any:
        from .splitter import CellSyntaxError

        ns = self.shell.user_ns
        try:
            graph = api.split_for(source, ns)
        except CellSyntaxError as exc:
            raise QonductorError("the cell is not valid Python:\n" + exc.pretty()) from None
        except ValueError as exc:  # unsupported constructs (star imports)
            raise QonductorError(str(exc)) from None
        if args.dry_run:
            print(graph.describe())
            return None
        if not graph.has_quantum:
            print(
                "No sample() or estimate() call in this cell: it runs in the kernel as ordinary "
                "Python, not on the orchestrator."
            )
            return self._run_in_kernel(source)
        config = self._config(args.config)
        workflow_id, _ = api.submit_cell(
            source,
            ns,
            config=config,
            name=args.name,
            graph=graph,
            shots=args.shots if args.shots is not None else self.settings.default_shots,
            priority=args.priority or self.settings.default_priority,
            seed=args.seed,
            placement=args.placement or self.settings.placement,
            plan=args.plan if args.plan is not None else self.settings.default_plan,
        )
        if args.plan == "ask":
            return self._ask(workflow_id, args, ns)
        if args.no_wait or args.output:
            from .handle import WorkflowHandle

            handle = WorkflowHandle(workflow_id, namespace=ns)
            if args.output:
                ns[args.output] = handle
            if widgets_available(self.shell):
                from .widgets import JobStatusWidget

                display(JobStatusWidget(workflow_id))
            print(
                f"Workflow {workflow_id} submitted; its names are set when it completes. "
                f"{args.output or 'The handle'}.status(), .result(timeout=), .cancel(), "
                ".wait_interactive()"
            )
            return handle if not args.output else None
        timeout = args.timeout if args.timeout is not None else self.settings.timeout
        try:
            reply = None
            if self.settings.live_status and widgets_available(self.shell):
                # A cell done within LIVE_AFTER_S shows its report only (building the live
                # widget would cost more than the cell); a longer one gets it from then on: it
                # redraws from the orchestrator's events on its own thread.
                reply = api.final_within(workflow_id, min(LIVE_AFTER_S, timeout or LIVE_AFTER_S))
                if reply is None:
                    from .widgets import JobStatusWidget

                    display(JobStatusWidget(workflow_id))
            if reply is None:
                reply = api.wait(workflow_id, timeout)
        except (KeyboardInterrupt, TimeoutError) as exc:
            # The workflow is safe on the orchestrator; tell the user how to get at it.
            why = "Interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            raise QonductorError(
                f"{why}. Workflow {workflow_id} goes on running on the orchestrator: get its "
                f"values with qonductor_jupyter.workflow_results({workflow_id!r}) or stop it "
                f"with %qonductor cancel {workflow_id}"
            ) from None
        if reply.stdout:
            sys.stdout.write(reply.stdout)
        applied = api.bring_back(workflow_id, reply, ns)
        if reply.state != "done":
            # The steps that ran are worth seeing beside the error (what ran where, plans).
            display(WorkflowReport.from_reply(reply, applied.names))
            api.raise_final(reply, applied)
        display(WorkflowReport.from_reply(reply, applied.names, applied.notes()))
        return _last_value(source, ns)

    def _run_in_kernel(self, source: str) -> Any:
        """Run a cell without quantum calls here, as a plain cell runs: its last expression is
        the cell's value, and an error fails the cell, shown from the user's own lines."""
        shell = self.shell
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        filename = shell.compile.cache(source, shell.execution_count)
        try:
            exec(compile(tree, filename, "exec"), shell.user_global_ns, shell.user_ns)
            if last is not None:
                expression = ast.Expression(last.value)
                return eval(
                    compile(expression, filename, "eval"), shell.user_global_ns, shell.user_ns
                )
        except Exception as exc:
            _show_from(exc, filename, shell)
            raise
        return None

    def _ask(self, workflow_id: str, args: Any, ns: dict[str, Any]) -> Any:
        """--plan ask: return at once; the run starts when a plan is chosen."""
        from .handle import WorkflowHandle

        handle = WorkflowHandle(workflow_id, namespace=ns)
        if args.output:
            ns[args.output] = handle
        if widgets_available(self.shell):
            from .plan_widget import PlanSelectionWidget

            display(
                PlanSelectionWidget(
                    workflow_id, preference=args.priority or self.settings.default_priority
                )
            )
        else:
            print(
                f"Workflow {workflow_id} waits for a plan per quantum step: see them with "
                f"%qonductor plans {workflow_id}, pick with %qonductor choose {workflow_id} "
                "STEP PLAN; its names are set when it completes."
            )
        return handle if not args.output else None

    def _config(self, spec: list[str] | None) -> dict[str, Any] | str | None:
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

    @magic_arguments()
    @argument("command", nargs="?", default="status", help=LINE_COMMANDS)
    @argument("rest", nargs="*", help="arguments of the command (a workflow ID, a server action)")
    @line_magic("qonductor")
    def qonductor_line(self, line: str) -> Any:
        """Manage the orchestrator and look at workflows.

        %qonductor server start|stop|status   the background orchestrator
        %qonductor status [ID]                a workflow's steps (without ID: the server)
        %qonductor watch ID                   a live job-status widget with a Cancel button
        %qonductor jobs                       recent workflows (also: workflows)
        %qonductor plans ID                   the resource plans of a workflow's quantum steps
        %qonductor result ID                  the values a finished workflow assigned
        %qonductor cancel ID                  cancel a workflow and every child job
        %qonductor choose ID STEP PLAN        answer a --plan ask step (a plan number or off)
        %qonductor images                     registered workflow images
        %qonductor fleet                      the QPUs, their queues and calibrations
        """
        from . import cli

        args = parse_argstring(self.qonductor_line, line)
        cmd, rest = args.command, args.rest
        if cmd == "server":
            action = rest[0] if rest else "status"
            if action not in ("start", "stop", "status"):
                raise UsageError("usage: %qonductor server start|stop|status")
            print(cli.server_command(action))
            return None
        if cmd == "images":
            return api.list_images()
        if cmd in ("workflows", "jobs"):
            return api.list_workflows()
        if cmd == "fleet":
            if widgets_available(self.shell):
                from .widgets import FleetOverview

                return FleetOverview()
            return api.fleet()
        if cmd == "status" and not rest:
            print(cli.server_command("status"))
            return None
        if cmd == "choose":
            if len(rest) != 3 or not rest[1].isdigit():
                raise UsageError("usage: %qonductor choose WORKFLOW_ID STEP PLAN")
            plan = api.choose_plan(rest[0], int(rest[1]), rest[2])
            print(f"step {rest[1]} of {rest[0]} runs with plan {plan}")
            return None
        if cmd in ("status", "cancel", "plans", "result", "watch"):
            if len(rest) != 1:
                raise UsageError(f"usage: %qonductor {cmd} WORKFLOW_ID")
            wid = rest[0]
            if cmd == "cancel":
                return api.cancel(wid)
            if cmd == "result":
                return _result(wid)
            if cmd == "watch":
                from .widgets import JobStatusWidget

                api.workflow_info(wid)  # an unknown ID: a clear error, not an empty widget
                return JobStatusWidget(wid)
            info = api.workflow_info(wid)
            report = WorkflowReport.from_reply(info, [])
            return report.plans_only() if cmd == "plans" else report
        raise UsageError(f"unknown command {cmd!r}; try: {LINE_COMMANDS}")


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


def _mapping_literal(text: str) -> dict[str, Any]:
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
    return value


def _last_value(source: str, namespace: dict[str, Any]) -> Any:
    """A cell that ends in a name (``counts``, ``result.x``, ``data[0]``) shows its value, as a
    plain cell does. Only such plain lookups are evaluated again here: a call could repeat
    side effects that already happened on the orchestrator."""
    tree = ast.parse(source)
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


def _result(workflow_id: str) -> Any:
    """``%qonductor result ID``: a finished workflow's values; of a failed or cancelled one, the
    values assigned before it stopped (with the error above them)."""
    from . import api as _api

    info = _api.workflow_info(workflow_id)
    if info.state in ("failed", "cancelled"):
        values = _api.workflow_results(workflow_id, timeout=0.5, partial=True)
        why = "failed" if info.state == "failed" else "was cancelled"
        print(
            f"Workflow {workflow_id} {why}; the values assigned before that "
            f"({', '.join(sorted(values)) or 'none'}):"
        )
        if info.error and info.state == "failed":
            print(info.error.rstrip())
        return values
    return _api.workflow_results(workflow_id, timeout=0.5)
