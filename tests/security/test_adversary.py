"""A second user of a shared orchestrator attacks the first from inside their own cell.

``adversary/attack_cell.py`` is the attacker's cell; ``adversary/scenario.py`` sets up the victim
(a finished workflow whose results hold a marker, a running one that publishes events) and runs
the attack against a live orchestrator. The same scenario runs against the commit before the
isolation work, to show which attacks the fix closed: an attack that cannot win anywhere would
prove nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from kernel_server.security import sandbox

REPO = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).resolve().parent / "adversary" / "scenario.py"
# The last commit before isolation (capabilities, per-user sandboxed pools, sealed events, typed
# messages, QPY circuits).
BEFORE_THE_FIX = "0eaf242d359aba1cb3ede8414d68d71e237027cc"
ATTACKS = (
    "use_found_keys",  # any key or capability found in memory, environment, globals, files
    "own_key_on_victim",  # the attacker's own key on the victim's status, results, plans, cancel
    "lie_about_width",  # a circuit past max_qubits declared 1 qubit wide
    "pickle_into_qpu_workers",  # "circuits" that run code where they are loaded
    "read_victim_events",  # a raw subscriber to every topic
    "files_with_victim_results",  # the orchestrator's database and images
)
WON_BEFORE = {
    "use_found_keys",
    "lie_about_width",
    "pickle_into_qpu_workers",
    "read_victim_events",
    "files_with_victim_results",
}


def run_scenario(home: Path, source_root: Path, *flags: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    env.pop("QONDUCTOR_HOME", None)
    proc = subprocess.run(
        [sys.executable, str(SCENARIO), str(home), *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    assert proc.returncode == 0, f"{last}\n{proc.stderr[-3000:]}"
    return json.loads(last)


@pytest.mark.skipif(sandbox.abi_version() < 1, reason="no Landlock here: steps run unconfined")
@pytest.mark.parametrize("endpoint", ["loopback", "curve"])
def test_every_attack_of_a_second_user_fails(tmp_path, endpoint):
    flags = ["--curve"] if endpoint == "curve" else []
    report = run_scenario(tmp_path / "home", REPO, *flags)
    # The scanner finds what is there to find (the attacker's own key), and the listener heard
    # the victim's events go by: the attacks below failed for want of anything to take.
    assert report["own_key_found"]["won"], report["scan"]
    assert report["read_victim_events"]["frames"] > 0
    for name in ATTACKS:
        assert not report[name]["won"], f"{name}: {report[name]['detail']}"
    assert report["victim_still_running"] and report["victim_results_intact"]


def _checkout(commit: str, into: Path) -> Path | None:
    """The tree of ``commit`` in ``into``; None where this clone does not have it."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def test_the_same_attacks_won_before_the_fix(tmp_path):
    old = _checkout(BEFORE_THE_FIX, tmp_path / "before")
    if old is None:
        shallow = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if shallow != "false":  # a shallow clone or no git at all: nothing to compare with
            pytest.skip(f"this checkout lacks commit {BEFORE_THE_FIX[:7]}")
        pytest.fail(f"commit {BEFORE_THE_FIX[:7]} cannot be checked out")
    report = run_scenario(tmp_path / "home", old)
    won = {name for name in ATTACKS if report[name]["won"]}
    assert won == WON_BEFORE, {name: report[name]["detail"] for name in ATTACKS}
