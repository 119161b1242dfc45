"""Resource estimator: estimates and resource plans from learned fidelity and runtime models,
with the numerical baseline, template QPUs, prices and Pareto ranking.

Submodules are imported on first use so that the orchestrator's start-up stays quick.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "RuntimeModel": "runtime",
    "ModelFileError": "forest",
    "FidelityModel": "fidelity",
    "estimate": "plans",
    "resource_plans": "plans",
    "Estimate": "plans",
    "ResourcePlan": "plans",
    "CircuitNotEstimable": "plans",
    "NumericalEstimator": "numerical",
    "TemplateQPU": "templates",
    "TemplateRegistry": "templates",
    "PriceTable": "prices",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
