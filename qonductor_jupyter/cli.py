"""The ``qonductor`` command: ``demo`` and ``server start|stop|status``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec


def server_command(
    action: str,
    fleet: str | None = None,
    cluster: str | None = None,
    public_host: str | None = None,
) -> str:
    from .client import server_status, start_server, stop_server

    if action == "start":
        info = start_server(fleet, cluster=cluster, public_host=public_host)
        status = server_status() or {}
        return (
            f"orchestrator running (pid {info.pid}) on {info.router}; "
            f"fleet: {', '.join(status.get('fleet', []))}"
        )
    if action == "stop":
        return "orchestrator stopped" if stop_server() else "no orchestrator was running"
    current = server_status()
    if current is None:
        return "no orchestrator is running (it starts on first use, or: qonductor server start)"
    return (
        f"orchestrator running (pid {current['pid']}, up {current['uptime_s']:.0f} s) on "
        f"{current['router']}; fleet: {', '.join(current['fleet'])}; "
        f"state in {current['home']}"
    )


def user_command(action: str, name: str | None) -> int:
    from kernel_server.security import users

    if not name:
        print(f"qonductor server {action} needs a user name", file=sys.stderr)
        return 2
    if action == "remove-user":
        print(f"removed {name}" if users.remove_user(name) else f"no user {name}")
        return 0
    try:
        path = users.add_user(name)
    except FileNotFoundError:
        print("no orchestrator is running here: start it first (qonductor server start)",
              file=sys.stderr)  # fmt: skip
        return 1
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(
        f"user {name} added; give them {path} (keep it private) and have their kernels set "
        f"QONDUCTOR_CONNECTION_FILE={path}"
    )
    return 0


def find_example(name: str) -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (
        here.parent / "example_notebooks" / name,
        Path.cwd() / "example_notebooks" / name,
    ):
        if candidate.is_file():
            return candidate
    raise SystemExit(
        f"cannot find example_notebooks/{name}; run from a checkout of the project "
        "(pip install -e .)"
    )


def _text_outputs(cell: dict) -> list[str]:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(out.get("text", ""))
        elif "data" in out and "text/plain" in out["data"]:
            texts.append(out["data"]["text/plain"] + "\n")
        elif out.get("output_type") == "error":
            texts.append("\n".join(out.get("traceback", [])) + "\n")
    return texts


def demo(notebook: str = "01_quickstart.ipynb", timeout: int = 600) -> int:
    import nbformat
    from nbclient import NotebookClient

    path = find_example(notebook)
    nb = nbformat.read(path, as_version=4)
    print(f"Running {path.name} headless through the Qonductor orchestrator ...", flush=True)
    t0 = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    elapsed = time.perf_counter() - t0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        texts = _text_outputs(cell)
        if not texts:
            continue
        print(f"\n--- cell {i}: {cell.source.splitlines()[0] if cell.source else ''}")
        print("".join(texts).rstrip())
    print(
        f"\nNotebook ran in {elapsed:.1f} s. The orchestrator keeps running for the next "
        "notebook; stop it with `qonductor server stop`."
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qonductor", description="Qonductor for Jupyter")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the quickstart notebook headless and print its results")
    d.add_argument("--notebook", default="01_quickstart.ipynb")
    s = sub.add_parser("server", help="start, stop or inspect the background orchestrator")
    s.add_argument("action", choices=("start", "stop", "status", "add-user", "remove-user"))
    s.add_argument("user", nargs="?", help="the user to add or remove (add-user, remove-user)")
    s.add_argument(
        "--fleet", default=None, help="'default', 'small', fake backend names or a fleet.yaml"
    )
    s.add_argument(
        "--cluster",
        default=None,
        help="Dask scheduler address (tcp://HOST:8786) for classical steps and simulated-QPU runs",
    )
    s.add_argument(
        "--public-host",
        default=None,
        help="share the orchestrator: also listen on this address with CURVE and an allow-list",
    )
    t = sub.add_parser("train", help="train a model shipped with the package")
    t.add_argument("model", choices=("runtime", "fidelity"), help="which model")
    t.add_argument("rest", nargs=argparse.REMAINDER, help="options of the trainer (--data, --out)")
    sub.add_parser("fleet", help="list the QPUs of the running orchestrator")
    sub.add_parser("workflows", help="list recent workflows")
    sub.add_parser(
        "simulate",
        add_help=False,
        help="compare scheduling policies on a simulated quantum cloud (--help for options)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["simulate"]:
        # The simulator parses its own options (kernel_server.simulation.cli).
        from kernel_server.simulation import cli as simulation_cli

        return simulation_cli.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.notebook)
    if args.command == "train":
        if args.model == "fidelity":
            from kernel_server.estimator import fidelity_training

            return fidelity_training.main(args.rest)
        from kernel_server.estimator import runtime_training

        return runtime_training.main(args.rest)
    if args.command == "server":
        if args.action in ("add-user", "remove-user"):
            return user_command(args.action, args.user)
        print(server_command(args.action, args.fleet, args.cluster, args.public_host))
        return 0
    from . import api

    data = api.fleet() if args.command == "fleet" else api.list_workflows()
    print(msgspec.json.format(msgspec.json.encode(data), indent=1).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
