"""``qonductor simulate``: every policy over the same simulated hour, one table, JSON and plots."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel_server.core.mcdm import PREFERENCES
from kernel_server.scheduler.online import BALANCE_OFF
from kernel_server.scheduler.policies import POLICIES

if TYPE_CHECKING:
    from kernel_server.simulation.workload import Workload


def parse_policy(text: str, mode: str = "online") -> tuple[str, str]:
    """ "qonductor" / "qonductor:jct" / "qonductor-paper:fidelity" / "greedy-tolerance:5s+50%" /
    "fcfs" -> (policy, preference). ``mode`` "paper" makes plain "qonductor" the paper's cycles."""
    from kernel_server.scheduler.policies import parse_tolerance

    name, _, preference = text.partition(":")
    if name == "qonductor" and mode == "paper":
        name = "qonductor-paper"
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    if name == "greedy-tolerance":
        parse_tolerance(preference)  # raises with the format
        return name, preference or "balanced"
    if preference and preference not in PREFERENCES:
        raise ValueError(f"unknown preference {preference!r}; known: {', '.join(PREFERENCES)}")
    return name, preference or "balanced"


def policy_key(name: str, preference: str) -> str:
    """The name a policy's results go under: presets other than balanced are named."""
    return name if preference == "balanced" else f"{name}:{preference}"


def calibration_events(
    qpus: int, hours: float, period_h: float, seed: int
) -> list[tuple[float, int]]:
    """Each QPU recalibrates every ``period_h`` hours from a seeded phase."""
    rng = np.random.default_rng(seed + 17)
    events = []
    for q in range(qpus):
        t = rng.uniform(0, period_h * 3600.0)
        while t < hours * 3600.0:
            events.append((float(t), q))
            t += period_h * 3600.0
    return sorted(events)


def workload_and_background(
    args: argparse.Namespace, log: Any = None
) -> tuple[Workload, list[tuple[float, int, float]]]:
    """The jobs and the other users' load that ``args`` (simulate's options) describe."""
    from kernel_server.simulation import background as bg
    from kernel_server.simulation.workload import WorkloadSpec, generate, sim_qpus

    qpus = sim_qpus(args.qpus)
    spec = WorkloadSpec(
        jobs_per_hour=args.jobs_per_hour,
        hours=args.hours,
        mean_qubits=args.mean_qubits,
        mean_shots=args.mean_shots,
        mitigated_share=args.mitigated_share,
    )
    if log is not None:
        log(f"estimating the circuit pool on {len(qpus)} QPUs (cached after the first run)...")
    workload = generate(spec, qpus, seed=args.seed, log=None)
    if args.background == "trace":
        trace = Path(args.queue_trace)
        if not trace.exists():
            raise FileNotFoundError(
                f"{trace}: queue trace not found; pass --queue-trace PATH or --background synthetic"
            )
        rates = bg.trace_rates(trace, len(qpus), args.background_load, args.hours, args.seed)
    elif args.background == "synthetic":
        rates = bg.synthetic_rates(len(qpus), args.background_load, args.seed)
    else:
        rates = np.zeros((len(qpus), 1))
    return workload, bg.background_jobs(rates, args.hours, args.seed)


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    from kernel_server.scheduler.cycle import Triggers
    from kernel_server.simulation.cloud import simulate

    wall0 = time.perf_counter()
    policies = [parse_policy(p.strip(), args.mode) for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise ValueError("--policies lists no policy")
    workload, background = workload_and_background(args, log)
    qpus = workload.qpus
    calibrations = calibration_events(len(qpus), args.hours, args.calibration_hours, args.seed)
    reservations = [_reservation(text) for text in args.reserve]
    log(
        f"{workload.num_jobs} jobs over {args.hours:g} h on {len(qpus)} QPUs "
        f"({', '.join(q.name for q in qpus)}); {len(background)} background jobs "
        f"({args.background}); {len(calibrations)} calibrations; "
        f"{sum(s != 'none' for s in workload.stack)} jobs mitigated"
    )
    results: dict[str, Any] = {}
    runs = {}
    for name, preference in policies:
        key = policy_key(name, preference)
        outcome = simulate(
            workload,
            name,
            preference,
            seed=args.seed,
            background=background,
            calibrations=calibrations,
            reservations=reservations,
            triggers=Triggers(queue_size=args.trigger_size, interval_s=args.trigger_interval),
            jct_model=args.jct_model,
            balance=args.balance,
            online_balance=args.online_balance,
        )
        runs[key] = outcome
        results[key] = outcome.metrics()
        log(f"  {key:<22} done in {outcome.wall_s:.1f} s")
    if args.time_indexed_bound:
        from kernel_server.simulation.cloud import time_indexed_bound

        log("  time-indexed bound: one LP per group of arrivals ...")
        tight = time_indexed_bound(workload, background, args.seed)
        results["time_indexed_bound_jct_s"] = tight
    results["wall_seconds"] = time.perf_counter() - wall0
    results["setup"] = {
        "jobs": workload.num_jobs,
        "qpus": [q.name for q in qpus],
        "jobs_per_hour": args.jobs_per_hour,
        "hours": args.hours,
        "seed": args.seed,
        "background": args.background,
        "background_load": args.background_load,
        "mitigated_share": args.mitigated_share,
        "balance": args.balance,
        "online_balance": args.online_balance,
    }
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=float))
    if args.plots:
        from kernel_server.simulation.plots import write_plots

        for path in write_plots(runs, workload, Path(args.plots)):
            log(f"plot: {path}")
    return results


