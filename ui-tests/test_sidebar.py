"""The Qonductor sidebar in a real JupyterLab, driven by Chromium through Playwright."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

SIDEBAR = "#qonductor-sidebar"
# The notebook on show: a restored workspace may keep other notebooks open in hidden tabs.
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
SIDEBAR_TAB = f'.jp-SideBar .lm-TabBar-tab[data-id="{SIDEBAR[1:]}"]'
QUANTUM_CELL = (
    "%%qonductor\n"
    "from qiskit import QuantumCircuit\n"
    "bell = QuantumCircuit(2)\n"
    "bell.h(0)\n"
    "bell.cx(0, 1)\n"
    "bell.measure_all()\n"
    "counts = sample(bell, shots=200)\n"
)
SLOW_CELL = (
    "%%qonductor --no-wait\n"
    "import time\n"
    "time.sleep(120)\n"
    "from qiskit import QuantumCircuit\n"
    "late = QuantumCircuit(1)\n"
    "late.measure_all()\n"
    "late_counts = sample(late, shots=10)\n"
)
KERNEL_READY = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected';
}"""
WAIT_MS = 180_000


def _notebook(lab, name: str) -> None:
    cell = {"cell_type": "code", "metadata": {}, "source": "", "outputs": []}
    cell["execution_count"] = None
    nb = {
        "cells": [cell],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (lab.root / name).write_text(json.dumps(nb))


def _open_notebook(lab, page, name: str) -> None:
    _notebook(lab, name)
    # ``reset`` starts from an empty workspace: only this notebook is open.
    page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=WAIT_MS)
    # Keystrokes sent before the kernel is idle and connected are dropped.
    page.wait_for_function(KERNEL_READY, timeout=WAIT_MS)


def _run_in_cell(page, index: int, source: str) -> None:
    cells = page.locator(f"{NOTEBOOK} .jp-Cell")
    cells.nth(index).locator(".cm-content").click()
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")


def _open_sidebar(page) -> None:
    tab = page.locator(SIDEBAR_TAB)
    # Lab restores the last layout, so the panel may already be open; a click would close it.
    if tab.get_attribute("aria-selected") != "true":
        tab.click()
    page.wait_for_selector(f"{SIDEBAR} .jp-Qonductor-qpu", timeout=WAIT_MS)


def _workflow_ids(page) -> list[str]:
    return page.eval_on_selector_all(
        f"{SIDEBAR} .jp-Qonductor-workflow", "rows => rows.map(r => r.dataset.workflowId)"
    )


def _widen_sidebar(page, width: int) -> None:
    """Drag the handle between the left area and the main area, as a user would."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    if box is None:
        return
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(width, y, steps=5)
    page.mouse.up()


def _screenshot(target, name: str) -> None:
    """Save a picture for the README when QONDUCTOR_SCREENSHOTS names a folder."""
    folder = os.environ.get("QONDUCTOR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        target.screenshot(path=str(Path(folder) / name))


def test_sidebar_shows_the_fleet_and_a_cell_running_to_done(lab, page):
    _open_notebook(lab, page, "bell.ipynb")
    # Opening Lab starts no orchestrator; the status bar says so.
    page.locator(".jp-Qonductor-status").get_by_text("not running").wait_for(timeout=WAIT_MS)
    _open_sidebar(page)
    shown = page.eval_on_selector_all(
        f"{SIDEBAR} .jp-Qonductor-qpu", "rows => rows.map(r => r.dataset.qpu)"
    )
    fleet = lab.api("qonductor/api/fleet")["devices"]
    assert sorted(shown) == sorted(d["name"] for d in fleet) and len(shown) >= 2
    before = set(_workflow_ids(page))

    _run_in_cell(page, 0, "%load_ext qonductor_jupyter")
    _run_in_cell(page, 1, QUANTUM_CELL)
    new_row = f"{SIDEBAR} .jp-Qonductor-workflow"
    page.wait_for_function(
        """([selector, before]) => [...document.querySelectorAll(selector)]
             .some(r => !before.includes(r.dataset.workflowId))""",
        arg=[new_row, sorted(before)],
        timeout=WAIT_MS,
    )
    (workflow_id,) = set(_workflow_ids(page)) - before
    row = page.locator(f'{SIDEBAR} .jp-Qonductor-workflow[data-workflow-id="{workflow_id}"]')
    row.and_(page.locator('[data-state="done"]')).wait_for(timeout=WAIT_MS)
    listed = {w["id"]: w for w in lab.api("qonductor/api/workflows")["workflows"]}
    assert listed[workflow_id]["state"] == "done"
    # The row names the QPU the job ran on.
    assert listed[workflow_id]["qpus"][0] in row.inner_text()
    # The cell itself finished and its variable came back into the kernel.
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(1).locator(".jp-OutputArea-output").first.wait_for(
        timeout=WAIT_MS
    )
    _run_in_cell(page, 2, "print('shots', sum(counts.values()))")
    page.get_by_text("shots 200").wait_for(timeout=WAIT_MS)
    _widen_sidebar(page, 560)
    _screenshot(page, "lab-sidebar.png")
    _screenshot(page.locator(SIDEBAR), "sidebar.png")


def test_cancel_from_the_sidebar_and_the_status_bar_count(lab, page):
    _open_notebook(lab, page, "slow.ipynb")
    _open_sidebar(page)
    before = set(_workflow_ids(page))
    _run_in_cell(page, 0, "%load_ext qonductor_jupyter")
    _run_in_cell(page, 1, SLOW_CELL)
    running = f'{SIDEBAR} .jp-Qonductor-workflow[data-state="running"]'
    page.wait_for_selector(running, timeout=WAIT_MS)
    (workflow_id,) = set(_workflow_ids(page)) - before
    page.locator(".jp-Qonductor-status").get_by_text("1 running").wait_for(timeout=WAIT_MS)
    _widen_sidebar(page, 560)
    _screenshot(page, "lab-sidebar-running.png")
    row = page.locator(f'{SIDEBAR} .jp-Qonductor-workflow[data-workflow-id="{workflow_id}"]')
    row.locator(".jp-Qonductor-cancel").click()
    row.and_(page.locator('[data-state="cancelled"]')).wait_for(timeout=60_000)
    assert row.locator(".jp-Qonductor-cancel").count() == 0
    assert lab.api(f"qonductor/api/workflows/{workflow_id}")["state"] == "cancelled"
