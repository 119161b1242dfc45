"""Kernel-side connection to the orchestrator.

The client finds the orchestrator through the connection file in the Jupyter runtime folder. Where
none answers it starts one as a detached process (its own session, so it outlives the kernel and is
shared by every kernel of the user) and waits until it answers a ping. A request that times out
because the orchestrator died is sent again to a fresh one: requests are idempotent (the client
chooses workflow ids) and the orchestrator's state survives in SQLite.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from kernel_server.core.paths import qonductor_home
from kernel_server.wire.connection import ConnectionInfo, apply_client_keys, connection_file_path
from kernel_server.wire.envelope import (
    MAX_PAYLOAD_BYTES,
    EventSealer,
    check_size,
    decode,
    encode,
    new_request_id,
)
from kernel_server.wire.errors import ProtocolError, RemoteError
from kernel_server.wire.messages import ErrorReply, Event, Message, Ping, Pong, Shutdown


class OrchestratorUnavailable(RuntimeError):
    pass


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) answers kill(0) but is gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


@contextmanager
def _start_lock():
    """Serialise starting the orchestrator between kernels that all want one at once."""
    home = qonductor_home()
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_connection() -> ConnectionInfo | None:
    path = connection_file_path()
    try:
        return ConnectionInfo.read(path)
    except (OSError, ValueError, TypeError):
        return None


def ping(info: ConnectionInfo, timeout: float = 2.0) -> Pong | None:
    ctx: zmq.Context = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        apply_client_keys(sock, info)
        sock.connect(info.router)
        signer = info.signer()
        rid = new_request_id()
        sock.send_multipart(encode(Ping(), signer, rid))
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not sock.poll(int(left * 1000)):
                return None
            try:
                env = decode(sock.recv_multipart(), signer)
            except ProtocolError:
                continue
            if env.request_id == rid and isinstance(env.message, Pong):
                return env.message
        return None
    finally:
        sock.close()


def server_status(timeout: float = 2.0) -> dict[str, Any] | None:
    info = read_connection()
    if info is None or not pid_alive(info.pid):
        return None
    pong = ping(info, timeout)
    if pong is None:
        return None
    return {
        "pid": pong.pid,
        "router": info.router,
        "pub": info.pub,
        "uptime_s": time.time() - pong.started_at,
        "fleet": pong.fleet,
        "connection_file": str(connection_file_path()),
        "home": str(qonductor_home()),
    }


def start_server(
    fleet: str | None = None,
    timeout: float = 90.0,
    cluster: str | None = None,
    public_host: str | None = None,
) -> ConnectionInfo:
    """Return a live orchestrator's connection info, starting a detached one if none answers."""
    with _start_lock():
        info = read_connection()
        if info is not None and pid_alive(info.pid) and ping(info, 3.0) is not None:
            return info
        if info is not None and pid_alive(info.pid):
            # Alive but silent for 3 s: probably still starting up. Give it the full timeout.
            if _wait_ready(info.pid, timeout) is not None:
                return read_connection()  # type: ignore[return-value]
        home = qonductor_home()
        home.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "kernel_server"]
        if fleet:
            cmd += ["--fleet", fleet]
        if cluster:
            cmd += ["--cluster", cluster]
        if public_host:
            cmd += ["--public-host", public_host]
        log_path = home / "server.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
                cwd=str(home),
            )
        ready = _wait_ready(proc.pid, timeout, proc)
        if ready is None:
            if proc.poll() is not None:
                last = _last_line(log_path)
                raise OrchestratorUnavailable(
                    f"the orchestrator exited while starting ({last}); see {log_path}"
                )
            raise OrchestratorUnavailable(
                f"the orchestrator did not start within {timeout:.0f} s; see {log_path}"
            )
        return ready


def _last_line(log_path: Path) -> str:
    """The last non-empty line of the orchestrator's log: usually the error that ended it."""
    try:
        lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip()[:300] if lines else "no output"


def _wait_ready(
    pid: int, timeout: float, proc: subprocess.Popen | None = None
) -> ConnectionInfo | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return None
        info = read_connection()
        if info is not None and info.pid == pid and ping(info, 1.0) is not None:
            return info
        time.sleep(0.1)
    return None


def stop_server(timeout: float = 15.0) -> bool:
    """Ask the orchestrator to stop; kill it if it does not. True if one was running."""
    info = read_connection()
    if info is None or not pid_alive(info.pid):
        return False
    try:
        Client(autostart=False, info=info).request(Shutdown(), timeout=3.0)
    except (OrchestratorUnavailable, RemoteError):
        pass
    deadline = time.monotonic() + timeout
    while pid_alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(info.pid):
        os.kill(info.pid, 15)
    return True


