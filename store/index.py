"""The key index: message KEYS and UNIQ_KEY → commit-log offsets (upstream ``IndexService``,
``IndexFile``, ``IndexHeader``), in upstream's file layout (reference §6.5).

One index file = a 40-byte header, ``max_hash_slot_num`` 4-byte slots (the newest entry number of the
slot's chain, 0 = empty) and ``max_index_num`` 20-byte entries (key hash, commit-log offset, seconds
since the header's begin timestamp, previous entry number in the same slot). Entry numbers start at 1.
Files live in ``<root>/index`` and are named after their creation time ``yyyyMMddHHmmssSSS`` (local
time); files are created sparse, so the default 420 MB size costs nothing until written: disk
blocks are reserved for the header and slots at creation and for entries in steps ahead of them
(``IndexFile.reserve_entries``), so that a full disk refuses an entry with ENOSPC instead of killing
the process with SIGBUS at a store into a hole of the map.

Threading contract: everything runs on the store's (trio) thread except :meth:`IndexService.flush`,
which the store calls from a worker thread; flush only fsyncs duplicated descriptors, so it never
races with files being closed or deleted on the main thread.

Ordering assumption (true for dispatch): :meth:`IndexService.put` sees messages in increasing
commit-log offset. Re-dispatching a message already indexed is a no-op, which makes recovery's
re-dispatch idempotent.

Batching: :meth:`IndexService.put_keys` only queues a message; queued messages are written when
``batch_size`` of them are pending (vectorized, :mod:`store.index_batch`) and before anything reads
or changes the index (:meth:`~IndexService.drain`), so no caller observes the lag. Upstream writes
the index from its reput thread, behind the commit log, too. :meth:`~IndexService.flush` and
:meth:`~IndexService.close` do *not* drain: the store drains on its own thread before handing
``flush`` to a worker, and ``close`` without that is a crash (queued entries are lost like unflushed
ones; recovery re-dispatches them).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from remoting.protocol.message import (
    KEY_SEPARATOR,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    DispatchRequest,
    java_string_hash,
    java_string_hash_extend,
)
from remoting.repeats import RepeatedLog
from store.index_batch import PENDING_FIELDS, entry_columns, key_hashes, write_entries
from store.index_file import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexCorruptError,
    IndexFile,
    QueryOffsetResult,
    _abs_hash,
    _parse_file_name,
    build_key,
    index_file_name,
    index_key_hash,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "INDEX_ENTRY_SIZE",
    "INDEX_HEADER_SIZE",
    "VECTOR_MIN",
    "IndexCorruptError",
    "IndexFile",
    "IndexService",
    "QueryOffsetResult",
    "_abs_hash",
    "build_key",
    "index_file_name",
    "index_key_hash",
]

log = logging.getLogger("store.index")

_PREFIX_CACHE_MAX = 4096
#: pending messages that trigger a (vectorized) drain inside put_keys. Measured (bench.store, 128 B,
#: msgs per CPU-second): 64 -> 493k, 128 -> 542k, 256 -> 603k, 512 -> 607k; with the later faster
#: put path the index costs ~0.33 us/msg at 256 and ~0.25 at 1024 (a drain of 1024 takes ~0.25 ms).
#: Drains of 1024 messages in the store's own rounds (2026-12-07, ninth session): 0.22-0.25 us a
#: message at 128 B, 0.24-0.31 at 1 KiB; of 4096: 0.15-0.18 and 0.16-0.21 (the numpy calls' fixed
#: costs spread over four times the entries; the store's CPU a message -5 to -8 %); of 8192 no
#: better than 4096 (the arrays outgrow the caches). A drain of 4096 holds the event loop ~0.6 ms.
DEFAULT_BATCH_SIZE = 4096
#: drains of fewer pending messages take the scalar path: numpy's fixed costs (~20 us a batch)
#: make the vector path slower below ~20 messages (measured: 16 -> 1.8 vs 1.6 us/msg, 24 -> 1.1 vs 1.5)
VECTOR_MIN = 20
#: seconds between attempts to write entries while the disk refuses them room
INDEX_RETRY_S = 1.0
#: queued messages kept while the disk refuses room (beyond it the oldest half is not indexed)
BLOCKED_MAX_PENDING = 262_144


def _topic_prefix_hash(topic: str) -> int:
    """Unsigned Java hash of ``topic#``, the prefix of every key hashed into the index."""
    return java_string_hash(topic + "#") & 0xFFFFFFFF


