"""Durable Raft state under ``controllerStorePath``: an append-only log file and a snapshot file.

Layout of the directory::

    raft.log    8-byte magic, then records: u32 length, u32 CRC-32 of payload, payload
    snapshot    8-byte magic, u32 CRC-32, msgpack Snapshot   (written atomically)

Each record is one msgpack :class:`LogRecord` — everything one Ready asks to persist, so a
torn write loses a whole Ready and never half of one (and the Ready's messages were not sent,
so nothing depends on it). A record's entries replace every stored entry at or after the
first one's index (the suffix truncation of a follower whose log conflicted). ``reset``
restarts the log after a snapshot (an installed InstallSnapshot, or a compaction rewrite).

Write order for a Ready with a snapshot: snapshot file first, then the record. On load, a
snapshot newer than the log base keeps only the log suffix that provably follows it (the log
holds the snapshot's (index, term)); anything else after it is discarded.

Recovery truncates the log at the first record that is short, fails its CRC or does not
decode (a torn tail). All methods are blocking; the driver calls them through
``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import zlib
from pathlib import Path

import msgspec

from controller.raft.errors import StorageCorruptError, StorageLockedError
from controller.raft.messages import Entry, HardState, PersistentState, Snapshot, SnapshotMeta

logger = logging.getLogger("controller.raft.storage")

LOG_MAGIC = b"RMQRLOG1"
SNAP_MAGIC = b"RMQRSNP1"
_HEADER = struct.Struct(">II")


class LogRecord(msgspec.Struct, array_like=True, frozen=True):
    """One durable write: optional log reset, entries, optional new hard state (in that order)."""

    reset: SnapshotMeta | None = None
    entries: list[Entry] = msgspec.field(default_factory=list)
    hardState: HardState | None = None


_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(LogRecord)
_snapshot_decoder = msgspec.msgpack.Decoder(Snapshot)


class LogImage:
    """The durable log as replayed from records: hard state, base position, entries after it."""

    __slots__ = ("base", "entries", "hard_state")

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.base = SnapshotMeta()
        self.entries: list[Entry] = []

    def apply(self, rec: LogRecord) -> None:
        if rec.reset is not None:
            self.base = rec.reset
            self.entries = []
        if rec.entries:
            first = rec.entries[0].index
            base = self.base.index
            entries = rec.entries
            if first <= base:
                entries = [e for e in entries if e.index > base]
                first = base + 1
            if entries:
                if first > base + len(self.entries) + 1:
                    raise StorageCorruptError(f"raft log gap: entry {first} after {base + len(self.entries)}")
                del self.entries[first - base - 1 :]
                self.entries.extend(entries)
        if rec.hardState is not None:
            self.hard_state = rec.hardState

    def term(self, index: int) -> int | None:
        if index == self.base.index:
            return self.base.term
        offset = index - self.base.index - 1
        if 0 <= offset < len(self.entries):
            return self.entries[offset].term
        return None

    def state(self, snapshot: Snapshot) -> PersistentState:
        """Reconcile with the snapshot file and return what the node restarts from."""
        meta = snapshot.meta
        if meta.index < self.base.index or (meta.index == self.base.index and meta.term != self.base.term):
            raise StorageCorruptError(
                f"snapshot ({meta.index}, {meta.term}) is older than the log base "
                f"({self.base.index}, {self.base.term}): snapshot file lost?"
            )
        if meta.index > self.base.index:
            if self.term(meta.index) == meta.term:
                del self.entries[: meta.index - self.base.index]
            else:
                self.entries = []
            self.base = meta
        last = self.base.index + len(self.entries)
        hs = self.hard_state
        if hs.commit > last:
            raise StorageCorruptError(f"hard state commit {hs.commit} beyond last log index {last}")
        if hs.commit < meta.index:
            hs = HardState(hs.term, hs.vote, meta.index)
            self.hard_state = hs
        return PersistentState(hs, snapshot, list(self.entries))


def encode_snapshot_file(snapshot: Snapshot) -> bytes:
    payload = _record_encoder.encode(snapshot)
    return SNAP_MAGIC + struct.pack(">I", zlib.crc32(payload)) + payload


def decode_snapshot_file(data: bytes) -> Snapshot:
    if len(data) < 12 or data[:8] != SNAP_MAGIC:
        raise StorageCorruptError("snapshot file: bad magic")
    (crc,) = struct.unpack_from(">I", data, 8)
    payload = data[12:]
    if zlib.crc32(payload) != crc:
        raise StorageCorruptError("snapshot file: CRC mismatch")
    try:
        return _snapshot_decoder.decode(payload)
    except msgspec.MsgspecError as exc:
        raise StorageCorruptError(f"snapshot file: {exc}") from exc


def encode_record(rec: LogRecord) -> bytes:
    payload = _record_encoder.encode(rec)
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_records(data: bytes, start: int) -> tuple[list[LogRecord], int]:
    """Decode records from ``data[start:]``; returns them and the end offset of the last good one."""
    records: list[LogRecord] = []
    pos = start
    size = len(data)
    while pos + _HEADER.size <= size:
        length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if length == 0 or end > size:
            break
        payload = data[pos + _HEADER.size : end]
        if zlib.crc32(payload) != crc:
            break
        try:
            records.append(_record_decoder.decode(payload))
        except msgspec.MsgspecError:
            break
        pos = end
    return records, pos


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full disk: nothing half-written stays
        raise
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class FileStorage:
    """Raft log + snapshot files in one directory (created if missing). Not thread-safe:
    one caller at a time (the driver awaits each call). From :meth:`load` to :meth:`close` the
    directory is locked (``flock`` on ``lock``) against a second user."""

    blocking = True  # the driver runs these methods in a worker thread

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.log_path = self.directory / "raft.log"
        self.snapshot_path = self.directory / "snapshot"
        self.lock_path = self.directory / "lock"
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._image = LogImage()
        self._snapshot = Snapshot()

    def load(self) -> PersistentState:
        """Lock the directory, read the snapshot and log, cut a torn tail off the log file, open
        it for appending. Raises StorageLockedError when another user holds the directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            return self._load_locked()
        except BaseException:
            self.close()
            raise

    def _lock(self) -> None:
        if self._lock_fd is not None:
            return
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StorageLockedError(
                f"raft log directory {self.directory} is in use by another controller peer "
                f"(lock {self.lock_path} is held): controllerStorePath must be one peer's own"
            ) from exc
        self._lock_fd = fd

    def _load_locked(self) -> PersistentState:
        if self.snapshot_path.exists():
            self._snapshot = decode_snapshot_file(self.snapshot_path.read_bytes())
        self._image = LogImage()
        if self.log_path.exists():
            data = self.log_path.read_bytes()
            if len(data) < len(LOG_MAGIC):
                logger.warning("%s: truncated header, starting an empty log", self.log_path)
                self._rewrite([])
                data = self.log_path.read_bytes()
            elif data[: len(LOG_MAGIC)] != LOG_MAGIC:
                raise StorageCorruptError(f"{self.log_path}: not a raft log (bad magic)")
            records, end = decode_records(data, len(LOG_MAGIC))
            if end < len(data):
                logger.warning(
                    "%s: dropping %d bytes of torn/corrupt tail at offset %d",
                    self.log_path,
                    len(data) - end,
                    end,
                )
                os.truncate(self.log_path, end)
            for rec in records:
                self._image.apply(rec)
        else:
            self._rewrite([])
        state = self._image.state(self._snapshot)
        self._open()
        return state

    def save(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None:
        """Persist one Ready's durable part and fsync; returns once it is on disk."""
        if snapshot is not None:
            _write_atomically(self.snapshot_path, encode_snapshot_file(snapshot))
            self._snapshot = snapshot
        if snapshot is None and not entries and hard_state is None:
            return
        rec = LogRecord(snapshot.meta if snapshot is not None else None, entries, hard_state)
        fd = self._require_open()
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, encode_record(rec))
            os.fsync(fd)
        except OSError:
            # a full disk, say: cut a partial record off, so that the caller may call again
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise
        self._image.apply(rec)

    def compact(self, snapshot: Snapshot) -> None:
        """Store a locally taken snapshot (atomically), then rewrite the log without the entries
        it covers. A crash in between leaves the old log, whose covered prefix is skipped on load."""
        _write_atomically(self.snapshot_path, encode_snapshot_file(snapshot))
        self._snapshot = snapshot
        image = self._image
        meta = snapshot.meta
        if image.term(meta.index) != meta.term:
            raise ValueError(f"compact: snapshot ({meta.index}, {meta.term}) is not in the durable log")
        kept = image.entries[meta.index - image.base.index :]
        self._rewrite([LogRecord(meta, kept, image.hard_state)])
        image.base = meta
        image.entries = list(kept)

    def close(self) -> None:
        """Close the log and release the directory."""
        self._close_log()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _close_log(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _rewrite(self, records: list[LogRecord]) -> None:
        self._close_log()
        data = LOG_MAGIC + b"".join(encode_record(r) for r in records)
        _write_atomically(self.log_path, data)
        self._open()

    def _open(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)

    def _require_open(self) -> int:
        if self._fd is None:
            raise RuntimeError("FileStorage.load() must be called first")
        return self._fd


class MemoryStorage:
    """Storage for simulations: same record/replay semantics as :class:`FileStorage`, kept in
    memory. ``save`` is durable immediately; a simulated crash calls :meth:`load` again."""

    blocking = False

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.snapshot = Snapshot()

    def load(self) -> PersistentState:
        image = LogImage()
        for rec in self.records:
            image.apply(rec)
        return image.state(self.snapshot)

    def save(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None:
        if snapshot is not None:
            self.snapshot = snapshot
        if snapshot is None and not entries and hard_state is None:
            return
        self.records.append(LogRecord(snapshot.meta if snapshot is not None else None, entries, hard_state))

    def save_snapshot_only(self, snapshot: Snapshot) -> None:
        """A crash after the snapshot file was renamed into place but before the log record."""
        self.snapshot = snapshot

    def compact(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        image = LogImage()
        for rec in self.records:
            image.apply(rec)
        meta = snapshot.meta
        if image.term(meta.index) != meta.term:
            raise ValueError(f"compact: snapshot ({meta.index}, {meta.term}) is not in the durable log")
        kept = image.entries[meta.index - image.base.index :]
        self.records = [LogRecord(meta, kept, image.hard_state)]

    def close(self) -> None:
        pass
