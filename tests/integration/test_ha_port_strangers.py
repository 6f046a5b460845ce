"""Strangers on a master's HA port (auto-switch replication in controller mode, and classic; one
trio process): random bytes, a handshake from a broker id the group does not have,
acknowledgements of offsets the master never wrote, a handshake cut off half-way. What must hold,
as for any bad input: the master says what it dropped and closes that connection, keeps
replicating to its real slave and serving sends, and none of the strangers' numbers reach the
SyncStateSet or the confirm offset -- a message is still acknowledged only once a real slave has
it."""

from __future__ import annotations

import logging
import random
import struct
from pathlib import Path

import pytest
import trio

from remoting.codes import ResponseCode
from store.config import BrokerRole
from store.ha.packets import SlaveAck, SlaveHandshake
from tests.integration.broker_requests import describe
from tests.integration.replication_kit import commit_log_bytes, replication_group
from tests.integration.test_controller_mode import (
    FILE_SIZE,
    Node,
    controller_mode,
    master_and_slave,
    send_all,
    wait_until,
)

TIMEOUT = 5.0


async def _closed_by_peer(stream: trio.SocketStream) -> bool:
    """Whether the master closes the connection (reading what it sent until EOF)."""
    with trio.move_on_after(TIMEOUT):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass  # reset: closed as well
        return True
    return False


async def _connect(master: Node) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", master.broker.ha_port)


async def _try_send(stream: trio.SocketStream, data: bytes) -> None:
    """Send unless the master has closed the connection already (dropping it is one right answer)."""
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def _in_sync(a: Node, b: Node) -> bool:
    return b.broker.store.max_phy_offset == a.broker.store.max_phy_offset


async def test_strangers_on_the_ha_port_neither_stop_replication_nor_move_the_confirm_offset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with controller_mode(tmp_path) as env:
        a, b = await master_and_slave(env)
        await send_all(env, a, [f"before {i}".encode() for i in range(20)])
        rng = random.Random(7)

        # 1. random bytes: not a handshake, closed
        garbage = await _connect(a)
        await garbage.send_all(bytes(rng.randrange(256) for _ in range(64)))
        assert await _closed_by_peer(garbage), "the master kept a connection that sent random bytes"
        await garbage.aclose()

        # 2. a handshake cut off half-way, then silence: the stream stays open until it closes
        half = await _connect(a)
        await half.send_all(SlaveHandshake(False, False, 2).encode()[:7])

        # 3. a replica id the group does not have, acknowledging offsets the master never wrote:
        # dropped
        liar = await _connect(a)
        await liar.send_all(
            SlaveHandshake(isSyncFromLastFile=False, isAsyncLearner=False, slaveBrokerId=99).encode()
        )
        for offset in (2**62, a.broker.store.max_phy_offset + 1_000_000):
            await _try_send(liar, SlaveAck(offset).encode())
        assert await _closed_by_peer(liar), "the master kept a slave acknowledging offsets it never wrote"
        await liar.aclose()

        # 4. the same id acknowledging what the master has (caught up, as far as the master can
        # tell): streamed to, but the controller knows no replica 99, so it joins no SyncStateSet
        stranger = await _connect(a)
        await stranger.send_all(SlaveHandshake(False, False, 99).encode())
        await stranger.send_all(SlaveAck(a.broker.store.max_phy_offset).encode())

        # sends go on and each is acknowledged only with the real slave holding it
        for i in range(20):
            response = await env.send(a, f"during {i}".encode(), queue_id=i % 2)
            assert response.code == ResponseCode.SUCCESS, describe(response)
            assert _in_sync(a, b)
            assert a.broker.replication.confirm_offset <= b.broker.store.max_phy_offset
            await _try_send(stranger, SlaveAck(a.broker.store.max_phy_offset).encode())
        assert a.broker.replication.sync_state_set == {1, 2}
        info = (await env.replicas()).replicasInfoTable["broker-a"]
        assert {r.brokerId for r in info.inSyncReplicas} == {1, 2}

        # the real slave stops: the set shrinks to the master alone, not to the stranger
        await env.stop(b)
        await wait_until(lambda: a.broker.replication.sync_state_set == {1}, 10, "SyncStateSet {1}")
        await _try_send(stranger, SlaveAck(a.broker.store.max_phy_offset).encode())
        await trio.sleep(0.5)
        assert a.broker.replication.sync_state_set == {1}
        info = (await env.replicas()).replicasInfoTable["broker-a"]
        assert {r.brokerId for r in info.inSyncReplicas} == {1}

        for stream in (half, stranger):
            await stream.aclose()
        # the slave comes back, catches up and what it holds is the master's byte for byte
        b = await env.start("b")
        await wait_until(lambda: _in_sync(a, b), 10, "slave caught up")
        end = a.broker.store.max_phy_offset
        assert commit_log_bytes(tmp_path / "b" / "store", 0, end, FILE_SIZE) == commit_log_bytes(
            tmp_path / "a" / "store", 0, end, FILE_SIZE
        )
        await wait_until(lambda: a.broker.replication.sync_state_set == {1, 2}, 10, "SyncStateSet {1, 2}")
        assert a.broker.replication.confirm_offset == end

    said = [r.getMessage() for r in caplog.records]
    # the master said what it dropped
    assert any("closing HA connection of a peer that sent no handshake" in m for m in said)
    assert any("closing HA connection of slave 99" in m and "beyond our max" in m for m in said)
    # and it asked the controller about replica 99 a few times, not on every ack: held back 1 s,
    # then 2 s, ... (the stranger acked 20 times within about a second)
    asked = [m for m in said if m.startswith("proposing SyncStateSet [1, 2, 99]")]
    assert 1 <= len(asked) <= 4, asked
    assert any("refused replica(s) [99] into the SyncStateSet" in m for m in said)


async def test_a_stranger_reporting_bytes_never_written_does_not_acknowledge_a_sync_masters_sends(
    tmp_path: Path,
) -> None:
    """Classic replication: a SYNC_MASTER answers a send once a slave reported holding it. A
    stranger on the HA port reporting an offset past the master's end is closed instead of counted
    (upstream counts it, and would answer SEND_OK for a message no slave holds); so is one that
    reports more than it was sent."""
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.SYNC_MASTER, slaveTimeout=800)
        await g.create_topic(master.addr, queues=1)
        classic = master.broker.replication.classic
        assert classic is not None
        host, _, port = master.ha_addr.rpartition(":")

        liar = await trio.open_tcp_stream(host, int(port))
        await liar.send_all(struct.pack(">q", 2**62))
        assert await _closed_by_peer(liar), "the master kept a slave reporting bytes it never wrote"
        await liar.aclose()
        response = await g.send(master.addr, b"no slave holds this")
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE, describe(response)

        # a report of the real end, then of more than it was sent
        sly = await trio.open_tcp_stream(host, int(port))
        await sly.send_all(struct.pack(">q", master.store.max_phy_offset))
        await wait_until(lambda: classic.slave_available(), 5, "the stranger taken for a slave")
        await sly.send_all(struct.pack(">q", 2**62))
        assert await _closed_by_peer(sly), "the master counted a report of more than it sent"
        await sly.aclose()
        response = await g.send(master.addr, b"still no slave")
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE, describe(response)
