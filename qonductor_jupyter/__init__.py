"""Qonductor for Jupyter: run hybrid quantum-classical cells on a background orchestrator.

Kept light on purpose: ``%load_ext qonductor_jupyter`` must not import qiskit, mitiq or pymoo.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = (
    "create_workflow",
    "deploy",
    "invoke",
    "workflow_status",
    "workflow_results",
    "workflow_info",
    "list_images",
    "list_workflows",
    "cancel",
    "choose_plan",
    "fleet",
)

# Qiskit's primitives on the fleet (qonductor_jupyter.qiskit_primitives, which loads qiskit).
_QISKIT = (
    "Sampler",
    "Estimator",
    "SamplerV2",
    "EstimatorV2",
    "Session",
    "Batch",
    "backend",
    "SamplerOptions",
    "EstimatorOptions",
)

from .primitives import estimate, sample  # noqa: E402  (light: no qiskit at import)

__all__ = [
    *_API,
    *_QISKIT,
    "sample",
    "estimate",
    "load_ipython_extension",
    "unload_ipython_extension",
]


def __getattr__(name: str) -> Any:
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _QISKIT:
        from . import qiskit_primitives

        return getattr(qiskit_primitives, name)
    raise AttributeError(f"module 'qonductor_jupyter' has no attribute {name!r}")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "qonductor-jupyter"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "qonductor_jupyter"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from .labserver import load

    load(server_app)


def load_ipython_extension(ipython: Any) -> None:
    from .magics import QonductorMagics
    from .settings import Qonductor

    # One settings object per shell, found by %config under its class name.
    settings = next((c for c in ipython.configurables if isinstance(c, Qonductor)), None)
    if settings is None:
        settings = Qonductor(parent=ipython)
        ipython.configurables.append(settings)
    ipython.register_magics(QonductorMagics(ipython, settings))


def unload_ipython_extension(ipython: Any) -> None:
    pass
