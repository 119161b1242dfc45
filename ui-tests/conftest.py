"""A real ``jupyter lab`` on loopback with a token, a temporary Qonductor home, and Chromium."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("QONDUCTOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
]


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    home: Path

    def api(self, path: str) -> dict:
        request = urllib.request.Request(
            f"{self.url}/{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited; see {log}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"jupyter lab did not answer at {url} within {seconds:.0f} s; see {log}")


@pytest.fixture(scope="session")
def lab():
    base = Path(tempfile.mkdtemp(prefix="qonductor-ui-"))
    root, home = base / "notebooks", base / "home"
    root.mkdir()
    home.mkdir()
    token, port = secrets.token_hex(16), _free_port()
    env = {**os.environ, "QONDUCTOR_HOME": str(home), "QONDUCTOR_FLEET": "small"}
    env["JUPYTER_RUNTIME_DIR"] = str(base / "runtime")
    # Our own settings and workspaces: nothing from the developer's Lab leaks in, and no news
    # prompt covers the page.
    settings = base / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    log = base / "lab.log"
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}",
        # Lab's news and update checks would reach for the internet.
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/api/status?token={token}", proc, log)
        yield Lab(url, token, root, home)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        # The sidebar (or the notebook's kernel) started an orchestrator in our home: stop it.
        subprocess.run(
            [sys.executable, "-m", "qonductor_jupyter.cli", "server", "stop"],
            env=env,
            capture_output=True,
            timeout=60,
        )
        if not os.environ.get("QONDUCTOR_KEEP_HOME"):
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    yield page
    context.close()
