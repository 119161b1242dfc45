"""Broken entries of a device's target, and whether an ISA circuit fits a device as laid out.

Qiskit code transpiles for a backend (``generate_preset_pass_manager(backend=...)``) and maps its
observables onto the result's layout, so an ISA circuit must run on the physical qubits it names:
it is never laid out again. It fits a device when the device has its width, a coupler under each
of its two-qubit gates, and no broken entry there. The kernel checks this against a pinned
backend before anything is queued; the orchestrator checks it against every candidate QPU.
"""

from __future__ import annotations

from typing import Any

# An instruction this bad is a dead coupler or qubit, not a noisy one: the fake backends mark
# broken entries with error 1.0 (FakeSherbrooke ecr(6,5), FakeKingston sx(96), ...).
BROKEN_ERROR = 0.5

_SKIPPED = frozenset({"barrier", "delay"})


def broken_entries(
    target: Any, threshold: float = BROKEN_ERROR
) -> tuple[frozenset[int], frozenset[tuple[str, tuple[int, ...]]]]:
    """Dead qubits (a broken single-qubit gate or measurement) and dead couplers of a target."""
    dead_qubits: set[int] = set()
    dead_couplers: set[tuple[str, tuple[int, ...]]] = set()
    for name in target.operation_names:
        props = target[name]
        if props is None:
            continue
        for qargs, prop in props.items():
            if qargs is None or prop is None or prop.error is None or prop.error < threshold:
                continue
            if len(qargs) == 1:
                dead_qubits.add(qargs[0])
            else:
                dead_couplers.add((name, qargs))
    return frozenset(dead_qubits), frozenset(dead_couplers)


def isa_misfit(circuit: Any, target: Any, name: str) -> str:
    """Why ``circuit`` cannot run on the device ``name`` with this ``target`` as it is laid out
    ("" when it can), in the words Qiskit Runtime uses for its own ISA check."""
    if circuit.num_qubits != target.num_qubits:
        return (
            f"The circuit has {circuit.num_qubits} qubits but the target system {name} "
            f"requires {target.num_qubits} qubits."
        )
    dead_qubits, dead_couplers = broken_entries(target)
    dead_pairs = {frozenset(qargs) for _, qargs in dead_couplers}
    coupled = {frozenset(edge) for edge in target.build_coupling_map().get_edges()}
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    for instruction in circuit.data:
        operation = instruction.operation.name
        if operation in _SKIPPED:
            continue
        qargs = tuple(index[q] for q in instruction.qubits)
        where = f"The instruction {operation} on qubits {qargs}"
        if len(qargs) == 2 and frozenset(qargs) not in coupled:
            return f"{where} is not supported by the target system {name}."
        if dead_qubits.intersection(qargs) or (len(qargs) == 2 and frozenset(qargs) in dead_pairs):
            return f"{where} is broken on {name} (error >= {BROKEN_ERROR})."
    return ""
