"""After a restart -- a reboot even -- a store cannot know which of its old commit-log bytes are
still in the page cache: it counts every byte it loaded as possibly out of memory
(``CommitLog.loaded_end``). Its readers -- pulls, replication, lookups -- check with ``mincore``
first and bring the missing pages back in a worker thread, so that the store's own thread takes no
major page fault reading them; pages found in memory need no read-in at all.

Page residency is the kernel's own (``mincore``); skipped where the file system keeps a file's
pages whatever it is told (tmpfs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from remoting.protocol.message import decode_message
from store.config import MessageStoreConfig
from store.consume_queue import CQ_UNIT, CQ_UNIT_SIZE, FILLER_UNIT, ConsumeQueue
from store.mapped_file import PAGE_SIZE
from store.message_store import DefaultMessageStore
from store.results import BoundaryType
from tests.integration.storekit import (
    T0,
    Clock,
    cached_pages,
    drop_pages,
    major_faults,
    put,
    running_store,
    skip_unless_pages_drop,
    small_config,
)

FILE = 256 * 1024
BODY = 8 * 1024
COUNT = 100  # ~820 KiB: four files, the last one partly written


@pytest.fixture(autouse=True)
def _drops_pages(tmp_path: Path) -> None:
    skip_unless_pages_drop(tmp_path)


def _body(i: int) -> bytes:
    return bytes([i % 251]) * BODY


def _config(tmp_path: Path) -> MessageStoreConfig:
    # the default page-cache bound (1 GiB): nothing of this small log is dropped while it runs
    return small_config(tmp_path, mappedFileSizeCommitLog=FILE)


async def _filled(cfg: MessageStoreConfig) -> list[str]:
    """Append COUNT messages to queue T/0, shut the store down cleanly; the commit-log files."""
    async with running_store(cfg) as store:
        for i in range(COUNT):
            await put(store, "T", 0, _body(i), tags="a")
        paths = [mf.path for mf in store.commit_log.mfq.files]
    assert len(paths) == 4
    return paths


async def _filled_out_of_memory(cfg: MessageStoreConfig) -> list[str]:
    """:func:`_filled`, then every commit-log page dropped from the page cache, as a reboot leaves
    them; the files."""
    paths = await _filled(cfg)
    for path in paths:
        drop_pages(path)
    return paths


async def _pull_all(store: DefaultMessageStore) -> list[bytes]:
    """Every body of T/0 as a pull reads them: ``read_in_queue``, then ``get_message``."""
    bodies: list[bytes] = []
    offset = 0
    while True:
        await store.read_in_queue("T", 0, offset, 8)
        res = store.get_message("g", "T", 0, offset, 8)
        assert res is not None
        if not res.message_views:
            return bodies
        bodies += [bytes(decode_message(v).body) for v in res.message_views]
        offset = res.next_begin_offset
        res.release()


async def test_after_a_restart_old_bytes_out_of_memory_are_read_in_before_a_pull(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    paths = await _filled_out_of_memory(cfg)
    async with running_store(cfg) as store:
        cl = store.commit_log
        end = cl.max_offset
        assert cl.loaded_end == end + (-end % PAGE_SIZE)
        assert cl.cold_end == cl.loaded_end
        assert not any(cached_pages(paths[0]))  # recovery read the tail only
        faults = major_faults()
        assert await _pull_all(store) == [_body(i) for i in range(COUNT)]
        assert major_faults() == faults
        assert all(cached_pages(paths[0]))


async def test_after_a_restart_bytes_still_in_memory_need_no_read_in(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    paths = await _filled(cfg)
    drop_pages(paths[1])  # one file out of memory, the others still cached
    async with running_store(cfg) as store:
        cl = store.commit_log
        job = cl.read_in_job(0, cl.max_offset)
        assert job is not None
        # only the dropped file's bytes are read in: mincore found the rest in memory
        assert [(mf.file_from_offset, start, stop) for mf, start, stop in job.args[0]] == [(FILE, 0, FILE)]
        await trio.to_thread.run_sync(job)
        assert all(cached_pages(paths[1]))
        assert cl.read_in_job(0, cl.max_offset) is None
        # nothing to do for a pull either, and every byte reads as written
        faults = major_faults()
        assert await _pull_all(store) == [_body(i) for i in range(COUNT)]
        assert major_faults() == faults


async def test_a_fresh_store_has_nothing_out_of_memory(tmp_path: Path) -> None:
    async with running_store(_config(tmp_path)) as store:
        assert store.commit_log.loaded_end == store.commit_log.cold_end == 0
        await put(store, "T", 0, _body(0), tags="a")
        assert store.commit_log.read_in_job(0, store.commit_log.max_offset) is None


async def test_a_truncation_below_the_loaded_end_lowers_it(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    await _filled_out_of_memory(cfg)
    async with running_store(cfg) as store:
        cl = store.commit_log
        res = store.get_message("g", "T", 0, 40, 1)
        assert res is not None
        cut = res.phy_start
        res.release()
        await store.truncate_to(cut)
        assert cl.loaded_end <= cut
        assert cl.cold_end <= cut
        # the bytes written from there on are in memory: no read-in for them
        for i in range(40, COUNT):
            await put(store, "T", 0, _body(i), tags="a")
        job = cl.read_in_job(cut + PAGE_SIZE, cl.max_offset)
        assert job is None
        faults = major_faults()
        assert await _pull_all(store) == [_body(i) for i in range(COUNT)]
        assert major_faults() == faults


async def test_a_pull_over_filler_units_reads_in_the_messages_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue whose first message does not sit at the start of its file has filler units before
    it: the read-in spans the messages' records, not the fillers' (0, 2^31-1)."""
    cfg = _config(tmp_path)
    paths = await _filled_out_of_memory(cfg)
    async with running_store(cfg) as store:
        cq = store.queues.get("T", 0)
        assert cq is not None
        real = cq.read_units(70, 4)  # records in the third file
        assert real is not None
        first = CQ_UNIT.unpack_from(real)[0]
        last, last_size, _ = CQ_UNIT.unpack_from(real, len(real) - CQ_UNIT_SIZE)
        assert 2 * FILE <= first < last + last_size <= 3 * FILE
        monkeypatch.setattr(ConsumeQueue, "read_units", lambda self, offset, count: FILLER_UNIT * 2 + real)
        assert await store.read_in_queue("T", 0, 70, 6) == last + last_size
        start = first - 2 * FILE
        assert all(cached_pages(paths[2], start - start % PAGE_SIZE, last + last_size - 2 * FILE))
        assert not any(cached_pages(paths[0]))  # not from the fillers' offset 0


