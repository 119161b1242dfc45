"""Named fleets, resolved without importing qiskit (the names are checked when devices load)."""

from __future__ import annotations


def resolve_fleet(spec: str) -> list[str]:
    from kernel_server.backends.devices import DEFAULT_FLEET, SMALL_FLEET

    spec = spec.strip()
    if spec in ("", "default"):
        return list(DEFAULT_FLEET)
    if spec == "small":
        return list(SMALL_FLEET)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError(f"empty fleet specification {spec!r}")
    return names
