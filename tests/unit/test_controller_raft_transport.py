"""Raft traffic between controller peers: messages carry the raft group and the sender id, and a
receiver drops (with a warning) what comes from another group or from an id that is not a peer."""

from __future__ import annotations

import logging
import random

import pytest
import trio

from controller.raft.driver import RaftDriver
from controller.raft.messages import MsgHeartbeat, encode_message
from controller.raft.storage import MemoryStorage
from controller.raft.transport import MemoryNetwork
from controller.raft_transport import RAFT_MESSAGE, RaftMessageHandler, RemotingRaftTransport
from remoting.command import RemotingCommand, request

PEERS = {f"n{i}": f"127.0.0.1:{9878 + i}" for i in range(3)}


class NullMachine:
    def apply(self, index: int, data: bytes) -> None:
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


class Recorder:
    """A receiver standing in for the driver: records what the handler lets through."""

    node_id = "n0"
    peers = PEERS

    def __init__(self) -> None:
        self.received: list[bytes] = []

    def receive(self, msg_bytes: bytes) -> None:
        self.received.append(msg_bytes)


def raft_request(group: str | None, sender: str | None, body: bytes = b"m") -> RemotingCommand:
    ext = {}
    if group is not None:
        ext["group"] = group
    if sender is not None:
        ext["from"] = sender
    return request(RAFT_MESSAGE, ext, body)


async def test_handler_accepts_own_group_from_other_peers() -> None:
    rec = Recorder()
    handler = RaftMessageHandler(rec, "g1")
    assert await handler(None, raft_request("g1", "n1", b"a")) is None
    await handler(None, raft_request("g1", "n2", b"b"))
    assert rec.received == [b"a", b"b"]
    assert handler.rejected == 0


@pytest.mark.parametrize(
    ("group", "sender"),
    [("g2", "n1"), (None, "n1"), ("", "n1"), ("g1", "n7"), ("g1", "n0"), ("g1", None)],
    ids=["other-group", "no-group", "empty-group", "unknown-id", "own-id", "no-id"],
)
async def test_handler_drops_foreign_or_unknown_senders(group: str | None, sender: str | None) -> None:
    rec = Recorder()
    handler = RaftMessageHandler(rec, "g1")
    await handler(None, raft_request(group, sender))
    assert rec.received == []
    assert handler.rejected == 1


async def test_rejections_warn_once_per_sender(caplog: pytest.LogCaptureFixture) -> None:
    handler = RaftMessageHandler(Recorder(), "g1")
    with caplog.at_level(logging.DEBUG, logger="controller.raft.transport"):
        for _ in range(5):
            await handler(None, raft_request("other", "n1"))
        await handler(None, raft_request("g1", "zz"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "'other'" in warnings[0].getMessage()
    assert "controllerDLegerGroup" in warnings[0].getMessage()
    assert "'zz'" in warnings[1].getMessage()
    assert handler.rejected == 6


class FakeClient:
    def __init__(self) -> None:
        self.sent: list[tuple[str, RemotingCommand]] = []
        self.got = trio.Event()

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        self.sent.append((addr, cmd))
        self.got.set()


async def test_transport_sends_group_and_sender_with_every_message() -> None:
    client = FakeClient()
    transport = RemotingRaftTransport(client, "n0", PEERS, "g1")  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(transport.run)
        await transport.send("n2", b"payload")
        with trio.fail_after(5):
            await client.got.wait()
        nursery.cancel_scope.cancel()
    [(addr, cmd)] = client.sent
    assert addr == PEERS["n2"]
    assert cmd.code == RAFT_MESSAGE
    assert cmd.ext_fields == {"group": "g1", "from": "n0"}
    assert cmd.body_bytes == b"payload"


async def test_a_peer_of_another_group_cannot_depose_the_leader(autojump_clock: object) -> None:
    """A leader of group g1 ignores a higher-term heartbeat sent by "n1" of group g2; the same
    message tagged g1 does make it step down (so the guard, not the message, is what protects it)."""
    net = MemoryNetwork(rng=random.Random(3))
    drivers: dict[str, RaftDriver] = {}
    handlers: dict[str, RaftMessageHandler] = {}
    async with trio.open_nursery() as nursery:
        for nid in PEERS:
            driver = RaftDriver(
                nid,
                PEERS,
                None,
                net.transport(nid),
                NullMachine(),
                storage=MemoryStorage(),
                tick_interval=0.05,
                rng=random.Random(nid),
            )
            handler = RaftMessageHandler(driver, "g1")

            net.attach(nid, driver.receive)
            drivers[nid], handlers[nid] = driver, handler
            await nursery.start(driver.run)
        with trio.fail_after(10):
            while not any(d.is_leader for d in drivers.values()):
                await trio.sleep(0.05)
        leader = next(d for d in drivers.values() if d.is_leader)
        term = leader.term
        intruder = next(p for p in PEERS if p != leader.node_id)
        hb = encode_message(MsgHeartbeat(leader.node_id, intruder, term + 5, 0))

        for _ in range(10):
            await handlers[leader.node_id](None, raft_request("g2", intruder, hb))
            await trio.sleep(0.05)
        assert leader.is_leader
        assert leader.term == term
        assert handlers[leader.node_id].rejected == 10

        await handlers[leader.node_id](None, raft_request("g1", intruder, hb))
        with trio.fail_after(2):
            while leader.term == term:
                await trio.sleep(0.01)
        assert leader.term >= term + 5
        nursery.cancel_scope.cancel()
