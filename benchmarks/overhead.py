"""A %%qonductor cell as a user meets it, against the same circuit on Aer in the same kernel.

    python benchmarks/overhead.py [--repeats 10] [--fleets default,small] [--keep-home]

Per fleet (first ``default``, the 8 QPUs that ``qonductor demo`` and an unconfigured notebook
get, then ``small``), each in its own QONDUCTOR_HOME (a temp dir), in real Jupyter kernels
(jupyter_client + ipykernel, the kernel JupyterLab starts), every cell timed from sending its
execute_request to receiving its execute_reply, cells with default options (``%%qonductor`` with
no flags: 4000 shots, plan auto, the live job-status widget):

1. first cells: the ideal baseline in a fresh kernel of its own; a ``%%qonductor`` cell with no
   orchestrator running (its client starts one: a first-time user's cell); then, with the
   orchestrator warm (two workflows run through it and its processes idle), a fresh kernel's
   ``%load_ext qonductor_jupyter`` and first ``%%qonductor`` cell;
2. ``--repeats`` rounds (rotating order) of warm cells in that kernel, each building its circuit:
   a Bell pair and a 5-qubit GHZ through ``%%qonductor``; the same on the ideal
   ``AerSimulator().run(qc, shots=4000)`` (plus a row with ``transpile(qc, sim)``, which alone
   costs more than the ideal run); the same on ``AerSimulator.from_backend(FakeKolkataV2())``,
   built once beforehand (what a user wanting noise writes); an empty cell (the kernel's own
   round trip); then a signed ping to the orchestrator from the kernel (median of 200).

Medians and p90 of the warm rounds, with ratios to the ideal and noisy baselines of the same
circuit (the machine is noisy: compare within a run). Below each table, where the warm
``%%qonductor`` cells' time went: the orchestrator's job events (``events.ts`` in state.db)
against the kernel's send and reply times (one machine, one clock).
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BELL = """\
from qiskit import QuantumCircuit
qc = QuantumCircuit(2)
qc.h(0)
qc.cx(0, 1)
qc.measure_all()
"""
GHZ5 = """\
from qiskit import QuantumCircuit
qc = QuantumCircuit(5)
qc.h(0)
for q in range(4):
    qc.cx(q, q + 1)
qc.measure_all()
"""
# A circuit the orchestrator has not seen: a fresh angle every run, so nothing it remembers of an
# earlier run (estimates, plans, compiled circuits) applies. What a parameter sweep meets.
NEW = """\
import random
from qiskit import QuantumCircuit
qc = QuantumCircuit(2)
qc.rx(random.uniform(0.5, 2.5), 0)
qc.cx(0, 1)
qc.measure_all()
"""
SAMPLE = "counts = sample(qc)\n"
# What a user writes for each baseline: the ideal simulator takes the circuit as it is (its
# ``transpile`` alone costs more than the whole run: 0.16 s of a 0.19 s cell here, so it is a row
# of its own); a fake device needs its layout and basis gates.
IDEAL = (
    "from qiskit_aer import AerSimulator\n"
    "counts = AerSimulator().run(qc, shots={shots}).result().get_counts()\n"
)
IDEAL_T = (
    "from qiskit import transpile\nfrom qiskit_aer import AerSimulator\nsim = AerSimulator()\n"
    "counts = sim.run(transpile(qc, sim), shots={shots}).result().get_counts()\n"
)
NOISY = "counts = noisy.run(transpile(qc, noisy), shots={shots}).result().get_counts()\n"
NOISY_SETUP = (
    "from qiskit import transpile\nfrom qiskit_aer import AerSimulator\n"
    "from qiskit_ibm_runtime.fake_provider import FakeKolkataV2\n"
    "noisy = AerSimulator.from_backend(FakeKolkataV2())\n"
)
PING = """\
import time as _t
from kernel_server.wire.messages import Ping as _Ping
from qonductor_jupyter.client import get_client as _gc
_c = _gc(); _rtt = []
for _ in range(200):
    _s = _t.perf_counter(); _c.request(_Ping()); _rtt.append(_t.perf_counter() - _s)
