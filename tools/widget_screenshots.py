"""Take real screenshots of the three Qonductor ipywidgets rendered in JupyterLab 4.

What it does:
  1. creates a temporary directory, with ``QONDUCTOR_HOME=<tmp>/home`` and
     ``QONDUCTOR_FLEET=small`` (3 small simulated QPUs) for everything it starts;
  2. writes a notebook there that loads the extension and runs a ``--no-wait`` workflow
     (JobStatusWidget), a ``--plan ask`` workflow (PlanSelectionWidget) and
     ``%qonductor fleet`` (FleetOverview);
  3. starts ``jupyter lab`` on a free local port with a random token;
  4. opens the notebook in headless Chromium (Playwright, Debian's ``/usr/bin/chromium``),
     runs all cells, waits for each widget to render and saves an element screenshot of each
     cell's output area;
  5. shuts down the browser, JupyterLab and the Qonductor orchestrator, even on error.

Requirements: ``pip install playwright`` and a Chromium at ``/usr/bin/chromium``
(``apt-get install chromium``); no ``playwright install`` needed.

Run it from the repository root:

    python tools/widget_screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium]

Writes ``job_status_widget.png``, ``plan_selection_widget.png`` and ``fleet_overview.png``
into the output directory. Takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

NOTEBOOK = "widgets.ipynb"
JOB_CELL = """%%qonductor --no-wait -o job --seed 1
import time
time.sleep(8)
from qiskit import QuantumCircuit
q = QuantumCircuit(2); q.h(0); q.cx(0, 1); q.measure_all()
c = sample(q, shots=500)"""
PLAN_CELL = """%%qonductor --plan ask -o choice --seed 2
from qiskit import QuantumCircuit
bell = QuantumCircuit(2); bell.h(0); bell.cx(0, 1); bell.measure_all()
counts = sample(bell, shots=1000)"""
FLEET_CELL = "%qonductor fleet"
CELLS = ["%load_ext qonductor_jupyter", JOB_CELL, PLAN_CELL, FLEET_CELL]
JOB, PLAN, FLEET = 1, 2, 3  # cell indices

LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path) -> None:
    cells = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": f"cell{i}",
            "metadata": {},
            "outputs": [],
            "source": src,
        }
        for i, src in enumerate(CELLS)
    ]
    nb = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))


def wait_for_server(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("jupyter lab did not answer in time")


KERNEL_STATUS_JS = """() => {
  const app = window.jupyterapp;
  if (!app) return null;
  const w = app.shell.currentWidget;
  const ctx = w && w.sessionContext;
  const k = ctx && ctx.session && ctx.session.kernel;
  return k ? k.status : null;
}"""


def wait_kernel_idle(page, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if page.evaluate(KERNEL_STATUS_JS) == "idle":
            return
        time.sleep(0.5)
    raise TimeoutError("the kernel did not become idle")


def cell_output(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-Cell-outputArea")


def widget_output(page, index: int):
    """The output of cell `index` that holds a widget (not its text lines or prompt)."""
    outputs = cell_output(page, index).locator(".jp-OutputArea-output")
    return outputs.filter(has=page.locator(".widget-vbox")).first


def wait_text(locator, predicate, timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = locator.inner_text(timeout=1000)
        except Exception:
            text = ""
        if predicate(text):
            return text
        time.sleep(0.5)
    raise TimeoutError(f"{what}: timed out; output text was {text!r}")


def shoot(locator, path: Path) -> None:
    locator.scroll_into_view_if_needed()
    time.sleep(0.3)
    locator.screenshot(path=str(path))
    log(f"saved {path}")


def take_screenshots(base: str, out: Path, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.goto(base, wait_until="domcontentloaded", timeout=60000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60000)
            # Room for the notebook (no side panels) and no notification toasts over it.
            page.add_style_tag(content=".Toastify { display: none !important; }")
            page.evaluate(
                "() => { window.jupyterapp.shell.collapseLeft(); "
                "window.jupyterapp.shell.collapseRight(); }"
            )
            wait_kernel_idle(page)
            log("kernel idle; running all cells")
            # Not awaited: execute() resolves only once every cell has run.
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

            # Job status: prefer a moment mid-run where the rows show different states (the
            # classical step done, the quantum one queued or running); else its final form.
            job = cell_output(page, JOB)
            job.locator(".widget-gridbox").first.wait_for(timeout=120000)
            mid = ("estimating", "queued", "running", "post-processing")
            deadline, last, caught = time.monotonic() + 120, None, False
            while time.monotonic() < deadline:
                rows = job.locator(".widget-gridbox").first.inner_text()
                if rows != last:
                    log("job rows: " + " | ".join(rows.split()))
                    last = rows
                states = [x for x in rows.split() if x in mid + ("done", "pending")]
                if "done" in states and any(x in mid for x in states):
                    caught = True
                    break
                if ": done" in job.inner_text() or ": failed" in job.inner_text():
                    break
                time.sleep(0.2)
            log("caught a mid-run moment" if caught else "showing the finished workflow")
            time.sleep(0.3)
            shoot(widget_output(page, JOB), out / "job_status_widget.png")

            plan = cell_output(page, PLAN)
            plan.locator(".widget-button", has_text="Run with this plan").first.wait_for(
                timeout=90000
            )
            plan.locator("svg").first.wait_for(timeout=30000)
            time.sleep(1.0)
            shoot(widget_output(page, PLAN), out / "plan_selection_widget.png")

            fleet = cell_output(page, FLEET)
            fleet.locator("table").first.wait_for(timeout=60000)
            time.sleep(0.5)
            shoot(widget_output(page, FLEET), out / "fleet_overview.png")
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/screenshots", help="output directory for the PNGs")
    ap.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium executable")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="qonductor-shots-") as tmp:
        tmpdir = Path(tmp)
        env = dict(os.environ)
        env["QONDUCTOR_HOME"] = str(tmpdir / "home")
        env["QONDUCTOR_FLEET"] = "small"
        env["JUPYTER_RUNTIME_DIR"] = str(tmpdir / "runtime")
        (tmpdir / "home").mkdir()
        write_notebook(tmpdir / NOTEBOOK)

        port, token = free_port(), secrets.token_hex(16)
        cmd = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
            f"--port={port}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmpdir}", "--LabApp.expose_app_in_browser=True",
        ]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # e.g. in a container
        lab_log = open(tmpdir / "jupyterlab.log", "w")
        log(f"starting jupyter lab on port {port}")
        lab = subprocess.Popen(cmd, env=env, cwd=tmpdir, stdout=lab_log, stderr=subprocess.STDOUT)
        try:
            wait_for_server(f"http://127.0.0.1:{port}/api/status?token={token}", lab)
            log("jupyter lab is up")
            url = f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}"
            take_screenshots(url, out, args.chromium)
        except BaseException:
            lab_log.flush()
            tail = (tmpdir / "jupyterlab.log").read_text()[-3000:]
            print(f"--- jupyter lab log (tail) ---\n{tail}", file=sys.stderr)
            raise
        finally:
            lab.terminate()
            try:
                lab.wait(timeout=20)
            except subprocess.TimeoutExpired:
                lab.kill()
                lab.wait()
            lab_log.close()
            # The orchestrator outlives the kernel; stop it with the same QONDUCTOR_HOME.
            stop = "from qonductor_jupyter.client import stop_server; stop_server()"
            subprocess.run([sys.executable, "-c", stop], env=env, timeout=30, check=False)
            log("stopped jupyter lab and the orchestrator")
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
