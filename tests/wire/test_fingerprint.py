"""Fingerprints: equal circuits match, whatever qpy's order of a layout's registers."""

from __future__ import annotations

import io

import pytest
from helpers import ghz
from qiskit import QuantumCircuit, qpy
from qiskit.transpiler.preset_passmanagers import generate_preset_pass_manager

from kernel_server.backends.devices import load_backend
from kernel_server.wire.circuits import fingerprint, load_circuits

pytestmark = pytest.mark.unit


def test_an_isa_circuit_sent_again_and_again_has_one_fingerprint() -> None:
    # A user's transpiled circuit, sent with every run of its cell: qpy writes its layout's
    # registers in set order, which changed from dump to dump (two fingerprints in eight sends).
    pm = generate_preset_pass_manager(
        optimization_level=1, backend=load_backend("fake_sherbrooke"), seed_transpiler=1
    )
    isa = pm.run(ghz(5))
    sent = set()
    for _ in range(8):
        buffer = io.BytesIO()
        qpy.dump([isa], buffer)
        sent.add(fingerprint(load_circuits(buffer.getvalue())))
    assert len(sent) == 1
    assert {fingerprint([pm.run(ghz(5))]) for _ in range(4)} == sent


def test_the_layout_still_tells_circuits_apart() -> None:
    # The same physical operations and read-out, the virtual qubits laid out the other way round.
    backend = load_backend("fake_sherbrooke")
    a = QuantumCircuit(2, 2)
    a.h(0)
    a.cx(0, 1)
    a.measure([0, 1], [0, 1])
    b = QuantumCircuit(2, 2)
    b.h(1)
    b.cx(1, 0)
    b.measure([1, 0], [0, 1])
    a = generate_preset_pass_manager(0, backend=backend, initial_layout=[0, 1]).run(a)
    b = generate_preset_pass_manager(0, backend=backend, initial_layout=[1, 0]).run(b)
    assert a.layout is not None and b.layout is not None
    assert [(i.operation.name, [a.find_bit(q).index for q in i.qubits]) for i in a.data] == [
        (i.operation.name, [b.find_bit(q).index for q in i.qubits]) for i in b.data
    ]
    assert fingerprint([a]) != fingerprint([b])
    assert fingerprint([ghz(3)]) == fingerprint([ghz(3)]) != fingerprint([ghz(4)])
