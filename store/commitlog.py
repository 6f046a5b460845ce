"""The commit log: one append-only log of stored-message records over a :class:`MappedFileQueue`.

Upstream: ``CommitLog`` (+ ``DefaultAppendMessageCallback``). Records arrive already encoded
(:func:`remoting.protocol.message.encode_message`); at append the log writes the queue offset, physical offset
and store timestamp into the record and copies it into the map. The first 4 bytes (TOTALSIZE) of a record are copied last, so a
copy interrupted by a crash leaves a zero size, which recovery reads as the end of the data. A record
never spans two files:
when ``record + 8`` bytes do not fit, an 8-byte BLANK filler (remaining size, BLANK_MAGIC) ends the
file and the record goes to the next one.

This module never blocks and never awaits: when the log needs a new file, :meth:`CommitLog.append`
returns :data:`NEED_FILE` and the async layer creates the file in a worker thread, installs it with
:meth:`CommitLog.install_file` and retries.
"""

from __future__ import annotations

import bisect
import functools
import logging
import struct
from collections.abc import Callable

from remoting.protocol.message import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_POSITION,
)
from store.mapped_file import PAGE_SIZE, MappedFile, MappedFileQueue

log = logging.getLogger("store.commitlog")


def _nothing() -> None:
    pass


def _read_in_ranges(ranges: list[tuple[MappedFile, int, int]]) -> None:
    for mf, start, end in ranges:
        mf.read_in_sync(start, end)


def _drop_ranges(ranges: list[tuple[MappedFile, int, int]]) -> None:
    for mf, start, end in ranges:
        mf.drop_cache_sync(start, end)


#: Returned by :meth:`CommitLog.append` when the current file is full (or there is none).
NEED_FILE = -1
#: Bytes that must remain after a record in its file (room for the BLANK filler).
END_FILE_MIN_BLANK_LENGTH = 8
#: End of a record's STORETIMESTAMP when its born host is IPv6 (56 + 12 + 8): the most of a record's
#: head :meth:`CommitLog.pickup_store_timestamp` reads.
STORE_TIME_END = 76
#: Spacing of the in-memory message-boundary marks used by :meth:`CommitLog.boundary_at_or_below`.
BOUNDARY_MARK_SPACING = 64 * 1024

_QO_PO = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET (positions 20, 28)
_I64 = struct.Struct(">q")
_QO_PO_PACK = _QO_PO.pack_into
_I64_PACK = _I64.pack_into
_I32 = struct.Struct(">i")
_SIZE_MAGIC = struct.Struct(">ii")
_BLANK = struct.Struct(">ii")


