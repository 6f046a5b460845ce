"""Raft messages between controller peers, carried by the remoting protocol.

Upstream's DLedger peers talk DLedger's own RPCs on the peer address in ``controllerDLegerPeers``,
the same port brokers use for the controller API. We do the same with one private request code:
each Raft message (msgpack bytes from :mod:`controller.raft.messages`) is the body of a oneway
request ``RAFT_MESSAGE`` sent to the peer's address, with extFields ``group`` (the sender's
``controllerDLegerGroup``) and ``from`` (its ``controllerDLegerSelfId``). The receiving controller
hands the body to ``RaftDriver.receive`` only when the group is its own and the sender is one of
its other peers; anything else (a peer of another group whose address list points here, a stray
id) is dropped with a warning, so a misconfigured peer cannot disturb this group's log. Upstream
clients never send this code.

:meth:`RemotingRaftTransport.send` never blocks: messages go to a bounded per-peer queue drained by
one sender task per peer. When a send fails (peer down, connection refused) the queued backlog
for that peer is dropped — Raft retransmits whatever still matters.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import trio

from remoting.client import RemotingClient
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError

log = logging.getLogger("controller.raft.transport")

#: Private request code for Raft traffic (not an upstream code; upstream's jRaft internals use 1014–1018).
RAFT_MESSAGE = 19001
#: Messages queued per peer before new ones are dropped.
QUEUE_LIMIT = 4096
SEND_TIMEOUT = 1.0
#: Distinct (group, sender) pairs warned about before further rejections are logged at debug level only.
WARN_LIMIT = 64


class Receiver(Protocol):
    """What the handler hands accepted messages to (the :class:`~controller.raft.driver.RaftDriver`)."""

    node_id: str
    peers: dict[str, str]

    def receive(self, msg_bytes: bytes) -> None: ...


class RemotingRaftTransport:
    """The Raft driver's ``Transport`` over a :class:`~remoting.client.RemotingClient`.

    ``group`` (``controllerDLegerGroup``) goes with every message so receivers can refuse traffic
    from another group.
    """

    def __init__(self, client: RemotingClient, self_id: str, peers: dict[str, str], group: str = "") -> None:
        self.client = client
        self.self_id = self_id
        self.group = group
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
        ext = {"group": self.group, "from": self.self_id}
        async for data in receive:
            cmd = request(RAFT_MESSAGE, dict(ext), data)
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


class RaftMessageHandler:
    """The remoting handler for RAFT_MESSAGE (oneway, never answered).

    Accepts a message only when its ``group`` extField equals ``group`` and its ``from`` is one of
    the receiver's peers other than itself; otherwise counts it in :attr:`rejected` and logs a
    warning (once per distinct group and sender, then at debug level, since a misconfigured peer
    keeps sending several messages a second).
    """

    def __init__(self, receiver: Receiver, group: str) -> None:
        self.receiver = receiver
        self.group = group
        self.rejected = 0
        self._warned: set[tuple[str, str]] = set()

    async def __call__(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        ext = cmd.ext_fields or {}
        group = ext.get("group", "")
        sender = ext.get("from", "")
        if group != self.group:
            self._reject(ctx, group, sender, f"group {group!r} is not this peer's group {self.group!r}")
        elif sender == self.receiver.node_id or sender not in self.receiver.peers:
            self._reject(ctx, group, sender, f"sender {sender!r} is not one of the other peers")
        else:
            self.receiver.receive(cmd.body_bytes)
        return None

    def _reject(self, ctx: Any, group: str, sender: str, why: str) -> None:
        self.rejected += 1
        conn = getattr(ctx, "connection", None)
        remote = str(getattr(conn, "remote_address", "?"))
        key = (group, sender)
        if key in self._warned or len(self._warned) >= WARN_LIMIT:
            log.debug("dropped raft message from %s (%s)", remote, why)
            return
        self._warned.add(key)
        log.warning(
            "%s: dropping raft messages from %s (group %r, peer %r): %s — check controllerDLegerGroup "
            "and controllerDLegerPeers on both sides",
            self.receiver.node_id,
            remote,
            group,
            sender,
            why,
        )


def raft_message_handler(driver: Receiver, group: str) -> RaftMessageHandler:
    """The RAFT_MESSAGE handler for ``driver`` in raft group ``group`` (see :class:`RaftMessageHandler`)."""
    return RaftMessageHandler(driver, group)
