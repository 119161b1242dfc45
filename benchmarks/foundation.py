"""The foundation issue's figures in one run.

    python benchmarks/foundation.py

1. A 5-qubit, 4000-shot GHZ cell through %%qonductor against the same circuit run directly on Aer
   (overhead ratio and fixed cost), on the default 8-QPU fleet.
2. The fleet's noisy execution path against ``AerSimulator.from_backend`` on a 12-qubit GHZ, 4000
   shots, FakeSherbrooke and FakeKolkata (time and Hellinger fidelity over several seeds).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ghz_from_backend  # noqa: E402
import overhead  # noqa: E402


def main() -> int:
    print("=" * 78)
    print("1. %%qonductor cell vs the same circuit directly on Aer")
    print("=" * 78, flush=True)
    sys.argv = [sys.argv[0]]
    overhead.main(["--fleets", "default"])
    print()
    print("=" * 78)
    print("2. Fleet noisy execution vs AerSimulator.from_backend")
    print("=" * 78, flush=True)
    ghz_from_backend.main(["--seeds", "5"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
