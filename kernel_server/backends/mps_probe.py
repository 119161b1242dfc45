"""The bond dimension a circuit's matrix product state really reaches, measured by a capped run.

``work.mps_bonds`` bounds each bond by 2^(two-qubit gates across the cut). After routing on a
heavy-hex Falcon that bound is loose by orders of magnitude: a 24-qubit W state is bounded by
4096 and reaches 5; a QAOA ring of 24 qubits (25 active after routing) is bounded by 2048 and
reaches 64. Priced by the bound, MPS looked 1000x dearer than it is and the plan chose
statevector trajectories of 25-26 qubits (100 s or more, or nothing within the memory budget).

:func:`measured_bond` runs the circuit's gates once, without noise, with Aer's MPS method, its
bond dimension capped and its log on, and returns the largest bond the log shows. A run that
reaches the cap says only "at least the cap": the bound stays. The cap bounds the probe's cost:
0.01-0.15 s for the circuits above, 2.7 s for a dense 16-qubit random circuit of depth 10 that
reaches it (at a cap of 512 a 20-qubit one took 289 s: the caller probes only wide circuits
whose other methods are dear). Results are kept per circuit content. Noisy trajectories branch
off the same gates; an error can raise a bond, so the caller prices them at twice what the
probe saw (and the guard stops a run that overruns all the same).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from qiskit import QuantumCircuit
from qiskit_aer import AerSimulator

from kernel_server.backends.cost_model import circuit_digest
from kernel_server.core.cache import LRU

__all__ = ["NOISY_OVER_IDEAL", "PROBE_CAP", "Probe", "measured_bond"]

# Bonds the probe may reach before it stops telling (cap^3 bounds its work per gate).
PROBE_CAP = 128
_BONDS = re.compile(r"BD=\[([0-9 ]*)\]")
# A noisy trajectory of the same gates took 2.7-9x the ideal probe's time (fake_kolkata: W state
# 24, QAOA ring 24, EfficientSU2 24): its errors are operations too, relaxation's Kraus ones dear.
NOISY_OVER_IDEAL = 8.0


@dataclass(frozen=True)
class Probe:
    """What the capped ideal run saw: its widest bond (None: it reached the cap) and its time."""

    bond: int | None
    seconds: float


_measured: LRU[Probe] = LRU(256)
# Aer (0.17-0.18) never clears its MPS log: each run's log holds every earlier logged run of the
# process before its own entries. What this module has already read is cut off by prefix.
_log_read = [""]


def measured_bond(circuit: QuantumCircuit) -> Probe:
    """Largest bond dimension the ideal MPS of ``circuit``'s gates reaches (None when it reaches
    ``PROBE_CAP``, or the circuit has operations the probe cannot run), and the run's time."""
    key = circuit_digest(circuit)
    known = _measured.get(key)
    if known is None:
        start = time.perf_counter()
        bond = _probe(circuit)
        known = _measured.put(key, Probe(bond, time.perf_counter() - start))
    return known


def _probe(circuit: QuantumCircuit) -> int | None:
    body = QuantumCircuit(circuit.num_qubits)
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    for instruction in circuit.data:
        operation = instruction.operation
        if operation.name in ("measure", "barrier", "delay"):
            continue
        if operation.name == "reset" or not hasattr(operation, "to_matrix"):
            return None  # mid-circuit resets, control flow: not a plain gate sequence
        body.append(operation, [index[q] for q in instruction.qubits])
    body.save_matrix_product_state()  # something to keep: Aer drops a circuit that saves nothing
    simulator = AerSimulator(
        method="matrix_product_state",
        matrix_product_state_max_bond_dimension=PROBE_CAP,
        mps_log_data=True,
    )
    result = simulator.run(body, shots=1).result()
    log = str(result.results[0].metadata.get("MPS_log_data", ""))
    own = log[len(_log_read[0]) :] if log.startswith(_log_read[0]) else log
    _log_read[0] = log.rstrip("} ")
    bonds = [int(b) for group in _BONDS.findall(own) for b in group.split()]
    widest = max(bonds, default=1)
    return None if widest >= PROBE_CAP else widest
