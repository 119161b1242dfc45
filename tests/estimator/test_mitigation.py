"""Error mitigation techniques and stacks (kernel_server.estimator.mitigation).

Each technique must bring a small noisy run on a simulated Falcon (fake_kolkata, 3-5 qubits, at
most 4000 shots per circuit, fixed seeds) measurably closer to the ideal than the unmitigated run
through the same executor. The margins are set from runs over seeds 0-9 (mean +- std of the
error, see the constants) so that the tests fail when a technique stops working, not by chance.

What the device noise model allows (stated, not hidden): its gate noise is depolarizing plus
thermal relaxation and its idle noise is thermal relaxation, all Markovian. Pauli twirling cannot
improve on that (it only reshapes noise; exact Hellinger 0.944 -> 0.938 on a 4-qubit circuit),
so its test uses the noise twirling exists for, a coherent CX over-rotation. DD cannot refocus
Markovian dephasing either (a superposed qubit idling gets nothing); it helps an excited qubit by
keeping it in |0> for part of its idle window, and that is what its test checks.
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from qiskit import QuantumCircuit, transpile
from qiskit.circuit.library import RZXGate
from qiskit.quantum_info import Operator, SparsePauliOp, Statevector, hellinger_fidelity
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, coherent_unitary_error

from kernel_server.backends.aer_sim import ideal_counts, ideal_probabilities
from kernel_server.backends.devices import load_backend
from kernel_server.estimator.mitigation import (
    DD,
    PEC,
    REM,
    TECHNIQUES,
    ZNE,
    Cutting,
    MitigationStack,
    Twirling,
    UnknownMitigation,
    choose_layout,
    expectation_value,
    get_technique,
    measurement_map,
    parse_stack,
    run_mitigated,
)
from kernel_server.estimator.mitigation.pec import two_qubit_noise_level

SHOTS = 4000
SEED = 3


@pytest.fixture(scope="module")
def kolkata():
    return load_backend("fake_kolkata")


# --------------------------------------------------------------------------------------------
# Circuits
# --------------------------------------------------------------------------------------------


def ghz(n: int) -> QuantumCircuit:
    circuit = QuantumCircuit(n, n)
    circuit.h(0)
    for q in range(n - 1):
        circuit.cx(q, q + 1)
    circuit.measure(range(n), range(n))
    return circuit


def mirrored_ghz(n: int = 3, reps: int = 2) -> QuantumCircuit:
    """A GHZ state reached through `reps` forward-and-back CX ladders (4n-4 extra CX each)."""
    circuit = QuantumCircuit(n, n)
    circuit.h(0)
    for _ in range(reps):
        for q in range(n - 1):
            circuit.cx(q, q + 1)
        for q in reversed(range(n - 1)):
            circuit.cx(q, q + 1)
    for q in range(n - 1):
        circuit.cx(q, q + 1)
    circuit.measure(range(n), range(n))
    return circuit


def idling_excited_qubit(n: int = 4, reps: int = 4) -> QuantumCircuit:
    """Qubit 0 is excited and entangled with qubit 1, then idles while qubits 1..n-1 run 16 CX."""
    circuit = QuantumCircuit(n, n)
    circuit.x(0)
    circuit.cx(0, 1)  # pins qubit 0's excitation to the start (ALAP cannot delay it)
    for _ in range(reps):
        for q in range(1, n - 1):
            circuit.cx(q, q + 1)
        circuit.rz(0.4, n - 1)
        for q in reversed(range(1, n - 1)):
            circuit.cx(q, q + 1)
    circuit.measure(range(n), range(n))
    return circuit


def cz_ring(n: int = 4) -> QuantumCircuit:
    """A ring of CZ (a graph state) measured in X: a 4-cycle is not in heavy-hex, so the closing
    gate needs SWAPs unless it is cut."""
    circuit = QuantumCircuit(n, n)
    circuit.h(range(n))
    for q in range(n):
        circuit.cz(q, (q + 1) % n)
    circuit.h(range(n))
    circuit.measure(range(n), range(n))
    return circuit


def ideal_value(circuit: QuantumCircuit, observable) -> float:
    return expectation_value(ideal_probabilities(circuit), observable, measurement_map(circuit))


def mitigated_error(circuit, backend, stack, observable, seed=SEED, shots=SHOTS) -> float:
    value = run_mitigated(circuit, backend, stack, shots, seed=seed, observable=observable)
    return value - ideal_value(circuit, observable)


def pec_noise_level(circuit: QuantumCircuit, backend) -> float:
    """PEC's depolarizing level from the calibrated CX errors on the qubits the run will use."""
    layout = choose_layout(circuit, backend)
    cx = backend.target["cx"]
    errors = [cx[(a, b)].error for a in layout for b in layout if (a, b) in cx]
    return two_qubit_noise_level(float(np.mean(errors)))


