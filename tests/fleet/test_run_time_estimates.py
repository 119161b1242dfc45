"""What a QPU job is predicted to hold a device for: the time the scheduler plans with."""

from __future__ import annotations

import cloudpickle
import pytest
from helpers import ghz
from qiskit import QuantumCircuit

from kernel_server.backends.aer_sim import plan_noisy_run
from kernel_server.backends.devices import load_backend
from kernel_server.estimator.features import circuit_features, runtime_frame
from kernel_server.estimator.runtime import RuntimeModel
from kernel_server.tasks import qpu
from kernel_server.wire.circuits import dump_circuits


def test_a_simulated_device_prices_the_noisy_run_an_ibm_one_the_qpu_time() -> None:
    backend = load_backend("fake_kolkata")
    blob = dump_circuits([ghz(4)])
    simulated = qpu.estimate_on_device(blob, "fake_kolkata", rows=3, shots=1000)
    (transpiled,) = cloudpickle.loads(simulated.transpiled)
    plan = plan_noisy_run(transpiled, 1000, backend=backend)
    # Three parameter rows: the circuit runs three times.
    assert simulated.run_s == pytest.approx(3 * plan.estimated_seconds[plan.method])

    model = RuntimeModel.load()
    frame = runtime_frame([[circuit_features(transpiled, backend.target, shots=1000)]])
    central = qpu.estimate_on_device(blob, "fake_kolkata", shots=1000, on_ibm=True)
    assert central.run_s == pytest.approx(float(model.predict(frame)[0]))
    # A scheduler planning for 90% of jobs takes the upper end of the 80% interval.
    cautious = qpu.estimate_on_device(blob, "fake_kolkata", shots=1000, on_ibm=True, quantile=0.9)
    _, high = model.predict_interval(frame, coverage=0.8)
    assert cautious.run_s == pytest.approx(float(high[0]))
    assert central.run_s is not None and cautious.run_s > central.run_s
    # More shots, a longer simulated run.
    more = qpu.estimate_on_device(blob, "fake_kolkata", rows=3, shots=100_000)
    assert more.run_s is not None and simulated.run_s is not None
    assert more.run_s >= simulated.run_s


def test_a_parameter_sweep_is_priced_with_its_rows_bound_where_it_runs() -> None:
    from qiskit.circuit import Parameter

    theta = Parameter("theta")
    circuit = QuantumCircuit(2)
    circuit.ry(theta, 0)
    circuit.cx(0, 1)
    circuit.measure_all()
    estimate = qpu.estimate_on_device(dump_circuits([circuit]), "fake_kolkata", rows=4)
    assert estimate.run_s is not None and estimate.run_s > 0
    assert estimate.num_circuits == 4
