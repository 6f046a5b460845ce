"""``AckWaiters``: sends waiting for replica acks, woken in end-offset order (upstream
``GroupTransferService``).

A SYNC_MASTER send waits until enough replicas acknowledged the offset just past its message. With
many sends in flight, waking every one of them on every ack (and having each re-check) costs a
wake-up per waiting send per ack; here waiters sit in a heap ordered by end offset and one
``notify()`` releases exactly those now acknowledged — acknowledgement is monotonic in the offset,
so the walk stops at the first waiter still short of acks.

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


class AckWaiters:
    """Waiters for ``acked(end_offset, need)``; call :meth:`notify` whenever acks may have moved."""

    def __init__(self, acked: Callable[[int, int], bool]) -> None:
        self.acked = acked
        #: set and replaced on every notify (level-triggered signal for other listeners)
        self.event = trio.Event()
        self._heap: list[tuple[int, int, int, trio.Event]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def notify(self) -> None:
        self.event.set()
        self.event = trio.Event()
        heap = self._heap
        acked = self.acked
        while heap:
            end, _, need, event = heap[0]
            if not event.is_set() and not acked(end, need):
                break
            heapq.heappop(heap)
            event.set()

    async def wait(self, end_offset: int, need: int, timeout: float) -> bool:
        """True once ``acked(end_offset, need)`` holds (checked at once and at each release),
        False after ``timeout`` seconds."""
        if self.acked(end_offset, need):
            return True
        with trio.move_on_after(timeout):
            while True:
                event = trio.Event()
                heapq.heappush(self._heap, (end_offset, next(self._seq), need, event))
                try:
                    await event.wait()
                finally:
                    if not event.is_set():
                        event.set()  # abandoned (timeout): dropped at the next release walk
                if self.acked(end_offset, need):
                    return True
        return False