# --- consume-queue units and lookups by time ---------------------------------------------------------

CQ_UNITS = 30  # four queue files for COUNT messages: three older ones, one the newest


def _timed_config(tmp_path: Path) -> MessageStoreConfig:
    return small_config(
        tmp_path, mappedFileSizeCommitLog=FILE, mappedFileSizeConsumeQueue=CQ_UNITS * CQ_UNIT_SIZE
    )


def _stamp(i: int) -> int:
    return T0 + 1000 * i


async def _filled_with_times_out_of_memory(cfg: MessageStoreConfig) -> tuple[list[str], list[str]]:
    """COUNT messages in T/0, message i stored at :func:`_stamp` (i); then the store shut down and
    every page of its commit-log and consume-queue files dropped, as a reboot leaves them. The
    commit-log files and the queue's files."""
    clock = Clock(step=0)
    async with running_store(cfg, now_ms=clock) as store:
        for i in range(COUNT):
            clock.ms = _stamp(i)
            await put(store, "T", 0, _body(i), tags="a")
        paths = [mf.path for mf in store.commit_log.mfq.files]
        cq = store.queues.get("T", 0)
        assert cq is not None
        queue_paths = [mf.path for mf in cq.mfq.files]
    assert len(queue_paths) == 4
    for path in paths + queue_paths:
        drop_pages(path)
    return paths, queue_paths


