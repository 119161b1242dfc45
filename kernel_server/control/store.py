"""System monitor: the orchestrator's state in SQLite (WAL).

Devices, calibrations, workflows, jobs, step outputs and events. A workflow row (with its inputs) is
committed before the submission is acknowledged, so a restarted orchestrator finds every accepted
workflow and picks it up where it was.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import msgspec

from kernel_server.core.deployment import RunOptions, stored_options
from kernel_server.core.graph import WorkflowGraph
from kernel_server.core.jobs import JobRecord, JobState, WorkflowRun, WorkflowState
from kernel_server.core.status import DeviceInfo, PlanError, Plans, WorkflowSummary

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    name TEXT PRIMARY KEY, num_qubits INTEGER, family TEXT, calibration_id TEXT,
    info TEXT, online INTEGER DEFAULT 1, updated_at REAL);
CREATE TABLE IF NOT EXISTS calibrations (
    device TEXT, calibration_id TEXT, recorded_at REAL, PRIMARY KEY (device, calibration_id));
CREATE TABLE IF NOT EXISTS workflows (
    id TEXT PRIMARY KEY, image_id TEXT, name TEXT, state TEXT, created_at REAL, finished_at REAL,
    error TEXT, graph TEXT, options TEXT, inputs BLOB, outputs BLOB, stdout TEXT DEFAULT '',
    owner TEXT DEFAULT '');
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, workflow_id TEXT, step_id INTEGER, kind TEXT, state TEXT, qpu TEXT,
    est_fidelity REAL, est_duration_s REAL, shots INTEGER, num_circuits INTEGER, parent TEXT,
    created_at REAL, queued_at REAL, started_at REAL, finished_at REAL, error TEXT, method TEXT,
    plans TEXT, worker TEXT, awaiting_choice INTEGER DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_by_workflow ON jobs (workflow_id);
CREATE TABLE IF NOT EXISTS step_outputs (
    workflow_id TEXT, step_id INTEGER, outputs BLOB, stdout TEXT,
    PRIMARY KEY (workflow_id, step_id));
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, workflow_id TEXT, job_id TEXT, kind TEXT,
    state TEXT, detail TEXT);
"""

_JOB_COLUMNS = (
    "id",
    "workflow_id",
    "step_id",
    "kind",
    "state",
    "qpu",
    "est_fidelity",
    "est_duration_s",
    "shots",
    "num_circuits",
    "parent",
    "created_at",
    "queued_at",
    "started_at",
    "finished_at",
    "error",
    "method",
    "plans",
    "worker",
    "awaiting_choice",
)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _unpack(blob: bytes | None) -> Any:
    return None if blob is None else msgpack.unpackb(blob, raw=False)


def _plans(text: str | None) -> Plans | None:
    """A job's stored plans; a row of a version that kept them as dicts (an error as
    ``[{"error": ...}]``) reads as today's."""
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=Plans)  # type: ignore[arg-type]
    except msgspec.ValidationError:
        old = json.loads(text)
        if isinstance(old, list) and old and isinstance(old[0], dict) and "error" in old[0]:
            return PlanError(error=str(old[0]["error"]))
        raise


@dataclass(frozen=True)
class StoredWorkflow:
    """A workflow's row: what it is, where it stands, and its options as they were checked."""

    id: str
    image_id: str
    name: str | None
    state: WorkflowState
    created_at: float
    finished_at: float | None
    error: str | None
    graph: WorkflowGraph
    options: RunOptions
    stdout: str


@dataclass(frozen=True)
class StoredEvent:
    """One event of a workflow's log, in the order they happened (``seq``)."""

    seq: int
    ts: float
    job_id: str
    kind: str
    state: str
    detail: str