def _reservation(text: str) -> Any:
    from kernel_server.simulation.cloud import Reservation

    try:
        qpu, window = text.split("@")
        start, end = (float(v) for v in window.split("-"))
    except ValueError:
        raise ValueError(f"--reserve takes QPU@START-END in seconds, got {text!r}") from None
    if end <= start:
        raise ValueError(f"reservation {text!r} ends before it starts")
    return Reservation(qpu, start, end)


def format_table(results: dict[str, Any]) -> str:
    rows = [(k, v) for k, v in results.items() if isinstance(v, dict) and "mean_jct_s" in v]
    head = (
        f"{'policy':<20}{'mean JCT':>11}{'p95 JCT':>11}{'/bound':>8}{'fidelity':>10}{'util.':>8}"
        f"{'load diff':>11}{'cycles':>8}{'completed':>11}"
    )
    lines = [head, "-" * len(head)]
    for name, m in rows:
        lines.append(
            f"{name:<20}{m['mean_jct_s']:>10.1f}s{m['p95_jct_s']:>10.1f}s"
            f"{m.get('jct_over_bound', float('nan')):>7.2f}x"
            f"{m['mean_fidelity']:>10.3f}{m['mean_utilization']:>8.1%}"
            f"{m['max_load_difference']:>11.1%}{m['cycles']:>8}{m['completed']:>11}"
        )
    if rows:
        first = rows[0][1]
        lines.append(
            "lower bound on the mean JCT of any schedule: "
            f"{first.get('lower_bound_jct_s', float('nan')):.2f} s; ceiling on its mean fidelity: "
            f"{first.get('fidelity_ceiling', float('nan')):.3f} (simulation/bounds.py)"
        )
    tight = results.get("time_indexed_bound_jct_s")
    if tight is not None and rows:
        lines.append(
            f"tighter, the time-indexed LP: {tight:.2f} s; each policy's mean JCT over it: "
            + ", ".join(f"{name} {m['mean_jct_s'] / tight:.2f}x" for name, m in rows)
        )
    # Against what a user would pick instead: least-busy where it ran, else FCFS.
    label = "least-busy" if "least-busy" in results else "fcfs"
    base = results.get(label)
    for name, m in rows:
        if name.startswith("qonductor") and base:
            lines.append(
                f"{name} vs {label}: mean JCT {m['mean_jct_s'] / base['mean_jct_s']:.2f}x, "
                f"fidelity {m['mean_fidelity'] - base['mean_fidelity']:+.4f}, "
                f"utilization {m['mean_utilization'] / max(base['mean_utilization'], 1e-9):.2f}x"
            )
    lines.append(f"wall time of the whole run: {results.get('wall_seconds', 0):.1f} s")
    return "\n".join(lines)


def _balance(text: str) -> float | None:
    if text.strip().lower() in ("off", "none"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"a tolerance >= 0 such as 0.1, or 'off'; got {text!r}")
    return value


