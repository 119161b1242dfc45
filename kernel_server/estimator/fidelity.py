"""Learned fidelity model: Hellinger fidelity of a (mitigated) run from features known beforehand.

Inputs per prediction (``MODEL_FEATURES``):

* the compiled circuit on the device or template (``features.CircuitFeatures``: width, depth,
  gate and measurement counts, the error rates and coherence times of what the layout uses, the
  numerical baseline's log-fidelity);
* the mitigation stack's kind and parameters (:func:`stack_features`);
* a summary of the circuit's ideal outcome distribution (``ideal.IdealSummary``), because the
  Hellinger fidelity of a noisy run depends on it as much as on the noise: ``depolarized_hellinger``
  and ``approximate_hellinger`` are that fidelity under two cheap noise pictures. Circuits wider
  than ``ideal.IDEAL_MAX_QUBITS`` measured qubits have no ideal summary: those features are -1,
  and the model is trained on copies of every row with them masked so it knows that case too.

Wide circuits (more than ``IDEAL_MAX_QUBITS`` measured qubits) have a correction of their own,
trained on runs of 17-40 qubit circuits whose ideal outcome is known by construction
(``wide_data``): masked small circuits taught the general fallback nothing that carries over to
them (11% of wide runs within 0.05). Its physics baseline (``wide_baseline``) is the error product
of the measurements' light cone with idle relaxation charged, as ``ideal.approximate_hellinger``
charges it.

The regressor is scikit-learn gradient boosting; the shipped file holds its trees as arrays
(``forest.TreeForest``) so prediction needs numpy only. Train with ``qonductor train fidelity``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from qiskit import QuantumCircuit

from kernel_server.estimator.forest import (
    ForestFile,
    TreeForest,
    load_model_json,
    save_model_json,
)
from kernel_server.estimator.forest import ModelFileError as ModelFileError  # re-exported
from kernel_server.estimator.ideal import IDEAL_COLUMNS, IDEAL_MAX_QUBITS

# --------------------------------------------------------------------------------------------
# Mitigation features
# --------------------------------------------------------------------------------------------

# The stacks the model is trained on (fidelity_data runs them) and resource plans are made of.
# Cutting is not among them: its subexperiments measure mid-circuit, so there is no outcome
# distribution to compare.
TRAINED_STACKS: tuple[str, ...] = (
    "none",
    "rem",
    "dd",
    "dd+rem",
    "twirl",
    "twirl+rem+dd",
    "zne",
    "zne+rem",
    "pec",
)

STACK_COLUMNS: tuple[str, ...] = (
    "techniques",
    "rem",
    "dd",
    "twirl_variants",
    "zne_factors",
    "zne_max_factor",
    "zne_richardson",
    "pec_samples",
    "pec_log_gamma",
    "pec_noise_level",
)


def stack_features(stack: Any, circuit: QuantumCircuit) -> dict[str, float]:
    """The mitigation kind and its parameters as numbers (zeros for techniques not in it)."""
    from kernel_server.estimator.mitigation.stack import parse_stack

    stack = parse_stack(stack)
    by_name = {t.name: t for t in stack.techniques}
    row = dict.fromkeys(STACK_COLUMNS, 0.0)
    row["techniques"] = float(len(stack))
    row["rem"] = float("rem" in by_name)
    row["dd"] = float("dd" in by_name)
    if "twirl" in by_name:
        row["twirl_variants"] = float(by_name["twirl"].config["num_variants"])
    if "zne" in by_name:
        cfg = by_name["zne"].config
        factors = [float(f) for f in cfg["noise_factors"]]
        row["zne_factors"] = float(len(factors))
        row["zne_max_factor"] = max(factors)
        row["zne_richardson"] = float(cfg["extrapolation"] == "richardson")
    if "pec" in by_name:
        pec = by_name["pec"]
        row["pec_samples"] = float(pec.config["num_samples"])
        row["pec_log_gamma"] = math.log(pec.one_norm(circuit))
        row["pec_noise_level"] = float(pec.config["noise_level"])
    unsupported = set(by_name) - {"rem", "dd", "twirl", "zne", "pec"}
    if unsupported:
        raise ValueError(
            f"the fidelity model has no training data for {sorted(unsupported)}; "
            "it knows rem, dd, twirl, zne and pec"
        )
    return row


# Gates that map computational basis states to basis states (permutations and diagonals).
_BASIS_PRESERVING = frozenset(
    "x y z id cx cy cz ccx swap cswap s sdg t tdg rz p u1 cp crz cu1 rzz".split()
)
CIRCUIT_COLUMNS: tuple[str, ...] = ("basis_preserving_fraction", "virtual_two_qubit_gates")


def circuit_class_features(circuit: QuantumCircuit) -> dict[str, float]:
    """What kind of circuit it is, before compilation, in standard gates.

    ``basis_preserving_fraction``: the share of gates that keep basis states basis states. A
    classical-reversible circuit (an adder) is all such gates, and phase errors in it cannot
    change an outcome, so it keeps more fidelity than its error product says; the correction
    learns how much from this column (leave-families-out: +0.7 points within 0.05, mitigated MAE
    0.041 -> 0.037, together with ``routing_overhead``). Control flow counts along its costliest
    branch.
    """
    from kernel_server.backends.dynamic import costliest_path
    from kernel_server.estimator.mitigation.stack import standard_gates

    gates = [
        ci
        for ci in costliest_path(standard_gates(circuit)).data
        if ci.operation.name not in ("measure", "barrier", "reset", "delay")
    ]
    preserving = sum(ci.operation.name in _BASIS_PRESERVING for ci in gates)
    return {
        "basis_preserving_fraction": preserving / len(gates) if gates else 1.0,
        "virtual_two_qubit_gates": float(sum(len(ci.qubits) >= 2 for ci in gates)),
    }


def model_row(
    features: Mapping[str, float],
    ideal: Mapping[str, float],
    stack: Mapping[str, float],
    circuit_class: Mapping[str, float],
) -> dict[str, float]:
    """One input row in ``model_features()`` terms."""
    from kernel_server.estimator.features import FEATURE_COLUMNS

    row = {name: float(features[name]) for name in FEATURE_COLUMNS}
    row.update({name: float(ideal[name]) for name in IDEAL_COLUMNS})
    row.update({name: float(stack[name]) for name in STACK_COLUMNS})
    row.update({name: float(circuit_class[name]) for name in CIRCUIT_COLUMNS})
    row.update(derived_features(row))
    return row


DERIVED_COLUMNS: tuple[str, ...] = (
    "decoherence_t1",
    "decoherence_t2",
    "routing_overhead",
    "baseline",
)


def derived_features(row: Mapping[str, float]) -> dict[str, float]:
    """Ratios trees cannot form themselves, and the physics baseline the trees correct.

    ``baseline`` is ``approximate_hellinger`` where the ideal distribution is known, else the
    numerical fidelity; the model predicts ``baseline`` plus a learned correction.
    """
    qubit_seconds = float(row["num_qubits"]) * float(row["duration_s"])
    t1, t2 = float(row["mean_t1_s"]), float(row["mean_t2_s"])
    approx = float(row["approximate_hellinger"])
    return {
        "decoherence_t1": qubit_seconds / t1 if t1 > 0 else 0.0,
        "decoherence_t2": qubit_seconds / t2 if t2 > 0 else 0.0,
        # Two-qubit gates compiled per two-qubit gate written: what routing added.
        "routing_overhead": float(row["two_qubit_gates"])
        / max(float(row["virtual_two_qubit_gates"]), 1.0),
        "baseline": approx if approx >= 0 else math.exp(float(row["log_fidelity"])),
    }


def model_features() -> tuple[str, ...]:
    """Input columns of the fidelity model, in order."""
    from kernel_server.estimator.features import FEATURE_COLUMNS

    return (
        tuple(FEATURE_COLUMNS) + IDEAL_COLUMNS + STACK_COLUMNS + CIRCUIT_COLUMNS + DERIVED_COLUMNS
    )


def wide_baseline(x: np.ndarray, features: Sequence[str]) -> np.ndarray:
    """The wide correction's baseline per row of a ``features`` matrix: the error product of the
    measurements' light cone, idling charged at half a qubit's population decaying with T1."""
    features = list(features)
    cone = x[:, features.index("cone_log_fidelity")].astype(np.float64)
    idle = x[:, features.index("idle_t1_exposure")].astype(np.float64)
    return np.exp(np.minimum(cone - 0.5 * idle, 0.0))


def wide_matrix(x: np.ndarray, features: Sequence[str]) -> np.ndarray:
    """The wide correction's input: the ``features`` columns and the wide baseline."""
    return np.column_stack([x, wide_baseline(x, features)]).astype(np.float32)


