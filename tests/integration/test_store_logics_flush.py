"""The logics flusher's rounds (``store.flush.LogicsFlusher``) on a real store.

A periodic round that finds the store as the last round found it skips its scan of every queue's
files; what these tests pin down is that it never skips work: every unit appended before, or while,
a round runs is flushed by the next one, and a thorough round always looks at every file. A round
also unmaps the pages of consume-queue units and index entries it makes durable, which their
writers are done with: the process's resident set does not grow with every message stored.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from remoting.protocol.message import decode_message
from store.config import MessageStoreConfig
from store.consume_queue import ConsumeQueue
from store.mapped_file import PAGE_SIZE
from store.message_store import DefaultMessageStore
from tests.integration.storekit import mapped_pages, put, read_queue, running_store, small_config

#: a periodic round's threshold: files with at least this many dirty pages are flushed
LEAST_PAGES = 1
#: units of one queue that make a page and a half of its file
UNITS = 300


def _config(root: Path) -> MessageStoreConfig:
    # consume-queue files of 1,000 units (20,000 bytes): 300 units are more than a page
    return small_config(root, mappedFileSizeConsumeQueue=1000 * 20, mappedFileSizeCommitLog=1024 * 1024)


async def _fill(store: DefaultMessageStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        assert (await put(store, "FlushTopic", 0, b"x" * 64, uniq=f"U{i}")).is_ok


def _queue(store: DefaultMessageStore) -> ConsumeQueue:
    cq = store.queues.get("FlushTopic", 0)
    assert cq is not None
    assert cq.cur is not None
    return cq


async def test_an_idle_periodic_round_does_not_scan_and_a_thorough_one_does(tmp_path: Path) -> None:
    async with running_store(_config(tmp_path)) as store:
        await _fill(store, UNITS)
        await store.flush()
        flusher = store.logics_flusher
        await flusher.flush(LEAST_PAGES)
        mf = _queue(store).cur
        assert mf is not None
        assert mf.flushed_position == mf.wrote_position == UNITS * 20
        assert store.checkpoint.data.logicsFlushedOffset == store.dispatcher.reput_offset
        # a file left dirty behind the flusher's back (no append, no dispatch): a periodic round
        # of an unchanged store does not look at the files, so it stays dirty ...
        mf.flushed_position = 0
        await flusher.flush(LEAST_PAGES)
        assert mf.flushed_position == 0
        # ... until a thorough round, which always scans
        await flusher.flush(0)
        assert mf.flushed_position == UNITS * 20


async def test_a_periodic_round_flushes_what_was_appended_since_the_last(tmp_path: Path) -> None:
    async with running_store(_config(tmp_path)) as store:
        await _fill(store, UNITS)
        await store.flush()
        await store.logics_flusher.flush(LEAST_PAGES)
        await _fill(store, UNITS, UNITS)
        await store.flush()
        await store.logics_flusher.flush(LEAST_PAGES)
        mf = _queue(store).cur
        assert mf is not None
        assert mf.flushed_position == mf.wrote_position == 2 * UNITS * 20
        assert store.checkpoint.data.logicsFlushedOffset == store.dispatcher.reput_offset
        assert store.checkpoint.data.physicFlushedOffset == store.commit_log.max_offset


async def test_units_appended_while_a_round_runs_are_flushed_by_the_next(tmp_path: Path) -> None:
    async with running_store(_config(tmp_path)) as store:
        await _fill(store, UNITS)
        await store.flush()
        flusher = store.logics_flusher
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher.flush, LEAST_PAGES)
            # the round waits for its worker thread (fsyncs): append meanwhile
            await trio.testing.wait_all_tasks_blocked()
            await _fill(store, UNITS, UNITS)
        cq = _queue(store)
        mf = cq.cur
        assert mf is not None
        assert cq.max_offset == 2 * UNITS
        assert mf.flushed_position == UNITS * 20  # the round covered what it found when it began
        reput = store.dispatcher.reput_offset
        assert store.checkpoint.data.logicsFlushedOffset < reput
        await flusher.flush(LEAST_PAGES)
        assert mf.flushed_position == 2 * UNITS * 20
        assert store.checkpoint.data.logicsFlushedOffset == reput


async def test_a_round_unmaps_the_pages_of_units_and_entries_it_made_durable(tmp_path: Path) -> None:
    cfg = small_config(
        tmp_path,
        mappedFileSizeConsumeQueue=1000 * 20,
        mappedFileSizeCommitLog=1024 * 1024,
        maxHashSlotNum=1000,  # header and slots in the first page
        maxIndexNum=4000,
    )
    async with running_store(cfg) as store:
        for i in range(UNITS):
            assert (await put(store, "FlushTopic", 0, b"x" * 64, keys=f"K{i}", uniq=f"U{i}")).is_ok
        await store.flush()
        assert store.index is not None
        store.index.drain()
        queue = _queue(store).mfq.files[0]
        index = store.index._files[0]
        # written: 300 units (6,000 bytes: 2 pages) and 600 entries (12,000 bytes from byte 4,040,
        # behind the header and the slots: 4 pages)
        queue_pages = 2
        index_pages = (index.entries_pos + index.index_count * 20) // PAGE_SIZE + 1
        assert index_pages == 4
        assert mapped_pages(queue, 0, queue_pages * PAGE_SIZE) == [True, True]
        assert all(mapped_pages(index.map, 0, index_pages * PAGE_SIZE))
        await store.logics_flusher.flush(LEAST_PAGES)
        # only the page each writer still writes to stays: the queue's second, the index file's
        # first (header, slots, first entries) and its last entries' page
        assert mapped_pages(queue, 0, queue_pages * PAGE_SIZE) == [False, True]
        assert mapped_pages(index.map, 0, index_pages * PAGE_SIZE) == [True, False, False, True]
        # ... and everything reads as before, mapped again on demand
        assert len(read_queue(store, "FlushTopic", 0)) == UNITS
        found = store.query_message("FlushTopic", "K7", 10, 0, 2**62)
        assert [decode_message(v).keys for v in found.message_views] == ["K7"]
        del found  # its views of the log
        await _fill(store, 10, UNITS)  # the writers carry on
        assert _queue(store).max_offset == UNITS + 10
