"""The store checkpoint, the abort marker and the store lock file.

Upstream: ``StoreCheckpoint`` (a 4 KiB file, reference §6.3), the ``abort`` file (§6.4) and the
``lock`` file. The upstream fields occupy bytes 0..40. This store adds two fields in the unused rest
of the page, which upstream ignores; they let recovery after a crash rescan only the unflushed tail
instead of whole files::

    40  8  physicFlushedOffset  commit-log offset (a message boundary) durable when this was written
    48  8  logicsFlushedOffset  commit-log offset below which every message's consume-queue unit and
                                index entries were durable when this was written
    56  4  extension magic      0x524D5143 ("RMQC"); absent => the two fields are unknown (-1)

All methods named ``*_sync`` block; the store runs them in worker threads.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading

import msgspec

from store.errors import StoreOpenError
from store.mapped_file import fsync_dir

log = logging.getLogger("store.checkpoint")

CHECKPOINT_FILE_SIZE = 4096
_UPSTREAM = struct.Struct(">qqqqq")
_EXTENSION = struct.Struct(">qqi")
_EXTENSION_POS = _UPSTREAM.size
_EXTENSION_MAGIC = 0x524D5143


class CheckpointData(msgspec.Struct, kw_only=True):
    """The checkpoint's fields (upstream names; the last two are this store's extension)."""

    physicMsgTimestamp: int = 0
    logicsMsgTimestamp: int = 0
    indexMsgTimestamp: int = 0
    masterFlushedOffset: int = 0
    confirmPhyOffset: int = 0
    physicFlushedOffset: int = -1
    logicsFlushedOffset: int = -1

    @property
    def min_timestamp(self) -> int:
        """Upstream ``getMinTimestamp``: the older of physic/logics timestamps, minus 3 s slack."""
        return max(0, min(self.physicMsgTimestamp, self.logicsMsgTimestamp) - 3000)


def encode_checkpoint(data: CheckpointData) -> bytes:
    buf = bytearray(CHECKPOINT_FILE_SIZE)
    _UPSTREAM.pack_into(
        buf,
        0,
        data.physicMsgTimestamp,
        data.logicsMsgTimestamp,
        data.indexMsgTimestamp,
        data.masterFlushedOffset,
        data.confirmPhyOffset,
    )
    _EXTENSION.pack_into(
        buf, _EXTENSION_POS, data.physicFlushedOffset, data.logicsFlushedOffset, _EXTENSION_MAGIC
    )
    return bytes(buf)


def decode_checkpoint(raw: bytes) -> CheckpointData:
    """Decode checkpoint bytes; a short file reads as zeros past its end."""
    if len(raw) < CHECKPOINT_FILE_SIZE:
        raw = raw + bytes(CHECKPOINT_FILE_SIZE - len(raw))
    phys_ts, logics_ts, index_ts, master_flushed, confirm = _UPSTREAM.unpack_from(raw, 0)
    phys_off, logics_off, magic = _EXTENSION.unpack_from(raw, _EXTENSION_POS)
    if magic != _EXTENSION_MAGIC:
        phys_off = logics_off = -1
    return CheckpointData(
        physicMsgTimestamp=phys_ts,
        logicsMsgTimestamp=logics_ts,
        indexMsgTimestamp=index_ts,
        masterFlushedOffset=master_flushed,
        confirmPhyOffset=confirm,
        physicFlushedOffset=phys_off,
        logicsFlushedOffset=logics_off,
    )


class StoreCheckpoint:
    """The in-memory checkpoint and its file. Mutate :attr:`data`, then :meth:`flush_sync`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data = CheckpointData()
        #: whether the file existed and decoded when loaded
        self.loaded = False
        #: the bytes the last :meth:`flush_sync` wrote and synced
        self._written: bytes | None = None
        #: flush_sync runs in worker threads: the skip must compare with what the file holds
        self._write_lock = threading.Lock()

    def load_sync(self) -> CheckpointData:
        """Read the file; a missing file gives all-zero upstream fields and unknown extensions."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(CHECKPOINT_FILE_SIZE)
        except FileNotFoundError:
            log.info("no checkpoint at %s", self.path)
            self.data = CheckpointData()
            return self.data
        self.data = decode_checkpoint(raw)
        self.loaded = True
        return self.data

    def flush_sync(self, data: CheckpointData | None = None) -> None:
        """Write ``data`` (default: the current state) and fdatasync; blocking. Nothing when the
        file already holds exactly these bytes from the last call (an idle store's periodic
        rounds: every second, per broker, a write and an fdatasync for nothing)."""
        raw = encode_checkpoint(data if data is not None else self.data)
        with self._write_lock:
            new = not os.path.exists(self.path)
            if raw == self._written and not new:
                return
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, raw, 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if new:
                fsync_dir(os.path.dirname(self.path))
            self._written = raw

    def snapshot(self) -> CheckpointData:
        """A copy of the current state (to write from a worker thread)."""
        return msgspec.structs.replace(self.data)


# --- abort marker ---------------------------------------------------------------------------------


def abort_file_exists(path: str) -> bool:
    return os.path.exists(path)


def create_abort_file_sync(path: str) -> None:
    """Write the marker (this process's PID as text) and make it durable; blocking."""
    with open(path, "w") as f:
        f.write(str(os.getpid()))
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(os.path.dirname(path))


def remove_abort_file_sync(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        log.warning("abort file %s was already gone at shutdown", path)
        return
    fsync_dir(os.path.dirname(path))


# --- lock file ------------------------------------------------------------------------------------


class StoreLockedError(StoreOpenError):
    """Another live process holds the store's lock file (upstream: "Lock failed, MQ already started")."""


class StoreLock:
    """An exclusive ``flock`` on ``<root>/lock`` held while the store runs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire_sync(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise StoreLockedError(f"store lock {self.path} is held by another process") from exc
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
