"""Qiskit's primitives on the orchestrated fleet: ``Sampler``, ``Estimator`` (V2), their modes
(``Session``, ``Batch``, a device or template) and a ``BackendV2`` view of the fleet's devices.

Changing the line that constructs the primitive (``Sampler(mode=...)``) or the backend
(``backend("fake_kolkata")``) is all a Qiskit program needs to run on the fleet. Imported on
first use (``qonductor_jupyter.Sampler``): it loads qiskit.
"""

from .backend import FleetBackend, backend
from .estimator import Estimator, EstimatorV2
from .execution import PrimitiveJobError
from .job import QonductorJob
from .modes import Batch, Session
from .options import EstimatorOptions, SamplerOptions
from .sampler import Sampler, SamplerV2

__all__ = [
    "Batch",
    "Estimator",
    "EstimatorOptions",
    "EstimatorV2",
    "FleetBackend",
    "PrimitiveJobError",
    "QonductorJob",
    "Sampler",
    "SamplerOptions",
    "SamplerV2",
    "Session",
    "backend",
]
