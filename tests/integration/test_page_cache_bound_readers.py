"""Readers of commit-log bytes that the page-cache bound (``rmqCommitLogPageCacheBytes``) dropped, on a
real broker: a replica streaming the master's log from its start and a consumer pulling every
message get every byte, and the broker's trio thread takes no major page fault doing so (the
bytes come back in worker threads: ``ReadAhead`` of the HA writer, the pull processor's
``read_in_queue``/``read_in``)."""

from __future__ import annotations

import bisect
from pathlib import Path

import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.headers import decode_header
from remoting.protocol.broker import EarliestMsgStoretimeResponseHeader, OffsetResponseHeader, TopicStatsTable
from remoting.protocol.common import KVTable
from remoting.protocol.message import decode_message
from store.consume_queue import CQ_UNIT_SIZE
from store.ha.packets import MasterPacketDecoder, MasterTransfer, SlaveAck, SlaveHandshake
from tests.integration.broker_requests import describe, simple_request
from tests.integration.replication_kit import (
    FILE_SIZE,
    TOPIC,
    Group,
    Running,
    commit_log_bytes,
    pull_bodies,
    replication_group,
)
from tests.integration.storekit import cached_pages, drop_pages, major_faults, skip_unless_pages_drop

BOUND = 512 * 1024
BODY = 8 * 1024
COUNT = 200  # ~1.7 MB over two queues: the first files lie wholly behind the bound
QUEUES = 2
OLD = "OldTopic"


