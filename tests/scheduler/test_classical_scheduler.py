"""Classical scheduler: filters, scorers, the combined placement and the cluster bookkeeping."""

import math
import os

import psutil
import pytest

from kernel_server.core.status import NodeStatus
from kernel_server.scheduler.classical import (
    DEFAULT_SCORING,
    FILTERS,
    SCORERS,
    ClassicalCluster,
    ClassicalNode,
    ClassicalRequest,
    NodeUsage,
    NoFeasibleNode,
    local_node,
    schedule_classical,
    simulated_nodes,
)

IDLE = NodeUsage()


def only(scorer: str) -> dict[str, float]:
    return {scorer: 1.0}


# ----------------------------------------------------------------------------------- filters


def test_fits_cores():
    node = ClassicalNode("n", cores=8, memory_gb=32)
    busy = NodeUsage(cores=6)
    assert FILTERS["fits-cores"](ClassicalRequest(cores=2), node, busy) is None
    assert (
        FILTERS["fits-cores"](ClassicalRequest(cores=4), node, busy) == "needs 4 cores, 2 of 8 free"
    )
    assert FILTERS["fits-cores"](ClassicalRequest(cores=8), node, IDLE) is None
    assert (
        FILTERS["fits-cores"](ClassicalRequest(cores=9), node, IDLE) == "needs 9 cores, 8 of 8 free"
    )


def test_fits_memory():
    node = ClassicalNode("n", cores=8, memory_gb=16)
    busy = NodeUsage(memory_gb=12.5)
    assert FILTERS["fits-memory"](ClassicalRequest(memory_gb=3.5), node, busy) is None
    assert (
        FILTERS["fits-memory"](ClassicalRequest(memory_gb=8), node, busy)
        == "needs 8 GB memory, 3.5 of 16 GB free"
    )


def test_fits_memory_tolerates_float_drift():
    # Fourteen 0.1 GB reservations leave 0.5999999999999999 of 2 GB free in floats, 0.6 on paper;
    # a 0.6 GB job fills the node exactly and must fit.
    usage = NodeUsage()
    for _ in range(14):
        usage.reserve(ClassicalRequest(memory_gb=0.1))
    node = ClassicalNode("n", cores=64, memory_gb=2)
    assert 2 - usage.memory_gb < 0.6
    assert FILTERS["fits-memory"](ClassicalRequest(memory_gb=0.6), node, usage) is None
    assert FILTERS["fits-memory"](ClassicalRequest(memory_gb=0.61), node, usage) == (
        "needs 0.61 GB memory, 0.6 of 2 GB free"
    )


def test_has_accelerator():
    check = FILTERS["has-accelerator"]
    cpu = ClassicalNode("cpu", 8, 32)
    gpu = ClassicalNode("gpu", 8, 32, accelerators={"gpu": 4})
    wants_two = ClassicalRequest(accelerator="gpu", accelerator_count=2)
    assert check(ClassicalRequest(), cpu, IDLE) is None
    assert check(wants_two, cpu, IDLE) == "has no gpu"
    assert check(wants_two, gpu, IDLE) is None
    assert check(wants_two, gpu, NodeUsage(accelerators={"gpu": 3})) == "needs 2 gpu, 1 of 4 free"
    # Another kind of accelerator is no substitute.
    assert check(ClassicalRequest(accelerator="fpga"), gpu, IDLE) == "has no fpga"


def test_node_selector():
    check = FILTERS["node-selector"]
    node = ClassicalNode("n", 8, 32, labels={"zone": "us", "tier": "fast"})
    assert check(ClassicalRequest(), node, IDLE) is None
    assert check(ClassicalRequest(node_selector={"zone": "us"}), node, IDLE) is None
    request = ClassicalRequest(node_selector={"zone": "eu", "disk": "ssd"})
    assert check(request, node, IDLE) == (
        "label zone=eu wanted, node has zone=us; label disk=ssd wanted, node has no disk label"
    )


# ----------------------------------------------------------------------------------- scorers

# Same size, one half full: 2 cores / 8 GB on 8 cores / 32 GB leaves 75% free on the empty node
# and 25% on the half-full one.
EMPTY = ClassicalNode("empty", 8, 32)
HALF = ClassicalNode("half", 8, 32)
HALF_USAGE = {"half": NodeUsage(cores=4, memory_gb=16)}
SMALL_JOB = ClassicalRequest(cores=2, memory_gb=8)


