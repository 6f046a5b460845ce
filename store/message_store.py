"""``DefaultMessageStore``: one broker's message store (upstream ``DefaultMessageStore``).

Lifecycle: ``await start()`` (lock, load, recover, abort marker) -> run ``run()`` in a nursery for
the background services (flushes, retention, file pre-allocation, dispatch catch-up) -> cancel it
-> ``await shutdown()`` (final flush, checkpoint, abort marker removed, maps closed).

Everything runs on the trio thread. The send paths (``put_message`` / ``put_messages``) live in
:mod:`store.put`: the record is encoded once by the caller, the log patches three fields, copies it
into an already-faulted map and, when the dispatch limit allows, writes the consume-queue unit at
once from what the caller passed (tags code, keys) without decoding.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable

import trio

from remoting.protocol.message import BLANK_MAGIC, dispatch_info, host_bytes
from remoting.repeats import RepeatedLog
from store import recovery, truncation
from store.allocate import (
    PREPARED_DIRTY_BYTES,
    WRITE_AHEAD_BYTES,
    FileAllocator,
    WriteAhead,
    WritePace,
)
from store.checkpoint import (
    StoreCheckpoint,
    StoreLock,
    abort_file_exists,
    create_abort_file_sync,
    remove_abort_file_sync,
)
from store.cleanup import CleanService, DiskSpaceFn
from store.commitlog import STORE_TIME_END, CommitLog
from store.config import FlushDiskType, MessageStoreConfig
from store.consume_queue import CQ_UNIT, CQ_UNIT_SIZE, FILLER_SIZE, SEARCH_RECORD, ConsumeQueue
from store.consume_queue_store import ConsumeQueueStore
from store.deletion_marks import DeletionMarks
from store.dispatch import ArrivalListener, Dispatcher, DispatchNeedsFile
from store.epoch import EpochFile
from store.flush import CommitLogFlusher, LogicsFlusher
from store.index import IndexService
from store.index_file import QueryOffsetResult
from store.mapped_file import delete_paths_sync
from store.put import PutPaths
from store.reading import get_message, query_message
from store.results import (
    BoundaryType,
    GetMessageResult,
    MessageFilter,
    QueryMessageResult,
)

log = logging.getLogger("store")

#: seconds between dispatch attempts while the disk refuses a consume-queue file or its room
DISPATCH_RETRY_S = 1.0

_SIZE_MAGIC = struct.Struct(">ii")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreOffsetError(ValueError):
    """An offset argument that does not fit the log (not the max offset, not a record boundary)."""


class DefaultMessageStore(PutPaths):
    """The commit log, consume queues, index, checkpoint and epoch file of one broker."""

    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        store_host: tuple[str, int],
        now_ms: Callable[[], int] = _wall_clock_ms,
        controller_mode: bool = False,
        disk_space: DiskSpaceFn | None = None,
        total_physical_memory: int | None = None,
    ) -> None:
        self.config = config
        self.store_host = store_host
        self.now_ms = now_ms
        #: the clock is the wall clock: the plain send path reads it without calling ``now_ms``
        self._wall_clock = now_ms is _wall_clock_ms
        raw_ip, port = host_bytes(store_host)
        #: the STOREHOST field of this store's records (IP bytes + 4-byte port), and the prefix of its
        #: offset message ids
        self.host_field = raw_ip + struct.pack(">i", port)
        self.commit_log = CommitLog(
            config.commitlog_dir, config.mappedFileSizeCommitLog, warm=config.warmMapedFileEnable
        )
        self.queues = ConsumeQueueStore(
            config.consumequeue_dir, config.storePathRootDir, config.mappedFileSizeConsumeQueue
        )
        self.index: IndexService | None = None
        if config.messageIndexEnable:
            self.index = IndexService(
                config.index_dir,
                max_hash_slot_num=config.maxHashSlotNum,
                max_index_num=config.maxIndexNum,
                now_ms=now_ms,
            )
        self.deletion_marks = DeletionMarks(config.storePathRootDir)
        self.dispatcher = Dispatcher(
            self.commit_log, self.queues, self.index, config.delay_levels_ms, self.deletion_marks
        )
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self.epoch_file = EpochFile(config.epoch_file_path)
        dispatcher = self.dispatcher
        self.cl_flusher = CommitLogFlusher(
            self.commit_log,
            self.epoch_file,
            config.rmqCommitLogPageCacheBytes,
            dispatched=lambda: dispatcher.reput_offset,
        )
        self.maintenance_lock = trio.Lock()
        #: the commit log's min offset at the last retention visit of the queues (-1: none yet;
        #: see :func:`store.truncation.delete_expired_logics`)
        self.expired_logics_below = -1
        self.logics_flusher = LogicsFlusher(
            self.queues,
            self.index,
            self.dispatcher,
            self.cl_flusher,
            self.checkpoint,
            lambda: self.confirm_offset,
            self.maintenance_lock,
            self.deletion_marks,
        )
        # the writer's pace bounds what is brought into memory ahead of it (sampled by the write-ahead)
        self.allocator = FileAllocator(
            self.commit_log.mfq, dirty_ahead=PREPARED_DIRTY_BYTES, pace=WritePace(WRITE_AHEAD_BYTES)
        )
        self.write_ahead = WriteAhead(self.commit_log, WRITE_AHEAD_BYTES, allocator=self.allocator)
        self.commit_log.write_ahead = self.write_ahead.kick
        self.clean_service = CleanService(self, disk_space)
        self.total_physical_memory = total_physical_memory or (
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        )
        self._lock_file = StoreLock(config.lock_path)
        self._controller_mode = controller_mode
        self._confirm_offset = 0
        self._dispatch_lock = trio.Lock()
        #: dispatch stopped because the disk refused a consume-queue file (retried, logged once)
        self._dispatch_blocked = False
        self._dispatch_repeats = RepeatedLog(log)
        self._dispatch_wakeup = trio.Event()
        self._roll_lock = trio.Lock()
        self._rolling = 0
        self._sync_flush = config.flushDiskType is FlushDiskType.SYNC_FLUSH
        self.refresh_limits()
        self._queue_tables = self.queues.tables
        self.disk_full = False
        self._truncating = False
        self.running = False
        self.shutdown_done = False
        #: queues recovery must rebuild (from the manifest / damaged files); set by start()
        self.rebuild_queues: set[tuple[str, int]] = set()
        self.recovery_report: recovery.RecoveryReport | None = None
        # a pending repair of the per-queue offset counters (after replicated appends/truncation)
        self._queue_table_stale = False
        self._refuse: str | None = "the message store is not started"
        self._plain = False

    # ------------------------------------------------------------------ lifecycle

    def refresh_limits(self) -> None:
        """Take over ``maxMessageSize`` and ``syncFlushTimeout`` from :attr:`config` (the put paths
        keep copies); a live config update (UPDATE_BROKER_CONFIG) calls this after changing them."""
        config = self.config
        self._max_record_size = config.maxMessageSize + 64 * 1024
        self._max_body_size = config.maxMessageSize
        self._sync_flush_timeout = config.syncFlushTimeout / 1000

    async def start(self) -> recovery.RecoveryReport:
        """Lock the store, load every file and recover; never raises for damaged data (see the
        returned report). Raises StoreLockedError when another process holds the store, and
        StoreLayoutError when its files were made with other file sizes than configured; a start
        that fails leaves the store closed and unlocked."""
        cfg = self.config
        for d in (cfg.storePathRootDir, cfg.commitlog_dir, cfg.consumequeue_dir):
            await trio.to_thread.run_sync(lambda d=d: os.makedirs(d, exist_ok=True))
        await trio.to_thread.run_sync(self._lock_file.acquire_sync)
        try:
            return await self._load_and_recover()
        except BaseException:
            # nothing was flushed or marked: closing maps and lock as a crash would leaves the
            # files as they were
            self.abandon()
            raise

    async def _load_and_recover(self) -> recovery.RecoveryReport:
        cfg = self.config
        ck = await trio.to_thread.run_sync(self.checkpoint.load_sync)
        abnormal = await trio.to_thread.run_sync(abort_file_exists, cfg.abort_path)
        await trio.to_thread.run_sync(self.epoch_file.load)
        problems = await trio.to_thread.run_sync(self.commit_log.mfq.load_sync)
        self.commit_log.attach_loaded()
        q_problems, self.rebuild_queues = await trio.to_thread.run_sync(self.queues.load_sync)
        q_problems += await trio.to_thread.run_sync(self.deletion_marks.load_sync)
        if self.index is not None:
            # the index is truncated to the recovered log instead of dropping whole files
            await trio.to_thread.run_sync(self.index.load, True, ck.indexMsgTimestamp)
        self._confirm_offset = ck.confirmPhyOffset
        report = await recovery.recover(self, abnormal)
        report.problems = problems + q_problems + report.problems
        self.commit_log.loaded_cold()  # readers of these bytes check first that they are in memory
        await self._finish_interrupted_deletions(report)
        self.recovery_report = report
        self.rebuild_queues = set()
        await trio.to_thread.run_sync(create_abort_file_sync, cfg.abort_path)
        self.running = True
        self._update_gate()
        try:
            await self.logics_flusher.flush()
        except OSError as exc:  # a full disk: the periodic flush tries again
            log.error("flush after recovery failed (%s); retried by the periodic flush", exc)
        if self.commit_log.current is not None:
            self.allocator.populate_later(self.commit_log.current)  # the part not written yet
        self.allocator.request_prepare()
        return report

    async def _finish_interrupted_deletions(self, report: recovery.RecoveryReport) -> None:
        """Queues of a marked topic that start below its mark are the deleted incarnation's (a
        crash came between writing the mark and removing the files): remove them now."""
        marks = self.deletion_marks
        if not marks.marks:
            return
        stale = []
        for cq in self.queues:
            if cq.topic not in marks.marks:
                continue
            first = cq.unit(cq.min_offset)
            if first is not None and marks.covers(cq.topic, first[0]):
                stale.append((cq.topic, cq.queue_id))
        if stale:
            await truncation.delete_queues(self, stale)
            msg = f"consume queues {stale} of deleted topics removed (the deletion was interrupted)"
            log.warning(msg)
            report.problems.append(msg)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Background services; cancel to stop (before :meth:`shutdown`)."""
        cfg = self.config
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                self.cl_flusher.run_periodic,
                cfg.flushIntervalCommitLog,
                cfg.flushCommitLogLeastPages,
                cfg.flushCommitLogThoroughInterval,
            )
            nursery.start_soon(
                self.logics_flusher.run_periodic,
                cfg.flushIntervalConsumeQueue,
                cfg.flushConsumeQueueLeastPages,
                cfg.flushConsumeQueueThoroughInterval,
            )
            nursery.start_soon(self.clean_service.run)
            nursery.start_soon(self.allocator.run)
            nursery.start_soon(self.write_ahead.run)
            nursery.start_soon(self._dispatch_loop)
            task_status.started()

    async def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker, close the maps."""
        if self.shutdown_done:
            return
        was_running = self.running
        self.running = False
        self._refuse = "the message store is shut down"
        self._refresh_plain()
        if was_running:
            try:
                await self.cl_flusher.flush()
                await self.logics_flusher.flush()
                if self.epoch_file.dirty:
                    await trio.to_thread.run_sync(self.epoch_file.persist)
            except OSError as exc:
                # a full disk, say: what is not durable is what a crash would lose, and the abort
                # file stays so that the next start checks the store as after one
                log.error(
                    "the final flush failed (%s): the abort file stays, so the next start recovers as after a crash",
                    exc,
                )
            else:
                await trio.to_thread.run_sync(remove_abort_file_sync, self.config.abort_path)
        self.commit_log.mfq.close_all()
        self.queues.close()
        if self.index is not None:
            self.index.close()
        self._lock_file.release()
        self.shutdown_done = True

    def abandon(self) -> None:
        """Close maps and the lock without flushing, checkpointing or removing the abort marker:
        what a crash leaves behind (tests; a container dropping a broker without shutdown)."""
        self.running = False
        self._refuse = "the message store was abandoned"
        self._refresh_plain()
        self.commit_log.mfq.close_all()
        self.queues.drop_staged()  # units only staged in memory die with the process
        self.queues.close()
        if self.index is not None:
            self.index.close()
        self._lock_file.release()
        self.shutdown_done = True

    # ------------------------------------------------------------------ state

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    #: ``store.ha.replica_log.ReplicaLog`` names
    max_offset = max_phy_offset

    @property
    def min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def mapped_file_size(self) -> int:
        return self.commit_log.file_size

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.cl_flusher.flushed_offset

    @property
    def controller_mode(self) -> bool:
        """Whether dispatch stops at the confirm offset (upstream ``enableControllerMode``)."""
        return self._controller_mode

    @controller_mode.setter
    def controller_mode(self, value: bool) -> None:
        self._controller_mode = value
        self._refresh_plain()
        if not value:
            self._dispatch_wakeup.set()

    @property
    def confirm_offset(self) -> int:
        """Controller mode: the offset every in-sync replica holds (persisted in the checkpoint's
        ``confirmPhyOffset``); otherwise the max offset, as upstream."""
        return self._confirm_offset if self._controller_mode else self.commit_log.max_offset

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None:
        self.set_confirm_offset(value)

    def set_confirm_offset(self, offset: int) -> None:
        """Set the confirm offset (clamped to the max offset) and dispatch up to it."""
        self._confirm_offset = min(offset, self.commit_log.max_offset)
        self.checkpoint.data.confirmPhyOffset = self._confirm_offset
        if self._controller_mode:
            self._pump()

    @property
    def dispatch_limit(self) -> int:
        return self._confirm_offset if self._controller_mode else self.commit_log.max_offset

    @property
    def dispatch_behind_bytes(self) -> int:
        return max(0, self.dispatch_limit - self.dispatcher.reput_offset)

    def set_disk_full(self, full: bool) -> None:
        self.disk_full = full
        self._update_gate()

    def _update_gate(self) -> None:
        if not self.running:
            self._refuse = "the message store is not running"
        elif self._truncating:
            self._refuse = "the message store is being truncated"
        elif self.disk_full:
            self._refuse = (
                "the message store is not writable: the disk is full "
                f"(above diskSpaceWarningLevelRatio {self.config.diskSpaceWarningLevelRatio})"
            )
        else:
            self._refuse = None
        self._refresh_plain()

    def _refresh_plain(self) -> None:
        # whether put_message may take its plain path (see there); recomputed on every change
        self._plain = (
            self._refuse is None
            and not self._queue_table_stale
            and not self._controller_mode
            and not self._sync_flush
        )

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset)`` is called whenever a queue gains a message."""
        self.dispatcher.listeners.append(listener)

    def topics(self) -> list[str]:
        return self.queues.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self.queues.tables.get(topic, {}))

    def major_file_size(self) -> int:
        """Bytes of commit-log and consume-queue files (upstream ``getMajorFileSize``)."""
        size = len(self.commit_log.mfq.files) * self.commit_log.file_size
        for cq in self.queues:
            size += len(cq.mfq.files) * cq.file_size
        return size

    def recover_topic_queue_table(self) -> None:
        """Recompute every queue's next queue offset from its consume queue plus the records not
        yet dispatched (upstream ``recoverTopicQueueTable``)."""
        for cq in self.queues:
            cq.next_offset = cq.max_offset
        cl = self.commit_log
        offset, end = self.dispatcher.reput_offset, cl.max_offset
        while offset < end:
            mf = cl.mfq.find(offset)
            if mf is None:
                break
            pos = offset - mf.file_from_offset
            if pos + 8 > mf.wrote_position:
                break
            size, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
            if magic == BLANK_MAGIC:
                offset = mf.file_end_offset
                continue
            if size <= 0 or pos + size > mf.wrote_position:
                break
            req = dispatch_info(mf.view, pos)
            if req.sys_flag & 0xC in (0, 8):
                cq = self.queues.get_or_create(req.topic, req.queue_id)
                cq.next_offset = max(cq.next_offset, req.consume_queue_offset + 1)
            offset += size
        self._queue_table_stale = False
        self._refresh_plain()

    # ------------------------------------------------------------------ dispatch

    def _pump(self) -> None:
        try:
            self.dispatcher.pump(self.dispatch_limit)
        except DispatchNeedsFile:
            self._dispatch_wakeup.set()

    async def _catch_up(self) -> None:
        """Dispatch up to the limit, making consume-queue files and room as needed. When the disk
        refuses one (full), dispatch stops there -- the messages stay in the commit log, not yet
        pullable -- and :meth:`_dispatch_loop` tries again every :data:`DISPATCH_RETRY_S`."""
        async with self._dispatch_lock:
            while True:
                try:
                    self.dispatcher.pump(self.dispatch_limit)
                except DispatchNeedsFile as need:
                    try:
                        await self.create_cq_file(need.cq, need.queue_offset)
                    except OSError as exc:
                        self._dispatch_blocked = True
                        # the dispatch loop retries -- also when this call was not the loop's (it
                        # may be waiting for the next append, which may never come)
                        self._dispatch_wakeup.set()
                        self._dispatch_repeats.log(
                            "cq",
                            logging.ERROR,
                            f"dispatch stopped at commit-log offset {self.dispatcher.reput_offset}: cannot "
                            f"make room for consume queue {need.cq.topic}/{need.cq.queue_id}: "
                            f"{exc.strerror or exc}; the messages are stored and become pullable once it can",
                        )
                        return
                    continue
                self._dispatch_blocked = False
                self._dispatch_repeats.resolved("cq", "dispatch goes on: consume queues have room again")
                return

    async def reput(self) -> None:
        """Dispatch everything up to the dispatch limit now (creating consume-queue files)."""
        await self._catch_up()

    async def _dispatch_loop(self) -> None:
        while True:
            if self._dispatch_blocked:
                await trio.sleep(DISPATCH_RETRY_S)  # not at every append's wakeup
            else:
                await self._dispatch_wakeup.wait()
            self._dispatch_wakeup = trio.Event()
            await self._catch_up()

    async def create_cq_file_waiting(self, cq: ConsumeQueue, queue_offset: int) -> None:
        """:meth:`create_cq_file` for recovery, which cannot go on without it: while the disk
        refuses (full), say so once and try again every :data:`DISPATCH_RETRY_S`."""
        while True:
            try:
                await self.create_cq_file(cq, queue_offset)
            except OSError as exc:
                self._dispatch_repeats.log(
                    "recovery",
                    logging.ERROR,
                    f"recovery waits for room for consume queue {cq.topic}/{cq.queue_id}: {exc.strerror or exc}; "
                    "the store starts once there is room",
                )
                await trio.sleep(DISPATCH_RETRY_S)
                continue
            self._dispatch_repeats.resolved("recovery", "recovery goes on: consume queues have room again")
            return

    async def create_cq_file(self, cq: ConsumeQueue, queue_offset: int) -> None:
        """Create the consume-queue file ``queue_offset`` needs, or reserve the next step of the
        current one's disk blocks (:meth:`ConsumeQueue.needs_room`), in a worker thread (after
        cutting the queue's stale units when it started over: ``cq.restart_at``). Raises OSError
        when the disk refuses."""
        if cq.restart_at is not None:
            await truncation.restart_queue(cq)
        cq.materialize()
        if cq.needs_room():
            mf = cq.cur
            assert mf is not None
            reserved = await trio.to_thread.run_sync(cq.reserve_sync, mf, mf.wrote_position + CQ_UNIT_SIZE)
            cq.set_reserved(mf, max(mf.reserved, reserved))
            return
        off = cq.file_needed(queue_offset)
        last = cq.mfq.last
        if last is not None and last.file_from_offset >= off:
            return
        mf = await trio.to_thread.run_sync(cq.create_file_sync, off, queue_offset, cq.first_step())
        last = cq.mfq.last
        if cq.file_needed(queue_offset) != off or (last is not None and last.file_from_offset >= off):
            # the queue changed meanwhile (truncation, deletion): this file is not wanted
            await trio.to_thread.run_sync(delete_paths_sync, cq.mfq.retire([mf]))
            return
        cq.install_file(mf, queue_offset)

    # ------------------------------------------------------------------ reading

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int = 128 * 1024 * 1024,
        tag_filter: MessageFilter | Callable[[int], bool] | None = None,
    ) -> GetMessageResult | None:
        """Up to ``max_count`` messages from ``offset`` (see :func:`store.reading.get_message`);
        None when the store is not running (upstream returns null)."""
        if not self.running:
            return None
        return get_message(self, topic, queue_id, offset, max_count, max_bytes, tag_filter)

    async def read_in(self, start: int, end: int) -> None:
        """Bring commit-log bytes [start, end) back into memory in a worker thread where they
        may have left it -- the page-cache bound (``rmqCommitLogPageCacheBytes``) dropped them,
        or they were written before this start -- so that reading or sending them next does not
        wait for the disk on the event loop; returns at once for bytes never dropped and for
        pages found in memory. For readers of old bytes: pulls, replication, lookups by offset."""
        job = self.commit_log.read_in_job(start, end)
        if job is not None:
            await trio.to_thread.run_sync(job)

    async def _read_in_units(self, cq: ConsumeQueue, offset: int, count: int) -> None:
        """Bring the pages of ``count`` units of ``cq`` from logical ``offset`` into memory in a
        worker thread when they lie in one of its older files and are out of memory
        (:meth:`ConsumeQueue.read_in_job`), before they are read; returns at once otherwise."""
        job = cq.read_in_job(offset, count)
        if job is not None:
            await trio.to_thread.run_sync(job)

    async def read_in_queue(self, topic: str, queue_id: int, offset: int, count: int) -> int:
        """Before :meth:`get_message` (whose filters may read the records): :meth:`_read_in_units`
        of ``count`` units of a queue from logical ``offset``, then :meth:`read_in` of their
        messages' commit-log bytes (what a pull from there reads, a filter aside) when they start
        below the line of bytes that may be out of memory (``CommitLog.cold_end``).
        Returns the end of the commit-log bytes brought in (0: none needed)."""
        cq = self.queues.get(topic, queue_id)
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return 0
        await self._read_in_units(cq, offset, count)
        cl = self.commit_log
        if not cl.cold_end:
            return 0
        units = cq.read_units(offset, count)
        if not units:
            return 0
        phys, size, _ = CQ_UNIT.unpack_from(units)
        if phys >= cl.cold_end and size != FILLER_SIZE:
            return 0  # a pull near the end (the usual one): no list of its units
        last, last_size, _ = CQ_UNIT.unpack_from(units, len(units) - CQ_UNIT_SIZE)
        if size == FILLER_SIZE or last_size == FILLER_SIZE:
            # fillers (the units before a queue's first message in its file): the real ones
            spans = [(p, n) for p, n, _ in CQ_UNIT.iter_unpack(units) if n != FILLER_SIZE]
            if not spans:
                return 0
            (phys, _), (last, last_size) = spans[0], spans[-1]
        if phys >= cl.cold_end:
            return 0
        end = last + last_size  # a queue's units follow the log's order
        await self.read_in(phys, end)
        return end

    async def read_in_store_time(self, topic: str, queue_id: int, cq_offset: int) -> None:
        """What :meth:`get_message_store_timestamp` reads -- the unit, then the head of its
        message's record -- brought into memory in a worker thread where it may be out of it
        (:meth:`_read_in_units`, :meth:`read_in`): before that call."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return
        await self._read_in_units(cq, cq_offset, 1)
        unit = cq.unit(cq_offset)
        if unit is not None and unit[1] != FILLER_SIZE:
            await self._read_in_store_time_of(unit[0], unit[1])

    async def _read_in_store_time_of(self, phys: int, size: int) -> None:
        """:meth:`read_in` of the head of the record at ``phys`` (``size`` bytes) up to its
        STORETIMESTAMP, what ``CommitLog.pickup_store_timestamp`` reads."""
        if phys < self.commit_log.cold_end:
            await self.read_in(phys, phys + min(size, STORE_TIME_END))

    async def read_in_query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> None:
        """Before :meth:`query_message` with these arguments: the index slots and entries it reads
        (``IndexService.query_steps``), then each record it finds (:meth:`read_in_message`),
        brought into memory in worker threads where they are out of it -- an old index file's
        pages after a restart, say, which a query reads one entry of a chain at a time."""
        if self.index is None:
            return
        steps = self.index.query_steps(topic, key, max_num, begin, end)
        try:
            while True:
                index_file, pos = next(steps)
                job = index_file.read_in_job(pos)
                if job is not None:
                    await trio.to_thread.run_sync(job)
        except StopIteration as done:
            found: QueryOffsetResult = done.value
        if self.commit_log.cold_end:
            for phy in found.phy_offsets:
                await self.read_in_message(phy)

    async def read_in_message(self, phy_offset: int) -> None:
        """:meth:`read_in` of the record at ``phy_offset`` (its first page, then the rest once
        its size is known), before :meth:`look_message_by_offset`."""
        if phy_offset < self.commit_log.cold_end:
            await self.read_in(phy_offset, phy_offset + 8)  # TOTALSIZE and MAGICCODE
            size = self.commit_log.record_size_at(phy_offset)
            if size:
                await self.read_in(phy_offset, phy_offset + size)

    def look_message_by_offset(self, phy_offset: int, size: int | None = None) -> memoryview | None:
        """Zero-copy view of the record at ``phy_offset`` (size read from its header when not
        given); None when no record is there."""
        if size is None:
            size = self.commit_log.record_size_at(phy_offset)
            if not size:
                return None
        return self.commit_log.read(phy_offset, size)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """Commit-log offset of the message at ``cq_offset`` (0 when there is none, as upstream)."""
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(cq_offset) if cq is not None else None
        return unit[0] if unit is not None and unit[1] != FILLER_SIZE else 0

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, cq_offset: int) -> bool:
        """Whether the message at ``cq_offset`` lies further behind the log's end than the share of
        memory a read may expect to find cached (``accessMessageInMemoryMaxRatio`` % of RAM, as
        the pull path estimates); False when there is no such message."""
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(cq_offset) if cq is not None else None
        if unit is None or unit[1] == FILLER_SIZE:
            return False
        memory = self.total_physical_memory * self.config.accessMessageInMemoryMaxRatio // 100
        return self.commit_log.max_offset - unit[0] > memory

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        """Store timestamp of the message at ``cq_offset`` (-1 when unknown)."""
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(cq_offset) if cq is not None else None
        if unit is None or unit[1] == FILLER_SIZE:
            return -1
        return self.commit_log.pickup_store_timestamp(unit[0], unit[1])

    async def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store timestamp of the queue's first readable message (-1 when empty); the units and
        records it reads -- the oldest of the queue, often out of memory -- are brought in first
        (:meth:`read_in_store_time`)."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return -1
        qo = cq.min_offset
        while qo < cq.max_offset:
            await self.read_in_store_time(topic, queue_id, qo)
            ts = self.get_message_store_timestamp(topic, queue_id, qo)
            if ts >= 0:
                return ts
            qo = max(qo + 1, cq.min_offset)  # the store's thread ran meanwhile
        return -1

    def get_earliest_store_time(self) -> int:
        """Store timestamp of the first message of the commit log (-1 when empty)."""
        cl = self.commit_log
        size = cl.record_size_at(cl.min_offset)
        return cl.pickup_store_timestamp(cl.min_offset, size) if size else -1

    async def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int, boundary_type: BoundaryType = BoundaryType.LOWER
    ) -> int:
        """LOWER: the first offset stored at or after ``timestamp`` (the max offset if none);
        UPPER: the last offset stored at or before it (the min offset if none). A binary search
        over the queue (:meth:`ConsumeQueue.time_search`) whose every unit and record head is
        brought into memory in a worker thread first where it may be out of it: a search over
        old data reads pages no reader asked for in a while."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        cl = self.commit_log
        search = cq.time_search(timestamp, boundary_type is BoundaryType.UPPER, cl.min_offset)
        try:
            kind, at, size = next(search)
            while True:
                if kind == SEARCH_RECORD:
                    await self._read_in_store_time_of(at, size)
                    kind, at, size = search.send(cl.pickup_store_timestamp(at, size))
                else:
                    await self._read_in_units(cq, at, 1)
                    kind, at, size = search.send(-1)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """Messages indexed under ``key`` (a KEYS token or UNIQ_KEY) stored in [begin, end] ms."""
        return query_message(self, topic, key, max_num, begin, end)

    # ------------------------------------------------------------------ replication support

    def read_raw(self, phy_offset: int, max_bytes: int) -> memoryview | None:
        """Zero-copy view of log bytes from ``phy_offset``, at most ``max_bytes``, never crossing a
        file end (empty at the max offset; None below the min or above the max offset)."""
        return self.commit_log.read_raw(phy_offset, max_bytes)

    async def append_raw(self, phy_offset: int, data: bytes | bytearray | memoryview) -> None:
        """Slave side: append replicated bytes exactly at the max offset (raises StoreOffsetError
        otherwise, or when ``data`` would cross a file end). Bytes may end mid-record; dispatch
        only takes complete records."""
        cl = self.commit_log
        if phy_offset != cl.max_offset:
            if cl.max_offset != cl.min_offset or phy_offset % cl.file_size:
                raise StoreOffsetError(f"append at {phy_offset} but the max offset is {cl.max_offset}")
            await self._restart_empty_log(phy_offset)
        if not data:
            return
        cur = cl.current
        if cur is None or cur.wrote_position >= cl.file_size:
            if phy_offset % cl.file_size:
                raise StoreOffsetError(f"a new commit-log file cannot start at {phy_offset}")
            if cur is None and not cl.mfq.files:
                cl.mfq.base_offset = phy_offset
            async with self._roll_lock:
                mf = await self.allocator.get(phy_offset)
                cl.install_file(mf)
            if self.dispatcher.reput_offset == cl.last_blank_offset:
                self.dispatcher.skip_blank(cl.last_blank_offset, phy_offset)
            self.allocator.request_prepare()
            cur = cl.current
        assert cur is not None
        if cur.wrote_position + len(data) > cl.file_size:
            raise StoreOffsetError(f"{len(data)} bytes at {phy_offset} would cross the end of {cur.path}")
        cl.append_raw(data)
        self._queue_table_stale = True
        self._refresh_plain()
        if not self._controller_mode:
            await self._catch_up()

    async def _restart_empty_log(self, offset: int) -> None:
        """A log holding no bytes takes replicated bytes from another file start (a new slave
        syncing from the master's last file): it now begins at ``offset``."""
        cl = self.commit_log
        log.info("empty commit log restarts at offset %d", offset)
        gone = cl.cut(cl.min_offset)
        await trio.to_thread.run_sync(delete_paths_sync, cl.mfq.retire(gone))
        cl.mfq.base_offset = offset
        self.dispatcher.reput_offset = offset
        self.cl_flusher.truncated(offset)
        self.cl_flusher.flushed_offset = offset

    def last_message_boundary_at_or_below(self, offset: int) -> int:
        """The largest record boundary ``<= offset`` (a file start, a record start or the end)."""
        return self.commit_log.boundary_at_or_below(offset)

    async def truncate_to(self, offset: int) -> None:
        """Truncate commit log, consume queues, index and epoch file to the record boundary
        ``offset`` (see :mod:`store.truncation`). Raises StoreOffsetError for a non-boundary."""
        cl = self.commit_log
        if offset > cl.max_offset or offset < cl.min_offset:
            raise StoreOffsetError(f"offset {offset} is outside the log [{cl.min_offset}, {cl.max_offset}]")
        if cl.boundary_at_or_below(offset) != offset:
            raise StoreOffsetError(f"offset {offset} is not a record boundary")
        self._truncating = True
        self._update_gate()
        try:
            await truncation.truncate_store(self, offset)
        finally:
            self._truncating = False
            self._update_gate()
        self._queue_table_stale = True
        self._refresh_plain()

    async def truncate_logics(self, offset: int) -> None:
        """Drop consume-queue units and index entries of messages at or after ``offset``."""
        await truncation.truncate_logics(self, offset)

    async def flush(self) -> int:
        """Flush the commit log now; returns the flushed offset."""
        return await self.cl_flusher.flush()

    # ------------------------------------------------------------------ retention

    async def delete_topics(self, topics: list[str]) -> None:
        """Drop the topics' consume queues (files and directories). Under the maintenance lock, as
        the flush round that records new queues in the manifest: a round that had taken a deleted
        queue's line appended it after the deletion rewrote the manifest, and the next start
        "rebuilt" the deleted queue from the log (and its broker adopted the topic again)."""
        async with self.maintenance_lock:
            await truncation.delete_topics(self, topics)

    async def set_master_flushed_offset(self, offset: int) -> None:
        """Record the master's flushed offset in the checkpoint (upstream
        ``setMasterFlushedOffset``: a slave's haStatus shows it) and write the checkpoint now."""
        async with self.maintenance_lock:
            self.checkpoint.data.masterFlushedOffset = offset
            await trio.to_thread.run_sync(self.checkpoint.flush_sync, self.checkpoint.snapshot())

    async def delete_expired_queues(self, skip: Callable[[str], bool]) -> list[tuple[str, int]]:
        """Drop the consume queues (of topics not ``skip``-ped) that only point below the commit
        log's min offset -- mqadmin ``cleanExpiredCQ``; returns them."""
        async with self.maintenance_lock:
            return await truncation.delete_queues(self, truncation.expired_queues(self, skip))

    async def empty_queues_ending_by(self, topic: str, end: int) -> list[int] | None:
        """Empty the topic's consume queues that end at or below commit-log offset ``end`` (see
        :func:`store.truncation.empty_queues_ending_by`); their ids, or None -- nothing done --
        while dispatch has not reached ``end``."""
        if self.dispatcher.reput_offset < end:
            return None
        return await truncation.empty_queues_ending_by(self, topic, end)

    async def run_clean_once(self) -> list[str]:
        """One retention round now; returns deleted commit-log files."""
        return await self.clean_service.clean_once()

    def request_manual_delete(self) -> None:
        self.clean_service.request_manual_delete()

    async def delete_oldest_commit_log_files(self, count: int) -> list[str]:
        return await truncation.delete_oldest_commit_log_files(self, count)

    async def delete_expired_logics(self) -> None:
        await truncation.delete_expired_logics(self)
