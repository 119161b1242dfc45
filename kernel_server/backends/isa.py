"""ISA circuits on a device: run where they are laid out (the fit itself: ``core.isa``).

A circuit for a template fits every member with that map; a coupler's direction or a gate the
device lacks (the basis rotations an Estimator adds before measuring) is translated at
optimization level 0 on the identity layout, which moves no qubit.
"""

from __future__ import annotations

from qiskit import QuantumCircuit
from qiskit.providers import BackendV2

from kernel_server.backends.compile import transpile_mitigated
from kernel_server.core.isa import isa_misfit


class IsaMismatch(ValueError):
    """An ISA circuit that does not fit a device as it is laid out."""


def compile_isa(circuit: QuantumCircuit, backend: BackendV2) -> QuantumCircuit:
    """``circuit`` on ``backend`` with every qubit where it is; IsaMismatch when it does not fit."""
    misfit = isa_misfit(circuit, backend.target, backend.name)
    if misfit:
        raise IsaMismatch(misfit)
    return transpile_mitigated(circuit, backend, range(circuit.num_qubits), schedule=False)
