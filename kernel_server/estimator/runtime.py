"""Learned runtime model for IBM jobs: seconds from a job's transpiled shape.

Trained on real IBM Quantum runtimes (``../shared/data/ibm_runtime_train.csv``, collected by the
Qonductor SC25 authors, MIT license). Inputs per job: ``two_qubit_gates``, ``depth``, ``num_qubits``
(each summed over the job's circuits after transpilation), ``shots`` (per circuit) and
``num_circuits``. Output: IBM's reported time for the job in seconds.

Why two forests instead of one regression:

* Single-circuit jobs (61% of the data) take 1-12 s and are dominated by noise that the features do
  not explain (identical jobs rerun spread by ~1 s). What counts here is landing within 0.5 s, so
  each leaf predicts the *mode* of its jobs' times (the centre of the densest window), not the mean,
  and the trees are combined by the same modal vote.
* Multi-circuit jobs follow the physics ``time = overhead + shots * num_circuits * per_shot_time``:
  the same circuit batched 20, 40, ..., 100 times lands on a straight line. Trees predict the
  per-shot time (log space) from per-circuit features, so a held-out batch size is interpolated
  from its siblings instead of snapped to the nearest one (grouped CV: 28% -> 33% within 0.5 s).

Known limits, from the data: 8192-shot single-circuit jobs in it took 0.03-0.8 s (another kind of
run than the 1000-20000-shot QPU jobs), and the model reproduces that; single-circuit predictions
may dip by up to 1 s as shots grow (see SINGLE_SHOT_TOLERANCE_S). The batch forest keeps one leaf
per training job, so its in-sample fit (~74% within 0.5 s) says nothing: judge it on grouped folds.

Training needs scikit-learn; prediction needs numpy only: the forests are exported to a JSON file
(node arrays, zlib-compressed and base64-encoded) and walked with vectorised numpy.

Rebuild the shipped file with ``qonductor train runtime`` (``main`` below).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_server.core.paths import SHARED_DATA_DIR, missing_data
from kernel_server.estimator.forest import (
    ModelFileError,
    TreeForest,
    load_model_json,
    save_model_json,
)

__all__ = ["ModelFileError", "RuntimeModel", "main", "train_runtime"]

FEATURES: tuple[str, ...] = ("two_qubit_gates", "depth", "num_qubits", "shots", "num_circuits")
TARGET = "time_taken_s"

DEFAULT_MODEL_PATH = Path(__file__).parent / "models" / "runtime.json"
DEFAULT_DATA_PATH = SHARED_DATA_DIR / "ibm_runtime_train.csv"
REBUILD_HINT = (
    "rebuild it with `qonductor train runtime` (reads ibm_runtime_train.csv from the folder "
    "QONDUCTOR_DATA names)"
)
FORMAT = "qonductor-runtime-forests/1"
ATTRIBUTION = (
    "Trained on IBM Quantum job runtimes collected in 2023 by the authors of the Qonductor "
    "research prototype (MIT license, copyright 2023 Dmitry Lugovoy)."
)

# --- hyperparameters, chosen on grouped 5-fold CV averaged over 2-4 fold partitions ---
CV_FOLDS = 5
# Single-circuit forest: 10 jobs per leaf is enough to find a mode; 3 or 30 scored 2-5 points lower.
SINGLE_TREES = 100
SINGLE_MIN_LEAF = 10
# A 1.4 s window for the leaf mode / tree vote beat 1.0 s by ~0.5 points: the noise is wider than
# the 1 s target window, so a slightly wider window finds the peak more reliably.
SINGLE_HALF_WINDOW_S = 0.7
# Multi-circuit forest: one leaf per distinct job (trained on each job's median time), 40% of the
# features per split (0.2-0.8 tried; 0.4 best). 50 trees keep the file small; 100 gain ~0.5 point.
MULTI_TREES = 50
MULTI_MAX_FEATURES = 0.4
# Fixed per-job overhead subtracted before dividing by total shots (1.5-3.5 s tried; 2-2.5 best).
MULTI_OVERHEAD_S = 2.25
MULTI_HALF_WINDOW_S = 0.5
# Monotone-ish in shots: a job's prediction is lifted to its prediction at every smaller shot
# count seen in training, less this tolerance. Multi-circuit: 0 (strictly monotone on that grid;
# cost 0.2 points). Single-circuit: 1 s, the rerun noise of one job; a strict lift cost 3 points
# because the data is not monotone there (5-qubit jobs at 8000 shots ran faster than at 4000:
# other backends, other days).
SINGLE_SHOT_TOLERANCE_S = 1.0
MULTI_SHOT_TOLERANCE_S = 0.0
# A regime with fewer rows than this borrows all rows (tiny or one-sided training sets).
MIN_REGIME_ROWS = 20


# --------------------------------------------------------------------------------------------
# Features (shared by training and prediction, so both see exactly the same float32 values)
# --------------------------------------------------------------------------------------------


def _single_features(x: np.ndarray) -> np.ndarray:
    """Log features of single-circuit jobs; depth*shots approximates time spent executing."""
    tq, depth, nq, shots, _ = x.T
    cols = np.column_stack([tq, depth, nq, shots, depth * shots])
    # sklearn trees compare float32 inputs with their thresholds; do the same here.
    return np.log1p(cols).astype(np.float32)


def _multi_features(x: np.ndarray) -> np.ndarray:
    """Per-circuit log features: a batch of N copies of a circuit looks like the circuit itself."""
    tq, depth, nq, shots, nc = x.T
    cols = np.column_stack([tq / nc, depth / nc, nq / nc, shots, nc])
    return np.log1p(cols).astype(np.float32)


def _check_frame(frame: pd.DataFrame) -> np.ndarray:
    """The five feature columns as a float64 array; ValueError naming what is wrong."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in FEATURES if c not in frame.columns]
    if missing:
        raise ValueError(
            f"runtime model input is missing column(s) {', '.join(missing)}; "
            f"needs {', '.join(FEATURES)}"
        )
    try:
        x = frame.loc[:, list(FEATURES)].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"runtime model columns must be numeric: {exc}") from exc
    bad = [c for i, c in enumerate(FEATURES) if x.size and not np.isfinite(x[:, i]).all()]
    if bad:
        raise ValueError(f"runtime model input has NaN/inf in column(s) {', '.join(bad)}")
    neg = [c for i, c in enumerate(FEATURES) if x.size and (x[:, i] < 0).any()]
    if neg:
        raise ValueError(f"runtime model input has negative values in column(s) {', '.join(neg)}")
    # A job has at least one circuit and one shot; clipping avoids dividing by zero.
    x[:, 3] = np.maximum(x[:, 3], 1.0)
    x[:, 4] = np.maximum(x[:, 4], 1.0)
    return x


