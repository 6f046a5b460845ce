"""Clocks in milliseconds, for the components that take ``now_ms``-style callables."""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (stored and shown timestamps)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock that no wall-clock step moves (nor a suspend, on Linux): for
    durations -- liveness, expiry -- that must not jump with NTP or a laptop's resume."""
    return time.monotonic_ns() // 1_000_000
