"""Pool workers die with their orchestrator, also one killed before a worker's initializer ran."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import orchestrator_in, wait_for

from qonductor_jupyter.client import pid_alive

REPO = Path(__file__).resolve().parents[2]

# Stands in for the orchestrator: the real pools (LocalCompute), one worker each. A spawned worker
# first imports its parent's main module, as ``__mp_main__``: there this script holds it, like slow
# imports under load, until the test creates the gate file.
PARENT = """
import asyncio, json, os, sys, time

if __name__ == "__mp_main__":
    while not os.path.exists(os.environ["LIFELINE_GATE"]):
        time.sleep(0.01)
    if os.environ.get("LIFELINE_NO_PDEATHSIG"):  # only the polling thread is left to notice
        import kernel_server.core.lifeline as lifeline
        lifeline.die_with_parent = lambda sig=None: False


def main():
    from kernel_server.compute.local import LocalCompute

    async def start():
        compute = LocalCompute(step_workers=1, qpu_workers=1)
        await compute.start("tcp://127.0.0.1:9")  # workers connect lazily
        for pool in (compute.step_pool, compute.qpu_pool):
            pool.submit(os.getpid)  # a pool starts its worker on the first task
        print(json.dumps([*compute.step_pool._processes, *compute.qpu_pool._processes]), flush=True)
        if os.environ.get("LIFELINE_GATE_OPEN"):
            open(os.environ["LIFELINE_GATE"], "w").close()
        time.sleep(600)

    asyncio.run(start())


if __name__ == "__main__":
    main()
"""


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(procs, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in procs if not _gone(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in procs if not _gone(p)]


def _kill(procs) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _start_parent(tmp_path, **env):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    gate = tmp_path / "gate"
    environ = {**os.environ, "PYTHONPATH": str(REPO), "LIFELINE_GATE": str(gate), **env}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, env=environ, cwd=str(tmp_path)
    )
    line = parent.stdout.readline()
    assert line, "the parent process died before starting its pools"
    workers = [psutil.Process(pid) for pid in json.loads(line)]
    family = psutil.Process(parent.pid).children(recursive=True)  # + the resource tracker
    return parent, gate, workers, family


@pytest.mark.parametrize("pdeathsig", [True, False], ids=["pdeathsig", "watching-thread"])
def test_workers_exit_when_the_orchestrator_died_before_their_initializer_ran(tmp_path, pdeathsig):
    env = {} if pdeathsig else {"LIFELINE_NO_PDEATHSIG": "1"}
    parent, gate, workers, family = _start_parent(tmp_path, **env)
    try:
        assert len(workers) == 2
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        # The window: the orchestrator is gone, its workers are still in their imports.
        time.sleep(0.3)
        assert not [w for w in workers if _gone(w)]
        assert all(w.ppid() != parent.pid for w in workers)  # orphans now
        gate.touch()
        alive = _wait_gone(workers, 3.0)
        assert not alive, f"orphaned pool workers live on: {[p.pid for p in alive]}"
    finally:
        parent.kill()
        parent.wait(10)
        _kill(family)


def test_workers_live_with_their_orchestrator_and_die_with_it(tmp_path):
    parent, gate, workers, family = _start_parent(tmp_path, LIFELINE_GATE_OPEN="1")
    try:
        time.sleep(2.0)  # imports done, initializers run, a few polls of the lifeline
        assert not [w for w in workers if _gone(w)]
        assert all(w.ppid() == parent.pid for w in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert not _wait_gone(workers, 3.0)
    finally:
        parent.kill()
        parent.wait(10)
        _kill(family)


def _pool_processes(pid: int) -> list:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "multiprocessing" in " ".join(child.cmdline()):  # spawn_main, resource_tracker
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def test_kill_9_of_a_just_started_orchestrator_leaves_no_pool_process(tmp_path):
    with orchestrator_in(tmp_path) as info:
        # Kill it as soon as its pools have started their workers (the warm-up, right after the
        # fleet loaded): some are probably still importing.
        wait_for(lambda: len(_pool_processes(info.pid)) >= 3, 60)
        procs = _pool_processes(info.pid)
        try:
            os.kill(info.pid, signal.SIGKILL)
            wait_for(lambda: not pid_alive(info.pid), 10)
            alive = _wait_gone(procs, 5.0)
            assert not alive, [(p.pid, p.cmdline()) for p in alive]
        finally:
            _kill(procs)
