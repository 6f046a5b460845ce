"""The epoch file: which master epoch wrote which range of the commit log.

Upstream: ``EpochFileCache`` over ``CheckpointFile`` (file ``{storePathRootDir}/epochFileCheckpoint``).

On-disk format (text, ``\\n`` line separator, UTF-8)::

    <number of entries>
    <CRC32 of all entry lines, each with its trailing "\\n", masked & 0x7FFFFFFF, decimal; 0 = unchecked>
    <epoch>-<startOffset>
    ...

Example: ``2\\n773307083\\n7-7000\\n8-8000\\n``.

Each entry says "from ``startOffset`` on, the log was written by the master of ``epoch``". The end of
an entry is the next entry's start; the last entry ends at the store's max offset (``set_end_offset``),
or at ``LONG_MAX`` when none was set, as upstream.

Mutations change memory only; ``persist()`` makes the current state durable (temp file, fsync,
rename, fsync of the directory). ``persist()`` blocks, so the store calls it from a worker thread
(``trio.to_thread.run_sync(epoch_file.persist)``); it may run concurrently with mutations on the trio
thread and never writes an older state over a newer one.

Ordering contract for callers (crash safety): a suffix truncation must be persisted before new data
is appended at or beyond the truncation point, and a new master's epoch entry must be persisted before
the master accepts writes. A missing entry only makes a later truncation more conservative; a stale
entry that claims bytes for the wrong epoch could keep divergent data.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Iterable, Sequence

import msgspec

log = logging.getLogger("store.epoch")

#: Java ``Long.MAX_VALUE``: the end of the last entry when no max offset was set.
LONG_MAX = (1 << 63) - 1


class EpochEntry(msgspec.Struct, frozen=True):
    """One epoch range ``[start_offset, end_offset)`` of the commit log (upstream ``EpochEntry``)."""

    epoch: int
    start_offset: int
    end_offset: int = LONG_MAX


class EpochFileError(ValueError):
    """A mutation that would make the epoch history inconsistent."""


def _crc(lines: str) -> int:
    return zlib.crc32(lines.encode("utf-8")) & 0x7FFFFFFF


def encode_epoch_file(pairs: Iterable[tuple[int, int]]) -> bytes:
    """The upstream file bytes for ``(epoch, start_offset)`` pairs."""
    entries = list(pairs)
    body = "".join(f"{epoch}-{start}\n" for epoch, start in entries)
    return f"{len(entries)}\n{_crc(body)}\n{body}".encode()


def decode_epoch_file(data: bytes) -> list[tuple[int, int]]:
    """Parse upstream file bytes; raises ``ValueError`` on any inconsistency (count, CRC, syntax, order)."""
    text = data.decode("utf-8")
    if not text:
        raise ValueError("empty epoch file")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise ValueError("epoch file has no checksum line")
    count = int(lines[0])
    crc = int(lines[1])
    entry_lines = lines[2:]
    if len(entry_lines) != count:
        raise ValueError(f"epoch file says {count} entries, found {len(entry_lines)}")
    if crc != 0:
        actual = _crc("".join(line + "\n" for line in entry_lines))
        if actual != crc:
            raise ValueError(f"epoch file checksum mismatch: stored {crc}, computed {actual}")
    pairs: list[tuple[int, int]] = []
    for line in entry_lines:
        epoch_s, sep, start_s = line.partition("-")
        if not sep:
            raise ValueError(f"bad epoch file line {line!r}")
        pair = (int(epoch_s), int(start_s))
        if pairs and (pair[0] <= pairs[-1][0] or pair[1] < pairs[-1][1]):
            raise ValueError(f"epoch file entries out of order at {line!r}")
        pairs.append(pair)
    return pairs


class EpochFile:
    """Epoch history of one replica; ``path=None`` keeps it in memory only (no file)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self._pairs: list[tuple[int, int]] = []
        self._end_offset = LONG_MAX
        self._version = 0
        self._persisted_version = 0
        self._io_lock = threading.Lock()

    # ------------------------------------------------------------------ construction / IO

    @classmethod
    def from_entries(
        cls, entries: Iterable[EpochEntry | tuple[int, int]], end_offset: int | None = None
    ) -> EpochFile:
        """An in-memory history (e.g. the master's, received in a handshake)."""
        ef = cls(None)
        for entry in entries:
            if isinstance(entry, EpochEntry):
                ef.append(entry.epoch, entry.start_offset)
            else:
                ef.append(entry[0], entry[1])
        if end_offset is not None:
            ef.set_end_offset(end_offset)
        return ef

    def load(self) -> None:
        """Read the file (falling back to upstream's ``{path}.bak``). Never raises for a bad file:
        a missing file gives an empty history silently, a corrupt one an empty history and a warning."""
        self._pairs = []
        if self.path is None:
            return
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("epoch file %s unreadable: %s", candidate, exc)
                continue
            try:
                self._pairs = decode_epoch_file(data)
            except ValueError as exc:
                log.warning("epoch file %s is corrupt (%s); ignoring it", candidate, exc)
                continue
            if candidate != self.path:
                log.warning("epoch file %s unusable, loaded the backup %s", self.path, candidate)
            break
        self._version += 1
        self._persisted_version = self._version

    def persist(self) -> None:
        """Durably write the current entries (blocking: call from a worker thread). No-op when clean."""
        if self.path is None:
            self._persisted_version = self._version
            return
        with self._io_lock:
            version = self._version
            if version <= self._persisted_version:
                return
            data = encode_epoch_file(list(self._pairs))
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._persisted_version = max(self._persisted_version, version)

    @property
    def dirty(self) -> bool:
        """True when memory holds changes not yet written by ``persist()``."""
        return self._version > self._persisted_version

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._pairs)

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def __repr__(self) -> str:
        return f"EpochFile({self.pairs()!r}, end={self._end_offset})"

    @property
    def end_offset(self) -> int:
        """End of the last entry (the store's max offset, or ``LONG_MAX`` if never set)."""
        return self._end_offset

    def set_end_offset(self, offset: int) -> None:
        """Set the last entry's end (the store's max offset). Ignored if below the last start (upstream)."""
        if self._pairs and offset < self._pairs[-1][1]:
            return
        self._end_offset = offset

    def pairs(self) -> list[tuple[int, int]]:
        """``(epoch, start_offset)`` pairs, ascending: what the file stores and the handshake carries."""
        return list(self._pairs)

    def entries(self, max_offset: int | None = None) -> list[EpochEntry]:
        """All entries with derived end offsets, ascending by epoch. The last entry ends at
        ``max_offset`` when given, else at ``end_offset``."""
        pairs = self._pairs
        last_end = self._end_offset if max_offset is None else max_offset
        out = []
        for i, (epoch, start) in enumerate(pairs):
            end = pairs[i + 1][1] if i + 1 < len(pairs) else last_end
            out.append(EpochEntry(epoch, start, end))
        return out

    def first_entry(self) -> EpochEntry | None:
        entries = self.entries()
        return entries[0] if entries else None

    def last_entry(self) -> EpochEntry | None:
        if not self._pairs:
            return None
        epoch, start = self._pairs[-1]
        return EpochEntry(epoch, start, self._end_offset)

    def last_epoch(self) -> int:
        """The highest epoch, or -1 when empty (upstream)."""
        return self._pairs[-1][0] if self._pairs else -1

    def find(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``."""
        for entry in self.entries():
            if entry.epoch == epoch:
                return entry
        return None

    def next_entry(self, epoch: int) -> EpochEntry | None:
        """The first entry with an epoch greater than ``epoch``."""
        for entry in self.entries():
            if entry.epoch > epoch:
                return entry
        return None

    def find_epoch_at(self, offset: int) -> EpochEntry | None:
        """The entry with ``start <= offset < end`` (upstream ``findEpochEntryByOffset``)."""
        for entry in self.entries():
            if entry.start_offset <= offset < entry.end_offset:
                return entry
        return None

    def find_consistent_point(
        self, master_entries: Sequence[EpochEntry] | EpochFile, local_max_offset: int | None = None
    ) -> int:
        """Largest offset up to which this history and ``master_entries`` agree (RIP-44).

        Walk own entries from the highest epoch down; the first epoch the master also has with the
        same start offset gives ``min(own end, master end)``. Returns -1 when there is none, which
        includes an empty own history (callers treat an empty history as a new replica first).
        The last ends must be each side's max offset (``set_end_offset``, or ``local_max_offset``).
        """
        theirs = master_entries.entries() if isinstance(master_entries, EpochFile) else list(master_entries)
        by_epoch = {e.epoch: e for e in theirs}
        for mine in reversed(self.entries(local_max_offset)):
            other = by_epoch.get(mine.epoch)
            if other is not None and other.start_offset == mine.start_offset:
                return min(mine.end_offset, other.end_offset)
        return -1

    # ------------------------------------------------------------------ mutations (memory only)

    def _changed(self) -> None:
        self._version += 1

    def append(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``. Returns True if an entry was added.

        Appending the last epoch again with the same start is a no-op (False). A lower epoch, a
        start before the last start, or the last epoch with another start raises ``EpochFileError``.
        An equal start is allowed: the previous epoch then covers no bytes.
        """
        if self._pairs:
            last_epoch, last_start = self._pairs[-1]
            if epoch == last_epoch:
                if start_offset != last_start:
                    raise EpochFileError(
                        f"epoch {epoch} already starts at {last_start}, cannot restart it at {start_offset}"
                    )
                return False
            if epoch < last_epoch:
                raise EpochFileError(f"epoch {epoch} is lower than the last epoch {last_epoch}")
            if start_offset < last_start:
                raise EpochFileError(
                    f"epoch {epoch} start {start_offset} is before the last epoch's start {last_start}"
                )
        if start_offset < 0:
            raise EpochFileError(f"negative start offset {start_offset}")
        self._pairs.append((epoch, start_offset))
        if self._end_offset < start_offset:
            self._end_offset = LONG_MAX
        self._changed()
        return True

    def truncate_suffix(self, offset: int) -> None:
        """Drop entries whose start offset is ``>= offset`` (upstream ``truncateSuffixByOffset``)."""
        kept = [p for p in self._pairs if p[1] < offset]
        if len(kept) != len(self._pairs):
            self._pairs = kept
            self._changed()
        if self._end_offset != LONG_MAX and self._end_offset > offset:
            self._end_offset = offset

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Drop entries whose epoch is ``>= epoch`` (upstream ``truncateSuffixByEpoch``)."""
        kept = [p for p in self._pairs if p[0] < epoch]
        if len(kept) != len(self._pairs):
            self._pairs = kept
            self._changed()

    def truncate_prefix(self, offset: int) -> None:
        """Retention: the log now starts at ``offset``. Drop entries that end at or before it and move
        the first remaining entry's start up to it (upstream ``truncatePrefixByOffset``)."""
        entries = self.entries()
        kept = [e for e in entries if e.end_offset > offset]
        if not kept and entries:
            kept = [entries[-1]]  # never forget the current epoch
        pairs = [(e.epoch, e.start_offset) for e in kept]
        if pairs and pairs[0][1] < offset:
            pairs[0] = (pairs[0][0], offset)
        if pairs != self._pairs:
            self._pairs = pairs
            self._changed()

    def replace(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Replace the whole history (validated like appends)."""
        new = EpochFile.from_entries(list(pairs))
        self._pairs = new._pairs
        self._end_offset = LONG_MAX
        self._changed()
