"""What goes to the orchestrator with a workflow, made from the notebook's Python objects.

A cell's inputs: the values of the names it reads that the notebook has, checked (no kernel-only
names, no circuit wider than every QPU) and pickled. An image given as Python objects (a list of
step functions and circuits): the cell source that calls them, and the objects themselves pickled.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle

from kernel_server.core.status import DeviceStatus

from .errors import InputError, QonductorError
from .splitter import WorkflowGraph

# Names that only make sense inside the IPython process; shipping them would drag the shell along.
KERNEL_ONLY_NAMES = frozenset({"get_ipython", "exit", "quit", "In", "Out", "_ih", "_oh", "_dh"})


def capture_inputs(graph: WorkflowGraph, namespace: dict[str, object]) -> dict[str, object]:
    """The values of the cell's free names that the notebook has.

    A name the notebook lacks is left out, not refused: the splitter's reads are conservative (a
    name the cell may assign before reading it counts as read), and where the cell really reads
    an unassigned name, its step raises NameError at that line, as Python would.
    """
    kernel_only = sorted(n for n in graph.inputs if n in KERNEL_ONLY_NAMES)
    if kernel_only:
        raise InputError(
            f"{', '.join(kernel_only)} only exist in the notebook kernel and cannot "
            "be used inside a %%qonductor cell (IPython magics included)"
        )
    return {n: namespace[n] for n in graph.inputs if n in namespace}


def pickle_inputs(inputs: Mapping[str, object]) -> dict[str, bytes]:
    """The inputs pickled by name; an InputError lists every one that cannot be."""
    from kernel_server.core.cell_functions import mark_origin

    if "qiskit" in sys.modules:  # circuits among the inputs: switch default cases survive
        from kernel_server.wire.circuits import register_reducers

        register_reducers()
    blobs: dict[str, bytes] = {}
    problems = []
    for name, value in inputs.items():
        mark_origin(value)  # a notebook function keeps its cell's source where it runs
        try:
            blobs[name] = cloudpickle.dumps(value)
        except Exception as exc:  # pickling raises many exception types
            problems.append(f"  {name} ({type(value).__name__}): {exc}")
    if problems:
        raise InputError(
            "these inputs cannot be sent to the orchestrator:\n"
            + "\n".join(problems)
            + "\nCreate them inside the cell, or pass something picklable."
        )
    return blobs


def check_circuit_widths(
    values: dict[str, object], devices: Callable[[], list[DeviceStatus]]
) -> None:
    """Refuse input circuits wider than every QPU before anything is queued."""
    widths = {
        n: v.num_qubits
        for n, v in values.items()
        if type(v).__name__ == "QuantumCircuit" and hasattr(v, "num_qubits")
    }
    if not widths:
        return
    largest = max((d.num_qubits for d in devices()), default=0)
    too_wide = {n: w for n, w in widths.items() if w > largest}
    if too_wide:
        listing = ", ".join(f"{n} has {w} qubits" for n, w in too_wide.items())
        raise InputError(
            f"circuit too wide for every QPU: {listing}; the largest QPU in the "
            f"fleet has {largest} qubits. Reduce the width (or cut the circuit)."
        )


def function_list_source(steps: list[Any]) -> tuple[str, dict[str, bytes], list[str]]:
    """Turn ``[pre_process, circuit, post_process]`` into cell source plus bound objects.

    Each callable receives the previous step's value; a circuit (or the word "sample" after a
    callable returning one) is sampled. The first callable's required parameters become the
    workflow's inputs.
    """
    from qiskit import QuantumCircuit

    lines: list[str] = []
    bound: dict[str, bytes] = {}
    required: list[str] = []
    have_value = False
    for i, step in enumerate(steps):
        name = f"_qstep_{i}"
        if isinstance(step, QuantumCircuit):
            bound[name] = cloudpickle.dumps(step)
            lines.append(f"result = sample({name})")
        elif step == "sample" or getattr(step, "__name__", None) == "sample":
            if not have_value:
                raise QonductorError("'sample' needs a previous step that returns a circuit")
            lines.append("result = sample(result)")
        elif callable(step):
            bound[name] = cloudpickle.dumps(step)
            if have_value:
                lines.append(f"result = {name}(result)")
            else:
                params = [
                    p.name
                    for p in inspect.signature(step).parameters.values()
                    if p.default is inspect.Parameter.empty
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                ]
                args = ", ".join(f"{p}={p}" for p in params)
                lines.append(f"result = {name}({args})")
                required = params
        else:
            raise QonductorError(
                f"step {i} is a {type(step).__name__}; a workflow step must be "
                "a callable, a QuantumCircuit or 'sample'"
            )
        have_value = True
    return "\n".join(lines) + "\n", bound, required
