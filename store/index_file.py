"""One key-index file (upstream ``IndexFile`` + ``IndexHeader``) in upstream's layout (reference
§6.5): a 40-byte header, ``slot_num`` 4-byte slots (the newest entry number of the slot's chain,
0 = empty) and ``index_num`` 20-byte entries (key hash, commit-log offset, seconds since the
header's begin timestamp, previous entry number in the same slot); entry numbers start at 1.
:mod:`store.index` keeps the files of a store (``IndexService``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from remoting.protocol.message import java_string_hash
from store.mapped_file import (
    PAGE_SIZE,
    drop_pages_below,
    map_file,
    no_read_around,
    page_ceil,
    pages_resident,
    read_in_range,
)

log = logging.getLogger("store.index")

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
#: bytes of entries reserved with a new file, and the smallest reservation step (3,276 entries)
ENTRY_RESERVE_MIN = 64 * 1024
#: the largest reservation step (209,715 entries)
ENTRY_RESERVE_MAX = 4 * 1024 * 1024

_HEADER = struct.Struct(">qqqqii")  # begin ts, end ts, begin phy, end phy, hash slot count, index count
_ENTRY = struct.Struct(">iqii")  # key hash, phy offset, time diff (s), prev index
_SLOT = struct.Struct(">i")
_ZERO_ENTRY = bytes(INDEX_ENTRY_SIZE)
_INT_MAX = 2**31 - 1
_ENTRY_PACK = _ENTRY.pack_into
_SLOT_PACK = _SLOT.pack_into
_SLOT_UNPACK = _SLOT.unpack_from
_HEADER_PACK = _HEADER.pack_into


def index_key_hash(key: str) -> int:
    """Upstream ``indexKeyHashMethod``: |String.hashCode()|, 0 when the absolute value overflows."""
    h = java_string_hash(key)
    return abs(h) if h != -(2**31) else 0


def _abs_hash(h: int) -> int:
    """:func:`index_key_hash` from an unsigned 32-bit Java hash."""
    if h & 0x80000000:
        return 0x100000000 - h if h != 0x80000000 else 0
    return h


def build_key(topic: str, key: str) -> str:
    """The string actually indexed for a business key or unique key: ``topic#key``."""
    return f"{topic}#{key}"


def index_file_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of ``ms`` in local time (upstream ``UtilAll.timeMillisToHumanString``)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def _parse_file_name(name: str) -> int | None:
    if len(name) != 17 or not name.isdigit():
        return None
    try:
        secs = time.mktime(time.strptime(name[:14], "%Y%m%d%H%M%S"))
    except (ValueError, OverflowError):
        return None
    return int(secs) * 1000 + int(name[14:])


