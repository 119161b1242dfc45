"""Quantum scheduler: objectives on hand-computed cases, constraints, NSGA-II quality, MCDM,
baselines and triggers. Pure numpy/pymoo, no sockets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernel_server.core.mcdm import preference_weights, pseudo_weights, select
from kernel_server.scheduler import SchedulingError, SchedulingProblem, nsga2_schedule
from kernel_server.scheduler.cycle import (
    CLOUD_TRIGGERS,
    INTERACTIVE_TRIGGERS,
    QPUView,
    Triggers,
    run_cycle,
)
from kernel_server.scheduler.nsga2 import (
    best_fidelity_assignment,
    earliest_completion_assignment,
)
from kernel_server.scheduler.policies import POLICIES, PolicyState, get_policy


def two_by_three() -> SchedulingProblem:
    # QPU 0: small, idle, noisy; QPU 1: big, busy 10 s, good.
    return SchedulingProblem(
        wait=[0.0, 10.0],
        qpu_qubits=[5, 27],
        job_qubits=[3, 3, 20],
        runtime=[[2.0, 1.0], [4.0, 3.0], [9.0, 5.0]],
        fidelity=[[0.7, 0.9], [0.6, 0.8], [0.5, 0.75]],
    )


def test_jct_counts_only_the_jobs_ahead_in_fifo_order() -> None:
    p = two_by_three()
    # All on QPU 1: completion 10+1, 10+1+3, 10+1+3+5.
    assert p.completion_times(np.array([1, 1, 1])).tolist() == [[11.0, 14.0, 19.0]]
    # Job 0 on QPU 0 (2 s), jobs 1 and 2 on QPU 1: 2, 10+3, 10+3+5.
    assert p.completion_times(np.array([0, 1, 1])).tolist() == [[2.0, 13.0, 18.0]]
    f = p.evaluate(np.array([[1, 1, 1], [0, 1, 1]]))
    assert f[0].tolist() == pytest.approx([44 / 3, 1 - (0.9 + 0.8 + 0.75) / 3])
    assert f[1].tolist() == pytest.approx([11.0, 1 - (0.7 + 0.8 + 0.75) / 3])
    assert p.evaluate(np.array([0, 1, 1])).shape == (2,)  # one assignment, one pair


def test_the_papers_batch_formula_charges_every_job_its_whole_batch() -> None:
    p = two_by_three()
    batch = SchedulingProblem(
        p.wait, p.qpu_qubits, p.job_qubits, p.runtime, p.fidelity, jct_model="batch"
    )
    # Job 0 alone on QPU 0: 2; jobs 1 and 2 on QPU 1 both pay 10 + 3 + 5.
    assert batch.completion_times(np.array([0, 1, 1])).tolist() == [[2.0, 18.0, 18.0]]
    with pytest.raises(SchedulingError, match="jct_model"):
        SchedulingProblem([0], [5], [3], [[1.0]], [[0.9]], jct_model="lifo")


def test_offsets_add_time_already_waited() -> None:
    p = two_by_three()
    p2 = SchedulingProblem(p.wait, p.qpu_qubits, p.job_qubits, p.runtime, p.fidelity, [5, 0, 1])
    assert p2.completion_times(np.array([0, 1, 1])).tolist() == [[7.0, 13.0, 19.0]]


def test_qubit_constraint_and_bad_arrays() -> None:
    p = two_by_three()
    assert p.violation(np.array([[1, 1, 1], [0, 0, 0]])).tolist() == [0.0, 15.0]
    assert p.unplaceable().tolist() == []
    with pytest.raises(SchedulingError, match="shape"):
        SchedulingProblem([0], [5], [3, 3], [[1.0], [1.0], [1.0]], [[1.0], [1.0]])
    with pytest.raises(SchedulingError, match="NaN"):
        SchedulingProblem([0], [5], [3], [[np.nan]], [[0.9]])
    with pytest.raises(SchedulingError, match="0..1"):
        p.evaluate(np.array([0, 2, 1]))
    with pytest.raises(SchedulingError, match="integer"):
        p.evaluate(np.array([0.5, 1, 1]))


def test_nsga2_never_puts_a_job_on_a_too_small_qpu_and_refuses_unplaceable_jobs() -> None:
    p = two_by_three()
    r = nsga2_schedule(p, seed=0, population=20, max_generations=10)
    assert r.assignment[2] == 1
    assert (p.violation(r.front_assignments) == 0).all()
    wide = SchedulingProblem([0, 0], [5, 27], [30], [[1.0, 1.0]], [[0.9, 0.9]])
    with pytest.raises(SchedulingError, match="fit no QPU"):
        nsga2_schedule(wide)


def _exact_front(p: SchedulingProblem) -> np.ndarray:
    xs = np.asarray(list(itertools.product(range(p.num_qpus), repeat=p.num_jobs)))
    f = p.evaluate(xs[p.violation(xs) == 0])
    f = f[np.lexsort((f[:, 1], f[:, 0]))]
    front, best = [], np.inf
    for point in f:
        if point[1] < best:
            front.append(point)
            best = point[1]
    return np.asarray(front)


def test_nsga2_front_matches_the_enumerated_front_on_a_small_instance() -> None:
    from pymoo.indicators.hv import HV

    rng = np.random.default_rng(3)
    n, q = 8, 4  # 65536 assignments: above the exact-enumeration limit, so NSGA-II runs
    p = SchedulingProblem(
        rng.uniform(0, 30, q),
        [27, 27, 127, 156],
        rng.integers(2, 30, n),
        rng.uniform(2, 20, (n, 1)) * rng.uniform(0.7, 1.3, (n, q)),
        np.clip(rng.uniform(0.5, 0.95, (n, 1)) + rng.normal(0, 0.05, (n, q)), 0, 1),
    )
    exact = _exact_front(p)
    result = nsga2_schedule(p, seed=0)
    assert result.generations > 0
    hv = HV(ref_point=exact.max(axis=0) * 1.1)
    assert hv(result.front) >= 0.99 * hv(exact)


def test_small_cycles_are_enumerated_exactly() -> None:
    p = two_by_three()  # 8 assignments
    result = nsga2_schedule(p, "balanced")
    assert result.generations == 0
    assert result.front.tolist() == _exact_front(p).tolist()


def test_pseudo_weights_and_selection_by_preference() -> None:
    front = np.array([[10.0, 0.30], [20.0, 0.20], [40.0, 0.10]])
    w = pseudo_weights(front)
    assert w[0].tolist() == pytest.approx([1.0, 0.0])  # best JCT, worst error
    assert w[1].tolist() == pytest.approx([(20 / 30) / (20 / 30 + 0.5), 0.5 / (20 / 30 + 0.5)])
    assert w[2].tolist() == pytest.approx([0.0, 1.0])
    assert select(front, "jct") == 0
    assert select(front, "fidelity") == 2
    assert select(front, "balanced") == 1
    assert select(front, {"jct": 1, "fidelity": 0}) == 0
    assert pseudo_weights(np.array([[5.0, 0.1]])).tolist() == [[0.5, 0.5]]  # one point


def test_preference_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="unknown preference 'fast'"):
        preference_weights("fast")
    with pytest.raises(ValueError, match="'jct' and 'fidelity'"):
        preference_weights({"speed": 1})
    with pytest.raises(ValueError, match="two weights"):
        preference_weights((1, 2, 3))
    assert preference_weights((3, 1)) == (0.75, 0.25)


@pytest.mark.slow
def test_presets_order_jct_and_fidelity() -> None:
    rng = np.random.default_rng(5)
    n, q = 40, 6
    p = SchedulingProblem(
        rng.uniform(0, 120, q),
        [27, 127, 127, 133, 156, 27],
        rng.integers(2, 26, n),
        rng.uniform(2, 10, (n, 1)) * rng.uniform(0.8, 1.2, (n, q)),
        np.clip(np.linspace(0.7, 0.9, q)[None, :] + rng.normal(0, 0.03, (n, q)), 0, 1),
    )
    picked = {k: nsga2_schedule(p, k, seed=1).objectives for k in ("jct", "balanced", "fidelity")}
    assert picked["jct"][0] <= picked["balanced"][0] <= picked["fidelity"][0]
    assert picked["jct"][1] >= picked["balanced"][1] >= picked["fidelity"][1]


def test_baselines() -> None:
    p = two_by_three()
    assert best_fidelity_assignment(p).tolist() == [1, 1, 1]
    assert POLICIES["fcfs"](p, PolicyState(), "balanced", 0).tolist() == [1, 1, 1]
    # Earliest completion: job 0 on QPU 0 (2 < 11), job 1 on QPU 0 (6 < 13), job 2 must go to 1.
    assert earliest_completion_assignment(p).tolist() == [0, 0, 1]
    state = PolicyState(pending=np.array([3, 1]))
    # Fewest pending jobs: QPU 1 (1), then tie 3 vs 2 -> QPU 1 again, job 2 only fits QPU 1.
    assert POLICIES["least-busy"](p, state, "balanced", 0).tolist() == [1, 1, 1]
    state = PolicyState(pending=np.array([0, 5]))
    assert POLICIES["least-busy"](p, state, "balanced", 0).tolist() == [0, 0, 1]
    rr = PolicyState()
    assert POLICIES["round-robin"](p, rr, "balanced", 0).tolist() == [0, 1, 1]
    assert rr.next_qpu == 0
    with pytest.raises(ValueError, match="unknown scheduling policy 'sjf'"):
        get_policy("sjf")


def test_triggers() -> None:
    assert CLOUD_TRIGGERS.next_cycle(0, None, 0.0) is None
    assert CLOUD_TRIGGERS.next_cycle(5, 30.0, 0.0) == 120.0  # time trigger
    assert CLOUD_TRIGGERS.next_cycle(100, 30.0, 0.0) == 0.0  # size trigger: now
    assert INTERACTIVE_TRIGGERS.next_cycle(1, 50.0, 0.0) == pytest.approx(50.25)
    assert INTERACTIVE_TRIGGERS.next_cycle(1, 50.0, 0.0) - 50.0 < 1.0  # a lone job: < 1 s
    with pytest.raises(ValueError):
        Triggers(queue_size=0)


def test_cycle_drops_deferrs_and_skips_offline_qpus() -> None:
    qpus = [
        QPUView("small", 5, wait_s=0.0),
        QPUView("big", 27, wait_s=0.0, online=False),  # reserved now
        QPUView("mid", 16, wait_s=50.0),
    ]
    runtime = np.ones((3, 3))
    fidelity = np.array([[0.9, 0.95, 0.8]] * 3)
    out = run_cycle(["a", "b", "c"], [3, 20, 40], runtime, fidelity, qpus, policy="qonductor")
    assert out.dropped.keys() == {"c"} and "largest QPU of the fleet has 27" in out.dropped["c"]
    assert out.deferred == ["b"]  # only the offline QPU can hold it
    assert out.placed["a"] in {"small", "mid"}  # never the offline one
    assert set(out.stage_seconds) == {"pre-processing", "optimization+selection"}


def test_dispatcher_gathers_concurrent_jobs_into_one_cycle_and_places_a_lone_job_fast() -> None:
    import asyncio
    import time

    from kernel_server.scheduler.dispatch import OnlineDispatcher

    fleet = [QPUView("good", 27, wait_s=0.0), QPUView("busy", 127, wait_s=500.0)]

    async def scenario() -> tuple[list[str], float, int]:
        dispatcher = OnlineDispatcher(lambda: fleet)
        estimates = {"good": (0.9, 5.0), "busy": (0.95, 5.0)}
        names = await asyncio.gather(
            *[dispatcher.place(f"j{i}", 3, estimates, "jct") for i in range(3)]
        )
        cycles_after_batch = dispatcher.cycles
        t0 = time.perf_counter()
        # A job only "busy" may run (its configuration excludes "good").
        lone = await dispatcher.place("lone", 3, {"busy": (0.8, 5.0)}, "balanced")
        return [*names, lone], time.perf_counter() - t0, cycles_after_batch

    names, lone_seconds, cycles = asyncio.run(scenario())
    assert cycles == 1  # three concurrent jobs, one cycle
    assert names[:3] == ["good", "good", "good"]  # jct: the idle QPU beats a 500 s queue
    assert names[3] == "busy"  # never a QPU the job may not use
    assert lone_seconds < 1.0


def test_a_balancing_dispatcher_spreads_a_shared_fleet() -> None:
    import asyncio

    from kernel_server.scheduler.dispatch import OnlineDispatcher

    # "best" ran 10 minutes of work in the last hour, "other" none; both queues are empty. Four
    # 5 s jobs all on "best" cost 5 s of mean JCT: within the fidelity preset's margin.
    fleet = [
        QPUView("best", 27, wait_s=0.0, recent_busy_s=600.0),
        QPUView("other", 27, wait_s=0.0, recent_busy_s=0.0),
    ]
    estimates = {"best": (0.95, 5.0), "other": (0.85, 5.0)}

    async def scenario(balance: float | str | None) -> list[str]:
        dispatcher = OnlineDispatcher(lambda: fleet, balance=balance)
        return await asyncio.gather(
            *[dispatcher.place(f"j{i}", 3, estimates, "fidelity") for i in range(4)]
        )

    # Balance off (fleet.yaml scheduler.balance: off): the jobs go where they run best.
    assert asyncio.run(scenario("off")) == ["best"] * 4
    # The fidelity preset's own balance (0.3), or the fleet file's: the idle QPU catches up.
    assert asyncio.run(scenario(None)) == ["other"] * 4
    assert asyncio.run(scenario(0.05)) == ["other"] * 4


# --------------------------------------------------------------------------------------------
# Load balancing (a constraint of the cycle problem, off unless ``balance`` is set)
# --------------------------------------------------------------------------------------------


def three_qpus_with_history(balance: float | None = 0.1) -> SchedulingProblem:
    # Two 10 s jobs; the QPUs already carried 0, 30 and 100 s in the window.
    return SchedulingProblem(
        wait=[0.0, 0.0, 0.0],
        qpu_qubits=[5, 5, 5],
        job_qubits=[2, 2],
        runtime=[[10.0, 10.0, 10.0], [10.0, 10.0, 10.0]],
        fidelity=[[0.9, 0.8, 0.7], [0.9, 0.8, 0.7]],
        load=[0.0, 30.0, 100.0],
        balance=balance,
    )


def test_even_level_fills_the_least_loaded_qpus_first() -> None:
    p = three_qpus_with_history()
    # 20 s fill QPU 0 to 20; 0 s leave the level at the lowest load; 200 s lift all three to
    # (200 + 130) / 3 = 110; 60 s fill QPUs 0 and 1 to (60 + 30) / 2 = 45.
    assert p.even_level(np.array([20.0, 0.0, 200.0, 60.0])).tolist() == pytest.approx(
        [20.0, 0.0, 110.0, 45.0]
    )


def test_load_excess_by_hand() -> None:
    p = three_qpus_with_history(balance=0.1)
    x = np.array([[0, 0], [1, 1], [0, 1], [2, 2]])
    # Level 20 s for the cycle's 20 s: cap 22, floor 18, each give or take one 10 s job.
    # [0, 0]: QPU 0 ends at 20 <= 22 + 10; QPU 1 holds 30, above the floor: 0.
    # [1, 1]: QPU 1 ends at 50 - 22 - 10 = 18 over; QPU 0 at 0, 18 - 0 - 10 = 8 under: 18.
    # [0, 1]: QPU 1 ends at 40 - 22 - 10 = 8 over.  [2, 2]: 120 - 22 - 10 = 88 over.
    assert p.load_excess(x).tolist() == pytest.approx([0.0, 18.0, 8.0, 88.0])
    assert three_qpus_with_history(balance=None).load_excess(x).tolist() == [0, 0, 0, 0]
    # The objectives do not change with balancing: it constrains, it does not score.
    assert np.allclose(p.evaluate(x), three_qpus_with_history(None).evaluate(x))


def test_balance_and_load_are_validated() -> None:
    with pytest.raises(SchedulingError, match="load must hold 3"):
        SchedulingProblem([0, 0, 0], [5, 5, 5], [2], [[1, 1, 1]], [[1, 1, 1]], load=[1, 2])
    with pytest.raises(SchedulingError, match="balance is a tolerance"):
        SchedulingProblem([0], [5], [2], [[1]], [[1]], balance=-0.1)


def favourite_qpu_cycle(balance: float | None, n: int = 60, q: int = 4) -> SchedulingProblem:
    # QPU 0 is everyone's best; runtimes equal; the fleet idle: without balancing, the jobs pile
    # on QPU 0 as far as the JCT objective lets them.
    rng = np.random.default_rng(5)
    fidelity = np.clip(np.linspace(0.95, 0.80, q)[None, :] + rng.normal(0, 0.02, (n, q)), 0, 1)
    return SchedulingProblem(
        wait=np.zeros(q),
        qpu_qubits=np.full(q, 27),
        job_qubits=rng.integers(2, 20, n),
        runtime=rng.uniform(2.0, 6.0, (n, 1)) * np.ones((1, q)),
        fidelity=fidelity,
        load=np.array([300.0, 0.0, 0.0, 0.0]),  # QPU 0 was busier this hour
        balance=balance,
    )


def qpu_loads(p: SchedulingProblem, assignment: np.ndarray) -> np.ndarray:
    work = p.runtime[np.arange(p.num_jobs), assignment]
    return p.load + np.bincount(assignment, weights=work, minlength=p.num_qpus)


@pytest.mark.slow
@pytest.mark.parametrize("preference", ["jct", "balanced", "fidelity"])
def test_balanced_schedules_even_out_the_window_load(preference: str) -> None:
    free = nsga2_schedule(favourite_qpu_cycle(None), preference="fidelity", seed=1)
    p = favourite_qpu_cycle(0.05)
    result = nsga2_schedule(p, preference=preference, seed=1)
    # Every schedule on the front keeps the balance; the unbalanced search's choice did not.
    assert (p.load_excess(result.front_assignments) == 0).all()
    assert p.load_excess(free.assignment[None, :])[0] > 0
    # QPU 0 came in 300 s ahead, above the even level: it takes nothing of this cycle; the
    # others end within 5% of the level, give or take one job (at most 6 s).
    assert (result.assignment == 0).sum() == 0
    loads = qpu_loads(p, result.assignment)[1:]
    level = p.even_level(np.array([loads.sum()]))[0]
    assert level * 0.95 - 6.0 <= loads.min() and loads.max() <= level * 1.05 + 6.0


def test_balanced_fidelity_lp_seed_is_balanced_and_beats_the_greedy_one() -> None:
    from kernel_server.scheduler.nsga2 import balanced_assignment, balanced_fidelity_lp

    p = favourite_qpu_cycle(0.05)
    lp = balanced_fidelity_lp(p)
    greedy = balanced_assignment(p)
    assert lp is not None
    assert p.load_excess(lp[None, :])[0] <= 6.0  # rounding moves at most a job or so
    assert p.evaluate(lp)[1] <= p.evaluate(greedy)[1] + 1e-9
    # Only a 5-qubit QPU has room and the jobs are wider: no balanced schedule, no LP seed; the
    # scheduler still places every job, as evenly as it can.
    stuck = favourite_qpu_cycle(0.05)
    stuck = SchedulingProblem(
        stuck.wait, [27, 27, 27, 5], np.maximum(stuck.job_qubits, 6), stuck.runtime,
        stuck.fidelity, load=[1000.0, 1000.0, 1000.0, 0.0], balance=0.05,
    )  # fmt: skip
    assert balanced_fidelity_lp(stuck) is None
    placed = nsga2_schedule(stuck, seed=1).assignment
    assert len(placed) == stuck.num_jobs and (placed != 3).all()


def test_a_lone_job_on_an_idle_fleet_still_gets_its_best_qpu_when_balancing() -> None:
    p = SchedulingProblem(
        wait=[0.0, 0.0, 0.0],
        qpu_qubits=[27, 27, 27],
        job_qubits=[5],
        runtime=[[4.0, 4.0, 4.0]],
        fidelity=[[0.8, 0.9, 0.85]],
        balance=0.05,
    )
    assert nsga2_schedule(p, preference="fidelity").assignment.tolist() == [1]
