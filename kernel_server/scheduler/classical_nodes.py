"""Classical nodes, resource requests and their usage: what the classical scheduler places on.

Capacity is counted in whole cores, GB of memory (GiB for :func:`local_node`) and whole
accelerators per kind. Usage is what the orchestrator has reserved, not what the machine measures.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil

from kernel_server.core.resources import (
    ClassicalRequest,
    check_str_mapping,
    cores_text,
    is_int,
    is_number,
    number_text,
)

# Memory is a float; sums of reservations drift by a few ulps, which must not turn "exactly full"
# into "over by 1e-15".
MEMORY_EPS = 1e-9


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
        if not is_int(self.cores) or self.cores < 1:
            raise ValueError(
                f"node {self.name!r}: cores must be a positive integer, got {self.cores!r}"
            )
        if (
            not is_number(self.memory_gb)
            or not math.isfinite(self.memory_gb)
            or self.memory_gb <= 0
        ):
            raise ValueError(
                f"node {self.name!r}: memory_gb must be a positive number, got {self.memory_gb!r}"
            )
        for kind, count in self.accelerators.items():
            if not isinstance(kind, str) or not kind or not is_int(count) or count < 0:
                raise ValueError(
                    f"node {self.name!r}: accelerators must map a kind to a non-negative count, "
                    f"got {kind!r}: {count!r}"
                )
        check_str_mapping(f"node {self.name!r}: labels", self.labels)
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
            raise ValueError(
                f"cannot release {cores_text(request.cores)}: only {self.cores} reserved"
            )
        if request.memory_gb > self.memory_gb + MEMORY_EPS:
            raise ValueError(
                f"cannot release {number_text(request.memory_gb)} GB memory: "
                f"only {number_text(self.memory_gb)} GB reserved"
            )
        kind = request.accelerator
        if kind is not None and request.accelerator_count > self.accelerators.get(kind, 0):
            raise ValueError(
                f"cannot release {request.accelerator_count} {kind}: "
                f"only {self.accelerators.get(kind, 0)} reserved"
            )
        self.cores -= request.cores
        self.memory_gb = max(0.0, self.memory_gb - request.memory_gb)
        if self.memory_gb < MEMORY_EPS:
            self.memory_gb = 0.0
        if kind is not None:
            left = self.accelerators[kind] - request.accelerator_count
            if left:
                self.accelerators[kind] = left
            else:
                del self.accelerators[kind]

    def copy(self) -> NodeUsage:
        return NodeUsage(self.cores, self.memory_gb, dict(self.accelerators))


def free_cores(node: ClassicalNode, usage: NodeUsage) -> int:
    return node.cores - usage.cores


def free_memory(node: ClassicalNode, usage: NodeUsage) -> float:
    return node.memory_gb - usage.memory_gb


def free_accelerators(node: ClassicalNode, usage: NodeUsage, kind: str) -> int:
    return node.accelerators.get(kind, 0) - usage.accelerators.get(kind, 0)


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
    if not is_int(count) or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    rng = random.Random(seed)
    kinds = list(_SIM_KINDS[:count])
    kinds += rng.choices(
        list(_SIM_WEIGHTS), weights=list(_SIM_WEIGHTS.values()), k=count - len(kinds)
    )
    rng.shuffle(kinds)
    return [_simulated_node(kind, index, rng) for index, kind in enumerate(kinds)]
