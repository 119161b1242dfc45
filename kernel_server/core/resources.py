"""What a classical job asks of the node it runs on: a workflow's ``classical:`` section.

A domain record (the deployment config names it, the classical scheduler places it), so it lives
below both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


def is_int(value: object) -> bool:
    # bool is an int subclass, but True cores is a caller bug, not one core.
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_str_mapping(what: str, mapping: Mapping[str, str]) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise ValueError(
                f"{what} must map non-empty strings to strings, got {key!r}: {value!r}"
            )


# --------------------------------------------------------------------------- nodes and requests


def number_text(value: float) -> str:
    """A number as a person would write it: 16 not 16.0, 3.5 not 3.5000000001."""
    return f"{round(value, 2):g}"


def cores_text(n: int) -> str:
    return f"{n} core" if n == 1 else f"{n} cores"


def labels_text(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in labels.items())


@dataclass(frozen=True)
class ClassicalRequest:
    """What one classical job needs from the node it runs on."""

    cores: int = 1
    memory_gb: float = 0.5
    accelerator: str | None = None
    # Only meaningful when ``accelerator`` is set; a job without one asks for no accelerators.
    accelerator_count: int = 1
    node_selector: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not is_int(self.cores) or self.cores < 1:
            raise ValueError(
                f"a classical job needs a positive whole number of cores, got {self.cores!r}"
            )
        if not is_number(self.memory_gb) or not math.isfinite(self.memory_gb) or self.memory_gb < 0:
            raise ValueError(
                f"memory_gb must be a non-negative number of GB, got {self.memory_gb!r}"
            )
        if self.accelerator is not None:
            if not isinstance(self.accelerator, str) or not self.accelerator:
                raise ValueError(
                    f"accelerator must be a kind such as 'gpu' or None, got {self.accelerator!r}"
                )
            if not is_int(self.accelerator_count) or self.accelerator_count < 1:
                raise ValueError(
                    f"accelerator_count must be a positive integer when accelerator="
                    f"{self.accelerator!r}, got {self.accelerator_count!r}"
                )
        check_str_mapping("node_selector", self.node_selector)
        object.__setattr__(self, "node_selector", dict(self.node_selector))

    def __hash__(self) -> int:
        return hash(
            (
                self.cores,
                self.memory_gb,
                self.accelerator,
                self.accelerators_needed,
                tuple(sorted(self.node_selector.items())),
            )
        )

    @property
    def accelerators_needed(self) -> int:
        """How many accelerators the job takes: ``accelerator_count``, or 0 without a kind."""
        return self.accelerator_count if self.accelerator is not None else 0

    def describe(self) -> str:
        """The request in words, for error messages and logs."""
        parts = [cores_text(self.cores), f"{number_text(self.memory_gb)} GB memory"]
        if self.accelerator is not None:
            parts.append(f"{self.accelerator_count} {self.accelerator}")
        text = ", ".join(parts)
        if self.node_selector:
            text += " on nodes labelled " + labels_text(self.node_selector)
        return text
