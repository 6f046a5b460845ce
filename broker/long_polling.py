"""Held pull requests (upstream ``PullRequestHoldService``).

A pull that finds nothing new and carries the suspend flag is parked here instead of answered.
It is re-run (without suspending again) when the store dispatches a message to its queue or when
its hold time ends; the re-run answers on the original connection.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from remoting.command import RemotingCommand

log = logging.getLogger("broker.longpoll")


@dataclass(order=True)
class HeldPull:
    deadline: float
    seq: int
    key: tuple[str, int] = field(compare=False)
    pull_from_offset: int = field(compare=False)
    ctx: object = field(compare=False)  # remoting.connection.RequestContext
    request: RemotingCommand = field(compare=False)


#: Re-runs a held request; it must answer (or drop) the request itself.
Rerun = Callable[[object, RemotingCommand], Awaitable[None]]


class PullRequestHoldService:
    """Parks pulls per (topic, queue id); wakes them on arrival or timeout."""

    def __init__(self, rerun: Rerun, *, check_interval: float = 5.0) -> None:
        self.rerun = rerun
        self.check_interval = check_interval
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._seq = 0
        self._wake_send, self._wake_recv = trio.open_memory_channel[list[HeldPull]](10_000)
        self._timer_changed = trio.Event()
        self._next_deadline = float("inf")

    def hold(
        self,
        topic: str,
        queue_id: int,
        pull_from_offset: int,
        timeout: float,
        ctx: object,
        request: RemotingCommand,
    ) -> None:
        self._seq += 1
        deadline = trio.current_time() + timeout
        held = HeldPull(deadline, self._seq, (topic, queue_id), pull_from_offset, ctx, request)
        self._held.setdefault((topic, queue_id), []).append(held)
        if deadline < self._next_deadline:
            self._next_deadline = deadline
            self._timer_changed.set()

    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called by the store's dispatch: wake the pulls of this queue that can now find something."""
        self._wake(topic, queue_id, max_offset)

    def wake_queue(self, topic: str, queue_id: int) -> None:
        """Re-run every pull held on the queue now (an admin reset offsets of the queue: the
        group's consumers are answered at once, not when their hold ends)."""
        self._wake(topic, queue_id, None)

    def _wake(self, topic: str, queue_id: int, max_offset: int | None) -> None:
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        ready = [h for h in waiting if max_offset is None or max_offset > h.pull_from_offset]
        if not ready:
            return
        rest = [h for h in waiting if max_offset is not None and max_offset <= h.pull_from_offset]
        if rest:
            self._held[(topic, queue_id)] = rest
        else:
            del self._held[(topic, queue_id)]
        try:
            self._wake_send.send_nowait(ready)
        except trio.WouldBlock:
            # Far too many wake-ups queued: put them back, the timeout path will answer them.
            self._held.setdefault((topic, queue_id), []).extend(ready)

    def _expired(self, now: float) -> list[HeldPull]:
        out: list[HeldPull] = []
        nxt = float("inf")
        for key in list(self._held):
            keep = []
            for h in self._held[key]:
                if h.deadline <= now:
                    out.append(h)
                else:
                    keep.append(h)
                    nxt = min(nxt, h.deadline)
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
        self._next_deadline = nxt
        return out

    async def _run_one(self, h: HeldPull) -> None:
        try:
            await self.rerun(h.ctx, h.request)
        except Exception:
            log.exception("re-running held pull for %s failed", h.key)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:

            async def wakeups() -> None:
                async for batch in self._wake_recv:
                    for h in batch:
                        nursery.start_soon(self._run_one, h)

            nursery.start_soon(wakeups)
            task_status.started()
            try:
                while True:
                    self._timer_changed = trio.Event()
                    with trio.move_on_at(min(self._next_deadline, trio.current_time() + self.check_interval)):
                        await self._timer_changed.wait()
                    for h in self._expired(trio.current_time()):
                        nursery.start_soon(self._run_one, h)
            finally:
                # Shutting down: held requests are dropped; clients time out and re-pull elsewhere.
                self._held.clear()