print(sorted(_rtt)[100])
"""
Q_BELL, Q_GHZ, Q_NEW = "Bell, %%qonductor", "GHZ-5, %%qonductor", "new angle, %%qonductor"
# a timed cell's label -> (label of its ideal baseline, label of its noisy baseline)
BASELINES = {
    Q_BELL: ("Bell, AerSimulator().run(qc)", "Bell, from_backend(Kolkata) prebuilt"),
    "Bell, AerSimulator() + transpile": (
        "Bell, AerSimulator().run(qc)",
        "Bell, from_backend(Kolkata) prebuilt",
    ),
    Q_GHZ: ("GHZ-5, AerSimulator().run(qc)", "GHZ-5, from_backend(Kolkata) prebuilt"),
    Q_NEW: ("new angle, AerSimulator().run(qc)", "new angle, from_backend(Kolkata) prebuilt"),
}


def kinds(shots: int) -> dict[str, str]:
    """Cell kinds timed in every round, by label (the order of the table)."""
    return {
        "empty cell (kernel round trip)": "pass\n",
        Q_BELL: "%%qonductor\n" + BELL + SAMPLE,
        "Bell, AerSimulator().run(qc)": BELL + IDEAL.format(shots=shots),
        "Bell, AerSimulator() + transpile": BELL + IDEAL_T.format(shots=shots),
        "Bell, from_backend(Kolkata) prebuilt": BELL + NOISY.format(shots=shots),
        Q_GHZ: "%%qonductor\n" + GHZ5 + SAMPLE,
        "GHZ-5, AerSimulator().run(qc)": GHZ5 + IDEAL.format(shots=shots),
        "GHZ-5, from_backend(Kolkata) prebuilt": GHZ5 + NOISY.format(shots=shots),
        Q_NEW: "%%qonductor\n" + NEW + SAMPLE,
        "new angle, AerSimulator().run(qc)": NEW + IDEAL.format(shots=shots),
        "new angle, from_backend(Kolkata) prebuilt": NEW + NOISY.format(shots=shots),
    }


class Kernel:
    """A real Jupyter kernel, driven over its channels like a frontend does."""

    def __init__(self, env: dict[str, str], cwd: Path):
        from jupyter_client import KernelManager

        t = time.perf_counter()
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.start_s = time.perf_counter() - t

    def run(self, code: str, timeout: float = 300.0) -> tuple[float, float, float, list[str]]:
        """(seconds from execute_request to execute_reply, wall send time, wall reply time,
        text outputs); raises on an error in the cell."""
        self._drain()
        sent_wall = time.time()
        t = time.perf_counter()
        msg_id = self.kc.execute(code, store_history=True)
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        elapsed = time.perf_counter() - t
        replied_wall = time.time()
        texts = self._outputs(msg_id)
        if reply["content"]["status"] != "ok":
            content = reply["content"]
            raise RuntimeError(
                f"cell failed: {content.get('ename')}: {content.get('evalue')}\n{code}\n"
                + "".join(texts)
            )
        return elapsed, sent_wall, replied_wall, texts

    def _outputs(self, msg_id: str) -> list[str]:
        """Read iopub up to this cell's idle status; its stream and text outputs."""
        texts = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                texts.append(content["text"])
            elif kind == "error":
                texts.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return texts

    def _drain(self) -> None:
        while True:
            try:
                self.kc.get_iopub_msg(timeout=0.01)
            except queue.Empty:
                return

    def stop(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def wait_idle(pid: int, limit_s: float = 120.0, threshold: float = 8.0) -> float:
    """Wait until the orchestrator and its worker processes use under ``threshold`` % of a core
    over two consecutive half seconds; returns the seconds waited."""
    import psutil

    t = time.perf_counter()
    quiet = 0
    while time.perf_counter() - t < limit_s and quiet < 2:
        try:
            procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in procs:
            try:
                p.cpu_percent(None)
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.5)
        busy = 0.0
        for p in procs:
            try:
                busy += p.cpu_percent(None)
            except psutil.NoSuchProcess:
                pass
        quiet = quiet + 1 if busy < threshold else 0
    return time.perf_counter() - t


