"""Learned fidelity model: Hellinger fidelity of a (mitigated) run from features known beforehand.

Inputs per prediction (``MODEL_FEATURES``):

* the compiled circuit on the device or template (``features.CircuitFeatures``: width, depth,
  gate and measurement counts, the error rates and coherence times of what the layout uses, the
  numerical baseline's log-fidelity);
* the mitigation stack's kind and parameters (:func:`stack_features`);
* a summary of the circuit's ideal outcome distribution (:class:`IdealSummary`), because the
  Hellinger fidelity of a noisy run depends on it as much as on the noise: a run whose ideal
  output is uniform keeps fidelity ~1 under depolarizing noise, a run with one ideal outcome loses
  what the noise takes. ``depolarized_hellinger`` is that fidelity under the global depolarizing
  approximation (noisy = f ideal + (1 - f) uniform, f the numerical fidelity). Circuits wider than
  ``IDEAL_MAX_QUBITS`` measured qubits have no ideal summary: those features are -1, and the
  model is trained on copies of every row with them masked so it knows that case too.

The regressor is scikit-learn gradient boosting; the shipped file holds its trees as arrays
(``forest.TreeForest``) so prediction needs numpy only. Train with ``qonductor train fidelity``.
"""

from __future__ import annotations

import json
import math
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from qiskit import QuantumCircuit

from kernel_server.estimator.forest import ModelFileError, TreeForest

# Above this many measured qubits the ideal distribution is not computed at plan time: the
# statevector costs ~0.05 s at 16 qubits and doubles per qubit (0.5-1.6 s at 20).
IDEAL_MAX_QUBITS = 16
UNKNOWN = -1.0  # value of the ideal-distribution features when it was not computed


@dataclass(frozen=True)
class IdealSummary:
    """The ideal outcome distribution of a circuit: its nonzero probabilities, in any order."""

    probabilities: np.ndarray
    measured_bits: int

    @property
    def entropy_bits(self) -> float:
        p = self.probabilities
        return float(-(p * np.log2(p)).sum())

    def depolarized_hellinger(self, fidelity: float) -> float:
        """Hellinger fidelity of f * ideal + (1 - f) * uniform against the ideal."""
        f = min(max(fidelity, 0.0), 1.0)
        p = self.probabilities
        uniform = 2.0 ** (-self.measured_bits)
        return float(np.sqrt(p * (f * p + (1.0 - f) * uniform)).sum() ** 2)

    def features(self, log_fidelity: float) -> dict[str, float]:
        return {
            "measured_bits": float(self.measured_bits),
            "ideal_entropy_bits": self.entropy_bits,
            "ideal_entropy_fraction": self.entropy_bits / max(self.measured_bits, 1),
            "depolarized_hellinger": self.depolarized_hellinger(math.exp(log_fidelity)),
        }


IDEAL_COLUMNS: tuple[str, ...] = (
    "measured_bits",
    "ideal_entropy_bits",
    "ideal_entropy_fraction",
    "depolarized_hellinger",
)


def unknown_ideal_features(measured_bits: int) -> dict[str, float]:
    return {
        "measured_bits": float(measured_bits),
        "ideal_entropy_bits": UNKNOWN,
        "ideal_entropy_fraction": UNKNOWN,
        "depolarized_hellinger": UNKNOWN,
    }


def measured_bits(circuit: QuantumCircuit) -> int:
    return len({ci.clbits[0] for ci in circuit.data if ci.operation.name == "measure"})


def ideal_summary(
    circuit: QuantumCircuit, max_qubits: int = IDEAL_MAX_QUBITS
) -> IdealSummary | None:
    """The ideal distribution of a measured circuit, or None when it measures too many qubits.

    Aer's statevector on the circuit's active qubits, probabilities of the measured ones only
    (no outcome labels: the features need the values alone).
    """
    from qiskit_aer import AerSimulator

    from kernel_server.workers.aer_sim import compact_circuit

    bits = measured_bits(circuit)
    if bits > max_qubits:
        return None
    compact = compact_circuit(circuit).circuit
    unitary = QuantumCircuit(compact.num_qubits)
    measured: list[int] = []
    for instruction in compact.data:
        qargs = [compact.find_bit(q).index for q in instruction.qubits]
        name = instruction.operation.name
        if name in ("barrier", "delay"):
            continue
        if name == "measure":
            measured.extend(q for q in qargs if q not in measured)
            continue
        if any(q in measured for q in qargs):
            raise ValueError("the ideal distribution needs every measurement at the end")
        unitary.append(instruction.operation, qargs)
    if not measured:
        raise ValueError("circuit has no measurements")
    from kernel_server.estimator.mitigation.stack import standard_gates

    unitary = standard_gates(unitary)  # library gates (qft_dg, ...) are unknown to Aer
    unitary.save_probabilities(measured, label="p")
    result = AerSimulator(method="statevector").run(unitary, shots=1).result()
    p = np.asarray(result.data(0)["p"], dtype=float)
    return IdealSummary(p[p > 1e-12], len(measured))


