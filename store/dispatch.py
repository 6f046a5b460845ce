"""Dispatch ("reput"): turn commit-log records into consume-queue units and index entries.

Upstream: ``ReputMessageService``, ``CommitLogDispatcherBuildConsumeQueue``,
``CommitLogDispatcherBuildIndex`` and the ``MessageArrivingListener`` hook.

:attr:`Dispatcher.reput_offset` is the commit-log offset up to which every record has been
dispatched. Records are dispatched in log order, either directly by the send path right after the
append (:meth:`Dispatcher.dispatch_direct`, no decoding) or by :meth:`Dispatcher.pump`, which
decodes records from the log up to a limit (the max offset, or the confirm offset in controller
mode). Neither blocks: when a consume queue needs a new file they return the queue and the async
layer creates the file in a worker thread, then calls again. Only NOT_TYPE and COMMIT transaction
messages get consume-queue units; the index takes everything but ROLLBACK (its own rule).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from remoting.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTY_DELAY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_TYPE_MASK,
    DispatchRequest,
    MessageFormatError,
    dispatch_info,
)
from store.commitlog import CommitLog
from store.consume_queue import ConsumeQueue
from store.consume_queue_store import ConsumeQueueStore
from store.deletion_marks import DeletionMarks
from store.index import IndexService

log = logging.getLogger("store.dispatch")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

#: ``listener(topic, queue_id, max_offset)`` -- called after a queue gained a message.
ArrivalListener = Callable[[str, int, int], None]

_SIZE_MAGIC = struct.Struct(">ii")


def gets_queue_unit(sys_flag: int) -> bool:
    """Whether a message with this sysflag is dispatched to a consume queue (and counts a queue
    offset): NOT_TYPE and COMMIT do, PREPARED and ROLLBACK do not."""
    t = sys_flag & TRANSACTION_TYPE_MASK
    return t in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


class DispatchNeedsFile(Exception):
    """Raised inside dispatch when a consume queue must get a file before dispatch can go on."""

    def __init__(self, cq: ConsumeQueue, queue_offset: int) -> None:
        super().__init__(cq, queue_offset)
        self.cq = cq
        self.queue_offset = queue_offset


class Dispatcher:
    """Builds consume queues and the index from the commit log."""

    def __init__(
        self,
        commit_log: CommitLog,
        queues: ConsumeQueueStore,
        index: IndexService | None,
        delay_levels_ms: list[int],
        deletion_marks: DeletionMarks,
    ) -> None:
        self.commit_log = commit_log
        self.deletion_marks = deletion_marks
        self.queues = queues
        self.index = index
        self.delay_levels_ms = delay_levels_ms
        self.reput_offset = 0
        #: store timestamp of the newest dispatched message (checkpoint ``logicsMsgTimestamp``)
        self.last_store_timestamp = 0
        self.listeners: list[ArrivalListener] = []
        #: set by recovery: queues found with a gap are collected here instead of being filled
        self.gap_queues: set[tuple[str, int]] | None = None

    # --- the send path's direct dispatch -----------------------------------------------------------

    def dispatch_direct(
        self,
        cq: ConsumeQueue,
        phys: int,
        size: int,
        tags_code: int,
        queue_offset: int,
        store_timestamp: int,
        sys_flag: int,
        keys: str | None,
        uniq_key: str | None,
    ) -> bool:
        """Dispatch a record just appended at ``phys == reput_offset`` from what the sender knows.
        False when the consume queue needs a file (nothing was done; :meth:`pump` picks it up)."""
        # NOT_TYPE (0) and COMMIT_TYPE (8) get units: exactly the types without the PREPARED bit
        counts = not sys_flag & TRANSACTION_PREPARED_TYPE
        if counts and not cq.put(phys, size, tags_code, queue_offset):
            return False
        index = self.index
        if index is not None and (keys or uniq_key):
            index.put_keys(cq.topic, phys, store_timestamp, sys_flag, keys, uniq_key)
        self.reput_offset = phys + size
        self.last_store_timestamp = store_timestamp
        if counts and self.listeners:
            for cb in self.listeners:
                cb(cq.topic, cq.queue_id, cq.max_offset)
        return True

    def dispatch_batch_direct(
        self,
        cq: ConsumeQueue,
        phys: int,
        offsets: list[int],
        size: int,
        hints: list[tuple[int, str | None, str | None]],
        queue_offset: int,
        store_timestamp: int,
        sys_flag: int,
    ) -> bool:
        """:meth:`dispatch_direct` for a batch just appended at ``phys == reput_offset``: records at
        ``phys + offsets[i]`` (``size`` bytes in all), queue offsets from ``queue_offset`` on,
        ``hints[i]`` = (tags code, KEYS, UNIQ_KEY) of record i. Only for NOT_TYPE / COMMIT records.

        Returns False when a consume queue file is needed before some record: the records before
        it are dispatched and :attr:`reput_offset` points at it (:meth:`pump` goes on from there).
        """
        index = self.index
        topic = cq.topic
        put = cq.put
        n = len(offsets)
        last = n - 1
        ok = True
        for i in range(n):
            start = phys + offsets[i]
            rec_size = (offsets[i + 1] if i < last else size) - offsets[i]
            tags_code, keys, uniq = hints[i]
            if not put(start, rec_size, tags_code, queue_offset + i):
                self.reput_offset = start
                ok = False
                break
            if index is not None and (keys or uniq):
                index.put_keys(topic, start, store_timestamp, sys_flag, keys, uniq)
        else:
            self.reput_offset = phys + size
        if ok or i:
            self.last_store_timestamp = store_timestamp
            for cb in self.listeners:
                cb(topic, cq.queue_id, cq.max_offset)
        return ok

    def skip_blank(self, blank_offset: int, next_file_offset: int) -> None:
        """The log rolled: a record at ``next_file_offset`` follows the filler at ``blank_offset``."""
        if blank_offset <= self.reput_offset < next_file_offset:
            self.reput_offset = next_file_offset

    def dispatch_record(self, req: DispatchRequest, end: int) -> bool:
        """Dispatch a decoded record sitting at ``reput_offset`` and ending at ``end``; False when
        its consume queue needs a file first (nothing done)."""
        try:
            self.dispatch_request(req)
        except DispatchNeedsFile:
            return False
        self.reput_offset = end
        return True

    # --- decoding dispatch -------------------------------------------------------------------------

    def dispatch_request(self, req: DispatchRequest) -> None:
        """Dispatch one decoded record. Raises :class:`DispatchNeedsFile` before doing anything
        when its consume queue needs a file."""
        sys_flag = req.sys_flag
        cq: ConsumeQueue | None = None
        if gets_queue_unit(sys_flag) and not (
            self.deletion_marks.marks and self.deletion_marks.covers(req.topic, req.commit_log_offset)
        ):
            cq = self.queues.get_or_create(req.topic, req.queue_id)
            qo = req.consume_queue_offset
            gaps = self.gap_queues
            if gaps is not None and (qo > cq.max_offset or (cq.topic, cq.queue_id) in gaps):
                gaps.add((cq.topic, cq.queue_id))  # recovery rebuilds it from the whole log
            elif not cq.put(req.commit_log_offset, req.msg_size, self.tags_code_of(req), qo):
                raise DispatchNeedsFile(cq, qo)
        if self.index is not None:
            self.index.put(req)
        self.last_store_timestamp = req.store_timestamp
        if cq is not None and self.listeners:
            for cb in self.listeners:
                cb(cq.topic, cq.queue_id, cq.max_offset)

    def tags_code_of(self, req: DispatchRequest) -> int:
        """The consume-queue tags code of a record (the delivery time for SCHEDULE_TOPIC_XXXX)."""
        if req.topic == SCHEDULE_TOPIC:
            # upstream: the tags code of a delayed message is its delivery time
            levels = self.delay_levels_ms
            try:
                level = int(req.properties.get(PROPERTY_DELAY, "0"))
            except ValueError:
                level = 0
            if level > 0 and levels:
                return req.store_timestamp + levels[min(level, len(levels)) - 1]
            return req.store_timestamp + 1000
        return req.tags_code

    def pump(self, limit: int, *, max_records: int = 1 << 62) -> int:
        """Dispatch complete records from :attr:`reput_offset` while they end at or below ``limit``.

        Returns the number dispatched. Raises :class:`DispatchNeedsFile` (with ``reput_offset`` at
        the record that waits) when a consume queue needs a file.
        """
        cl = self.commit_log
        done = 0
        offset = self.reput_offset
        try:
            while offset < limit and done < max_records:
                mf = cl.mfq.find(offset)
                if mf is None:
                    break
                pos = offset - mf.file_from_offset
                wrote = mf.wrote_position
                if pos + 8 > wrote:
                    if wrote >= mf.file_size:  # ran into the end of a full file
                        offset = mf.file_end_offset
                        continue
                    break
                size, magic = _SIZE_MAGIC.unpack_from(mf.mm, pos)
                if magic == BLANK_MAGIC:
                    offset = mf.file_end_offset
                    continue
                if (magic != MAGIC_V1 and magic != MAGIC_V2) or size <= 0:
                    log.error(
                        "dispatch stopped: no valid record at offset %d (size %d, magic %#x)",
                        offset,
                        size,
                        magic & 0xFFFFFFFF,
                    )
                    break
                if pos + size > wrote or offset + size > limit:
                    break  # partially replicated, or beyond the confirm offset
                try:
                    req = dispatch_info(mf.view, pos)
                except MessageFormatError as exc:
                    log.error("dispatch stopped at offset %d: %s", offset, exc)
                    break
                self.dispatch_request(req)
                offset += size
                done += 1
        finally:
            self.reput_offset = offset
        return done

    def pending_bytes(self, limit: int) -> int:
        return max(0, limit - self.reput_offset)