def test_least_allocated_prefers_the_emptier_node():
    assert SCORERS["least-allocated"](SMALL_JOB, EMPTY, IDLE) == 75.0
    assert SCORERS["least-allocated"](SMALL_JOB, HALF, HALF_USAGE["half"]) == 25.0
    placement = schedule_classical(SMALL_JOB, [HALF, EMPTY], HALF_USAGE, only("least-allocated"))
    assert placement.node is EMPTY
    assert placement.score == 75.0
    assert placement.scores == {"half": 25.0, "empty": 75.0}
    assert placement.rejected == {}


def test_most_allocated_packs_onto_the_fuller_node():
    assert SCORERS["most-allocated"](SMALL_JOB, EMPTY, IDLE) == 25.0
    assert SCORERS["most-allocated"](SMALL_JOB, HALF, HALF_USAGE["half"]) == 75.0
    placement = schedule_classical(SMALL_JOB, [EMPTY, HALF], HALF_USAGE, only("most-allocated"))
    assert placement.node is HALF
    assert placement.scores == {"empty": 25.0, "half": 75.0}


def test_balanced_allocation_prefers_equal_cpu_and_memory_utilisation():
    # 2 cores / 8 GB: on 16 cores / 16 GB that is 12.5% cpu vs 50% memory -> 100 * (1 - 0.375);
    # on 4 cores / 16 GB it is 50% and 50% -> 100.
    lopsided = ClassicalNode("lopsided", 16, 16)
    even = ClassicalNode("even", 4, 16)
    assert SCORERS["balanced-allocation"](SMALL_JOB, lopsided, IDLE) == 62.5
    assert SCORERS["balanced-allocation"](SMALL_JOB, even, IDLE) == 100.0
    placement = schedule_classical(SMALL_JOB, [lopsided, even], scoring=only("balanced-allocation"))
    assert placement.node is even
    # Least-allocated would have chosen the other node (68.75 vs 50): the scorers really differ.
    assert schedule_classical(
        SMALL_JOB, [lopsided, even], scoring=only("least-allocated")
    ).scores == {
        "lopsided": 68.75,
        "even": 50.0,
    }


CPU = ClassicalNode("cpu", 8, 32)
GPU1 = ClassicalNode("gpu1", 8, 32, accelerators={"gpu": 1})
GPU4 = ClassicalNode("gpu4", 8, 32, accelerators={"gpu": 4})
FLEET = [GPU4, GPU1, CPU]


def test_accelerator_fit_keeps_gpu_nodes_for_gpu_jobs():
    fit = SCORERS["accelerator-fit"]
    assert fit(SMALL_JOB, CPU, IDLE) == 100.0
    assert fit(SMALL_JOB, GPU1, IDLE) == 0.0
    placement = schedule_classical(SMALL_JOB, FLEET, scoring=only("accelerator-fit"))
    assert placement.node is CPU
    assert placement.scores == {"gpu4": 0.0, "gpu1": 0.0, "cpu": 100.0}


def test_accelerator_fit_prefers_the_closest_free_count():
    fit = SCORERS["accelerator-fit"]
    one = ClassicalRequest(cores=2, memory_gb=8, accelerator="gpu")
    two = ClassicalRequest(cores=2, memory_gb=8, accelerator="gpu", accelerator_count=2)
    assert fit(one, GPU1, IDLE) == 100.0
    assert fit(one, GPU4, IDLE) == 25.0
    assert fit(two, GPU4, IDLE) == 50.0
    assert fit(two, GPU4, NodeUsage(accelerators={"gpu": 2})) == 100.0

    placement = schedule_classical(one, FLEET, scoring=only("accelerator-fit"))
    assert placement.node is GPU1  # the 4-GPU node stays whole for a bigger job
    assert placement.rejected == {"cpu": "has no gpu"}
    placement = schedule_classical(two, FLEET, scoring=only("accelerator-fit"))
    assert placement.node is GPU4
    assert placement.rejected == {"gpu1": "needs 2 gpu, 1 of 1 free", "cpu": "has no gpu"}


