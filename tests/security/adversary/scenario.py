"""A shared orchestrator with a victim and an attacker; prints the attacker's report as JSON.

    python tests/security/adversary/scenario.py HOME [--curve]

Run as a script, with whatever ``kernel_server`` and ``qonductor_jupyter`` are importable (the
tests run it against this checkout and against the commit before the isolation work, with
``PYTHONPATH`` pointing at a worktree of it), so it only uses what both versions have: start a
server, add users, submit cells, wait.

1. ``alice`` runs a workflow to the end (its results hold a marker) and starts a second one that
   keeps sampling (it publishes events while the attack runs).
2. ``bob`` runs ``attack_cell.py`` as his own cell, told only what he knows: his connection file,
   alice's name and her workflow ids.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_QUBITS = 4
FLEET = f"""\
simulated: [fake_kolkata]
limits:
  max_qubits: {MAX_QUBITS}
  max_shots: 1000
  step_timeout_s: 300
"""

VICTIM_DONE = """\
from qiskit import QuantumCircuit
marker = {marker!r}
q = QuantumCircuit(2)
q.h(0)
q.measure_all()
c = sample(q, shots=5)
"""

VICTIM_RUNNING = """\
import time
from qiskit import QuantumCircuit
q = QuantumCircuit(2)
q.h(0)
q.cx(0, 1)
q.measure_all()
results = []
for i in range(400):
    results.append(sample(q, shots=5))
    time.sleep(0.2)
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("home")
    parser.add_argument("--curve", action="store_true", help="bob connects over CURVE")
    args = parser.parse_args()
    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    os.environ["QONDUCTOR_HOME"] = str(home)
    (home / "fleet.yaml").write_text(FLEET)

    try:
        from kernel_server.security import users
        from kernel_server.wire.connection import ConnectionInfo
    except ImportError:  # the flat layout of the commits before the role packages
        from kernel_server import protocol as P  # type: ignore[no-redef]
        from kernel_server import users  # type: ignore[no-redef]

        ConnectionInfo = P.ConnectionInfo  # type: ignore[misc]
    from qonductor_jupyter import api
    from qonductor_jupyter import client as client_module

    start = {"fleet": str(home / "fleet.yaml")}
    if args.curve:
        start["public_host"] = "127.0.0.1"
    owner = client_module.start_server(**start)
    clients = {"owner": client_module.Client(autostart=False, info=owner)}
    infos = {}
    for name in ("alice", "bob"):
        infos[name] = ConnectionInfo.read(users.add_user(name))
        clients[name] = client_module.Client(autostart=False, info=infos[name])

    def as_user(name: str) -> None:
        client_module._default = clients[name]

    marker = "alice-private-" + secrets.token_hex(8)
    pwn_path = home.parent / f"pwned-{secrets.token_hex(4)}"
    try:
        as_user("alice")
        done, _ = api.submit_cell(VICTIM_DONE.format(marker=marker), {})
        assert api.wait(done, 180).state == "done", "the victim's first workflow failed"
        running, _ = api.submit_cell(VICTIM_RUNNING, {})
        deadline = time.monotonic() + 120
        while api.workflow_status(running) != "running" and time.monotonic() < deadline:
            time.sleep(0.2)

        bob = infos["bob"]
        ctx = {
            "router": bob.router,
            "pub": bob.pub,
            "key": bob.key,
            "user": bob.user,
            "curve_server_key": bob.curve_server_key,
            "curve_public_key": bob.curve_public_key,
            "curve_secret_key": bob.curve_secret_key,
            "victim_user": "alice",
            "victim_done": done,
            "victim_running": running,
            "marker": marker,
            "too_many_qubits": MAX_QUBITS + 2,
            "pwn_path": str(pwn_path),
            "guess_dirs": [str(home.parent)],
        }
        as_user("bob")
        t0 = time.monotonic()
        attack, _ = api.submit_cell((HERE / "attack_cell.py").read_text(), {"ctx": ctx})
        outcome = api.wait(attack, 280)
        if outcome.state != "done":
            print(json.dumps({"error": f"the attack cell ended {outcome.state}: {outcome.error}"}))
            return 1
        report = api.workflow_results(attack)["report"]
        # The attacker's sandbox may hide the flag from it; the test's eyes are what count.
        report["pickle_into_qpu_workers"]["won"] = pwn_path.exists()
        report["attack_s"] = round(time.monotonic() - t0, 1)
        as_user("alice")
        report["victim_still_running"] = api.workflow_status(running) == "running"
        report["victim_results_intact"] = api.workflow_results(done)["marker"] == marker
        if report["victim_still_running"]:
            api.cancel(running)
        print(json.dumps(report))
        return 0
    finally:
        for c in clients.values():
            c.close()
        client_module.stop_server()


if __name__ == "__main__":
    sys.exit(main())
