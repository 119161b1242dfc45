"""--plan ask: the plan-selection widget driven headlessly, and %qonductor choose."""

from __future__ import annotations

import time

import pytest
from helpers import wait_for

from kernel_server.core.status import Plan
from qonductor_jupyter import api
from qonductor_jupyter.errors import QonductorError
from qonductor_jupyter.plan_widget import PlanSelectionWidget, ranked, scatter_svg

CELL = (
    "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.h(0)\nq.cx(0, 1)\n"
    "q.measure_all()\nc = sample(q, shots=300)\n"
)


def test_widget_shows_plans_reranks_and_runs_the_clicked_plan(orchestrator):
    wid, _ = api.submit_cell(CELL, {}, plan="ask", seed=4)
    widget = PlanSelectionWidget(wid)
    try:
        wait_for(lambda: widget.steps)  # plans arrive by event, no polling here
        (step,) = widget.steps.values()
        assert api.workflow_status(wid) == "running"  # nothing runs before a choice
        assert "<svg" in step.scatter.value and "circle" in step.scatter.value
        by_preference = {}
        for preference in ("fidelity", "jct"):
            step.preference.value = preference  # re-ranks live
            by_preference[preference] = step.recommended
            assert step.order[0] == step.recommended
        fid, fast = (step.plans[by_preference[k]] for k in ("fidelity", "jct"))
        assert fid.fidelity >= fast.fidelity
        assert fast.seconds <= fid.seconds
        pick = next(i for i, p in enumerate(step.plans) if p.mitigation == "rem")
        step.buttons[pick].click()
        assert widget.chosen == {step.step_id: pick} and step.buttons[pick].disabled
        values = api.workflow_results(wid, timeout=120)
        assert sum(values["c"].values()) == 300
        (job,) = [j for s in api.workflow_info(wid).steps for j in s.qpu_jobs]
        assert job.plans[pick].chosen and job.method == "mitigated:rem"
        # A second click is refused by the orchestrator and said in the widget.
        widget._on_choose(step.step_id, 0)
        assert "could not choose plan 0" in widget.status.value
    finally:
        widget.close()


def test_choose_line_magic_and_bad_choices(shell, capsys):
    shell.run_cell(f"%%qonductor --plan ask -o job --seed 5\n{CELL}")
    job = shell.user_ns["job"]
    assert "%qonductor choose" in capsys.readouterr().out  # plain IPython: no widget
    wait_for(
        lambda: any(
            j.awaiting_choice and j.plans
            for s in api.workflow_info(job.workflow_id).steps
            for j in s.qpu_jobs
        )
    )
    with pytest.raises(QonductorError, match="choose a plan number from 0 to"):
        shell.run_line_magic("qonductor", f"choose {job.workflow_id} 1 99")
    with pytest.raises(QonductorError, match="has no step 7 waiting"):
        shell.run_line_magic("qonductor", f"choose {job.workflow_id} 7 0")
    shell.run_line_magic("qonductor", f"choose {job.workflow_id} 1 off")
    values = job.result(timeout=120)
    assert sum(values["c"].values()) == 300
    deadline = time.monotonic() + 10
    while "c" not in shell.user_ns and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(shell.user_ns["c"].values()) == 300  # landed in the namespace by itself


def test_cancelling_a_workflow_that_waits_for_a_plan(orchestrator):
    wid, _ = api.submit_cell(CELL, {}, plan="ask")
    wait_for(lambda: api.workflow_info(wid).steps[1].qpu_jobs)
    api.cancel(wid)
    wait_for(lambda: api.workflow_status(wid) == "cancelled", 30)


def test_ranking_and_scatter_are_pure():
    def plan(
        rank: int,
        fidelity: float,
        q_s: float,
        c_s: float,
        backend: str,
        stack: str,
        accelerator: str,
        cost: float,
    ) -> Plan:
        return Plan(
            rank=rank,
            backend=backend,
            mitigation=stack,
            accelerator=accelerator,
            shots=1000,
            fidelity=fidelity,
            numerical_fidelity=fidelity,
            quantum_seconds=q_s,
            classical_seconds=c_s,
            cost=cost,
            num_circuits=1,
            total_shots=1000,
        )

    plans = [
        plan(0, 0.99, 9.0, 1.0, "A", "zne", "standard-vm", 5.0),
        plan(0, 0.90, 1.0, 0.0, "A", "none", "none", 1.0),
        plan(1, 0.89, 2.0, 0.0, "B", "none", "none", 2.0),
    ]  # fmt: skip
    assert ranked(plans, "fidelity") == ([0, 1, 2], 0)
    assert ranked(plans, "jct") == ([1, 0, 2], 1)
    svg = scatter_svg(plans, highlight=1)
    assert svg.count("<circle") == 3 and "polyline" in svg and "#d62728" in svg