# --------------------------------------------------------------------------------------------
# Registry, parsing, import cost
# --------------------------------------------------------------------------------------------


def test_importing_the_package_does_not_import_mitiq():
    code = (
        "import sys, kernel_server.estimator.mitigation as m\n"
        "heavy = [n for n in sys.modules if n.split('.')[0] in "
        "('mitiq', 'cirq', 'qiskit_addon_cutting', 'qiskit_aer', 'qiskit_ibm_runtime')]\n"
        "assert not heavy, heavy\n"
        "assert sorted(m.TECHNIQUES) == ['cut', 'dd', 'pec', 'rem', 'twirl', 'zne']\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_registry_and_aliases():
    assert TECHNIQUES == {
        "zne": ZNE,
        "pec": PEC,
        "rem": REM,
        "dd": DD,
        "twirl": Twirling,
        "cut": Cutting,
    }
    assert get_technique("Pauli-Twirling") is Twirling
    assert get_technique("ddd") is DD
    assert get_technique("readout") is REM
    assert get_technique("cutting") is Cutting
    kinds = {name: (cls.kind, cls.produces) for name, cls in TECHNIQUES.items()}
    assert kinds["zne"] == kinds["pec"] == ("expectation", "expectation")
    assert kinds["rem"] == kinds["dd"] == kinds["twirl"] == ("distribution", "distribution")
    assert kinds["cut"] == ("distribution", "expectation")


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownMitigation) as info:
        get_technique("zen")
    message = str(info.value)
    for name in ("cut", "dd", "pec", "rem", "twirl", "zne"):
        assert name in message
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnknownMitigation):
        parse_stack("zne+magic")


def test_unknown_config_key_raises():
    with pytest.raises(ValueError, match="unknown config keys"):
        ZNE(noise_factor=(1, 3))
    with pytest.raises(ValueError, match="noise_factors"):
        ZNE(noise_factors=(1,))


