"""Write coalescing for :mod:`remoting.connection`: responses queued by connections during one trio
scheduler batch are written after it, back to back (see that module's docstring for why).

One :class:`Flusher` per trio run, a system task started on first use; a connection hands it its
queued frames with :meth:`Flusher.add` and the flusher calls the connection's ``write_queued``.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio

__all__ = ["FLUSH_DELAY_LIMIT", "Flusher", "QueuedWriter", "flusher"]


class QueuedWriter(Protocol):
    def write_queued(self) -> None:
        """Write the frames queued so far without awaiting."""


#: Longest a response waits for the rest of its scheduler batch (seconds of CPU time, not a
#: protocol interval: it bounds how long a very long batch -- many connections at once -- holds
#: back the responses produced early in it; measured on the broker bench, 200 µs keeps nearly
#: all of the gain of writing at batch end).
FLUSH_DELAY_LIMIT = 200e-6


class Flusher:
    """Writes the responses queued by connections during one scheduler batch, after it, or as
    soon as the first of them has waited ``FLUSH_DELAY_LIMIT``. One per trio run, a system task;
    when it is gone (the run is ending), :meth:`add` refuses and connections write at once."""

    __slots__ = ("done", "first_at", "pending", "task", "woken")

    def __init__(self) -> None:
        self.pending: list[QueuedWriter] = []
        self.first_at = 0.0
        self.task: trio.lowlevel.Task | None = None
        self.woken = False
        self.done = False

    def add(self, conn: QueuedWriter) -> bool:
        """Take ``conn``'s queued frames for writing; False when the caller must write them now."""
        if self.done:
            return False
        if not self.pending:
            self.first_at = time.perf_counter()
        elif time.perf_counter() - self.first_at > FLUSH_DELAY_LIMIT:
            conns, self.pending = self.pending, []
            for queued in conns:
                queued.write_queued()
            return False  # the caller writes its own at once
        self.pending.append(conn)
        if not self.woken and self.task is not None:
            self.woken = True
            trio.lowlevel.reschedule(self.task)
        return True

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self.done = True  # cancelled: the run is ending, so connections write at once from now on
        return trio.lowlevel.Abort.SUCCEEDED

    async def run(self) -> None:
        self.task = trio.lowlevel.current_task()
        try:
            while True:
                if not self.pending:
                    self.woken = False
                    await trio.lowlevel.wait_task_rescheduled(self._abort)
                    continue
                conns, self.pending = self.pending, []
                # Still woken while writing: a connection added meanwhile must not reschedule this
                # running task; the loop looks at pending again before it waits.
                self.woken = True
                for conn in conns:
                    conn.write_queued()
        finally:
            self.done = True
            conns, self.pending = self.pending, []
            for conn in conns:
                conn.write_queued()


_FLUSHER: trio.lowlevel.RunVar[Flusher] = trio.lowlevel.RunVar("remoting.flusher")


def flusher() -> Flusher:
    """The current trio run's flusher (started on first use)."""
    current = _FLUSHER.get(None)
    if current is None:
        current = Flusher()
        _FLUSHER.set(current)
        trio.lowlevel.spawn_system_task(current.run, name="remoting.flusher")
    return current