def _body(i: int) -> bytes:
    return i.to_bytes(4, "big") * (BODY // 4)


def auto(broker_id: int, **kw: object) -> dict[str, object]:
    return dict(enableControllerMode=True, brokerId=broker_id, haMaxTimeSlaveNotCatchup=60_000, **kw)


async def _replicate_raw(ha_addr: str, end: int) -> bytes:
    """The master's log from its start to ``end`` as a replica sees it: a raw auto-switch slave
    (handshake, then acks) that keeps nothing on disk, so that every page fault of this thread
    while it runs is the master's."""
    host, _, port = ha_addr.rpartition(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(SlaveHandshake(False, False, 7).encode())
        decoder = MasterPacketDecoder()
        got = bytearray()
        acked = -1
        with trio.fail_after(10):
            while len(got) < end:
                if acked != len(got):
                    acked = len(got)
                    await stream.send_all(SlaveAck(acked).encode())
                data = await stream.receive_some(1 << 20)
                assert data, "the master closed the connection"
                for packet in decoder.feed(data):
                    if isinstance(packet, MasterTransfer) and packet.body:
                        assert packet.offset == len(got)
                        got += packet.body
    return bytes(got)


async def _master_with_messages(g: Group, **kw: object) -> Running:
    """Broker "m" started as the master of epoch 1 with COUNT messages over QUEUES queues."""
    m = await g.start("m", **auto(1, **kw))
    await m.broker.replication.change_to_master(1)
    await g.create_topic(m.addr, queues=QUEUES)
    for i in range(COUNT):
        await g.send_ok(m.addr, _body(i), queue_id=i % QUEUES)
    return m


async def _pull_all_without_major_faults(g: Group, addr: str) -> None:
    """A consumer pulls every message of every queue: all as sent, and this thread (the broker's
    trio thread) takes no major page fault meanwhile."""
    faults = major_faults()
    for q in range(QUEUES):
        assert await pull_bodies(g, addr, q) == [_body(i) for i in range(q, COUNT, QUEUES)]
    assert major_faults() == faults


async def test_a_catching_up_replica_and_a_consumer_read_dropped_bytes_off_the_event_loop(
    tmp_path: Path,
) -> None:
    skip_unless_pages_drop(tmp_path)
    async with replication_group(tmp_path) as g:
        m = await _master_with_messages(g, rmqCommitLogPageCacheBytes=BOUND)
        await m.store.cl_flusher.flush()
        await m.store.cl_flusher.flush()  # drops what the first round made durable
        cl = m.store.commit_log
        end = cl.max_offset
        assert cl.cold_end >= 2 * FILE_SIZE
        first = cl.mfq.files[0].path
        assert not any(cached_pages(first))

        faults = major_faults()
        replicated = await _replicate_raw(m.ha_addr, end)
        assert major_faults() == faults
        assert all(cached_pages(first))  # brought back for the replica
        assert replicated == commit_log_bytes(g.root / "m" / "store", 0, end)

        # the bound drops a range once: the bytes read back stay until the kernel wants the
        # memory; dropped again by hand here, for the consumer
        for mf in cl.mfq.files[:2]:
            mf.drop_cache_sync(0, mf.file_size)
        assert not any(cached_pages(first))
        await _pull_all_without_major_faults(g, m.addr)
        assert decode_message(replicated).body == _body(0)


async def test_after_a_restart_a_replica_and_a_consumer_read_old_bytes_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """A restarted broker cannot tell which of its old bytes are still in the page cache -- after
    a reboot none is -- so its readers check (``mincore``) and bring back what is missing in worker
    threads; no page-cache bound involved (nothing is dropped while it runs)."""
    skip_unless_pages_drop(tmp_path)
    async with replication_group(tmp_path) as g:
        await g.stop(await _master_with_messages(g))
        paths = sorted(str(p) for p in (g.root / "m" / "store" / "commitlog").iterdir())
        assert len(paths) >= 3
        for path in paths:
            drop_pages(path)  # as a reboot leaves them

        m = await g.start("m", **auto(1))
        await m.broker.replication.change_to_master(2)
        cl = m.store.commit_log
        end = cl.max_offset
        assert cl.cold_end >= end
        assert not any(cached_pages(paths[0]))
        faults = major_faults()
        replicated = await _replicate_raw(m.ha_addr, end)
        assert major_faults() == faults
        assert replicated == commit_log_bytes(g.root / "m" / "store", 0, end)

        for mf in cl.mfq.files[:-1]:  # out of memory again, for the consumer
            mf.drop_cache_sync(0, mf.file_size)
        assert not any(cached_pages(paths[0]))
        await _pull_all_without_major_faults(g, m.addr)


async def test_after_a_restart_lookups_by_time_and_stats_read_old_units_and_records_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, GET_TOPIC_STATS_INFO and
    GET_BROKER_RUNTIME_INFO of a restarted broker read consume-queue units and record heads
    nobody read since the restart (queue files of 20 units here, so that most are older files):
    they come back in worker threads, and every answer is the one the stored times give."""
    skip_unless_pages_drop(tmp_path)
    small_queues = {"mappedFileSizeConsumeQueue": 20 * CQ_UNIT_SIZE}
    async with replication_group(tmp_path) as g:
        m = await g.start("m", **auto(1, **small_queues))
        await m.broker.replication.change_to_master(1)
        # a topic whose messages are the log's first: its last message is old too
        await g.create_topic(m.addr, OLD, queues=1)
        for i in range(3):
            await g.send_ok(m.addr, _body(i), topic=OLD)
        await g.create_topic(m.addr, queues=QUEUES)
        for i in range(COUNT):
            await g.send_ok(m.addr, _body(i), queue_id=i % QUEUES)
        with trio.fail_after(10):  # dispatched (in controller mode: up to the confirm offset)
            while any(m.store.get_max_offset_in_queue(TOPIC, q) < COUNT // QUEUES for q in range(QUEUES)):
                await trio.sleep(0.01)
        old_first, old_last = (m.store.get_message_store_timestamp(OLD, 0, i) for i in (0, 2))
        stamps = [
            [m.store.get_message_store_timestamp(TOPIC, q, i) for i in range(COUNT // QUEUES)]
            for q in range(QUEUES)
        ]
        assert min(old_first, old_last, *(min(times) for times in stamps)) > 0
        await g.stop(m)
        store_dir = g.root / "m" / "store"
        for path in [*(store_dir / "commitlog").iterdir(), *(store_dir / "consumequeue").rglob("*")]:
            if path.is_file():
                drop_pages(str(path))  # as a reboot leaves them

        m = await g.start("m", **auto(1, **small_queues))
        await m.broker.replication.change_to_master(2)
        faults = major_faults()
        # first the stats, whose records (each queue's last, the log's first) nothing read yet
        response = await g.call(m.addr, simple_request(RequestCode.GET_TOPIC_STATS_INFO, topic=TOPIC))
        table = TopicStatsTable.decode(response.body_bytes).offsetTable
        assert {mq.queueId: t.lastUpdateTimestamp for mq, t in table.items() if mq.queueId < QUEUES} == {
            q: stamps[q][-1] for q in range(QUEUES)
        }
        response = await g.call(m.addr, simple_request(RequestCode.GET_TOPIC_STATS_INFO, topic=OLD))
        table = TopicStatsTable.decode(response.body_bytes).offsetTable
        assert [t.lastUpdateTimestamp for mq, t in table.items() if mq.queueId == 0] == [old_last]
        response = await g.call(m.addr, simple_request(RequestCode.GET_BROKER_RUNTIME_INFO))
        assert KVTable.decode(response.body_bytes).table["earliestMessageTimeStamp"] == str(old_first)
        for q in range(QUEUES):
            times = stamps[q]
            earliest = simple_request(RequestCode.GET_EARLIEST_MSG_STORETIME, topic=TOPIC, queueId=q)
            response = await g.call(m.addr, earliest)
            assert decode_header(response, EarliestMsgStoretimeResponseHeader).timestamp == times[0]
            for i in (0, 7, 33, 61, len(times) - 1):
                search = simple_request(
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic=TOPIC, queueId=q, timestamp=times[i]
                )
                response = await g.call(m.addr, search)
                assert response.code == ResponseCode.SUCCESS, describe(response)
                assert decode_header(response, OffsetResponseHeader).offset == bisect.bisect_left(
                    times, times[i]
                )
        assert major_faults() == faults
