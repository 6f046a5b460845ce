"""The commit log's write-ahead window and the range flush it relies on (store/allocate.py
``WriteAhead``, ``MappedFile.populate_write_sync`` / ``flush_range_sync``): appends ask for the
pages ahead to be dirtied, the window follows the writer across files (as wide as the writer's
pace asks for), a flush covers exactly the written range, and a file being synced cannot be
unmapped under the call."""

from __future__ import annotations

import itertools
import os
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from remoting.protocol.message import decode_message, tags_hash_code
from store.allocate import MIN_LEAD, NO_MARK, PREPARED_DIRTY_BYTES, FileAllocator
from store.commitlog import CommitLog
from store.mapped_file import PAGE_SIZE, MappedFile
from store.message_store import DefaultMessageStore
from tests.integration.storekit import (
    STORE_HOST,
    encode,
    mapped_pages,
    put,
    read_queue,
    running_store,
    small_config,
)

MIB = 1024 * 1024


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _count_kicks(cl: CommitLog) -> list[int]:
    """Count the log's calls of its write-ahead kick from now on (in the one-item list returned)."""
    count = [0]
    kick = cl.write_ahead

    def counting_kick() -> None:
        count[0] += 1
        kick()

    cl.write_ahead = counting_kick
    return count


async def _settle(cl: CommitLog, want_file: int, want_end: int) -> None:
    with trio.fail_after(10):
        while (
            cl.current is None
            or cl.current.file_from_offset != want_file
            or cl.current.write_ahead_end < want_end
        ):
            await trio.sleep(0.005)


async def test_window_follows_the_writer_across_files(tmp_path: Path) -> None:
    file_size = 256 * 1024
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=file_size)
    async with running_store(cfg, background=True) as store:
        store.write_ahead.window = 64 * 1024
        cl = store.commit_log
        body = b"w" * 900
        await put(store, "T", 0, body, tags="a")
        # the first append passed the initial mark: the window covers 64 KiB from the writer
        await _settle(cl, 0, min(file_size, cl.current.wrote_position + 32 * 1024))
        with trio.fail_after(10):  # the mark is set once the worker thread has returned
            while cl.write_ahead_mark in (0, NO_MARK):  # NO_MARK: the refill is under way
                await trio.sleep(0.005)
        first_mark = cl.write_ahead_mark
        assert 0 < first_mark < 64 * 1024
        # write past the middle: the window moves on, the mark with it
        while cl.max_offset <= first_mark:
            await put(store, "T", 0, body, tags="a")
        with trio.fail_after(10):
            while cl.write_ahead_mark <= first_mark or cl.write_ahead_mark == NO_MARK:
                await trio.sleep(0.005)
        done_end = cl.current.write_ahead_end
        assert done_end >= cl.current.wrote_position + 64 * 1024 // 2 or done_end == file_size
        # roll into the next file: the window restarts there
        while cl.max_offset < file_size + 1000:
            await put(store, "T", 0, body, tags="a")
        # the first append in the new file moved the mark into it, with a window ahead (dirtied
        # by the allocator when it prepared the file, or by the write-ahead after the kick)
        with trio.fail_after(10):
            while cl.write_ahead_mark <= file_size or cl.write_ahead_mark == NO_MARK:
                await trio.sleep(0.005)
        assert cl.current.file_from_offset == file_size
        assert cl.current.write_ahead_end > cl.current.wrote_position
        assert len(read_queue(store, "T", 0)) == store.get_max_offset_in_queue("T", 0)


async def test_a_roll_to_a_ready_file_is_seen_by_no_other_append(tmp_path: Path) -> None:
    # while an append waits for a roll every other append queues behind it and gets the roll lock
    # one per scheduler batch: with 64 sends in flight the queue never drained and the broker ran
    # at half its rate. A roll whose next file is ready (prepared or being populated) must not
    # yield until it is done, so no other task ever finds the store rolling.
    file_size = 256 * 1024
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=file_size)
    async with running_store(cfg, background=True) as store:
        cl = store.commit_log
        body = b"r" * 900
        seen: list[int] = []

        async def watch() -> None:
            while True:
                seen.append(store._rolling)
                await trio.lowlevel.checkpoint()

        await put(store, "T", 0, body, tags="a")  # the first file: created for it (that yields)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            for _ in range(3):
                current = cl.current.file_from_offset
                with trio.fail_after(10):
                    while cl.mfq.next_file is None and store.allocator.populating is None:
                        await trio.sleep(0.005)
                while cl.current.file_from_offset == current:
                    await put(store, "T", 0, body, tags="a")
            nursery.cancel_scope.cancel()
        assert cl.current.file_from_offset == 3 * file_size
        assert seen
        assert set(seen) == {0}
        assert len(read_queue(store, "T", 0)) == store.get_max_offset_in_queue("T", 0)