class CommitLog:
    """Append, read and truncate the commit log. All offsets are absolute log offsets."""

    def __init__(self, store_dir: str, file_size: int, *, warm: bool = False) -> None:
        self.mfq = MappedFileQueue(
            store_dir, file_size, prefault=True, warm=warm, size_key="mappedFileSizeCommitLog"
        )
        self.file_size = file_size
        # a record ending beyond this leaves no room for the BLANK filler
        self.fit_limit = file_size - END_FILE_MIN_BLANK_LENGTH
        #: the file appends go to (the last one), or None before the first file exists
        self.current: MappedFile | None = None
        # sorted message-boundary offsets, roughly every BOUNDARY_MARK_SPACING bytes
        self._marks: list[int] = []
        self.next_mark = 0
        #: offset of the BLANK filler that ended the last full file (-1: none yet)
        self.last_blank_offset = -1
        #: an append ending beyond this log offset asks ``write_ahead`` to dirty the pages ahead
        self.write_ahead_mark = 0
        #: called when an append passes :attr:`write_ahead_mark` (the store's WriteAhead.kick)
        self.write_ahead: Callable[[], None] = _nothing
        #: bytes below this log offset may not be in the page cache -- this log dropped them
        #: (:meth:`drop_ranges`, by the flusher), or they were in the log when it was loaded
        #: (:attr:`loaded_end`): a reader brings a range there back with :meth:`read_in_job` in
        #: a worker thread first, so that the event loop never waits for the disk in a page
        #: fault. 0: none.
        self.cold_end = 0
        #: the log's end when it was loaded (page-aligned up): after a restart -- a reboot
        #: even -- nothing tells which of those bytes are still in the page cache
        #: (:meth:`loaded_cold`)
        self.loaded_end = 0
        # every file below this log offset was dropped whole (where :meth:`drop_ranges` starts)
        self._whole_dropped_below = 0

    # --- state -----------------------------------------------------------------------------------

    def attach_loaded(self) -> None:
        """Adopt the files loaded into :attr:`mfq` (after recovery set their positions)."""
        self.current = self.mfq.last
        self._marks = [mf.file_from_offset for mf in self.mfq.files]
        self.next_mark = self.max_offset

    @property
    def max_offset(self) -> int:
        cur = self.current
        return cur.file_from_offset + cur.wrote_position if cur is not None else self.mfq.max_offset

    @property
    def min_offset(self) -> int:
        return self.mfq.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.mfq.flushed_offset

    # --- append ----------------------------------------------------------------------------------

    def append(self, buf: bytearray, queue_offset: int, store_timestamp: int, ts_pos: int) -> int:
        """Write one encoded record; returns its physical offset, or :data:`NEED_FILE`.

        When the record does not fit the current file, the BLANK filler is written, the file is
        marked full and NEED_FILE is returned: install the next file and call again.
        """
        mf = self.current
        if mf is None:
            return NEED_FILE
        n = len(buf)
        pos = mf.wrote_position
        end = pos + n
        if end > self.fit_limit:
            self._end_file(mf)
            return NEED_FILE
        phys = mf.file_from_offset + pos
        _QO_PO_PACK(buf, 20, queue_offset, phys)
        _I64_PACK(buf, ts_pos, store_timestamp)
        # TOTALSIZE goes in last: a copy cut short by a crash leaves it 0, the end of the data
        view = mf.view
        src = memoryview(buf)
        view[pos + 4 : end] = src[4:]
        view[pos : pos + 4] = src[:4]
        mf.wrote_position = end
        mf.last_store_timestamp = store_timestamp
        if phys + n > self.write_ahead_mark:
            self.write_ahead()
        if phys >= self.next_mark:
            self._marks.append(phys)
            self.next_mark = phys + BOUNDARY_MARK_SPACING
        return phys

    def append_batch(
        self, buf: bytearray, offsets: list[int], queue_offset: int, store_timestamp: int, count_qo: bool
    ) -> int:
        """Write records laid end to end in ``buf`` (starting at ``offsets``) as one block with
        consecutive queue offsets (all the same when ``count_qo`` is False). Returns the physical
        offset of the first record or :data:`NEED_FILE` (same contract as :meth:`append`)."""
        mf = self.current
        if mf is None:
            return NEED_FILE
        n = len(buf)
        pos = mf.wrote_position
        if pos + n + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            self._end_file(mf)
            return NEED_FILE
        base = mf.file_from_offset + pos
        qo = queue_offset
        for rel in offsets:
            _QO_PO.pack_into(buf, rel + 20, qo, base + rel)
            sys_flag = _I32.unpack_from(buf, rel + SYSFLAG_POSITION)[0]
            _I64.pack_into(buf, rel + (68 if sys_flag & BORNHOST_V6_FLAG else 56), store_timestamp)
            if count_qo:
                qo += 1
        view = mf.view
        view[pos + 4 : pos + n] = memoryview(buf)[4:]
        view[pos : pos + 4] = buf[:4]
        mf.wrote_position = pos + n
        mf.last_store_timestamp = store_timestamp
        if base + n > self.write_ahead_mark:
            self.write_ahead()
        if base >= self.next_mark:
            self._marks.append(base)
            self.next_mark = base + BOUNDARY_MARK_SPACING
        return base

    def mark_appended(self, phys: int) -> None:
        """Record the boundary of a record appended at ``phys >= next_mark`` by a caller that
        wrote it itself (the store's plain send path); :meth:`append` does this on its own."""
        self._marks.append(phys)
        self.next_mark = phys + BOUNDARY_MARK_SPACING

    def _end_file(self, mf: MappedFile) -> None:
        pos = mf.wrote_position
        self.last_blank_offset = mf.file_from_offset + pos
        if pos < self.file_size:
            if self.file_size - pos >= END_FILE_MIN_BLANK_LENGTH:
                _BLANK.pack_into(mf.view, pos, self.file_size - pos, BLANK_MAGIC)
            mf.wrote_position = self.file_size

    def next_file_offset(self) -> int:
        """Start offset of the file the next append needs."""
        return self.mfq.next_offset()

    def install_file(self, mf: MappedFile) -> None:
        """Make ``mf`` (created for :meth:`next_file_offset`) the current file."""
        self.mfq.install(mf)
        self.current = mf
        self.write_ahead_mark = mf.file_from_offset  # its first append asks for its window
        if not self._marks or self._marks[-1] != mf.file_from_offset:
            self._marks.append(mf.file_from_offset)
        self.next_mark = mf.file_from_offset + BOUNDARY_MARK_SPACING

    # --- raw replication ---------------------------------------------------------------------------

    def append_raw(self, data: bytes | bytearray | memoryview) -> None:
        """Copy replicated bytes at the current max offset into the current file. The caller checks
        that a current file exists and that ``data`` fits in it."""
        mf = self.current
        assert mf is not None
        pos = mf.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise ValueError(f"{n} bytes at {mf.file_from_offset + pos} would cross the end of {mf.path}")
        mf.view[pos : pos + n] = data
        mf.wrote_position = pos + n
        if mf.file_from_offset + pos + n > self.write_ahead_mark:
            self.write_ahead()

    def read_raw(self, offset: int, max_bytes: int) -> memoryview | None:
        """Zero-copy view of up to ``max_bytes`` written bytes from ``offset``, never crossing the end
        of a file; empty at the max offset; None outside ``[min_offset, max_offset]``."""
        if offset == self.max_offset:
            return memoryview(b"")
        mf = self.mfq.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = min(mf.wrote_position, pos + max_bytes)
        if pos > mf.wrote_position:
            return None
        return mf.view[pos:end]

    # --- reading ---------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> memoryview | None:
        """Zero-copy view of ``size`` bytes at ``offset`` (a whole record), or None when the bytes
        are not (or no longer) in the log."""
        files = self.mfq.files
        if not files:
            return None
        i = (offset - files[0].file_from_offset) // self.file_size
        if i < 0 or i >= len(files):
            return None
        mf = files[i]
        pos = offset - mf.file_from_offset
        end = pos + size
        if end > mf.wrote_position:
            return None
        return mf.view[pos:end]

    def record_size_at(self, offset: int) -> int | None:
        """TOTALSIZE of the record at ``offset``; 0 for a BLANK filler; None if no record starts
        there (unwritten, or not a valid magic code)."""
        mf = self.mfq.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return None
        size, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
        if magic == BLANK_MAGIC:
            return 0
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or size <= 0:
            return None
        return size

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (-1 when it cannot be read)."""
        mf = self.mfq.find(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + min(size, STORE_TIME_END) > mf.wrote_position:
            return -1
        sys_flag = _I32.unpack_from(mf.mm, pos + SYSFLAG_POSITION)[0]
        return _I64.unpack_from(mf.mm, pos + (68 if sys_flag & BORNHOST_V6_FLAG else 56))[0]

    def boundary_at_or_below(self, offset: int) -> int:
        """The largest record boundary ``<= offset`` (file starts, record starts, the max offset).

        Walks record headers from the nearest known boundary below ``offset``; BLANK fillers and
        partially written (replicated) records end the walk at their start.
        """
        offset = min(offset, self.max_offset)
        mf = self.mfq.find(offset)
        if mf is None:
            if offset >= self.max_offset:
                return self.max_offset
            return self.min_offset
        i = bisect.bisect_right(self._marks, offset) - 1
        start = self._marks[i] if i >= 0 else mf.file_from_offset
        if start < mf.file_from_offset:
            start = mf.file_from_offset
        pos = start - mf.file_from_offset
        target = offset - mf.file_from_offset
        wrote = mf.wrote_position
        mm = mf.mm
        while pos < target:
            if pos + 8 > wrote:
                break
            size, magic = _SIZE_MAGIC.unpack_from(mm, pos)
            if magic == BLANK_MAGIC or size <= 0 or (magic != MAGIC_V1 and magic != MAGIC_V2):
                break
            if pos + size > target or pos + size > wrote:
                break
            pos += size
        return mf.file_from_offset + pos

    # --- page cache ------------------------------------------------------------------------------

    def drop_ranges(self, line: int, step: int) -> list[tuple[MappedFile, int, int]]:
        """(file, start, end) ranges of flushed bytes below log offset ``line`` not dropped from
        the page cache yet, in files with at least ``step`` such bytes, for
        :meth:`MappedFile.drop_cache_sync` in a worker thread; then :meth:`dropped`."""
        out = []
        files = self.mfq.files
        if not files:
            return out
        # from the first file not dropped whole: a store of thousands of files, SYNC_FLUSH
        # asking at every group commit
        first = max(0, (self._whole_dropped_below - files[0].file_from_offset) // self.file_size)
        for mf in files[first:]:
            if mf.file_from_offset >= line:
                break
            end = min(line - mf.file_from_offset, mf.flushed_position, mf.file_size)
            end -= end % PAGE_SIZE
            if end - mf.dropped_to >= step or (end == mf.file_size > mf.dropped_to):
                out.append((mf, mf.dropped_to, end))
        return out

    def dropped(self, ranges: list[tuple[MappedFile, int, int]]) -> None:
        """Record the ranges :meth:`drop_ranges` gave as dropped (on the trio thread, after the
        drop): a file cut meanwhile below a range's end keeps its cut position as the end, a file
        no longer in the log counts no more."""
        for mf, _, end in ranges:
            if mf.closed or self.mfq.find(mf.file_from_offset) is not mf:
                continue
            end = min(end, mf.wrote_position - mf.wrote_position % PAGE_SIZE)
            if end > mf.dropped_to:
                mf.dropped_to = end
                self.cold_end = max(self.cold_end, mf.file_from_offset + end)
            if mf.dropped_to == mf.file_size and mf.file_end_offset > self._whole_dropped_below:
                self._whole_dropped_below = mf.file_end_offset

    def loaded_cold(self) -> None:
        """Count the bytes the log holds now, just loaded, as possibly not in the page cache
        (their readers check with ``mincore`` first, see :meth:`read_in_job`): the bytes a
        consumer or a slave reads after a restart are mostly old ones, and after a reboot none
        is in memory."""
        end = self.max_offset
        self.loaded_end = end + (-end % PAGE_SIZE)  # the last page too: a read of its bytes faults
        self.cold_end = max(self.cold_end, self.loaded_end)

    def read_in_job(self, start: int, end: int) -> Callable[[], None] | None:
        """A blocking job, for a worker thread, that brings the pieces of log bytes [start, end)
        that may not be in the page cache (:attr:`cold_end`) back into memory; None when there
        are none, or when every page of them is there after all (``mincore``, on the calling
        thread: a lookup, no I/O) -- bytes read back before, or still cached after a restart."""
        if start >= self.cold_end:
            return None
        ranges = [r for r in self._cold_ranges(start, end) if not r[0].resident(r[1], r[2])]
        return functools.partial(_read_in_ranges, ranges) if ranges else None

    @staticmethod
    def drop_job(ranges: list[tuple[MappedFile, int, int]]) -> Callable[[], None]:
        """A blocking job, for a worker thread, that drops the :meth:`drop_ranges` from the page
        cache (:meth:`MappedFile.drop_cache_sync`); then :meth:`dropped`."""
        return functools.partial(_drop_ranges, ranges)

    def _cold_ranges(self, start: int, end: int) -> list[tuple[MappedFile, int, int]]:
        """(file, start, end) pieces of log bytes [start, end) that lie below :attr:`cold_end`
        (their pages may be on the disk only)."""
        end = min(end, self.cold_end)
        out = []
        while start < end:
            mf = self.mfq.find(start)
            if mf is None:
                break
            pos = start - mf.file_from_offset
            stop = min(
                end - mf.file_from_offset,
                max(mf.dropped_to, self.loaded_end - mf.file_from_offset),
                mf.file_size,
            )
            if stop > pos:
                out.append((mf, pos, stop))
            start = mf.file_end_offset
        return out

    # --- truncation ------------------------------------------------------------------------------

    def cut(self, offset: int) -> list[MappedFile]:
        """Set the log's end to ``offset`` in memory: positions of the file holding it (or ending
        exactly there) are set, later files are detached and returned (the caller deletes them
        and zeroes the cut file's tail on disk)."""
        gone = self.mfq.detach_after(offset)
        last = self.mfq.last
        if last is not None:
            pos = offset - last.file_from_offset
            if pos < last.wrote_position:
                last.wrote_position = pos
            if pos < last.flushed_position:
                last.flushed_position = pos
            if pos < last.dropped_to:  # the bytes written there next are cached
                last.dropped_to = pos - pos % PAGE_SIZE
        if self.cold_end > offset:
            self.cold_end = offset - offset % PAGE_SIZE
        if self.loaded_end > offset:
            self.loaded_end = offset - offset % PAGE_SIZE
        if self._whole_dropped_below > offset:
            self._whole_dropped_below = offset - offset % self.file_size
        self.current = last
        self.write_ahead_mark = offset  # the next append asks for the window from there
        j = bisect.bisect_right(self._marks, offset)
        del self._marks[j:]
        self.next_mark = offset
        return gone

    def drop_marks_below(self, offset: int) -> None:
        j = bisect.bisect_left(self._marks, offset)
        del self._marks[:j]

    def add_mark(self, offset: int) -> None:
        """Record a known record boundary (recovery scan, dispatch) to speed up boundary lookups."""
        marks = self._marks
        if not marks or offset > marks[-1] + BOUNDARY_MARK_SPACING:
            marks.append(offset)
        elif offset < marks[-1]:
            bisect.insort(marks, offset)
