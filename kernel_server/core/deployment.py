"""Deployment configuration of a workflow image (the dict or YAML a user passes).

Example::

    qpu: {min_qubits: 20, families: [Eagle]}
    shots: 4000
    priority: balanced

Unknown keys are refused with the list of known ones, so a typo never silently does nothing.

Checked by hand first: a decoder such as ``msgspec.convert`` would give "Object contains unknown
field `shot` - at `$`", where a notebook user needs the option's name and the options there are.
What passes becomes a :class:`RunOptions` (:func:`run_options`): the run's options, typed and
defaulted here once, which the orchestrator carries, stores and reads by attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from kernel_server.core.circuits import DEFAULT_SHOTS, check_shots
from kernel_server.core.resources import ClassicalRequest

PRIORITIES = ("fidelity", "balanced", "jct")
# The per-job QPU placement rules a workflow may name (kernel_server.scheduler.placement implements
# them, and a test checks that the two agree): named here so that a config is checked without
# importing the scheduler.
PLACEMENT_POLICIES = ("qonductor", "highest-fidelity", "fidelity-tolerance", "least-busy")
DEFAULT_PLACEMENT = "qonductor"


class ConfigError(ValueError):
    pass


_QPU_KEYS: dict[str, type | tuple[type, ...]] = {
    "min_qubits": int,
    "max_qubits": int,
    "families": list,
    "backends": list,
}
# What each classical step of the workflow needs from the node it runs on.
_CLASSICAL_KEYS: dict[str, type | tuple[type, ...]] = {
    "cores": int,
    "memory_gb": (int, float),
    "accelerator": str,
    "accelerator_count": int,
    "node_selector": dict,
}
_TOP_KEYS: dict[str, type | tuple[type, ...]] = {
    "qpu": dict,
    "classical": dict,
    "shots": int,
    "priority": str,
    "seed": int,
    "timeout_s": (int, float),
    # Stop a step that runs longer (capped by the orchestrator's limits.step_timeout_s).
    "step_timeout_s": (int, float),
    "placement": str,
    "plan": (str, int),
}

Priority = Literal["fidelity", "balanced", "jct"]


class QpuRequirements(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Which QPUs a workflow's jobs may use (the ``qpu:`` section; encoded as given: only the
    requirements set)."""

    min_qubits: int = 0
    max_qubits: int | None = None
    families: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()


class DeploymentConfig(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """Run options as one layer sets them: an image's deployment config (a dict or YAML file),
    or an invocation's options (the magic's flags). Only what the layer sets is there (encoded
    as given); :func:`validate_config` makes one, ``over`` lays one on another, and
    :func:`run_options` defaults the rest."""

    qpu: QpuRequirements | UnsetType = UNSET
    classical: ClassicalRequest | UnsetType = UNSET
    shots: int | UnsetType = UNSET
    priority: Priority | UnsetType = UNSET
    seed: int | UnsetType = UNSET
    timeout_s: float | UnsetType = UNSET
    step_timeout_s: float | UnsetType = UNSET
    placement: str | UnsetType = UNSET
    plan: str | int | UnsetType = UNSET

    def over(self, base: DeploymentConfig) -> DeploymentConfig:
        """``base`` with what this layer sets on top (a section, such as ``qpu``, as a whole)."""
        return msgspec.structs.replace(base, **self.given())

    def given(self) -> dict[str, Any]:
        """What this layer sets, by option name (typed values)."""
        return {
            name: value
            for name in self.__struct_fields__
            if (value := getattr(self, name)) is not UNSET
        }

    def as_builtins(self) -> dict[str, Any]:
        """What this layer sets as plain values: JSON's form, as a user writes it (lists, where
        ``msgspec.to_builtins`` would keep tuples)."""
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return out


class RunOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A workflow run's options: its image's deployment config with the invocation's on top,
    checked by :func:`validate_config` and defaulted here, the only place the defaults live."""

    qpu: QpuRequirements = QpuRequirements()
    classical: ClassicalRequest | None = None  # None: classical_request's defaults
    shots: int = DEFAULT_SHOTS
    priority: Priority = "balanced"
    seed: int | None = None
    timeout_s: float | None = None
    step_timeout_s: float | None = None
    placement: str | None = None  # None: the orchestrator's own placement policy
    plan: str | int = "auto"


def run_options(config: DeploymentConfig | Mapping[str, Any] | RunOptions | None) -> RunOptions:
    """The typed options of a config (a deployment config, an invocation's, a stored run's),
    defaulted; ConfigError in the user's words where one is wrong."""
    if isinstance(config, RunOptions):
        return config
    layer = config if isinstance(config, DeploymentConfig) else validate_config(config or {})
    return RunOptions(**layer.given())


def stored_options(saved: bytes | str | None) -> RunOptions:
    """Options the store kept (``msgspec.json.encode(options)``, or an older row's partial
    config): checked when they were given, so decoded as they are."""
    return msgspec.json.decode(saved or b"{}", type=RunOptions)


# What a user may give as a config: a checked one, a mapping as they write it (a dict, parsed
# YAML), a YAML file's path, or nothing.
ConfigSource = DeploymentConfig | Mapping[str, Any] | str | Path | None


def load_config(config: ConfigSource) -> DeploymentConfig:
    """The checked layer of a config source (an empty one for None)."""
    if config is None:
        return DeploymentConfig()
    if isinstance(config, DeploymentConfig):
        return validate_config(config.as_builtins())
    if isinstance(config, (str, Path)):
        import yaml

        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"configuration file {str(path)!r} does not exist")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a mapping, not {type(data).__name__}")
        return validate_config(data)
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a dict or a YAML file path, not {type(config).__name__}")
    return validate_config(config)


