"""How fast this machine runs each noisy-simulation method: measured here, not assumed.

The method chooser (:mod:`kernel_server.backends.methods`) prices a circuit in work units per
method (complex multiply-adds of the numpy engine, amplitude updates of noisy trajectories, bond
dimension cubed of matrix product states); what a unit costs in seconds depends on the CPU, its
caches and the BLAS. Constants tuned on one machine were 3-7x off on another of the same kind, so
:func:`machine_rates` measures the units once per machine (about three seconds of small runs of
each method, :func:`calibrate`) and keeps them in ``<qonductor home>/cost_model.json`` keyed by a
fingerprint of the CPU, the core count and the library versions; a changed fingerprint measures
again.

``QONDUCTOR_COST_MODEL`` may name another JSON file of rates (taken whatever its fingerprint; the
rates are measured into it when it does not exist yet: the test session shares one file this way
among its orchestrators and homes), or be ``builtin`` for the figures measured on the development
machine (2-core x86, no measuring: quicker start, less accurate).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "COST_MODEL_ENV",
    "MachineRates",
    "calibrate",
    "circuit_digest",
    "fingerprint",
    "machine_rates",
    "miss_factors",
    "record_miss",
]

COST_MODEL_ENV = "QONDUCTOR_COST_MODEL"


@dataclass(frozen=True)
class MachineRates:
    """Seconds per work unit of each method on one machine (see the module docstring)."""

    lazy_cma_per_s: float  # numpy engine: complex multiply-adds per second
    lazy_big_cma_per_s: float  # the same on states past the caches (bound by memory traffic)
    lazy_op_s: float  # numpy engine: Python cost per operation
    shot_sv_amp_per_s: float  # branching statevector: amplitudes passed over per second
    shot_sv_op_s: float  # branching statevector: cost per operation and shot (noise draws)
    aer_call_s: float  # one Aer run of a tiny noisy circuit (hand-over, parsing)
    aer_dm_cma_per_s: float  # Aer density matrix: multiply-adds per second
    aer_sv_amp_per_s: float  # Aer noisy statevector: amplitude updates per second
    aer_sv_op_s: float  # Aer noisy statevector: cost per gate of a trajectory at few qubits
    aer_mps_chi3_per_s: float  # Aer noisy MPS: chi^3 units per second
    aer_mps_op_s: float  # Aer noisy MPS: cost per operation at small bond dimension
    aer_stabilizer_op_s: float  # Aer stabilizer under Pauli-and-reset noise: per gate and shot
    gpu: bool  # qiskit-aer-gpu present with a device
    fingerprint: str
    measured: bool  # False for the built-in figures


# Measured on the development machine (2 cores, x86-64, qiskit-aer 0.17); used only when asked.
_BUILTIN = MachineRates(
    lazy_cma_per_s=1.7e9,
    lazy_big_cma_per_s=1.6e9,
    lazy_op_s=2e-5,
    shot_sv_amp_per_s=3.5e8,
    shot_sv_op_s=5e-8,
    aer_call_s=0.02,
    aer_dm_cma_per_s=1.5e9,
    aer_sv_amp_per_s=1.5e9,
    aer_sv_op_s=2e-6,
    aer_mps_chi3_per_s=2e8,
    aer_mps_op_s=2e-5,
    aer_stabilizer_op_s=6e-6,
    gpu=False,
    fingerprint="builtin",
    measured=False,
)


# Raised when the noisy path runs its simulators differently (gate fusion, 2; statevector reuse
# drawing its own noise and the numpy engine's large-state rate, 3; the branching statevector,
# 4): rates and misses measured the old way are measured again.
_SIMULATOR_SETUP = 4


def fingerprint() -> str:
    """What the rates depend on: CPU model, usable cores, numpy and qiskit-aer versions, and
    how the noisy path sets its simulators up."""
    import qiskit_aer

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    cpu = platform.processor() or platform.machine()
    model = _cpu_model() or cpu
    versions = f"numpy {np.__version__}|qiskit-aer {qiskit_aer.__version__}"
    return f"{model}|{cores} cores|{versions}|setup {_SIMULATOR_SETUP}"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


_lock = threading.Lock()
_rates: MachineRates | None = None


def machine_rates() -> MachineRates:
    """This machine's rates: from memory, then the cache file, else measured (and stored)."""
    global _rates
    with _lock:
        if _rates is None:
            _rates = _load_or_measure()
        return _rates