def _online_balance(text: str) -> float | str | None:
    word = text.strip().lower()
    if word == "preset":
        return None
    if word in ("off", "none"):
        return BALANCE_OFF
    value = _balance(text)
    if not value:  # a tolerance of 0 would price any imbalance without bound
        raise argparse.ArgumentTypeError(
            f"a tolerance > 0 such as 0.1, 'off' or 'preset'; got {text!r}"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qonductor simulate",
        description="Simulate a quantum cloud under several scheduling policies (same jobs, "
        "same background load) and compare JCT, fidelity, utilization and load balance.",
    )
    p.add_argument("--jobs-per-hour", type=float, default=1500.0)
    p.add_argument("--qpus", type=int, default=8, help="how many simulated QPUs (1-16)")
    p.add_argument("--hours", type=float, default=1.0, help="simulated hours of arrivals")
    p.add_argument(
        "--policies",
        default="qonductor,fcfs,least-busy,round-robin",
        help="comma-separated, of qonductor (online), qonductor-paper (the paper's cycles), "
        "fcfs, least-busy, round-robin, earliest-completion, fan, greedy-tolerance; "
        "qonductor:jct / qonductor:fidelity pick a preset, greedy-tolerance:5s+50%% its slack",
    )
    p.add_argument(
        "--time-indexed-bound",
        action="store_true",
        help="also bound the mean JCT by the time-indexed LP (tighter than the SRPT machine's; "
        "seconds to minutes, a few GB at 16 QPUs; simulation/bounds.py)",
    )
    p.add_argument(
        "--mode",
        choices=("online", "paper"),
        default="online",
        help="what plain 'qonductor' means: online decisions with late binding (default) or the "
        "paper's 120 s / 100-job cycles into committed queues",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="write the metrics as JSON here")
    p.add_argument(
        "--plots", default="simulation_plots", help="folder for the PNG plots ('' for none)"
    )
    _add_workload_options(p)
    _add_scheduler_options(p)
    return p


def _add_workload_options(p: argparse.ArgumentParser) -> None:
    """The jobs, the other users' load and the calibrations."""
    from kernel_server.simulation.background import DEFAULT_TRACE

    p.add_argument("--mean-qubits", type=float, default=9.0)
    p.add_argument("--mean-shots", type=float, default=4000.0)
    p.add_argument("--mitigated-share", type=float, default=0.5)
    p.add_argument(
        "--background",
        choices=("none", "synthetic", "trace"),
        # The paper's 1500 jobs/h is the IBM cloud's whole arrival rate, measured from the queue
        # trace of every QPU (Qonductor paper, section 8.2); other users' load on top would count
        # the cloud twice, so it is a what-if, not the default.
        default="none",
        help="other users' load on the same QPUs besides the --jobs-per-hour arrivals: none "
        "(default: the arrivals are the whole cloud), synthetic, or replayed from the IBM queue "
        "trace",
    )
    p.add_argument(
        "--background-load",
        type=float,
        default=0.25,
        help="mean utilization of other users' load (synthetic, trace)",
    )
    p.add_argument("--queue-trace", default=str(DEFAULT_TRACE))
    p.add_argument("--calibration-hours", type=float, default=24.0)


def _add_scheduler_options(p: argparse.ArgumentParser) -> None:
    """What qonductor optimises, when its cycles run, and reservations."""
    from kernel_server.simulation.cloud import DEFAULT_BALANCE

    p.add_argument(
        "--jct-model",
        choices=("fifo", "batch"),
        default="fifo",
        help="qonductor's JCT objective: jobs ahead in the FIFO queue (default) or the paper's "
        "whole-batch charge (for comparison)",
    )
    p.add_argument(
        "--balance",
        type=_balance,
        default=DEFAULT_BALANCE,
        metavar="TOLERANCE|off",
        help="qonductor balances QPU load over the last hour: every QPU ends a cycle within "
        f"this fraction of the even level, give or take a job (default {DEFAULT_BALANCE}); "
        "'off' leaves balance to the JCT objective",
    )
    p.add_argument(
        "--online-balance",
        type=_online_balance,
        default=None,
        metavar="TOLERANCE|off|preset",
        help="online qonductor's load balance for every preset (fleet.yaml's scheduler.balance): "
        "a tolerance such as 0.1, 'off', or 'preset' (default: each preset's own, "
        "OnlinePreset.balance)",
    )
    p.add_argument(
        "--trigger-size", type=int, default=100, help="qonductor: a cycle when this many wait"
    )
    p.add_argument(
        "--trigger-interval", type=float, default=120.0, help="qonductor: seconds between cycles"
    )
    p.add_argument(
        "--reserve",
        action="append",
        default=[],
        metavar="QPU@START-END",
        help="reserve a QPU for a window of simulated seconds (repeatable)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        results = run(args, log=lambda text: print(text, file=sys.stderr))
    except (ValueError, FileNotFoundError) as exc:
        print(f"qonductor simulate: error: {exc}", file=sys.stderr)
        return 2
    print(format_table(results))
    return 0
