"""A primitive's options in Qiskit Runtime's vocabulary, and the mitigation stacks they name.

``Sampler(options={"default_shots": 2000, "dynamical_decoupling": {"enable": True}})`` and
``sampler.options.twirling.enable_gates = True`` read as they do with Qiskit Runtime. They map
onto this project's mitigation stacks (``resilience_level`` 0: none; 1: readout error
mitigation (REM, by calibration matrix); 2: ZNE on top of it; gate twirling and dynamical
decoupling added on request). Left unset, the resource plan chooses among every stack, which is
what ``priority`` and ``plan`` (this project's own options) steer. An unknown option or value is
refused, naming the valid ones.

Runtime's level 1 is TREX (readout mitigation with twirled measurements); the REM here corrects
readout with a calibration matrix instead, which needs no measurement twirling.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any

from kernel_server.core.circuits import require_shots
from kernel_server.core.deployment import PRIORITIES

RESILIENCE_STACKS = {0: (), 1: ("rem",), 2: ("zne", "rem")}


class _Group:
    """Options grouped as Runtime groups them: attributes only from the declared fields."""

    def __setattr__(self, name: str, value: Any) -> None:
        known = [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]
        if name not in known:
            raise AttributeError(
                f"{type(self).__name__} has no option {name!r}; valid options: {', '.join(known)}"
            )
        checker = getattr(self, f"_check_{name}", None)
        object.__setattr__(self, name, checker(value) if checker else value)

    def update(self, values: dict[str, object] | None = None, **kwargs: Any) -> None:
        for name, value in {**(values or {}), **kwargs}.items():
            current = getattr(self, name, None)
            if isinstance(current, _Group) and isinstance(value, dict):
                current.update(value)
            else:
                setattr(self, name, value)


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return value


@dataclass
class DynamicalDecouplingOptions(_Group):
    enable: bool = False

    def _check_enable(self, value: Any) -> bool:
        return _flag(value, "dynamical_decoupling.enable")


@dataclass
class TwirlingOptions(_Group):
    enable_gates: bool = False

    def _check_enable_gates(self, value: Any) -> bool:
        return _flag(value, "twirling.enable_gates")


@dataclass
class SimulatorOptions(_Group):
    seed_simulator: int | None = None

    def _check_seed_simulator(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
            raise ValueError(f"simulator.seed_simulator must be a whole number >= 0, got {value!r}")
        return int(value)


@dataclass
class _PrimitiveOptions(_Group):
    resilience_level: int | None = None
    dynamical_decoupling: DynamicalDecouplingOptions = field(
        default_factory=DynamicalDecouplingOptions
    )
    twirling: TwirlingOptions = field(default_factory=TwirlingOptions)
    simulator: SimulatorOptions = field(default_factory=SimulatorOptions)
    priority: str = "balanced"
    plan: str | int = "auto"

    def _check_resilience_level(self, value: Any) -> int | None:
        if value is not None and (isinstance(value, bool) or value not in RESILIENCE_STACKS):
            raise ValueError(f"resilience_level must be 0, 1, 2 or None, got {value!r}")
        return value

    def _check_priority(self, value: Any) -> str:
        if value not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, got {value!r}")
        return str(value)

    def _check_plan(self, value: Any) -> str | int:
        if value in ("auto", "off"):
            return str(value)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
            return int(value)
        raise ValueError(f"plan must be 'auto', 'off' or a plan number (0, 1, ...), got {value!r}")

    def _check_dynamical_decoupling(self, value: Any) -> DynamicalDecouplingOptions:
        return _group(value, DynamicalDecouplingOptions)

    def _check_twirling(self, value: Any) -> TwirlingOptions:
        return _group(value, TwirlingOptions)

    def _check_simulator(self, value: Any) -> SimulatorOptions:
        return _group(value, SimulatorOptions)

    def stacks(self) -> tuple[str, ...]:
        """The mitigation stacks a plan may use: every one (empty) unless an option names one."""
        dd, twirl = self.dynamical_decoupling.enable, self.twirling.enable_gates
        if self.resilience_level is None and not dd and not twirl:
            return ()
        techniques = list(RESILIENCE_STACKS[self.resilience_level or 0])
        if twirl:
            techniques.insert(0, "twirl")
        if dd:
            techniques.append("dd")
        return ("+".join(techniques) or "none",)

    def run_options(self) -> dict[str, Any]:
        """The options a primitive's workflow (outside a ``%%qonductor`` cell) runs with."""
        return {"priority": self.priority, "plan": self.plan, "seed": self.simulator.seed_simulator}


def _group(value: Any, kind: type[_Group]) -> Any:
    if isinstance(value, kind):
        return value
    if isinstance(value, dict):
        group = kind()
        group.update(value)
        return group
    raise TypeError(f"expected a dict or {kind.__name__}, got {type(value).__name__}")


@dataclass
class SamplerOptions(_PrimitiveOptions):
    default_shots: int = 4096

    def _check_default_shots(self, value: Any) -> int:
        return require_shots(value, "default_shots")


@dataclass
class EstimatorOptions(_PrimitiveOptions):
    # 1/64: 4096 shots per measurement basis (Qiskit Runtime's default precision).
    default_precision: float = 0.015625

    def _check_default_precision(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or float(value) <= 0:
            raise ValueError(f"default_precision must be a number > 0, got {value!r}")
        return float(value)


def make_options(kind: type[_PrimitiveOptions], options: Any) -> Any:
    """The options a primitive was given (a dict, an options object, or None)."""
    return kind() if options is None else _group(options, kind)