async def test_after_a_restart_lookups_by_time_read_old_units_and_records_in_first(tmp_path: Path) -> None:
    """SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, a queue's last store time (topic and
    consumer stats) and the log's earliest store time (runtime info) read units and record heads
    nobody read since the restart: each is brought in by a worker thread, so the store's thread
    takes no major fault, and every answer is the one the times give."""
    cfg = _timed_config(tmp_path)
    _, queue_paths = await _filled_with_times_out_of_memory(cfg)
    async with running_store(cfg) as store:
        # the load read the newest queue file and the first page of the oldest (where recovery
        # looks for the min offset) only
        assert not any(cached_pages(queue_paths[1]))
        faults = major_faults()
        by_time = store.get_offset_in_queue_by_time
        for i in (0, 1, 17, 29, 30, 31, 58, 64, 90, 99):
            assert await by_time("T", 0, _stamp(i), BoundaryType.LOWER) == i
            assert await by_time("T", 0, _stamp(i) + 500, BoundaryType.UPPER) == i
        assert await by_time("T", 0, _stamp(COUNT), BoundaryType.LOWER) == COUNT
        assert await store.get_earliest_message_time("T", 0) == _stamp(0)
        await store.read_in_store_time("T", 0, 45)
        assert store.get_message_store_timestamp("T", 0, 45) == _stamp(45)
        await store.read_in_message(store.min_phy_offset)
        assert store.get_earliest_store_time() == _stamp(0)
        assert major_faults() == faults
        assert all(cached_pages(queue_paths[1]))  # a search reads in a queue file's units at once


async def test_after_a_restart_a_pull_reads_old_queue_files_in_first(tmp_path: Path) -> None:
    cfg = _timed_config(tmp_path)
    _, queue_paths = await _filled_with_times_out_of_memory(cfg)
    async with running_store(cfg) as store:
        cq = store.queues.get("T", 0)
        assert cq is not None
        assert cq.read_in_job(COUNT - 1, 1) is None  # the newest file: the load read it in
        assert cq.read_in_job(CQ_UNITS, 8) is not None
        faults = major_faults()
        assert await _pull_all(store) == [_body(i) for i in range(COUNT)]
        assert major_faults() == faults
        assert all(all(cached_pages(path)) for path in queue_paths)
        assert cq.read_in_job(CQ_UNITS, 8) is None  # in memory now: mincore says so, no job


async def test_after_a_restart_a_query_by_key_reads_old_index_pages_in_first(tmp_path: Path) -> None:
    """QUERY_MESSAGE walks a slot's chain of index entries, one page of the file at a time: after
    a restart those pages -- of the older files, and the entries of the newest -- come back in
    worker threads (``read_in_query``), so the store's thread takes no major fault, and every key
    finds its message."""
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, maxIndexNum=30)  # 29 entries a file
    async with running_store(cfg) as store:
        for i in range(COUNT):
            await put(store, "T", 0, _body(i), tags="a", keys=f"key{i}")
        assert store.index is not None
        index_paths = [str(Path(cfg.storePathRootDir) / "index" / name) for name in store.index.file_names]
        log_paths = [mf.path for mf in store.commit_log.mfq.files]
    assert len(index_paths) == 4
    for path in index_paths + log_paths:
        drop_pages(path)
    async with running_store(cfg) as store:
        # the load read each file's header page (and slots) only: its entries' page is on disk
        assert not all(cached_pages(index_paths[0]))
        faults = major_faults()
        for i in (0, 1, 14, 28, 29, 45, 60, 75, COUNT - 1):
            await store.read_in_query("T", f"key{i}", 32, 0, 2**62)
            result = store.query_message("T", f"key{i}", 32, 0, 2**62)
            assert [bytes(decode_message(v).body) for v in result.message_views] == [_body(i)]
        assert major_faults() == faults