def test_default_scoring_is_the_weighted_mean():
    # least 75, balanced 100 on all three; accelerator-fit 100 on cpu, 0 on the GPU nodes.
    # Weighted mean: cpu (75 + 100 + 2 * 100) / 4, GPU nodes (75 + 100 + 0) / 4.
    assert DEFAULT_SCORING == {
        "least-allocated": 1.0,
        "balanced-allocation": 1.0,
        "accelerator-fit": 2.0,
    }
    placement = schedule_classical(SMALL_JOB, FLEET)
    assert placement.node is CPU
    assert placement.score == 93.75
    assert placement.scores == {"gpu4": 43.75, "gpu1": 43.75, "cpu": 93.75}


def test_default_scoring_sends_plain_jobs_to_a_gpu_node_only_as_a_fallback():
    placement = schedule_classical(SMALL_JOB, FLEET, {"cpu": NodeUsage(cores=8)})
    assert placement.node is GPU1  # gpu1 and gpu4 tie at 43.75; the name decides
    assert placement.rejected == {"cpu": "needs 2 cores, 0 of 8 free"}


def test_scorers_stay_on_the_0_to_100_scale():
    nodes = simulated_nodes(20, seed=3)
    requests = [
        ClassicalRequest(),
        ClassicalRequest(cores=4, memory_gb=30),
        ClassicalRequest(cores=1, memory_gb=0, accelerator="gpu"),
        ClassicalRequest(cores=8, memory_gb=64, accelerator="gpu", accelerator_count=4),
    ]
    checked = 0
    for request in requests:
        for node in nodes:
            if any(check(request, node, IDLE) for check in FILTERS.values()):
                continue
            for scorer in SCORERS.values():
                assert 0.0 <= scorer(request, node, IDLE) <= 100.0
                checked += 1
    assert checked > 40


# -------------------------------------------------------------------------------- scheduling


def test_no_feasible_node_names_every_reason_and_what_to_do():
    nodes = [
        ClassicalNode("small", 2, 64, labels={"zone": "eu"}),
        ClassicalNode("tiny-mem", 16, 4, labels={"zone": "eu"}),
        ClassicalNode("elsewhere", 16, 64, labels={"zone": "us"}),
    ]
    request = ClassicalRequest(cores=4, memory_gb=8, node_selector={"zone": "eu"})
    with pytest.raises(NoFeasibleNode) as info:
        schedule_classical(request, nodes)
    message = str(info.value)
    assert message.startswith(
        "no classical node can run a job needing 4 cores, 8 GB memory on nodes labelled zone=eu:"
    )
    assert "  small: needs 4 cores, 2 of 2 free\n" in message
    assert "  tiny-mem: needs 8 GB memory, 4 of 4 GB free\n" in message
    assert "  elsewhere: label zone=eu wanted, node has zone=us\n" in message
    assert message.endswith(
        "Ask for fewer cores, less memory or a looser node_selector; "
        "or add a node with at least 4 cores, 8 GB memory, labelled zone=eu."
    )
    assert info.value.rejected == {
        "small": "needs 4 cores, 2 of 2 free",
        "tiny-mem": "needs 8 GB memory, 4 of 4 GB free",
        "elsewhere": "label zone=eu wanted, node has zone=us",
    }
    assert info.value.request is request
    assert isinstance(info.value, ValueError)


def test_no_feasible_node_lists_every_failed_filter_of_a_node():
    request = ClassicalRequest(cores=4, memory_gb=8, accelerator="gpu")
    with pytest.raises(NoFeasibleNode) as info:
        schedule_classical(request, [ClassicalNode("cpu", 2, 4)])
    assert info.value.rejected == {
        "cpu": "needs 4 cores, 2 of 2 free; needs 8 GB memory, 4 of 4 GB free; has no gpu"
    }
    assert "add a node with at least 4 cores, 8 GB memory, 1 free gpu." in str(info.value)


def test_no_feasible_node_says_when_waiting_would_help():
    node = ClassicalNode("busy", 4, 16)
    with pytest.raises(NoFeasibleNode, match="busy could run it once running jobs release"):
        schedule_classical(ClassicalRequest(cores=2), [node], {"busy": NodeUsage(cores=3)})


def test_no_nodes_at_all():
    with pytest.raises(NoFeasibleNode, match="none are registered; add a classical node"):
        schedule_classical(ClassicalRequest(), [])


