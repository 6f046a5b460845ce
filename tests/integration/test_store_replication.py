"""Replication support: raw reads and appends, record boundaries, truncation of the whole store."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from remoting.protocol.message import decode_message
from store.config import BrokerRole, FlushDiskType
from store.message_store import DefaultMessageStore, StoreOffsetError
from store.results import PutMessageStatus
from tests.integration.storekit import STORE_HOST, encode, put, read_queue, running_store, small_config


async def _fill_master(master: DefaultMessageStore, n: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    starts = []
    for i in range(n):
        res = await put(master, "TopicA", i % 3, bytes([i % 256]) * rng.randint(10, 3000), keys=f"K{i}")
        starts.append(res.wrote_offset)
    return starts


async def _replicate(master: DefaultMessageStore, slave: DefaultMessageStore, rng: random.Random) -> int:
    chunks = 0
    while slave.max_phy_offset < master.max_phy_offset:
        off = slave.max_phy_offset
        view = master.read_raw(off, rng.randint(1, 9000))
        assert view is not None
        assert len(view) > 0
        await slave.append_raw(off, view)
        view.release()
        chunks += 1
    return chunks


def _queues(store: DefaultMessageStore) -> dict[int, list[bytes]]:
    return {q: read_queue(store, "TopicA", q) for q in range(3)}


async def test_raw_replication_rebuilds_identical_queues_and_index(tmp_path: Path) -> None:
    rng = random.Random(7)
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill_master(master, 120)
        chunks = await _replicate(master, slave, rng)
        assert chunks > len(master.commit_log.mfq.files)  # chunks cut records and files were rolled
        assert slave.max_phy_offset == master.max_phy_offset
        assert _queues(slave) == _queues(master)
        for f_m, f_s in zip(master.commit_log.mfq.files, slave.commit_log.mfq.files, strict=True):
            assert f_m.mm[: f_m.wrote_position] == f_s.mm[: f_s.wrote_position]
        assert slave.query_message("TopicA", "K77", 4, 0, 2**62).phy_offsets == (
            master.query_message("TopicA", "K77", 4, 0, 2**62).phy_offsets
        )


async def test_read_raw_never_crosses_a_file_end(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg) as store:
        await _fill_master(store, 80)
        size = cfg.mappedFileSizeCommitLog
        view = store.read_raw(size - 100, 10_000)
        assert view is not None
        assert len(view) == 100
        assert store.read_raw(store.max_phy_offset, 100) == b""
        assert store.read_raw(store.max_phy_offset + 1, 100) is None


async def test_append_raw_requires_the_max_offset(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path, brokerRole=BrokerRole.SLAVE)) as slave:
        with pytest.raises(StoreOffsetError):
            await slave.append_raw(100, b"x")  # an empty store can only start at a file boundary
        await slave.append_raw(0, b"x" * 10)
        with pytest.raises(StoreOffsetError):
            await slave.append_raw(20, b"x")


async def test_empty_slave_starts_at_the_masters_last_file(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "m")
    size = cfg.mappedFileSizeCommitLog
    async with (
        running_store(cfg) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill_master(master, 90)
        start = master.commit_log.mfq.files[-1].file_from_offset
        assert start >= size
        view = master.read_raw(start, size)
        assert view is not None
        await slave.append_raw(start, view)
        view.release()
        assert (slave.min_offset, slave.max_offset) == (start, master.max_offset)
        for q in range(3):
            mine = read_queue(slave, "TopicA", q)
            assert mine == read_queue(master, "TopicA", q)[-len(mine) :]
            assert slave.get_min_offset_in_queue("TopicA", q) == master.get_max_offset_in_queue(
                "TopicA", q
            ) - len(mine)


async def test_boundary_at_or_below_finds_record_starts_and_ends(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        starts = await _fill_master(store, 100)
        ends = [s + len(store.look_message_by_offset(s) or b"") for s in starts]
        boundaries = sorted({0, *starts, *ends})
        rng = random.Random(3)
        for off in [0, store.max_phy_offset, *(rng.randrange(0, store.max_phy_offset) for _ in range(300))]:
            expected = max(b for b in boundaries if b <= off)
            assert store.last_message_boundary_at_or_below(off) == expected, off


async def test_truncate_to_cuts_log_queues_index_and_epochs(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg) as store:
        store.epoch_file.append(1, 0)
        starts = await _fill_master(store, 60)
        store.epoch_file.append(2, starts[40])
        before = _queues(store)
        cut = starts[30]
        with pytest.raises(StoreOffsetError):
            await store.truncate_to(cut + 1)
        await store.truncate_to(cut)
        assert store.max_phy_offset == cut
        after = _queues(store)
        for q in range(3):
            assert after[q] == before[q][: len(after[q])]
        assert sum(len(v) for v in after.values()) == 30
        assert store.query_message("TopicA", "K45", 4, 0, 2**62).phy_offsets == []
        assert store.query_message("TopicA", "K29", 4, 0, 2**62).phy_offsets == [starts[29]]
        assert [e.epoch for e in store.epoch_file.entries()] == [1]
        # the log goes on from the cut with consistent queue offsets
        res = await put(store, "TopicA", 0, b"after-cut", keys="K-new")
        assert res.wrote_offset == cut
        assert res.logics_offset == len(after[0])
    # and a restart sees exactly the same store
    store2 = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store2.start()
    assert store2.max_phy_offset == res.end_offset
    q0 = read_queue(store2, "TopicA", 0)
    assert decode_message(q0[-1]).body == b"after-cut"
    assert [e.epoch for e in store2.epoch_file.entries()] == [1]
    await store2.shutdown()


async def test_slave_truncates_and_catches_up_again(tmp_path: Path) -> None:
    rng = random.Random(11)
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        starts = await _fill_master(master, 90)
        await _replicate(master, slave, rng)
        await slave.truncate_to(slave.last_message_boundary_at_or_below(starts[50] + 7))
        assert slave.max_phy_offset == starts[50]
        await _replicate(master, slave, rng)
        assert _queues(slave) == _queues(master)
        # a promoted slave continues the queue offsets where the replicated records left them
        slave.config.brokerRole = BrokerRole.ASYNC_MASTER
        res = await put(slave, "TopicA", 1, b"promoted")
        assert res.logics_offset == master.get_max_offset_in_queue("TopicA", 1)


async def test_truncate_everything_keeps_the_log_position(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        await _fill_master(store, 10)
        await store.truncate_to(0)
        assert store.max_phy_offset == 0
        assert all(store.get_max_offset_in_queue("TopicA", q) == 0 for q in range(3))
        res = await put(store, "TopicA", 0, b"fresh")
        assert res.wrote_offset == 0
        assert res.logics_offset == 0


async def test_sync_flush_wait_fails_when_a_truncation_cut_the_record_away(tmp_path: Path) -> None:
    """A demoted master cuts its divergent tail and takes the new master's bytes at the same
    offsets: a SYNC_FLUSH send that waited across that must not be told its message is durable,
    although the flushed offset passes its record end again."""
    sync = {"flushDiskType": FlushDiskType.SYNC_FLUSH, "syncFlushTimeout": 2000}
    async with (
        running_store(small_config(tmp_path / "a", **sync)) as a,
        running_store(small_config(tmp_path / "b")) as b,
    ):
        for store in (a, b):
            for i in range(3):
                assert (await put(store, "TopicA", 0, b"kept %d" % i)).is_ok
        cut = a.max_phy_offset
        assert b.max_phy_offset == cut  # same records, same sizes: the stores agree up to here
        for i in range(5):
            await put(b, "TopicA", 1, b"new master's %d" % i)

        flusher = a.cl_flusher
        generation = flusher.generation
        doomed = await a.put_message(
            encode("TopicA", 2, b"doomed"), "TopicA", 2, sys_flag=0, wait_store_msg_ok=False
        )
        end = doomed.end_offset
        await a.truncate_to(cut)
        data = b.read_raw(cut, b.max_phy_offset - cut)
        assert data is not None
        await a.append_raw(cut, data)
        data.release()
        await a.flush()
        assert a.flushed_offset >= end  # other bytes cover the doomed record's range now
        assert flusher.cut_since(generation, end)
        assert not flusher.cut_since(flusher.generation, end)
        assert not await flusher.wait_flushed(end, 1.0, generation)
        assert await flusher.wait_flushed(end, 1.0)  # a send appended after the cut is durable

        status, remark = await a._await_flush(end, generation)
        assert status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "truncated away" in remark
        assert read_queue(a, "TopicA", 2) == []
        assert read_queue(a, "TopicA", 1) == read_queue(b, "TopicA", 1)
