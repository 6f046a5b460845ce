"""The commit-log file allocator and its idle-work thread (store/allocate.py): idle jobs return
results and exceptions, run in their own thread and can be asked to stop; a prepared file is populated
there and then published, a roll takes the file being populated without waiting, and a file no
bigger than the window is prepared whole at normal priority; with the writer's pace, files are
brought into memory only as far ahead as its rate asks for."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.testing

from store.allocate import MAX_PREPARED_FILES, MIN_LEAD, FileAllocator, IdleWorker, WritePace
from store.mapped_file import PAGE_SIZE, MappedFile, MappedFileQueue
from tests.integration.storekit import cached_pages

T = TypeVar("T")
MIB = 1024 * 1024
SIZE = 8 * MIB
WINDOW = 2 * MIB


def _queue(tmp_path: Path) -> MappedFileQueue:
    mfq = MappedFileQueue(str(tmp_path), SIZE, prefault=True)
    mfq.install(mfq.create_file_sync(0))
    return mfq


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    """Poll ``condition`` every millisecond; fail after ``timeout`` seconds."""
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.001)


async def test_idle_worker_runs_jobs_in_its_own_thread_at_normal_priority() -> None:
    # the CPU work of its jobs goes to the page helper process (SCHED_IDLE, test_store_page_helper):
    # the thread itself must be able to take the GIL back at once
    worker = IdleWorker("test-idle")

    def where() -> tuple[str, int]:
        return threading.current_thread().name, os.sched_getscheduler(0)

    assert await worker.run_sync(lambda: 6 * 7) == 42
    assert await worker.run_sync(where) == ("test-idle", os.SCHED_OTHER)

    def boom() -> None:
        raise ValueError("from the idle thread")

    with pytest.raises(ValueError, match="from the idle thread"):
        await worker.run_sync(boom)


async def test_idle_job_is_asked_to_stop_on_cancel_and_finishes_first() -> None:
    worker = IdleWorker("test-idle")
    stop = threading.Event()
    finished = []

    def job() -> None:
        assert stop.wait(10)
        finished.append(True)

    with trio.move_on_after(0.05) as scope:
        await worker.run_sync(job, on_cancel=stop.set)
        assert finished == [True]  # run_sync returned only after the job did
        await trio.lowlevel.checkpoint()
        pytest.fail("the cancellation is delivered at the next checkpoint")
    assert scope.cancelled_caught


class _StarvedIdle(IdleWorker):
    """An idle thread that gets no CPU until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__("starved")
        self.release = trio.Event()
        self.results: list[object] = []

    async def run_sync(self, fn: Callable[[], T], on_cancel: Callable[[], None] | None = None) -> T:
        await self.release.wait()
        result = fn()
        self.results.append(result)
        return result


async def test_roll_takes_the_file_being_populated_without_waiting(tmp_path: Path) -> None:
    mfq = _queue(tmp_path)
    idle = _StarvedIdle()
    alloc = FileAllocator(mfq, dirty_ahead=WINDOW, idle=idle)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.request_prepare()
        await _until(lambda: alloc.populating is not None, 10)
        assert mfq.next_file is None  # not published while being populated
        # the idle job gets no CPU: get() must not wait for it, nor yield (a roll that yields
        # has the appends behind it queue on the roll lock)
        with trio.testing.assert_no_checkpoints():
            mf = await alloc.get(SIZE)
        assert mf.file_from_offset == SIZE
        assert alloc.populating is None
        mfq.install(mf)
        idle.release.set()
        await _until(lambda: len(idle.results) >= 1, 10)
        # taken before its idle job began: read as the file in use, past its first window
        # (mapped writable by the job that created it, at normal priority)
        assert idle.results[0] == SIZE
        assert mf.write_ahead_end >= WINDOW
        assert not mf.closed  # neither retired...
        assert mfq.next_file is None or mfq.next_file.file_from_offset == 2 * SIZE  # ...nor published
        nursery.cancel_scope.cancel()
    mfq.close_all()


