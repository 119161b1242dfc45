"""Placement of classical jobs on classical nodes: filter, then score.

Classical jobs are the steps of a hybrid workflow that need no QPU: error-mitigation
post-processing, reconstruction of knitted circuits, ordinary Python. They are placed the way a
cluster scheduler places pods, in two passes:

1. **Filters** drop the nodes that cannot run the job at all (too few free cores, too little free
   memory, no free accelerator of the asked kind, labels that do not match). A filter returns
   ``None`` when the node passes and a short reason when it does not, so a job that fits nowhere
   can be told exactly why.
2. **Scorers** rank the nodes that are left, each on a 0-100 scale, higher is better. The total is
   the weighted mean of the scorers named in the ``scoring`` mapping, so totals stay on the same
   0-100 scale whatever the weights.

Both kinds of plug-in live in plain dicts (:data:`FILTERS`, :data:`SCORERS`): every registered
filter always runs; a scorer runs when ``scoring`` gives it a weight. Ties go to the node whose
name sorts first, so a placement never depends on the order the nodes were listed in.

Capacity is counted in whole cores, GB of memory (GiB for :func:`local_node`) and whole
accelerators per kind. Usage is what the orchestrator has reserved, not what the machine measures;
:class:`ClassicalCluster` keeps that bookkeeping.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import psutil

__all__ = [
    "DEFAULT_SCORING",
    "FILTERS",
    "SCORERS",
    "ClassicalCluster",
    "ClassicalNode",
    "ClassicalRequest",
    "NoFeasibleNode",
    "NodeUsage",
    "Placement",
    "local_node",
    "schedule_classical",
    "simulated_nodes",
]

# Memory is a float; sums of reservations drift by a few ulps, which must not turn "exactly full"
# into "over by 1e-15".
_EPS = 1e-9


def _is_int(value: object) -> bool:
    # bool is an int subclass, but True cores is a caller bug, not one core.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _num(value: float) -> str:
    """A number as a person would write it: 16 not 16.0, 3.5 not 3.5000000001."""
    return f"{round(value, 2):g}"


def _cores(n: int) -> str:
    return f"{n} core" if n == 1 else f"{n} cores"


def _check_str_mapping(what: str, mapping: Mapping[str, str]) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise ValueError(
                f"{what} must map non-empty strings to strings, got {key!r}: {value!r}"
            )


# --------------------------------------------------------------------------- nodes and requests


@dataclass(frozen=True)
class ClassicalNode:
    """A machine that can run classical jobs, described by its total capacity."""

    name: str
    cores: int
    memory_gb: float
    accelerators: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    # Where jobs placed here actually run (e.g. a Dask worker address); None for simulated nodes.
    address: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a classical node needs a non-empty name, got {self.name!r}")
        if not _is_int(self.cores) or self.cores < 1:
            raise ValueError(
                f"node {self.name!r}: cores must be a positive integer, got {self.cores!r}"
            )
        if (
            not _is_number(self.memory_gb)
            or not math.isfinite(self.memory_gb)
            or self.memory_gb <= 0
        ):
            raise ValueError(
                f"node {self.name!r}: memory_gb must be a positive number, got {self.memory_gb!r}"
            )
        for kind, count in self.accelerators.items():
            if not isinstance(kind, str) or not kind or not _is_int(count) or count < 0:
                raise ValueError(
                    f"node {self.name!r}: accelerators must map a kind to a non-negative count, "
                    f"got {kind!r}: {count!r}"
                )
        _check_str_mapping(f"node {self.name!r}: labels", self.labels)
        # Own copies: the node is frozen, so a caller's later edit to its dict must not leak in.
        object.__setattr__(self, "accelerators", dict(self.accelerators))
        object.__setattr__(self, "labels", dict(self.labels))

    def __hash__(self) -> int:
        # The generated hash would try to hash the dicts and fail; hash their sorted items instead.
        return hash(
            (
                self.name,
                self.cores,
                self.memory_gb,
                tuple(sorted(self.accelerators.items())),
                tuple(sorted(self.labels.items())),
                self.address,
            )
        )

    @property
    def has_accelerators(self) -> bool:
        return any(count > 0 for count in self.accelerators.values())


@dataclass(frozen=True)
class ClassicalRequest:
    """What one classical job needs from the node it runs on."""

    cores: int = 1
    memory_gb: float = 0.5
    accelerator: str | None = None
    # Only meaningful when ``accelerator`` is set; a job without one asks for no accelerators.
    accelerator_count: int = 1
    node_selector: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _is_int(self.cores) or self.cores < 1:
            raise ValueError(
                f"a classical job needs a positive whole number of cores, got {self.cores!r}"
            )
        if (
            not _is_number(self.memory_gb)
            or not math.isfinite(self.memory_gb)
            or self.memory_gb < 0
        ):
            raise ValueError(
                f"memory_gb must be a non-negative number of GB, got {self.memory_gb!r}"
            )
        if self.accelerator is not None:
            if not isinstance(self.accelerator, str) or not self.accelerator:
                raise ValueError(
                    f"accelerator must be a kind such as 'gpu' or None, got {self.accelerator!r}"
                )
            if not _is_int(self.accelerator_count) or self.accelerator_count < 1:
                raise ValueError(
                    f"accelerator_count must be a positive integer when accelerator="
                    f"{self.accelerator!r}, got {self.accelerator_count!r}"
                )
        _check_str_mapping("node_selector", self.node_selector)
        object.__setattr__(self, "node_selector", dict(self.node_selector))

    def __hash__(self) -> int:
        return hash(
            (
                self.cores,
                self.memory_gb,
                self.accelerator,
                self.accelerators_needed,
                tuple(sorted(self.node_selector.items())),
            )
        )

    @property
    def accelerators_needed(self) -> int:
        """How many accelerators the job takes: ``accelerator_count``, or 0 without a kind."""
        return self.accelerator_count if self.accelerator is not None else 0

    def describe(self) -> str:
        """The request in words, for error messages and logs."""
        parts = [_cores(self.cores), f"{_num(self.memory_gb)} GB memory"]
        if self.accelerator is not None:
            parts.append(f"{self.accelerator_count} {self.accelerator}")
        text = ", ".join(parts)
        if self.node_selector:
            text += " on nodes labelled " + _labels(self.node_selector)
        return text


def _labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in labels.items())


@dataclass
class NodeUsage:
    """What running jobs have reserved on one node."""

    cores: int = 0
    memory_gb: float = 0.0
    accelerators: dict[str, int] = field(default_factory=dict)

    def reserve(self, request: ClassicalRequest) -> None:
        # No capacity check here: usage does not know its node. Callers filter first
        # (ClassicalCluster.place does).
        self.cores += request.cores
        self.memory_gb += request.memory_gb
        if request.accelerator is not None:
            kind = request.accelerator
            self.accelerators[kind] = self.accelerators.get(kind, 0) + request.accelerator_count

    def release(self, request: ClassicalRequest) -> None:
        # Releasing more than was reserved means the bookkeeping is already wrong; failing loudly
        # here beats letting usage go negative and over-placing later.
        if request.cores > self.cores:
            raise ValueError(f"cannot release {_cores(request.cores)}: only {self.cores} reserved")
        if request.memory_gb > self.memory_gb + _EPS:
            raise ValueError(
                f"cannot release {_num(request.memory_gb)} GB memory: "
                f"only {_num(self.memory_gb)} GB reserved"
            )
        kind = request.accelerator
        if kind is not None and request.accelerator_count > self.accelerators.get(kind, 0):
            raise ValueError(
                f"cannot release {request.accelerator_count} {kind}: "
                f"only {self.accelerators.get(kind, 0)} reserved"
            )
        self.cores -= request.cores
        self.memory_gb = max(0.0, self.memory_gb - request.memory_gb)
        if self.memory_gb < _EPS:
            self.memory_gb = 0.0
        if kind is not None:
            left = self.accelerators[kind] - request.accelerator_count
            if left:
                self.accelerators[kind] = left
            else:
                del self.accelerators[kind]

    def copy(self) -> NodeUsage:
        return NodeUsage(self.cores, self.memory_gb, dict(self.accelerators))


def _free_cores(node: ClassicalNode, usage: NodeUsage) -> int:
    return node.cores - usage.cores


def _free_memory(node: ClassicalNode, usage: NodeUsage) -> float:
    return node.memory_gb - usage.memory_gb


def _free_accelerators(node: ClassicalNode, usage: NodeUsage, kind: str) -> int:
    return node.accelerators.get(kind, 0) - usage.accelerators.get(kind, 0)


# --------------------------------------------------------------------------------------- filters

Filter = Callable[[ClassicalRequest, ClassicalNode, NodeUsage], str | None]
Scorer = Callable[[ClassicalRequest, ClassicalNode, NodeUsage], float]


def fits_cores(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> str | None:
    free = _free_cores(node, usage)
    if request.cores <= free:
        return None
    return f"needs {_cores(request.cores)}, {max(free, 0)} of {node.cores} free"


def fits_memory(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> str | None:
    free = _free_memory(node, usage)
    if request.memory_gb <= free + _EPS:
        return None
    return (
        f"needs {_num(request.memory_gb)} GB memory, "
        f"{_num(max(free, 0.0))} of {_num(node.memory_gb)} GB free"
    )


def has_accelerator(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> str | None:
    kind = request.accelerator
    if kind is None:
        return None
    total = node.accelerators.get(kind, 0)
    if total == 0:
        return f"has no {kind}"
    free = _free_accelerators(node, usage, kind)
    if request.accelerator_count <= free:
        return None
    return f"needs {request.accelerator_count} {kind}, {max(free, 0)} of {total} free"


def matches_selector(
    request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage
) -> str | None:
    problems = []
    for key, wanted in request.node_selector.items():
        have = node.labels.get(key)
        if have is None:
            problems.append(f"label {key}={wanted} wanted, node has no {key} label")
        elif have != wanted:
            problems.append(f"label {key}={wanted} wanted, node has {key}={have}")
    return "; ".join(problems) or None


FILTERS: dict[str, Filter] = {
    "fits-cores": fits_cores,
    "fits-memory": fits_memory,
    "has-accelerator": has_accelerator,
    "node-selector": matches_selector,
}


# --------------------------------------------------------------------------------------- scorers


def _clamp_pct(fraction: float) -> float:
    return 100.0 * min(1.0, max(0.0, fraction))


def _utilisation_after(
    request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage
) -> tuple[float, float]:
    """CPU and memory utilisation of the node (0-1) if the job is placed on it."""
    cpu = (usage.cores + request.cores) / node.cores
    memory = (usage.memory_gb + request.memory_gb) / node.memory_gb
    return min(cpu, 1.0), min(memory, 1.0)


def least_allocated(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> float:
    # Spreads load: the node with the most headroom left takes the job.
    cpu, memory = _utilisation_after(request, node, usage)
    return _clamp_pct(1.0 - (cpu + memory) / 2.0)


def most_allocated(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> float:
    # Packs jobs onto already busy nodes, so whole nodes stay empty (and could be released).
    cpu, memory = _utilisation_after(request, node, usage)
    return _clamp_pct((cpu + memory) / 2.0)


def balanced_allocation(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> float:
    # A node with all cores busy but memory idle strands the memory (and vice versa); keeping the
    # two utilisations level leaves capacity that later jobs can actually use.
    cpu, memory = _utilisation_after(request, node, usage)
    return _clamp_pct(1.0 - abs(cpu - memory))


def accelerator_fit(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> float:
    kind = request.accelerator
    if kind is None:
        # Cores and memory on an accelerator node are what its accelerator jobs run beside;
        # a plain job takes them only when nothing else fits.
        return 0.0 if node.has_accelerators else 100.0
    free = _free_accelerators(node, usage, kind)
    if free <= 0:
        return 0.0
    # Best fit: 100 when the job takes exactly the free accelerators, less the more it leaves
    # behind, so a 1-GPU job does not break up the only node with 4 free GPUs.
    return _clamp_pct(request.accelerator_count / free)


SCORERS: dict[str, Scorer] = {
    "least-allocated": least_allocated,
    "balanced-allocation": balanced_allocation,
    "most-allocated": most_allocated,
    "accelerator-fit": accelerator_fit,
}

DEFAULT_SCORING: Mapping[str, float] = {
    "least-allocated": 1.0,
    "balanced-allocation": 1.0,
    "accelerator-fit": 2.0,
}


# ------------------------------------------------------------------------------------ scheduling


@dataclass(frozen=True)
class Placement:
    """Where a job goes, and how every node fared."""

    node: ClassicalNode
    score: float
    # Total score of every node that passed the filters, the chosen one included.
    scores: dict[str, float]
    # Why each other node was filtered out.
    rejected: dict[str, str]


class NoFeasibleNode(ValueError):
    """No node passes the filters; the message says why for each node and what to change."""

    def __init__(self, message: str, request: ClassicalRequest, rejected: dict[str, str]):
        super().__init__(message)
        self.request = request
        self.rejected = rejected


def _rejections(
    request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage
) -> list[tuple[str, str]]:
    """(filter name, reason) for every filter the node fails; empty when it passes them all."""
    # Every filter runs, not just up to the first failure: "needs 4 cores, 2 free; has no gpu"
    # tells the user both things to change at once.
    failed = []
    for name, check in FILTERS.items():
        reason = check(request, node, usage)
        if reason is not None:
            failed.append((name, reason))
    return failed


def _check_scoring(scoring: Mapping[str, float]) -> None:
    unknown = [name for name in scoring if name not in SCORERS]
    if unknown:
        known = ", ".join(SCORERS)
        raise ValueError(f"unknown scorer {', '.join(map(repr, unknown))}; known: {known}")
    for name, weight in scoring.items():
        if not _is_number(weight) or not math.isfinite(weight) or weight < 0:
            raise ValueError(
                f"scorer {name!r} weight must be a non-negative number, got {weight!r}"
            )


def _no_feasible_message(
    request: ClassicalRequest,
    nodes: list[ClassicalNode],
    failures: dict[str, list[tuple[str, str]]],
) -> str:
    if not nodes:
        return (
            f"no classical node to run a job needing {request.describe()}: none are registered; "
            "add a classical node"
        )
    lines = [f"no classical node can run a job needing {request.describe()}:"]
    lines += [f"  {name}: {'; '.join(r for _, r in failed)}" for name, failed in failures.items()]

    # Nodes that fail only because of what is running on them will take the job later.
    busy = [node.name for node in nodes if not _rejections(request, node, NodeUsage())]
    advice = []
    if busy:
        advice.append(f"{', '.join(busy)} could run it once running jobs release their share.")
    failed_filters = {name for failed in failures.values() for name, _ in failed}
    asks = []
    if "fits-cores" in failed_filters:
        asks.append("fewer cores")
    if "fits-memory" in failed_filters:
        asks.append("less memory")
    if "has-accelerator" in failed_filters and request.accelerator is not None:
        asks.append(f"fewer (or no) {request.accelerator}")
    if "node-selector" in failed_filters:
        asks.append("a looser node_selector")
    need = [_cores(request.cores), f"{_num(request.memory_gb)} GB memory"]
    if request.accelerator is not None:
        need.append(f"{request.accelerator_count} free {request.accelerator}")
    add = "add a node with at least " + ", ".join(need)
    if request.node_selector:
        add += f", labelled {_labels(request.node_selector)}"
    ask = ""
    if asks:
        listed = asks[0] if len(asks) == 1 else ", ".join(asks[:-1]) + " or " + asks[-1]
        ask = f"ask for {listed}; or "
    todo = ask + add + "."
    advice.append("Otherwise " + todo if busy else todo[0].upper() + todo[1:])
    return "\n".join(lines + [" ".join(advice)])


def schedule_classical(
    request: ClassicalRequest,
    nodes: Iterable[ClassicalNode],
    usage: Mapping[str, NodeUsage] | None = None,
    scoring: Mapping[str, float] | None = None,
) -> Placement:
    """Pick the node for one classical job: filter out infeasible nodes, score the rest.

    ``usage`` maps node names to what is already reserved on them (missing means idle).
    ``scoring`` maps scorer names to weights (default :data:`DEFAULT_SCORING`); a node's total is
    the weighted mean of its scores. The highest total wins; equal totals go to the name that
    sorts first. Nothing is reserved here (see :meth:`ClassicalCluster.place`).
    """
    nodes = list(nodes)
    usage = usage or {}
    scoring = DEFAULT_SCORING if scoring is None else scoring
    # Scorer names are checked before any node is looked at, so a typo fails the same way
    # whether or not the cluster happens to be full.
    _check_scoring(scoring)
    names = [node.name for node in nodes]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"node names must be unique; repeated: {', '.join(duplicates)}")

    idle = NodeUsage()
    feasible: list[tuple[ClassicalNode, NodeUsage]] = []
    failures: dict[str, list[tuple[str, str]]] = {}
    for node in nodes:
        used = usage.get(node.name, idle)
        failed = _rejections(request, node, used)
        if failed:
            failures[node.name] = failed
        else:
            feasible.append((node, used))
    if not feasible:
        rejected = {name: "; ".join(r for _, r in failed) for name, failed in failures.items()}
        raise NoFeasibleNode(_no_feasible_message(request, nodes, failures), request, rejected)

    total_weight = sum(scoring.values())
    scores: dict[str, float] = {}
    for node, used in feasible:
        weighted = 0.0
        for name, weight in scoring.items():
            value = SCORERS[name](request, node, used)
            # A registered plug-in that leaves the scale would silently outweigh the others.
            if not 0.0 <= value <= 100.0:
                raise ValueError(
                    f"scorer {name!r} gave {value!r} for node {node.name!r}; scores must be 0-100"
                )
            weighted += weight * value
        total = weighted / total_weight if total_weight > 0 else 0.0
        # Rounded so totals that are equal on paper but differ in the last float bit still tie
        # and fall to the name order, as documented.
        scores[node.name] = round(total, 9)

    best, _ = min(feasible, key=lambda pair: (-scores[pair[0].name], pair[0].name))
    rejected = {name: "; ".join(r for _, r in failed) for name, failed in failures.items()}
    return Placement(node=best, score=scores[best.name], scores=scores, rejected=rejected)


# --------------------------------------------------------------------------------------- cluster


class ClassicalCluster:
    """Classical nodes plus what is reserved on each: places jobs and takes them off again.

    Not thread-safe; one orchestrator loop owns it.
    """

    def __init__(
        self, nodes: Iterable[ClassicalNode], scoring: Mapping[str, float] | None = None
    ) -> None:
        self._nodes: dict[str, ClassicalNode] = {}
        for node in nodes:
            if node.name in self._nodes:
                raise ValueError(f"node names must be unique; repeated: {node.name}")
            self._nodes[node.name] = node
        self._usage: dict[str, NodeUsage] = {name: NodeUsage() for name in self._nodes}
        if scoring is not None:
            _check_scoring(scoring)
        self.scoring = dict(scoring) if scoring is not None else None

    @property
    def nodes(self) -> list[ClassicalNode]:
        return list(self._nodes.values())

    def usage(self, node_name: str) -> NodeUsage:
        """A copy of what is reserved on a node (a copy, so callers cannot skew the books)."""
        return self._usage[self._known(node_name)].copy()

    def _known(self, node_name: str) -> str:
        if node_name not in self._nodes:
            known = ", ".join(self._nodes) or "none"
            raise ValueError(f"unknown classical node {node_name!r}; known: {known}")
        return node_name

    def place(self, request: ClassicalRequest) -> Placement:
        """Choose a node for the job and reserve its share there."""
        placement = schedule_classical(request, self.nodes, self._usage, self.scoring)
        self._usage[placement.node.name].reserve(request)
        return placement

    def release(self, node_name: str, request: ClassicalRequest) -> None:
        """Give back what ``request`` reserved on ``node_name`` when its job ends."""
        self._usage[self._known(node_name)].release(request)

    def snapshot(self) -> list[dict[str, object]]:
        """Capacity and reservations of every node, in the order the nodes were given."""
        rows: list[dict[str, object]] = []
        for name, node in self._nodes.items():
            used = self._usage[name]
            rows.append(
                {
                    "name": name,
                    "cores": node.cores,
                    "memory_gb": node.memory_gb,
                    "accelerators": dict(node.accelerators),
                    "used_cores": used.cores,
                    "used_memory_gb": round(used.memory_gb, 9),
                    "used_accelerators": dict(used.accelerators),
                }
            )
        return rows


# ------------------------------------------------------------------------------ node descriptions


def local_node(name: str = "local", accelerators: Mapping[str, int] | None = None) -> ClassicalNode:
    """This machine as a classical node; accelerators are not detected, so say what it has."""
    # os.cpu_count() counts the machine's CPUs, not a container's CPU quota or this process's
    # affinity mask; on a shared host this can promise more than the job will get.
    cores = os.cpu_count() or 1
    # Rounded down to 0.1 GiB so the node never promises more memory than exists.
    memory_gb = math.floor(psutil.virtual_memory().total / 2**30 * 10) / 10
    return ClassicalNode(
        name=name,
        cores=cores,
        memory_gb=max(memory_gb, 0.1),
        accelerators=dict(accelerators or {}),
        labels={"kind": "local"},
    )


# (kind, name prefix): the first nodes of a simulated set, so even a small set is mixed.
_SIM_KINDS = ("standard", "gpu", "highmem")
_SIM_PREFIX = {"standard": "vm", "gpu": "gpu", "highmem": "mem"}
# Rough cloud mix for the rest: mostly general-purpose VMs.
_SIM_WEIGHTS = {"standard": 6, "gpu": 2, "highmem": 2}


def _simulated_node(kind: str, index: int, rng: random.Random) -> ClassicalNode:
    zone = rng.choice(("zone-a", "zone-b"))
    name = f"{_SIM_PREFIX[kind]}-{index}"
    labels = {"kind": kind, "zone": zone}
    if kind == "standard":
        # General-purpose VMs: 4 GB per core.
        cores = rng.choice((4, 8, 16))
        return ClassicalNode(name, cores, float(cores * 4), labels=labels)
    if kind == "highmem":
        # Memory-optimised VMs: 8 GB per core (64-256 GB).
        cores = rng.choice((8, 16, 32))
        return ClassicalNode(name, cores, float(cores * 8), labels=labels)
    gpus = rng.choice((1, 2, 4))
    # GPU VMs come with a host sized to feed their GPUs: 8 cores and 32 GB per GPU.
    return ClassicalNode(
        name, 8 * gpus, float(32 * gpus), accelerators={"gpu": gpus}, labels=labels
    )


def simulated_nodes(count: int, seed: int = 0) -> list[ClassicalNode]:
    """A reproducible, mixed set of classical nodes for the cloud simulator.

    Standard VMs (``vm-i``: 4-16 cores, 16-64 GB), high-memory VMs (``mem-i``: 8-32 cores,
    64-256 GB) and GPU VMs (``gpu-i``: 1, 2 or 4 GPUs). With ``count >= 3`` there is at least one
    of each. The same ``(count, seed)`` always gives the same nodes.
    """
    if not _is_int(count) or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    rng = random.Random(seed)
    kinds = list(_SIM_KINDS[:count])
    kinds += rng.choices(
        list(_SIM_WEIGHTS), weights=list(_SIM_WEIGHTS.values()), k=count - len(kinds)
    )
    rng.shuffle(kinds)
    return [_simulated_node(kind, index, rng) for index, kind in enumerate(kinds)]
