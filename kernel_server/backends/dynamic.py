"""Dynamic circuits (mid-circuit measurement and feed-forward) as the estimators see them.

A circuit with control flow (``if_test``, ``switch``, ``for_loop``, ``while_loop``) has no single
instruction list: which gates run depends on measurement outcomes during the shot. The estimators
count errors, gates and time along one list, so :func:`costliest_path` gives them one: every
control-flow block replaced by its branch with the most error (a ``for_loop`` unrolled), each of
its instructions also waiting for the classical bits the construct reads, so that a critical path
through it starts after the measurement it depends on. That is the worst shot, a pessimistic but
bounded reading: a conditional correction that runs in half the shots is counted in all of them.

A ``while_loop`` body is counted once: how often it repeats is decided at run time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from qiskit import QuantumCircuit
from qiskit.circuit import (
    CircuitInstruction,
    ControlFlowOp,
    ForLoopOp,
    IfElseOp,
    SwitchCaseOp,
    WhileLoopOp,
)

__all__ = ["BranchCost", "costliest_path", "error_cost", "has_control_flow", "gate_cost"]

# (operation, physical qubit indices of the outer circuit) -> the weight the choice of branch uses.
BranchCost = Callable[[Any, tuple[int, ...]], float]

_DIRECTIVES = frozenset({"barrier", "delay"})


def has_control_flow(circuit: QuantumCircuit) -> bool:
    """Whether the circuit holds a control-flow construct (at its top level, where they live)."""
    return any(isinstance(ci.operation, ControlFlowOp) for ci in circuit.data)


def gate_cost(operation: Any, qubits: tuple[int, ...]) -> float:
    """A branch weight without calibration: a multi-qubit gate weighs as ten single-qubit ones
    (their errors differ by 10-30x on IBM devices), directives nothing."""
    if operation.name in _DIRECTIVES:
        return 0.0
    return 10.0 if len(qubits) > 1 else 1.0


def error_cost(target: Any) -> BranchCost:
    """A branch weight from ``target``'s errors: -log(1 - error) of the instruction, so a branch's
    weight is minus the log of its error product; instructions without an error weigh 1e-9 (a
    tie between error-free branches goes to the longer one)."""
    names = set(target.operation_names)

    def cost(operation: Any, qubits: tuple[int, ...]) -> float:
        if operation.name in _DIRECTIVES:
            return 0.0
        props = target[operation.name] if operation.name in names else None
        prop = props.get(qubits) if props else None
        error = None if prop is None else prop.error
        if not error:
            return 1e-9
        return -math.log1p(-error) if error < 1.0 else 50.0

    return cost


def _bodies(operation: ControlFlowOp) -> list[list[QuantumCircuit]]:
    """The alternatives a construct may run, each the blocks one shot executes in order."""
    if isinstance(operation, ForLoopOp):
        indexset, parameter, body = operation.params
        if parameter is None:
            return [[body] * len(indexset)]
        return [[body.assign_parameters({parameter: value}) for value in indexset]]
    if isinstance(operation, IfElseOp):
        true_body, false_body = operation.blocks[0], operation.params[1]
        return [[true_body], [false_body] if false_body is not None else []]
    if isinstance(operation, SwitchCaseOp):
        return [[block] for block in operation.blocks]
    if isinstance(operation, WhileLoopOp):
        return [[operation.blocks[0]]]
    return [[block] for block in operation.blocks]  # a box, or a construct added later: once


def _walk(
    block: QuantumCircuit,
    qubits: Sequence[Any],
    clbits: Sequence[Any],
    waits: tuple[Any, ...],
    cost: BranchCost,
    index: dict[Any, int],
    out: list[CircuitInstruction],
) -> float:
    """Append the costliest path through ``block`` to ``out`` (in the outer circuit's bits);
    return its weight. ``qubits``/``clbits`` are the outer bits of the block's bits, in order."""
    qmap = dict(zip(block.qubits, qubits, strict=True))
    cmap = dict(zip(block.clbits, clbits, strict=True))
    total = 0.0
    for instruction in block.data:
        operation = instruction.operation
        outer_q = [qmap[q] for q in instruction.qubits]
        outer_c = [cmap[c] for c in instruction.clbits]
        if isinstance(operation, ControlFlowOp):
            # Everything inside waits for the bits the construct reads (its condition, mostly).
            inner_waits = waits + tuple(c for c in outer_c if c not in waits)
            best: list[CircuitInstruction] = []
            best_weight = -1.0
            for alternative in _bodies(operation):
                path: list[CircuitInstruction] = []
                weight = sum(
                    _walk(body, outer_q, outer_c, inner_waits, cost, index, path)
                    for body in alternative
                )
                if weight > best_weight:
                    best, best_weight = path, weight
            out.extend(best)
            total += best_weight
            continue
        extra = [c for c in waits if c not in outer_c]
        out.append(CircuitInstruction(operation, outer_q, outer_c + extra))
        total += cost(operation, tuple(index[q] for q in outer_q))
    return total


def costliest_path(circuit: QuantumCircuit, target: Any = None) -> QuantumCircuit:
    """``circuit`` with every control-flow construct replaced by its costliest branch.

    The weight of a branch is its error (``target``'s, :func:`error_cost`) or, without a target,
    its gate count (:func:`gate_cost`). Instructions from inside a construct carry the clbits it
    reads as extra clbits: a view for counting and timing, not a circuit to run. A circuit without
    control flow comes back as it is.
    """
    if not has_control_flow(circuit):
        return circuit
    cost = error_cost(target) if target is not None else gate_cost
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    instructions: list[CircuitInstruction] = []
    _walk(circuit, circuit.qubits, circuit.clbits, (), cost, index, instructions)
    view = circuit.copy_empty_like()
    for instruction in instructions:
        # _append: a gate that waits on clbits fails append's argument checks, on purpose there.
        view._append(instruction)
    return view
