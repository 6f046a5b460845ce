"""``AckWaiters``: sends waiting for replica acks, woken in end-offset order (upstream
``GroupTransferService``).

A SYNC_MASTER send waits until enough replicas acknowledged the offset just past its message. With
many sends in flight, waking every one of them on every ack (and having each re-check) costs a
wake-up per waiting send per ack; here waiters sit in a heap ordered by end offset and one
``notify()`` releases exactly those now acknowledged — acknowledgement is monotonic in the offset,
so the walk stops at the first waiter still short of acks. Deadlines are kept in a second heap and
served by one task (:meth:`run`, which the owner starts) instead of a timer per waiting send.

``acked(end_offset, need)`` is the owner's test (``need`` is what the waiter asked for, e.g.
``inSyncReplicas``); it may also answer True when waiting makes no sense any more (no master role):
the woken waiter then looks at the state itself. ``event`` / ``notify()`` have the shape of the HA
service's ack signal, so an instance can stand in for it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import trio


class _Waiter:
    __slots__ = ("acked", "end", "event", "need")

    def __init__(self, end: int, need: int) -> None:
        self.end = end
        self.need = need
        self.acked = False
        self.event = trio.Event()


class AckWaiters:
    """Waiters for ``acked(end_offset, need)``; call :meth:`notify` whenever acks may have moved, and
    run :meth:`run` (the deadlines) in a nursery."""

    def __init__(self, acked: Callable[[int, int], bool]) -> None:
        self.acked = acked
        #: set and replaced on every notify (level-triggered signal for other listeners)
        self.event = trio.Event()
        self._by_end: list[tuple[int, int, _Waiter]] = []
        self._by_deadline: list[tuple[float, int, _Waiter]] = []
        self._seq = itertools.count()
        self._deadlines_changed = trio.Event()

    def __len__(self) -> int:
        """Waiters not released yet."""
        return sum(1 for _, _, w in self._by_end if not w.event.is_set())

    def notify(self) -> None:
        self.event.set()
        self.event = trio.Event()
        heap = self._by_end
        acked = self.acked
        while heap:
            waiter = heap[0][2]
            if not waiter.event.is_set():
                if not acked(waiter.end, waiter.need):
                    break
                waiter.acked = True
                waiter.event.set()
            heapq.heappop(heap)

    async def wait(self, end_offset: int, need: int, timeout: float) -> bool:
        """True once ``acked(end_offset, need)`` holds (checked at once and at each ``notify``),
        False when ``timeout`` seconds passed first."""
        if self.acked(end_offset, need):
            return True
        waiter = _Waiter(end_offset, need)
        seq = next(self._seq)
        heapq.heappush(self._by_end, (end_offset, seq, waiter))
        deadline = trio.current_time() + timeout
        deadlines = self._by_deadline
        if not deadlines or deadline < deadlines[0][0]:
            self._deadlines_changed.set()
        heapq.heappush(deadlines, (deadline, seq, waiter))
        await waiter.event.wait()
        return waiter.acked

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Release waiters whose deadline passed (with False); runs until cancelled."""
        task_status.started()
        deadlines = self._by_deadline
        while True:
            while deadlines and deadlines[0][2].event.is_set():
                heapq.heappop(deadlines)
            changed = self._deadlines_changed = trio.Event()
            with trio.move_on_at(deadlines[0][0] if deadlines else float("inf")):
                await changed.wait()
            now = trio.current_time()
            while deadlines and deadlines[0][0] <= now:
                waiter = heapq.heappop(deadlines)[2]
                if not waiter.event.is_set():
                    waiter.event.set()
