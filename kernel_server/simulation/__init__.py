"""Discrete-event simulation of a quantum cloud that runs the real scheduler (paper section 8)."""
