"""Creating commit-log files ahead of need, off the event loop.

Upstream: ``AllocateMappedFileService``. The file after the current one is created and pre-faulted
in a worker thread as soon as the log rolls, so the send path finds it ready and never takes
first-touch page faults. :meth:`FileAllocator.get` is the one way to obtain a file: it hands out the
prepared one or creates it on the spot (serialized with preparation, so a file is never created
twice).
"""

from __future__ import annotations

import logging

import trio

from store.mapped_file import MappedFile, MappedFileQueue, delete_paths_sync

log = logging.getLogger("store.allocate")


class FileAllocator:
    """Hands out the files of one :class:`MappedFileQueue`."""

    def __init__(self, mfq: MappedFileQueue) -> None:
        self.mfq = mfq
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
            try:
                mf = await trio.to_thread.run_sync(mfq.create_file_sync, offset)
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
