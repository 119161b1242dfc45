"""PNG plots of a simulation, in the spirit of the Qonductor paper's Figures 6, 8 and 10.

* ``end_to_end.png`` (Fig. 6): mean fidelity, mean JCT and QPU utilisation over simulated time,
  per policy (jobs binned by arrival time; utilisation of the whole fleet per bin).
* ``scheduler_cycles.png`` (Fig. 8a-b): per qonductor cycle, the Pareto front's range of mean JCT
  and mean fidelity and the chosen schedule's; (Fig. 8c) each QPU's load per policy.
* ``execution_and_presets.png`` (Fig. 10): mean execution time per policy, and the last cycle's
  front with the schedules the three presets pick on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kernel_server.simulation.results import CycleRecord, SimulationResult

BIN_S = 300.0


def _bins(horizon: float) -> np.ndarray:
    return np.arange(0.0, max(horizon, BIN_S) + BIN_S, BIN_S)


def write_plots(runs: dict[str, SimulationResult], workload: Any, folder: Path) -> list[Path]:
    """The three PNG figures of ``runs`` (policy name -> ``SimulationResult``) in ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    figures = (
        ("end_to_end.png", _end_to_end),
        ("scheduler_cycles.png", _scheduler_cycles),
        ("execution_and_presets.png", _execution_and_presets),
    )
    paths: list[Path] = []
    for name, draw in figures:
        fig = draw(plt, runs, workload)
        fig.tight_layout()
        paths.append(folder / name)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _end_to_end(plt: Any, runs: dict[str, SimulationResult], workload: Any) -> Any:
    """Fig. 6: mean fidelity, mean JCT and utilisation per arrival-time bin, per policy."""
    horizon = float(np.max(workload.arrival_s)) if workload.num_jobs else BIN_S
    edges = _bins(horizon)
    mids = (edges[:-1] + edges[1:]) / 2 / 60
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, run in runs.items():
        which = np.digitize(run.arrival_s, edges) - 1
        fid = [
            np.nanmean(run.fidelity[which == b]) if (which == b).any() else np.nan
            for b in range(len(mids))
        ]
        jct = [
            np.mean(run.jct_s[which == b]) if (which == b).any() else np.nan
            for b in range(len(mids))
        ]
        util = []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            busy = sum(
                max(0.0, min(b, hi) - max(a, lo))
                for spans in run.busy_intervals.values()
                for a, b in spans
            )
            util.append(busy / ((hi - lo) * len(run.busy_intervals)))
        axes[0].plot(mids, fid, marker="o", label=name)
        axes[1].plot(mids, jct, marker="o", label=name)
        axes[2].plot(mids, util, marker="o", label=name)
    axes[0].set(title="(a) mean fidelity", xlabel="arrival time (min)", ylabel="Hellinger fidelity")
    axes[1].set(title="(b) mean JCT", xlabel="arrival time (min)", ylabel="seconds")
    axes[1].set_yscale("log")
    axes[2].set(title="(c) QPU utilization", xlabel="time (min)", ylabel="busy fraction")
    axes[0].legend()
    return fig


def _scheduler_cycles(plt: Any, runs: dict[str, SimulationResult], workload: Any) -> Any:
    """Fig. 8: each qonductor cycle's front range and choice; each QPU's load per policy."""
    cycles: list[CycleRecord] = next(
        (r.cycles for n, r in runs.items() if n.startswith("qonductor") and r.cycles), []
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    if cycles:
        t = [c["t"] / 60 for c in cycles if "chosen" in c]
        lo_j = [c["front_jct"][0] for c in cycles if "chosen" in c]
        hi_j = [c["front_jct"][1] for c in cycles if "chosen" in c]
        ch_j = [c["chosen"][0] for c in cycles if "chosen" in c]
        axes[0].fill_between(t, lo_j, hi_j, alpha=0.3, label="Pareto front range")
        axes[0].plot(t, ch_j, marker=".", label="chosen")
        lo_f = [1 - c["front_error"][1] for c in cycles if "chosen" in c]
        hi_f = [1 - c["front_error"][0] for c in cycles if "chosen" in c]
        ch_f = [1 - c["chosen"][1] for c in cycles if "chosen" in c]
        axes[1].fill_between(t, lo_f, hi_f, alpha=0.3, label="Pareto front range")
        axes[1].plot(t, ch_f, marker=".", label="chosen")
        axes[0].legend()
    axes[0].set(title="(a) cycle mean JCT", xlabel="cycle time (min)", ylabel="seconds")
    axes[1].set(title="(b) cycle mean fidelity", xlabel="cycle time (min)", ylabel="fidelity")
    names = list(runs)
    qpus = list(next(iter(runs.values())).busy_s) if runs else []
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        loads = [runs[name].busy_s[q] / 60 for q in qpus]
        axes[2].bar(np.arange(len(qpus)) + k * width, loads, width, label=name)
    axes[2].set_xticks(np.arange(len(qpus)) + 0.4 - width / 2)
    axes[2].set_xticklabels([q.removeprefix("fake_") for q in qpus], rotation=45)
    axes[2].set(title="(c) QPU load (active runtime)", ylabel="minutes")
    axes[2].legend(fontsize=7)
    return fig


def _execution_and_presets(plt: Any, runs: dict[str, SimulationResult], workload: Any) -> Any:
    """Fig. 10: mean execution time per policy; the presets' picks on the last cycle's front."""
    from kernel_server.core.mcdm import PREFERENCES, select

    names = list(runs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    execution = [np.nanmean(r.end_s - r.start_s) for r in runs.values()]
    axes[0].bar(names, execution)
    axes[0].set(title="(a) mean execution time", ylabel="seconds")
    axes[0].tick_params(axis="x", rotation=30)
    last = next((r for n, r in runs.items() if n.startswith("qonductor") and r.cycles), None)
    result = getattr(last, "last_front", None) if last is not None else None
    if result is not None and len(result) > 1:
        front = np.asarray(result)
        axes[1].scatter(front[:, 0], 1 - front[:, 1], s=12, color="grey", label="Pareto front")
        for preset in PREFERENCES:
            i = select(front, preset)
            axes[1].scatter(front[i, 0], 1 - front[i, 1], s=60, label=preset)
        axes[1].legend()
    axes[1].set(
        title="(b) presets on the last cycle's front", xlabel="mean JCT (s)", ylabel="mean fidelity"
    )
    return fig
