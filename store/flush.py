"""Flushing: the commit log (ASYNC_FLUSH on a period, SYNC_FLUSH by group commit) and the
consume queues + index + checkpoint.

Upstream: ``FlushRealTimeService``, ``GroupCommitService`` and ``FlushConsumeQueueService``.
Every fsync runs in a worker thread (``trio.to_thread.run_sync``).

Group commit: a send that must be durable calls :meth:`CommitLogFlusher.wait_flushed` with the
end of its record. If no flush is running it runs one itself, covering everything appended so
far; otherwise it waits for the running round and checks again. Sends that arrive while a round
runs are covered together by the next round. A send whose bytes a truncation cut away while it
waited (a master turned slave cuts its divergent tail, then takes the new master's bytes at the
same offsets) is told so (:meth:`CommitLogFlusher.cut_since`): the flush that later covers its
offset covers other bytes.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable

import trio

from remoting.repeats import RepeatedLog
from store.checkpoint import StoreCheckpoint
from store.commitlog import CommitLog
from store.consume_queue_store import ConsumeQueueStore
from store.deletion_marks import DeletionMarks
from store.dispatch import Dispatcher
from store.epoch import EpochFile
from store.index import IndexService
from store.mapped_file import PAGE_SIZE, MappedFile, drop_pages_below, fsync_dir, fsync_path

log = logging.getLogger("store.flush")

#: least bytes of a commit-log file a flush round drops from the page cache at once (see
#: ``rmqCommitLogPageCacheBytes``): group commits of SYNC_FLUSH run many rounds a second
DROP_STEP = 4 * 1024 * 1024


def _fsync_paths(paths: list[str]) -> None:
    for p in paths:
        fsync_path(p)


class CommitLogFlusher:
    """Makes commit-log bytes durable and tracks :attr:`flushed_offset`."""

    def __init__(
        self,
        commit_log: CommitLog,
        epoch_file: EpochFile | None = None,
        page_cache_bytes: int = 0,
        dispatched: Callable[[], int] | None = None,
    ) -> None:
        self.commit_log = commit_log
        #: ``rmqCommitLogPageCacheBytes``: flushed bytes further than this behind the log's end are
        #: dropped from the page cache by the flush rounds (0: never)
        self.page_cache_bytes = page_cache_bytes
        #: the offset up to which the store has dispatched (consume queues, index): bytes from
        #: there on stay in the page cache whatever the bound says -- the dispatch reads them on
        #: the event loop, and in controller mode it waits for the confirm offset, which a slow
        #: slave in the SyncStateSet can hold far behind the log's end
        self._dispatched = dispatched
        #: persisted (when dirty) before commit-log bytes are flushed, so an epoch entry is on disk
        #: before any byte it covers (store.ha ordering contract)
        self.epoch_file = epoch_file
        #: every byte below this offset is durable
        self.flushed_offset = commit_log.max_offset
        #: store timestamp of the newest durable message (checkpoint ``physicMsgTimestamp``)
        self.flushed_store_timestamp = 0
        #: bumped by truncation; a round that started before a truncation does not advance
        self.generation = 0
        #: (generation, offset) of the latest truncations, for :meth:`cut_since`
        self._cuts: deque[tuple[int, int]] = deque(maxlen=64)
        self._flushing = False
        self._round_done = trio.Event()

    async def flush(self, least_pages: int = 0) -> int:
        """Flush everything appended so far (only if at least ``least_pages`` dirty pages when
        given). Returns the flushed offset."""
        while self._flushing:
            await self._round_done.wait()
        cl = self.commit_log
        dirty = cl.mfq.dirty_files()
        if not dirty:  # every file is flushed up to its write position
            self.flushed_offset = cl.max_offset
            await self._drop_cold()
            return self.flushed_offset
        if least_pages > 0:
            pages = sum((w - mf.flushed_position) for mf, w in dirty) // PAGE_SIZE
            if pages < least_pages:
                await self._drop_cold()
                return self.flushed_offset
        target = cl.max_offset
        cur = cl.current
        ts = cur.last_store_timestamp if cur is not None else 0
        generation = self.generation
        # each file's unflushed range only: pages the write-ahead dirtied beyond it stay dirty
        ranges = [(mf, mf.flushed_position, w) for mf, w in dirty]
        new_files = [mf for mf, _ in dirty if not mf.dir_synced]
        epoch = self.epoch_file
        # bytes flushed by earlier rounds that fell behind the page-cache bound: dropped after
        # this round's sync, in the same worker job
        drops = self._drops()
        drop = cl.drop_job(drops) if drops else None

        def job() -> None:
            if epoch is not None and epoch.dirty:
                epoch.persist()
            for mf, start, end in ranges:
                mf.flush_range_sync(start, end)
                if end >= mf.file_size and start > 0:
                    # a file now complete: unmap also the pages reads mapped again since earlier
                    # flushes (replication to a slave, a slave's dispatch, consumers), which
                    # otherwise stayed in the process's resident set with every file kept
                    drop_pages_below(mf.mm, 0, start, mf.path)
            if new_files:
                fsync_dir(os.path.dirname(new_files[0].path))
            if drop is not None:
                drop()

        try:
            await self._run_round(job)
        finally:
            if drops:
                cl.dropped(drops)
        for mf in new_files:
            mf.dir_synced = True
        if generation == self.generation:
            for mf, w in dirty:
                if mf.flushed_position < w:
                    mf.flushed_position = w
            if target > self.flushed_offset:
                self.flushed_offset = target
                if ts:
                    self.flushed_store_timestamp = ts
        return self.flushed_offset

    def _drops(self) -> list[tuple[MappedFile, int, int]]:
        """The commit-log ranges to drop from the page cache now (``rmqCommitLogPageCacheBytes``)."""
        keep = self.page_cache_bytes
        end = self.commit_log.max_offset
        if not 0 < keep < end:
            return []
        line = end - keep
        if self._dispatched is not None:
            line = min(line, self._dispatched())
        return self.commit_log.drop_ranges(line, DROP_STEP)

    async def _drop_cold(self) -> None:
        """Drop what :meth:`_drops` gives in a worker job of its own (a round with nothing to
        flush: the writer paused), as a round does (one job at a time)."""
        drops = self._drops()
        if not drops:
            return
        try:
            await self._run_round(self.commit_log.drop_job(drops))
        finally:
            self.commit_log.dropped(drops)

    async def _run_round(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a worker thread as the one round at a time: :meth:`flush` calls that
        come meanwhile wait for it to end (:attr:`_round_done`)."""
        self._flushing = True
        done = self._round_done
        try:
            await trio.to_thread.run_sync(job)
        finally:
            self._flushing = False
            self._round_done = trio.Event()
            done.set()

    async def wait_flushed(self, offset: int, timeout_s: float, generation: int | None = None) -> bool:
        """Group commit: return True once every byte below ``offset`` is durable, False after
        ``timeout_s`` (the bytes stay in the log; upstream FLUSH_DISK_TIMEOUT) or as soon as a
        truncation after ``generation`` (default: the current one, i.e. the caller appended
        without awaiting since) cut the log below ``offset`` -- see :meth:`cut_since`."""
        if generation is None:
            generation = self.generation
        if self.flushed_offset >= offset and generation == self.generation:
            return True
        with trio.move_on_after(timeout_s):
            while self.flushed_offset < offset and not self.cut_since(generation, offset):
                if self._flushing:
                    await self._round_done.wait()
                else:
                    await self.flush()
        return self.flushed_offset >= offset and not self.cut_since(generation, offset)

    def cut_since(self, generation: int, offset: int) -> bool:
        """Whether a truncation after ``generation`` cut the log below ``offset`` (bytes that
        were below ``offset`` then may be gone or replaced). Truncations too old to be remembered
        count as cuts."""
        if generation == self.generation:
            return False
        cuts = self._cuts
        if not cuts or cuts[0][0] > generation + 1:
            return True
        return any(g > generation and cut < offset for g, cut in cuts)

    def truncated(self, offset: int) -> None:
        """The log was cut at ``offset``."""
        self.generation += 1
        self._cuts.append((self.generation, offset))
        self.flushed_offset = min(self.flushed_offset, offset)

    async def run_periodic(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        """ASYNC_FLUSH service: every ``interval_ms`` flush if ``least_pages`` are dirty, and
        everything at least every ``thorough_interval_ms``."""
        await _periodic(self.flush, "commit log", interval_ms, least_pages, thorough_interval_ms)


class LogicsFlusher:
    """Flushes consume queues, the index, the queue manifest and then the checkpoint."""

    def __init__(
        self,
        queues: ConsumeQueueStore,
        index: IndexService | None,
        dispatcher: Dispatcher,
        cl_flusher: CommitLogFlusher,
        checkpoint: StoreCheckpoint,
        confirm_offset: Callable[[], int],
        lock: trio.Lock,
        deletion_marks: DeletionMarks,
    ) -> None:
        self.queues = queues
        self.index = index
        self.dispatcher = dispatcher
        self.cl_flusher = cl_flusher
        self.checkpoint = checkpoint
        self.confirm_offset = confirm_offset
        self.lock = lock
        self.deletion_marks = deletion_marks
        #: :meth:`_state` as the last successful round found it when it started
        self._settled: tuple[object, ...] | None = None

    def _state(self) -> tuple[object, ...]:
        """What a round's work depends on. Consume-queue units and index entries are written by
        appends and their dispatch (the log's end and the reput offset move), a truncation moves
        the flusher's generation; the rest is what the round writes into the checkpoint and the
        manifest."""
        cl = self.cl_flusher
        index = self.index
        return (
            cl.commit_log.max_offset,
            self.dispatcher.reput_offset,
            cl.generation,
            cl.flushed_offset,
            cl.flushed_store_timestamp,
            self.confirm_offset(),
            self.queues.has_unrecorded(),
            bool(self.queues.staging),
            index is not None and bool(index.pending),
            tuple(self.deletion_marks.marks.items()),
        )

    async def flush(self, least_pages: int = 0) -> None:
        """One round: fsync dirty consume-queue files (those with ``least_pages`` dirty pages, or
        all), the index and the manifest, then write the checkpoint. The checkpoint's
        ``logicsFlushedOffset`` only advances when no dirty file was skipped.

        A periodic round (``least_pages`` > 0) that finds the store as the last round left it
        returns at once: it would find no file it did not leave dirty on purpose, and write the
        same checkpoint. Idle, a store of 20,000 queues scanned every queue's files each second
        for nothing (a third of the CPU an idle dev cluster of 10,000 topics used). A thorough round
        (``least_pages`` 0: every ``flushConsumeQueueThoroughInterval`` and at shutdown) always
        looks at every file."""
        if least_pages > 0 and self._settled is not None and self._state() == self._settled:
            return
        async with self.lock:
            reput = self.dispatcher.reput_offset
            reput_ts = self.dispatcher.last_store_timestamp
            phys_flushed = self.cl_flusher.flushed_offset
            phys_ts = self.cl_flusher.flushed_store_timestamp
            generation = self.cl_flusher.generation
            dirty = self.queues.dirty_files()
            chosen = dirty
            if least_pages > 0:
                need = least_pages * PAGE_SIZE
                chosen = [(mf, w) for mf, w in dirty if w - mf.flushed_position >= need]
            complete = len(chosen) == len(dirty)
            manifest = self.queues.take_unrecorded()
            paths = [mf.path for mf, _ in chosen]
            # the pages each file's writer finished since its last flush (see drop_pages_below)
            finished = [
                (mf.mm, mf.flushed_position, w, mf.path)
                for mf, w in chosen
                if w // PAGE_SIZE > mf.flushed_position // PAGE_SIZE
            ]
            index = self.index
            queues = self.queues

            def job() -> int:
                if manifest:
                    queues.record_sync(manifest)
                for mm, start, end, path in finished:
                    drop_pages_below(mm, start, end, path)
                _fsync_paths(paths)
                return index.flush() if index is not None else 0

            if index is not None:
                index.drain()  # on this thread: flush() in the worker must not race put_keys
            # what the round covers (nothing has run since it began): what changes while it
            # waits for the disk is for the next round to see
            state = self._state()
            try:
                index_ts = await trio.to_thread.run_sync(job)
            except OSError:
                queues.restore_unrecorded(manifest)
                raise
            for mf, w in chosen:
                if mf.flushed_position < w:
                    mf.flushed_position = w
            if generation != self.cl_flusher.generation:
                return  # truncated meanwhile: the truncation wrote its own checkpoint
            data = self.checkpoint.data
            if phys_flushed >= 0:
                data.physicFlushedOffset = phys_flushed
                if phys_ts:
                    data.physicMsgTimestamp = phys_ts
            if complete:
                data.logicsFlushedOffset = reput
                if reput_ts:
                    data.logicsMsgTimestamp = reput_ts
            if index_ts:
                data.indexMsgTimestamp = index_ts
            data.confirmPhyOffset = self.confirm_offset()
            await trio.to_thread.run_sync(self.checkpoint.flush_sync, self.checkpoint.snapshot())
            marks = self.deletion_marks
            if marks.marks and marks.prune(data):  # a recovery now starts above them
                await marks.save()
            self._settled = state

    async def run_periodic(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        await _periodic(
            self.flush, "consume queues, index and checkpoint", interval_ms, least_pages, thorough_interval_ms
        )


async def _periodic(
    flush: Callable[[int], Awaitable[object]],
    what: str,
    interval_ms: int,
    least_pages: int,
    thorough_interval_ms: int,
) -> None:
    """Every ``interval_ms`` ``flush(least_pages)``, and ``flush(0)`` at least every
    ``thorough_interval_ms``. A round the disk refuses (a full disk, an I/O error) is logged --
    once per reason, then as a reminder every 30 s -- and the next round tries again: what it did
    not make durable stays dirty, and the checkpoint does not claim it."""
    repeats = RepeatedLog(log)
    last_thorough = trio.current_time()
    while True:
        await trio.sleep(interval_ms / 1000)
        now = trio.current_time()
        pages = least_pages
        if (now - last_thorough) * 1000 >= thorough_interval_ms:
            last_thorough = now
            pages = 0
        try:
            await flush(pages)
        except OSError as exc:
            repeats.log("flush", logging.ERROR, f"flush of the {what} failed: {exc}; retried every round")
            continue
        repeats.resolved("flush", f"flush of the {what} succeeds again")


def fsync_paths_sync(paths: list[str]) -> None:
    """fsync several files by path; blocking."""
    _fsync_paths(paths)