def warm_orchestrator(shots: int) -> tuple[float, float, float]:
    """Start the orchestrator and run two workflows through it from this process; returns
    (start-up s, first workflow s, idle wait s)."""
    from qonductor_jupyter import api
    from qonductor_jupyter.client import start_server

    t = time.perf_counter()
    info = start_server()
    startup = time.perf_counter() - t
    wait_idle(info.pid, threshold=15.0)  # the workers import and load the devices
    firsts = []
    for _ in range(2):
        t = time.perf_counter()
        wid, _ = api.submit_cell(BELL + SAMPLE, {}, shots=shots)
        api.collect(wid, {}, timeout=300)
        firsts.append(time.perf_counter() - t)
    return startup, firsts[0], wait_idle(info.pid)


def events_breakdown(db: Path, workflow_id: str, sent: float, replied: float) -> dict[str, float]:
    """Milliseconds per phase of one workflow, from its row and job events in the store."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        created, finished = con.execute(
            "SELECT created_at, finished_at FROM workflows WHERE id=?", (workflow_id,)
        ).fetchone()
        rows = con.execute(
            "SELECT ts, kind, state, job_id FROM events WHERE workflow_id=? ORDER BY seq",
            (workflow_id,),
        ).fetchall()
    finally:
        con.close()
    first: dict[tuple[str, str], float] = {}
    for ts, kind, state, _job in rows:
        group = "qpu" if kind == "qpu" else ("quantum" if kind != "classical" else "classical")
        first.setdefault((group, state), ts)

    def at(group: str, state: str) -> float | None:
        return first.get((group, state))

    phases: dict[str, float] = {}

    def span(label: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            phases[label] = (b - a) * 1000

    span("kernel: execute_request -> invoke accepted", sent, created)
    span("invoke accepted -> classical step queued", created, at("classical", "queued"))
    span("classical step: queued -> running", at("classical", "queued"), at("classical", "running"))
    span("classical step: running in a worker", at("classical", "running"), at("classical", "done"))
    span(
        "classical step done -> quantum step running",
        at("classical", "done"),
        at("quantum", "running"),
    )
    span(
        "quantum step: start -> sample() arrives", at("quantum", "running"), at("qpu", "estimating")
    )
    span("QPU job: plans + estimates + placement", at("qpu", "estimating"), at("qpu", "queued"))
    span("QPU job: queued -> running", at("qpu", "queued"), at("qpu", "running"))
    span("QPU job: noisy simulation", at("qpu", "running"), at("qpu", "done"))
    span("quantum step: sample() returned -> done", at("qpu", "done"), at("quantum", "done"))
    span("workflow done -> execute_reply (kernel)", finished, replied)
    span("total", sent, replied)
    return phases


def last_workflow() -> str:
    from qonductor_jupyter import api

    return api.list_workflows(limit=1)[0].id


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_fleet(fleet: str, repeats: int, shots: int, keep_home: bool) -> None:
    home = Path(tempfile.mkdtemp(prefix=f"qonductor-overhead-{fleet}-"))
    os.environ["QONDUCTOR_HOME"] = str(home)
    os.environ["QONDUCTOR_FLEET"] = fleet
    from qonductor_jupyter import client as client_module

    client_module._default = None  # a new home: a new orchestrator, a new client
    notebooks = home / "notebooks"  # the kernels' working directory
    notebooks.mkdir()
    cells = kinds(shots)
    first: dict[str, float] = {}
    kernel = None
    try:
        # The baseline's first cell in a fresh kernel of its own (it imports qiskit and Aer).
        kernel = Kernel(dict(os.environ), notebooks)
        first["Bell, AerSimulator().run(qc)"] = kernel.run(cells["Bell, AerSimulator().run(qc)"])[0]
        kernel.stop()
        # Cold: no orchestrator yet; the cell's client starts one (what a first-time user meets).
        kernel = Kernel(dict(os.environ), notebooks)
        kernel.run("%load_ext qonductor_jupyter\n")
        first["Bell, %%qonductor, cold orchestrator"] = kernel.run(cells[Q_BELL])[0]
        kernel.stop()
        _, first_wf, _ = warm_orchestrator(shots)
        # Warm orchestrator, fresh kernel: the timed part.
        kernel = Kernel(dict(os.environ), notebooks)
        first["%load_ext qonductor_jupyter"] = kernel.run("%load_ext qonductor_jupyter\n")[0]
        # Its first cell also imports qiskit here, to unpickle the cell's values (qc, counts).
        first["Bell, %%qonductor, warm orchestrator"] = kernel.run(cells[Q_BELL])[0]
        first["from_backend(FakeKolkataV2()) build"] = kernel.run(NOISY_SETUP)[0]
        order = list(cells)
        times: dict[str, list[float]] = {k: [] for k in order}
        breakdowns: dict[str, list[dict[str, float]]] = {Q_BELL: [], Q_GHZ: [], Q_NEW: []}
        db = home / "state.db"
        for i in range(repeats):
            rotated = order[i % len(order) :] + order[: i % len(order)]
            for label in rotated:
                elapsed, sent, replied, _ = kernel.run(cells[label])
                times[label].append(elapsed)
                if label in breakdowns:
                    breakdowns[label].append(events_breakdown(db, last_workflow(), sent, replied))
        ping_s = float("".join(kernel.run(PING)[3]).strip().splitlines()[-1])
        kernel_start = kernel.start_s
    finally:
        if kernel is not None:
            kernel.stop()
        client_module.stop_server()
        client_module._default = None

    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"\nfleet '{fleet}' (QONDUCTOR_FLEET={fleet}): {repeats} warm rounds, default options "
        f"({shots} shots); the orchestrator's next workflow after the cold cell {first_wf:.1f} s; "
        f"fresh kernel ready in {kernel_start:.1f} s"
    )
    print("first cells of a fresh kernel:")
    for label, value in first.items():
        print(f"  {label:46s}{value:8.3f} s")
    print(f"{'warm cells':48s}{'median s':>9s}{'p90 s':>8s}{'/ ideal':>9s}{'/ noisy':>9s}")
    for label in order:
        ratios = ""
        if label in BASELINES:
            ideal, noisy = BASELINES[label]
            ratios = f"{med[label] / med[ideal]:8.2f}x{med[label] / med[noisy]:8.2f}x"
        print(f"  {label:46s}{med[label]:9.3f}{pct(times[label], 0.9):8.3f}{ratios}")
    print(f"  {'signed ping from the kernel (median of 200)':46s}{ping_s:9.5f}")
    q, ideal, noisy = med[Q_BELL], *(med[b] for b in BASELINES[Q_BELL])
    print(
        f"warm Bell cell through %%qonductor: {q:.3f} s median = {q / ideal:.1f}x "
        f"AerSimulator().run(qc) ({q - ideal:+.3f} s), {q / noisy:.2f}x from_backend(Kolkata)"
    )
    q, ideal = med[Q_NEW], med[BASELINES[Q_NEW][0]]
    print(
        f"a circuit it has not seen (new angle): {q:.3f} s median = {q / ideal:.1f}x "
        f"AerSimulator().run(qc) ({q - ideal:+.3f} s)"
    )
    print(
        "where the warm %%qonductor cells' time went (median ms of their rounds, so the parts "
        "need not add up to the total; the orchestrator's job events against the kernel's send "
        "and reply times):"
    )
    print(f"  {'':46s}{'Bell':>8s}{'GHZ-5':>8s}{'new':>8s}")
    for phase in breakdowns[Q_BELL][0] if breakdowns[Q_BELL] else []:
        cols = []
        for label in (Q_BELL, Q_GHZ, Q_NEW):
            values = [b[phase] for b in breakdowns[label] if phase in b]
            cols.append(f"{statistics.median(values):8.1f}" if values else f"{'-':>8s}")
        print(f"  {phase:46s}{''.join(cols)}")
    if keep_home:
        print(f"  (state.db and server.log kept in {home})")
    else:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--fleets", default="default,small")
    parser.add_argument("--keep-home", action="store_true", help="keep state.db and server.log")
    args = parser.parse_args(argv)
    saved = {k: os.environ.get(k) for k in ("QONDUCTOR_HOME", "QONDUCTOR_FLEET", "PYTHONPATH")}
    # This checkout's code in the orchestrator and the kernel too, whatever is installed.
    sys.path.insert(0, str(REPO))
    from qonductor_jupyter.settings import Qonductor

    shots = Qonductor().default_shots  # what a %%qonductor cell without --shots runs
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), saved["PYTHONPATH"]) if p)
    try:
        for fleet in args.fleets.split(","):
            bench_fleet(fleet.strip(), args.repeats, shots, args.keep_home)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return 0


if __name__ == "__main__":
    sys.exit(main())
