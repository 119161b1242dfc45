"""One file describes the fleet: simulated QPUs, IBM Quantum backends, background load, prices.

    # fleet.yaml
    simulated: small               # "default", "small", or a list of fake backend names
    ibm:
      backends: [ibm_brisbane]     # joined when an IBM Quantum account is configured
      execution_mode: batch        # job | batch (SamplerV2 in a Batch session)
      local_testing: false         # true: the names are fake backends run through
                                   # qiskit-ibm-runtime's local testing mode (no account)
      billed: true                 # runs cost money (default: not local_testing)
      queue_refresh_s: 60          # how often queue lengths are read
      calibration_refresh_s: 3600  # how often calibrations are re-read
    background:                    # other users' jobs on each simulated QPU
      jobs_per_hour: 30
      mean_runtime_s: 20
    prices:                        # estimator.prices.PriceTable
      qpu_dollars_per_hour: 4500
    cluster: tcp://10.0.0.5:8786   # a Dask scheduler for classical steps and simulations
    limits:                        # refused before any work starts
      max_qubits: 200
      max_shots: 1000000
      max_payload_bytes: 268435456
      step_timeout_s: 3600         # a classical step running longer is stopped

``--fleet`` (and ``QONDUCTOR_FLEET``) take either such a file or the short forms of
:func:`backends.fleets.resolve_fleet`. Unknown keys are refused with the known ones listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_server.backends.fleets import resolve_fleet
from kernel_server.scheduler.online import BALANCE_OFF

EXECUTION_MODES = ("job", "batch")


class FleetConfigError(ValueError):
    pass


@dataclass(frozen=True)
class IBMFleet:
    backends: tuple[str, ...]
    execution_mode: str = "job"
    local_testing: bool = False
    queue_refresh_s: float = 60.0
    calibration_refresh_s: float = 3600.0
    # Whether runs cost money (the orchestrator then never runs a job there twice). Real IBM
    # QPUs are billed; local testing is free unless billed: true rehearses a paid fleet.
    billed: bool | None = None

    @property
    def is_billed(self) -> bool:
        return (not self.local_testing) if self.billed is None else self.billed


@dataclass(frozen=True)
class BackgroundLoad:
    """Poisson arrivals of other users' jobs on every simulated QPU, exponential run times."""

    jobs_per_hour: float
    mean_runtime_s: float = 20.0
    seed: int = 0


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; anything larger is refused before work starts."""

    max_qubits: int = 200
    max_shots: int = 1_000_000
    max_payload_bytes: int = 256 * 1024 * 1024
    # A classical step that runs longer is stopped (a workflow's timeout_s can only lower it).
    step_timeout_s: float = 3600.0


@dataclass(frozen=True)
class FleetSpec:
    simulated: tuple[str, ...]
    ibm: IBMFleet | None = None
    background: BackgroundLoad | None = None
    prices: dict[str, Any] = field(default_factory=dict)
    cluster: str | None = None
    limits: Limits = field(default_factory=Limits)
    # Load balancing of the quantum scheduler (scheduler.balance): a tolerance for every preset,
    # "off" for none; None leaves it to each preset (OnlinePreset.balance: jct and balanced keep
    # 0.1, fidelity 0.3).
    balance: float | str | None = None
    # The quantile of a job's predicted run time the scheduler plans with (scheduler.
    # runtime_quantile): 0.5 the runtime model's central value; above, the upper end of its
    # interval (IBM devices; simulated ones have a point estimate only).
    runtime_quantile: float = 0.5

    @property
    def names(self) -> list[str]:
        return list(self.simulated) + list(self.ibm.backends if self.ibm else ())


_TOP = {"simulated", "ibm", "background", "prices", "cluster", "limits", "scheduler"}
_SCHEDULER = {"balance", "runtime_quantile"}
_LIMITS = {"max_qubits", "max_shots", "max_payload_bytes", "step_timeout_s"}
_IBM = {
    "backends",
    "execution_mode",
    "local_testing",
    "queue_refresh_s",
    "calibration_refresh_s",
    "billed",
}
_BACKGROUND = {"jobs_per_hour", "mean_runtime_s", "seed"}


def _section(where: str, data: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise FleetConfigError(f"{where} must be a mapping, not {type(data).__name__}")
    unknown = set(data) - known
    if unknown:
        raise FleetConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))} in "
            f"{where}; known: {', '.join(sorted(known))}"
        )
    return data


def _positive(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise FleetConfigError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _names(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(resolve_fleet(value))
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FleetConfigError(f"{where} must be a list of backend names or a fleet name")
    return tuple(value)


def fleet_spec_from_dict(data: dict[str, Any], where: str = "fleet") -> FleetSpec:
    """The fleet a fleet.yaml's content describes; ``FleetConfigError`` names what is wrong
    (``where`` prefixes the key paths in the messages)."""
    data = _section(where, data, _TOP)
    simulated = _names(f"{where}.simulated", data.get("simulated", []))
    ibm = None if data.get("ibm") is None else _ibm(f"{where}.ibm", data["ibm"])
    background = None
    if data.get("background") is not None:
        background = _background(f"{where}.background", data["background"])
    prices = data.get("prices") or {}
    if prices:
        _check_prices(f"{where}.prices", prices)
    cluster = data.get("cluster")
    if cluster is not None and (not isinstance(cluster, str) or "://" not in cluster):
        raise FleetConfigError(
            f"{where}.cluster must be a Dask scheduler address such as tcp://HOST:8786, "
            f"got {cluster!r}"
        )
    limits = Limits()
    if data.get("limits") is not None:
        limits = _limits(f"{where}.limits", data["limits"])
    balance, quantile = None, 0.5
    if data.get("scheduler") is not None:
        balance, quantile = _scheduler(f"{where}.scheduler", data["scheduler"])
    spec = FleetSpec(simulated, ibm, background, dict(prices), cluster, limits, balance, quantile)
    if not spec.names:
        raise FleetConfigError(f"{where} has no QPUs: list simulated devices or IBM backends")
    duplicated = {n for n in spec.names if spec.names.count(n) > 1}
    if duplicated:
        raise FleetConfigError(
            f"{where} names {', '.join(sorted(duplicated))} twice (as simulated and IBM QPU?)"
        )
    return spec


def _ibm(where: str, data: Any) -> IBMFleet:
    section = _section(where, data, _IBM)
    mode = section.get("execution_mode", "job")
    if mode not in EXECUTION_MODES:
        raise FleetConfigError(
            f"{where}.execution_mode must be one of {', '.join(EXECUTION_MODES)}, got {mode!r}"
        )
    local = section.get("local_testing", False)
    billed = section.get("billed")
    if not isinstance(local, bool) or not isinstance(billed, (bool, type(None))):
        raise FleetConfigError(f"{where}.local_testing and .billed must be true or false")
    return IBMFleet(
        backends=_names(f"{where}.backends", section.get("backends", [])),
        execution_mode=mode,
        local_testing=local,
        queue_refresh_s=_positive(f"{where}.queue_refresh_s", section.get("queue_refresh_s", 60)),
        calibration_refresh_s=_positive(
            f"{where}.calibration_refresh_s", section.get("calibration_refresh_s", 3600)
        ),
        billed=billed,
    )


def _background(where: str, data: Any) -> BackgroundLoad:
    section = _section(where, data, _BACKGROUND)
    return BackgroundLoad(
        jobs_per_hour=_positive(f"{where}.jobs_per_hour", section.get("jobs_per_hour")),
        mean_runtime_s=_positive(f"{where}.mean_runtime_s", section.get("mean_runtime_s", 20)),
        seed=int(section.get("seed", 0)),
    )


def _check_prices(where: str, prices: Any) -> None:
    from kernel_server.estimator.prices import PriceTable

    try:
        PriceTable.from_dict(prices)
    except (ValueError, TypeError, KeyError) as exc:
        raise FleetConfigError(f"{where}: {exc}") from None


def _limits(where: str, data: Any) -> Limits:
    section = _section(where, data, _LIMITS)
    values = {k: _positive(f"{where}.{k}", v) for k, v in section.items()}
    # Counts are whole numbers; the timeout stays in (fractional) seconds.
    kwargs: dict[str, Any] = {
        k: (v if k == "step_timeout_s" else int(v)) for k, v in values.items()
    }
    return Limits(**kwargs)


def _scheduler(where: str, data: Any) -> tuple[float | str | None, float]:
    section = _section(where, data, _SCHEDULER)
    balance = section.get("balance")
    if balance is False or balance == BALANCE_OFF:  # YAML reads a bare off as False
        balance = BALANCE_OFF
    elif balance is not None and (
        isinstance(balance, bool) or not isinstance(balance, (int, float)) or not 0 < balance < 1
    ):
        raise FleetConfigError(
            f"{where}.balance is a tolerance above 0 and below 1 such as 0.1 (each QPU's load "
            f"within about 10% of the even load), or off; got {balance!r}"
        )
    quantile = section.get("runtime_quantile", 0.5)
    if (
        isinstance(quantile, bool)
        or not isinstance(quantile, (int, float))
        or not (0.5 <= quantile < 1)
    ):
        raise FleetConfigError(
            f"{where}.runtime_quantile is the share of jobs whose run time the scheduler's "
            f"plan should cover, from 0.5 (the central estimate) to below 1 such as 0.9, "
            f"got {quantile!r}"
        )
    return balance, float(quantile)


def load_fleet_spec(spec: str) -> FleetSpec:
    """A fleet.yaml path, or a short form ('default', 'small', comma-separated names)."""
    path = Path(spec)
    if spec.endswith((".yaml", ".yml")) or path.is_file():
        import yaml

        if not path.is_file():
            raise FleetConfigError(f"fleet file {spec!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise FleetConfigError(f"{spec} is not valid YAML: {exc}") from None
        return fleet_spec_from_dict(data, where=path.name)
    return FleetSpec(tuple(resolve_fleet(spec)))