class IndexService:
    """All index files of one store (upstream ``IndexService``).

    Sizes come from ``MessageStoreConfig.maxHashSlotNum`` / ``maxIndexNum``; ``now_ms`` gives the
    wall clock used for file names only (stored times come from the dispatched messages).
    """

    def __init__(
        self,
        index_dir: str,
        *,
        max_hash_slot_num: int,
        max_index_num: int,
        now_ms: Callable[[], int],
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        """``batch_size``: queued messages that trigger a write; 1 writes every message at once."""
        if max_hash_slot_num < 1 or max_index_num < 2:
            raise ValueError("need at least 1 hash slot and 2 index entries (entry 0 is unused)")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = batch_size
        #: accepted messages not written yet, in offset order, flat: topic, phy, ts, uniq_key, keys, ...
        #: (the store's plain send path appends here itself, exactly as :meth:`put_keys` would)
        self.pending: list[Any] = []
        #: :meth:`drain` when ``len(pending)`` reaches this
        self.pending_limit = batch_size * PENDING_FIELDS
        #: offset of the newest message indexed or pending, -1 when none: put_keys skips up to here
        self.last_phy = -1
        self.index_dir = index_dir
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self._now_ms = now_ms
        self._files: list[IndexFile] = []
        # topic -> unsigned Java hash of "topic#" (index keys are hashed without building the string)
        self._prefix_hashes: dict[str, int] = {}
        # guards file descriptors against flush() running in a worker thread
        self._fd_lock = threading.Lock()
        #: while the disk refuses room for entries: when drains may try again (0: not refused)
        self._retry_at = 0.0
        self._repeats = RepeatedLog(log)

    # --- lifecycle -------------------------------------------------------------------------------

    def load(self, last_exit_ok: bool, checkpoint_index_ts: int) -> None:
        """Open the existing index files in name order.

        Files whose size or header cannot be trusted are deleted with a warning. After an abnormal
        exit, files whose end timestamp is newer than ``checkpoint_index_ts`` (the index timestamp
        of the store checkpoint, i.e. what :meth:`flush` last returned) are deleted too, as
        upstream does; the store must then re-dispatch from :attr:`max_indexed_phy_offset`
        (that message included: it is indexed again, see below).
        """
        self.drain()
        os.makedirs(self.index_dir, exist_ok=True)
        for name in sorted(os.listdir(self.index_dir)):
            path = os.path.join(self.index_dir, name)
            if _parse_file_name(name) is None or not os.path.isfile(path):
                log.warning("ignoring unexpected entry in index dir: %s", path)
                continue
            try:
                f = IndexFile(path, self.max_hash_slot_num, self.max_index_num, create=False)
            except (IndexCorruptError, ValueError, OSError) as exc:
                log.warning("dropping unusable index file %s: %s", path, exc)
                _unlink(path)
                continue
            if not last_exit_ok and f.end_timestamp > checkpoint_index_ts:
                log.warning(
                    "dropping index file %s after abnormal exit: end timestamp %d is newer than checkpoint %d",
                    path,
                    f.end_timestamp,
                    checkpoint_index_ts,
                )
                f.close()
                _unlink(path)
                continue
            self._files.append(f)
        if self._files and not self._files[-1].is_full:
            self._files[-1].read_in_slots_sync()  # the one written next
            if not last_exit_ok:
                self._restore_newest()  # the only one written at the crash
        # The newest indexed message may have only some of its entries: a crash between two of
        # its keys (they may even straddle a file roll). One less makes its re-dispatch write
        # them all again; a key it already had gets a second entry, which queries skip.
        self.last_phy = self._max_indexed() - 1
        log.info("loaded %d index files from %s", len(self._files), self.index_dir)

    def close(self) -> None:
        """Close every file. Neither drains nor flushes: call :meth:`drain` and :meth:`flush`
        first for durability; without them this is a crash (queued entries are dropped)."""
        if self.pending:
            log.info("closing the index with %d queued messages unwritten", self.pending_count)
        self.pending = []
        self.last_phy = -1
        with self._fd_lock:
            for f in self._files:
                f.close()
            self._files.clear()

    def destroy(self) -> None:
        """Close and delete every index file (queued messages are dropped)."""
        self.pending = []
        self.last_phy = -1
        with self._fd_lock:
            for f in self._files:
                f.close()
                _unlink(f.path)
            self._files.clear()

    # --- state -----------------------------------------------------------------------------------

    @property
    def file_names(self) -> list[str]:
        """Names of the index files, oldest first (drains first: a file may be due)."""
        self.drain()
        return [f.name for f in self._files]

    @property
    def pending_count(self) -> int:
        """Messages queued by :meth:`put_keys` and not written yet."""
        return len(self.pending) // PENDING_FIELDS

    @property
    def max_indexed_phy_offset(self) -> int:
        """Commit-log offset of the newest indexed message, -1 when nothing is indexed. Dispatching
        messages from this offset on completes the index (already indexed ones are skipped)."""
        self.drain()
        return self._max_indexed()

    def _max_indexed(self) -> int:
        for f in reversed(self._files):
            if f.has_entries:
                return f.end_phy_offset
        return -1

    # --- write path ------------------------------------------------------------------------------

    def put(self, req: DispatchRequest) -> None:
        """Index the UNIQ_KEY and every KEYS token of one dispatched message as ``topic#key``.

        Rollback-type transaction messages and messages already indexed are skipped. Rolls to a new
        file (created sparse, on this thread) when the current one is full.
        """
        self.put_keys(
            req.topic, req.commit_log_offset, req.store_timestamp, req.sys_flag, req.keys, req.uniq_key
        )

    def put_keys(
        self, topic: str, phy: int, ts: int, sys_flag: int, keys: str | None, uniq_key: str | None
    ) -> None:
        """:meth:`put` from the fields themselves (the send path has them without a request).

        Queues the message; it is written when :attr:`batch_size` messages are queued or at the
        next :meth:`drain` (every reading or changing method drains first). Messages at or below
        the newest indexed or queued offset are skipped, and so are messages without keys.
        """
        if phy <= self.last_phy or (
            sys_flag and sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE
        ):
            return
        if not uniq_key and not (keys and keys.strip(KEY_SEPARATOR)):
            return  # no entry to write: the offset must not count as indexed
        self.last_phy = phy
        pending = self.pending
        pending += (topic, phy, ts, uniq_key, keys)  # PENDING_FIELDS
        if len(pending) >= self.pending_limit:
            self.drain()

    def drain(self) -> None:
        """Write every queued message: vectorized from :data:`VECTOR_MIN` messages on, else one
        entry at a time.

        When the disk refuses room for entries or a new file (OSError, a full disk), the messages
        not written stay queued, the error is logged (once, then as a reminder) and drains do not
        try again for :data:`INDEX_RETRY_S`; while that lasts, more than :data:`BLOCKED_MAX_PENDING`
        queued messages drop the oldest half, logged (they cannot be found by key). Any other
        failure drops the queue and is raised; the index then ends at the last entry written
        (re-dispatch from :attr:`max_indexed_phy_offset` completes it)."""
        pending = self.pending
        if not pending:
            return
        if self._retry_at and time.monotonic() < self._retry_at:
            if len(pending) > BLOCKED_MAX_PENDING * PENDING_FIELDS:
                self._drop_oldest_half()
            return
        self.pending = []
        try:
            if len(pending) < VECTOR_MIN * PENDING_FIELDS:
                for i in range(0, len(pending), PENDING_FIELDS):
                    self._write_now(*pending[i : i + PENDING_FIELDS])
            else:
                self._write_batch(pending)
        except OSError as exc:
            self._requeue_unwritten(pending)
            self._retry_at = time.monotonic() + INDEX_RETRY_S
            self._repeats.log(
                "room",
                logging.ERROR,
                f"cannot write key-index entries in {self.index_dir}: {exc.strerror or exc}; "
                f"{self.pending_count} messages wait to be indexed (retried every {INDEX_RETRY_S:g} s)",
            )
            return
        except BaseException:
            self.last_phy = self._max_indexed()
            self._restore_newest()  # a write cut short may have left slot heads past its count
            raise
        if self._retry_at:
            self._retry_at = 0.0
            self._repeats.resolved("room", f"key-index entries are written again in {self.index_dir}")

    def _restore_newest(self) -> None:
        """:meth:`IndexFile.restore_slot_heads` of the file being written (the only one a write
        cut short can leave slot heads past its count in); a failure is logged."""
        if self._files and not self._files[-1].is_full:
            try:
                self._files[-1].restore_slot_heads()
            except Exception:
                log.exception("cannot check the slot heads of index file %s", self._files[-1].path)

    def _requeue_unwritten(self, pending: list[Any]) -> None:
        """Queue again, before anything queued since, the messages of ``pending`` not written:
        those from the newest indexed one on (it may have only some of its keys; one it had
        completely gets duplicate entries, which queries skip)."""
        first = bisect.bisect_left(pending[1::PENDING_FIELDS], self._max_indexed())
        self.pending = pending[first * PENDING_FIELDS :] + self.pending

    def _drop_oldest_half(self) -> None:
        pending = self.pending
        n = len(pending) // PENDING_FIELDS // 2
        self.pending = pending[n * PENDING_FIELDS :]
        log.warning(
            "%d messages from commit-log offset %d on are not indexed by key: the disk has had no room "
            "for their entries (they stay stored and readable by queue offset)",
            n,
            pending[1],
        )

    def _prefix_hash(self, topic: str) -> int:
        """Unsigned Java hash of ``topic#`` (cached)."""
        prefix_hash = self._prefix_hashes.get(topic)
        if prefix_hash is None:
            if len(self._prefix_hashes) >= _PREFIX_CACHE_MAX:
                self._prefix_hashes.clear()
            prefix_hash = self._prefix_hashes[topic] = _topic_prefix_hash(topic)
        return prefix_hash

    def _write_now(self, topic: str, phy: int, ts: int, uniq_key: str | None, keys: str | None) -> None:
        """Write the entries of one message, one by one."""
        prefix_hash = self._prefix_hash(topic)
        if uniq_key:
            h = java_string_hash_extend(prefix_hash, uniq_key)
            if h & 0x80000000:
                h = 0x100000000 - h if h != 0x80000000 else 0  # _abs_hash
            files = self._files
            if not files or not files[-1].put_key(h, phy, ts):
                self._put_hash(h, phy, ts)
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if key:
                    self._put_hash(_abs_hash(java_string_hash_extend(prefix_hash, key)), phy, ts)

    def _write_batch(self, pending: list[Any]) -> None:
        """Write the entries of many messages with array operations (:mod:`store.index_batch`),
        filling the newest file and rolling to new ones as :meth:`_write_now` would."""
        topics, phys, stamps, keys_ = entry_columns(pending)
        n = len(keys_)
        first = topics[0]
        if topics.count(first) == n:
            prefix: int | np.ndarray = self._prefix_hash(first)
        else:
            # many topics (a broker with thousands of queues): look every entry up without a
            # Python call per entry; only when a topic is not cached yet, hash the missing ones
            cache = self._prefix_hashes
            try:
                prefix = np.fromiter(map(cache.__getitem__, topics), np.uint64, n)
            except KeyError:
                missing = set(topics).difference(cache)
                if len(cache) + len(missing) > _PREFIX_CACHE_MAX:
                    cache.clear()
                    missing = set(topics)
                for topic in missing:
                    cache[topic] = _topic_prefix_hash(topic)
                prefix = np.fromiter(map(cache.__getitem__, topics), np.uint64, n)
        hashes = key_hashes(prefix, keys_)
        phy_arr = np.fromiter(phys, np.int64, n)
        ts_arr = np.fromiter(stamps, np.int64, n)
        files = self._files
        done = 0
        while done < n:
            f = files[-1] if files and not files[-1].is_full else self._new_file()
            end = min(n, done + f.index_num - f.index_count)
            write_entries(f, hashes[done:end], phy_arr[done:end], ts_arr[done:end])
            done = end

    def _put_hash(self, h: int, phy: int, ts: int) -> None:
        files = self._files
        if not files or not files[-1].put_key(h, phy, ts):
            f = self._new_file()
            if not f.put_key(h, phy, ts):
                raise AssertionError("a fresh index file refused an entry")

    def _new_file(self) -> IndexFile:
        ms = self._now_ms()
        name = index_file_name(ms)
        if self._files:
            last = self._files[-1].name
            # names must sort in creation order even if the wall clock stepped back
            base = _parse_file_name(last) or ms
            bump = max(ms, base)
            while name <= last or os.path.exists(os.path.join(self.index_dir, name)):
                bump += 1
                name = index_file_name(bump)
        else:
            while os.path.exists(os.path.join(self.index_dir, name)):
                ms += 1
                name = index_file_name(ms)
        os.makedirs(self.index_dir, exist_ok=True)
        f = IndexFile(
            os.path.join(self.index_dir, name), self.max_hash_slot_num, self.max_index_num, create=True
        )
        self._files.append(f)
        log.info("created index file %s", f.path)
        return f

    # --- read path -------------------------------------------------------------------------------

    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryOffsetResult:
        """Commit-log offsets of messages indexed under ``topic#key`` stored in [begin_ts, end_ts]
        (ms), newest first, at most ``max_num``, without duplicates.

        Like upstream, entries only keep the key's hash: a different key with the same Java hash
        also matches, so callers compare the message's keys. Entry times have second precision
        relative to the file's begin timestamp.
        """
        steps = self.query_steps(topic, key, max_num, begin_ts, end_ts)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def query_steps(
        self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
    ) -> Generator[tuple[IndexFile, int], None, QueryOffsetResult]:
        """:meth:`query` as a generator that yields (file, position) of each slot and entry it is
        about to read (``IndexFile.select_steps``), for a caller that brings its page into
        memory first (``DefaultMessageStore.read_in_query``); returns the result. Files deleted
        or entries truncated between steps end their walk; entries queued meanwhile are not
        looked at."""
        self.drain()
        offsets: list[int] = []
        if not self._files:
            return QueryOffsetResult(offsets, 0, 0)
        h = index_key_hash(build_key(topic, key))
        seen: set[int] = set()
        for f in reversed(list(self._files)):
            if len(offsets) >= max_num:
                break
            if f.time_matched(begin_ts, end_ts):
                for pos in f.select_steps(offsets, seen, h, max_num, begin_ts, end_ts):
                    yield f, pos
        if not self._files:
            return QueryOffsetResult(offsets, 0, 0)
        last = self._files[-1]
        return QueryOffsetResult(offsets, last.end_timestamp, last.end_phy_offset)

    # --- truncation and retention ----------------------------------------------------------------

    def truncate_after(self, phy_offset: int) -> int:
        """Drop every entry pointing at or beyond commit-log offset ``phy_offset``; returns the
        number of entries dropped.

        Files that start at or beyond the offset are deleted; the file that straddles it has its
        newest entries undone in place (slot heads restored from the chains), so nothing needs
        re-dispatching: the index then covers exactly the commit log below ``phy_offset``.
        """
        self.drain()
        dropped = 0
        for f in reversed(list(self._files)):
            if not f.has_entries:
                continue  # an empty newest file stays the write target
            if f.begin_phy_offset >= phy_offset:
                dropped += f.index_count - 1
                self._remove(f)
                continue
            if f.end_phy_offset >= phy_offset:
                dropped += f.truncate_entries_from(phy_offset)
            break
        self.last_phy = self._max_indexed()
        if dropped:
            log.info("index truncated at offset %d: %d entries dropped", phy_offset, dropped)
        return dropped

    def delete_files_before(self, phy_offset: int) -> list[str]:
        """Retention: delete files (never the newest) whose entries all point below ``phy_offset``
        (upstream ``deleteExpiredFile``). Returns the deleted paths."""
        self.drain()
        gone: list[str] = []
        for f in list(self._files[:-1]):
            if f.end_phy_offset < phy_offset:
                gone.append(f.path)
                self._remove(f)
            else:
                break
        self.last_phy = self._max_indexed()
        return gone

    def _remove(self, f: IndexFile) -> None:
        with self._fd_lock:
            self._files.remove(f)
            f.close()
        _unlink(f.path)
        log.info("deleted index file %s", f.path)

    # --- durability ------------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync every file written since the last flush, its written entries' pages unmapped
        first (:meth:`IndexFile.drop_written_entries_sync`); returns the end timestamp of the newest
        file as of the start of the flush, which is durable once this returns (the store records it
        as the checkpoint's ``indexMsgTimestamp``). Blocking: call from a worker thread.

        Does not :meth:`drain` (the store's thread may be queueing meanwhile): queued messages are
        not covered; callers drain on the store's thread right before handing this over."""
        with self._fd_lock:
            ts = self._files[-1].end_timestamp if self._files else 0
            fds: list[int] = []
            for f in self._files:
                if f.dirty:
                    f.dirty = False
                    # before the fsync, and under the lock: no file closes meanwhile
                    f.drop_written_entries_sync()
                    fds.append(os.dup(f.fd))
        try:
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        return ts


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        log.warning("index file %s was already gone", path)
