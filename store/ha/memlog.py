"""``MemLog``: an in-memory ``ReplicaLog`` with message boundaries, file ends and a crash model.

Records are framed like upstream stored messages as far as replication cares: a big-endian ``int``
total size, an ``int`` magic code, then payload. A record never spans a "file" of
``mapped_file_size`` bytes; the tail of a file that cannot hold the next record (plus the 8-byte
minimum blank) is filled with a blank record (upstream ``BLANK_MAGIC_CODE``).

Crash model (``crash()``): bytes beyond the flushed offset are lost, and the epoch file returns to its
last persisted state (``persist_epoch_file()``; ``flush()`` makes only log bytes durable, as the
store's flusher does). Truncations are durable at once.

Every truncation is recorded in ``truncations`` (offset, max offset before, confirm offset before) so
simulations can check that confirmed data is never cut.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable

from store.epoch import EpochFile

MESSAGE_MAGIC_CODE = 0xDAA320A7  # upstream MESSAGE_MAGIC_CODE (V1), as unsigned
BLANK_MAGIC_CODE = 0xCBD43194  # upstream BLANK_MAGIC_CODE, as unsigned
RECORD_HEADER = struct.Struct(">iI")
MIN_BLANK = RECORD_HEADER.size


class MemLog:
    """In-memory commit log implementing ``store.ha.replica_log.ReplicaLog``."""

    def __init__(self, mapped_file_size: int = 4096, epoch_file: EpochFile | None = None) -> None:
        self._file_size = mapped_file_size
        self._base = 0
        self._data = bytearray()
        # Offsets where a complete record ends (plus the base): candidate truncation points.
        self._boundaries: list[int] = [0]
        self._epoch_file = epoch_file if epoch_file is not None else EpochFile(None)
        self._confirm_offset = 0
        self._flushed = 0
        self._durable_epochs: list[tuple[int, int]] = self._epoch_file.pairs()
        self._durable_confirm = 0
        self.truncations: list[tuple[int, int, int]] = []
        #: Called as ``before_truncate(log, offset)`` before a truncation takes effect (simulation checks).
        self.before_truncate: Callable[[MemLog, int], None] | None = None

    # ------------------------------------------------------------------ ReplicaLog

    @property
    def min_offset(self) -> int:
        return self._base

    @property
    def max_offset(self) -> int:
        return self._base + len(self._data)

    @property
    def mapped_file_size(self) -> int:
        return self._file_size

    @property
    def epoch_file(self) -> EpochFile:
        return self._epoch_file

    @property
    def confirm_offset(self) -> int:
        return self._confirm_offset

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None:
        self._confirm_offset = value

    def read_raw(self, offset: int, max_bytes: int) -> memoryview:
        if not self.min_offset <= offset <= self.max_offset:
            raise ValueError(f"read at {offset} outside [{self.min_offset}, {self.max_offset}]")
        file_end = (offset // self._file_size + 1) * self._file_size
        end = min(self.max_offset, offset + max_bytes, file_end)
        # A copy: a view into the growable bytearray would forbid later appends while it is alive.
        return memoryview(bytes(self._data[offset - self._base : end - self._base]))

    def append_raw(self, offset: int, data: bytes | memoryview) -> None:
        if self.min_offset == self.max_offset:
            if offset != self._base:
                self._base = offset
                self._boundaries = [offset]
                self._flushed = offset
        elif offset != self.max_offset:
            raise ValueError(f"append at {offset}, log ends at {self.max_offset}")
        self._data += data
        self._scan()

    def truncate_to(self, offset: int) -> None:
        if offset >= self.max_offset:
            return
        if offset < self._base:
            raise ValueError(f"truncate to {offset} below the log start {self._base}")
        if self.before_truncate is not None:
            self.before_truncate(self, offset)
        self.truncations.append((offset, self.max_offset, self._confirm_offset))
        del self._data[offset - self._base :]
        del self._boundaries[bisect.bisect_right(self._boundaries, offset) :]
        self._flushed = min(self._flushed, offset)
        self._epoch_file.set_end_offset(offset)

    def last_message_boundary_at_or_below(self, offset: int) -> int:
        i = bisect.bisect_right(self._boundaries, offset)
        return self._boundaries[i - 1] if i else self._base

    def read_in_job(self, start: int, end: int) -> Callable[[], None] | None:
        return None  # every byte is in memory

    # ------------------------------------------------------------------ writing as a master

    def append_message(self, payload: bytes) -> tuple[int, int]:
        """Append one record (rolling to the next file with a blank filler if needed).
        Returns ``(offset, end_offset)`` of the record. The log must end at a boundary."""
        size = RECORD_HEADER.size + len(payload)
        if size + MIN_BLANK > self._file_size:
            raise ValueError(f"record of {size} bytes does not fit a {self._file_size}-byte file")
        if self.last_message_boundary_at_or_below(self.max_offset) != self.max_offset:
            raise ValueError("log ends inside a record; truncate to a boundary before writing")
        offset = self.max_offset
        remaining = self._file_size - offset % self._file_size
        if size + MIN_BLANK > remaining:
            self._data += RECORD_HEADER.pack(remaining, BLANK_MAGIC_CODE) + bytes(remaining - MIN_BLANK)
            self._scan()
            offset = self.max_offset
        self._data += RECORD_HEADER.pack(size, MESSAGE_MAGIC_CODE) + payload
        self._scan()
        return offset, self.max_offset

    def _scan(self) -> None:
        pos = self._boundaries[-1]
        end = self.max_offset
        data = self._data
        while end - pos >= RECORD_HEADER.size:
            size, _magic = RECORD_HEADER.unpack_from(data, pos - self._base)
            if size < RECORD_HEADER.size:
                raise ValueError(f"corrupt record size {size} at {pos}")
            if pos + size > end:
                break
            pos += size
            self._boundaries.append(pos)

    def records(self) -> list[tuple[int, bytes]]:
        """``(offset, payload)`` of every complete message record (blanks skipped)."""
        out = []
        for start, end in zip(self._boundaries, self._boundaries[1:], strict=False):
            _size, magic = RECORD_HEADER.unpack_from(self._data, start - self._base)
            if magic == MESSAGE_MAGIC_CODE:
                out.append(
                    (start, bytes(self._data[start - self._base + RECORD_HEADER.size : end - self._base]))
                )
        return out

    def bytes_range(self, start: int, end: int) -> bytes:
        """A copy of ``[start, end)`` (must be held)."""
        return bytes(self._data[start - self._base : end - self._base])

    # ------------------------------------------------------------------ durability model

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def flush(self, upto: int | None = None) -> None:
        """Make bytes up to ``upto`` (default: all) durable. Like the store's flusher this does not
        persist the epoch file: the HA code persists epoch changes before the bytes they cover."""
        self._durable_confirm = self._confirm_offset
        target = self.max_offset if upto is None else min(upto, self.max_offset)
        self._flushed = max(self._flushed, target)

    def persist_epoch_file(self) -> None:
        """Persist only the epoch file (what the store does from a worker thread)."""
        self._durable_epochs = self._epoch_file.pairs()
        self._epoch_file.persist()

    def crash(self) -> None:
        """Lose everything not durable: bytes after the flushed offset, unpersisted epoch changes.
        The confirm offset comes back as last persisted (capped by what survived)."""
        del self._data[self._flushed - self._base :]
        del self._boundaries[bisect.bisect_right(self._boundaries, self._flushed) :]
        self._epoch_file.replace(self._durable_epochs)
        self._epoch_file.persist()
        self._confirm_offset = min(self._durable_confirm, self.max_offset)
