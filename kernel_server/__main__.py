"""``python -m kernel_server``: run the orchestrator in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from . import protocol
from .app import Orchestrator
from .workers.fleets import resolve_fleet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel_server", description="Qonductor orchestrator (foreground)"
    )
    parser.add_argument(
        "--fleet",
        default=os.environ.get("QONDUCTOR_FLEET", "default"),
        help="'default', 'small' or a comma-separated list of fake backends",
    )
    parser.add_argument("--placement", default=None, help="placement policy for quantum jobs")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kernel_server").setLevel(args.log_level.upper())
    try:
        fleet = resolve_fleet(args.fleet)
    except ValueError as exc:
        parser.error(str(exc))
    kwargs = {"placement": args.placement} if args.placement else {}
    orchestrator = Orchestrator(protocol.qonductor_home(), fleet, **kwargs)
    asyncio.run(orchestrator.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
