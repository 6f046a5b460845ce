"""The send paths of :class:`store.message_store.DefaultMessageStore`: ``put_message`` and
``put_messages`` (a mixin, so that the hottest code of the project reads the store's attributes
directly; the store module keeps lifecycle, dispatch, reading and maintenance).

A *plain* append -- a running ASYNC_FLUSH master outside controller mode, a record with its dispatch
hints, IPv4 born host, not a transaction half, room in the current commit-log and consume-queue
files -- is written in one function: patch, copy (TOTALSIZE last), consume-queue unit, index hint.
Everything else takes the general path: gate and size checks, appends under the roll lock when a
file is needed, dispatch by the dispatcher (or later, up to the confirm offset in controller mode),
group commit for SYNC_FLUSH.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Awaitable, Callable
from itertools import chain, repeat
from operator import itemgetter
from time import time_ns
from typing import TYPE_CHECKING

import trio

from remoting.protocol.message import MAGIC_V1, MAGIC_V2, SYSFLAG_POSITION, dispatch_info
from store.commitlog import NEED_FILE
from store.config import BrokerRole
from store.consume_queue import CQ_UNIT, CQ_UNIT_SIZE, STAGE_BYTES, ConsumeQueue
from store.dispatch import SCHEDULE_TOPIC
from store.results import Placed, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from store.allocate import FileAllocator
    from store.commitlog import CommitLog
    from store.config import MessageStoreConfig
    from store.consume_queue_store import ConsumeQueueStore
    from store.dispatch import Dispatcher
    from store.flush import CommitLogFlusher

log = logging.getLogger("store")

_SIZE_MAGIC = struct.Struct(">ii")
_PUT_OK = PutMessageStatus.PUT_OK
_SLAVE = BrokerRole.SLAVE  # a module constant: enum member lookups cost a descriptor call
_QO_PO_PACK = struct.Struct(">qq").pack_into  # QUEUEOFFSET, PHYSICALOFFSET at 20
_I64_PACK = struct.Struct(">q").pack_into
_I32_PACK = struct.Struct(">i").pack_into
_CQ_UNIT_PACK = CQ_UNIT.pack_into
_RECORD_HEAD = struct.Struct(">ii28xi")  # TOTALSIZE, MAGICCODE, SYSFLAG (at 36)
_UNIQ_OF = itemgetter(2)  # of a batch hint: (tags code, KEYS, UNIQ_KEY)
_KEYS_OF = itemgetter(1)


@functools.lru_cache(maxsize=256)
def _cq_run(count: int) -> Callable[..., None]:
    """``pack_into(buffer, offset, *units)`` for ``count`` consecutive consume-queue units."""
    return struct.Struct(">" + "qiq" * count).pack_into


_I32 = struct.Struct(">i")
#: ((physical offset, queue offset, store timestamp), consume-queue units flat) of records encoded
#: for a slot of :meth:`PutPaths.plain_batch_slot`
PlacedRecords = tuple[tuple[int, int, int], list[int]]
_BODY_LEN_POS = 84  # BODY length field for IPv4 born and store hosts; +12 per IPv6 host


class PutPaths:
    """``put_message`` / ``put_messages`` of :class:`~store.message_store.DefaultMessageStore`."""

    # the store's attributes these paths use (set by DefaultMessageStore.__init__)
    config: MessageStoreConfig
    commit_log: CommitLog
    queues: ConsumeQueueStore
    dispatcher: Dispatcher
    allocator: FileAllocator
    cl_flusher: CommitLogFlusher
    now_ms: Callable[[], int]
    _queue_tables: dict[str, dict[int, ConsumeQueue]]
    _plain: bool
    _rolling: int
    _roll_lock: trio.Lock
    _refuse: str | None
    _queue_table_stale: bool
    _controller_mode: bool
    _sync_flush: bool
    _sync_flush_timeout: float
    _max_body_size: int
    _max_record_size: int
    host_field: bytes
    _wall_clock: bool
    recover_topic_queue_table: Callable[[], None]
    _catch_up: Callable[[], Awaitable[None]]
    _dispatch_lock: trio.Lock
    create_cq_file: Callable[[ConsumeQueue, int], Awaitable[None]]

    def try_put_message(
        self,
        encoded: bytearray,
        topic: str,
        queue_id: int,
        sys_flag: int,
        tags_code: int | None,
        keys: str | None,
        uniq_key: str | None,
    ) -> Placed | None:
        """:meth:`put_message` without awaiting, for the plain case -- a running ASYNC_FLUSH
        master outside controller mode, a record with its tags code, IPv4 born host, not a
        transaction half, room in the current commit-log and consume-queue files: append,
        consume-queue unit and index hint in one function. Returns where the message went
        (:data:`~store.results.Placed`: the fields of :meth:`put_message`'s result, whose status
        is PUT_OK), or None, with nothing written, in every other case (the caller then awaits
        :meth:`put_message`). Arguments as there, positional (a send path calls this once per
        message)."""
        # the record's own SYSFLAG (its low byte): the IPv6 born-host bit moves STORETIMESTAMP,
        # whatever the caller's flags say (the broker sets that bit from the connection)
        if not self._plain or self._rolling or tags_code is None or encoded[39] & 0x1C:
            return None
        table = self._queue_tables.get(topic)
        cq = table.get(queue_id) if table is not None else None
        cl = self.commit_log
        mf = cl.current
        n = len(encoded)
        if (
            cq is not None
            and mf is not None
            and n <= self._max_body_size
            and topic != SCHEDULE_TOPIC
            and self.config.brokerRole is not _SLAVE
        ):
            pos = mf.wrote_position
            end = pos + n
            d = self.dispatcher
            phys = mf.file_from_offset + pos
            qo = cq.next_offset
            if (
                end <= cl.fit_limit
                and d.reput_offset == phys
                and qo == cq.max_offset
                and qo < cq.stage_limit  # the unit's place in the queue's file is reserved
            ):
                # the store's clock (``now_ms``), inlined when it is the wall clock
                now = time_ns() // 1_000_000 if self._wall_clock else self.now_ms()
                _QO_PO_PACK(encoded, 20, qo, phys)
                _I64_PACK(encoded, 56, now)
                # TOTALSIZE last: a copy cut short by a crash leaves a zero size (the end)
                mm = mf.mm
                mm[pos + 4 : end] = encoded[4:] if n <= 4096 else memoryview(encoded)[4:]
                _I32_PACK(mm, pos, n)
                mf.wrote_position = end
                mf.last_store_timestamp = now
                if end + mf.file_from_offset > cl.write_ahead_mark:
                    cl.write_ahead()
                if phys >= cl.next_mark:
                    cl.mark_appended(phys)
                nxt = qo + 1  # the queue's next offset, also its max offset (dispatched at once)
                cq.next_offset = nxt
                # the unit goes to the queue's staging buffer, not its map (store.consume_queue)
                staged = cq.staged
                stage = cq.stage
                if stage is None:
                    stage = cq.stage = bytearray(STAGE_BYTES)
                _CQ_UNIT_PACK(stage, staged, phys, n, tags_code)
                staged += 20
                cq.staged = staged
                if staged == STAGE_BYTES:
                    cq.materialize()
                elif not cq.listed:
                    cq.listed = True
                    self.queues.staging.append(cq)
                cq.max_offset = nxt  # (its max_physic_offset comes from the staged unit)
                end_phys = phys + n
                index = d.index
                if index is not None:
                    if uniq_key and phys > index.last_phy:
                        # put_keys inlined for a non-transactional message with a UNIQ_KEY
                        index.last_phy = phys
                        pending = index.pending
                        pending += (topic, phys, now, uniq_key, keys)
                        if len(pending) >= index.pending_limit:
                            index.drain()
                    elif keys:
                        index.put_keys(topic, phys, now, sys_flag, keys, uniq_key)
                d.reput_offset = end_phys
                d.last_store_timestamp = now
                if d.listeners:
                    for cb in d.listeners:
                        cb(topic, queue_id, nxt)
                return phys, n, qo, now
        return None

    async def put_message(
        self,
        encoded: bytearray,
        topic: str,
        queue_id: int,
        *,
        sys_flag: int,
        tags_code: int | None = None,
        keys: str | None = None,
        uniq_key: str | None = None,
        wait_store_msg_ok: bool = True,
    ) -> PutMessageResult:
        """Append one record encoded by :func:`remoting.protocol.message.encode_message` for ``topic`` /
        ``queue_id`` (which must match the record). The log assigns the queue offset (0 for
        PREPARED/ROLLBACK transaction messages), physical offset and store timestamp and writes
        them into ``encoded``.

        ``tags_code`` / ``keys`` / ``uniq_key`` (the record's TAGS hash and KEYS / UNIQ_KEY
        properties) let dispatch skip decoding; when ``tags_code`` is None the record is decoded.
        With SYNC_FLUSH (and ``wait_store_msg_ok``) waits for the group commit covering it.
        The record's own SYSFLAG decides its layout (the IPv6 host bits move STORETIMESTAMP and
        BODY) and its transaction type; ``sys_flag`` may lack the IPv6 bits (a client's flags).
        """
        if self._plain:
            done = self.try_put_message(encoded, topic, queue_id, sys_flag, tags_code, keys, uniq_key)
            if done is not None:
                return PutMessageResult.placed(done, self.host_field)
        if self._refuse is not None or self._queue_table_stale:
            refused = self._check_gate()
            if refused is not None:
                return refused
        if self.config.brokerRole == _SLAVE:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="the message store is in slave mode"
            )
        n = len(encoded)
        # the record's layout follows its own SYSFLAG (the IPv6 host bits), which the encoder
        # set from the hosts; the caller's ``sys_flag`` may lack them
        sys_flag = _I32.unpack_from(encoded, SYSFLAG_POSITION)[0]
        if n > self._max_body_size:
            illegal = self._check_size(encoded)
            if illegal is not None:
                return illegal
        table = self._queue_tables.get(topic)
        cq = table.get(queue_id) if table is not None else None
        if cq is None:
            cq = self.queues.get_or_create(topic, queue_id)
        t = sys_flag & 0xC
        counts = t == 0 or t == 8
        ts_pos = 68 if sys_flag & 0x10 else 56
        if not self._rolling:
            qo = cq.next_offset if counts else 0
            now = self.now_ms()
            phys = self.commit_log.append(encoded, qo, now, ts_pos)
        else:
            phys = NEED_FILE
        if phys >= 0:
            if counts:
                cq.next_offset = qo + 1
        else:
            got = await self._append_rolling(encoded, cq, counts, ts_pos, None, 1)
            if isinstance(got, PutMessageResult):
                return got
            phys, qo, now = got
        end = phys + n
        generation = self.cl_flusher.generation  # truncations after this may cut the record away
        if self._controller_mode:
            if cq.cur is None and counts:
                await self._first_cq_file(cq, qo)
        else:
            d = self.dispatcher
            if d.reput_offset == phys:
                if tags_code is not None and topic != SCHEDULE_TOPIC:
                    ok = d.dispatch_direct(cq, phys, n, tags_code, qo, now, sys_flag, keys, uniq_key)
                else:
                    ok = d.dispatch_record(dispatch_info(encoded), end)
                if not ok:
                    await self._catch_up()
            else:
                await self._catch_up()
        status, remark = _PUT_OK, ""
        if wait_store_msg_ok and self._sync_flush:
            status, remark = await self._await_flush(end, generation)
        return PutMessageResult(status, phys, n, qo, now, 1, remark, self.host_field)

    async def put_messages(
        self,
        encoded: bytearray,
        topic: str,
        queue_id: int,
        *,
        sys_flag: int,
        wait_store_msg_ok: bool = True,
        hints: list[tuple[int, str | None, str | None]] | None = None,
        placed: PlacedRecords | None = None,
    ) -> PutMessageResult:
        """Append several records laid end to end in ``encoded`` (all for ``topic`` / ``queue_id``)
        as one block with consecutive queue offsets; the block never spans files. Transaction
        messages cannot be batched (MESSAGE_ILLEGAL, as upstream).

        ``hints`` -- (tags code, KEYS, UNIQ_KEY) of every record, in order -- let dispatch skip
        decoding the records again (as ``tags_code`` / ``keys`` / ``uniq_key`` of :meth:`put_message`).
        ``placed`` -- (slot, units) of records encoded for a slot from
        :meth:`plain_batch_slot` -- lets the plain path copy them without a pass over them: when the
        slot is still where the log appends next, their queue offsets, physical offsets, store
        timestamp and consume-queue units are already right. Otherwise it is ignored.
        """
        if self._refuse is not None or self._queue_table_stale:
            refused = self._check_gate()
            if refused is not None:
                return refused
        if self.config.brokerRole == BrokerRole.SLAVE:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="the message store is in slave mode"
            )
        if sys_flag & 0xC:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, remark="batch messages cannot be transactional"
            )
        if self._plain and not self._rolling and hints is not None:
            done = self._put_batch_plain(encoded, topic, queue_id, sys_flag, hints, placed)
            if done is not None:
                return done
        offsets: list[int] = []
        pos, n = 0, len(encoded)
        while pos < n:
            if pos + 8 > n:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="truncated batch record")
            size, magic = _SIZE_MAGIC.unpack_from(encoded, pos)
            if size <= 0 or magic not in (MAGIC_V1, MAGIC_V2) or pos + size > n:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad record at {pos}")
            if size > self.config.maxMessageSize:
                illegal = self._check_size(memoryview(encoded)[pos : pos + size])
                if illegal is not None:
                    return illegal
            offsets.append(pos)
            pos += size
        if not offsets:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
        if n + 8 > self.commit_log.file_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"batch of {n} bytes does not fit in one commit-log file",
            )
        count = len(offsets)
        table = self._queue_tables.get(topic)
        cq = table.get(queue_id) if table is not None else None
        if cq is None:
            cq = self.queues.get_or_create(topic, queue_id)
        phys = NEED_FILE
        if not self._rolling:
            qo = cq.next_offset
            now = self.now_ms()
            phys = self.commit_log.append_batch(encoded, offsets, qo, now, True)
            if phys >= 0:
                cq.next_offset = qo + count
        if phys < 0:
            got = await self._append_rolling(encoded, cq, True, 0, offsets, count)
            if isinstance(got, PutMessageResult):
                return got
            phys, qo, now = got
        end = phys + n
        generation = self.cl_flusher.generation
        if self._controller_mode:
            if cq.cur is None:
                await self._first_cq_file(cq, qo)
        else:
            d = self.dispatcher
            if (
                hints is None
                or len(hints) != count
                or topic == SCHEDULE_TOPIC
                or d.reput_offset != phys
                or not d.dispatch_batch_direct(cq, phys, offsets, n, hints, qo, now, sys_flag)
            ):
                await self._catch_up()
        status, remark = PutMessageStatus.PUT_OK, ""
        if wait_store_msg_ok and self._sync_flush:
            status, remark = await self._await_flush(end, generation)
        return PutMessageResult(
            status, phys, n, qo, now, len(offsets), remark, self.host_field, [phys + o for o in offsets]
        )

    async def _first_cq_file(self, cq: ConsumeQueue, queue_offset: int) -> None:
        """Controller mode: a queue's first message is dispatched when the confirm offset passes
        it, which happens as its send is acknowledged -- but dispatch needs the queue's first file,
        made in a worker thread, so the acknowledged message became pullable only a few ms later.
        Make that file now, while the send waits for its replicas (when ``queue_offset`` is the
        queue's first undispatched message: the file's first offset depends on it)."""
        async with self._dispatch_lock:
            if cq.cur is None and cq.max_offset == queue_offset and cq.restart_at is None:
                try:
                    await self.create_cq_file(cq, queue_offset)
                except OSError as exc:
                    # the message is appended: its send must not fail; the dispatch task retries
                    log.warning("consume-queue file for %s/%d: %s", cq.topic, cq.queue_id, exc)

    async def _await_flush(self, end: int, generation: int) -> tuple[PutMessageStatus, str]:
        """SYNC_FLUSH: wait until the bytes below ``end`` (appended at flusher ``generation``) are
        durable; the status and remark of the send."""
        flusher = self.cl_flusher
        if await flusher.wait_flushed(end, self._sync_flush_timeout, generation):
            return _PUT_OK, ""
        if flusher.cut_since(generation, end):
            log.warning("a truncation cut the log below offset %d while its send waited for the flush", end)
            return (
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                "the message was truncated away before it was flushed (the broker stopped being master)",
            )
        log.warning("sync flush of offset %d timed out after %ss", end, self._sync_flush_timeout)
        return PutMessageStatus.FLUSH_DISK_TIMEOUT, f"flush not done within {self._sync_flush_timeout}s"

    def plain_batch_slot(self, topic: str, queue_id: int) -> tuple[int, int, int] | None:
        """(physical offset, queue offset, store timestamp) the next batch for ``topic`` /
        ``queue_id`` gets if it is appended in the plain case before anything else is appended;
        None when it cannot be (the batch then goes the general way). For a sender that encodes
        the records itself (see ``put_messages(placed=...)``)."""
        if not self._plain or self._rolling or self.config.brokerRole is _SLAVE:
            return None
        table = self._queue_tables.get(topic)
        cq = table.get(queue_id) if table is not None else None
        mf = self.commit_log.current
        if cq is None or mf is None or cq.cur is None or cq.next_offset != cq.max_offset:
            return None
        base = mf.file_from_offset + mf.wrote_position
        if self.dispatcher.reput_offset != base:
            return None
        return base, cq.next_offset, self.now_ms()

    def _put_batch_plain(
        self,
        encoded: bytearray,
        topic: str,
        queue_id: int,
        sys_flag: int,
        hints: list[tuple[int, str | None, str | None]],
        placed: PlacedRecords | None = None,
    ) -> PutMessageResult | None:
        """:meth:`put_messages` in the plain case (see :meth:`put_message`): one pass checks and
        patches the records (none when they were encoded for this very slot, ``placed``), one copy
        appends them, one pack writes their consume-queue units.
        None -- with nothing appended -- when the case is not plain or a record looks wrong (the
        general path then decides and reports)."""
        table = self._queue_tables.get(topic)
        cq = table.get(queue_id) if table is not None else None
        cl = self.commit_log
        mf = cl.current
        n = len(encoded)
        count = len(hints)
        if (
            cq is None
            or mf is None
            or not count
            or topic == SCHEDULE_TOPIC
            or self.config.brokerRole is _SLAVE
        ):
            return None
        wpos = mf.wrote_position
        base = mf.file_from_offset + wpos
        qo0 = cq.next_offset
        cmf = cq.cur
        d = self.dispatcher
        if (
            wpos + n > cl.fit_limit
            or d.reput_offset != base
            or cmf is None
            or qo0 != cq.max_offset
            or qo0 + count > cq.stage_limit  # the units' places in the queue's file are reserved
        ):
            return None
        max_size = self._max_body_size
        if (
            placed is not None
            and placed[0][0] == base
            and placed[0][1] == qo0
            and len(placed[1]) == 3 * count
            and placed[1][-3] + placed[1][-2] == base + n
            and max(placed[1][1::3]) <= max_size
        ):
            # encoded for this very slot: offsets, timestamp and units are right already
            (_, _, now), units = placed
            offsets = units[::3]
            qo = qo0 + count
        else:
            now = self.now_ms()
            units = []
            offsets = []
            append = offsets.append
            unpack_head, head_end = _RECORD_HEAD.unpack_from, n - _RECORD_HEAD.size
            patch_qo_po, patch_ts = _QO_PO_PACK, _I64_PACK
            pos, qo = 0, qo0
            for tags_code, _keys, _uniq in hints:
                if pos > head_end:
                    return None
                size, magic, rec_flag = unpack_head(encoded, pos)
                if (
                    size <= 0
                    or pos + size > n
                    or size > max_size
                    or (magic != MAGIC_V1 and magic != MAGIC_V2)
                ):
                    return None
                phys = base + pos
                patch_qo_po(encoded, pos + 20, qo, phys)
                patch_ts(encoded, pos + (68 if rec_flag & 0x10 else 56), now)
                units += (phys, size, tags_code)
                append(phys)
                pos += size
                qo += 1
            if pos != n:
                return None
        mm = mf.mm
        mm[wpos + 4 : wpos + n] = memoryview(encoded)[4:]
        mm[wpos : wpos + 4] = encoded[:4]  # the first TOTALSIZE last, as in put_message
        mf.wrote_position = wpos + n
        mf.last_store_timestamp = now
        if base + n > cl.write_ahead_mark:
            cl.write_ahead()
        if base >= cl.next_mark:
            cl.mark_appended(base)
        cq.next_offset = qo
        if cq.staged:
            cq.materialize()
        w = cmf.wrote_position
        _cq_run(count)(cmf.mm, w, *units)
        cmf.wrote_position = w + count * CQ_UNIT_SIZE
        cq.max_offset = qo
        cq.max_physic_offset = base + n
        index = d.index
        if index is not None:
            if base > index.last_phy and all(map(_UNIQ_OF, hints)):
                # put_keys inlined for records that all have a UNIQ_KEY (a batch is never a
                # transaction half): their queue entries built without a Python-level loop
                pending = index.pending
                pending += chain.from_iterable(
                    zip(repeat(topic), offsets, repeat(now), map(_UNIQ_OF, hints), map(_KEYS_OF, hints))
                )
                index.last_phy = offsets[-1]
                if len(pending) >= index.pending_limit:
                    index.drain()
            else:
                for (_tags, keys, uniq), phys in zip(hints, offsets, strict=True):
                    if uniq or keys:
                        index.put_keys(topic, phys, now, sys_flag, keys, uniq)
        d.reput_offset = base + n
        d.last_store_timestamp = now
        for cb in d.listeners:
            cb(topic, queue_id, qo)
        return PutMessageResult(_PUT_OK, base, n, qo0, now, count, "", self.host_field, offsets)

    def _check_gate(self) -> PutMessageResult | None:
        if self._refuse is not None:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._refuse)
        if self._queue_table_stale:
            self.recover_topic_queue_table()
        return None

    def _check_size(self, record: bytearray | memoryview) -> PutMessageResult | None:
        n = len(record)
        if n > self._max_record_size or n + 8 > self.commit_log.file_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"message of {n} bytes exceeds the limit {min(self._max_record_size, self.commit_log.file_size - 8)}",
            )
        sys_flag = _I32.unpack_from(record, SYSFLAG_POSITION)[0]  # the IPv6 bits move BODY
        body_pos = _BODY_LEN_POS + (12 if sys_flag & 0x10 else 0) + (12 if sys_flag & 0x20 else 0)
        body_len = _I32.unpack_from(record, body_pos)[0]
        if body_len > self.config.maxMessageSize:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"message body of {body_len} bytes exceeds maxMessageSize {self.config.maxMessageSize}",
            )
        return None

    async def _append_rolling(
        self,
        encoded: bytearray,
        cq: ConsumeQueue,
        counts: bool,
        ts_pos: int,
        batch_offsets: list[int] | None,
        count: int,
    ) -> tuple[int, int, int] | PutMessageResult:
        """Append under the roll lock, rolling to new files as needed. While any append waits here
        the unlocked fast path is off, so records keep the order of their queue offsets.

        A roll whose next file is ready (prepared, or being populated) does not yield from taking
        the lock to releasing it, so no other append sees it. An append that finds the lock held
        waits for its turn, and the appends queued behind a roll get the lock one per scheduler
        batch: with 64 sends in flight the queue refilled as fast as it drained, every later send
        took this path and the broker stayed at half its rate until the load paused (rounds of
        11-19k req/s among 29-33k ones of ``bin/bench broker``'s Python client, once the
        population of prepared files moved to the page helper and a roll found its file still
        being populated more often -- taking the lock, and that file, yielded)."""
        cl = self.commit_log
        lock = self._roll_lock
        rolled = False
        self._rolling += 1
        try:
            try:
                lock.acquire_nowait()  # no checkpoint when it is free (``async with`` yields)
            except trio.WouldBlock:
                await lock.acquire()
            try:
                while True:
                    if self._refuse is not None:
                        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._refuse)
                    if self.config.brokerRole is BrokerRole.SLAVE:
                        # The broker became a slave while this append waited for a new file: the
                        # bytes would belong to no epoch of the group's history.
                        return PutMessageResult(
                            PutMessageStatus.SERVICE_NOT_AVAILABLE,
                            remark="the message store is in slave mode",
                        )
                    qo = cq.next_offset if counts else 0
                    now = self.now_ms()
                    if batch_offsets is None:
                        phys = cl.append(encoded, qo, now, ts_pos)
                    else:
                        phys = cl.append_batch(encoded, batch_offsets, qo, now, counts)
                    if phys >= 0:
                        if counts:
                            cq.next_offset = qo + count
                        break
                    off = cl.next_file_offset()
                    try:
                        mf = await self.allocator.get(off)
                    except OSError as exc:  # logged by the allocator
                        return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, remark=str(exc))
                    cl.install_file(mf)
                    if cl.last_blank_offset >= 0:
                        self.dispatcher.skip_blank(cl.last_blank_offset, off)
                    self.allocator.request_prepare()
                    rolled = True
            finally:
                lock.release()
        finally:
            self._rolling -= 1
        if rolled:
            # let the allocator start on the next file now (a busy send loop may not reach another
            # checkpoint before this file is full) -- after the lock, not under it
            await trio.lowlevel.checkpoint()
        return phys, qo, now