def test_parse_stack_forms():
    assert parse_stack(None).names == ()
    assert parse_stack("none").names == ()
    assert parse_stack("zne").names == ("zne",)
    assert parse_stack("twirl+rem+dd").names == ("twirl", "rem", "dd")
    assert parse_stack(" ZNE + Readout ").names == ("zne", "rem")
    assert parse_stack(["zne", "rem"]).names == ("zne", "rem")
    assert parse_stack([ZNE(noise_factors=(1, 2)), "rem"]).techniques[0].config[
        "noise_factors"
    ] == (1, 2)
    assert parse_stack([("dd", {"rule": "xyxy"})]).techniques[0].config["rule"] == "xyxy"
    stack = parse_stack("zne+rem")
    assert parse_stack(stack) is stack


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("rem+zne", "'rem' combines counts"),  # ZNE would hand REM expectation values
        ("rem+cut", "'rem' combines counts"),  # cutting hands back expectation values
        ("zne+zne", "appear twice"),
        ("cut+zne", "needs terminal measurements"),  # subexperiments measure mid-circuit
        ("zne++rem", "empty technique name"),
    ],
)
def test_invalid_stacks_raise(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_stack(spec)


def test_expectation_stacks_need_a_diagonal_observable():
    circuit = ghz(3)
    with pytest.raises(ValueError, match="give an observable"):
        parse_stack("zne").construct(circuit)
    with pytest.raises(ValueError, match="not diagonal"):
        parse_stack("zne").construct(circuit, "XXX")
    # Cutting measures in the observable's bases itself.
    assert len(
        parse_stack([("cut", {"partition_labels": "AAB"})]).construct(circuit, "XXX").circuits
    )


# --------------------------------------------------------------------------------------------
# Overheads and plans
# --------------------------------------------------------------------------------------------


def test_overheads():
    circuit = mirrored_ghz()
    zne = ZNE().overhead(circuit)
    assert (zne.num_circuits, zne.shots_factor) == (3, 3.0) and zne.classical_seconds > 0
    assert ZNE(noise_factors=(1, 2)).overhead(circuit).num_circuits == 2
    rem = REM().overhead(circuit)
    assert (rem.num_circuits, rem.shots_factor) == (3, 3.0) and rem.classical_seconds > 0
    twirl = Twirling(num_variants=8).overhead(circuit)
    assert (twirl.num_circuits, twirl.shots_factor) == (8, 1.0)
    assert (DD().overhead(circuit).num_circuits, DD().overhead(circuit).shots_factor) == (1, 1.0)
    pec = PEC(num_samples=40, noise_level=0.004)
    constructed = pec.construct_circuits(circuit)
    assert pec.overhead(circuit).num_circuits == len(constructed) == 40
    # gamma^2 in closed form equals mitiq's one-norm of the sampled representation.
    assert pec.overhead(circuit).shots_factor == pytest.approx(constructed.context["norm"] ** 2)
    cut = Cutting(gates=[(3, 0)]).overhead(cz_ring(), {"observable": "ZZZZ"})
    assert cut.num_circuits == 6  # one CZ cut: six terms, one observable group


def test_stack_overhead_multiplies_and_matches_construction():
    circuit = ghz(3)
    zne, rem = ZNE().overhead(circuit), REM().overhead(circuit)
    stacked = parse_stack("zne+rem").overhead(circuit)
    assert stacked.num_circuits == 9 and stacked.shots_factor == 9.0
    # REM constructs and combines once per folded circuit.
    assert stacked.classical_seconds == pytest.approx(
        zne.classical_seconds + 3 * rem.classical_seconds
    )
    for spec, shots in (("zne+rem", [SHOTS] * 9), ("twirl+rem+dd", [SHOTS // 10] * 30)):
        stack = parse_stack(spec)
        plan = stack.construct(circuit, "ZZI")
        overhead = stack.overhead(circuit, "ZZI")
        assert len(plan.circuits) == overhead.num_circuits
        assert plan.shots_for(SHOTS) == shots
        assert sum(plan.shots_for(SHOTS)) == pytest.approx(SHOTS * overhead.shots_factor)


def test_constructed_circuits_keep_the_logic():
    """Folding, twirling and DD leave the ideal distribution unchanged."""
    circuit = mirrored_ghz(3, 1)
    ideal = ideal_probabilities(circuit)
    constructed = [
        *ZNE().construct_circuits(circuit),
        *Twirling(num_variants=5).construct_circuits(circuit),
        *DD(rule="xyxy").construct_circuits(idling_excited_qubit()),
    ]
    for c in constructed[:-1]:
        assert hellinger_fidelity(ideal_probabilities(c), ideal) == pytest.approx(1.0)
    dd_ideal = ideal_probabilities(idling_excited_qubit())
    assert hellinger_fidelity(ideal_probabilities(constructed[-1]), dd_ideal) == pytest.approx(1)
    assert constructed[-1].count_ops()["y"] > 0  # the XYXY sequence really went in


def test_twirling_restores_the_callers_random_state():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    Twirling(num_variants=3).construct_circuits(ghz(3))
    assert random.random() == expected


def test_stack_plumbing_is_exact_on_ideal_results():
    """With exact noiseless distributions as results, every stack returns the ideal answer."""
    circuit = mirrored_ghz(3, 1)
    ideal = ideal_probabilities(circuit)
    for spec, observable in (("zne+rem", "ZIZ"), ("twirl+rem+dd", None), ("twirl+zne+rem", "ZZI")):
        stack = parse_stack(spec)
        plan = stack.construct(circuit, observable)
        results = [ideal_probabilities(c) for c in plan.circuits]
        value = stack.combine(results, plan)
        if observable is None:
            assert hellinger_fidelity(value, ideal) == pytest.approx(1.0)
        else:
            assert value == pytest.approx(ideal_value(circuit, observable), abs=1e-9)


def test_cutting_reconstructs_partitions_exactly_enough():
    """Partition and automatic cut finding, noiseless: the reconstruction matches the ideal
    (1.5; errors seen 0.000-0.01 at 4000 shots per subexperiment)."""
    circuit = ghz(3)
    observable = SparsePauliOp(["IZZ", "XXX"], coeffs=[0.5, 1.0])
    unmeasured = circuit.remove_final_measurements(inplace=False)
    exact = float(Statevector(unmeasured).expectation_value(observable).real)
    for config in ({"partition_labels": "AAB"}, {"max_subcircuit_width": 2}):
        stack = MitigationStack([("cut", config)])
        plan = stack.construct(circuit, observable)
        # One CX cut, 6 terms: A measures two bases (ZZ, XX), B one (X; I joins it).
        assert len(plan.circuits) == 6 * 2 + 6 * 1
        results = [ideal_counts(c, SHOTS, seed=i) for i, c in enumerate(plan.circuits)]
        assert stack.combine(results, plan) == pytest.approx(exact, abs=0.05)


# --------------------------------------------------------------------------------------------
# Each technique against the unmitigated run (fake_kolkata)
# --------------------------------------------------------------------------------------------


def test_rem_improves_fidelity(kolkata):
    # Seeds 0-9: Hellinger fidelity 0.963 +- 0.003 unmitigated, 0.988 +- 0.003 with REM.
    circuit = ghz(4)
    raw = run_mitigated(circuit, kolkata, None, SHOTS, seed=SEED)
    mitigated = run_mitigated(circuit, kolkata, "rem", SHOTS, seed=SEED)
    base = hellinger_fidelity(raw, ideal_probabilities(circuit))
    better = hellinger_fidelity(mitigated, ideal_probabilities(circuit))
    assert better > base + 0.01, (base, better)


def test_zne_reduces_expectation_error(kolkata):
    # <Z0 Z2> of a GHZ state behind 10 CX, ideal 1. Seeds 0-9: error -0.083 +- 0.006
    # unmitigated, -0.043 +- 0.006 with linear ZNE over (1, 3, 5) (what is left is mostly readout
    # error, which folding does not scale). Richardson, the default: -0.033 +- 0.017, less bias
    # but three times the spread at 4000 shots, too noisy for a single-run test.
    circuit = mirrored_ghz(3, 2)
    base = mitigated_error(circuit, kolkata, None, "ZIZ")
    zne = mitigated_error(circuit, kolkata, [("zne", {"extrapolation": "linear"})], "ZIZ")
    assert abs(zne) < 0.7 * abs(base), (base, zne)


@pytest.mark.slow
def test_pec_reduces_expectation_error(kolkata):
    # Same circuit. Seeds 0-9 (PEC sampling and shots): error -0.083 unmitigated, -0.010 +- 0.018
    # with PEC at 400 samples sharing gamma^2 x 4000 = 5100 shots (at 100 samples: +- 0.038; the
    # spread comes from sampling circuits, not from shots).
    circuit = mirrored_ghz(3, 2)
    level = pec_noise_level(circuit, kolkata)
    base = mitigated_error(circuit, kolkata, None, "ZIZ")
    config = {"noise_level": level, "num_samples": 400}
    pec = mitigated_error(circuit, kolkata, [("pec", config)], "ZIZ")
    assert abs(pec) < abs(base) - 0.02, (base, pec)


@pytest.mark.parametrize("rule", ["xx", "xyxy"])
def test_dd_protects_an_idling_excited_qubit(kolkata, rule):
    # <Z> of qubit 0 (ideal -1) idling ~12 us while the others run 32 CX. Seeds 0-9: error
    # 0.144 +- 0.008 unmitigated, 0.099 +- 0.004 with XX, 0.091 +- 0.005 with XYXY (T1 decay only
    # while in |1>).
    circuit = idling_excited_qubit(reps=8)
    base = mitigated_error(circuit, kolkata, None, "IIIZ")
    dd = mitigated_error(circuit, kolkata, [("dd", {"rule": rule})], "IIIZ")
    assert abs(dd) < abs(base) - 0.02, (base, dd)


def test_twirling_removes_coherent_error_build_up():
    """A coherent ZX over-rotation after every CX (the noise twirling is for): 16 of them add up
    coherently unless twirled. Seeds 0-3: Hellinger 0.80 unmitigated, 0.95-0.98 twirled."""
    noise = NoiseModel(basis_gates=["cx", "rz", "sx", "x"])
    noise.add_all_qubit_quantum_error(coherent_unitary_error(Operator(RZXGate(0.08))), ["cx"])
    simulator = AerSimulator(noise_model=noise)
    circuit = QuantumCircuit(3, 3)
    circuit.h(0)
    for _ in range(4):
        circuit.cx(0, 1)
        circuit.cx(1, 2)
        circuit.cx(1, 2)
        circuit.cx(0, 1)
    circuit.measure(range(3), range(3))
    ideal = ideal_probabilities(circuit)

    def fidelity(spec):
        stack = parse_stack(spec)
        plan = stack.construct(circuit)
        counts = []
        for i, (c, shots) in enumerate(zip(plan.circuits, plan.shots_for(SHOTS), strict=True)):
            compiled = transpile(c, basis_gates=["cx", "rz", "sx", "x"], optimization_level=0)
            result = simulator.run(compiled, shots=shots, seed_simulator=SEED * 100 + i).result()
            counts.append(result.get_counts())
        return hellinger_fidelity(stack.combine(counts, plan), ideal)

    base, twirled = fidelity(None), fidelity([("twirl", {"num_variants": 8})])
    assert twirled > base + 0.1, (base, twirled)


def test_cutting_avoids_swaps(kolkata):
    # <ZZZZ> of a 4-qubit CZ ring, ideal 1; the uncut ring needs a SWAP on heavy-hex, cutting
    # the closing CZ leaves a line. Seeds 0-9: error -0.200 +- 0.008 unmitigated, -0.110 +- 0.015
    # cut (six subexperiments of 4000 shots).
    circuit = cz_ring()
    base = mitigated_error(circuit, kolkata, None, "ZZZZ")
    cut = mitigated_error(circuit, kolkata, [("cut", {"gates": [(3, 0)]})], "ZZZZ")
    assert abs(cut) < abs(base) - 0.04, (base, cut)


# --------------------------------------------------------------------------------------------
# Stacks against their parts
# --------------------------------------------------------------------------------------------


def exact_error(circuit, backend, stack, observable) -> float:
    """The error of the mitigated value with exact noisy distributions in place of shots: each
    layer's effect on the bias, which at 4000 shots is of the order of the shot noise."""
    value = run_mitigated(circuit, backend, stack, SHOTS, observable=observable, exact=True)
    return value - ideal_value(circuit, observable)


def test_zne_plus_rem_beats_zne(kolkata):
    # REM inside ZNE removes the readout error ZNE leaves. Exact: -0.083 unmitigated, -0.060
    # REM, -0.028 ZNE, -0.003 ZNE+REM. (At 4000 shots: -0.033 +- 0.017 and 0.002 +- 0.020.)
    circuit = mirrored_ghz(3, 2)
    errors = {spec: exact_error(circuit, kolkata, spec, "ZIZ") for spec in (None, "zne", "zne+rem")}
    assert abs(errors["zne"]) < abs(errors[None]) - 0.02, errors
    assert abs(errors["zne+rem"]) < abs(errors["zne"]) - 0.01, errors


def test_twirl_rem_dd_stack_on_an_idle_qubit(kolkata):
    # Exact: 0.081 unmitigated, 0.072 REM, 0.054 twirl+rem+dd(XYXY) (DD does the most).
    circuit = idling_excited_qubit()
    stack = [("twirl", {"num_variants": 5}), "rem", ("dd", {"rule": "xyxy"})]
    errors = {
        name: exact_error(circuit, kolkata, spec, "IIIZ")
        for name, spec in (("none", None), ("rem", "rem"), ("stack", stack))
    }
    assert abs(errors["rem"]) < abs(errors["none"]) - 0.005, errors
    assert abs(errors["stack"]) < abs(errors["rem"]) - 0.01, errors


def test_twirl_rem_dd_stack_improves_fidelity(kolkata):
    # With shots. Seeds 0-9: Hellinger 0.963 +- 0.003 unmitigated, 0.979 +- 0.003 with
    # twirl+rem+dd (REM does the work; REM alone 0.988: twirling and DD pulses cost a little).
    circuit = ghz(4)
    raw = run_mitigated(circuit, kolkata, None, SHOTS, seed=SEED)
    stacked = run_mitigated(circuit, kolkata, "twirl+rem+dd", SHOTS, seed=SEED)
    ideal = ideal_probabilities(circuit)
    assert hellinger_fidelity(stacked, ideal) > hellinger_fidelity(raw, ideal) + 0.005