# --------------------------------------------------------------------------------------------
# Mitigation features
# --------------------------------------------------------------------------------------------

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


def model_row(
    features: Mapping[str, float], ideal: Mapping[str, float], stack: Mapping[str, float]
) -> dict[str, float]:
    """One input row in ``MODEL_FEATURES`` terms."""
    from kernel_server.estimator.features import FEATURE_COLUMNS

    row = {name: float(features[name]) for name in FEATURE_COLUMNS}
    row.update({name: float(ideal[name]) for name in IDEAL_COLUMNS})
    row.update({name: float(stack[name]) for name in STACK_COLUMNS})
    return row


def _model_features() -> tuple[str, ...]:
    from kernel_server.estimator.features import FEATURE_COLUMNS

    return tuple(FEATURE_COLUMNS) + IDEAL_COLUMNS + STACK_COLUMNS


def as_matrix(rows: Sequence[Mapping[str, float]], columns: Sequence[str]) -> np.ndarray:
    return np.asarray([[float(r[c]) for c in columns] for r in rows], dtype=np.float32)


def compile_for(circuit: QuantumCircuit, backend: Any) -> QuantumCircuit:
    """The circuit as a mitigated or unmitigated run executes it, without the idle delays.

    Runs lay a job's circuits out once (``stack.choose_layout``) and transpile them at level 0 on
    that layout (``stack.transpile_mitigated``), then schedule them; scheduling only adds delays,
    which change neither the features' depth nor their critical-path duration, so it is skipped
    here (it costs as much as the transpilation on 127-qubit devices).
    """
    from kernel_server.estimator.mitigation.stack import choose_layout, transpile_mitigated

    return transpile_mitigated(circuit, backend, choose_layout(circuit, backend), schedule=False)


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

FORMAT = "qonductor-fidelity-gbt/1"
DEFAULT_MODEL_PATH = Path(__file__).parent / "models" / "fidelity.json"
REBUILD_HINT = "rebuild it with `qonductor train fidelity`"


def model_features() -> tuple[str, ...]:
    """Input columns of the fidelity model, in order."""
    return _model_features()


class FidelityModel:
    """Predicts the Hellinger fidelity of a run (0-1) from ``model_features()`` columns."""

    def __init__(
        self,
        forest: TreeForest,
        init: float,
        learning_rate: float,
        features: Sequence[str],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.forest = forest
        self.init = float(init)
        self.learning_rate = float(learning_rate)
        self.features = tuple(features)
        self.metadata = dict(metadata or {})

    def predict_matrix(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(f"expected rows of {len(self.features)} features, got {x.shape}")
        raw = self.init + self.learning_rate * self.forest.leaf_values(x).sum(axis=1)
        return np.clip(raw, 0.0, 1.0)

    def predict(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Fidelity per row; each row maps every name in ``self.features`` to a number."""
        return self.predict_matrix(as_matrix(rows, self.features))

    @classmethod
    def from_sklearn(cls, gbr: Any, features: Sequence[str], metadata: dict | None = None):
        trees = [estimator[0] for estimator in gbr.estimators_]
        leaves = [tree.tree_.value[:, 0, 0] for tree in trees]
        return cls(
            TreeForest.from_sklearn(trees, leaves),
            float(gbr.init_.constant_.ravel()[0]),
            gbr.learning_rate,
            features,
            metadata,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "features": list(self.features),
            "init": self.init,
            "learning_rate": self.learning_rate,
            "forest": self.forest.to_json(),
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FidelityModel:
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
        if tuple(d.get("features", ())) != model_features():
            raise ValueError("the file's feature columns differ from this version's")
        return cls(
            TreeForest.from_json(d["forest"]),
            float(d["init"]),
            float(d["learning_rate"]),
            d["features"],
            d.get("metadata", {}),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path | None = None) -> FidelityModel:
        """The model file (default: the one shipped with the package); cached per path."""
        path = Path(path) if path is not None else DEFAULT_MODEL_PATH
        key = str(path.resolve())
        with _cache_lock:
            cached = _loaded.get(key)
        if cached is not None and cached[0] == _mtime(path):
            return cached[1]
        if not path.is_file():
            raise ModelFileError(f"fidelity model file {path} not found; {REBUILD_HINT}")
        try:
            model = cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError, zlib.error) as exc:
            raise ModelFileError(
                f"fidelity model file {path} is unreadable ({type(exc).__name__}: {exc}); "
                f"{REBUILD_HINT}"
            ) from exc
        with _cache_lock:
            _loaded[key] = (_mtime(path), model)
        return model


_cache_lock = threading.Lock()
_loaded: dict[str, tuple[float, FidelityModel]] = {}


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -1.0
