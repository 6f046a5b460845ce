"""Consume queues: per topic/queue id, the commit-log position of every message in queue order.

Upstream: ``ConsumeQueue`` (reference §6.1). A unit is 20 bytes: commit-log offset (8), message
size (4), tags code (8); logical offset N lives at byte N x 20 of the queue's concatenated files
(``consumequeue/<topic>/<queueId>/<20-digit byte offset>``). A queue whose first message does not
sit at the start of a file has the units before it pre-filled with (0, 2^31-1, 0).

Like :mod:`store.commitlog`, this module never blocks: :meth:`ConsumeQueue.put` returns False when
a file is missing and the async layer creates it in a worker thread (:meth:`ConsumeQueue.file_needed`,
:meth:`ConsumeQueue.install_file`).

Disk blocks ahead of the writer: consume-queue files are sparse (10,000 queues of upstream's 5.7 MB
files would reserve 57 GB), and a store through the map into a hole needs a block -- on a full disk
the kernel has none and the process dies of SIGBUS. So a file's blocks are reserved
(``posix_fallocate``, in a worker thread) in steps ahead of its writer, and units are written only
below ``MappedFile.reserved``: :meth:`ConsumeQueue.put` returns False at that mark like at a
file's end, and the async layer reserves the next step (:meth:`ConsumeQueue.reserve_sync`) where
it would create a file. A step is as large as what the file has reserved so far, between
:data:`RESERVE_MIN` and :data:`RESERVE_MAX`; a queue that filled a file starts its next one at
:data:`RESERVE_MAX` (:meth:`ConsumeQueue.first_step`). A full disk then stops dispatch (retried),
not the process.

Staged units: the store's plain send path does not write a single message's unit into the map at
once but into the queue's small staging buffer (``stage``/``staged``, up to :data:`STAGE_UNITS`
units that follow ``cur.wrote_position``), and :meth:`ConsumeQueue.materialize` copies them into
the map -- when the buffer is full, before anything reads or changes the queue's files (every
method here does it first), and for all queues before the logics flusher looks for dirty files.
With thousands of queues each message's unit sits on a page of its own file; writing it there at
once costs a TLB miss and a page walk per message (about 0.7 us here with 10,000 queues), the
staging buffer costs one cache line. Units staged when the process dies are rebuilt from the
commit log by recovery, which re-dispatches from the checkpoint's ``logicsFlushedOffset`` (taken
only after the flusher materialized them).

Page cache: most of a queue file is a hole, so its map reads only the page a fault needs
(``random_access``; by default a fault reads the device's readahead window around it, which
zero-filled whole files); the load reads the pages that hold units before scanning them, and a
reader behind the writer asks for :data:`READ_AHEAD` bytes of units at once (:meth:`read_units`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import struct
from collections.abc import Callable, Generator, Iterator

from store.mapped_file import (
    PAGE_SIZE,
    MappedFile,
    MappedFileQueue,
    offset_of_name,
    page_ceil,
    reserve_sync,
    touch_page_sync,
)

log = logging.getLogger("store.consume_queue")

CQ_UNIT_SIZE = 20
FILLER_SIZE = 2**31 - 1
CQ_UNIT = struct.Struct(">qiq")
_OFF_SIZE = struct.Struct(">qi")  # a unit's commit-log offset and size
FILLER_UNIT = CQ_UNIT.pack(0, FILLER_SIZE, 0)
#: bytes of a queue's last file its load reads in (GIL released) before scanning them, at first
#: (the units of a queue with up to 204 in that file); each further step twice the last, up to
#: :data:`LOAD_READ_IN_MAX`: only about as much as holds units is read (a page of zeros past them)
LOAD_READ_IN = PAGE_SIZE
LOAD_READ_IN_MAX = 1024 * 1024
#: bytes of written units read ahead of a reader of the queue (:meth:`ConsumeQueue.read_units`):
#: the maps read no more than a fault's page (see ``store.mapped_file.no_read_around``)
READ_AHEAD = 256 * 1024
#: the two kinds of step of :meth:`ConsumeQueue.time_search`
SEARCH_UNIT = 0
SEARCH_RECORD = 1
#: the first reservation of a file beyond the unit that needed it, and the smallest step
RESERVE_MIN = 16 * 1024
#: the largest reservation step (52,428 units)
RESERVE_MAX = 1024 * 1024
#: units a queue's staging buffer holds before they are copied into the map
STAGE_UNITS = 16
STAGE_BYTES = STAGE_UNITS * CQ_UNIT_SIZE


def cq_file_size(configured: int) -> int:
    """Upstream rounds ``mappedFileSizeConsumeQueue`` up to a whole number of units."""
    return -(-configured // CQ_UNIT_SIZE) * CQ_UNIT_SIZE


class ConsumeQueue:
    """One topic/queue id's consume queue.

    ``max_offset`` is the next logical offset to be dispatched, ``min_offset`` the first readable
    one. ``next_offset`` is the commit log's counter for this queue (upstream ``topicQueueTable``):
    the queue offset the next appended message gets; it runs ahead of ``max_offset`` while
    messages wait for dispatch (dispatch limit, or a missing file).
    """

    __slots__ = (
        "_unit_end",
        "cur",
        "dir",
        "file_size",
        "listed",
        "max_offset",
        "mfq",
        "min_logic_offset",
        "next_offset",
        "queue_id",
        "restart_at",
        "stage",
        "stage_limit",
        "staged",
        "topic",
    )

    def __init__(self, topic: str, queue_id: int, root_dir: str, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = os.path.join(root_dir, topic, str(queue_id))
        self.file_size = cq_file_size(file_size)
        # a lost directory entry of a new queue file is repaired by the manifest's rebuild
        self.mfq = MappedFileQueue(
            self.dir,
            self.file_size,
            sync_dir=False,
            size_key="mappedFileSizeConsumeQueue",
            random_access=True,
        )
        self.max_offset = 0
        self.next_offset = 0
        #: byte offset of the first readable unit (upstream ``minLogicOffset``)
        self.min_logic_offset = 0
        #: end (offset + size) of the message of the last unit in the map, -1 when none: see
        #: ``max_physic_offset``, which takes staged units into account (the send path does not
        #: write this for each unit it stages: with thousands of queues the old value's int is a
        #: cold object to free)
        self._unit_end = -1
        self.cur: MappedFile | None = None
        #: units counted in max_offset but not yet in the map: ``staged`` bytes of ``stage``,
        #: belonging at ``cur.wrote_position`` (see the module docstring; the buffer is made on
        #: first use)
        self.stage: bytearray | None = None
        self.staged = 0
        #: the queue offsets below this have their unit's place reserved in ``cur``: the store's
        #: plain send path stages the unit of queue offset ``max_offset`` when it is below (one
        #: int of this object instead of three of ``cur``'s, which with thousands of queues are
        #: cold reads); kept by :meth:`_set_cur` and :meth:`set_reserved`
        self.stage_limit = 0
        #: whether the queue is on its store's staging list (ConsumeQueueStore.staging)
        self.listed = False
        #: set by :meth:`put` when the queue started over where its messages were written (see
        #: :meth:`_put_slow`): the async layer truncates it here (``store.truncation``) first
        self.restart_at: int | None = None

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset}, max={self.max_offset})"

    @property
    def max_physic_offset(self) -> int:
        """End (offset + size) of the last unit's message, -1 when the queue has none."""
        n = self.staged
        if n and self.stage is not None:
            off, size = _OFF_SIZE.unpack_from(self.stage, n - CQ_UNIT_SIZE)
            return off + size
        return self._unit_end

    @max_physic_offset.setter
    def max_physic_offset(self, end: int) -> None:
        """For a writer of units into the map, with none staged (it materializes first)."""
        self._unit_end = end

    @property
    def min_offset(self) -> int:
        """First readable logical offset (upstream ``getMinOffsetInQueue``)."""
        first = self.mfq.first
        start = first.file_from_offset if first is not None else self.max_offset * CQ_UNIT_SIZE
        return max(self.min_logic_offset, start) // CQ_UNIT_SIZE

    # --- loading ---------------------------------------------------------------------------------

    def load_sync(self) -> list[str]:
        """Map existing files and find the valid units (offset >= 0 and size > 0); blocking.

        Files before the last are taken as full; the last file is scanned up to its first invalid
        unit. Returns problems found (gaps between files, resized files).
        """
        problems = self.mfq.load_sync()
        files = self.mfq.files
        if files:
            # what the recovery's min-offset check reads first, without the GIL
            files[0].read_in_sync(0, PAGE_SIZE)
            last = files[-1]
            valid = self._scan_units(last)
            last.set_positions(valid)
            # pages holding units have blocks; beyond them the file may be sparse
            last.reserved = _units_below(min(page_ceil(valid), last.file_size), last.file_size)
        self._attach()
        if files:
            self.min_logic_offset = self.mfq.min_offset
            self._unit_end = self._last_unit_end()
        return problems

    @staticmethod
    def _scan_units(mf: MappedFile) -> int:
        """Bytes of valid units (offset >= 0, size > 0) at the start of ``mf``, each part read in
        before it is scanned (:data:`LOAD_READ_IN`)."""
        valid = 0
        read = 0
        step = LOAD_READ_IN
        size = mf.file_size
        while read < size:
            end = min(size, read + step)
            mf.read_in_sync(read, end)
            read = end
            # whole units only: one cut by ``end`` is scanned with the next part
            stop = valid + (read - valid) // CQ_UNIT_SIZE * CQ_UNIT_SIZE
            for off, size_, _tags in CQ_UNIT.iter_unpack(mf.view[valid:stop]):
                if off < 0 or size_ <= 0:
                    return valid
                valid += CQ_UNIT_SIZE
            step = min(step * 2, LOAD_READ_IN_MAX)
        return valid

    def _attach(self) -> None:
        last = self.mfq.last
        self._set_cur(last)
        if last is not None:
            self.max_offset = (last.file_from_offset + last.wrote_position) // CQ_UNIT_SIZE
        self.next_offset = max(self.next_offset, self.max_offset)

    def _set_cur(self, mf: MappedFile | None) -> None:
        """Make ``mf`` the file units are written to (see ``stage_limit``)."""
        self.cur = mf
        self.stage_limit = _shared_limit(mf.file_from_offset + mf.reserved) if mf is not None else 0

    def set_reserved(self, mf: MappedFile, reserved: int) -> None:
        """``mf.reserved = reserved`` (the end of its blocks reserved for units), on the store's
        thread (see ``stage_limit``)."""
        mf.reserved = reserved
        if mf is self.cur:
            self._set_cur(mf)

    def materialize(self) -> None:
        """Copy the staged units into the map (see the module docstring)."""
        n = self.staged
        if n:
            self.staged = 0
            mf = self.cur
            stage = self.stage
            if mf is not None and stage is not None:
                w = mf.wrote_position
                mf.mm[w : w + n] = stage[:n]
                mf.wrote_position = w + n
                off, size = _OFF_SIZE.unpack_from(stage, n - CQ_UNIT_SIZE)
                self._unit_end = off + size

    def _last_unit_end(self) -> int:
        n = self.max_offset
        while n > self.min_offset:
            unit = self.unit(n - 1)
            if unit is None:
                break
            off, size, _ = unit
            if size != FILLER_SIZE:
                return off + size
            n -= 1
        return -1

    # --- writing ---------------------------------------------------------------------------------

    def put(self, phys: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Store the unit for ``queue_offset``. Returns False when a file must be created first
        (see :meth:`file_needed`); True when written, or when the unit exists already (re-dispatch)."""
        if self.staged:
            self.materialize()
        mf = self.cur
        if mf is not None and queue_offset == self.max_offset:
            w = mf.wrote_position
            if w < mf.reserved:
                CQ_UNIT.pack_into(mf.mm, w, phys, size, tags_code)
                mf.wrote_position = w + CQ_UNIT_SIZE
                self.max_offset = queue_offset + 1
                self._unit_end = phys + size
                return True
        return self._put_slow(phys, size, tags_code, queue_offset)

    def _put_slow(self, phys: int, size: int, tags_code: int, queue_offset: int) -> bool:
        if queue_offset < self.max_offset:
            unit = self.unit(queue_offset)
            if unit is not None and unit[0] == phys:
                return True  # dispatched again (recovery): nothing to do
            if phys >= self.max_physic_offset:
                # a message newer than every unit here, yet below our max offset: its queue
                # started over where it was written (the topic deleted and created again on the
                # master while this replica kept its units, or re-dispatch after a crash met the
                # old topic's units). The units from here on are stale: cut them, then put (False:
                # the async layer truncates first, see restart_at).
                self.restart_at = queue_offset
                return False
            if unit is not None:
                log.error(
                    "%s: unit %d already points at %d, not %d; keeping the existing one",
                    self,
                    queue_offset,
                    unit[0],
                    phys,
                )
            return True
        if queue_offset > self.max_offset and self.max_physic_offset >= 0:
            log.error(
                "%s: gap before queue offset %d (max %d): filling with blank units",
                self,
                queue_offset,
                self.max_offset,
            )
        while True:
            mf = self.cur
            if mf is None or mf.wrote_position >= mf.reserved:
                return False  # a new file, or more of this one reserved (needs_room)
            w = mf.wrote_position
            if self.max_offset < queue_offset:
                n = min(queue_offset - self.max_offset, (mf.reserved - w) // CQ_UNIT_SIZE)
                mf.view[w : w + n * CQ_UNIT_SIZE] = FILLER_UNIT * n
                mf.wrote_position = w + n * CQ_UNIT_SIZE
                self.max_offset += n
                continue
            CQ_UNIT.pack_into(mf.mm, w, phys, size, tags_code)
            mf.wrote_position = w + CQ_UNIT_SIZE
            self.max_offset = queue_offset + 1
            self._unit_end = phys + size
            return True

    def needs_room(self) -> bool:
        """Whether :meth:`put` stopped at the reserved end of a file it has not filled (the async
        layer then reserves the next step instead of creating a file)."""
        mf = self.cur
        return mf is not None and mf.wrote_position >= mf.reserved and mf.reserved < mf.file_size

    def reserve_sync(self, mf: MappedFile, need: int) -> int:
        """Reserve the next step of ``mf``'s blocks, at least through byte ``need``; blocking,
        raises OSError (ENOSPC). Returns the new value for ``mf.reserved`` (set it on the store's
        thread)."""
        have = min(page_ceil(mf.reserved), mf.file_size)
        step = min(RESERVE_MAX, max(RESERVE_MIN, have))
        end = min(mf.file_size, max(page_ceil(need), have + step))
        reserve_sync(mf.path, have, end)
        return _units_below(end, mf.file_size)

    def first_step(self) -> int:
        """The reservation step for this queue's next file: :data:`RESERVE_MAX` once the queue
        has filled a file (its next one will likely fill too: the steps up from
        :data:`RESERVE_MIN` would be seven worker jobs, each costing a busy event loop ~1.5 ms
        of CPU on this kind of machine), else :data:`RESERVE_MIN`."""
        cur = self.cur
        return RESERVE_MAX if cur is not None and cur.wrote_position >= cur.file_size else RESERVE_MIN

    def file_needed(self, queue_offset: int) -> int:
        """Byte offset of the file to create so that :meth:`put` of ``queue_offset`` can proceed."""
        if self.cur is None:
            return queue_offset * CQ_UNIT_SIZE // self.file_size * self.file_size
        return self.cur.file_end_offset

    def install_file(self, mf: MappedFile, first_queue_offset: int) -> None:
        """Adopt a created file. For an empty queue the file may start below ``first_queue_offset``
        (the queue's first message): :meth:`put` pre-fills the units before it."""
        self.materialize()
        if self.cur is None:
            self.mfq.install(mf)
            self.max_offset = mf.file_from_offset // CQ_UNIT_SIZE
            self.min_logic_offset = max(first_queue_offset * CQ_UNIT_SIZE, mf.file_from_offset)
        else:
            self.mfq.install(mf)
        self._set_cur(mf)

    def create_file_sync(
        self, offset: int, queue_offset: int | None = None, first_step: int = RESERVE_MIN
    ) -> MappedFile:
        """Create the file starting at byte ``offset``; blocking. Blocks are reserved through the
        first unit's page and ``first_step`` beyond (:meth:`first_step`).

        The page the next unit goes to (that of ``queue_offset``, else the first) is written once
        here: the first write to a new sparse file is by far its most expensive page fault
        (block allocation, inode update), and it belongs in this worker thread."""
        mf = self.mfq.create_file_sync(offset)
        pos = 0
        if queue_offset is not None:
            pos = min(max(queue_offset * CQ_UNIT_SIZE - offset, 0), self.file_size - 1)
        try:
            # blocks from the start (units before the first are written as fillers) through the
            # first unit's page and a step beyond: see the module docstring
            end = min(self.file_size, page_ceil(pos + CQ_UNIT_SIZE) + first_step)
            reserve_sync(mf.path, 0, end)
            touch_page_sync(
                mf.path, pos - pos % PAGE_SIZE, min(PAGE_SIZE, self.file_size - pos + pos % PAGE_SIZE)
            )
        except OSError:
            mf.close()
            with contextlib.suppress(OSError):
                os.unlink(mf.path)
            raise
        mf.reserved = _units_below(end, self.file_size)
        return mf

    # --- reading ---------------------------------------------------------------------------------

    def unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tags code) of one unit, or None if not written."""
        if queue_offset >= self.max_offset or queue_offset < 0:
            return None
        if self.staged:
            self.materialize()
        byte = queue_offset * CQ_UNIT_SIZE
        mf = self.mfq.find(byte)
        if mf is None:
            return None
        return CQ_UNIT.unpack_from(mf.mm, byte - mf.file_from_offset)  # type: ignore[return-value]

    def read_units(self, queue_offset: int, max_units: int) -> bytes | None:
        """Copy of up to ``max_units`` units from ``queue_offset``, never past the end of the file
        holding it (the caller reads on from the next file). None when no file holds it."""
        if self.staged:
            self.materialize()
        byte = queue_offset * CQ_UNIT_SIZE
        mf = self.mfq.find(byte)
        if mf is None:
            return None
        pos = byte - mf.file_from_offset
        wrote = mf.wrote_position
        end = min(wrote, pos + max_units * CQ_UNIT_SIZE)
        if pos >= end:
            return None
        if end > mf.read_ahead_end and wrote - end >= PAGE_SIZE:
            # a reader a page or more behind the writer (whose last page is in memory) may be
            # reading from the disk: the units from here on are asked for together
            mf.read_ahead(pos, min(wrote, pos + READ_AHEAD))
        return mf.mm[pos:end]

    def iter_units(self, start: int, stop: int) -> Iterator[tuple[int, int, int, int]]:
        """(queue offset, commit-log offset, size, tags code) for units in [start, stop)."""
        qo = max(start, self.min_offset)
        stop = min(stop, self.max_offset)
        while qo < stop:
            chunk = self.read_units(qo, min(stop - qo, 4096))
            if chunk is None:
                return
            for off, size, tags in CQ_UNIT.iter_unpack(chunk):
                yield qo, off, size, tags
                qo += 1

    def next_file_start(self, queue_offset: int) -> int:
        """Logical offset of the start of the file after the one that would hold ``queue_offset``
        (upstream ``rollNextFile``)."""
        units = self.file_size // CQ_UNIT_SIZE
        return queue_offset + units - queue_offset % units

    def read_in_job(self, queue_offset: int, count: int) -> Callable[[], None] | None:
        """A blocking job, for a worker thread, that brings into memory the pages of ``count``
        units from ``queue_offset`` (:data:`READ_AHEAD` bytes of units from there when more are
        written, never past the file holding them), when they lie in a file before the queue's
        newest and ``mincore`` finds a page of them out of the page cache; None otherwise (a
        lookup, no I/O). The newest file's units are in memory: the load read them in and the
        writer keeps them there. An older file's may not be -- after a restart (a reboot leaves
        none) or once the kernel evicted them -- and a read of them would wait for the disk on
        the store's thread."""
        byte = queue_offset * CQ_UNIT_SIZE
        cur = self.cur  # the newest file
        if cur is None or byte >= cur.file_from_offset:
            return None
        mf = self.mfq.find(byte)
        if mf is None:
            return None
        pos = byte - mf.file_from_offset
        end = min(mf.wrote_position, pos + max(count, 1) * CQ_UNIT_SIZE)
        if pos >= end or mf.resident(pos, end):
            return None
        return functools.partial(mf.read_in_sync, pos, max(end, min(mf.wrote_position, pos + READ_AHEAD)))

    def offset_by_time(
        self, timestamp: int, upper: bool, store_time_of: Callable[[int, int], int], min_phys: int
    ) -> int:
        """Binary search on store timestamps (looked up through ``store_time_of(offset, size)``):
        :meth:`time_search` run to its end.

        ``upper=False`` (LOWER): the first offset stored at or after ``timestamp`` (max offset if
        none). ``upper=True`` (UPPER): the last offset stored at or before it (min offset if none).
        Units whose messages are gone (below ``min_phys``) count as older than anything.
        """
        search = self.time_search(timestamp, upper, min_phys)
        try:
            step = next(search)
            while True:
                step = search.send(store_time_of(step[1], step[2]) if step[0] == SEARCH_RECORD else -1)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def time_search(
        self, timestamp: int, upper: bool, min_phys: int
    ) -> Generator[tuple[int, int, int], int, int]:
        """:meth:`offset_by_time` as a generator, for a caller that brings what each step reads into
        memory first (``DefaultMessageStore.get_offset_in_queue_by_time``): before it reads a unit it
        yields (:data:`SEARCH_UNIT`, queue offset, 0) and is sent anything; for the store time
        of that unit's message it yields (:data:`SEARCH_RECORD`, commit-log offset, size) and is
        sent that time (-1: none). Returns the offset. The queue may change between steps (the
        store's thread runs on): a unit gone meanwhile counts as older than anything."""
        lo, hi = self.min_offset, self.max_offset  # search in [lo, hi)
        while lo < hi:
            mid = (lo + hi) // 2
            yield SEARCH_UNIT, mid, 0
            unit = self.unit(mid)
            t = -1
            if unit is not None and unit[1] != FILLER_SIZE and unit[0] >= min_phys:
                t = yield SEARCH_RECORD, unit[0], unit[1]
            if t < timestamp if not upper else t <= timestamp:
                lo = mid + 1
            else:
                hi = mid
        if upper:
            return max(self.min_offset, lo - 1)
        return lo

    # --- truncation and retention ----------------------------------------------------------------

    def truncate_to_phys(self, phys_end: int) -> tuple[list[MappedFile], MappedFile | None]:
        """Drop units whose message starts at or after ``phys_end`` (see :meth:`truncate_to_offset`)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:  # first unit with offset >= phys_end (fillers count as below)
            mid = (lo + hi) // 2
            unit = self.unit(mid)
            if unit is not None and unit[1] != FILLER_SIZE and unit[0] >= phys_end:
                hi = mid
            else:
                lo = mid + 1
        return self.truncate_to_offset(lo)

    def truncate_to_offset(self, queue_offset: int) -> tuple[list[MappedFile], MappedFile | None]:
        """Drop units at and after logical ``queue_offset``; the dropped units of the cut file are
        zeroed in the map so no stale unit can reappear after a later crash.

        Returns the detached files (for the caller to delete) and the cut file (to fsync), if any.
        """
        if queue_offset >= self.max_offset:
            return [], None
        self.materialize()
        byte = queue_offset * CQ_UNIT_SIZE
        old_max = self.max_offset
        gone = self.mfq.detach_after(byte)
        cut: MappedFile | None = None
        last = self.mfq.last
        if last is not None:
            pos = byte - last.file_from_offset
            if pos < last.wrote_position:
                last.view[pos : last.wrote_position] = bytes(last.wrote_position - pos)
                last.wrote_position = pos
                last.flushed_position = min(last.flushed_position, pos)
                cut = last
        self._set_cur(last)
        self.max_offset = queue_offset
        self.next_offset = queue_offset
        if last is None:
            self.min_logic_offset = byte
        self._unit_end = self._last_unit_end()
        log.info("%s truncated from %d to %d", self, old_max, self.max_offset)
        return gone, cut

    def correct_min_offset(self, min_phys: int) -> None:
        """Move ``min_logic_offset`` to the first unit whose message is still in the commit log
        (upstream ``correctMinOffset``)."""
        lo, hi = self.min_offset, self.max_offset
        if lo < hi:
            first = self.unit(lo)
            if first is not None and first[1] != FILLER_SIZE and first[0] >= min_phys:
                return  # nothing of it expired: the search would end where it starts
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.unit(mid)
            if unit is not None and unit[1] != FILLER_SIZE and unit[0] >= min_phys:
                hi = mid
            else:
                lo = mid + 1
        self.min_logic_offset = max(self.min_logic_offset, lo * CQ_UNIT_SIZE)

    def detach_expired(self, min_phys: int) -> list[MappedFile]:
        """Detach files (never the last) whose every unit points below ``min_phys`` (upstream
        ``deleteExpiredFile``); the caller deletes them."""
        self.materialize()
        count = 0
        for mf in self.mfq.files[:-1]:
            if mf.wrote_position < CQ_UNIT_SIZE:
                break
            off, size, _ = CQ_UNIT.unpack_from(mf.mm, mf.wrote_position - CQ_UNIT_SIZE)
            if size != FILLER_SIZE and off + size <= min_phys:
                count += 1
            else:
                break
        gone = self.mfq.detach_first(count)
        if gone:
            self.min_logic_offset = max(self.min_logic_offset, self.mfq.min_offset)
        return gone

    def dirty_files(self) -> list[tuple[MappedFile, int]]:
        self.materialize()
        return self.mfq.dirty_files()

    def close(self) -> None:
        self.materialize()
        self._set_cur(None)
        self.mfq.close_all()


#: the ``stage_limit`` values in use, each one int object (see :func:`_shared_limit`)
_LIMITS: dict[int, int] = {}
_LIMITS_MAX = 4096


def _shared_limit(end: int) -> int:
    """``stage_limit`` for units reserved up to byte ``end`` of a queue, as an int object shared
    by every queue with the same limit: queues go through the same files and reservation steps,
    so thousands of queues have a handful of limits, and the send path's read of one is then a
    cache line they share (a limit of its own is a cache miss a message with 10,000 queues)."""
    limit = end // CQ_UNIT_SIZE
    shared = _LIMITS.get(limit)
    if shared is None:
        if len(_LIMITS) >= _LIMITS_MAX:
            _LIMITS.clear()
        shared = _LIMITS[limit] = limit
    return shared


def _units_below(end: int, file_size: int) -> int:
    """The writable end for units when bytes below ``end`` have blocks: whole units only."""
    return file_size if end >= file_size else end - end % CQ_UNIT_SIZE


def list_queue_dirs(root_dir: str) -> list[tuple[str, int]]:
    """(topic, queue id) for every ``<root>/<topic>/<queueId>`` directory."""
    out: list[tuple[str, int]] = []
    try:
        topics = os.listdir(root_dir)
    except FileNotFoundError:
        return out
    for topic in topics:
        tdir = os.path.join(root_dir, topic)
        if not os.path.isdir(tdir):
            continue
        for qname in os.listdir(tdir):
            if qname.lstrip("-").isdigit() and os.path.isdir(os.path.join(tdir, qname)):
                out.append((topic, int(qname)))
    return out


def has_files(cq_dir: str) -> bool:
    try:
        return any(offset_of_name(n) is not None for n in os.listdir(cq_dir))
    except FileNotFoundError:
        return False