class Store:
    """SQLite store. ``path=":memory:"`` gives a private in-memory database for unit tests."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # Owner-only from the start: the database holds users' inputs and results.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.close(fd)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add columns that databases made by earlier versions lack (nothing is dropped)."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for column, kind in (("plans", "TEXT"), ("worker", "TEXT"), ("awaiting_choice", "INTEGER")):
            if column not in have:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
        have = {row[1] for row in self._db.execute("PRAGMA table_info(workflows)")}
        if "owner" not in have:
            self._db.execute("ALTER TABLE workflows ADD COLUMN owner TEXT DEFAULT ''")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, args: tuple | list = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    # devices ---------------------------------------------------------------------------------
    def upsert_device(self, info: DeviceInfo) -> None:
        now = time.time()
        self._exec(
            "INSERT INTO devices (name, num_qubits, family, calibration_id, info, updated_at) "
            "VALUES (?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET num_qubits=excluded.num_qubits,"
            " family=excluded.family, calibration_id=excluded.calibration_id, info=excluded.info,"
            " updated_at=excluded.updated_at",
            (
                info.name,
                info.num_qubits,
                info.family,
                info.calibration_id,
                msgspec.json.encode(info).decode(),
                now,
            ),
        )
        self._exec(
            "INSERT OR IGNORE INTO calibrations VALUES (?,?,?)",
            (info.name, info.calibration_id, now),
        )

    def devices(self) -> list[DeviceInfo]:
        """The devices the orchestrator has known, as it last described them."""
        rows = self._exec("SELECT info FROM devices ORDER BY name").fetchall()
        return [msgspec.json.decode(r[0], type=DeviceInfo) for r in rows]

    # workflows -------------------------------------------------------------------------------
    def insert_workflow(
        self,
        run: WorkflowRun,
        name: str | None,
        options: RunOptions,
        inputs: dict[str, bytes],
        owner: str = "",
    ) -> bool:
        """Persist a new workflow with its steps; False if that id exists (a resent request)."""
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                exists = cur.execute("SELECT 1 FROM workflows WHERE id=?", (run.id,)).fetchone()
                if exists:
                    cur.execute("ROLLBACK")
                    return False
                cur.execute(
                    "INSERT INTO workflows (id, image_id, name, state, created_at, graph, options,"
                    " inputs, owner) VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        run.id,
                        run.image_id,
                        name,
                        run.state.value,
                        run.created_at,
                        msgspec.json.encode(run.graph).decode(),
                        msgspec.json.encode(options).decode(),
                        _pack(inputs),
                        owner,
                    ),
                )
                for job in run.steps.values():
                    cur.execute(self._job_upsert_sql(), self._job_row(job))
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        return True

    def workflow_owner(self, workflow_id: str) -> str | None:
        """The user who submitted it ("" for the orchestrator's owner); None if unknown."""
        row = self._exec("SELECT owner FROM workflows WHERE id=?", (workflow_id,)).fetchone()
        return None if row is None else (row[0] or "")

    def update_workflow(self, run: WorkflowRun) -> None:
        self._exec(
            "UPDATE workflows SET state=?, finished_at=?, error=? WHERE id=?",
            (run.state.value, run.finished_at, run.error, run.id),
        )

    def save_outputs(self, workflow_id: str, outputs: dict[str, bytes], stdout: str) -> None:
        self._exec(
            "UPDATE workflows SET outputs=?, stdout=? WHERE id=?",
            (_pack(outputs), stdout, workflow_id),
        )

    def workflow_row(self, workflow_id: str) -> StoredWorkflow | None:
        row = self._exec(
            "SELECT id, image_id, name, state, created_at, finished_at, error, graph, options,"
            " stdout FROM workflows WHERE id=?",
            (workflow_id,),
        ).fetchone()
        if row is None:
            return None
        return StoredWorkflow(
            id=row[0],
            image_id=row[1],
            name=row[2],
            state=WorkflowState(row[3]),
            created_at=row[4],
            finished_at=row[5],
            error=row[6],
            graph=msgspec.json.decode(row[7], type=WorkflowGraph),
            options=stored_options(row[8]),
            stdout=row[9] or "",
        )

    def workflow_inputs(self, workflow_id: str) -> dict[str, bytes]:
        row = self._exec("SELECT inputs FROM workflows WHERE id=?", (workflow_id,)).fetchone()
        return _unpack(row[0]) if row else {}

    def workflow_outputs(self, workflow_id: str) -> dict[str, bytes] | None:
        row = self._exec("SELECT outputs FROM workflows WHERE id=?", (workflow_id,)).fetchone()
        return _unpack(row[0]) if row else None

    def list_workflows(self, limit: int = 100, owner: str | None = None) -> list[WorkflowSummary]:
        """The newest workflows (of one owner, or of all) with the QPUs their jobs use and how
        many jobs are live."""
        where, args = ("WHERE owner = ?", (owner, limit)) if owner is not None else ("", (limit,))
        rows = self._exec(
            "SELECT w.id, w.image_id, w.name, w.state, w.created_at, w.finished_at, w.error,"
            " group_concat(DISTINCT j.qpu), coalesce(sum(j.state = 'running'), 0),"
            " coalesce(sum(j.state = 'queued'), 0)"
            f" FROM (SELECT * FROM workflows {where} ORDER BY created_at DESC LIMIT ?) w"
            " LEFT JOIN jobs j ON j.workflow_id = w.id"
            " GROUP BY w.id ORDER BY w.created_at DESC",
            args,
        ).fetchall()
        listing = []
        for r in rows:
            state, created, finished = WorkflowState(r[3]), r[4], r[5]
            final = finished is not None and state.final
            listing.append(
                WorkflowSummary(
                    id=r[0],
                    image_id=r[1],
                    name=r[2],
                    state=state,
                    created_at=created,
                    finished_at=finished,
                    error=r[6],
                    qpus=sorted(r[7].split(",")) if r[7] else [],
                    jobs_running=int(r[8]),
                    jobs_queued=int(r[9]),
                    jct_s=round(finished - created, 3) if final else None,
                )
            )
        return listing

    def unfinished_workflow_ids(self) -> list[str]:
        live = (WorkflowState.SUBMITTED.value, WorkflowState.RUNNING.value)
        rows = self._exec(
            "SELECT id FROM workflows WHERE state IN (?,?) ORDER BY created_at", live
        ).fetchall()
        return [r[0] for r in rows]

    # jobs ------------------------------------------------------------------------------------
    @staticmethod
    def _job_upsert_sql() -> str:
        cols = ",".join(_JOB_COLUMNS)
        marks = ",".join("?" * len(_JOB_COLUMNS))
        updates = ",".join(f"{c}=excluded.{c}" for c in _JOB_COLUMNS[1:])
        return f"INSERT INTO jobs ({cols}) VALUES ({marks}) ON CONFLICT(id) DO UPDATE SET {updates}"

    @staticmethod
    def _job_row(job: JobRecord) -> tuple:
        def value(column: str) -> Any:
            if column == "state":
                return job.state.value
            if column == "plans":
                return None if job.plans is None else msgspec.json.encode(job.plans).decode()
            return getattr(job, column)

        return tuple(value(c) for c in _JOB_COLUMNS)

    def save_job(self, job: JobRecord) -> None:
        self._exec(self._job_upsert_sql(), self._job_row(job))

    def jobs(self, workflow_id: str) -> list[JobRecord]:
        rows = self._exec(
            f"SELECT {','.join(_JOB_COLUMNS)} FROM jobs WHERE workflow_id=? ORDER BY created_at",
            (workflow_id,),
        ).fetchall()
        out = []
        for r in rows:
            d = dict(zip(_JOB_COLUMNS, r, strict=True))
            d["state"] = JobState(d["state"])
            d["plans"] = _plans(d["plans"])
            d["awaiting_choice"] = bool(d["awaiting_choice"])
            out.append(JobRecord(**d))
        return out

    def save_step_outputs(
        self, workflow_id: str, step_id: int, outputs: dict[str, bytes], stdout: str
    ) -> None:
        self._exec(
            "INSERT OR REPLACE INTO step_outputs VALUES (?,?,?,?)",
            (workflow_id, step_id, _pack(outputs), stdout),
        )

    def step_outputs(self, workflow_id: str) -> dict[int, tuple[dict[str, bytes], str]]:
        rows = self._exec(
            "SELECT step_id, outputs, stdout FROM step_outputs WHERE workflow_id=?", (workflow_id,)
        ).fetchall()
        return {r[0]: (_unpack(r[1]), r[2] or "") for r in rows}

    # events ----------------------------------------------------------------------------------
    def add_event(
        self, ts: float, workflow_id: str, job_id: str, kind: str, state: str, detail: str
    ) -> None:
        self._exec(
            "INSERT INTO events (ts, workflow_id, job_id, kind, state, detail)"
            " VALUES (?,?,?,?,?,?)",
            (ts, workflow_id, job_id, kind, state, detail),
        )

    def events(self, workflow_id: str) -> list[StoredEvent]:
        rows = self._exec(
            "SELECT seq, ts, job_id, kind, state, detail FROM events"
            " WHERE workflow_id=? ORDER BY seq",
            (workflow_id,),
        ).fetchall()
        return [StoredEvent(*r) for r in rows]

    # recovery --------------------------------------------------------------------------------
    def load_run(self, workflow_id: str) -> WorkflowRun | None:
        row = self.workflow_row(workflow_id)
        if row is None:
            return None
        run = WorkflowRun.new(row.id, row.image_id, row.graph)
        run.state = row.state
        run.error = row.error
        run.created_at = row.created_at
        run.finished_at = row.finished_at
        for job in self.jobs(workflow_id):
            if job.kind == "qpu":
                run.qpu_jobs[job.id] = job
            elif job.step_id in run.steps:
                run.steps[job.step_id] = job
        return run
