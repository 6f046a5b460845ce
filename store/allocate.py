"""Creating commit-log files ahead of need, and dirtying their pages ahead of the writer, off
the event loop.

Upstream: ``AllocateMappedFileService``. The file after the current one is created and pre-faulted
in a worker thread as soon as the log rolls, so the send path finds it ready and never takes
first-touch page faults. :meth:`FileAllocator.get` is the one way to obtain a file: it hands out the
prepared one or creates it on the spot (serialized with preparation, so a file is never created
twice).
"""

from __future__ import annotations

import logging

import trio

from store.commitlog import CommitLog
from store.mapped_file import MappedFile, MappedFileQueue, delete_paths_sync

log = logging.getLogger("store.allocate")


class FileAllocator:
    """Hands out the files of one :class:`MappedFileQueue`."""

    def __init__(self, mfq: MappedFileQueue, dirty_ahead: int = 0) -> None:
        self.mfq = mfq
        #: bytes at the start of a prepared file to map writable too (the write-ahead window)
        self.dirty_ahead = dirty_ahead
        self._lock = trio.Lock()
        self._wakeup = trio.Event()

    async def get(self, offset: int) -> MappedFile:
        """The file starting at ``offset``: the prepared one, or a new one. Raises OSError when it
        cannot be created (e.g. ENOSPC)."""
        async with self._lock:
            mf = self.mfq.take_next(offset)
            if mf is not None:
                return mf
            return await trio.to_thread.run_sync(self.mfq.create_file_sync, offset)

    def request_prepare(self) -> None:
        """Ask :meth:`run` to prepare the file after the current last one."""
        self._wakeup.set()

    async def prepare(self, offset: int) -> None:
        """Create (and pre-fault) the file for ``offset`` unless it is ready or in the queue."""
        async with self._lock:
            mfq = self.mfq
            nf = mfq.next_file
            if nf is not None:
                if nf.file_from_offset == offset:
                    return
                mfq.next_file = None
                await trio.to_thread.run_sync(delete_paths_sync, mfq.retire([nf]))
            last = mfq.last
            if last is not None and last.file_from_offset >= offset:
                return
            dirty = self.dirty_ahead

            def create() -> MappedFile:
                mf = mfq.create_file_sync(offset)
                if dirty:
                    mf.populate_write_sync(0, dirty)
                return mf

            try:
                mf = await trio.to_thread.run_sync(create)
            except OSError as exc:
                log.error("could not prepare commit-log file at %d: %s", offset, exc)
                return
            if mfq.next_offset() == offset and mfq.next_file is None:
                mfq.next_file = mf
            else:  # the log moved on (or was truncated) meanwhile
                await trio.to_thread.run_sync(delete_paths_sync, mfq.retire([mf]))

    async def run(self) -> None:
        """Prepare the next file whenever asked (after each roll and at start)."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            if self.mfq.files:
                await self.prepare(self.mfq.next_offset())


#: bytes of the current commit-log file kept dirty-mapped ahead of the write position. Dirtying a
#: page costs about what its write fault would (~1.7 us here), so the window must be wide enough
#: for a worker thread to stay ahead of a writer at memory speed: 32 MiB gave 0.67 of the
#: baseline at 16 KiB records, 128 MiB 0.79 (bench.store).
WRITE_AHEAD_BYTES = 128 * 1024 * 1024
#: bytes at the start of a prepared (not yet used) file that the allocator dirties: kept small,
#: the file may wait a long time for its first append
PREPARED_DIRTY_BYTES = 32 * 1024 * 1024


class WriteAhead:
    """Keeps the pages just ahead of the commit log's write position mapped writable and dirty.

    Pre-faulting a file (``MADV_POPULATE_READ``) maps its pages read-only: the writer's first
    store to each page still takes a write fault (~1.7 us here, more than copying a 1 KiB record).
    Mapping every page writable up front would dirty the whole file with zeros (and an fdatasync
    would write them all); this service dirties only a window of :data:`WRITE_AHEAD_BYTES` ahead
    of the writer, refilled in a worker thread when the writer crosses its middle
    (``CommitLog.write_ahead_mark``, checked by the append paths, which call :meth:`kick`); the
    allocator dirties the first window of the file it prepares. The commit-log flusher syncs only
    the written range of a file, so the window stays dirty until the writer fills it.
    """

    def __init__(self, commit_log: CommitLog, window: int = WRITE_AHEAD_BYTES) -> None:
        self.commit_log = commit_log
        self.window = window
        self._wakeup = trio.Event()

    def kick(self) -> None:
        """The writer passed the mark: refill the window soon."""
        self._wakeup.set()

    async def run(self) -> None:
        cl = self.commit_log
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            mf = cl.current
            if mf is None or mf.closed:
                continue
            start = max(mf.wrote_position, mf.write_ahead_end)
            end = min(mf.file_size, mf.wrote_position + self.window)
            if end > start:
                await trio.to_thread.run_sync(mf.populate_write_sync, start, end)
            if cl.current is mf:
                # the next refill when the writer is half-way through the window; none once the
                # window reaches the end of the file (the next file's first append kicks again)
                if end >= mf.file_size:
                    cl.write_ahead_mark = mf.file_end_offset
                else:
                    cl.write_ahead_mark = mf.file_from_offset + max(end - self.window // 2, mf.wrote_position)
