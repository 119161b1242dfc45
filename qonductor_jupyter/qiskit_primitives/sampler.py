"""``Sampler``: qiskit's ``BaseSamplerV2`` on the orchestrated fleet.

``Sampler(mode=None).run([(circuit, parameter_values, shots), ...])`` takes PUBs as qiskit's own
samplers do (``SamplerPub.coerce``: the same broadcasting and the same errors for bad input, all
raised before anything is queued) and returns qiskit's containers: per PUB a ``DataBin`` with one
``BitArray`` per classical register under the register's name, of the PUB's shape. Each PUB is
one QPU job, all its parameter sets bound where it runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from qiskit.primitives import BaseSamplerV2, SamplerPubResult
from qiskit.primitives.containers.sampler_pub import SamplerPub, SamplerPubLike

from kernel_server.core.pubs import PubJob, sampler_data, sampler_job

from .base import FleetPrimitive
from .job import QonductorJob
from .options import SamplerOptions


class Sampler(FleetPrimitive, BaseSamplerV2):
    """Samples PUBs on the fleet. ``mode``: None (the orchestrator places each PUB), a device
    or template name or ``qonductor_jupyter.backend(...)``, a ``Session`` or a ``Batch``;
    ``options``: a dict or ``SamplerOptions`` (``default_shots``, ``resilience_level``,
    ``dynamical_decoupling``, ``twirling``, ``simulator``, ``priority``, ``plan``)."""

    _options_class = SamplerOptions

    @property
    def default_shots(self) -> int:
        return int(self._options.default_shots)

    def run(self, pubs: Iterable[SamplerPubLike], *, shots: int | None = None) -> QonductorJob:
        if shots is None:
            shots = self._options.default_shots
        coerced = [SamplerPub.coerce(pub, shots) for pub in pubs]
        pin = self._pin()
        for index, pub in enumerate(coerced):
            if not pub.circuit.cregs:
                warnings.warn(
                    f"The {index}-th circuit has no output classical registers and so the "
                    "result will be empty. Did you mean to add measurement instructions?",
                    UserWarning,
                    stacklevel=2,
                )
            self._check_fits(pub.circuit, pin)
        return self._submit(coerced)

    def _pub_job(self, pub: SamplerPub) -> PubJob:
        return sampler_job(pub)

    def _pub_result(
        self, pub: SamplerPub, job: PubJob, counts: list[Any], metadata: dict[str, Any], rng: Any
    ) -> SamplerPubResult:
        return SamplerPubResult(
            sampler_data(pub, counts, rng),
            metadata={
                "shots": pub.shots,
                "circuit_metadata": pub.circuit.metadata,
                **metadata,
            },
        )


SamplerV2 = Sampler
