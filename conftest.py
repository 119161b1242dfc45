"""Test session setup: an isolated Qonductor home and a small simulated fleet.

Set at import time, before any test (or nbval's kernel) starts, so every orchestrator started in
this session - by the tests or by a notebook kernel - lives in a temporary folder and is stopped at
the end.
"""

import os
import shutil
import tempfile

import pytest

_home = tempfile.mkdtemp(prefix="qonductor-test-")
os.environ.setdefault("QONDUCTOR_HOME", _home)
os.environ.setdefault("QONDUCTOR_FLEET", "small")

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
