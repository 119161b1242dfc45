"""Expectation values from counts: qiskit's sampled_expectation_value against the definition."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_server.backends.observables import PauliGroup, group_expectations

pytestmark = pytest.mark.unit


def parity_definition(labels, measured, counts):
    """<P> = sum over outcomes of (-1)^(parity of the measured bits P acts on) x probability."""
    size, total = len(measured), sum(counts.values())
    out = []
    for label in labels:
        support = [j for j, q in enumerate(measured) if label[-1 - q] != "I"]
        value = sum(
            (-1.0 if sum(key[size - 1 - j] == "1" for j in support) % 2 else 1.0) * c
            for key, c in counts.items()
        )
        out.append(value / total)
    return out


def test_group_expectations_agree_with_the_parity_definition() -> None:
    rng = np.random.default_rng(5)
    for _ in range(25):
        n = int(rng.integers(1, 6))
        measured = tuple(sorted(rng.choice(6, size=n, replace=False).tolist()))
        width = max(measured) + 1
        labels = tuple(
            "".join("Z" if q in measured and rng.random() < 0.6 else "I" for q in range(width))[
                ::-1
            ]
            for _ in range(3)
        )
        keys = {format(int(k), f"0{n}b") for k in rng.integers(0, 2**n, size=8)}
        counts = {k: int(rng.integers(1, 50)) for k in keys}
        group = PauliGroup(labels, (1.0,) * 3, measured, ("Z",) * n)
        assert np.allclose(
            group_expectations(group, counts), parity_definition(labels, measured, counts)
        )
