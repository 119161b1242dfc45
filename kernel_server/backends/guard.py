"""A budget on every noisy run: the cost model may be wrong, the machine must not pay for it.

The method chooser prices a circuit per method (``methods``); on one device a price can be off by
100x (a 24-qubit W state whose concentrated output makes trajectory reuse fall back to one
trajectory per shot; a routed graph state whose 28 active qubits leave only per-shot statevector
trajectories, 4 GB each). So each run gets a :class:`Budget`: a soft deadline of a few times the
chosen method's predicted time (never under a floor), a hard ceiling, and a memory ceiling, a
share of the machine's. A running method checks the budget between its steps (the numpy engine
between operations, trajectories between batches of Aer calls and while sampling, Aer's
per-shot runs between chunks of shots) and reports its progress; it is stopped with
:class:`BudgetExceeded` when it passes the ceiling, or passes its soft deadline with a next
method predicted to finish sooner than it would. The caller then takes that method, and every
overrun is recorded in the cost model, so the same circuit is priced right the next time.

A method predicted to take longer than the ceiling, or to hold more memory than the budget, is
not started; where no method fits, the run fails at once and says why, rather than hold the
machine for hours.

Configured by ``QONDUCTOR_NOISY_GUARD`` (comma-separated ``key=value``): ``time_factor`` (5),
``min_seconds`` (5), ``max_seconds`` (60, the ceiling of any run), ``memory_share`` (0.25 of
the machine's memory) and ``max_memory_gb`` (4).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_server.backends.cost_model import record_miss

if TYPE_CHECKING:
    from kernel_server.backends.methods import NoisyRunPlan

GUARD_ENV = "QONDUCTOR_NOISY_GUARD"
_DEFAULTS = {
    "time_factor": 5.0,
    "min_seconds": 5.0,
    "max_seconds": 60.0,
    "memory_share": 0.25,
    "max_memory_gb": 4.0,
}
# Memory is read at most this often (a /proc read costs ~20 us; the numpy engine checks per op).
_MEMORY_EVERY_S = 0.05


class BudgetExceeded(RuntimeError):
    """A method overran its run's budget and was stopped."""


@dataclass(frozen=True)
class GuardSettings:
    time_factor: float
    min_seconds: float
    max_seconds: float
    memory_share: float
    max_memory_gb: float

    @property
    def memory_bytes(self) -> int:
        """The ceiling on a run's resident memory."""
        share = self.memory_share * _machine_memory()
        return int(min(share, self.max_memory_gb * 2**30))


def settings() -> GuardSettings:
    """The guard's settings from ``QONDUCTOR_NOISY_GUARD``; ValueError naming the valid keys."""
    values = dict(_DEFAULTS)
    text = os.environ.get(GUARD_ENV, "").strip()
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if key.strip() not in values:
            raise ValueError(
                f"{GUARD_ENV}: unknown key {key.strip()!r}; valid keys: {', '.join(_DEFAULTS)}"
            )
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{GUARD_ENV}: {key.strip()} needs a number, got {value!r}") from None
        if number <= 0:
            raise ValueError(f"{GUARD_ENV}: {key.strip()} must be positive, got {value!r}")
        values[key.strip()] = number
    return GuardSettings(**values)


def _machine_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8.0 * 2**30


