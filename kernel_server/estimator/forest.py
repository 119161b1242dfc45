"""Tree ensembles stored as plain arrays, so prediction needs numpy only (no pickle, no sklearn).

scikit-learn's fitted trees are exported in pre-order into four arrays and written to JSON
(zlib-compressed, base64-encoded); loading checks every index so that a damaged file cannot send
the tree walk out of bounds or into a loop, and refuses object arrays, so a model file never runs
code. Used by the runtime and fidelity models.
"""

from __future__ import annotations

import base64
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

F = TypeVar("F", bound=msgspec.Struct)  # a model file's shape


class ModelFileError(FileNotFoundError):
    """A shipped model file is missing or unreadable."""


_cache_lock = threading.Lock()
_cache: dict[tuple[str, str], tuple[tuple[int, int], Any]] = {}


def load_model_json(
    path: Path, kind: str, shape: type[F], parse: Callable[[F], Any], rebuild_hint: str
) -> Any:
    """``parse`` of the JSON model file at ``path`` (decoded as ``shape``), kept until the file
    changes.

    Estimates call this on every request; without the cache each would parse the file again
    (1 MB for the runtime model). Missing or unreadable files raise :class:`ModelFileError`
    naming ``kind`` and how to rebuild it.
    """
    key = (str(path.resolve()), f"{parse.__module__}.{parse.__qualname__}")
    try:
        stat = path.stat()
    except OSError:
        raise ModelFileError(f"{kind} model file {path} not found; {rebuild_hint}") from None
    version = (stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        model = parse(msgspec.json.decode(path.read_bytes(), type=shape))
    except (OSError, ValueError, KeyError, TypeError, zlib.error, msgspec.DecodeError) as exc:
        # binascii.Error is a ValueError; msgspec.ValidationError a DecodeError.
        raise ModelFileError(
            f"{kind} model file {path} is unreadable ({type(exc).__name__}: {exc}); {rebuild_hint}"
        ) from exc
    with _cache_lock:
        _cache[key] = (version, model)
    return model


def save_model_json(data: msgspec.Struct, path: str | Path) -> Path:
    """Write a model file atomically, so that a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    text = msgspec.json.encode(data, enc_hook=_numpy_scalar)
    tmp.write_bytes(msgspec.json.format(text, indent=1) + b"\n")
    tmp.replace(path)
    return path


def _numpy_scalar(value: Any) -> Any:
    """A numpy number in a file's free-form metadata (a training score) as the Python one."""
    if isinstance(value, np.generic):
        return value.item()
    # msgspec's enc_hook: an exception raised here fails the encoding with its message.
    raise TypeError(f"cannot write {type(value).__name__} to a model file")


class ArrayFile(msgspec.Struct, frozen=True):
    """A numeric array in a model file: its dtype, shape and zlib-compressed bytes (base64)."""

    dtype: str
    shape: list[int]
    zlib_base64: str

    @classmethod
    def of(cls, a: np.ndarray) -> ArrayFile:
        a = np.ascontiguousarray(a)
        blob = base64.b64encode(zlib.compress(a.tobytes(), 9)).decode("ascii")
        return cls(a.dtype.str, list(a.shape), blob)

    def array(self) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        if dtype.kind not in "iuf":  # never object arrays: this file must not run code
            raise ValueError(f"unexpected dtype {dtype}")
        raw = zlib.decompress(base64.b64decode(self.zlib_base64))
        return np.frombuffer(raw, dtype=dtype).reshape(self.shape).copy()


class ForestFile(msgspec.Struct, frozen=True):
    """A ``TreeForest`` as a model file holds it."""

    trees: int
    nodes: int
    feature: ArrayFile
    value: ArrayFile
    right: ArrayFile
    roots: ArrayFile


@dataclass
class TreeForest:
    """Trees in pre-order: a split node's left child is the next node, ``right`` holds the other.

    ``feature`` is -1 at leaves; ``value`` is the split threshold (x <= value goes left) or, at a
    leaf, the leaf's prediction. ``roots`` indexes the first node of each tree.
    """

    feature: np.ndarray  # int8
    value: np.ndarray  # float32
    right: np.ndarray  # int32
    roots: np.ndarray  # int32

    def leaf_values(self, x: np.ndarray) -> np.ndarray:
        """(n_rows, n_trees) leaf predictions for float32 features ``x``."""
        n, trees = len(x), len(self.roots)
        idx = np.tile(self.roots, n)  # flat (row, tree) -> current node
        row = np.repeat(np.arange(n), trees)
        # Walk only the (row, tree) pairs still at a split: trees end at different depths, and
        # stepping every pair to the deepest level cost ~10x on the runtime model's deep trees.
        active = np.flatnonzero(self.feature[idx] >= 0)
        while active.size:
            node = idx[active]
            go_left = x[row[active], self.feature[node]] <= self.value[node]
            node = np.where(go_left, node + 1, self.right[node])
            idx[active] = node
            active = active[self.feature[node] >= 0]
        return self.value[idx].reshape(n, trees).astype(np.float64)

    def to_json(self) -> ForestFile:
        return ForestFile(
            trees=len(self.roots),
            nodes=len(self.feature),
            feature=ArrayFile.of(self.feature),
            value=ArrayFile.of(self.value),
            right=ArrayFile.of(self.right),
            roots=ArrayFile.of(self.roots),
        )

    @classmethod
    def from_json(cls, d: ForestFile) -> TreeForest:
        forest = cls(
            feature=d.feature.array().astype(np.int8),
            value=d.value.array().astype(np.float32),
            right=d.right.array().astype(np.int64),
            roots=d.roots.array().astype(np.int64),
        )
        n = len(forest.feature)
        if not (len(forest.value) == len(forest.right) == n) or len(forest.roots) == 0:
            raise ValueError("forest arrays disagree in length")
        split = forest.feature >= 0
        # Every split must point inside the array, or walking the trees would not terminate.
        inside = (forest.right[split] > np.nonzero(split)[0]) & (forest.right[split] < n)
        if not inside.all() or (forest.roots < 0).any() or (forest.roots >= n).any():
            raise ValueError("forest child indices out of range")
        return forest

    @classmethod
    def from_sklearn(cls, trees: Sequence[Any], leaf_values: Sequence[np.ndarray]) -> TreeForest:
        """Export fitted sklearn trees; ``leaf_values[k][node]`` replaces tree k's leaf outputs."""
        feats: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        rights: list[np.ndarray] = []
        roots: list[int] = []
        offset = 0
        for tree, lv in zip(trees, leaf_values, strict=True):
            t = tree.tree_
            order: list[int] = []
            stack = [0]
            while stack:  # pre-order walk, left subtree first
                node = stack.pop()
                order.append(node)
                if t.children_left[node] >= 0:
                    stack.append(int(t.children_right[node]))
                    stack.append(int(t.children_left[node]))
            order_a = np.asarray(order)
            new_pos = np.empty(t.node_count, dtype=np.int64)
            new_pos[order_a] = np.arange(len(order_a)) + offset
            is_split = t.children_left[order_a] >= 0
            feature = np.where(is_split, t.feature[order_a], -1).astype(np.int8)
            thr = t.threshold[order_a]
            # sklearn tests float32 x <= float64 threshold; the largest float32 not above the
            # threshold gives the same answer for every float32 x.
            thr32 = thr.astype(np.float32)
            too_big = thr32.astype(np.float64) > thr
            thr32[too_big] = np.nextafter(thr32[too_big], np.float32(-np.inf))
            value = np.where(is_split, thr32, np.asarray(lv)[order_a]).astype(np.float32)
            right = np.where(is_split, new_pos[np.maximum(t.children_right[order_a], 0)], -1)
            feats.append(feature)
            vals.append(value)
            rights.append(right.astype(np.int32))
            roots.append(offset)
            offset += len(order_a)
        return cls(
            feature=np.concatenate(feats),
            value=np.concatenate(vals),
            right=np.concatenate(rights).astype(np.int64),
            roots=np.asarray(roots, dtype=np.int64),
        )
