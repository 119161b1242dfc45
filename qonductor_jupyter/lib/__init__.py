"""Building blocks for ``%%qonductor`` cells, so workflows need no hand-written circuits.

* :mod:`qonductor_jupyter.lib.quantum`: circuits and hybrid algorithms (GHZ, QFT, QAOA with
  max-cut helpers, VQE).
* :mod:`qonductor_jupyter.lib.classical`: error mitigation applied explicitly in a cell (ZNE, DD,
  REM), wrapping the orchestrator's own techniques.

Nothing is re-exported here: import the submodule you need
(``from qonductor_jupyter.lib.quantum import GHZ``), so that importing this package stays free.
"""