def test_ties_go_to_the_first_name_whatever_the_order():
    a, b, c = (ClassicalNode(name, 8, 32) for name in ("a", "b", "c"))
    for order in ([c, b, a], [a, b, c], [b, c, a]):
        placement = schedule_classical(SMALL_JOB, order)
        assert placement.node is a
        assert set(placement.scores.values()) == {placement.score}


def test_ties_survive_float_noise():
    # Eighteen 0.1 GB reservations add up to 1.8000000000000005, not 1.8. The two nodes are equal
    # on paper; unrounded, node a would lose by one float bit (72.81249999999999 vs 72.8125).
    noisy = 0.0
    for _ in range(18):
        noisy += 0.1
    assert noisy != 1.8
    usage = {"a": NodeUsage(memory_gb=noisy), "b": NodeUsage(memory_gb=1.8)}
    nodes = [ClassicalNode("b", 8, 3), ClassicalNode("a", 8, 3)]
    placement = schedule_classical(ClassicalRequest(cores=1, memory_gb=0.5), nodes, usage)
    assert placement.node.name == "a"
    assert placement.scores == {"b": 72.8125, "a": 72.8125}


def test_unknown_scorer_lists_the_known_ones():
    with pytest.raises(ValueError) as info:
        schedule_classical(SMALL_JOB, [CPU], scoring={"least-allocated": 1, "spread": 2})
    assert str(info.value) == (
        "unknown scorer 'spread'; known: least-allocated, balanced-allocation, most-allocated, "
        "accelerator-fit"
    )
    with pytest.raises(ValueError, match="unknown scorer 'spread'"):
        ClassicalCluster([CPU], scoring={"spread": 1})


def test_bad_weights_and_duplicate_nodes():
    with pytest.raises(ValueError, match="weight must be a non-negative number, got -1"):
        schedule_classical(SMALL_JOB, [CPU], scoring={"least-allocated": -1})
    with pytest.raises(ValueError, match="node names must be unique; repeated: cpu"):
        schedule_classical(SMALL_JOB, [CPU, ClassicalNode("cpu", 2, 2)])


def test_empty_scoring_is_first_fit_by_name():
    placement = schedule_classical(SMALL_JOB, [HALF, EMPTY], scoring={})
    assert placement.node is EMPTY
    assert placement.scores == {"half": 0.0, "empty": 0.0}


def test_a_misbehaving_scorer_plugin_is_caught(monkeypatch):
    monkeypatch.setitem(SCORERS, "broken", lambda request, node, usage: 250.0)
    with pytest.raises(ValueError, match="scorer 'broken' gave 250.0 for node 'cpu'"):
        schedule_classical(SMALL_JOB, [CPU], scoring={"broken": 1.0})


def test_a_registered_filter_plugin_takes_part(monkeypatch):
    def no_even_names(request, node, usage):
        return "name ends in an even digit" if int(node.name[-1]) % 2 == 0 else None

    monkeypatch.setitem(FILTERS, "odd-only", no_even_names)
    nodes = [ClassicalNode("n0", 8, 32), ClassicalNode("n1", 8, 32)]
    placement = schedule_classical(SMALL_JOB, nodes)
    assert placement.node.name == "n1"
    assert placement.rejected == {"n0": "name ends in an even digit"}


# ------------------------------------------------------------------------------------ requests


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cores": 0}, "positive whole number of cores, got 0"),
        ({"cores": -2}, "positive whole number of cores, got -2"),
        ({"cores": 1.5}, "positive whole number of cores, got 1.5"),
        ({"cores": True}, "positive whole number of cores, got True"),
        ({"memory_gb": -1}, "memory_gb must be a non-negative number of GB, got -1"),
        ({"memory_gb": math.nan}, "memory_gb must be a non-negative number of GB, got nan"),
        ({"accelerator": ""}, "accelerator must be a kind such as 'gpu' or None, got ''"),
        (
            {"accelerator": "gpu", "accelerator_count": 0},
            "accelerator_count must be a positive integer when accelerator='gpu', got 0",
        ),
        ({"node_selector": {"zone": 1}}, "node_selector must map non-empty strings to strings"),
    ],
)
def test_request_validation(kwargs, message):
    with pytest.raises(ValueError) as info:
        ClassicalRequest(**kwargs)
    assert message in str(info.value)


