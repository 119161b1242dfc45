"""The checks ``sample()`` and ``estimate()`` make of their arguments, in the user's words.

Shared by the kernel (a dry run before anything is sent) and the step workers (the calls
themselves), so both refuse the same things with the same messages.
"""

from __future__ import annotations

import ast
import linecache
import operator
import re
import sys
from typing import Any

# A run's shots when nobody says (``--shots``, ``sample(shots=)``, a config): written once, here.
DEFAULT_SHOTS = 4000
MAX_SHOTS = 1_000_000


def check_shots(shots: Any, what: str = "shots") -> int | None:
    """The one check of a shot count, wherever it comes from (``--shots``, a config, ``sample``,
    a primitive's ``default_shots``): None (the default) or a whole number from 1 to
    ``MAX_SHOTS``; anything else is refused with what was given (0 is not "the default", 2.5 is
    not 2)."""
    if shots is None:
        return None
    try:
        if isinstance(shots, bool):
            raise TypeError
        value = operator.index(shots)  # ints and numpy integers, not floats or strings
    except TypeError:
        raise TypeError(f"{what} must be a positive whole number, got {shots!r}") from None
    if value < 1:
        raise ValueError(f"{what} must be a positive whole number, got {value}")
    if value > MAX_SHOTS:
        raise ValueError(f"{what} must be at most {MAX_SHOTS}, got {value}")
    return value


def require_shots(shots: Any, what: str = "shots") -> int:
    """:func:`check_shots` where there is no default to fall back on: None is refused too."""
    checked = check_shots(shots, what)
    if checked is None:
        raise ValueError(f"{what} must be a positive whole number, got None")
    return checked


# Qiskit's own names for circuits nobody named ("circuit-41-18225"): say the variable instead.
_AUTO_NAME = re.compile(r"circuit-\d+(-\d+)?$")


def _argument_text(depth: int) -> str | None:
    """The source of the first argument of the call being made ``depth`` frames up, as written
    in the user's code (``qc``, ``circuits[2]``); None where it cannot be read."""
    try:
        frame = sys._getframe(depth + 1)
        code = frame.f_code
        positions = list(code.co_positions())[frame.f_lasti // 2]
    except (AttributeError, ValueError, IndexError):  # Python 3.10: no co_positions
        return None
    lineno, end_lineno, col, end_col = positions
    if None in positions:
        return None
    lines = linecache.getlines(code.co_filename)
    if not lines or end_lineno > len(lines):  # type: ignore[operator]
        return None
    text = "".join(lines[lineno - 1 : end_lineno])  # type: ignore[operator]
    offset = end_col + sum(len(line) for line in lines[lineno - 1 : end_lineno - 1])  # type: ignore
    try:
        call = ast.parse(text.encode()[col:offset].decode().strip(), mode="eval").body
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    if isinstance(call, ast.Call) and call.args:
        return ast.unparse(call.args[0])
    return None


def _circuit_label(circuit: Any, argument: str | None, index: int | None) -> str:
    """How the user knows this circuit: the variable they passed, else a name they gave it."""
    if argument is not None:
        return argument if index is None else f"{argument}[{index}]"
    name = getattr(circuit, "name", "")
    if name and not _AUTO_NAME.match(name):
        return f"circuit {name!r}"
    return "the circuit" if index is None else f"circuit {index} of the list"


def check_circuit(
    circuit: Any, need_measurements: bool, label: str, function: str = "sample"
) -> None:
    """Refuse what no QPU can run, naming the circuit as the user knows it (``label``) and the
    function they called: not a circuit (TypeError), unbound parameters, and (where results are
    counts) no measurements (ValueError). The one check every entry point makes."""
    from qiskit import QuantumCircuit

    if not isinstance(circuit, QuantumCircuit):
        raise TypeError(
            f"{function}() takes a QuantumCircuit"
            + (" or a list of them" if function == "sample" else "")
            + f", not {type(circuit).__name__} ({label})"
        )
    if circuit.parameters:
        names = ", ".join(sorted(p.name for p in circuit.parameters)[:5])
        raise ValueError(
            f"{label} has unbound parameters ({names}); bind them with "
            f"{label}.assign_parameters(...) first"
        )
    if need_measurements and not any(i.operation.name == "measure" for i in circuit.data):
        raise ValueError(
            f"{label} has no measurements, so sampling it returns nothing: add "
            f"{label}.measure_all() (or use estimate() for expectation values)"
        )


def check_circuits(circuits: Any, argument: str | None = None) -> tuple[list[Any], bool]:
    """``sample()``'s argument as a list of circuits, and whether it was a single one."""
    single = not isinstance(circuits, (list, tuple))
    batch = [circuits] if single else list(circuits)
    if not batch:
        raise ValueError(f"sample() needs at least one circuit; {argument or 'the list'} is empty")
    for i, circuit in enumerate(batch):
        check_circuit(circuit, True, _circuit_label(circuit, argument, None if single else i))
    return batch, single


def circuit_for_estimate(circuit: Any, argument: str | None = None) -> Any:
    """``estimate()``'s circuit without its final measurements (they do not change the state an
    expectation value is taken of); measurements before other operations are refused."""
    label = _circuit_label(circuit, argument, None)
    check_circuit(circuit, False, label, "estimate")
    if not any(i.operation.name == "measure" for i in circuit.data):
        return circuit
    stripped = circuit.remove_final_measurements(inplace=False)
    if any(i.operation.name == "measure" for i in stripped.data):
        raise ValueError(
            f"estimate() needs the state before measurement, but {label} measures in the "
            "middle of the circuit; use sample() for circuits with mid-circuit measurements"
        )
    return stripped
