"""In-memory transport for tests and simulations: every peer in one trio run.

The remoting-based transport (a private request code on the controller port carrying
msgpack Raft messages) lives with the controller wiring; it only has to implement
:class:`~controller.raft.driver.Transport`'s single ``send`` method and call
``driver.receive(bytes)`` for what arrives.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import trio

Receiver = Callable[[bytes], None]


class MemoryNetwork:
    """Connects in-process drivers. Optional faults, all drawn from ``rng``: message loss
    (``drop_rate``), duplication (``dup_rate``) and uniform random delays up to ``max_delay``
    seconds (which also reorder). Links can be cut one way (:meth:`cut`) or by partition.

    Delayed delivery needs :meth:`run` started in a nursery; with ``max_delay == 0`` messages
    are handed over synchronously inside ``send``.
    """

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        drop_rate: float = 0.0,
        dup_rate: float = 0.0,
        max_delay: float = 0.0,
    ) -> None:
        self.rng = rng or random.Random(0)
        self.drop_rate = drop_rate
        self.dup_rate = dup_rate
        self.max_delay = max_delay
        self._receivers: dict[str, Receiver] = {}
        self._cut: set[tuple[str, str]] = set()
        self._send_channel, self._recv_channel = trio.open_memory_channel[tuple[float, str, str, bytes]](
            float("inf")
        )
        self.delivered = 0

    def transport(self, node_id: str) -> MemoryTransport:
        return MemoryTransport(self, node_id)

    def attach(self, node_id: str, receiver: Receiver) -> None:
        """Deliver messages addressed to ``node_id`` to ``receiver`` (e.g. ``driver.receive``)."""
        self._receivers[node_id] = receiver

    def detach(self, node_id: str) -> None:
        """Messages to ``node_id`` are lost until it is attached again (a crashed process)."""
        self._receivers.pop(node_id, None)

    def cut(self, frm: str, to: str) -> None:
        self._cut.add((frm, to))

    def partition(self, *groups: set[str] | list[str]) -> None:
        """Only peers within the same group can talk (replaces earlier cuts)."""
        self._cut.clear()
        where = {peer: i for i, group in enumerate(groups) for peer in group}
        for a, ga in where.items():
            for b, gb in where.items():
                if ga != gb:
                    self._cut.add((a, b))

    def isolate(self, node_id: str) -> None:
        for other in self._receivers:
            if other != node_id:
                self._cut.add((node_id, other))
                self._cut.add((other, node_id))

    def heal(self) -> None:
        self._cut.clear()

    def send(self, frm: str, to: str, data: bytes) -> None:
        rng = self.rng
        if self.drop_rate and rng.random() < self.drop_rate:
            return
        copies = 2 if self.dup_rate and rng.random() < self.dup_rate else 1
        for _ in range(copies):
            if self.max_delay:
                at = trio.current_time() + rng.uniform(0, self.max_delay)
                self._send_channel.send_nowait((at, frm, to, data))
            else:
                self._deliver(frm, to, data)

    def _deliver(self, frm: str, to: str, data: bytes) -> None:
        if (frm, to) in self._cut:
            return
        receiver = self._receivers.get(to)
        if receiver is not None:
            self.delivered += 1
            receiver(data)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver delayed messages at their time, until cancelled."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            async for at, frm, to, data in self._recv_channel:
                nursery.start_soon(self._deliver_at, at, frm, to, data)

    async def _deliver_at(self, at: float, frm: str, to: str, data: bytes) -> None:
        await trio.sleep_until(at)
        self._deliver(frm, to, data)


class MemoryTransport:
    """One peer's view of a :class:`MemoryNetwork` (implements the driver's Transport)."""

    def __init__(self, network: MemoryNetwork, node_id: str) -> None:
        self.network = network
        self.node_id = node_id

    async def send(self, to_id: str, msg_bytes: bytes) -> None:
        self.network.send(self.node_id, to_id, msg_bytes)
