"""The IBM Quantum account: from the environment or a saved account, never from code.

Apart from the devices (``ibm``) so that the fleet's device loader (``devices``), which resolves
"ibm_*" names through the account, does not import the IBM device code that itself loads fakes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qiskit_ibm_runtime import QiskitRuntimeService

logger = logging.getLogger("kernel_server.backends.ibm")

# The channels an account may use in qiskit-ibm-runtime 0.51 (accounts.Account.create_account);
# the legacy "ibm_quantum" channel is gone and "local" is local testing mode, not an account.
CHANNELS: tuple[str, ...] = ("ibm_quantum_platform", "ibm_cloud")
DEFAULT_CHANNEL = "ibm_quantum_platform"

# Where QiskitRuntimeService.save_account() writes. saved_accounts() creates an empty file there
# when none exists, so it is only asked once the file is present.
ACCOUNTS_FILE = Path.home() / ".qiskit" / "qiskit-ibm.json"
# The names save_account() gives default accounts, tried before any other saved account.
_DEFAULT_ACCOUNT_NAMES = ("default-ibm-quantum-platform", "default-ibm-cloud", "default")

NO_ACCOUNT_MESSAGE = (
    "no IBM Quantum account: set QISKIT_IBM_TOKEN or save one with "
    "QiskitRuntimeService.save_account(...)"
)


class NoIBMAccountError(RuntimeError):
    """Real IBM devices were asked for, and no account is configured."""


# --- account -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IBMAccount:
    """Where the IBM Quantum credentials come from. Building it makes no network call."""

    source: str  # "env" or "saved:<name>"
    channel: str
    instance: str | None = None
    # Only set for "env": a saved account is loaded by name, so its token stays in the file.
    token: str | None = field(default=None, repr=False)

    def service_kwargs(self) -> dict[str, Any]:
        """What QiskitRuntimeService is built from: a saved account by name (its token stays in
        the file), or the environment's channel, token and instance."""
        if self.source.startswith("saved:"):
            return {"name": self.source.removeprefix("saved:"), "filename": str(ACCOUNTS_FILE)}
        return {"channel": self.channel, "token": self.token, "instance": self.instance}

    def service(self) -> QiskitRuntimeService:
        """Connect to IBM Quantum (the first network call)."""
        from qiskit_ibm_runtime import QiskitRuntimeService

        return QiskitRuntimeService(**self.service_kwargs())


def ibm_account() -> IBMAccount | None:
    """The account from the environment (``QISKIT_IBM_TOKEN``, ``QISKIT_IBM_CHANNEL``,
    ``QISKIT_IBM_INSTANCE``), else a saved one, else None."""
    token = os.environ.get("QISKIT_IBM_TOKEN")
    if token:
        channel = os.environ.get("QISKIT_IBM_CHANNEL") or DEFAULT_CHANNEL
        if channel not in CHANNELS:
            raise ValueError(
                f"QISKIT_IBM_CHANNEL={channel!r} is not an IBM Quantum channel; "
                f"use one of {', '.join(CHANNELS)} (local testing mode needs no account)"
            )
        instance = os.environ.get("QISKIT_IBM_INSTANCE") or None
        return IBMAccount(source="env", channel=channel, instance=instance, token=token)
    return _saved_account()


def _saved_account() -> IBMAccount | None:
    if not ACCOUNTS_FILE.is_file():
        return None
    from qiskit_ibm_runtime import QiskitRuntimeService

    try:
        saved = QiskitRuntimeService.saved_accounts(filename=str(ACCOUNTS_FILE))
    except Exception as exc:  # a malformed file: report its kind only, it holds tokens
        logger.warning("IBM Quantum account file unreadable (%s)", type(exc).__name__)
        return None
    names = [n for n in _DEFAULT_ACCOUNT_NAMES if n in saved]
    names += sorted(n for n in saved if n not in _DEFAULT_ACCOUNT_NAMES)
    for name in names:
        channel = saved[name].get("channel")
        if channel in CHANNELS:
            return IBMAccount(
                source=f"saved:{name}", channel=channel, instance=saved[name].get("instance")
            )
    return None


# --- one device ----------------------------------------------------------------------------------
