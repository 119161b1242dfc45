"""User settings of the magics, as traitlets: ``%config Qonductor.default_priority = "jct"``.

Also settable in ``ipython_config.py`` / ``jupyter_notebook_config`` as ``c.Qonductor.<name>``.
A cell's own options (``--priority``, ``--shots``, ...) win over these defaults.
"""

from __future__ import annotations

from traitlets import Bool, Bunch, Enum, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from kernel_server.core.circuits import DEFAULT_SHOTS, check_shots
from kernel_server.core.deployment import PRIORITIES


class Qonductor(Configurable):
    default_priority = Enum(
        PRIORITIES,
        default_value="balanced",
        help="What QPU placement favours when a cell gives no --priority.",
    ).tag(config=True)
    default_shots = Int(
        DEFAULT_SHOTS, help="Shots per circuit when a cell gives no --shots and sample() none."
    ).tag(config=True)
    default_plan = Unicode(
        "auto", help="Resource plan when a cell gives no --plan: auto, off or a plan number."
    ).tag(config=True)
    placement = Unicode(
        None,
        allow_none=True,
        help="QPU placement policy (default: the orchestrator's, the NSGA-II cycle scheduler).",
    ).tag(config=True)
    live_status = Bool(
        True, help="Show the live job-status widget while a cell waits (where widgets render)."
    ).tag(config=True)
    timeout = Float(
        None, allow_none=True, help="Seconds a waiting cell gives up after (the workflow goes on)."
    ).tag(config=True)

    @validate("default_shots")
    def _positive_shots(self, proposal: Bunch) -> int:
        try:
            return check_shots(proposal["value"], "default_shots") or DEFAULT_SHOTS
        except (TypeError, ValueError) as exc:
            raise TraitError(str(exc)) from None

    @validate("default_plan")
    def _known_plan(self, proposal: Bunch) -> str:
        value = str(proposal["value"]).strip().lower()
        if value not in ("auto", "ask", "off") and not value.isdigit():
            raise TraitError(f"default_plan is auto, ask, off or a plan number, got {value!r}")
        return value

    @validate("timeout")
    def _positive_timeout(self, proposal: Bunch) -> float | None:
        value = proposal["value"]
        if value is not None and value <= 0:
            raise TraitError(f"timeout must be positive (or None), got {value}")
        return value
