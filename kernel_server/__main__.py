"""``python -m kernel_server``: run the orchestrator in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from kernel_server.control.app import Orchestrator
from kernel_server.core.paths import qonductor_home
from kernel_server.fleet.spec import FleetConfigError, load_fleet_spec
from kernel_server.security.sandbox import wipe_initial_environment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel_server", description="Qonductor orchestrator (foreground)"
    )
    parser.add_argument(
        "--fleet",
        default=os.environ.get("QONDUCTOR_FLEET", "default"),
        help="'default', 'small', a comma-separated list of fake backends, or a fleet.yaml",
    )
    parser.add_argument("--placement", default=None, help="placement policy for quantum jobs")
    parser.add_argument(
        "--cluster",
        default=os.environ.get("QONDUCTOR_CLUSTER") or None,
        help="a Dask scheduler (tcp://HOST:8786) for classical steps and simulated-QPU runs; "
        "default: local process pools",
    )
    parser.add_argument(
        "--public-host",
        default=os.environ.get("QONDUCTOR_PUBLIC_HOST") or None,
        help="also listen on this host's address, with CURVE encryption and an allow-list of "
        "client keys (qonductor server add-user), for users on other machines",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kernel_server").setLevel(args.log_level.upper())
    try:
        fleet = load_fleet_spec(args.fleet)
    except (FleetConfigError, ValueError) as exc:
        parser.error(str(exc))
    kwargs: dict[str, Any] = {"placement": args.placement} if args.placement else {}
    # The command line wins over the fleet file's cluster entry.
    if args.public_host:
        kwargs["public_host"] = args.public_host
    cluster = args.cluster or fleet.cluster
    if cluster:
        kwargs["cluster"] = cluster
    orchestrator = Orchestrator(qonductor_home(), fleet, **kwargs)
    # Other processes of this account can read the block the process started with
    # (/proc/<pid>/environ) whatever the sandbox: leave nothing in it (an IBM token, say).
    wipe_initial_environment()
    asyncio.run(orchestrator.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