def _read_pages_sync(path: str, start: int, end: int) -> None:
    """Read bytes [start, end) of the file at ``path`` into the page cache, and no more (no
    readahead); blocking, best effort (a file gone meanwhile is skipped)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        os.pread(fd, end - start, start)
    except OSError:
        pass
    finally:
        os.close(fd)


class IndexCorruptError(Exception):
    """An index file whose size or header cannot be trusted."""


class QueryOffsetResult(NamedTuple):
    """Upstream ``QueryOffsetResult``: matching commit-log offsets (newest first) plus the newest
    file's end timestamp and end physical offset."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class IndexFile:
    """One mapped index file. Header fields are mirrored in attributes and written through."""

    def __init__(self, path: str, slot_num: int, index_num: int, *, create: bool) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.slot_num = slot_num
        self.index_num = index_num
        self.file_size = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE
        self.slots_pos = INDEX_HEADER_SIZE
        self.entries_pos = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        #: bytes below this have disk blocks: entries are written only below it (see
        #: :meth:`reserve_entries`). Nothing is known of a loaded file (holes may be anywhere, slots
        #: never written): its first write reserves through its entry, cheap where blocks exist
        self.reserved = 0
        try:
            size = os.fstat(self.fd).st_size
            if create:
                os.ftruncate(self.fd, self.file_size)  # sparse: no page is touched
                # blocks for the header and every slot (written anywhere) and the first entries
                self._reserve(min(self.file_size, self.entries_pos + ENTRY_RESERVE_MIN))
            elif size != self.file_size:
                raise IndexCorruptError(
                    f"size {size} != {self.file_size} expected for {slot_num} slots / {index_num} entries"
                )
            self.map = map_file(self.fd, self.file_size, path)
            # lookups go to one slot and its chain's entries, anywhere in the file: a fault reads
            # its page, not the device's readahead window around it (8 MiB on the development
            # VM's disk: a query of a cold file read that much per entry)
            no_read_around(self.map)
        except BaseException:
            os.close(self.fd)
            if create:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(self.map, 0)
        if create:
            self.index_count = 1
            self._write_header()
        else:
            self._validate()
        self.dirty = create
        #: entries numbered below this fit below :attr:`reserved`
        self.entry_limit = self._entry_limit()
        #: the entries' pages below this are unmapped (see :meth:`drop_written_entries_sync`)
        self.entries_dropped_to = page_ceil(self.entries_pos)

    def drop_written_entries_sync(self) -> None:
        """Unmap the pages of the entries written so far (``store.mapped_file.drop_pages_below``:
        entries are appended and never written again, queries map them back as they read them);
        the hash-slot table, written anywhere, stays mapped, and so does the page it shares with
        the first entries. Blocking, GIL released; the map must not be closed meanwhile (the
        index service holds its file lock)."""
        end = self.entries_pos + self.index_count * INDEX_ENTRY_SIZE
        whole = end - end % PAGE_SIZE
        if whole > self.entries_dropped_to:
            drop_pages_below(self.map, self.entries_dropped_to, whole, self.path)
            self.entries_dropped_to = whole

    def restore_slot_heads(self) -> int:
        """After a crash or a failed write: point the slots whose head is past the published count
        -- a batch cut short after its slot heads, before its header -- back at their newest published entry (or
        at none), through the unpublished entries, which were written first, each with the head
        before it. Left alone, the next entry of such a slot would start its chain afresh and the
        slot's older keys could not be found. Returns the number of heads restored."""
        count = self.index_count
        table = np.frombuffer(self.map, ">i4", self.slot_num, self.slots_pos)  # released below, always
        try:
            stale = np.flatnonzero(table >= count).tolist()
            for slot in stale:
                head = int(table[slot])
                while count <= head < self.index_num:
                    prev = _ENTRY.unpack_from(self.map, self.entries_pos + head * INDEX_ENTRY_SIZE)[3]
                    # an entry's previous one is older (a lower number); anything else is not ours
                    head = prev if prev < head else 0
                table[slot] = head if 0 < head < count else 0
        finally:
            del table
        if stale:
            self.dirty = True
            log.warning(
                "index file %s: %d hash slots pointed past its %d entries (a write cut short); "
                "restored to their newest entries",
                self.path,
                len(stale),
                count - 1,
            )
        return len(stale)

    def read_in_slots_sync(self) -> None:
        """Bring the hash-slot table into memory (blocking, GIL released): the file written next
        updates slots anywhere in it, and without read-around each first touch of a page would
        wait for the disk on the store's thread."""
        read_in_range(self.map, self.slots_pos, self.entries_pos, self.path)

    def _entry_limit(self) -> int:
        return min(self.index_num, (self.reserved - self.entries_pos) // INDEX_ENTRY_SIZE)

    def _reserve(self, end: int) -> None:
        if end > self.reserved:
            os.posix_fallocate(self.fd, self.reserved, end - self.reserved)
            self.reserved = end

    def reserve_entries(self, count: int) -> None:
        """Make room for ``count`` more entries: give the file's bytes through them disk blocks
        (``posix_fallocate``), in steps as large as the entries reserved so far, between
        :data:`ENTRY_RESERVE_MIN` and :data:`ENTRY_RESERVE_MAX` bytes. The file is sparse (upstream's
        is 420 MB), and a store through the map into a hole on a full disk kills the process with
        SIGBUS; this raises OSError (ENOSPC) instead. Blocking, but on the store's thread like the
        index writes, whose page faults allocate blocks too; a step is one call per 3,000 to 200,000
        entries."""
        need = self.entries_pos + min(self.index_num, self.index_count + count) * INDEX_ENTRY_SIZE
        if need <= self.reserved:
            return
        have = max(0, self.reserved - self.entries_pos)
        step = min(ENTRY_RESERVE_MAX, max(ENTRY_RESERVE_MIN, have))
        self._reserve(min(self.file_size, need + step))
        self.entry_limit = self._entry_limit()

    def _validate(self) -> None:
        if not 1 <= self.index_count <= self.index_num:
            raise IndexCorruptError(f"index count {self.index_count} outside 1..{self.index_num}")
        # upstream's count of slots taken: a slot whose head points past the published count (a
        # batch cut short by a crash after its slot heads, before its header) counts again when
        # written next, so after crashes it may exceed the slots; it never exceeds the entries
        if not 0 <= self.hash_slot_count < self.index_count:
            raise IndexCorruptError(
                f"hash slot count {self.hash_slot_count} outside 0..{self.index_count - 1} (the entries)"
            )
        if self.index_count > 1 and (
            self.begin_timestamp > self.end_timestamp
            or self.begin_phy_offset > self.end_phy_offset
            or self.begin_phy_offset < 0
        ):
            raise IndexCorruptError(
                f"inconsistent header: timestamps {self.begin_timestamp}..{self.end_timestamp}, "
                f"offsets {self.begin_phy_offset}..{self.end_phy_offset}"
            )

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self.map,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )
        self.dirty = True

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def has_entries(self) -> bool:
        return self.index_count > 1

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Append one entry; False when the file is full. Raises OSError when the disk has no room
        for it (:meth:`reserve_entries`)."""
        count = self.index_count
        if count >= self.index_num:
            return False
        if count >= self.entry_limit:
            self.reserve_entries(1)
        m = self.map
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * HASH_SLOT_SIZE
        prev = _SLOT_UNPACK(m, slot_pos)[0]
        used_slots = self.hash_slot_count
        if prev <= 0 or prev >= count:
            prev = 0  # empty, or a slot written by a put that never committed its header
            used_slots += 1
        if count <= 1:
            time_diff = 0
            begin_ts = self.begin_timestamp = store_timestamp
            begin_phy = self.begin_phy_offset = phy_offset
        else:
            begin_ts, begin_phy = self.begin_timestamp, self.begin_phy_offset
            time_diff = (store_timestamp - begin_ts) // 1000
            if time_diff < 0:
                time_diff = 0
            elif time_diff > _INT_MAX:
                time_diff = _INT_MAX
        # entry, slot, header, and only then the attributes flush() reads: the header's count is
        # what makes the entry visible, and a concurrent flush must not report it before it is written.
        _ENTRY_PACK(m, self.entries_pos + count * INDEX_ENTRY_SIZE, key_hash, phy_offset, time_diff, prev)
        _SLOT_PACK(m, slot_pos, count)
        _HEADER_PACK(m, 0, begin_ts, store_timestamp, begin_phy, phy_offset, used_slots, count + 1)
        self.dirty = True
        self.hash_slot_count = used_slots
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    def publish(
        self, begin_ts: int, end_ts: int, begin_phy: int, end_phy: int, used_slots: int, count: int
    ) -> None:
        """Write the header after entries and slot heads were written (its count makes them
        visible), then the attributes a concurrent :meth:`IndexService.flush` reads."""
        _HEADER_PACK(self.map, 0, begin_ts, end_ts, begin_phy, end_phy, used_slots, count)
        self.dirty = True
        self.begin_timestamp = begin_ts
        self.begin_phy_offset = begin_phy
        self.hash_slot_count = used_slots
        self.index_count = count
        self.end_phy_offset = end_phy
        self.end_timestamp = end_ts

    def time_matched(self, begin: int, end: int) -> bool:
        """Whether [begin, end] overlaps this file's [begin_timestamp, end_timestamp]."""
        return self.has_entries and begin <= self.end_timestamp and end >= self.begin_timestamp

    def select(
        self, out: list[int], seen: set[int], key_hash: int, max_num: int, begin: int, end: int
    ) -> None:
        """Append to ``out`` offsets of entries with ``key_hash`` stored within [begin, end]."""
        for _ in self.select_steps(out, seen, key_hash, max_num, begin, end):
            pass

    def select_steps(
        self, out: list[int], seen: set[int], key_hash: int, max_num: int, begin: int, end: int
    ) -> Iterator[int]:
        """:meth:`select` as a generator that yields the file position of the slot and of each
        entry before it reads it, so that its caller may bring that page into memory first
        (:meth:`read_in_job`); the walk ends early when the file was closed meanwhile."""
        count = self.index_count
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.slot_num) * HASH_SLOT_SIZE
        yield slot_pos
        if self.map.closed:
            return
        idx = _SLOT.unpack_from(self.map, slot_pos)[0]
        while 0 < idx < count and len(out) < max_num:
            pos = self.entries_pos + idx * INDEX_ENTRY_SIZE
            yield pos
            if self.map.closed:
                return
            h, phy, diff, prev = _ENTRY.unpack_from(self.map, pos)
            if h == key_hash and begin <= self.begin_timestamp + diff * 1000 <= end and phy not in seen:
                seen.add(phy)
                out.append(phy)
            if prev >= idx:  # chains strictly decrease; anything else is damage
                break
            idx = prev

    def read_in_job(self, pos: int) -> Callable[[], None] | None:
        """A blocking job, for a worker thread, that brings the page(s) of the slot or entry at
        file position ``pos`` into the page cache; None when ``mincore`` finds them there (a
        lookup, no I/O) or the file is closed. The job reads through a descriptor of its own,
        opened by path: a file closed or deleted meanwhile costs it nothing but the read."""
        end = pos + INDEX_ENTRY_SIZE
        if self.map.closed or pages_resident(self.map, pos, end):
            return None
        return functools.partial(_read_pages_sync, self.path, pos - pos % PAGE_SIZE, end)

    def truncate_entries_from(self, phy_offset: int) -> int:
        """Undo, newest first, the entries pointing at or beyond ``phy_offset``; returns how many.

        Entries are appended in commit-log order, so they form a suffix; undoing in reverse order
        restores every slot head to the entry's ``prev``, exactly the state before the append.
        """
        dropped = 0
        idx = self.index_count - 1
        base = self.entries_pos
        while idx >= 1:
            pos = base + idx * INDEX_ENTRY_SIZE
            h, phy, _diff, prev = _ENTRY.unpack_from(self.map, pos)
            if phy < phy_offset:
                break
            slot_pos = INDEX_HEADER_SIZE + (h % self.slot_num) * HASH_SLOT_SIZE
            if _SLOT.unpack_from(self.map, slot_pos)[0] == idx:
                _SLOT.pack_into(self.map, slot_pos, prev)
                if prev == 0:
                    self.hash_slot_count -= 1
            self.map[pos : pos + INDEX_ENTRY_SIZE] = _ZERO_ENTRY
            idx -= 1
            dropped += 1
        if dropped:
            self.index_count = idx + 1
            if idx >= 1:
                _h, phy, diff, _prev = _ENTRY.unpack_from(self.map, base + idx * INDEX_ENTRY_SIZE)
                self.end_phy_offset = phy
                # only second precision survives in entries; stay an upper bound of the real time
                self.end_timestamp = min(self.end_timestamp, self.begin_timestamp + diff * 1000 + 999)
            else:
                self.begin_timestamp = self.end_timestamp = 0
                self.begin_phy_offset = self.end_phy_offset = 0
            self._write_header()
        return dropped

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)
