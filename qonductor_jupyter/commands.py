"""The subcommands of the ``%qonductor`` line magic, in a table: one function and one argparse
parser each (the shape of jupysql's ``%sqlcmd``).

``%qonductor NAME -h`` prints that subcommand's usage, ``%qonductor -h`` the list of them. A wrong
argument is argparse's own message (the usage line and what is wrong) as a UsageError, which
IPython shows without a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.utils.process import arg_split

from kernel_server.core.status import ImageSummary, WorkflowSummary
from kernel_server.wire.messages import Cancelled

from . import api
from .report import WorkflowReport

Argument = tuple[tuple[str, ...], dict[str, Any]]
Run = Callable[[argparse.Namespace, Any], Any]  # (arguments, shell) -> what the line shows


def widgets_available(shell: Any) -> bool:
    """True in a kernel with a frontend that can show widgets (not plain IPython)."""
    return getattr(shell, "kernel", None) is not None


class _HelpShown(Exception):
    """``-h`` printed the usage; the subcommand has nothing left to do."""


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser. argparse would exit the process on ``-h`` and on a bad argument;
    in a kernel ``-h`` returns to the notebook and a bad argument is a UsageError."""

    def __init__(self, name: str, summary: str) -> None:
        super().__init__(prog=f"%qonductor {name}", description=summary)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, end="")
        raise _HelpShown


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    run: Run
    parser: CommandParser
    aliases: tuple[str, ...] = ()

    def usage(self) -> str:
        """The usage line without ``usage:`` and ``[-h]``: ``%qonductor choose WORKFLOW_ID ...``."""
        return self.parser.format_usage().removeprefix("usage: ").replace(" [-h]", "").strip()


COMMANDS: dict[str, Command] = {}  # by name and by alias


def arg(*flags: str, **options: Any) -> Argument:
    """One ``add_argument`` of a subcommand's parser."""
    return flags, options


def command(
    name: str, summary: str, *arguments: Argument, aliases: tuple[str, ...] = ()
) -> Callable[[Run], Run]:
    """Enter the decorated function in the table as subcommand ``name``, with its parser."""

    def register(run: Run) -> Run:
        parser = CommandParser(name, summary)
        for flags, options in arguments:
            parser.add_argument(*flags, **options)
        entry = Command(name, summary, run, parser, aliases)
        for key in (name, *aliases):
            COMMANDS[key] = entry
        return run

    return register


def run_line(line: str, shell: Any) -> Any:
    """``%qonductor LINE``: run the subcommand its first word names (``status`` if none)."""
    words = arg_split(line) or ["status"]
    name, rest = words[0], words[1:]
    if name in ("-h", "--help"):
        print(overview())
        return None
    entry = COMMANDS.get(name)
    if entry is None:
        raise UsageError(
            f"unknown command {name!r}; try: {', '.join(_unique())} (%qonductor -h says more)"
        )
    try:
        args = entry.parser.parse_args(rest)
    except _HelpShown:
        return None
    return entry.run(args, shell)


def _unique() -> dict[str, Command]:
    return {entry.name: entry for entry in COMMANDS.values()}


def overview() -> str:
    """Every subcommand with its arguments and what it does."""
    lines = ["Manage the orchestrator and look at workflows (%qonductor SUBCOMMAND -h for one):"]
    entries = _unique().values()
    width = max(len(entry.usage()) for entry in entries)
    for entry in entries:
        also = f" (also: {', '.join(entry.aliases)})" if entry.aliases else ""
        lines.append(f"  {entry.usage():<{width}}  {entry.summary}{also}")
    return "\n".join(lines)


def _step_number(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a step number (0, 1, ...), not {text!r}")
    return int(text)


WORKFLOW_ID = arg("workflow_id", metavar="WORKFLOW_ID", help="a workflow id (%%qonductor jobs)")


@command(
    "server",
    "start, stop or show the background orchestrator",
    arg("action", nargs="?", default="status", choices=("start", "stop", "status")),
)
def server(args: argparse.Namespace, shell: Any) -> None:
    from . import cli

    print(cli.server_command(args.action))


@command(
    "status",
    "a workflow's steps (without an id: the orchestrator)",
    arg("workflow_id", nargs="?", metavar="WORKFLOW_ID", help="a workflow id (%%qonductor jobs)"),
)
def status(args: argparse.Namespace, shell: Any) -> WorkflowReport | None:
    if args.workflow_id is None:
        from . import cli

        print(cli.server_command("status"))
        return None
    return WorkflowReport.from_reply(api.workflow_info(args.workflow_id), [])


@command("watch", "a live job-status widget with a Cancel button", WORKFLOW_ID)
def watch(args: argparse.Namespace, shell: Any) -> Any:
    from .widgets import JobStatusWidget

    api.workflow_info(args.workflow_id)  # an unknown ID: a clear error, not an empty widget
    return JobStatusWidget(args.workflow_id)


@command("jobs", "recent workflows", aliases=("workflows",))
def jobs(args: argparse.Namespace, shell: Any) -> list[WorkflowSummary]:
    return api.list_workflows()


@command("plans", "the resource plans of a workflow's quantum steps", WORKFLOW_ID)
def plans(args: argparse.Namespace, shell: Any) -> Any:
    return WorkflowReport.from_reply(api.workflow_info(args.workflow_id), []).plans_only()


@command("result", "the values a finished workflow assigned", WORKFLOW_ID)
def result(args: argparse.Namespace, shell: Any) -> dict[str, Any]:
    """Of a failed or cancelled workflow, the values assigned before it stopped (with the error
    above them)."""
    from kernel_server.core.status import WorkflowState

    workflow_id = args.workflow_id
    info = api.workflow_info(workflow_id)
    if info.state in (WorkflowState.FAILED, WorkflowState.CANCELLED):
        values = api.workflow_results(workflow_id, timeout=0.5, partial=True)
        why = "failed" if info.state == WorkflowState.FAILED else "was cancelled"
        print(
            f"Workflow {workflow_id} {why}; the values assigned before that "
            f"({', '.join(sorted(values)) or 'none'}):"
        )
        if info.error and info.state == WorkflowState.FAILED:
            print(info.error.rstrip())
        return values
    return api.workflow_results(workflow_id, timeout=0.5)


@command("cancel", "cancel a workflow and every child job", WORKFLOW_ID)
def cancel(args: argparse.Namespace, shell: Any) -> Cancelled:
    return api.cancel(args.workflow_id)


@command(
    "choose",
    "answer a --plan ask step: a plan number, or off",
    WORKFLOW_ID,
    arg("step", metavar="STEP", type=_step_number, help="the step's number"),
    arg("plan", metavar="PLAN", help="a plan number (%%qonductor plans ID) or off"),
)
def choose(args: argparse.Namespace, shell: Any) -> None:
    plan = api.choose_plan(args.workflow_id, args.step, args.plan)
    print(f"step {args.step} of {args.workflow_id} runs with plan {plan}")


@command("images", "registered workflow images")
def images(args: argparse.Namespace, shell: Any) -> list[ImageSummary]:
    return api.list_images()


@command("fleet", "the QPUs, their queues and calibrations")
def fleet(args: argparse.Namespace, shell: Any) -> Any:
    if widgets_available(shell):
        from .widgets import FleetOverview

        return FleetOverview()
    return api.fleet()
