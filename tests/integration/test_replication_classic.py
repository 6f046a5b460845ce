"""Classic master/slave replication between real brokers in one process (real sockets and files).

The slave learns its master's HA address from its name-server registration; commit logs are
compared as bytes on disk and consume queues unit by unit.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.protocol.broker import SubscriptionGroupConfig
from remoting.protocol.common import TopicConfigAndMappingSerializeWrapper
from store.config import BrokerRole
from tests.integration.broker_requests import describe, messages, pull_header, pull_request, send_header
from tests.integration.replication_kit import (
    TOPIC,
    Group,
    Running,
    commit_log_bytes,
    consume_queue_units,
    replication_group,
    wait_until,
)

QUEUES = 4


async def _sender(g: Group, master: Running, rng: random.Random, count: int, acked: list[int]) -> None:
    """Sends ``count`` messages of random size; records the offset of every acknowledged one."""
    for i in range(count):
        body = bytes([i % 251]) * rng.randint(50, 6000)
        response = await g.send_ok(master.addr, body, queue_id=i % QUEUES)
        acked.append(struct.unpack(">q", bytes.fromhex(send_header(response).msgId)[-8:])[0])


def _same_commit_log(g: Group, master: Running, slave: Running, upto: int) -> None:
    start = slave.store.min_phy_offset
    assert master.store.min_phy_offset == start == 0
    m = commit_log_bytes(g.root / master.name / "store", start, upto)
    s = commit_log_bytes(g.root / slave.name / "store", start, upto)
    assert len(m) == len(s) == upto
    assert m == s, "slave commit log differs from the master's on disk"


def _same_queues(master: Running, slave: Running) -> None:
    for q in range(QUEUES):
        units = consume_queue_units(master.store, TOPIC, q)
        assert units, f"queue {q} is empty on the master"
        assert consume_queue_units(slave.store, TOPIC, q) == units


async def test_slave_is_byte_identical_under_continuous_sends(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER)
        await g.create_topic(master.addr, queues=QUEUES)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        acked: list[int] = []
        rng = random.Random(4)
        async with trio.open_nursery() as senders:
            for _ in range(4):
                senders.start_soon(_sender, g, master, random.Random(rng.random()), 150, acked)
            # meanwhile the slave keeps up with what was acknowledged so far
            await wait_until(lambda: len(acked) > 100, 20, "first sends")
            mid = max(acked)
            await wait_until(lambda: slave.store.max_phy_offset > mid, 10, "slave catching up mid-run")
        end = master.store.max_phy_offset
        assert end > 3 * 256 * 1024  # several commit-log files
        await wait_until(lambda: slave.store.max_phy_offset == end, 10, "slave catch-up")
        await slave.store.flush()
        await master.store.flush()
        _same_commit_log(g, master, slave, end)
        await wait_until(
            lambda: all(
                consume_queue_units(slave.store, TOPIC, q) == consume_queue_units(master.store, TOPIC, q)
                for q in range(QUEUES)
            ),
            5,
            "slave dispatch",
        )
        _same_queues(master, slave)
        assert slave.broker.replication.classic is not None
        assert slave.broker.replication.classic.master_address == master.ha_addr


async def test_slave_killed_mid_transfer_resumes_without_gap(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER)
        await g.create_topic(master.addr, queues=QUEUES)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        acked: list[int] = []
        async with trio.open_nursery() as senders:
            senders.start_soon(_sender, g, master, random.Random(1), 400, acked)
            await wait_until(lambda: slave.store.max_phy_offset > 300_000, 20, "transfer under way")
            await g.stop(slave, crash=True)
            await wait_until(lambda: len(acked) >= 250, 20, "more sends while the slave is down")
            slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        end = master.store.max_phy_offset
        await wait_until(lambda: slave.store.max_phy_offset == end, 15, "slave catch-up after restart")
        await slave.store.flush()
        await master.store.flush()
        _same_commit_log(g, master, slave, end)
        await wait_until(
            lambda: all(
                consume_queue_units(slave.store, TOPIC, q) == consume_queue_units(master.store, TOPIC, q)
                for q in range(QUEUES)
            ),
            5,
            "slave dispatch",
        )


async def test_sync_master_answers_after_the_slave_acked(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.SYNC_MASTER, slaveTimeout=800)
        await g.create_topic(master.addr, queues=QUEUES)
        # No slave: stored, but SLAVE_NOT_AVAILABLE.
        response = await g.send(master.addr, b"alone")
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE, describe(response)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        classic = master.broker.replication.classic
        assert classic is not None
        await wait_until(lambda: classic.slave_available(), 10, "slave connected")
        for i in range(20):
            response = await g.send_ok(master.addr, b"sync %d" % i)
            # the ack came from the slave: it holds the message when the producer hears SUCCESS
            assert slave.store.max_phy_offset >= master.store.max_phy_offset
        # A slave that reports once and then never again: FLUSH_SLAVE_TIMEOUT.
        await g.stop(slave)
        await wait_until(lambda: not classic.connections, 5, "slave gone")
        host, _, port = master.ha_addr.rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(struct.pack(">q", master.store.max_phy_offset))
        await wait_until(lambda: classic.slave_available(), 5, "silent slave connected")
        with trio.fail_after(5):
            response = await g.send(master.addr, b"never acked")
        assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, describe(response)
        assert send_header(response).msgId  # stored: the producer gets its id
        await stream.aclose()


async def test_slave_serves_pulls_and_suggests_the_master(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        # accessMessageInMemoryMaxRatio=0: every read counts as "not in memory" on the master,
        # so it sends consumers to the slave (whichBrokerWhenConsumeSlowly=1).
        master = await g.start(
            "m", brokerRole=BrokerRole.ASYNC_MASTER, slaveReadEnable=True, accessMessageInMemoryMaxRatio=0
        )
        await g.create_topic(master.addr, queues=1)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1, slaveReadEnable=True)
        for i in range(10):
            await g.send_ok(master.addr, b"m%d" % i)
        await wait_until(lambda: slave.broker.master_addr == master.addr, 10, "slave knows its master")
        await wait_until(lambda: slave.store.get_max_offset_in_queue(TOPIC, 0) == 10, 10, "slave dispatch")

        response = await g.call(master.addr, pull_request("G1", TOPIC, 0, 0))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert pull_header(response).suggestWhichBrokerId == 1

        # The slave serves the pull; the consumer is not reading old data: back to the master.
        response = await g.call(slave.addr, pull_request("G1", TOPIC, 0, 3))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert [m.body for m in messages(response)] == [b"m%d" % i for i in range(3, 10)]
        assert pull_header(response).suggestWhichBrokerId == 0
        # Beyond what the slave holds: retry at once, at the master.
        response = await g.call(slave.addr, pull_request("G1", TOPIC, 0, 10))
        assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY, describe(response)
        assert pull_header(response).suggestWhichBrokerId == 0


async def test_a_topic_deleted_and_created_again_between_two_syncs_leaves_no_old_queue_on_the_slave(
    tmp_path: Path,
) -> None:
    """The slave's sync cannot see such a deletion in the topic table (the topic is there again);
    the master names it with its commit-log end in GET_ALL_TOPIC_CONFIG, and the slave empties
    its queues that end below it: queues 1 and 2, which got no new message, held the deleted
    topic's messages for a consumer of the slave -- and of a new master after a failover."""
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        await wait_until(lambda: slave.broker.master_addr == master.addr, 10, "slave knows its master")
        await g.create_topic(master.addr, "Again", queues=3)
        for i in range(6):
            await g.send_ok(master.addr, b"old-%d" % i, queue_id=i % 3, topic="Again")
        commit = {"consumerGroup": "G", "topic": "Again", "queueId": 1, "commitOffset": 2}
        response = await g.call(master.addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, commit))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        m, s = master.broker, slave.broker
        sync = slave.broker.replication.slave_sync
        await wait_until(
            lambda: s.store.get_max_offset_in_queue("Again", 2) == 2, 10, "slave has the old topic"
        )
        await sync.sync_all()
        assert s.offsets.queues_of("G", "Again") == {1: 2}

        deleted = await g.call(master.addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Again"}))
        assert deleted.code == ResponseCode.SUCCESS, describe(deleted)
        end = m.store.max_phy_offset
        await g.create_topic(master.addr, "Again", queues=3)
        await g.send_ok(master.addr, b"new-0", queue_id=0, topic="Again")
        table = await g.call(master.addr, request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert TopicConfigAndMappingSerializeWrapper.decode(table.body_bytes).deletedTopicOffsets == {
            "Again": end
        }
        await wait_until(lambda: s.store.max_phy_offset == m.store.max_phy_offset, 10, "slave caught up")
        await wait_until(lambda: s.store.get_max_offset_in_queue("Again", 0) == 1, 10, "queue 0 started over")
        assert s.store.get_max_offset_in_queue("Again", 1) == 2  # the old topic's, until the sync

        await sync.sync_all()
        assert [s.store.get_max_offset_in_queue("Again", q) for q in range(3)] == [1, 0, 0]
        assert s.offsets.queues_of("G", "Again") == {}
        response = await g.call(slave.addr, pull_request("G", "Again", 0, 0))
        assert [msg.body for msg in messages(response)] == [b"new-0"], describe(response)

        # once per deletion: the new topic's messages stay at later syncs
        await g.send_ok(master.addr, b"new-1", queue_id=1, topic="Again")
        await wait_until(lambda: s.store.get_max_offset_in_queue("Again", 1) == 1, 10, "queue 1 on the slave")
        await sync.sync_all()
        await sync.sync_all()
        assert [s.store.get_max_offset_in_queue("Again", q) for q in range(3)] == [1, 1, 0]
        # the topic table unchanged, a sync decodes only its version and the deletions: forgotten
        # here (a restarted slave remembers none), the deletion is looked at again
        assert sync.deletions_applied == {"Again": end}
        sync.deletions_applied.clear()
        await sync.sync_all()
        assert sync.deletions_applied == {"Again": end}
        assert [s.store.get_max_offset_in_queue("Again", q) for q in range(3)] == [1, 1, 0]


async def test_the_masters_deletions_reach_the_slave_after_a_master_crash(tmp_path: Path) -> None:
    """The master keeps its table of deletions on disk: killed after a topic was deleted and
    created again, and before its slave synced, it still names the deletion after its restart.
    A deleted topic whose queues were empty loses its consumer offsets on the slave too."""
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER)
        ports = {
            "listenPort": int(master.addr.rsplit(":", 1)[1]),
            "haListenPort": int(master.ha_addr.rsplit(":", 1)[1]),
        }
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        await wait_until(lambda: slave.broker.master_addr == master.addr, 10, "slave knows its master")
        for topic in ("Again", "Empty"):
            await g.create_topic(master.addr, topic, queues=2)
            commit = {"consumerGroup": "G", "topic": topic, "queueId": 1, "commitOffset": 5}
            response = await g.call(master.addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, commit))
            assert response.code == ResponseCode.SUCCESS, describe(response)
        await g.send_ok(master.addr, b"old-0", queue_id=1, topic="Again")
        s, sync = slave.broker, slave.broker.replication.slave_sync
        await wait_until(
            lambda: s.store.get_max_offset_in_queue("Again", 1) == 1, 10, "slave has the old topic"
        )
        await sync.sync_all()
        assert (s.offsets.queues_of("G", "Again"), s.offsets.queues_of("G", "Empty")) == ({1: 5}, {1: 5})

        for topic in ("Again", "Empty"):
            deleted = await g.call(master.addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
            assert deleted.code == ResponseCode.SUCCESS, describe(deleted)
            await g.create_topic(master.addr, topic, queues=2)
        await g.stop(master, crash=True)
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER, **ports)
        await wait_until(lambda: s.store.max_phy_offset == master.store.max_phy_offset, 10, "slave caught up")
        await sync.sync_all()
        assert s.store.get_max_offset_in_queue("Again", 1) == 0
        assert (s.offsets.queues_of("G", "Again"), s.offsets.queues_of("G", "Empty")) == ({}, {})


