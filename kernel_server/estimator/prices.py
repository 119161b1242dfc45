"""Price table for resource plans: what a second of QPU time and of classical time costs.

Defaults are the midpoints of the IBM Cloud prices the Qonductor paper lists in its Table 1
(standard VM 1-5 $/h, high-end VM 10-40 $/h, QPU 3000-6000 $/h): QPU time costs about 100x a
high-end VM's and about 1500x a standard VM's. They are configuration, not constants: pass a
``PriceTable`` (or a dict with the same keys) wherever plans are made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Accelerator:
    """A classical node kind for mitigation post-processing.

    ``speedup`` is how much faster than one standard-VM core it runs the post-processing work; the
    work of the techniques here (extrapolation, quasi-probability sums, cut reconstruction) is
    dominated by independent per-circuit terms, so it parallelises over cores.
    """

    name: str
    dollars_per_hour: float
    speedup: float


@dataclass(frozen=True)
class PriceTable:
    qpu_dollars_per_hour: float = 4500.0
    accelerators: dict[str, Accelerator] = field(
        default_factory=lambda: {
            "standard-vm": Accelerator("standard-vm", 3.0, 1.0),
            "high-end-vm": Accelerator("high-end-vm", 25.0, 8.0),
        }
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PriceTable:
        if not data:
            return cls()
        unknown = set(data) - {"qpu_dollars_per_hour", "accelerators"}
        if unknown:
            raise ValueError(
                f"unknown price table keys {sorted(unknown)}; known: "
                "qpu_dollars_per_hour, accelerators"
            )
        accelerators = cls().accelerators
        if "accelerators" in data:
            accelerators = {
                name: Accelerator(name, float(a["dollars_per_hour"]), float(a.get("speedup", 1)))
                for name, a in data["accelerators"].items()
            }
        return cls(float(data.get("qpu_dollars_per_hour", cls.qpu_dollars_per_hour)), accelerators)

    def accelerator(self, name: str) -> Accelerator:
        try:
            return self.accelerators[name]
        except KeyError:
            known = ", ".join(self.accelerators)
            raise ValueError(f"unknown accelerator {name!r}; known: {known}") from None

    def cost(
        self, quantum_seconds: float, classical_work_seconds: float, accelerator: str
    ) -> tuple[float, float]:
        """(classical wall seconds on that accelerator, total dollars).

        ``accelerator`` "none" is for work without a classical part (``classical_work_seconds``
        must then be 0)."""
        if accelerator == "none":
            if classical_work_seconds:
                raise ValueError("classical work needs an accelerator, not 'none'")
            return 0.0, quantum_seconds * self.qpu_dollars_per_hour / 3600.0
        acc = self.accelerator(accelerator)
        classical_seconds = classical_work_seconds / acc.speedup
        dollars = (
            quantum_seconds * self.qpu_dollars_per_hour + classical_seconds * acc.dollars_per_hour
        ) / 3600.0
        return classical_seconds, dollars