def _check(
    section: str, data: Mapping[str, object], schema: dict[str, type | tuple[type, ...]]
) -> None:
    for key, value in data.items():
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise ConfigError(f"unknown option {section}{key!r}; known options: {known}")
        expected = schema[key]
        if isinstance(value, bool) or not isinstance(value, expected):
            names = (
                expected.__name__
                if isinstance(expected, type)
                else "/".join(t.__name__ for t in expected)
            )
            raise ConfigError(f"option {section}{key!r} must be {names}, got {value!r}")


def validate_config(config: Mapping[str, Any]) -> DeploymentConfig:
    """The layer a user's mapping sets, checked: unknown options, wrong types and values are
    refused with the option's name (a decoder's "Object contains unknown field" would not say
    which options there are)."""
    config = dict(config or {})
    _check("", config, _TOP_KEYS)
    if "qpu" in config:
        _check("qpu.", config["qpu"], _QPU_KEYS)
        mq = config["qpu"].get("min_qubits")
        if mq is not None and mq < 1:
            raise ConfigError("qpu.min_qubits must be at least 1")
    if "classical" in config:
        _check("classical.", config["classical"], _CLASSICAL_KEYS)
        try:
            classical_request(config["classical"])
        except ValueError as exc:
            raise ConfigError(f"classical: {exc}") from None
    if "shots" in config:
        try:
            check_shots(config["shots"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
    if "placement" in config:
        if config["placement"] not in PLACEMENT_POLICIES:
            known = ", ".join(PLACEMENT_POLICIES)
            raise ConfigError(f"unknown placement policy {config['placement']!r}; known: {known}")
    if "plan" in config:
        from kernel_server.core.plans import PlanChoiceError, parse_plan_option

        try:
            config["plan"] = parse_plan_option(config["plan"])
        except PlanChoiceError as exc:
            raise ConfigError(str(exc)) from None
    if "step_timeout_s" in config and not config["step_timeout_s"] > 0:
        raise ConfigError(f"step_timeout_s must be positive, got {config['step_timeout_s']}")
    if "priority" in config and config["priority"] not in PRIORITIES:
        raise ConfigError(
            f"priority must be one of {', '.join(PRIORITIES)}, got {config['priority']!r}"
        )
    try:
        return msgspec.convert(config, DeploymentConfig)
    except msgspec.ValidationError as exc:  # a wrong element type in a list (qpu.families)
        raise ConfigError(f"invalid option: {exc}") from None


def classical_request(section: ClassicalRequest | Mapping[str, Any] | None) -> ClassicalRequest:
    """The ClassicalRequest of a workflow's ``classical:`` section (defaults: 1 core, 0.5 GB)."""
    if isinstance(section, ClassicalRequest):
        return section
    return ClassicalRequest(**(section or {}))
