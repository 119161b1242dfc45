"""Load on the orchestrator: many clients submitting workflows at a cloud's arrival rate.

    python benchmarks/load.py [--clients 8] [--per-hour 4500] [--compression 10] [--minutes 3]

Starts an orchestrator in a fresh home (fleet `small`), then: (1) the baseline, a signed ping
round trip on the same sockets, 2000 times; (2) the load: ``--clients`` threads, each its own
ZeroMQ client, submit a Bell-state workflow at ``per-hour x compression`` in total for
``--minutes`` of wall time; every workflow is waited for and the store checked for lost and
duplicated ones. Prints submissions per second, request latency p50/p99 beside the ping's, and the
orchestrator's peak resident memory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--per-hour", type=float, default=4500)
    parser.add_argument("--compression", type=float, default=10)
    parser.add_argument("--minutes", type=float, default=3)
    args = parser.parse_args()
    os.environ["QONDUCTOR_HOME"] = tempfile.mkdtemp(prefix="qonductor-load-")
    os.environ.setdefault("QONDUCTOR_FLEET", "small")
    from kernel_server.wire.messages import Ping
    from qonductor_jupyter import client as client_module
    from qonductor_jupyter.loadtest import describe, run_load

    info = client_module.start_server()
    client_module._default = client_module.Client(info=info)
    try:
        ping = client_module.Client(autostart=False, info=info)
        rtts = []
        for _ in range(2000):
            t = time.perf_counter()
            ping.request(Ping(), timeout=10)
            rtts.append((time.perf_counter() - t) * 1000)
        ping.close()
        rtts.sort()
        report = run_load(
            clients=args.clients,
            workflows_per_hour=args.per_hour,
            compression=args.compression,
            duration_s=args.minutes * 60,
            wait_s=1800,
        )
    finally:
        client_module.stop_server()
    d = describe(report)
    rate = args.per_hour * args.compression
    print(
        f"{args.clients} clients, {args.per_hour:.0f} workflows/h compressed {args.compression:g}x "
        f"(= {rate / 3600:.1f}/s) for {args.minutes:g} min; fleet small; {os.cpu_count()} cores"
    )
    print(f"{'':<28}{'p50 ms':>9}{'p99 ms':>9}")
    p50, p99 = rtts[len(rtts) // 2], rtts[int(0.99 * len(rtts))]
    print(f"{'signed ping (baseline)':<28}{p50:>9.2f}{p99:>9.2f}")
    print(f"{'invoke under load':<28}{d['p50_ms']:>9.2f}{d['p99_ms']:>9.2f}")
    print(
        f"submitted {d['submitted']} ({report.submissions_per_s:.1f}/s); final {d['final']}; "
        f"lost {d['lost']}, duplicated {d['duplicated']}; errors {len(report.errors)}"
    )
    print(f"orchestrator memory: {d['rss_start_mb']} MB at start, peak {d['rss_peak_mb']} MB")
    ok = report.lost == 0 and report.duplicated == 0 and d["final"] == {"done": d["submitted"]}
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
