"""The ``%qonductor`` subcommand table: each subcommand's own parser, ``-h`` and wrong arguments
(no orchestrator: parsing fails, or prints, before anything is asked of one)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from qonductor_jupyter import commands

NAMES = ("server", "status", "watch", "jobs", "plans", "result", "cancel", "choose", "images")


def test_every_subcommand_has_its_own_parser_and_the_overview_lists_it(capsys):
    assert set(NAMES) | {"fleet", "workflows"} == set(commands.COMMANDS)
    assert commands.COMMANDS["workflows"] is commands.COMMANDS["jobs"]
    assert commands.run_line("-h", None) is None
    text = capsys.readouterr().out
    for name in (*NAMES, "fleet"):
        assert f"%qonductor {name}" in text
    assert "%qonductor choose WORKFLOW_ID STEP PLAN" in text and "(also: workflows)" in text


@pytest.mark.parametrize(
    ("line", "usage"),
    [
        ("cancel -h", "usage: %qonductor cancel [-h] WORKFLOW_ID"),
        ("choose --help", "usage: %qonductor choose [-h] WORKFLOW_ID STEP PLAN"),
        ("server -h", "usage: %qonductor server [-h] [{start,stop,status}]"),
        ("status -h", "usage: %qonductor status [-h] [WORKFLOW_ID]"),
    ],
)
def test_dash_h_prints_the_subcommands_usage_and_runs_nothing(line, usage, capsys):
    assert commands.run_line(line, None) is None
    text = capsys.readouterr().out
    assert text.startswith(usage)
    assert "positional arguments" in text and "-h, --help" in text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("cancel", "the following arguments are required: WORKFLOW_ID"),
        ("cancel wf-1 wf-2", "unrecognized arguments: wf-2"),
        ("choose wf-1 first 0", "argument STEP: a step number (0, 1, ...), not 'first'"),
        ("choose wf-1 1", "the following arguments are required: PLAN"),
        ("server restart", "argument action: invalid choice: 'restart'"),
        ("jobs --limit 3", "unrecognized arguments: --limit 3"),
    ],
)
def test_a_wrong_argument_is_argparses_message_as_a_usage_error(line, message):
    with pytest.raises(UsageError) as info:
        commands.run_line(line, None)
    text = str(info.value)
    name = line.split()[0]
    assert text.startswith(f"usage: %qonductor {name} [-h]")  # the usage line first
    assert f"%qonductor {name}: error: {message}" in text


def test_an_unknown_subcommand_names_the_known_ones():
    with pytest.raises(UsageError, match="unknown command 'frobnicate'; try: server, status"):
        commands.run_line("frobnicate", None)
