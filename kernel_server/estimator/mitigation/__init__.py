"""Error mitigation as pre- and post-processing of circuits: ZNE, PEC, REM, DD, Pauli twirling
and circuit cutting, composable into stacks ("twirl+rem+dd", "zne+rem").

Importing this package does not import mitiq (3-5 s) or qiskit-addon-cutting: each technique
imports them inside the functions that need them.
"""

from kernel_server.backends.compile import choose_layout, transpile_mitigated
from kernel_server.estimator.mitigation.base import (
    TECHNIQUES,
    Constructed,
    MitigationTechnique,
    Observable,
    Overhead,
    UnknownMitigation,
    expectation_value,
    get_technique,
    measurement_map,
)
from kernel_server.estimator.mitigation.cutting import Cutting
from kernel_server.estimator.mitigation.dd import DD
from kernel_server.estimator.mitigation.pec import PEC
from kernel_server.estimator.mitigation.rem import REM
from kernel_server.estimator.mitigation.run import (
    MitigatedRun,
    run_mitigated,
    run_mitigated_detailed,
)
from kernel_server.estimator.mitigation.stack import (
    MitigationPlan,
    MitigationStack,
    parse_stack,
)
from kernel_server.estimator.mitigation.twirling import Twirling
from kernel_server.estimator.mitigation.zne import ZNE

__all__ = [
    "DD",
    "PEC",
    "REM",
    "TECHNIQUES",
    "ZNE",
    "Constructed",
    "Cutting",
    "MitigatedRun",
    "MitigationPlan",
    "MitigationStack",
    "MitigationTechnique",
    "Observable",
    "Overhead",
    "Twirling",
    "UnknownMitigation",
    "choose_layout",
    "expectation_value",
    "get_technique",
    "measurement_map",
    "parse_stack",
    "run_mitigated",
    "run_mitigated_detailed",
    "transpile_mitigated",
]