def _cache_path() -> Path:
    from kernel_server.core.paths import qonductor_home

    return qonductor_home() / "cost_model.json"


def _load_or_measure() -> MachineRates:
    configured = os.environ.get(COST_MODEL_ENV, "")
    if configured == "builtin":
        return _BUILTIN
    path = Path(configured).expanduser() if configured else _cache_path()
    mark = fingerprint()

    def usable(stored: MachineRates | None) -> bool:
        return stored is not None and (bool(configured) or stored.fingerprint == mark)

    stored = _read(path)
    if usable(stored):
        assert stored is not None
        return stored
    # One process measures; the others (a new machine's first jobs, estimated on every device
    # at once) wait for its file rather than measure side by side on the same cores.
    with _measuring_lock(path):
        stored = _read(path)
        if usable(stored):
            assert stored is not None
            return stored
        rates = calibrate()
        _write(path, rates)
        return rates


@contextlib.contextmanager
def _measuring_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: measure unlocked
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - held across the yield
    except OSError:  # a read-only home: measure unlocked, as _write then keeps nothing
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(path: Path) -> MachineRates | None:
    try:
        data = json.loads(path.read_text())
        return MachineRates(**{f.name: data[f.name] for f in fields(MachineRates)})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(path: Path, rates: MachineRates) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        data: dict[str, Any] = asdict(rates)
        if _misses:
            data["misses"] = _misses  # measuring again does not forget what went wrong
            data["misses_fingerprint"] = rates.fingerprint
        partial.write_text(json.dumps(data, indent=1))
        partial.replace(path)
    except OSError:
        pass  # a read-only home: measure again next time rather than fail a job


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def _best_of(run: Any, repeats: int = 3) -> float:
    """Fastest of a few timed runs: the least disturbed by other processes."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def calibrate() -> MachineRates:
    """Measure every rate with small runs of each method (about three seconds on 2 cores)."""
    from kernel_server.backends import calibration as c

    noise = c.calibration_noise()
    call = _best_of(lambda: c.run_aer(c.layered(2, 1), noise, "statevector", 1))
    # Each method is timed on an op-bound and a work-bound circuit, which give its two constants.
    op_bound, op_work = c.lazy_case(c.layered(4, 60), noise)
    flop_bound, flop_work = c.lazy_case(c.layered(12, 8), noise)
    t_ops, t_flops = _best_of(op_bound), _best_of(flop_bound, repeats=2)
    lazy_op_s, lazy_rate = _solve(op_work, t_ops, flop_work, t_flops)
    big_run, big_work = c.big_state_case()
    big_rate = big_work / _best_of(big_run)
    # Branching statevector: noise draws per operation and shot, then passes over amplitudes.
    draw_bound, draw_work = c.branching_sv_case(c.layered(4, 60), noise, 2000)
    pass_bound, pass_work = c.branching_sv_case(c.layered(10, 6), noise, 300)
    shot_op_s, shot_rate = _solve(
        draw_work, _best_of(draw_bound, repeats=2), pass_work, _best_of(pass_bound, repeats=2)
    )
    sv_times = []
    for circuit in (c.layered(8, 40), c.layered(16, 20)):
        seconds = _best_of(partial(c.run_aer, circuit, noise, "statevector", 8), repeats=2)
        sv_times.append((circuit, max(seconds - call, 1e-4) / 8))
    (few, t_few), (many, t_many) = sv_times
    sv_op_s, sv_rate = _solve(
        (c.gate_count(few)[0], c.trajectory_work(few)),
        t_few,
        (c.gate_count(many)[0], c.trajectory_work(many)),
        t_many,
    )
    dm_circuit = c.layered(10, 6)
    t_dm = _best_of(lambda: c.run_aer(dm_circuit, noise, "density_matrix", 1), repeats=2)
    dm_rate = c.density_matrix_work(dm_circuit) / max(t_dm - call, 1e-4)
    stabilizer = c.layered(16, 10, clifford=True)
    t_stabilizer = _best_of(lambda: c.run_aer(stabilizer, noise, "stabilizer", 200), repeats=2)
    stabilizer_op_s = max(t_stabilizer - call, 1e-5) / (200 * c.gate_count(stabilizer)[0])
    mps_cheap, mps_wide = c.layered(16, 1), c.layered(16, 8)
    t_cheap = _best_of(lambda: c.run_mps(mps_cheap, noise, 4), repeats=2)
    t_wide = _best_of(lambda: c.run_mps(mps_wide, noise, 4), repeats=2)
    cheap_ops, cheap_units = c.mps_work(mps_cheap)
    wide_ops, wide_units = c.mps_work(mps_wide)
    mps_op_s, mps_rate = _solve(
        (4 * cheap_ops, 4 * cheap_units),
        t_cheap - call,
        (4 * wide_ops, 4 * wide_units),
        t_wide - call,
    )
    return MachineRates(
        lazy_cma_per_s=lazy_rate,
        lazy_big_cma_per_s=min(big_rate, lazy_rate),
        lazy_op_s=lazy_op_s,
        shot_sv_amp_per_s=shot_rate,
        shot_sv_op_s=shot_op_s,
        aer_call_s=call,
        aer_dm_cma_per_s=dm_rate,
        aer_sv_amp_per_s=sv_rate,
        aer_sv_op_s=sv_op_s,
        aer_mps_chi3_per_s=mps_rate,
        aer_mps_op_s=mps_op_s,
        aer_stabilizer_op_s=stabilizer_op_s,
        gpu=c.gpu_present(),
        fingerprint=fingerprint(),
        measured=True,
    )


def _solve(
    first: tuple[float, float], t_first: float, second: tuple[float, float], t_second: float
) -> tuple[float, float]:
    """(seconds per op, units per second) from two runs of (ops, units) each.

    Least squares on ``t = ops * op_s + units / rate`` through both points; each constant kept
    positive (a noisy pair can make one of them come out negative).
    """
    a = np.array([[first[0], first[1]], [second[0], second[1]]], dtype=float)
    b = np.array([max(t_first, 1e-5), max(t_second, 1e-5)])
    op_s, per_unit = np.linalg.lstsq(a, b, rcond=None)[0]
    if per_unit <= 0:
        per_unit = b[1] / a[1, 1]
    if op_s <= 0:
        op_s = statistics.fmean([1e-7, b[0] / max(a[0, 0], 1.0)])
    return float(op_s), float(1.0 / per_unit)


# --------------------------------------------------------------------------------------------
# Misses: circuits a method overran on (the guard stopped it), kept beside the rates
# --------------------------------------------------------------------------------------------

# Misses kept at most (the oldest go first): each is a circuit's digest and a factor per method.
_MAX_MISSES = 512
_misses: dict[str, dict[str, float]] | None = None


def _misses_path() -> Path:
    configured = os.environ.get(COST_MODEL_ENV, "")
    if configured and configured != "builtin":
        return Path(configured).expanduser()
    return _cache_path()


def _load_misses() -> dict[str, dict[str, float]]:
    global _misses
    if _misses is None:
        try:
            data = json.loads(_misses_path().read_text())
            # A miss is a fact about this machine and these simulators; others' are stale.
            if data.get("misses_fingerprint") != fingerprint():
                data = {}
            _misses = {k: dict(v) for k, v in dict(data.get("misses", {})).items()}
        except (OSError, ValueError, TypeError, AttributeError):
            _misses = {}
    return _misses


def circuit_digest(circuit: Any) -> str:
    """What a miss is remembered by: the compact circuit's content (qpy), not its name."""
    from kernel_server.wire.circuits import fingerprint as content

    return content([circuit])[:32]


def miss_factors(circuit: Any) -> dict[str, float]:
    """Per method, how many times over its price it ran on this circuit before (none: {})."""
    with _lock:
        misses = _load_misses()
        if not misses:
            return {}
    return dict(misses.get(circuit_digest(circuit), {}))


def record_miss(circuit: Any, method: str, factor: float) -> None:
    """Remember that ``method`` took at least ``factor`` times its price on ``circuit``: in
    memory, and in the rates file (``misses``), so the next run and the next process price it
    right. The file is rewritten atomically; a read-only home keeps it in memory only."""
    key = circuit_digest(circuit)
    if not key:
        return
    with _lock:
        misses = _load_misses()
        entry = misses.pop(key, {})  # re-inserted last: the most recent miss is kept longest
        entry[method] = max(float(factor), entry.get(method, 1.0))
        misses[key] = entry
        while len(misses) > _MAX_MISSES:
            misses.pop(next(iter(misses)))
        path = _misses_path()
        try:
            data = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            data = {}
        data["misses"] = misses
        data["misses_fingerprint"] = fingerprint()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(data, indent=1))
            partial.replace(path)
        except OSError:
            pass
