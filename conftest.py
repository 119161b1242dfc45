"""Test session setup: an isolated Qonductor home and a small simulated fleet.

Set at import time, before any test (or nbval's kernel) starts, so every orchestrator started in
this session - by the tests or by a notebook kernel - lives in a temporary folder and is stopped at
the end.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_home = tempfile.mkdtemp(prefix="qonductor-test-")
os.environ.setdefault("QONDUCTOR_HOME", _home)
os.environ.setdefault("QONDUCTOR_FLEET", "small")
# The noisy-simulation rates are measured once (about 5 s) into one file for the whole session:
# tests that make homes of their own, and the orchestrators they start, read it from there.
_rates_dir = tempfile.mkdtemp(prefix="qonductor-test-rates-")
os.environ.setdefault("QONDUCTOR_COST_MODEL", os.path.join(_rates_dir, "cost_model.json"))

# Kernels started here (nbval, nbclient) show no live job-status widget: a cell shows it only
# when it is still running after half a second, so whether its output is there would depend on
# the machine's speed, and nbval compares outputs. The widget has tests of its own.
# A folder of its own, left in place: this process's shells write their history there at exit,
# after the home above is gone.
_ipython_dir = tempfile.mkdtemp(prefix="qonductor-test-ipython-")
os.makedirs(os.path.join(_ipython_dir, "profile_default"), exist_ok=True)
for _name in ("ipython_config.py", "ipython_kernel_config.py"):
    with open(os.path.join(_ipython_dir, "profile_default", _name), "w") as _fh:
        _fh.write("c.Qonductor.live_status = False\n")
os.environ.setdefault("IPYTHONDIR", _ipython_dir)


def pytest_sessionfinish(session, exitstatus):
    """Stop the orchestrator this session started (a hook, so nbval-only runs stop it too)."""
    from qonductor_jupyter.client import stop_server

    stop_server()
    if os.environ.get("QONDUCTOR_HOME") == _home and not os.environ.get("QONDUCTOR_KEEP_HOME"):
        shutil.rmtree(_home, ignore_errors=True)
    shutil.rmtree(_rates_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def orchestrator():
    """A live orchestrator (detached process) shared by the end-to-end tests."""
    from qonductor_jupyter.client import get_client, server_status, start_server

    start_server()
    get_client()
    status = server_status()
    assert status is not None
    return status


@pytest.fixture
def shell(orchestrator):
    """An IPython shell with the extension loaded (the real magics, no frontend)."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "qonductor_jupyter")
    for name in list(ip.user_ns):
        if not name.startswith("_") and name not in ip.user_ns_hidden:
            del ip.user_ns[name]
    return ip


# What makes a test end-to-end: a fixture that starts the real orchestrator, a shell with the
# magics or a Jupyter server, or a file whose tests start those (or worker processes) themselves.
_E2E_FIXTURES = {"orchestrator", "shell", "orchestrator_in", "jp_fetch", "jp_serverapp"}
_E2E_FILES = {
    "test_adversary.py",
    "test_crash_safety.py",
    "test_dask_executor.py",
    "test_isolation.py",
    "test_kernel_cells.py",
    "test_lifeline.py",
    "test_limits.py",
    "test_load.py",
    "test_mixed_fleet.py",
    "test_restart.py",
    "test_rest_api.py",
}
_KINDS = {"unit", "e2e", "browser"}


def pytest_collection_modifyitems(config, items):
    """Mark every test unit, e2e or slow (browser tests mark themselves): end-to-end and slow
    tests are not unit tests, so ``pytest -m unit`` stays a loop of seconds."""
    for item in items:
        if _KINDS & {m.name for m in item.iter_markers()}:
            continue
        path = Path(str(item.fspath))
        e2e = (
            path.suffix == ".ipynb"
            or path.name in _E2E_FILES
            or bool(_E2E_FIXTURES & set(getattr(item, "fixturenames", ())))
        )
        if e2e:
            item.add_marker(pytest.mark.e2e)
        elif item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.unit)