def test_request_defaults_and_description():
    request = ClassicalRequest()
    assert (request.cores, request.memory_gb, request.accelerator) == (1, 0.5, None)
    assert request.accelerators_needed == 0
    # accelerator_count means nothing without a kind, so it is not validated then.
    assert ClassicalRequest(accelerator_count=0).accelerators_needed == 0
    gpu = ClassicalRequest(cores=4, memory_gb=16, accelerator="gpu", accelerator_count=2)
    assert gpu.accelerators_needed == 2
    assert gpu.describe() == "4 cores, 16 GB memory, 2 gpu"
    assert ClassicalRequest(node_selector={"zone": "eu"}).describe() == (
        "1 core, 0.5 GB memory on nodes labelled zone=eu"
    )


def test_requests_and_nodes_are_frozen_copies_and_hashable():
    selector = {"zone": "eu"}
    request = ClassicalRequest(node_selector=selector)
    selector["zone"] = "us"
    assert request.node_selector == {"zone": "eu"}
    assert hash(request) == hash(ClassicalRequest(node_selector={"zone": "eu"}))
    assert len({GPU1, ClassicalNode("gpu1", 8, 32, accelerators={"gpu": 1}), CPU}) == 2
    with pytest.raises(AttributeError):
        request.cores = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "cores": 1, "memory_gb": 1}, "needs a non-empty name"),
        ({"name": "n", "cores": 0, "memory_gb": 1}, "cores must be a positive integer, got 0"),
        ({"name": "n", "cores": 1, "memory_gb": 0}, "memory_gb must be a positive number, got 0"),
        (
            {"name": "n", "cores": 1, "memory_gb": 1, "accelerators": {"gpu": -1}},
            "accelerators must map a kind to a non-negative count, got 'gpu': -1",
        ),
    ],
)
def test_node_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClassicalNode(**kwargs)


# ------------------------------------------------------------------------------------- usage


def test_usage_reserve_and_release():
    usage = NodeUsage()
    gpu_job = ClassicalRequest(cores=2, memory_gb=1.5, accelerator="gpu", accelerator_count=2)
    usage.reserve(gpu_job)
    usage.reserve(ClassicalRequest(cores=1, memory_gb=0.5))
    assert usage == NodeUsage(cores=3, memory_gb=2.0, accelerators={"gpu": 2})
    usage.release(gpu_job)
    assert usage == NodeUsage(cores=1, memory_gb=0.5, accelerators={})
    with pytest.raises(ValueError, match="cannot release 2 cores: only 1 reserved"):
        usage.release(ClassicalRequest(cores=2))
    with pytest.raises(ValueError, match="cannot release 1 gpu: only 0 reserved"):
        usage.release(ClassicalRequest(accelerator="gpu"))
    assert usage == NodeUsage(cores=1, memory_gb=0.5)  # failed releases change nothing


def test_usage_release_absorbs_float_drift():
    usage = NodeUsage()
    jobs = [ClassicalRequest(memory_gb=0.1) for _ in range(3)]
    for job in jobs:
        usage.reserve(job)
    for job in jobs:
        usage.release(job)
    assert usage.memory_gb == 0.0


# ----------------------------------------------------------------------------------- cluster


def test_cluster_fills_a_node_then_moves_on():
    a, b = ClassicalNode("a", 4, 16), ClassicalNode("b", 4, 16)
    cluster = ClassicalCluster([b, a], scoring=only("most-allocated"))
    job = ClassicalRequest(cores=2, memory_gb=4)

    assert cluster.place(job).node is a  # tie on empty nodes: first name
    assert cluster.place(job).node is a  # bin packing: the busier node
    third = cluster.place(job)  # a is full now
    assert third.node is b
    assert third.rejected == {"a": "needs 2 cores, 0 of 4 free"}
    assert cluster.usage("a") == NodeUsage(cores=4, memory_gb=8.0)
    assert cluster.usage("b") == NodeUsage(cores=2, memory_gb=4.0)

    cluster.release("a", job)
    assert cluster.usage("a") == NodeUsage(cores=2, memory_gb=4.0)
    # Both nodes are now half full (tie -> a); packing goes back to a.
    assert cluster.place(job).node is a