def test_window_pages_take_no_write_fault(tmp_path: Path) -> None:
    path = tmp_path / "f"
    size = 4 * 1024 * 1024
    mf = MappedFile.open_sync(str(path), 0, size, create=True, prefault=True)
    try:
        chunk = b"z" * PAGE_SIZE
        # read-populated pages: every first store faults (the cost the window removes)
        before = _minor_faults()
        for pos in range(0, size // 2, PAGE_SIZE):
            mf.mm[pos : pos + PAGE_SIZE] = chunk
        read_populated = _minor_faults() - before
        mf.populate_write_sync(size // 2, size)
        before = _minor_faults()
        for pos in range(size // 2, size, PAGE_SIZE):
            mf.mm[pos : pos + PAGE_SIZE] = chunk
        write_populated = _minor_faults() - before
        pages = size // 2 // PAGE_SIZE
        if read_populated < pages // 2:
            return  # this kernel maps read-populated pages writable already: nothing to compare
        assert write_populated < pages // 10, (read_populated, write_populated)
    finally:
        assert mf.close()


def test_range_flush_keeps_data_and_guards_the_map(tmp_path: Path) -> None:
    path = tmp_path / "g"
    size = 1024 * 1024
    mf = MappedFile.open_sync(str(path), 0, size, create=True, prefault=True)
    data = os.urandom(10_000)
    mf.mm[5000 : 5000 + len(data)] = data
    mf.flush_range_sync(5000, 5000 + len(data))  # an unaligned start is rounded down to its page
    with open(path, "rb") as f:
        f.seek(5000)
        assert f.read(len(data)) == data
    # while a sync holds its export, close() refuses (and the owner retries)
    guard = mf.view[0:PAGE_SIZE]
    assert not mf.close()
    guard.release()
    assert mf.close()
    # a retired (closed) file is skipped, not an error
    mf.flush_range_sync(0, size)
    mf.populate_write_sync(0, size)


async def test_a_completed_file_leaves_the_resident_set_at_its_last_flush(tmp_path: Path) -> None:
    """The flush unmaps the pages it makes durable; pages mapped again by reads since (a slave's
    replication, consumers) go when the file's last flush completes it."""
    size = 64 * 1024
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=size)
    async with running_store(cfg) as store:
        cl = store.commit_log
        for i in range(20):
            await put(store, "T", 0, f"m{i}".encode() * 100)
        await store.flush()
        first = cl.current
        assert first is not None
        assert read_queue(store, "T", 0)  # maps the pages it reads again
        assert any(mapped_pages(first, 0, first.wrote_position - first.wrote_position % PAGE_SIZE))
        i = 20
        while cl.current is first:
            await put(store, "T", 0, f"m{i}".encode() * 100)
            i += 1
        await store.flush()
        assert first.flushed_position == size
        assert not any(mapped_pages(first, 0, size))
        assert len(read_queue(store, "T", 0)) == i  # and reads map them again


async def test_files_prepared_ahead_survive_a_restart_and_a_crash_as_empty_tail(tmp_path: Path) -> None:
    """Small commit-log files are prepared several ahead (store.allocate.MAX_PREPARED_FILES): a
    restart, clean or after a crash, finds empty files after the last message; the log ends at
    that message, every message is read back and appends go on after it."""
    cfg = small_config(tmp_path)
    bodies = [f"m{i:02d}".encode() * 150 for i in range(30)]  # ~0.6 KiB: several 64 KiB files

    def bodies_of(store: DefaultMessageStore) -> list[bytes]:
        return [decode_message(rec).body for rec in read_queue(store, "T", 0)]

    async def write(store: DefaultMessageStore, part: list[bytes]) -> int:
        start = store.max_phy_offset
        for body in part:
            r = await put(store, "T", 0, body, tags="a")
            # no gap: each append, the first after a restart too, goes right after the last
            # message, or to the start of the very next file when the log rolls
            size = cfg.mappedFileSizeCommitLog
            assert r.wrote_offset in (start, (start // size + 1) * size), (r.wrote_offset, start)
            start = r.wrote_offset + r.wrote_bytes
        with trio.fail_after(10):
            while len(store.commit_log.mfq.prepared) < 4:
                await trio.sleep(0.005)
        return store.max_phy_offset

    async with running_store(cfg, background=True) as store:
        end = await write(store, bodies[:10])
    assert len(os.listdir(tmp_path / "commitlog")) >= 5  # written files and prepared ones
    # a clean restart, then a crash (abandon: no flush, no checkpoint, the abort file stays)
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    assert store.max_phy_offset == end
    assert bodies_of(store) == bodies[:10]
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        end = await write(store, bodies[10:20])
        nursery.cancel_scope.cancel()
    store.abandon()
    async with running_store(cfg, background=True) as store:
        assert store.max_phy_offset == end
        assert bodies_of(store) == bodies[:20]
        await write(store, bodies[20:])
    async with running_store(cfg) as store:
        assert bodies_of(store) == bodies


async def test_a_store_that_receives_a_few_messages_brings_little_into_memory(tmp_path: Path) -> None:
    """The dev cluster's 64 MiB commit-log files: after a few messages the file in use has
    MIN_LEAD mapped ahead of the writer (its pace asks for no more), not the whole file, and no
    successor is made yet -- before the pace, four such brokers held 545 MB of file pages, had
    dirtied 400 MB of zeros and reserved 512 MB of disk after 20 messages."""
    size = 64 * MIB
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=size)
    async with running_store(cfg, background=True) as store:
        for i in range(20):
            await put(store, "T", 0, f"m{i}".encode() * 50, tags="a")
        cl = store.commit_log
        with trio.fail_after(20):  # the window is dirtied, the allocator reads the file ahead
            while (
                cl.current is None
                or not cl.current.write_ahead_end
                or not mapped_pages(cl.current, 0, MIN_LEAD)[-1]
            ):
                await trio.sleep(0.01)
        await trio.sleep(0.2)  # time enough to prepare a successor it should not prepare
        assert cl.current.write_ahead_end <= cl.max_offset + MIN_LEAD
        # far from the end of the file in use: no successor (64 MiB of disk reserved) yet
        assert cl.mfq.next_file is None
        assert len(os.listdir(tmp_path / "commitlog")) == 1
        # pages mapped in this process (its RSS): the window, give or take what the kernel maps
        # around a fault -- its fault-around and whole page-cache folios, which ext4's large
        # folios (after its readahead) make several MiB long (seen: up to 2.6 MiB past the
        # window in a full test run) -- and not the whole 64 MiB file, as before the pace
        mapped = sum(mapped_pages(cl.current, 0, size)) * PAGE_SIZE
        assert cl.max_offset <= mapped <= 4 * MIN_LEAD


async def test_appends_past_the_mark_ask_for_one_refill_until_it_is_done(tmp_path: Path) -> None:
    # a refill takes milliseconds; the appends meanwhile must not each ask for it again
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=1024 * 1024, mappedFileSizeConsumeQueue=300_000 * 20)
    async with running_store(cfg, background=True) as store:
        store.write_ahead.window = 64 * 1024
        cl = store.commit_log
        await put(store, "T", 0, b"w" * 900, tags="a")
        with trio.fail_after(10):
            while cl.write_ahead_mark in (0, NO_MARK):
                await trio.sleep(0.005)
        mark = cl.write_ahead_mark
        asked = _count_kicks(cl)
        rec = encode("T", 0, b"w" * 900, tags="a")
        with trio.testing.assert_no_checkpoints():  # the refill cannot run in between
            while cl.max_offset <= mark + 20 * 1024:
                assert store.try_put_message(rec, "T", 0, 0, tags_hash_code("a"), None, None) is not None
        assert asked[0] == 1
        assert cl.write_ahead_mark == NO_MARK
        with trio.fail_after(10):  # the refill sets the next mark, past the writer
            while cl.write_ahead_mark == NO_MARK:
                await trio.sleep(0.005)
        assert cl.write_ahead_mark > mark
        assert cl.current.write_ahead_end >= cl.current.wrote_position + 32 * 1024
        assert asked[0] == 1


async def test_a_refill_and_a_big_files_creation_never_dirty_pages_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker jobs that map commit-log pages writable -- the write-ahead's refills and the
    creation of the next big file with its first window -- run one at a time (the allocator's
    ``dirtying`` lock): side by side they took the writer's CPU on a two-CPU machine. Each job is
    slowed here (10 ms in its thread) so that two of them would overlap without the lock."""
    active = most = 0
    kinds: list[str] = []
    guard = threading.Lock()
    local = threading.local()
    real_populate = MappedFile.populate_write_sync
    real_create = FileAllocator._create_writable_sync

    def populate(self: MappedFile, start: int, end: int, keep_going: Callable[[], bool] | None = None) -> int:
        nonlocal active, most
        with guard:
            active += 1
            most = max(most, active)
            kinds.append("create" if getattr(local, "creating", False) else "refill")
        try:
            time.sleep(0.01)
            return real_populate(self, start, end, keep_going)
        finally:
            with guard:
                active -= 1

    def create(self: FileAllocator, offset: int, dirty: int) -> MappedFile:
        local.creating = True
        try:
            return real_create(self, offset, dirty)
        finally:
            local.creating = False

    monkeypatch.setattr(MappedFile, "populate_write_sync", populate)
    monkeypatch.setattr(FileAllocator, "_create_writable_sync", create)
    size = 64 * MIB  # bigger than the prepared window: its creation is not urgent
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=size)
    body = b"r" * 16 * 1024
    async with running_store(cfg, background=True) as store:
        cl = store.commit_log
        with trio.fail_after(60):
            for i in itertools.count():
                if cl.max_offset >= 2 * size + 8 * MIB:  # into the third file
                    break
                await put(store, "T", 0, body, tags="a")
                if i % 256 == 255:
                    await trio.sleep(0.001)  # the refills and creations get to start
    # the roll into the second file may find it not prepared yet (the writer's pace asks for it
    # late at first) and create it on the spot, without a first window: one creation at least
    assert kinds.count("create") >= 1, kinds
    assert kinds.count("refill") >= 2, kinds
    assert most == 1


async def test_the_window_reaches_into_the_next_file_before_the_roll(tmp_path: Path) -> None:
    """Near the end of a file the write-ahead maps pages of the prepared next file writable, as
    far as its window reaches (before, only the next file's first window was, dirtied when it was
    created: a fast writer that rolled into it overtook the refill that started then)."""
    size = 48 * MIB
    window = 128 * MIB
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=size, maxMessageSize=MIB)
    async with running_store(cfg, background=True) as store:
        cl = store.commit_log
        body = b"n" * (512 * 1024)
        await put(store, "T", 0, body, tags="a")  # the first file
        store.allocator.pace = None  # the whole window every refill, the next file prepared at once
        store.write_ahead.window = window
        store.allocator.request_prepare()
        with trio.fail_after(10):
            while cl.mfq.next_file is None:
                await trio.sleep(0.005)
        nxt = cl.mfq.next_file
        while cl.current.wrote_position < 24 * MIB:
            await put(store, "T", 0, body, tags="a")
        with trio.fail_after(10):  # the refill the last append may have asked for is done
            while cl.write_ahead_mark == NO_MARK:
                await trio.sleep(0.005)
        assert cl.current is not nxt  # before the roll
        # refilled when the writer passed half the window: at least half a window ahead of it,
        # 40 MiB and more into the next file -- past the first window its creation dirtied
        reach = cl.current.wrote_position + window // 2 - size
        assert reach > PREPARED_DIRTY_BYTES
        assert nxt.write_ahead_end >= reach
        assert mapped_pages(nxt, 0, reach)[-1]


async def test_a_window_past_the_next_small_file_asks_for_no_refill_until_the_roll(tmp_path: Path) -> None:
    """Small files are prepared mapped writable whole: a window that reaches past the end of the
    next one has nothing left to map, so the appends up to the roll ask for no refill (a mark
    left at the writer would have every append ask for one)."""
    size = 4 * MIB
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=size)
    async with running_store(cfg, background=True) as store:
        cl = store.commit_log
        body = b"s" * 8000
        await put(store, "T", 0, body, tags="a")
        store.allocator.pace = None  # the whole 128 MiB window: past the next 4 MiB file
        store.allocator.request_prepare()
        with trio.fail_after(10):
            while cl.mfq.next_file is None or cl.mfq.next_file.write_ahead_end < size:
                await trio.sleep(0.005)
        kicks = _count_kicks(cl)
        first = cl.current
        for _ in range(200):  # ~1.6 MB: within the first file
            await put(store, "T", 0, body, tags="a")
            await trio.sleep(0.001)  # a refill asked for gets done
        assert cl.current is first
        assert kicks[0] <= 2