def resident_bytes() -> int:
    """This process's resident memory now."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: the peak is the best we know
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@dataclass(frozen=True)
class Alternative:
    """The method a run may be stopped in favour of, and its predicted time."""

    method: str
    seconds: float
    # The trajectory count its price assumed, for a trajectory-reuse method (0: not one). Reuse
    # prices assume the fewest trajectories a circuit could need; once a reuse run has learned
    # how many this circuit needs, the other reuse method would need as many.
    trajectories: int = 0

    def seconds_at(self, trajectories: int) -> float:
        """Its predicted time once a run has learned the circuit needs ``trajectories``."""
        if self.trajectories and trajectories > self.trajectories:
            return self.seconds * trajectories / self.trajectories
        return self.seconds


class Budget:
    """What one method may spend on one run, and when it is stopped.

    Past ``soft`` seconds (a few times its prediction) a method is stopped only when, at the pace
    it has made (``progress``), it would still need longer than the best remaining method is
    predicted to take: a prediction that was merely low is not punished when nothing else would
    do better. At ``hard`` seconds, or over the memory ceiling, it is stopped whatever.
    """

    def __init__(
        self,
        method: str,
        predicted_s: float,
        guard: GuardSettings | None = None,
        alternative: Alternative | None = None,
    ):
        guard = guard or settings()
        self.method = method
        self.predicted_s = predicted_s
        self.soft = max(guard.time_factor * predicted_s, guard.min_seconds)
        self.hard = guard.max_seconds
        self.alternative = alternative  # the method to switch to, if any
        self.trajectories = 0  # what a trajectory-reuse run learned it needs (``learn``)
        self.learned_s = 0.0  # the whole run's time, at least, at its pilot's pace (``learn``)
        self.memory_bytes = guard.memory_bytes
        self.start = time.perf_counter()
        self.base_memory = resident_bytes()
        self._memory_checked = 0.0
        self.done = 0.0  # share of the work finished, as the method reports it

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def progress(self, done: float) -> None:
        """The method has finished ``done`` (0 to 1) of its work."""
        self.done = min(max(float(done), 0.0), 1.0)

    def learn(self, trajectories: int, remaining_s: float) -> None:
        """A trajectory-reuse run's pilot measured that the circuit needs ``trajectories``,
        which at its pace leaves ``remaining_s`` seconds to run: that prices the whole run."""
        self.trajectories = int(trajectories)
        self.learned_s = self.elapsed() + max(float(remaining_s), 0.0)

    def projected(self) -> float:
        """Seconds the whole run will take at the pace so far (inf before any progress)."""
        return self.elapsed() / self.done if self.done > 0 else float("inf")

    def overran(self) -> bool:
        """Whether the run took more than its soft budget (a miss to remember)."""
        return self.elapsed() > self.soft

    def check(self, done: float | None = None) -> None:
        """Raise BudgetExceeded when the run must stop (see the class docstring); ``done``
        reports progress as ``progress`` does."""
        if done is not None:
            self.progress(done)
        now = time.perf_counter()
        elapsed = now - self.start
        if elapsed > self.hard:
            raise BudgetExceeded(
                f"{self.method} ran {elapsed:.1f} s, past the ceiling of {self.hard:.0f} s "
                f"(predicted {self.predicted_s:.2f} s)"
            )
        if now - self._memory_checked >= _MEMORY_EVERY_S:
            self._memory_checked = now
            used = resident_bytes() - self.base_memory
            if used > self.memory_bytes:
                raise BudgetExceeded(
                    f"{self.method} held {used / 2**30:.1f} GB, over its budget of "
                    f"{self.memory_bytes / 2**30:.1f} GB"
                )
        if self.learned_s:
            self._check_learned(elapsed)
        if elapsed > self.soft and self.alternative is not None:
            remaining = self.projected() - elapsed
            name = self.alternative.method
            seconds = self.alternative.seconds_at(self.trajectories)
            if remaining > seconds:
                raise BudgetExceeded(
                    f"{self.method} ran {elapsed:.1f} s (predicted {self.predicted_s:.2f} s) and "
                    f"would need ~{remaining:.0f} s more; {name} is predicted to take "
                    f"{seconds:.1f} s"
                )

    def _check_learned(self, elapsed: float) -> None:
        """Stop a reuse run at once when its pilot shows it would pass the ceiling, or take
        more than twice as long as the next method (a margin: that one is only predicted)."""
        if self.learned_s > self.hard:
            raise BudgetExceeded(
                f"{self.method} needs ~{self.trajectories} trajectories for this circuit: "
                f"~{self.learned_s:.0f} s at its pilot's pace, past the ceiling of "
                f"{self.hard:.0f} s"
            )
        if self.alternative is None:
            return
        seconds = self.alternative.seconds_at(self.trajectories)
        if self.learned_s - elapsed > 2 * seconds:
            raise BudgetExceeded(
                f"{self.method} needs ~{self.trajectories} trajectories for this circuit: "
                f"~{self.learned_s:.0f} s at its pilot's pace; {self.alternative.method} is "
                f"predicted to take {seconds:.1f} s"
            )


class NoBudget(Budget):
    """For callers that run a method as told (benchmarks, references): never stops it."""

    def __init__(self) -> None:
        self.method, self.predicted_s = "", 0.0
        self.soft = self.hard = float("inf")
        self.alternative = None
        self.trajectories = 0
        self.learned_s = 0.0
        self.memory_bytes = 2**62
        self.start = time.perf_counter()
        self.base_memory = 0
        self._memory_checked = 0.0
        self.done = 0.0

    def check(self, done: float | None = None) -> None:
        return None


def fitting_methods(plan: NoisyRunPlan, guard: GuardSettings, why: list[str]) -> list[str]:
    """The plan's methods, cheapest first, that fit the memory budget and the time ceiling;
    each one left out adds its reason to ``why``."""
    kept = []
    for name in plan.ranked():
        needed = plan.estimated_memory.get(name, 0.0)
        predicted = plan.estimated_seconds[name]
        if needed > guard.memory_bytes:
            why.append(
                f"{name} not tried: needs ~{needed / 2**30:.1f} GB, over the "
                f"{guard.memory_bytes / 2**30:.1f} GB budget"
            )
        elif predicted > guard.max_seconds:
            why.append(
                f"{name} not tried: predicted {predicted:.0f} s, over the "
                f"{guard.max_seconds:.0f} s ceiling"
            )
        else:
            kept.append(name)
    return kept


def still_fitting(
    plan: NoisyRunPlan, guard: GuardSettings, candidates: list[str], why: list[str]
) -> list[str]:
    """``candidates`` not tried yet, re-ranked on a repriced plan; those now over the ceiling
    are dropped with their reason added to ``why``."""
    kept = []
    for name in sorted(candidates, key=plan.estimated_seconds.__getitem__):
        predicted = plan.estimated_seconds[name]
        if predicted > guard.max_seconds:
            why.append(
                f"{name} not tried: at the trajectories this circuit needs, predicted "
                f"{predicted:.0f} s, over the {guard.max_seconds:.0f} s ceiling"
            )
        else:
            kept.append(name)
    return kept


def remember_miss(circuit: Any, budget: Budget, stopped: bool) -> None:
    """A method missed its price on this circuit: the cost model remembers by how much (what it
    would have taken, at its pace, where it was stopped)."""
    took = budget.projected() if stopped and budget.done > 0 else budget.elapsed()
    record_miss(circuit, budget.method, took / max(budget.predicted_s, 1e-6))
