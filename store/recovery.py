"""Recovery at start: find the valid end of the commit log, repair consume queues and the index.

Upstream: ``CommitLog.recoverNormally`` / ``recoverAbnormally``, ``ConsumeQueue.recover``,
``DefaultMessageStore.recover`` / ``truncateDirtyLogicFiles`` / ``recoverTopicQueueTable``.

The commit log is re-validated (record layout, body CRC when ``checkCRCOnRecover``, physical offset
field) from a *scan start* to the first invalid record, which becomes the end of the log; every
valid record scanned is dispatched again (consume-queue and index dispatch skip what they already
hold). The scan start comes from this store's checkpoint extension (the older of the flushed
commit-log offset and the flushed dispatch offset), so the work is proportional to the unflushed
tail; without it, as upstream: the third-last file after a clean shutdown, else the newest file
whose first message is older than the checkpoint timestamps.

Then: bytes and files past the end are removed, consume-queue units and index entries pointing past
it are dropped, epoch entries starting past it are dropped, and queues that were deleted or had a
gap are rebuilt from the commit log. Nothing here raises for damaged data: every repair is logged
and listed in the :class:`RecoveryReport`.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from typing import TYPE_CHECKING

import msgspec
import trio

from remoting.clock import TimeSlice
from remoting.protocol.message import BLANK_MAGIC, MAGIC_V1, MAGIC_V2, MessageFormatError, dispatch_info
from store.dispatch import DispatchNeedsFile, gets_queue_unit
from store.flush import fsync_paths_sync
from store.mapped_file import clear_nonzero_tail_sync, delete_paths_sync

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

log = logging.getLogger("store.recovery")

_SIZE_MAGIC = struct.Struct(">ii")
#: longest stretch the recovery spends on the queues without yielding to the event loop
RECOVERY_SLICE_S = 0.02


class RecoveryReport(msgspec.Struct, kw_only=True):
    """What recovery found and did."""

    abnormal: bool
    scan_start: int = 0
    scan_start_reason: str = ""
    max_offset: int = 0
    end_reason: str = ""
    scanned_messages: int = 0
    dropped_bytes: int = 0
    dropped_files: list[str] = msgspec.field(default_factory=list)
    rebuilt_queues: list[str] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    seconds: float = 0.0


class _ScanState:
    __slots__ = ("count", "offset", "reason", "reput", "stopped_dispatch", "tail_qo")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.reput = offset
        self.count = 0
        self.reason = ""
        self.stopped_dispatch = False
        self.tail_qo: dict[tuple[str, int], int] = {}


def choose_scan_start(store: DefaultMessageStore, abnormal: bool) -> tuple[int, str]:
    """Where the commit-log scan starts (a record boundary), and why."""
    cl = store.commit_log
    files = cl.mfq.files
    if not files:
        return 0, "empty commit log"
    lo, hi = files[0].file_from_offset, files[-1].file_end_offset
    ck = store.checkpoint.data
    if ck.physicFlushedOffset >= 0 and ck.logicsFlushedOffset >= 0:
        b = max(min(ck.physicFlushedOffset, ck.logicsFlushedOffset), lo)
        if b <= hi and _plausible_boundary(store, b):
            return b, "checkpoint flushed offsets"
        log.warning("checkpoint scan start %d is not a record boundary; falling back to timestamps", b)
    if not abnormal:
        return files[max(0, len(files) - 3)].file_from_offset, "third-last file (clean shutdown)"
    limit = ck.min_timestamp
    for mf in reversed(files):
        size, magic = _SIZE_MAGIC.unpack_from(mf.mm, 0)
        if magic in (MAGIC_V1, MAGIC_V2) and size > 0:
            ts = cl.pickup_store_timestamp(mf.file_from_offset, size)
            if 0 < ts <= limit:
                return mf.file_from_offset, "newest file older than the checkpoint"
    return lo, "first file"


def _plausible_boundary(store: DefaultMessageStore, offset: int) -> bool:
    cl = store.commit_log
    if offset % cl.file_size == 0:
        return True
    mf = cl.mfq.find(offset)
    if mf is None:
        return False
    size, magic = _SIZE_MAGIC.unpack_from(mf.mm, offset - mf.file_from_offset)
    return magic in (MAGIC_V1, MAGIC_V2, BLANK_MAGIC) or (size == 0 and magic == 0)


def _scan_sync(store: DefaultMessageStore, st: _ScanState, limit: int, check_crc: bool) -> None:
    """Validate and dispatch records from ``st.offset``; returns at the end of the valid data
    (``st.reason`` says why). Raises DispatchNeedsFile with ``st`` at the waiting record."""
    cl = store.commit_log
    file_size = cl.file_size
    dispatcher = store.dispatcher
    while True:
        off = st.offset
        mf = cl.mfq.find(off)
        if mf is None:
            st.reason = "end of the last file"
            return
        pos = off - mf.file_from_offset
        if pos + 8 > file_size:
            st.reason = f"fewer than 8 bytes left in {mf.path}"
            return
        size, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
        if magic == BLANK_MAGIC:
            if size != file_size - pos:
                st.reason = f"blank filler at {off} claims {size} bytes, {file_size - pos} remain"
                return
            st.offset = mf.file_end_offset
            if not st.stopped_dispatch:
                st.reput = st.offset
            continue
        if size == 0 and magic == 0:
            st.reason = "end of data"
            return
        try:
            req = dispatch_info(mf.view, pos, check_crc=check_crc)
        except MessageFormatError as exc:
            st.reason = f"invalid record at {off}: {exc}"
            return
        if req.commit_log_offset != off:
            st.reason = f"record at {off} says it belongs at {req.commit_log_offset}"
            return
        if not st.stopped_dispatch and off + size <= limit:
            dispatcher.dispatch_request(req)
            st.reput = off + size
        else:
            st.stopped_dispatch = True
            if gets_queue_unit(req.sys_flag):
                key = (req.topic, req.queue_id)
                if st.tail_qo.get(key, -1) <= req.consume_queue_offset:
                    st.tail_qo[key] = req.consume_queue_offset + 1
        cl.add_mark(off)
        st.offset = off + size
        st.count += 1


def _rebuild_scan_sync(
    store: DefaultMessageStore, st: _ScanState, end: int, only: set[tuple[str, int]]
) -> None:
    """Re-dispatch records in [st.offset, end) of the queues in ``only`` (no validation: this part
    of the log was validated or trusted). Raises DispatchNeedsFile like :func:`_scan_sync`."""
    cl = store.commit_log
    dispatcher = store.dispatcher
    while st.offset < end:
        off = st.offset
        mf = cl.mfq.find(off)
        if mf is None:
            return
        pos = off - mf.file_from_offset
        size, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
        if magic == BLANK_MAGIC:
            st.offset = mf.file_end_offset
            continue
        if size <= 0 or magic not in (MAGIC_V1, MAGIC_V2):
            return
        req = dispatch_info(mf.view, pos)
        key = (req.topic, req.queue_id)
        if (
            key in only
            and gets_queue_unit(req.sys_flag)
            and not dispatcher.deletion_marks.covers(req.topic, off)
        ):
            cq = store.queues.get_or_create(*key)
            qo = req.consume_queue_offset
            if not cq.put(off, size, dispatcher.tags_code_of(req), qo):
                raise DispatchNeedsFile(cq, qo)
        st.offset = off + size
        st.count += 1


async def recover(store: DefaultMessageStore, abnormal: bool) -> RecoveryReport:
    """Run recovery on a store whose files are loaded (see ``DefaultMessageStore.start``)."""
    t0 = time.perf_counter()
    report = RecoveryReport(abnormal=abnormal)
    cl = store.commit_log
    cfg = store.config
    old_end = cl.mfq.files[-1].file_end_offset if cl.mfq.files else 0
    start, why = choose_scan_start(store, abnormal)
    report.scan_start, report.scan_start_reason = start, why
    log.info(
        "%s recovery: scanning the commit log from %d (%s)", "abnormal" if abnormal else "normal", start, why
    )

    missing = set(store.rebuild_queues)
    dispatcher = store.dispatcher
    dispatcher.reput_offset = start
    dispatcher.gap_queues = set(missing)
    limit = store.confirm_offset if store.controller_mode else 1 << 62
    st = _ScanState(start)
    while True:
        try:
            _scan_sync(store, st, limit, cfg.checkCRCOnRecover)
            break
        except DispatchNeedsFile as need:
            await store.create_cq_file_waiting(need.cq, need.queue_offset)
    end = st.offset
    gaps = dispatcher.gap_queues
    dispatcher.gap_queues = None
    report.max_offset, report.end_reason, report.scanned_messages = end, st.reason, st.count

    # --- the commit log ends at `end` ---
    cut_mf = cl.mfq.find(end) if end < old_end else None
    gone = cl.cut(end)
    # files past the end: those holding data matter; a pre-created next file is all zeros
    holding_data = [mf for mf in gone if mf.mm[:8] != bytes(8)]
    report.dropped_files = [mf.path for mf in holding_data]
    report.dropped_bytes = sum(mf.file_size for mf in holding_data)
    if len(gone) > len(holding_data):
        log.info(
            "commit log: removed %d pre-allocated empty file(s) after offset %d",
            len(gone) - len(holding_data),
            end,
        )
    paths = cl.mfq.retire(gone)
    await trio.to_thread.run_sync(delete_paths_sync, paths)
    if abnormal and cut_mf is not None and not cut_mf.closed:
        rewritten = await trio.to_thread.run_sync(
            clear_nonzero_tail_sync, cut_mf, end - cut_mf.file_from_offset
        )
        report.dropped_bytes += rewritten
        if rewritten:
            msg = f"commit log: cleared {rewritten} bytes of torn or stale data after offset {end} ({st.reason})"
            log.warning(msg)
            report.problems.append(msg)
    if report.dropped_files:
        msg = f"commit log: deleted {len(report.dropped_files)} file(s) after offset {end}: {report.dropped_files}"
        log.warning(msg)
        report.problems.append(msg)

    # --- consume queues and index past the end ---
    await store.truncate_logics(end)

    # --- queues that were deleted or had gaps: rebuild from the commit log ---
    if gaps:
        await _rebuild(store, gaps, min(end, limit), report)

    # --- dispatch state, topic queue table, confirm offset, epochs ---
    dispatcher.reput_offset = min(st.reput, end)
    # the process's other brokers, name server and controller run meanwhile (36,000 queues
    # whose pages are not in memory take seconds)
    share = TimeSlice(RECOVERY_SLICE_S)
    for cq in list(store.queues):
        cq.correct_min_offset(cl.min_offset)
        cq.next_offset = max(cq.max_offset, st.tail_qo.get((cq.topic, cq.queue_id), 0))
        await share.tick()
    for (topic, qid), nxt in st.tail_qo.items():
        cq = store.queues.get_or_create(topic, qid)
        cq.next_offset = max(cq.next_offset, nxt)
    if store.confirm_offset > end:
        store.confirm_offset = end
    epoch = store.epoch_file
    last = epoch.last_entry()
    if last is not None and last.start_offset > end:
        log.warning("epoch entries starting after the recovered end %d are dropped", end)
        epoch.truncate_suffix(end + 1)
    epoch.set_end_offset(end)
    if epoch.dirty:
        await trio.to_thread.run_sync(epoch.persist)

    if abnormal:
        # what the crashed process left in the page cache past the scan start is not known to be
        # durable: make it so before the checkpoint claims it
        await trio.to_thread.run_sync(fsync_paths_sync, _files_touched_since(store, start))
        for mf in cl.mfq.files:
            mf.flushed_position = mf.wrote_position
    store.cl_flusher.flushed_offset = cl.max_offset
    report.seconds = time.perf_counter() - t0
    log.info(
        "recovery done in %.3fs: max offset %d (%s), %d messages scanned, %d bytes dropped",
        report.seconds,
        end,
        st.reason,
        st.count,
        report.dropped_bytes,
    )
    return report


def _files_touched_since(store: DefaultMessageStore, offset: int) -> list[str]:
    """Commit-log files from ``offset`` on, consume-queue files holding units of messages at or
    after it, and the index files."""
    cl = store.commit_log
    paths = [mf.path for mf in cl.mfq.files if mf.file_end_offset > offset]
    for cq in store.queues:
        for mf in reversed(cq.mfq.files):
            if mf.wrote_position == 0:
                continue
            paths.append(mf.path)
            unit = cq.unit(mf.file_from_offset // 20)
            if unit is None or unit[0] < offset:
                break
    if store.index is not None:
        paths.extend(os.path.join(store.index.index_dir, n) for n in store.index.file_names)
    return paths


async def _rebuild(
    store: DefaultMessageStore, keys: set[tuple[str, int]], end: int, report: RecoveryReport
) -> None:
    """Throw away and rebuild the consume queues ``keys`` from the whole commit log below ``end``."""
    for topic, qid in sorted(keys):
        cq = store.queues.get(topic, qid)
        if cq is not None:
            paths = [mf.path for mf in cq.mfq.files]
            cq.close()
            await trio.to_thread.run_sync(delete_paths_sync, paths)
        store.queues.reset(topic, qid)
    st = _ScanState(store.commit_log.min_offset)
    while True:
        try:
            _rebuild_scan_sync(store, st, end, keys)
            break
        except DispatchNeedsFile as need:
            await store.create_cq_file_waiting(need.cq, need.queue_offset)
    for topic, qid in sorted(keys):
        cq = store.queues.get_or_create(topic, qid)
        msg = f"consume queue {topic}/{qid} rebuilt from the commit log: offsets {cq.min_offset}..{cq.max_offset}"
        log.warning(msg)
        report.rebuilt_queues.append(f"{topic}/{qid}")
        report.problems.append(msg)
