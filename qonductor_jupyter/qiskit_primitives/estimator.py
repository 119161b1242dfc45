"""``Estimator``: qiskit's ``BaseEstimatorV2`` on the orchestrated fleet.

``Estimator(mode=None).run([(circuit, observables, parameter_values, precision), ...])`` takes
PUBs as qiskit's own estimators do (``EstimatorPub.coerce``: observables and parameter values
broadcast together, and the same errors for bad input, raised before anything is queued) and
returns per PUB ``evs`` and ``stds`` of the broadcast shape. Each PUB is one QPU job: its
circuit once per qubit-wise commuting measurement basis of all its observables' terms, with
every parameter set bound where it runs. A precision asks for ``ceil(1/precision**2)`` shots per
basis (Qiskit Runtime's rule); ``stds`` are the standard errors those shots give.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qiskit.primitives import BaseEstimatorV2, PubResult
from qiskit.primitives.containers.estimator_pub import EstimatorPub, EstimatorPubLike

from kernel_server.core.pubs import PubJob, estimator_data, estimator_job, precision_shots

from .base import FleetPrimitive
from .job import QonductorJob
from .options import EstimatorOptions


class Estimator(FleetPrimitive, BaseEstimatorV2):
    """Estimates expectation values of PUBs on the fleet. ``mode`` as for ``Sampler``;
    ``options``: a dict or ``EstimatorOptions`` (``default_precision``, ``resilience_level``,
    ``dynamical_decoupling``, ``twirling``, ``simulator``, ``priority``, ``plan``)."""

    _options_class = EstimatorOptions

    @property
    def default_precision(self) -> float:
        return float(self._options.default_precision)

    def run(
        self, pubs: Iterable[EstimatorPubLike], *, precision: float | None = None
    ) -> QonductorJob:
        if precision is None:
            precision = self._options.default_precision
        coerced = [EstimatorPub.coerce(pub, precision) for pub in pubs]
        pin = self._pin()
        for pub in coerced:
            # Shots come from the precision: 0 would ask for infinitely many (Qiskit Runtime
            # refuses it with these words).
            if pub.precision is not None and pub.precision <= 0:
                raise ValueError("The precision value must be strictly greater than 0.")
            if pub.observables.shape == (0,):
                raise ValueError("Empty observables array is not allowed")
            self._check_fits(pub.circuit, pin)
        return self._submit(coerced)

    def _pub_job(self, pub: EstimatorPub) -> PubJob:
        assert pub.precision is not None
        return estimator_job(pub, precision_shots(pub.precision))

    def _pub_result(
        self, pub: EstimatorPub, job: PubJob, counts: list[Any], metadata: dict[str, Any], rng: Any
    ) -> PubResult:
        return PubResult(
            estimator_data(pub, job, counts),
            metadata={
                "target_precision": pub.precision,
                "shots": job.shots,
                "circuit_metadata": pub.circuit.metadata,
                **metadata,
            },
        )


EstimatorV2 = Estimator
