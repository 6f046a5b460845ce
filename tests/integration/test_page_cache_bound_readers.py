"""Readers of commit-log bytes that the page-cache bound (``rmqCommitLogPageCacheBytes``) dropped, on a
real broker: a replica streaming the master's log from its start and a consumer pulling every
message get every byte, and the broker's trio thread takes no major page fault doing so (the
bytes come back in worker threads: ``ReadAhead`` of the HA writer, the pull processor's
``read_in_queue``/``read_in``)."""

from __future__ import annotations

from pathlib import Path

import trio

from remoting.protocol.message import decode_message
from store.ha.packets import MasterPacketDecoder, MasterTransfer, SlaveAck, SlaveHandshake
from tests.integration.replication_kit import (
    FILE_SIZE,
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