def test_cluster_spreads_with_the_default_scoring():
    cluster = ClassicalCluster([ClassicalNode("a", 8, 32), ClassicalNode("b", 8, 32)])
    job = ClassicalRequest(cores=2, memory_gb=8)
    assert [cluster.place(job).node.name for _ in range(4)] == ["a", "b", "a", "b"]


def test_cluster_full_raises_and_books_are_unchanged():
    cluster = ClassicalCluster([ClassicalNode("only", 2, 8)])
    cluster.place(ClassicalRequest(cores=2))
    with pytest.raises(NoFeasibleNode, match="only: needs 1 core, 0 of 2 free"):
        cluster.place(ClassicalRequest(cores=1))
    assert cluster.usage("only") == NodeUsage(cores=2, memory_gb=0.5)


def test_cluster_usage_is_a_copy_and_unknown_nodes_fail():
    cluster = ClassicalCluster([CPU])
    cluster.usage("cpu").reserve(ClassicalRequest(cores=8))
    assert cluster.usage("cpu") == NodeUsage()
    with pytest.raises(ValueError, match="unknown classical node 'nope'; known: cpu"):
        cluster.release("nope", ClassicalRequest())
    with pytest.raises(ValueError, match="repeated: cpu"):
        ClassicalCluster([CPU, CPU])


def test_cluster_snapshot():
    cluster = ClassicalCluster([GPU4, CPU])
    cluster.place(ClassicalRequest(cores=3, memory_gb=10, accelerator="gpu", accelerator_count=2))
    assert cluster.snapshot() == [
        NodeStatus(
            name="gpu4",
            cores=8,
            memory_gb=32,
            accelerators={"gpu": 4},
            used_cores=3,
            used_memory_gb=10,
            used_accelerators={"gpu": 2},
        ),
        NodeStatus(name="cpu", cores=8, memory_gb=32),
    ]


# ---------------------------------------------------------------------------- node providers


def test_simulated_nodes_are_reproducible_per_seed():
    assert simulated_nodes(12, seed=7) == simulated_nodes(12, seed=7)
    assert simulated_nodes(12, seed=7) != simulated_nodes(12, seed=8)
    assert simulated_nodes(0) == []
    with pytest.raises(ValueError, match="count must be a non-negative integer, got -1"):
        simulated_nodes(-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulated_nodes_are_heterogeneous(seed):
    nodes = simulated_nodes(30, seed=seed)
    assert len(nodes) == 30
    assert len({node.name for node in nodes}) == 30
    kinds = {node.labels["kind"] for node in nodes}
    assert kinds == {"standard", "highmem", "gpu"}
    for index, node in enumerate(nodes):
        kind = node.labels["kind"]
        assert node.name == f"{ {'standard': 'vm', 'highmem': 'mem', 'gpu': 'gpu'}[kind] }-{index}"
        if kind == "standard":
            assert 4 <= node.cores <= 16 and 16 <= node.memory_gb <= 64
            assert not node.has_accelerators
        elif kind == "highmem":
            assert node.memory_gb / node.cores == 8
            assert not node.has_accelerators
        else:
            assert 1 <= node.accelerators["gpu"] <= 4
    assert len({(node.cores, node.memory_gb) for node in nodes}) >= 4


def test_small_simulated_sets_are_still_mixed():
    assert [node.labels["kind"] for node in simulated_nodes(1)] == ["standard"]
    assert sorted(node.labels["kind"] for node in simulated_nodes(2, seed=5)) == ["gpu", "standard"]
    assert {node.labels["kind"] for node in simulated_nodes(3, seed=5)} == {
        "standard",
        "gpu",
        "highmem",
    }


def test_local_node_describes_this_machine():
    node = local_node()
    assert node.name == "local"
    assert node.cores == (os.cpu_count() or 1)
    total_gib = psutil.virtual_memory().total / 2**30
    assert total_gib - 0.1 <= node.memory_gb <= total_gib
    assert node.accelerators == {}
    assert node.address is None
    gpu = local_node("workstation", accelerators={"gpu": 2})
    assert (gpu.name, gpu.accelerators) == ("workstation", {"gpu": 2})
    # It schedules like any other node.
    assert schedule_classical(ClassicalRequest(), [node]).node is node
