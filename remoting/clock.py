"""Clocks in milliseconds, for the components that take ``now_ms``-style callables."""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from remoting.log_owner import LOG_OWNER


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (stored and shown timestamps)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock that no wall-clock step moves (nor a suspend, on Linux): for
    durations -- liveness, expiry -- that must not jump with NTP or a laptop's resume."""
    return time.monotonic_ns() // 1_000_000


#: how often :meth:`AwakeClock.run` reads its clock, and how long a gap between two readings must
#: be to count as time the process was away (a busy loop delays the reader by far less)
AWAKE_TICK_MS = 100
AWAKE_PAUSE_MS = 500


class AwakeClock:
    """Milliseconds this process was running: ``base`` (a monotonic ms clock) less the spells in
    which it did not run -- stopped (SIGSTOP, a shell's Ctrl-Z), its event loop blocked, its VM
    paused. Liveness judged on it does not count the judge's own absence against the peers it
    could not hear meanwhile: a controller back from a pause does not expire every broker at its
    next scan (and try to elect masters that are alive and about to heartbeat).

    :meth:`run` reads the clock every ``AWAKE_TICK_MS``; a reading more than ``AWAKE_PAUSE_MS``
    after the previous one (by anyone) leaves the excess out. Without :meth:`run` any quiet spell
    longer than that would be left out too: only a component that runs it may use the clock.
    ``on_pause(ms)`` is told of every spell left out -- in whichever task read the clock first
    after it, so with no log owner (:mod:`remoting.log_owner`): the record is the process's, not
    that task's broker's."""

    def __init__(self, base: Callable[[], float], on_pause: Callable[[float], None] | None = None) -> None:
        self._base = base
        self._on_pause = on_pause
        self._last: float | None = None
        self._lost: float = 0

    def __call__(self) -> float:
        now = self._base()
        last = self._last
        if last is not None and now - last > AWAKE_PAUSE_MS:
            lost = now - last - AWAKE_TICK_MS
            self._lost += lost
            if self._on_pause is not None:
                token = LOG_OWNER.set("")
                try:
                    self._on_pause(lost)
                finally:
                    LOG_OWNER.reset(token)
        self._last = now
        return now - self._lost

    async def run(self) -> None:
        """Read the clock every ``AWAKE_TICK_MS`` until cancelled."""
        while True:
            self()
            await trio.sleep(AWAKE_TICK_MS / 1000)


class TimeSlice:
    """Lets a long loop of synchronous steps on the event loop share it: ``await slice.tick()``
    after each step yields to the other tasks once ``seconds`` passed since the last yield (or
    after ``every`` steps, when given) -- a pass over tens of thousands of consume queues, say."""

    def __init__(self, seconds: float, every: int = 0) -> None:
        self.seconds = seconds
        self.every = every
        self._steps = 0
        self._since = time.perf_counter()

    async def tick(self) -> None:
        self._steps += 1
        if (self.every and self._steps >= self.every) or time.perf_counter() - self._since > self.seconds:
            await trio.lowlevel.checkpoint()
            self._steps = 0
            self._since = time.perf_counter()
