"""Raft messages between controller peers, carried by the remoting protocol.

Upstream's DLedger peers talk DLedger's own RPCs on the peer address in ``controllerDLegerPeers``,
the same port brokers use for the controller API. We do the same with one private request code:
each Raft message (msgpack bytes from :mod:`controller.raft.messages`) is the body of a oneway
request ``RAFT_MESSAGE`` sent to the peer's address; the receiving controller hands the body to
``RaftDriver.receive``. Upstream clients never send this code.

:meth:`RemotingRaftTransport.send` never blocks: messages go to a bounded per-peer queue drained by
one sender task per peer. When a send fails (peer down, connection refused) the queued backlog
for that peer is dropped — Raft retransmits whatever still matters.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from controller.raft.driver import RaftDriver
from remoting.client import RemotingClient
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError

log = logging.getLogger("controller.raft.transport")

#: Private request code for Raft traffic (not an upstream code; upstream's jRaft internals use 1014–1018).
RAFT_MESSAGE = 19001
#: Messages queued per peer before new ones are dropped.
QUEUE_LIMIT = 4096
SEND_TIMEOUT = 1.0


class RemotingRaftTransport:
    """The Raft driver's ``Transport`` over a :class:`~remoting.client.RemotingClient`."""

    def __init__(self, client: RemotingClient, self_id: str, peers: dict[str, str]) -> None:
        self.client = client
        self.self_id = self_id
        self.peers = {pid: addr for pid, addr in peers.items() if pid != self_id}
        self._queues: dict[str, tuple[trio.MemorySendChannel[bytes], trio.MemoryReceiveChannel[bytes]]] = {
            pid: trio.open_memory_channel[bytes](QUEUE_LIMIT) for pid in self.peers
        }
        self.dropped = 0

    async def send(self, to_id: str, msg_bytes: bytes) -> None:
        queue = self._queues.get(to_id)
        if queue is None:
            log.warning("raft message to unknown peer %r dropped", to_id)
            return
        try:
            queue[0].send_nowait(msg_bytes)
        except trio.WouldBlock:
            self.dropped += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver queued messages until cancelled (needs the client running)."""
        async with trio.open_nursery() as nursery:
            for pid in self.peers:
                nursery.start_soon(self._sender, pid)
            task_status.started()

    async def _sender(self, peer_id: str) -> None:
        address = self.peers[peer_id]
        receive = self._queues[peer_id][1]
        failing = False
        async for data in receive:
            cmd = request(RAFT_MESSAGE, {"from": self.self_id}, data)
            try:
                await self.client.invoke_oneway(address, cmd, SEND_TIMEOUT)
            except RemotingError as exc:
                if not failing:
                    log.info("raft peer %s at %s unreachable: %s", peer_id, address, exc)
                failing = True
                while True:  # drop the backlog; Raft resends what still matters
                    try:
                        receive.receive_nowait()
                    except trio.WouldBlock:
                        break
                    self.dropped += 1
                continue
            if failing:
                log.info("raft peer %s at %s reachable again", peer_id, address)
                failing = False


def raft_message_handler(driver: RaftDriver) -> Any:
    """The remoting handler for RAFT_MESSAGE: hand the body to the driver (oneway, no answer)."""

    async def handle(ctx: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        driver.receive(cmd.body_bytes)
        return None

    return handle