async def test_slave_sync_copies_the_masters_metadata_with_data_versions(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        await wait_until(lambda: slave.broker.master_addr == master.addr, 10, "slave knows its master")
        await g.create_topic(master.addr, "SyncTopic", queues=3)
        group = SubscriptionGroupConfig(groupName="SyncGroup", retryMaxTimes=7)
        response = await g.call(
            master.addr, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode())
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        for q, offset in ((0, 11), (2, 29)):
            response = await g.call(
                master.addr,
                request(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {
                        "consumerGroup": "SyncGroup",
                        "topic": "SyncTopic",
                        "queueId": q,
                        "commitOffset": offset,
                    },
                ),
            )
            assert response.code == ResponseCode.SUCCESS, describe(response)

        sync = slave.broker.replication.slave_sync
        await sync.sync_all()
        m, s = master.broker, slave.broker
        assert s.topics.get("SyncTopic") == m.topics.get("SyncTopic")
        assert s.topics.data_version == m.topics.data_version
        assert s.groups.table["SyncGroup"].retryMaxTimes == 7
        assert s.groups.data_version == m.groups.data_version
        assert s.offsets.queues_of("SyncGroup", "SyncTopic") == {0: 11, 2: 29}
        assert s.offsets.data_version == m.offsets.data_version
        delay = Path(s.store_config.config_dir) / "delayOffset.json"
        assert delay.exists()
        # the next sync finds the groups' version unchanged (and decodes nothing); a change on the
        # master comes over at the one after
        await sync.sync_all()
        assert s.groups.data_version == m.groups.data_version
        group.retryMaxTimes = 9
        response = await g.call(
            master.addr, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode())
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        await sync.sync_all()
        assert s.groups.table["SyncGroup"].retryMaxTimes == 9
        assert s.groups.data_version == m.groups.data_version
        # the master's offsets, unchanged, win again over one changed here meanwhile (upstream's
        # putAll each time: the unchanged table is skipped only while the slave's is unchanged too)
        s.offsets.commit("SyncGroup", "SyncTopic", 0, 5)
        await sync.sync_all()
        assert s.offsets.queues_of("SyncGroup", "SyncTopic") == {0: 11, 2: 29}
        # a commit on the master: the slave merges the one entry that changed, and its version
        for group, q, offset in (("SyncGroup", 1, 13), ("OtherGroup", 0, 3)):
            commit = {"consumerGroup": group, "topic": "SyncTopic", "queueId": q, "commitOffset": offset}
            response = await g.call(master.addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, commit))
            assert response.code == ResponseCode.SUCCESS, describe(response)
        await sync.sync_all()
        assert s.offsets.queues_of("SyncGroup", "SyncTopic") == {0: 11, 1: 13, 2: 29}
        assert s.offsets.queues_of("OtherGroup", "SyncTopic") == {0: 3}
        assert s.offsets.table == m.offsets.table
        assert s.offsets.data_version == m.offsets.data_version

        # A topic deleted on the master goes away on the slave at the next sync.
        response = await g.call(
            master.addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SyncTopic"})
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        await sync.sync_all()
        assert s.topics.get("SyncTopic") is None
        assert s.topics.data_version == m.topics.data_version
