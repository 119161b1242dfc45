"""The simulated cloud's workload: QPUs, a circuit pool with real estimates, and a load generator.

Every number the scheduler sees comes from the project's own estimator: each circuit of the pool is
compiled for each simulated QPU (a fake IBM backend with its calibration) and its fidelity and QPU
time predicted, with and without each mitigation stack (``estimator.resource_plans`` over the
QPUs). A job = a pool circuit + shots + a stack (about half mitigated by default); its QPU time at
its shots comes from the shipped runtime model in one vectorised call over all jobs and QPUs.

The pool is cached on disk (``QONDUCTOR_HOME/cache``), keyed by the QPUs' calibration ids and the
model files, because compiling ~20 circuits for 16 devices takes ~half a minute.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# QPUs of the simulated cloud, in the order --qpus takes them: processor families interleaved so
# a small cloud is mixed too (Heron, Falcon, Eagle, Egret).
SIM_DEVICES: tuple[str, ...] = (
    "fake_fez",
    "fake_kolkata",
    "fake_sherbrooke",
    "fake_torino",
    "fake_auckland",
    "fake_brisbane",
    "fake_hanoi",
    "fake_kyiv",
    "fake_prague",
    "fake_montreal",
    "fake_osaka",
    "fake_mumbai",
    "fake_toronto",
    "fake_washington",
    "fake_sydney",
    "fake_paris",
)
# Pool circuits: MQT Bench families at the sizes the load generator draws around.
POOL: tuple[tuple[str, int], ...] = (
    ("ghz", 4),
    ("qft", 5),
    ("dj", 6),
    ("vqe_real_amp", 6),
    ("qaoa", 7),
    ("wstate", 8),
    ("ae", 8),
    ("bv", 9),
    ("graphstate", 10),
    ("qftentangled", 10),
    ("vqe_su2", 12),
    ("qnn", 12),
    ("ghz", 14),
    ("qaoa", 16),
    ("vqe_real_amp", 18),
    ("graphstate", 20),
    ("qft", 24),
)
# Stacks a mitigated job picks from (uniformly).
MITIGATION_STACKS: tuple[str, ...] = ("rem", "dd", "dd+rem", "twirl", "zne", "zne+rem")
STACKS: tuple[str, ...] = ("none", *MITIGATION_STACKS)


@dataclass(frozen=True)
class SimQPU:
    name: str
    num_qubits: int
    family: str


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of the load generator."""

    jobs_per_hour: float = 1500.0
    hours: float = 1.0
    mean_qubits: float = 9.0  # circuit sizes ~ normal(mean, sd), snapped to the pool's sizes
    sd_qubits: float = 4.0
    mean_shots: float = 4000.0  # shots ~ normal(mean, sd), rounded to 100, at least 100
    sd_shots: float = 1500.0
    mitigated_share: float = 0.5

    def __post_init__(self) -> None:
        if self.jobs_per_hour <= 0 or self.hours <= 0:
            raise ValueError("jobs_per_hour and hours must be positive")
        if not 0.0 <= self.mitigated_share <= 1.0:
            raise ValueError("mitigated_share is a fraction between 0 and 1")


@dataclass
class Workload:
    """N jobs against Q QPUs: arrival times and the (N, Q) estimates the scheduler uses."""

    qpus: list[SimQPU]
    arrival_s: np.ndarray  # (N,)
    qubits: np.ndarray  # (N,)
    shots: np.ndarray  # (N,)
    circuit: list[str]  # pool key per job
    stack: list[str]  # "none" or a stack name
    fidelity: np.ndarray  # (N, Q) estimated fidelity (NaN where the QPU is too small)
    quantum_s: np.ndarray  # (N, Q) estimated QPU seconds
    classical_s: np.ndarray  # (N,) post-processing seconds of the job's stack

    @property
    def num_jobs(self) -> int:
        return len(self.arrival_s)

    @property
    def usable(self) -> np.ndarray:
        """(N, Q) where a job may run: an estimate of both its fidelity and its run time."""
        return np.isfinite(self.fidelity) & np.isfinite(self.quantum_s)


def sim_qpus(count: int) -> list[SimQPU]:
    from kernel_server.backends.devices import family_of, load_backend

    if not 1 <= count <= len(SIM_DEVICES):
        raise ValueError(f"--qpus must be between 1 and {len(SIM_DEVICES)}, got {count}")
    out = []
    for name in SIM_DEVICES[:count]:
        backend = load_backend(name)
        out.append(SimQPU(name, backend.num_qubits, family_of(backend)))
    return out


def _cache_dir() -> Path:
    from kernel_server.core.paths import qonductor_home

    return qonductor_home() / "cache"