class Client:
    """Request/reply over a DEALER socket; thread-safe; restarts a dead orchestrator."""

    def __init__(
        self, autostart: bool = True, info: ConnectionInfo | None = None, fleet: str | None = None
    ):
        self.autostart = autostart
        self.fleet = fleet
        self._info = info
        self._sock: zmq.Socket | None = None
        self._lock = threading.RLock()
        self.restarts = 0

    @property
    def info(self) -> ConnectionInfo:
        with self._lock:
            if self._info is None:
                self._connect()
            assert self._info is not None
            return self._info

    def _connect(self) -> None:
        info = read_connection()
        if info is None or not pid_alive(info.pid):
            if not self.autostart:
                raise OrchestratorUnavailable(
                    "no orchestrator is running; start one with `qonductor server start`"
                )
            info = start_server(self.fleet)
        self._set_info(info)

    def _set_info(self, info: ConnectionInfo) -> None:
        if self._sock is not None:
            self._sock.close()
        self._info = info
        self._signer = info.signer()
        self._sock = zmq.Context.instance().socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        apply_client_keys(self._sock, info)
        self._sock.connect(info.router)

    def _recover(self) -> None:
        """The orchestrator did not answer: reconnect to a live one or start a new one.

        A shared user's client (its connection file names a user) only ever reconnects with
        that file: falling back to this machine's owner connection file would carry on with
        the owner's authority.
        """
        if self._info is not None and self._info.user:
            if ping(self._info, 2.0) is None:
                raise OrchestratorUnavailable(
                    f"the shared orchestrator at {self._info.router} is not answering "
                    f"user {self._info.user!r}"
                )
            self._set_info(self._info)
            return
        info = read_connection()
        if info is not None and pid_alive(info.pid) and ping(info, 2.0) is not None:
            self._set_info(info)
            return
        if not self.autostart:
            raise OrchestratorUnavailable("the orchestrator is not answering")
        self.restarts += 1
        self._set_info(start_server(self.fleet))

    def request(self, message: Message, timeout: float = 30.0, retries: int = 2) -> Message:
        """Send a request, return the reply; RemoteError for an error reply."""
        with self._lock:
            if self._sock is None:
                if self._info is None:
                    self._connect()
                else:
                    self._set_info(self._info)
            for attempt in range(retries + 1):
                reply = self._try(message, timeout)
                if reply is not None:
                    if isinstance(reply, ErrorReply):
                        raise RemoteError(reply.type, reply.message)
                    return reply
                if attempt < retries:
                    self._recover()
            raise OrchestratorUnavailable(
                f"no reply to {message.op!r} after {retries + 1} attempts of {timeout:.0f} s"
            )

    def _try(self, message: Message, timeout: float) -> Message | None:
        assert self._sock is not None
        rid = new_request_id()
        frames = encode(message, self._signer, rid)
        check_size(frames, self._info.max_payload_bytes if self._info else MAX_PAYLOAD_BYTES)
        self._sock.send_multipart(frames)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            # Wake twice a second to notice a dead orchestrator long before the timeout.
            if not self._sock.poll(max(1, int(min(left, 0.5) * 1000))):
                if self._info is not None and not pid_alive(self._info.pid):
                    return None
                continue
            try:
                env = decode(self._sock.recv_multipart(), self._signer)
            except ProtocolError:
                continue
            if env.request_id == rid:
                return env.message
        return None

    def subscribe(
        self,
        callback: Callable[[Event], None],
        workflow_id: str = "",
    ) -> Subscription:
        return Subscription(self.info, callback, workflow_id)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


class Subscription:
    """Events from the orchestrator's PUB socket, delivered to a callback on a daemon thread."""

    def __init__(
        self, info: ConnectionInfo, callback: Callable[[Event], None], workflow_id: str = ""
    ):
        self._info = info
        self._callback = callback
        self._workflow_id = workflow_id
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="qonductor-events")
        self._thread.start()
        self._ready.wait(5.0)

    def _run(self) -> None:
        sock: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        # Events are sealed with their owner's key, on a topic derived from it: this key
        # subscribes to its own events only, and could open no one else's.
        sealer = EventSealer(self._info.key.encode())
        sock.setsockopt(zmq.SUBSCRIBE, sealer.topic)
        apply_client_keys(sock, self._info)
        sock.connect(self._info.pub)
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(100):
                    continue
                frames = sock.recv_multipart()
                try:
                    env = sealer.open(frames)
                except ProtocolError:
                    continue
                if isinstance(env.message, Event) and (
                    not self._workflow_id or env.message.workflow_id == self._workflow_id
                ):
                    try:
                        self._callback(env.message)
                    except Exception:  # a display callback must not kill the subscription
                        pass
        finally:
            sock.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


_default: Client | None = None


def get_client() -> Client:
    """The process-wide client (one per kernel)."""
    global _default
    if _default is None:
        _default = Client()
    return _default


def home() -> Path:
    return qonductor_home()
