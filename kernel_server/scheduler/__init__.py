"""Quantum and classical scheduling of the orchestrator (paper §7).

The names outside code relies on: the scheduling problem of one cycle and its NSGA-II solver with
pseudo-weights selection. The rest lives in the submodules (``cycle``, ``policies``, ``dispatch``,
``classical``).
"""

from kernel_server.core.mcdm import PREFERENCES
from kernel_server.scheduler.nsga2 import ScheduleResult, nsga2_schedule
from kernel_server.scheduler.problem import SchedulingError, SchedulingProblem

__all__ = [
    "PREFERENCES",
    "ScheduleResult",
    "SchedulingError",
    "SchedulingProblem",
    "nsga2_schedule",
]
