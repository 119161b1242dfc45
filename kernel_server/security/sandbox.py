"""What confines a shared orchestrator's user's step processes: Linux Landlock and a clean slate.

A user's classical and hybrid steps run their own code in processes of their own (one pool per
user, ``compute.LocalCompute``). Before the first step, each such process confines itself:

* **Files.** A Landlock ruleset (Linux 5.13+, unprivileged) lets it read only what Python needs
  to import and run (the interpreter's prefixes, ``sys.path``, the system's libraries and
  configuration, ``/proc``, ``/sys`` and ``/dev``) and write only its user's scratch folder (its
  ``HOME``, ``TMPDIR`` and working directory) and ``/dev/shm``. The orchestrator's home (its
  database, keys, users' files and results) and its runtime folder are outside both.
* **Other processes.** A Landlock domain cannot ptrace processes outside it, which also closes
  ``/proc/<pid>/mem`` and ``/proc/<pid>/environ`` of the orchestrator and of other users' steps;
  from ABI 6 on, it cannot signal them either.
* **Environment.** The process keeps only harmless variables (``PATH``, locale, thread counts),
  and the environment block it was started with is wiped, so ``/proc/self/environ`` shows no
  more than ``os.environ``.

Landlock restricts the process and its children, can only be tightened, and needs no privileges
(``no_new_privs`` is set first, as the kernel requires). Where it is missing (another OS, an old
kernel, a kernel without it in its LSM list) ``Sandbox.enter`` says so in the log and the steps
run unconfined: ``available()`` tells, and docs/security.md says what that leaves open.

Syscall numbers and flags are from ``<linux/landlock.h>`` (the same on x86-64 and arm64).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("kernel_server.sandbox")

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (LANDLOCK_ACCESS_FS_*), by the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
# Rights that apply to a file (not a directory) in a rule.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# LANDLOCK_SCOPE_SIGNAL (ABI 6): no signals to processes outside the domain.
_SCOPE_SIGNAL = 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK
WRITE |= MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE

# What Python and its libraries read outside the interpreter's own folders.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys")
# Variables a step keeps; everything else of the orchestrator's environment is dropped.
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
            "MKL_NUM_THREADS", "PYTHONHASHSEED")  # fmt: skip


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none here)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(
            _CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION
        )
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def available() -> bool:
    return abi_version() >= 1


class SandboxError(RuntimeError):
    """The sandbox could not be set up as asked; the process must not run user code."""


@dataclass(frozen=True)
class Sandbox:
    """How one user's step processes are confined (picklable: it is a pool initializer's
    argument). ``forbidden``: folders that must stay out of reach (the orchestrator's home and
    runtime folder); a readable path that contains one is refused rather than allowed."""

    user: str
    scratch: str
    forbidden: tuple[str, ...]
    readable: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def for_user(cls, user: str, scratch: Path, forbidden: list[Path]) -> Sandbox:
        scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *SYSTEM_READ}
        roots |= {p for p in sys.path if p}
        resolved = sorted({str(Path(p).resolve()) for p in roots if Path(p).exists()})
        forbidden_resolved = tuple(str(Path(f).resolve()) for f in forbidden)
        readable = tuple(p for p in resolved if not _contains_any(p, forbidden_resolved))
        return cls(user, str(scratch.resolve()), forbidden_resolved, readable)

    def rules(self) -> list[tuple[str, int]]:
        """(path, rights) for every rule of the ruleset."""
        rules = [(p, READ) for p in self.readable]
        rules += [("/dev", READ | WRITE_FILE | IOCTL_DEV), (self.scratch, WRITE)]
        if os.path.isdir("/dev/shm"):  # multiprocessing's semaphores and shared memory
            rules.append(("/dev/shm", WRITE))
        return rules

    def enter(self) -> None:
        """Confine this process for good (see the module's docstring)."""
        _clean_environment(self.scratch)
        os.chdir(self.scratch)
        abi = abi_version()
        if abi < 1:
            log.warning(
                "Landlock is not available here: %s's steps run without a file sandbox", self.user
            )
            return
        self._restrict(abi)

    def _restrict(self, abi: int) -> None:
        libc = _libc()
        handled = _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= abi)]
        attr = _RulesetAttr(handled, 0, _SCOPE_SIGNAL if abi >= 6 else 0)
        size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 8 if abi < 4 else 16
        ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
        if ruleset < 0:
            raise SandboxError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
        try:
            for path, rights in self.rules():
                self._allow(libc, ruleset, path, rights & handled)
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise SandboxError(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
            if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), 0) != 0:
                raise SandboxError(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(ruleset)

    @staticmethod
    def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # gone since the rules were made: nothing to allow
        try:
            if not os.path.isdir(path):
                rights &= _FILE_RIGHTS
            rule = _PathBeneathAttr(rights, fd)
            if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), _RULE_PATH_BENEATH,
                            ctypes.byref(rule), 0) != 0:  # fmt: skip
                raise SandboxError(f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)


def _contains_any(path: str, folders: tuple[str, ...]) -> bool:
    """True if ``path`` is one of ``folders`` or a folder above one."""
    return any(f == path or f.startswith(path.rstrip("/") + "/") for f in folders)


def _clean_environment(scratch: str) -> None:
    """Keep only KEPT_ENV (plus HOME and TMPDIR in the scratch folder), and wipe the block the
    process was started with, which ``/proc/self/environ`` would still show."""
    kept = {k: v for k, v in os.environ.items() if k in KEPT_ENV or k.startswith("LC_")}
    wipe_initial_environment()
    os.environ.clear()
    os.environ.update(kept, HOME=scratch, TMPDIR=scratch)


def wipe_initial_environment() -> None:
    """Overwrite the environment block this process was started with, keeping ``os.environ``.

    ``/proc/<pid>/environ`` shows that block, not the live environment, and Landlock does not
    hide it from other processes of the same account; a variable such as an IBM token would
    stay readable there for the process's lifetime. The orchestrator calls this at start.
    """
    live = dict(os.environ)
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        # Fields 50 and 51 of /proc/<pid>/stat (env_start, env_end), counted after the name.
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return
    if 0 < start < end:
        libc = _libc()
        libc.clearenv()  # C's environ points into that block: let go of it first
        ctypes.memset(start, 0, end - start)
        for key, value in live.items():  # C's environ again, in fresh memory
            os.putenv(key, value)
