"""pytest-jupyter's server fixtures, for the tests in this folder only.

Loaded here rather than as a session-wide plugin because its autouse fixtures create and tear down
a Jupyter server app around every test, which the other 400 tests have no use for.
"""

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403


@pytest.fixture
def jp_server_config():  # noqa: F811
    return {"ServerApp": {"jpserver_extensions": {"qonductor_jupyter": True}}}