async def test_prepared_file_is_populated_then_published(tmp_path: Path) -> None:
    mfq = _queue(tmp_path)
    alloc = FileAllocator(mfq, dirty_ahead=WINDOW, idle=IdleWorker("test-idle"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.request_prepare()
        await _until(lambda: mfq.next_file is not None, 20)
        nf = mfq.next_file
        assert nf.file_from_offset == SIZE
        assert nf.write_ahead_end == WINDOW  # the first window is mapped writable
        assert alloc.populating is None
        assert await alloc.get(SIZE) is nf
        nursery.cancel_scope.cancel()
    mfq.install(nf)
    mfq.close_all()


async def test_a_prepared_file_read_to_its_end_is_not_read_again_in_use(tmp_path: Path) -> None:
    # each idle job costs the busy event loop its hand-overs: a file its preparation read to the
    # end needs no second read when the writer reaches it
    mfq = _queue(tmp_path)
    clock = _Clock()
    pace = WritePace(128 * MIB, clock)
    pace.sample(0)
    clock.now += 0.0078125
    pace.sample(4 * MIB)  # 512 MiB/s: the widest window, every file read to its end
    idle = _StarvedIdle()
    idle.release.set()
    alloc = FileAllocator(mfq, dirty_ahead=WINDOW, idle=idle, pace=pace)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.request_prepare()
        await _until(lambda: mfq.next_file is not None, 20)
        assert idle.results == [SIZE]  # read past its first window, to its end
        nf = await alloc.get(SIZE)
        mfq.install(nf)
        nf.wrote_position = MIB
        alloc.follow(nf)  # as the write-ahead does after a refill
        await _until(lambda: mfq.next_file is not None, 20)
        assert mfq.next_file.file_from_offset == 2 * SIZE
        assert alloc._in_use_read == (nf, SIZE)
        assert idle.results == [SIZE, SIZE]  # the next file's preparation only
        nursery.cancel_scope.cancel()
    mfq.close_all()


async def test_small_file_is_mapped_writable_whole_and_published_without_the_idle_thread(
    tmp_path: Path,
) -> None:
    # a file no bigger than the window rolls within milliseconds: prepared at normal priority
    mfq = _queue(tmp_path)
    idle = _StarvedIdle()  # never released: a small file must not need it
    alloc = FileAllocator(mfq, dirty_ahead=SIZE, idle=idle)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.request_prepare()
        await _until(lambda: mfq.next_file is not None, 20)
        nf = mfq.next_file
        assert nf.file_from_offset == SIZE
        assert nf.write_ahead_end == SIZE  # every page mapped writable
        assert alloc.populating is None
        assert idle.results == []
        assert await alloc.get(SIZE) is nf
        nursery.cancel_scope.cancel()
    mfq.install(nf)
    mfq.close_all()


class _GatedFile(MappedFile):
    """A mapped file whose population waits for ``GATE`` (and says when it is done)."""

    __slots__ = ()
    GATE = threading.Event()
    POPULATED = threading.Event()

    def populate_write_sync(self, start: int, end: int, keep_going: Callable[[], bool] | None = None) -> int:
        self.GATE.wait(30)
        try:
            return super().populate_write_sync(start, end, keep_going)
        finally:
            self.POPULATED.set()


class _GatedQueue(MappedFileQueue):
    def create_file_sync(self, offset: int) -> MappedFile:
        mf = super().create_file_sync(offset)
        mf.__class__ = _GatedFile
        return mf


async def test_a_roll_takes_a_small_file_while_it_is_being_populated(tmp_path: Path) -> None:
    # a small file is populated at normal priority, in the job that created it and visible as
    # populating from its creation on: a roll that needs it meanwhile takes it at once (it
    # waited for the population: 3.6 ms a roll at 4 MiB)
    _GatedFile.GATE.clear()
    _GatedFile.POPULATED.clear()
    mfq = _GatedQueue(str(tmp_path), SIZE, prefault=True)
    mfq.install(mfq.create_file_sync(0))
    alloc = FileAllocator(mfq, dirty_ahead=SIZE, idle=_StarvedIdle())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.request_prepare()
        await _until(lambda: alloc.populating is not None, 10)
        with trio.fail_after(5):  # the population waits for the gate: get() must not
            mf = await alloc.get(SIZE)
        assert mf.file_from_offset == SIZE
        assert alloc.populating is None
        mfq.install(mf)
        _GatedFile.GATE.set()
        await trio.to_thread.run_sync(_GatedFile.POPULATED.wait, 10)
        await trio.sleep(0.05)
        assert not mf.closed  # taken, so neither discarded...
        assert mf not in mfq.prepared  # ...nor published
        nursery.cancel_scope.cancel()
    mfq.close_all()


async def test_a_file_handed_out_unpopulated_is_populated_in_idle_time(tmp_path: Path) -> None:
    # nothing prepared: get() creates the file on the spot; run() then read-populates the part
    # beyond the write position before it prepares the next file
    mfq = _queue(tmp_path)
    idle = _StarvedIdle()
    idle.release.set()  # jobs run at once, on the event loop's thread
    alloc = FileAllocator(mfq, dirty_ahead=WINDOW, idle=idle)
    mf = await alloc.get(SIZE)
    mfq.install(mf)
    mf.wrote_position = 4096 * 3
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        await _until(lambda: mfq.next_file is not None, 20)
        nursery.cancel_scope.cancel()
    assert idle.results[0] == SIZE  # the file in use, to its end...
    assert len(idle.results) == 2  # then the next file's own population
    # ...from past the write-ahead window (WriteAhead's, at normal priority): the writer never
    # meets a page the idle helper is bringing in (and the helper reads no page around its own)
    window_end = mf.wrote_position + WINDOW
    assert not any(cached_pages(mf.path, PAGE_SIZE * 3, window_end))
    assert all(cached_pages(mf.path, window_end, SIZE))
    mfq.close_all()


async def test_population_of_a_file_in_use_stops_once_the_log_rolled_past_it(tmp_path: Path) -> None:
    mfq = _queue(tmp_path)
    idle = _StarvedIdle()
    alloc = FileAllocator(mfq, dirty_ahead=WINDOW, idle=idle)
    mf = await alloc.get(SIZE)
    mfq.install(mf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        await trio.sleep(0.05)  # run() is waiting for the (starved) idle thread
        later = mfq.create_file_sync(2 * SIZE)
        mfq.install(later)  # a roll: mf is no longer the last file
        idle.release.set()
        await _until(lambda: bool(idle.results), 10)
        nursery.cancel_scope.cancel()
    assert idle.results[0] == WINDOW  # stopped before its first chunk (past the write-ahead window)
    mfq.close_all()


async def test_small_files_are_prepared_several_ahead_and_dropped_when_the_log_is_cut(
    tmp_path: Path,
) -> None:
    # 4 windows' worth of small files (a roll every few ms): up to MAX_PREPARED_FILES ahead, so a
    # writer rolling faster than one file's population still finds populated files
    small = 1024 * 1024
    mfq = MappedFileQueue(str(tmp_path), small, prefault=True)
    mfq.install(mfq.create_file_sync(0))
    alloc = FileAllocator(mfq, dirty_ahead=4 * small, idle=_StarvedIdle())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.request_prepare()
        await _until(lambda: len(mfq.prepared) == 4, 20)
        assert [mf.file_from_offset for mf in mfq.prepared] == [small, 2 * small, 3 * small, 4 * small]
        assert all(mf.write_ahead_end == small for mf in mfq.prepared)
        # a roll takes the first at once and the allocator tops the queue up again
        first = await alloc.get(small)
        assert first.file_from_offset == small
        mfq.install(first)
        alloc.request_prepare()
        await _until(lambda: len(mfq.prepared) == 4 and mfq.prepared[-1].file_from_offset == 5 * small, 20)
        # the log cut back into its first file (truncation): every prepared file is stale
        gone = mfq.detach_after(small)
        assert [mf.file_from_offset for mf in gone] == [small, 2 * small, 3 * small, 4 * small, 5 * small]
        assert mfq.prepared == []
        mfq.retire(gone)
        nursery.cancel_scope.cancel()
    mfq.close_all()
    assert MAX_PREPARED_FILES >= 4  # what this test counts on


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pace_follows_the_writer_rate_within_its_bounds() -> None:
    clock = _Clock()
    pace = WritePace(128 * MIB, clock)
    assert (pace.rate, pace.lead, pace.read_ahead) == (0.0, MIN_LEAD, MIN_LEAD)  # nothing known yet
    pace.sample(0)
    clock.now += 1.0
    pace.sample(10 * MIB)  # 10 MiB/s: half a second of it ahead, four seconds read
    assert pace.rate == pytest.approx(10 * MIB)
    assert pace.lead == 5 * MIB
    assert pace.read_ahead == 40 * MIB
    clock.now += 0.125
    pace.sample(10 * MIB + 50 * MIB)  # 400 MiB/s: the widest window
    assert pace.lead == 128 * MIB
    assert pace.read_ahead == 1600 * MIB
    clock.now += 60.0  # a pause, then one message: the rate halves, no more
    pace.sample(60 * MIB + 1024)
    assert pace.rate == pytest.approx(200 * MIB)
    clock.now += 1.0
    pace.sample(MIB)  # the log was cut back below the last sample: nothing known again
    assert pace.rate == 0.0
    assert pace.lead == MIN_LEAD
    assert WritePace(64 * 1024, clock).lead == 64 * 1024  # never wider than its maximum
    assert pace.lead % PAGE_SIZE == 0


async def test_a_slow_writer_gets_files_populated_and_prepared_only_as_its_pace_asks(tmp_path: Path) -> None:
    # a broker that receives a message now and then: the file in use is read MIN_LEAD ahead, not
    # to its end, and its successor is created only when the writer is that close to the end,
    # with MIN_LEAD dirtied and read, not dirty_ahead and its whole size; once the writer is
    # fast, the file in use is read to its end and the next one prepared at once, in full
    size = 4 * MIN_LEAD
    mfq = MappedFileQueue(str(tmp_path), size, prefault=True)
    mfq.install(mfq.create_file_sync(0))
    clock = _Clock()
    pace = WritePace(128 * MIB, clock)
    idle = _StarvedIdle()
    idle.release.set()
    alloc = FileAllocator(mfq, dirty_ahead=2 * MIN_LEAD, idle=idle, pace=pace)
    first = mfq.files[0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alloc.run)
        alloc.populate_later(first)
        alloc.request_prepare()
        # the file in use is wanted MIN_LEAD ahead of its writer -- which is the write-ahead
        # window's (MIN_LEAD dirtied at this pace): nothing to read, so no idle job at all
        await _until(lambda: alloc._in_use_read == (first, MIN_LEAD), 20)
        await trio.sleep(0.05)
        assert idle.results == []
        assert mfq.next_file is None  # the writer is far from the end: no successor yet
        alloc.follow(first)  # the writer has not moved: nothing more to do
        await trio.sleep(0.05)
        assert idle.results == []
        first.wrote_position = size - MIN_LEAD
        # within MIN_LEAD of the end: the next file is prepared, MIN_LEAD of it dirtied when it
        # is created (all its pace asks for: nothing to read either); the rest of the file in
        # use is the write-ahead window's again
        alloc.follow(first)
        await _until(lambda: mfq.next_file is not None, 20)
        assert alloc._in_use_read == (first, size)
        assert idle.results == []
        assert mfq.next_file.write_ahead_end == MIN_LEAD
        pace.sample(0)
        clock.now += 0.0078125
        pace.sample(4 * MIB)  # 512 MiB/s
        nxt = await alloc.get(size)
        mfq.install(nxt)
        nxt.wrote_position = MIB
        alloc.follow(nxt)
        await _until(lambda: mfq.next_file is not None and len(idle.results) == 2, 20)
        assert idle.results == [size, size]  # the file in use read to its end, then the next
        assert mfq.next_file.write_ahead_end == 2 * MIN_LEAD  # dirty_ahead: the most it dirties
        nursery.cancel_scope.cancel()
    mfq.close_all()