def _is_single(x: np.ndarray) -> np.ndarray:
    return x[:, 4] <= 1.0


# --------------------------------------------------------------------------------------------
# Modal aggregation
# --------------------------------------------------------------------------------------------


def _shorth_centre(values: np.ndarray, half_window: float) -> float:
    """Median of the densest window of width 2*half_window: the mode, robust to outliers."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    ends = np.searchsorted(v, v + 2.0 * half_window, side="right")
    start = int(np.argmax(ends - np.arange(len(v))))
    return float(np.median(v[start : ends[start]]))


def _shorth_rows(p: np.ndarray, half_window: float, chunk: int = 2048) -> np.ndarray:
    """Row-wise ``_shorth_centre`` of an (n, trees) matrix, vectorised in chunks of rows."""
    n, t = p.shape
    out = np.empty(n, dtype=np.float64)
    if n == 0:
        return out
    cols = np.arange(t)
    for lo in range(0, n, chunk):
        v = np.sort(p[lo : lo + chunk].astype(np.float64), axis=1)
        # ends[r, i] = number of values <= v[r, i] + width (rows are sorted)
        ends = (v[:, None, :] <= v[:, :, None] + 2.0 * half_window).sum(axis=2)
        start = np.argmax(ends - cols, axis=1)
        count = ends[np.arange(len(v)), start] - start
        lo_mid = np.take_along_axis(v, (start + (count - 1) // 2)[:, None], axis=1)[:, 0]
        hi_mid = np.take_along_axis(v, (start + count // 2)[:, None], axis=1)[:, 0]
        out[lo : lo + chunk] = 0.5 * (lo_mid + hi_mid)
    return out


# --------------------------------------------------------------------------------------------
# A numpy forest (exported from sklearn trees)
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass
class _Regime:
    """One forest and how its votes turn into seconds.

    ``kind`` "mode": leaves hold seconds. ``kind`` "rate": leaves hold log seconds per shot after
    ``overhead_s``; a job's time is overhead + rate * shots * num_circuits.
    """

    kind: str
    forest: TreeForest
    half_window_s: float
    shot_grid: tuple[float, ...] = ()
    shot_tolerance_s: float = 0.0
    overhead_s: float = 0.0

    def _raw(self, x: np.ndarray) -> np.ndarray:
        if self.kind == "mode":
            votes = self.forest.leaf_values(_single_features(x))
        else:
            total_shots = (x[:, 3] * x[:, 4])[:, None]
            votes = (
                self.overhead_s + np.exp(self.forest.leaf_values(_multi_features(x))) * total_shots
            )
        return _shorth_rows(votes, self.half_window_s)

    def predict(self, x: np.ndarray) -> np.ndarray:
        pred = self._raw(x)
        # The same job with fewer shots should not take longer (up to the tolerance).
        for shots in self.shot_grid:
            fewer = x[:, 3] > shots
            if fewer.any():
                xg = x[fewer].copy()
                xg[:, 3] = shots
                pred[fewer] = np.maximum(pred[fewer], self._raw(xg) - self.shot_tolerance_s)
        return pred

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "half_window_s": self.half_window_s,
            "shot_grid": list(self.shot_grid),
            "shot_tolerance_s": self.shot_tolerance_s,
            "overhead_s": self.overhead_s,
            "forest": self.forest.to_json(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], kind: str) -> _Regime:
        if d.get("kind") != kind:
            raise ValueError(f"regime kind {d.get('kind')!r}, expected {kind!r}")
        return cls(
            kind=kind,
            forest=TreeForest.from_json(d["forest"]),
            half_window_s=float(d["half_window_s"]),
            shot_grid=tuple(float(v) for v in d["shot_grid"]),
            shot_tolerance_s=float(d["shot_tolerance_s"]),
            overhead_s=float(d["overhead_s"]),
        )


class RuntimeModel:
    """Predicts IBM job runtime (seconds) from five job-shape columns.

    Load the shipped model with ``RuntimeModel.load()``; ``predict`` needs numpy only.
    Single-circuit jobs (``num_circuits <= 1``) and batches use separate forests (module doc).
    """

    def __init__(
        self, single: _Regime, multi: _Regime, metadata: dict[str, Any] | None = None
    ) -> None:
        self._single = single
        self._multi = multi
        self.metadata: dict[str, Any] = dict(metadata or {})

    # metadata shortcuts -------------------------------------------------------------------
    @property
    def training_rows(self) -> int | None:
        return self.metadata.get("training_rows")

    @property
    def trained_at(self) -> str | None:
        return self.metadata.get("trained_at")

    @property
    def cv_scores(self) -> dict[str, Any]:
        return dict(self.metadata.get("cv", {}))

    # prediction ---------------------------------------------------------------------------
    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Seconds per job (one float per row, >= 0) for the columns in ``FEATURES``.

        More shots never lower a batch's prediction at the training shot counts (1000, 4000,
        ...), and lower a single circuit's by at most 1 s (its rerun noise).
        """
        x = _check_frame(frame)
        out = np.zeros(len(x), dtype=np.float64)
        single = _is_single(x)
        if single.any():
            out[single] = self._single.predict(x[single])
        if (~single).any():
            out[~single] = self._multi.predict(x[~single])
        return np.maximum(out, 0.0)

    # persistence --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "features": list(FEATURES),
            "metadata": self.metadata,
            "single": self._single.to_json(),
            "multi": self._multi.to_json(),
        }

    def save(self, path: str | Path) -> Path:
        """Write the model as JSON (atomically, so a crash never leaves half a file)."""
        return save_model_json(self.to_json(), path)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RuntimeModel:
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
        if list(d.get("features", [])) != list(FEATURES):
            raise ValueError(f"features {d.get('features')!r}, expected {list(FEATURES)!r}")
        return cls(
            single=_Regime.from_json(d["single"], "mode"),
            multi=_Regime.from_json(d["multi"], "rate"),
            metadata=d.get("metadata", {}),
        )

    @classmethod
    def load(cls, path: str | Path | None = None) -> RuntimeModel:
        """Load a model file (default: the one shipped next to this module), parsed once per
        version of the file."""
        path = Path(path) if path is not None else DEFAULT_MODEL_PATH
        return load_model_json(path, "runtime", cls.from_json, REBUILD_HINT)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def load_training_frame(csv_path: str | Path) -> pd.DataFrame:
    """Read a runtime CSV and check it has the feature and target columns."""
    frame = pd.read_csv(csv_path)
    missing = [c for c in (*FEATURES, TARGET) if c not in frame.columns]
    if missing:
        raise ValueError(f"{csv_path}: missing column(s) {', '.join(missing)}")
    frame = frame.loc[:, [*FEATURES, TARGET]].dropna()
    return frame[(frame[TARGET] >= 0) & (frame[list(FEATURES)] >= 0).all(axis=1)].reset_index(
        drop=True
    )