def _pool_key(qpus: list[SimQPU]) -> str:
    from kernel_server.backends.devices import calibration_id, load_backend
    from kernel_server.estimator.fidelity import DEFAULT_MODEL_PATH

    parts = [f"{q.name}:{calibration_id(load_backend(q.name))}" for q in qpus]
    parts += [f"{f}/{s}" for f, s in POOL] + list(STACKS)
    model = Path(DEFAULT_MODEL_PATH)
    parts.append(f"{model.stat().st_size}:{model.stat().st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def circuit_pool(qpus: list[SimQPU], log: Any = None) -> dict[str, Any]:
    """Per pool circuit: width, and per (stack, QPU) fidelity and runtime features (cached)."""
    path = _cache_dir() / f"sim_pool_{_pool_key(qpus)}.json"
    if path.exists():
        return json.loads(path.read_text())
    from kernel_server.backends.devices import load_backend
    from kernel_server.core.circuits import DEFAULT_SHOTS
    from kernel_server.estimator.fidelity_data import benchmark_circuit
    from kernel_server.estimator.plans import resource_plans

    backends = [load_backend(q.name) for q in qpus]
    pool: dict[str, Any] = {}
    for family, size in POOL:
        circuit = benchmark_circuit(family, size)
        if circuit is None:
            continue
        key = f"{family}/{size}"
        fitting = [b for b in backends if b.num_qubits >= circuit.num_qubits]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plans = resource_plans(
                circuit, k=None, backends=fitting, stacks=STACKS, accelerators=["standard-vm"]
            )
        entry: dict[str, Any] = {"qubits": circuit.num_qubits, "stacks": {}}
        for plan in plans:
            e = plan.estimate
            per_stack = entry["stacks"].setdefault(e.stack_name, {})
            per_stack[e.backend] = {
                "fidelity": e.fidelity,
                "two_qubit_gates": e.features.two_qubit_gates,
                "depth": e.features.depth,
                "num_qubits": e.features.num_qubits,
                "num_circuits": e.num_circuits,
                "shots_factor": e.total_shots / DEFAULT_SHOTS,  # the plans' shots per circuit
                "classical_s": e.classical_seconds,
            }
        pool[key] = entry
        if log:
            log(f"  pool: {key} estimated on {len(fitting)} QPUs")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pool))
    tmp.replace(path)
    return pool


def generate(spec: WorkloadSpec, qpus: list[SimQPU], seed: int = 1, log: Any = None) -> Workload:
    """Poisson arrivals over ``spec.hours`` with the spec's sizes, shots and mitigation share."""
    from kernel_server.estimator.runtime import RuntimeModel

    pool = circuit_pool(qpus, log)
    rng = np.random.default_rng(seed)
    horizon = spec.hours * 3600.0
    count = int(rng.poisson(spec.jobs_per_hour * spec.hours))
    arrival = np.sort(rng.uniform(0.0, horizon, size=count))
    keys = sorted(pool, key=lambda k: pool[k]["qubits"])
    sizes = np.asarray([pool[k]["qubits"] for k in keys])
    wanted = rng.normal(spec.mean_qubits, spec.sd_qubits, size=count)
    circuits: list[str] = []
    for w in wanted:
        # Among the pool circuits of the nearest size, one at random.
        nearest = np.flatnonzero(np.abs(sizes - w) == np.abs(sizes - w).min())
        circuits.append(keys[int(rng.choice(nearest))])
    shots = np.maximum(100, np.round(rng.normal(spec.mean_shots, spec.sd_shots, size=count), -2))
    mitigated = rng.random(count) < spec.mitigated_share
    # A stack among those the circuit has plans for (readout mitigation stops at some width).
    stacks = [
        str(rng.choice([s for s in MITIGATION_STACKS if s in pool[c]["stacks"]])) if m else "none"
        for c, m in zip(circuits, mitigated, strict=True)
    ]
    n, q = count, len(qpus)
    # Per (circuit, stack): arrays over QPUs, then one gather per job (a Python loop over
    # jobs x QPUs cost seconds at 4500 jobs on 16 QPUs).
    combos = sorted({(c, st) for c, st in zip(circuits, stacks, strict=True)})
    combo_index = {k: i for i, k in enumerate(combos)}
    columns = ("fidelity", "two_qubit_gates", "depth", "num_qubits", "num_circuits", "shots_factor")
    table = np.full((len(combos), q, len(columns)), np.nan)
    classical_of = np.zeros(len(combos))
    for k, (c, st) in enumerate(combos):
        for j, qpu in enumerate(qpus):
            e = pool[c]["stacks"][st].get(qpu.name)
            if e is not None:
                table[k, j] = [e[name] for name in columns]
                classical_of[k] = e["classical_s"]
    which = np.asarray([combo_index[(c, st)] for c, st in zip(circuits, stacks, strict=True)])
    per_job = table[which]  # (n, q, columns)
    fidelity = per_job[:, :, 0]
    classical = classical_of[which]
    quantum = np.full((n, q), np.nan)
    rows, cols = np.nonzero(np.isfinite(fidelity))
    if len(rows):
        import pandas as pd

        f = per_job[rows, cols]
        features = np.stack(
            [f[:, 1], f[:, 2], f[:, 3], np.ceil(shots[rows] * f[:, 5] / f[:, 4]), f[:, 4]], axis=1
        )
        # Jobs repeat (pool circuit, stack, QPU, shots rounded to 100): predict each once.
        unique, inverse = np.unique(features, axis=0, return_inverse=True)
        frame = pd.DataFrame(
            unique, columns=["two_qubit_gates", "depth", "num_qubits", "shots", "num_circuits"]
        )
        seconds = np.asarray(RuntimeModel.load().predict(frame), dtype=float)[inverse.ravel()]
        quantum[rows, cols] = np.maximum(seconds, 0.1)
    return Workload(
        qpus=qpus,
        arrival_s=arrival,
        qubits=np.asarray([pool[c]["qubits"] for c in circuits], dtype=int),
        shots=shots.astype(int),
        circuit=circuits,
        stack=stacks,
        fidelity=fidelity,
        quantum_s=quantum,
        classical_s=classical,
    )