def unmitigated(x: np.ndarray, features: Sequence[str]) -> np.ndarray:
    """``x`` with every mitigation column zeroed: the same runs without a stack."""
    out = np.array(x, copy=True)
    for name in STACK_COLUMNS:
        out[:, list(features).index(name)] = 0.0
    return out


def complete(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with their derived columns (rows read from a runs file lack them)."""
    return [{**row, **derived_features(row)} for row in rows]


def as_matrix(rows: Sequence[Mapping[str, float]], columns: Sequence[str]) -> np.ndarray:
    return np.asarray([[float(r[c]) for c in columns] for r in rows], dtype=np.float32)


def compile_for(
    circuit: QuantumCircuit, backend: Any, layout: Sequence[int] | None = None
) -> QuantumCircuit:
    """The circuit as a mitigated or unmitigated run executes it, without the idle delays.

    Runs lay a job's circuits out once (``compile.choose_layout``) and transpile them at level 0
    on that layout (``compile.transpile_mitigated``), then schedule them; scheduling only adds
    delays, which change neither the features' depth nor their critical-path duration, so it is
    skipped here (it costs as much as the transpilation on 127-qubit devices).
    """
    from kernel_server.backends.compile import choose_layout, transpile_mitigated

    if layout is None:
        layout = choose_layout(circuit, backend)
    return transpile_mitigated(circuit, backend, layout, schedule=False)


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

FORMAT = "qonductor-fidelity-gbt/3"
_FORMATS = ("qonductor-fidelity-gbt/2", FORMAT)  # /2: no wide correction
DEFAULT_MODEL_PATH = Path(__file__).parent / "models" / "fidelity.json"
REBUILD_HINT = "rebuild it with `qonductor train fidelity`"


@dataclass
class BoostedCorrection:
    """Gradient-boosted trees whose sum corrects the physics baseline."""

    forest: TreeForest
    init: float
    learning_rate: float
    # Whether unmitigated runs get the correction too, or keep the baseline as it is.
    corrects_unmitigated: bool = True

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.init + self.learning_rate * self.forest.leaf_values(x).sum(axis=1)

    @classmethod
    def from_sklearn(cls, gbr: Any, corrects_unmitigated: bool = True) -> BoostedCorrection:
        trees = [estimator[0] for estimator in gbr.estimators_]
        leaves = [tree.tree_.value[:, 0, 0] for tree in trees]
        return cls(
            TreeForest.from_sklearn(trees, leaves),
            float(gbr.init_.constant_.ravel()[0]),
            float(gbr.learning_rate),
            corrects_unmitigated,
        )

    def to_json(self) -> CorrectionFile:
        return CorrectionFile(
            init=self.init,
            learning_rate=self.learning_rate,
            corrects_unmitigated=self.corrects_unmitigated,
            forest=self.forest.to_json(),
        )

    @classmethod
    def from_json(cls, d: CorrectionFile) -> BoostedCorrection:
        return cls(TreeForest.from_json(d.forest), d.init, d.learning_rate, d.corrects_unmitigated)


class CorrectionFile(msgspec.Struct, frozen=True):
    """A ``BoostedCorrection`` as the model file holds it."""

    init: float
    learning_rate: float
    corrects_unmitigated: bool
    forest: ForestFile


class FidelityModelFile(msgspec.Struct, frozen=True, omit_defaults=True):
    """The fidelity model file: format, feature columns, the corrections (``wide`` where the
    model has one) and free-form training metadata."""

    format: str
    features: list[str]
    known: CorrectionFile
    unknown: CorrectionFile
    metadata: dict[str, Any] = {}
    wide: CorrectionFile | None = None


class FidelityModel:
    """Predicts the Hellinger fidelity of a run (0-1) from ``model_features()`` columns.

    Prediction = physics baseline + learned correction, with one correction for runs whose ideal
    distribution is known and one for runs where it is not (mid-circuit measurement, or wider
    than ``IDEAL_MAX_QUBITS``): trained together, the second's large residuals distorted the
    first. A correction may be limited to mitigated runs (``corrects_unmitigated``) for data
    where it does not carry over to unmitigated ones; the shipped model corrects both.

    ``wide`` (optional) predicts unmitigated runs of circuits wider than ``IDEAL_MAX_QUBITS``
    from ``wide_matrix`` columns. A mitigated wide run gets that prediction plus the gain the
    ideal-unknown correction gives the stack over no stack: there are no wide mitigated runs to
    learn it from.
    """

    def __init__(
        self,
        known: BoostedCorrection,
        unknown: BoostedCorrection,
        features: Sequence[str],
        metadata: dict[str, Any] | None = None,
        wide: BoostedCorrection | None = None,
    ) -> None:
        self.known = known
        self.unknown = unknown
        self.wide = wide
        self.features = tuple(features)
        self.metadata = dict(metadata or {})

    def predict_matrix(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(f"expected rows of {len(self.features)} features, got {x.shape}")
        baseline = x[:, self.features.index("baseline")].astype(np.float64)
        known = x[:, self.features.index("approximate_hellinger")] >= 0
        mitigated = x[:, self.features.index("techniques")] > 0
        correction = np.zeros(len(x))
        for side, rows in ((self.known, known), (self.unknown, ~known)):
            if not side.corrects_unmitigated:
                rows = rows & mitigated
            if rows.any():
                correction[rows] = side(x[rows])
        predicted = baseline + correction
        wide = ~known & (x[:, self.features.index("measured_bits")] > IDEAL_MAX_QUBITS)
        if self.wide is not None and wide.any():
            predicted[wide] = self._predict_wide(x[wide], correction[wide], mitigated[wide])
        return np.clip(predicted, 0.0, 1.0)

    def _predict_wide(
        self, x: np.ndarray, unknown_correction: np.ndarray, mitigated: np.ndarray
    ) -> np.ndarray:
        assert self.wide is not None
        plain = unmitigated(x, self.features)
        predicted = wide_baseline(x, self.features) + self.wide(wide_matrix(plain, self.features))
        if mitigated.any():
            # The stack's gain as the ideal-unknown correction sees it (same baseline both ways).
            gain = unknown_correction[mitigated]
            if self.unknown.corrects_unmitigated:
                gain = gain - self.unknown(plain[mitigated])
            predicted[mitigated] += gain
        return predicted

    def predict(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Fidelity per row; each row maps the circuit, ideal and stack columns to numbers (the
        derived columns are added where missing)."""
        return self.predict_matrix(as_matrix(complete(rows), self.features))

    def to_json(self) -> FidelityModelFile:
        return FidelityModelFile(
            format=FORMAT,
            features=list(self.features),
            known=self.known.to_json(),
            unknown=self.unknown.to_json(),
            metadata=self.metadata,
            wide=self.wide.to_json() if self.wide is not None else None,
        )

    @classmethod
    def from_json(cls, d: FidelityModelFile) -> FidelityModel:
        if d.format not in _FORMATS:
            raise ValueError(f"format {d.format!r}, expected {FORMAT!r}")
        if tuple(d.features) != model_features():
            raise ValueError("the file's feature columns differ from this version's")
        return cls(
            BoostedCorrection.from_json(d.known),
            BoostedCorrection.from_json(d.unknown),
            d.features,
            d.metadata,
            BoostedCorrection.from_json(d.wide) if d.wide is not None else None,
        )

    def save(self, path: str | Path) -> Path:
        return save_model_json(self.to_json(), path)

    @classmethod
    def load(cls, path: str | Path | None = None) -> FidelityModel:
        """The model file (default: the one shipped with the package), parsed once per version."""
        path = Path(path) if path is not None else DEFAULT_MODEL_PATH
        return load_model_json(path, "fidelity", FidelityModelFile, cls.from_json, REBUILD_HINT)
