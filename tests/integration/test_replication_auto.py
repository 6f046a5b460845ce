"""Auto-switch replication between real brokers in one process, roles set by hand (controller mode
without a controller: ``change_to_master`` / ``change_to_slave``, SyncStateSet accepted locally).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from store.ha.packets import SlaveAck, SlaveHandshake
from store.ha.role import RoleChangeError
from tests.integration.broker_requests import describe, send_header
from tests.integration.replication_kit import (
    TOPIC,
    Group,
    Running,
    commit_log_bytes,
    consume_queue_units,
    pull_bodies,
    replication_group,
    wait_until,
)

QUEUES = 2


def auto(broker_id: int, **kw: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = dict(
        enableControllerMode=True,
        brokerId=broker_id,
        checkSyncStateSetPeriod=200,
        haMaxTimeSlaveNotCatchup=60_000,
    )
    cfg.update(kw)
    return cfg


async def _same(g: Group, a: Running, b: Running) -> None:
    end = a.store.max_phy_offset
    await wait_until(lambda: b.store.max_phy_offset == end, 10, f"{b.name} reaching {end}")
    await a.store.flush()
    await b.store.flush()
    assert commit_log_bytes(g.root / a.name / "store", 0, end) == commit_log_bytes(
        g.root / b.name / "store", 0, end
    )
    assert b.store.epoch_file.pairs() == a.store.epoch_file.pairs()
    await wait_until(
        lambda: all(
            consume_queue_units(a.store, TOPIC, q) == consume_queue_units(b.store, TOPIC, q)
            for q in range(QUEUES)
        ),
        5,
        "consume queues equal",
    )


async def test_hand_roles_all_ack_sync_state_set_and_confirm_offset(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        m = await g.start("m", **auto(1, allAckInSyncStateSet=True))
        s = await g.start("s", **auto(2, allAckInSyncStateSet=True))
        # No role yet: fenced.
        response = await g.send(m.addr, b"too early")
        assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE, describe(response)

        await m.broker.replication.change_to_master(1)
        assert m.broker.broker_config.brokerId == 0
        assert not m.broker.is_slave
        await g.create_topic(m.addr, queues=QUEUES)
        await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
        assert s.broker.is_slave
        await wait_until(lambda: m.broker.replication.sync_state_set == {1, 2}, 10, "SyncStateSet {1, 2}")

        for i in range(60):
            response = await g.send_ok(m.addr, b"all-ack %d" % i + bytes(i * 37), queue_id=i % QUEUES)
            # every SyncStateSet member holds it before the producer hears SUCCESS
            assert s.store.max_phy_offset >= m.store.max_phy_offset
        await _same(g, m, s)
        await wait_until(lambda: s.store.confirm_offset == m.store.max_phy_offset, 5, "slave confirm offset")
        assert m.broker.replication.confirm_offset == m.store.max_phy_offset

        # A stale epoch is refused.
        with pytest.raises(RoleChangeError):
            await m.broker.replication.change_to_master(0)

        # The slave goes away: its connection closes, the SyncStateSet shrinks, sends go on.
        await g.stop(s)
        await wait_until(lambda: m.broker.replication.sync_state_set == {1}, 5, "SyncStateSet shrinks")
        await g.send_ok(m.addr, b"alone")


async def test_unconfirmed_messages_are_not_readable(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        m = await g.start("m", **auto(1, allAckInSyncStateSet=True, slaveTimeout=300))
        await m.broker.replication.change_to_master(1)
        await g.create_topic(m.addr, queues=QUEUES)
        for i in range(3):
            await g.send_ok(m.addr, b"before %d" % i)
        # A replica that joins the SyncStateSet and then stops acknowledging.
        host, _, port = m.ha_addr.rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(SlaveHandshake(False, False, 7).encode())
        await stream.receive_some(65536)  # the master's handshake
        await stream.send_all(SlaveAck(m.store.max_phy_offset).encode())
        await wait_until(lambda: m.broker.replication.sync_state_set == {1, 7}, 5, "silent replica joins")
        confirmed = m.store.max_phy_offset

        response = await g.send(m.addr, b"unconfirmed")
        assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, describe(response)
        assert response.remark == (
            "the message is stored on the master, but its slaves did not confirm it within slaveTimeout"
        )
        end = m.store.max_phy_offset
        assert end > confirmed
        assert m.broker.replication.confirm_offset == confirmed
        # stored, but neither dispatched nor readable while it may still be truncated
        assert await pull_bodies(g, m.addr, 0) == [b"before %d" % i for i in range(3)]
        assert m.store.get_max_offset_in_queue(TOPIC, 0) == 3

        # A real slave gets the message too, but its dispatch stops at the master's confirm offset.
        s = await g.start("s", **auto(2, allAckInSyncStateSet=True, slaveTimeout=300))
        await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
        await wait_until(lambda: s.store.max_phy_offset == end, 5, "slave holds the unconfirmed message")
        await wait_until(lambda: s.store.confirm_offset == confirmed, 5, "slave confirm offset")
        await s.store.reput()
        assert s.store.get_max_offset_in_queue(TOPIC, 0) == 3

        # The silent replica acknowledges it: confirmed, dispatched, readable on both.
        await stream.send_all(SlaveAck(end).encode())
        await wait_until(lambda: m.store.get_max_offset_in_queue(TOPIC, 0) == 4, 5, "dispatch after the ack")
        assert (await pull_bodies(g, m.addr, 0))[-1] == b"unconfirmed"
        await wait_until(
            lambda: s.store.get_max_offset_in_queue(TOPIC, 0) == 4, 5, "slave dispatch after the ack"
        )
        await stream.aclose()


async def test_in_sync_replicas_not_enough_refuses_before_appending(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        keys = dict(totalReplicas=2, inSyncReplicas=2, minInSyncReplicas=2, slaveTimeout=2000)
        m = await g.start("m", **auto(1, **keys))
        await m.broker.replication.change_to_master(1)
        await g.create_topic(m.addr, queues=QUEUES)
        before = m.store.max_phy_offset
        response = await g.send(m.addr, b"alone")
        assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)
        assert "in-sync replicas not enough" in (response.remark or "")
        assert m.store.max_phy_offset == before  # nothing appended
        s = await g.start("s", **auto(2, **keys))
        await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
        await wait_until(lambda: m.broker.replication.sync_state_set == {1, 2}, 10, "SyncStateSet {1, 2}")
        await g.send_ok(m.addr, b"two replicas")
        assert s.store.max_phy_offset == m.store.max_phy_offset  # inSyncReplicas=2: the slave acked it


async def test_master_killed_with_unreplicated_writes_rejoins_as_slave_and_truncates(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        m = await g.start("m", **auto(1))
        s = await g.start("s", **auto(2))
        await m.broker.replication.change_to_master(1)
        await g.create_topic(m.addr, queues=QUEUES)
        await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
        for i in range(40):
            await g.send_ok(m.addr, b"replicated %d" % i + bytes(500), queue_id=i % QUEUES)
        await _same(g, m, s)
        replicated = m.store.max_phy_offset

        # The slave stops following; the master takes writes nobody else has, then dies.
        s_ha = s.broker.replication.ha
        assert s_ha is not None
        s_ha.stop_role()
        for i in range(25):
            await g.send_ok(m.addr, b"lost %d" % i + bytes(3000), queue_id=i % QUEUES)
        assert m.store.max_phy_offset > replicated
        await g.stop(m, crash=True)

        # Promote the slave by hand with a new epoch; it takes new writes.
        await s.broker.replication.change_to_master(2)
        assert s.store.epoch_file.pairs() == [(1, 0), (2, replicated)]
        for i in range(30):
            await g.send_ok(s.addr, b"new %d" % i, queue_id=i % QUEUES)

        # The old master comes back and follows: its unreplicated tail is cut.
        m = await g.start("m", **auto(1))
        assert m.store.max_phy_offset > replicated  # the lost tail survived the crash on disk
        await m.broker.replication.change_to_slave(s.ha_addr, 2, master_addr=s.addr)
        await _same(g, s, m)
        assert m.store.epoch_file.pairs() == [(1, 0), (2, replicated)]
        bodies = [b for q in range(QUEUES) for b in await pull_bodies(g, s.addr, q)]
        assert not any(b.startswith(b"lost") for b in bodies)
        assert sum(b.startswith(b"new") for b in bodies) == 30


async def test_confirm_offset_recovery_never_hands_out_a_queue_offset_twice(tmp_path: Path) -> None:
    """Upstream #7689: after a restart the queue offsets of stored-but-unconfirmed messages must not be
    given to new messages."""
    async with replication_group(tmp_path) as g:
        m = await g.start("m", **auto(1, allAckInSyncStateSet=True, slaveTimeout=200))
        await m.broker.replication.change_to_master(1)
        await g.create_topic(m.addr, queues=1)
        offsets: list[int] = []
        for i in range(5):
            offsets.append(send_header(await g.send_ok(m.addr, b"confirmed %d" % i)).queueOffset)
        host, _, port = m.ha_addr.rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(SlaveHandshake(False, False, 7).encode())
        await stream.receive_some(65536)
        await stream.send_all(SlaveAck(m.store.max_phy_offset).encode())
        await wait_until(lambda: m.broker.replication.sync_state_set == {1, 7}, 5, "silent replica joins")
        for i in range(4):
            response = await g.send(m.addr, b"unconfirmed %d" % i)
            assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, describe(response)
            offsets.append(send_header(response).queueOffset)
        assert m.store.get_max_offset_in_queue(TOPIC, 0) == 5
        await stream.aclose()
        await g.stop(m, crash=True)

        m = await g.start("m", **auto(1, allAckInSyncStateSet=True, slaveTimeout=200))
        assert m.store.get_max_offset_in_queue(TOPIC, 0) == 5  # recovery stops at the confirm offset
        await m.broker.replication.change_to_master(2)  # alone: everything it holds is confirmed
        for i in range(3):
            offsets.append(send_header(await g.send_ok(m.addr, b"after %d" % i)).queueOffset)
        assert offsets == list(range(12))
        await wait_until(lambda: m.store.get_max_offset_in_queue(TOPIC, 0) == 12, 5, "dispatch")
        units = consume_queue_units(m.store, TOPIC, 0)
        assert len({u[0] for u in units}) == 12
        bodies = await pull_bodies(g, m.addr, 0)
        assert bodies == [b"confirmed %d" % i for i in range(5)] + [
            b"unconfirmed %d" % i for i in range(4)
        ] + [b"after %d" % i for i in range(3)]


async def _master_and_lazy_slave(g: Group, catch_up: bool = False) -> tuple[Running, Running]:
    """A master and a slave that has synced the master's metadata once and does not again by
    itself (rounds can still be run by hand) -- but for topic-table catch-ups when ``catch_up``."""
    m = await g.start("m", **auto(1))
    s = await g.start("s", **auto(2))
    await m.broker.replication.change_to_master(1)
    sync = s.broker.replication.slave_sync
    sync.interval = 3600.0
    sync.catch_up = catch_up
    await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
    await wait_until(lambda: sync.rounds >= 1, 10, "the slave's first metadata sync")
    return m, s


async def test_new_master_routes_a_topic_whose_config_had_not_reached_it(tmp_path: Path) -> None:
    """The slave replicated a topic's messages but not yet its config (metadata sync runs every
    few seconds); promoted, it must still route the topic so the messages can be read and added to."""
    new_topic = "CreatedJustBeforeFailover"
    async with replication_group(tmp_path) as g:
        m, s = await _master_and_lazy_slave(g)
        await g.create_topic(m.addr, new_topic, queues=4)
        for i in range(12):
            await g.send_ok(m.addr, b"early %d" % i, queue_id=i % 4, topic=new_topic)
        await wait_until(lambda: s.store.max_phy_offset == m.store.max_phy_offset, 10, "replicated")
        assert s.broker.topics.get(new_topic) is None  # the config did not travel
        await g.stop(m, crash=True)

        await s.broker.replication.change_to_master(2)
        config = s.broker.topics.get(new_topic)
        assert config is not None
        assert (config.readQueueNums, config.writeQueueNums) == (4, 4)
        await wait_until(
            lambda: (
                (r := g.namesrv.routes.pickup_topic_route_data(new_topic)) is not None
                and any(q.brokerName == s.broker.broker_config.brokerName for q in r.queueDatas)
            ),
            10,
            "the name server routing the topic to the new master",
        )
        await g.send_ok(s.addr, b"late", queue_id=3, topic=new_topic)
        bodies = [b for q in range(4) for b in await pull_bodies(g, s.addr, q, new_topic)]
        assert sorted(bodies) == sorted([b"early %d" % i for i in range(12)] + [b"late"])


async def test_slave_copies_topic_table_when_replicated_messages_outrun_it(tmp_path: Path) -> None:
    """A topic created, and one widened, on the master after the slave's last metadata sync: the
    first replicated message in a queue the slave's table lacks makes it copy the master's table at
    once (not at the next full sync, minutes away here), so a failover right after routes every
    queue with its configured count."""
    fresh, widened = "CreatedAfterSync", "WidenedAfterSync"
    async with replication_group(tmp_path) as g:
        m, s = await _master_and_lazy_slave(g, catch_up=True)
        sync = s.broker.replication.slave_sync
        await g.create_topic(m.addr, widened, queues=2)
        await sync.sync_all(m.addr)
        assert s.broker.topics.get(widened).readQueueNums == 2  # type: ignore[union-attr]
        rounds = sync.rounds

        await g.create_topic(m.addr, fresh, queues=3)
        await g.create_topic(m.addr, widened, queues=4)
        for q in range(3):
            await g.send_ok(m.addr, b"fresh %d" % q, queue_id=q, topic=fresh)
        for q in range(4):
            await g.send_ok(m.addr, b"widened %d" % q, queue_id=q, topic=widened)
        await wait_until(
            lambda: (
                (f := s.broker.topics.get(fresh)) is not None
                and (f.readQueueNums, f.writeQueueNums) == (3, 3)
                and (w := s.broker.topics.get(widened)) is not None
                and (w.readQueueNums, w.writeQueueNums) == (4, 4)
            ),
            10,
            "the slave's topic table catching up",
        )
        assert sync.rounds == rounds  # no full sync ran: the catch-up did it
        assert sync.catch_ups >= 1
        await wait_until(lambda: s.store.max_phy_offset == m.store.max_phy_offset, 10, "replicated")

        await g.stop(m, crash=True)
        await s.broker.replication.change_to_master(2)
        name = s.broker.broker_config.brokerName
        await wait_until(
            lambda: (
                (r := g.namesrv.routes.pickup_topic_route_data(widened)) is not None
                and any(q.brokerName == name and q.readQueueNums == 4 for q in r.queueDatas)
            ),
            10,
            "the name server routing all four queues of the widened topic to the new master",
        )
        assert [b for q in range(3) for b in await pull_bodies(g, s.addr, q, fresh)] == [
            b"fresh %d" % q for q in range(3)
        ]
        assert [b for q in range(4) for b in await pull_bodies(g, s.addr, q, widened)] == [
            b"widened %d" % q for q in range(4)
        ]


async def test_topic_deleted_on_the_master_stays_deleted_after_a_failover(tmp_path: Path) -> None:
    """The slave drops the consume queues and consumer offsets of a topic its master deleted, so a
    promoted slave does not bring the topic back (it routes every topic it holds messages of)."""
    doomed = "DeletedBeforeFailover"
    async with replication_group(tmp_path) as g:
        m, s = await _master_and_lazy_slave(g)
        sync = s.broker.replication.slave_sync
        await g.create_topic(m.addr, doomed, queues=2)
        for i in range(6):
            await g.send_ok(m.addr, b"doomed %d" % i, queue_id=i % 2, topic=doomed)
        await wait_until(lambda: s.store.max_phy_offset == m.store.max_phy_offset, 10, "replicated")
        await wait_until(lambda: s.store.queue_ids(doomed) == [0, 1], 10, "the slave's consume queues")
        commit = {"consumerGroup": "G", "topic": doomed, "queueId": 1, "commitOffset": 3}
        response = await g.call(m.addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, commit))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        await sync.sync_all(m.addr)
        assert s.broker.topics.get(doomed) is not None
        assert s.broker.offsets.queues_of("G", doomed) == {1: 3}

        response = await g.call(m.addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": doomed}))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        await sync.sync_all(m.addr)
        assert s.broker.topics.get(doomed) is None
        assert s.store.queue_ids(doomed) == []
        # its offsets go too (the master dropped them): a topic created again under the same
        # name after a failover must not start its consumers at the old offsets
        assert s.broker.offsets.queues_of("G", doomed) == {}

        await g.stop(m, crash=True)
        await s.broker.replication.change_to_master(2)
        assert s.broker.topics.get(doomed) is None
