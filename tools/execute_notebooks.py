"""Run the example notebooks headless (nbclient) and save their outputs, as nbval will check them.

The environment is the tests' (conftest.py): a fresh Qonductor home, the small fleet, and kernels
without the live job-status widget. Usage: ``python tools/execute_notebooks.py [NAME ...]``
(default: every notebook in example_notebooks/). The orchestrator it starts is stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(names: list[str]) -> int:
    home = tempfile.mkdtemp(prefix="qonductor-notebooks-")
    ipython = Path(home) / "ipython" / "profile_default"
    ipython.mkdir(parents=True)
    for name in ("ipython_config.py", "ipython_kernel_config.py"):
        (ipython / name).write_text("c.Qonductor.live_status = False\n")
    os.environ.update(QONDUCTOR_HOME=home, QONDUCTOR_FLEET="small", IPYTHONDIR=str(ipython.parent))
    import nbformat
    from nbclient import NotebookClient

    from qonductor_jupyter.client import stop_server

    folder = REPO / "example_notebooks"
    paths = [folder / n for n in names] if names else sorted(folder.glob("*.ipynb"))
    try:
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            NotebookClient(
                nb,
                timeout=600,
                kernel_name="python3",
                resources={"metadata": {"path": str(folder)}},
            ).execute()
            nbformat.write(nb, path)
            print(f"executed {path.name}")
    finally:
        stop_server()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
