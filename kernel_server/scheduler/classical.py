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

Nodes, requests and usage live in ``classical_nodes``; :class:`ClassicalCluster` keeps the
bookkeeping of what the orchestrator has reserved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kernel_server.core.resources import (
    ClassicalRequest,
    cores_text,
    is_number,
    labels_text,
    number_text,
)
from kernel_server.core.status import NodeStatus
from kernel_server.scheduler.classical_nodes import (
    MEMORY_EPS,
    ClassicalNode,
    NodeUsage,
    free_accelerators,
    free_cores,
    free_memory,
    local_node,
    simulated_nodes,
)

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

# --------------------------------------------------------------------------------------- filters

Filter = Callable[[ClassicalRequest, ClassicalNode, NodeUsage], str | None]
Scorer = Callable[[ClassicalRequest, ClassicalNode, NodeUsage], float]


def fits_cores(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> str | None:
    free = free_cores(node, usage)
    if request.cores <= free:
        return None
    return f"needs {cores_text(request.cores)}, {max(free, 0)} of {node.cores} free"


def fits_memory(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> str | None:
    free = free_memory(node, usage)
    if request.memory_gb <= free + MEMORY_EPS:
        return None
    return (
        f"needs {number_text(request.memory_gb)} GB memory, "
        f"{number_text(max(free, 0.0))} of {number_text(node.memory_gb)} GB free"
    )


def has_accelerator(request: ClassicalRequest, node: ClassicalNode, usage: NodeUsage) -> str | None:
    kind = request.accelerator
    if kind is None:
        return None
    total = node.accelerators.get(kind, 0)
    if total == 0:
        return f"has no {kind}"
    free = free_accelerators(node, usage, kind)
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
    free = free_accelerators(node, usage, kind)
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
        if not is_number(weight) or not math.isfinite(weight) or weight < 0:
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
    need = [cores_text(request.cores), f"{number_text(request.memory_gb)} GB memory"]
    if request.accelerator is not None:
        need.append(f"{request.accelerator_count} free {request.accelerator}")
    add = "add a node with at least " + ", ".join(need)
    if request.node_selector:
        add += f", labelled {labels_text(request.node_selector)}"
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

    def snapshot(self) -> list[NodeStatus]:
        """Capacity and reservations of every node, in the order the nodes were given."""
        rows: list[NodeStatus] = []
        for name, node in self._nodes.items():
            used = self._usage[name]
            rows.append(
                NodeStatus(
                    name=name,
                    cores=node.cores,
                    memory_gb=node.memory_gb,
                    accelerators=dict(node.accelerators),
                    used_cores=used.cores,
                    used_memory_gb=round(used.memory_gb, 9),
                    used_accelerators=dict(used.accelerators),
                )
            )
        return rows
