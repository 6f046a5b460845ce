"""The commit log's page-cache bound (``rmqCommitLogPageCacheBytes``): flushed bytes further than the
bound behind the log's end leave the page cache after the next flush rounds, stay intact on disk,
and come back through ``read_in`` / ``read_in_queue`` in a worker thread -- the store's own thread
takes no major page fault reading them afterwards.

Page residency is the kernel's own (``mincore`` of a map of the file); skipped where the file
system keeps a file's pages whatever it is told (tmpfs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remoting.protocol.message import decode_message
from store.config import BrokerRole
from store.mapped_file import PAGE_SIZE
from store.message_store import DefaultMessageStore
from tests.integration.storekit import (
    cached_pages,
    major_faults,
    put,
    read_queue,
    running_store,
    skip_unless_pages_drop,
    small_config,
)

FILE = 256 * 1024
BOUND = 512 * 1024
BODY = 8 * 1024
COUNT = 160  # ~1.3 MiB: the first files lie wholly behind the bound


@pytest.fixture(autouse=True)
def _drops_pages(tmp_path: Path) -> None:
    skip_unless_pages_drop(tmp_path)


def _body(i: int) -> bytes:
    return bytes([i % 251]) * BODY


async def _filled(store: DefaultMessageStore) -> None:
    for i in range(COUNT):
        await put(store, "T", 0, _body(i), tags="a")
    await store.cl_flusher.flush()
    await store.cl_flusher.flush()  # drops what the first round made durable


def _files(store: DefaultMessageStore) -> list[tuple[int, str]]:
    return [(mf.file_from_offset, mf.path) for mf in store.commit_log.mfq.files]


async def test_flushed_bytes_behind_the_bound_leave_the_page_cache_and_read_back_intact(
    tmp_path: Path,
) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg) as store:
        await _filled(store)
        cl = store.commit_log
        end = cl.max_offset
        # every whole file further than the bound behind the end was dropped, nothing nearer
        assert end - BOUND - FILE < cl.cold_end <= end - BOUND
        cold = [(base, path) for base, path in _files(store) if base + FILE <= cl.cold_end]
        assert len(cold) >= 2
        for _, path in cold:
            assert not any(cached_pages(path)), path
        last_path = _files(store)[-1][1]
        written = cl.current.wrote_position
        assert all(cached_pages(last_path, 0, written - written % PAGE_SIZE))
        # a reader brings them back first: no major fault on this thread, every byte as written
        faults = major_faults()
        await store.read_in(cl.min_offset, cl.cold_end)
        for _, path in cold:
            assert all(cached_pages(path)), path
        assert _bodies(store) == [_body(i) for i in range(COUNT)]
        assert major_faults() == faults


def _decoded_body(record: memoryview | bytes) -> bytes:
    return bytes(decode_message(record).body)


def _bodies(store: DefaultMessageStore) -> list[bytes]:
    """Every body of queue T/0, in order."""
    return [_decoded_body(r) for r in read_queue(store, "T", 0)]


async def test_a_pull_of_dropped_bytes_reads_in_just_its_messages_first(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg) as store:
        await _filled(store)
        first_path = _files(store)[0][1]
        assert not any(cached_pages(first_path))
        faults = major_faults()
        read_to = await store.read_in_queue("T", 0, 0, 8)
        res = store.get_message("g", "T", 0, 0, 8)
        assert res is not None
        assert len(res.message_views) == 8
        assert res.phy_start == 0
        assert res.phy_end == read_to
        assert [_decoded_body(v) for v in res.message_views] == [_body(i) for i in range(8)]
        res.release()
        assert major_faults() == faults
        pages = cached_pages(first_path)
        assert all(pages[: read_to // PAGE_SIZE])
        assert not any(pages[read_to // PAGE_SIZE + 1 :])  # the rest of the file stays on disk
        # nothing to bring in for bytes within the bound
        near = store.get_max_offset_in_queue("T", 0) - 1
        assert await store.read_in_queue("T", 0, near, 1) == 0


async def test_a_message_looked_up_by_offset_is_read_in_first(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg) as store:
        await _filled(store)
        res = store.get_message("g", "T", 0, 5, 1)
        assert res is not None
        phys = res.phy_start
        res.release()
        # get_message only sliced views: the record's pages are still on disk
        assert not any(cached_pages(_files(store)[0][1]))
        faults = major_faults()
        await store.read_in_message(phys)
        view = store.look_message_by_offset(phys)
        assert view is not None
        assert _decoded_body(view) == _body(5)
        assert major_faults() == faults


async def test_messages_queried_by_key_are_read_in_first(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg) as store:
        for i in range(COUNT):
            await put(store, "T", 0, _body(i), tags="a", keys=f"K{i % 40}")
        await store.cl_flusher.flush()
        await store.cl_flusher.flush()
        assert not any(cached_pages(_files(store)[0][1]))
        assert store.index is not None
        store.index.query("T", "K3", 32, 0, 2**62)  # the index file's own pages: its first read maps them
        faults = major_faults()
        await store.read_in_query("T", "K3", 32, 0, 2**62)
        found = store.query_message("T", "K3", 32, 0, 2**62)
        assert sorted(_decoded_body(v) for v in found.message_views) == sorted(
            _body(i) for i in range(3, COUNT, 40)
        )
        assert major_faults() == faults
        assert any(cached_pages(_files(store)[0][1]))


async def test_bytes_not_dispatched_yet_stay_in_the_page_cache(tmp_path: Path) -> None:
    """In controller mode the dispatch waits for the confirm offset (a slow slave in the
    SyncStateSet holds it back) and reads the records on the event loop when it comes: the bound
    leaves those bytes in memory until they are dispatched."""
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg, controller_mode=True) as store:
        held = (await put(store, "T", 0, _body(0), tags="a")).end_offset
        store.set_confirm_offset(held)
        for i in range(1, COUNT):
            await put(store, "T", 0, _body(i), tags="a")
        await store.cl_flusher.flush()
        await store.cl_flusher.flush()
        cl = store.commit_log
        assert store.dispatcher.reput_offset == held
        assert cl.cold_end <= held
        assert all(cached_pages(_files(store)[1][1]))
        # confirmed and dispatched: now they go
        store.set_confirm_offset(cl.max_offset)
        await store.reput()
        assert store.dispatcher.reput_offset == cl.max_offset
        await store.cl_flusher.flush()
        assert cl.cold_end > cl.max_offset - BOUND - FILE
        assert not any(cached_pages(_files(store)[1][1]))
        await store.read_in(0, cl.cold_end)
        assert _bodies(store) == [_body(i) for i in range(COUNT)]


async def test_without_a_bound_nothing_leaves_the_page_cache(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=0)
    async with running_store(cfg) as store:
        await _filled(store)
        assert store.commit_log.cold_end == 0
        for _, path in _files(store)[:-1]:
            assert all(cached_pages(path)), path


async def test_a_truncation_below_the_line_lowers_it(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg) as store:
        await _filled(store)
        cl = store.commit_log
        res = store.get_message("g", "T", 0, 20, 1)
        assert res is not None
        cut = res.phy_start
        res.release()
        assert cut < cl.cold_end
        await store.truncate_to(cut)
        assert cl.cold_end <= cut
        assert cl.current is not None
        assert cl.current.dropped_to <= cut - cl.current.file_from_offset
        # the log goes on from there, and what it writes again is dropped again in turn
        for i in range(20, COUNT):
            await put(store, "T", 0, _body(i), tags="a")
        await store.cl_flusher.flush()
        await store.cl_flusher.flush()
        assert cl.cold_end > cut
        await store.read_in(0, cl.cold_end)
        assert _bodies(store) == [_body(i) for i in range(COUNT)]


async def test_bytes_read_back_are_not_dropped_again(tmp_path: Path) -> None:
    """The bound drops a range once; bytes a reader brought back stay until the kernel wants the
    memory (a lagging consumer reads on through them)."""
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=FILE, rmqCommitLogPageCacheBytes=BOUND)
    async with running_store(cfg) as store:
        await _filled(store)
        first = _files(store)[0][1]
        await store.read_in(0, FILE)
        assert all(cached_pages(first))
        later = _files(store)[5][1]  # within the bound still
        assert any(cached_pages(later))
        for i in range(COUNT):
            await put(store, "T", 1, _body(i), tags="a")
        await store.cl_flusher.flush()
        await store.cl_flusher.flush()
        assert all(cached_pages(first))
        assert not any(cached_pages(later))  # behind the bound now: dropped by these rounds


async def test_a_slave_store_bounds_its_page_cache_too(tmp_path: Path) -> None:
    """A slave's log grows by replicated bytes (``append_raw``); its flushes drop the same way."""
    m_cfg = small_config(tmp_path / "m", mappedFileSizeCommitLog=FILE)
    s_cfg = small_config(
        tmp_path / "s",
        mappedFileSizeCommitLog=FILE,
        rmqCommitLogPageCacheBytes=BOUND,
        brokerRole=BrokerRole.SLAVE,
    )
    async with running_store(m_cfg) as master, running_store(s_cfg) as slave:
        for i in range(COUNT):
            await put(master, "T", 0, _body(i), tags="a")
        offset = 0
        while offset < master.max_phy_offset:
            view = master.read_raw(offset, 64 * 1024)
            assert view is not None
            await slave.append_raw(offset, bytes(view))
            offset += len(view)
        await slave.cl_flusher.flush()
        await slave.cl_flusher.flush()
        assert slave.commit_log.cold_end > 0
        assert not any(cached_pages(_files(slave)[0][1]))
        await slave.read_in(0, slave.commit_log.cold_end)
        assert read_queue(slave, "T", 0) == read_queue(master, "T", 0)