def feature_groups(frame: pd.DataFrame) -> np.ndarray:
    """Group id per row: rows with identical feature vectors (reruns of one job) share an id."""
    return pd.factorize(pd.MultiIndex.from_frame(frame.loc[:, list(FEATURES)]))[0]


def grouped_folds(
    frame: pd.DataFrame, n_splits: int = CV_FOLDS, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices; every repeat of a job falls on the same side.

    Ungrouped splits leak: a job run five times would be scored on its own reruns.
    Group labels are shuffled with ``seed`` so folds do not follow the file's order.
    """
    from sklearn.model_selection import GroupKFold

    groups = feature_groups(frame)
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    if n_groups < n_splits:
        raise ValueError(f"{n_groups} distinct jobs are too few for {n_splits} grouped folds")
    perm = np.random.default_rng(seed).permutation(n_groups)
    return [
        (tr, te)
        for tr, te in GroupKFold(n_splits=n_splits).split(np.zeros(len(frame)), groups=perm[groups])
    ]


def _fit_single(x: np.ndarray, y: np.ndarray, seed: int) -> TreeForest:
    from sklearn.ensemble import ExtraTreesRegressor

    feats = _single_features(x)
    # The split structure is learnt in log space (relative error); the leaves then store the
    # mode of the raw seconds of their jobs, which is what the within-0.5 s target rewards.
    model = ExtraTreesRegressor(
        n_estimators=SINGLE_TREES,
        min_samples_leaf=SINGLE_MIN_LEAF,
        random_state=seed,
        n_jobs=-1,
    ).fit(feats, np.log(np.maximum(y, 1e-3)))
    leaf_values = []
    for tree in model.estimators_:
        leaves = tree.apply(feats)
        lv = np.zeros(tree.tree_.node_count)
        order = np.argsort(leaves, kind="stable")
        ids, starts = np.unique(leaves[order], return_index=True)
        ends = np.r_[starts[1:], len(order)]
        for leaf, lo, hi in zip(ids, starts, ends, strict=True):
            lv[leaf] = _shorth_centre(y[order[lo:hi]], SINGLE_HALF_WINDOW_S)
        leaf_values.append(lv)
    return TreeForest.from_sklearn(model.estimators_, leaf_values)


def _fit_multi(x: np.ndarray, y: np.ndarray, seed: int) -> TreeForest:
    from sklearn.ensemble import ExtraTreesRegressor

    # One row per distinct job (median of its reruns), so a job run 17 times does not outvote
    # its neighbours and each leaf is one job.
    df = pd.DataFrame(x, columns=list(FEATURES))
    df[TARGET] = y
    med = df.groupby(list(FEATURES), sort=True)[TARGET].median().reset_index()
    xg = med[list(FEATURES)].to_numpy(dtype=np.float64)
    total_shots = xg[:, 3] * xg[:, 4]
    target = np.log(np.maximum(med[TARGET].to_numpy() - MULTI_OVERHEAD_S, 0.05) / total_shots)
    model = ExtraTreesRegressor(
        n_estimators=MULTI_TREES,
        min_samples_leaf=1,
        max_features=MULTI_MAX_FEATURES,
        random_state=seed,
        n_jobs=-1,
    ).fit(_multi_features(xg), target)
    return TreeForest.from_sklearn(
        model.estimators_, [t.tree_.value[:, 0, 0] for t in model.estimators_]
    )


def fit_runtime_model(
    frame: pd.DataFrame, seed: int = 0, metadata: dict[str, Any] | None = None
) -> RuntimeModel:
    """Fit both forests on a frame with ``FEATURES`` and ``TARGET`` columns (needs sklearn)."""
    x = _check_frame(frame)
    y = frame[TARGET].to_numpy(dtype=np.float64)
    single = _is_single(x)
    # A regime with (almost) no rows of its own learns from all rows rather than from nothing.
    s_rows = single if single.sum() >= MIN_REGIME_ROWS else np.ones_like(single)
    m_rows = ~single if (~single).sum() >= MIN_REGIME_ROWS else np.ones_like(single)
    single_regime = _Regime(
        kind="mode",
        forest=_fit_single(x[s_rows], y[s_rows], seed),
        half_window_s=SINGLE_HALF_WINDOW_S,
        shot_grid=tuple(sorted(set(x[s_rows, 3]))),
        shot_tolerance_s=SINGLE_SHOT_TOLERANCE_S,
    )
    multi_regime = _Regime(
        kind="rate",
        forest=_fit_multi(x[m_rows], y[m_rows], seed),
        half_window_s=MULTI_HALF_WINDOW_S,
        shot_grid=tuple(sorted(set(x[m_rows, 3]))),
        shot_tolerance_s=MULTI_SHOT_TOLERANCE_S,
        overhead_s=MULTI_OVERHEAD_S,
    )
    return RuntimeModel(single_regime, multi_regime, metadata)


def score(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """The scores the runtime model is judged by."""
    y_true = np.asarray(y_true, dtype=np.float64)
    err = np.abs(np.asarray(y_pred, dtype=np.float64) - y_true)
    ss_tot = float(((y_true - y_true.mean()) ** 2).sum())
    r2 = 1.0 - float((err**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return {
        "within_0_5s": float(np.mean(err <= 0.5)),
        "within_1s": float(np.mean(err <= 1.0)),
        "r2": r2,
        "median_abs_error_s": float(np.median(err)),
    }


def cross_validate(
    frame: pd.DataFrame,
    seed: int = 0,
    n_splits: int = CV_FOLDS,
    fit: Callable[[pd.DataFrame], Callable[[pd.DataFrame], np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Grouped k-fold scores of out-of-fold predictions (pooled), plus each fold's scores.

    ``fit(train_frame)`` returns a predict function; default: this module's model.
    """
    if fit is None:

        def fit(train: pd.DataFrame) -> Callable[[pd.DataFrame], np.ndarray]:
            return fit_runtime_model(train, seed=seed).predict

    y = frame[TARGET].to_numpy(dtype=np.float64)
    pred = np.full(len(frame), np.nan)
    folds = []
    for train_idx, test_idx in grouped_folds(frame, n_splits, seed):
        predict = fit(frame.iloc[train_idx].reset_index(drop=True))
        pred[test_idx] = predict(frame.iloc[test_idx].reset_index(drop=True))
        folds.append(score(y[test_idx], pred[test_idx]))
    single = frame["num_circuits"].to_numpy() <= 1
    return {
        "scheme": f"GroupKFold({n_splits}) over identical feature vectors, groups shuffled "
        f"with seed {seed}",
        **score(y, pred),
        "single_circuit_within_0_5s": float(np.mean(np.abs(pred - y)[single] <= 0.5)),
        "multi_circuit_within_0_5s": float(np.mean(np.abs(pred - y)[~single] <= 0.5)),
        "folds": folds,
        "predictions": pred,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_runtime(
    csv_path: str | Path, out_path: str | Path = DEFAULT_MODEL_PATH, seed: int = 0
) -> dict[str, Any]:
    """Cross-validate (grouped), fit on all rows, save to ``out_path``; return the CV report."""
    csv_path = Path(csv_path)
    frame = load_training_frame(csv_path)
    cv = cross_validate(frame, seed=seed)
    cv.pop("predictions")
    report = {
        "data": str(csv_path),
        "out": str(out_path),
        "training_rows": len(frame),
        "distinct_jobs": int(feature_groups(frame).max()) + 1,
        "cv": cv,
    }
    import sklearn

    metadata = {
        "trained_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "training_rows": len(frame),
        "distinct_jobs": report["distinct_jobs"],
        "single_circuit_rows": int((frame["num_circuits"] <= 1).sum()),
        "data_file": csv_path.name,
        "data_sha256": _sha256(csv_path),
        "seed": seed,
        "sklearn_version": sklearn.__version__,
        "cv": cv,
        "hyperparameters": {
            "single_trees": SINGLE_TREES,
            "single_min_leaf": SINGLE_MIN_LEAF,
            "single_half_window_s": SINGLE_HALF_WINDOW_S,
            "multi_trees": MULTI_TREES,
            "multi_max_features": MULTI_MAX_FEATURES,
            "multi_overhead_s": MULTI_OVERHEAD_S,
            "multi_half_window_s": MULTI_HALF_WINDOW_S,
            "single_shot_tolerance_s": SINGLE_SHOT_TOLERANCE_S,
            "multi_shot_tolerance_s": MULTI_SHOT_TOLERANCE_S,
        },
        "attribution": ATTRIBUTION,
    }
    fit_runtime_model(frame, seed=seed, metadata=metadata).save(out_path)
    return report


def format_report(report: dict[str, Any]) -> str:
    cv = report["cv"]
    lines = [
        f"trained on {report['training_rows']} jobs ({report['distinct_jobs']} distinct) "
        f"from {report['data']}",
        f"saved to {report['out']}",
        f"grouped CV ({cv['scheme']}):",
        f"  within 0.5 s  {cv['within_0_5s']:.1%}  (single-circuit "
        f"{cv['single_circuit_within_0_5s']:.1%}, multi-circuit "
        f"{cv['multi_circuit_within_0_5s']:.1%})",
        f"  within 1 s    {cv['within_1s']:.1%}",
        f"  R^2           {cv['r2']:.4f}",
        f"  median |err|  {cv['median_abs_error_s']:.3f} s",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``qonductor train runtime [--data PATH] [--out PATH] [--seed N]``."""
    parser = argparse.ArgumentParser(
        prog="qonductor train runtime",
        description="Train the runtime model on real IBM job runtimes and save it.",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_PATH.resolve())
    parser.add_argument("--out", type=Path, default=DEFAULT_MODEL_PATH)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(
            f"error: {missing_data(args.data)}, or pass --data PATH to a CSV with columns "
            f"{', '.join((*FEATURES, TARGET))} (the data is not shipped with Qonductor).",
            file=sys.stderr,
        )
        return 2
    try:
        report = train_runtime(args.data, args.out, seed=args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
