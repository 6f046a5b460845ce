"""The read path: pulling from a consume queue, and querying by key.

Upstream: ``DefaultMessageStore.getMessage`` / ``isTheBatchFull`` / ``nextOffsetCorrection`` /
``queryMessage``. Results hold zero-copy views of the commit-log maps.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from store.config import BrokerRole
from store.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE
from store.results import (
    GetMessageResult,
    GetMessageStatus,
    MessageFilter,
    QueryMessageResult,
    as_message_filter,
)

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

_CQ_UNIT = struct.Struct(">qiq")
#: Upstream ``MAX_PULL_MSG_SIZE``.
MAX_PULL_MSG_SIZE = 128 * 1024 * 1024


def get_message(
    store: DefaultMessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    max_bytes: int,
    tag_filter: MessageFilter | Callable[[int], bool] | None,
) -> GetMessageResult:
    """Up to ``max_count`` messages of ``topic``/``queue_id`` from logical ``offset``.

    Statuses as upstream: NO_MATCHED_LOGIC_QUEUE (no such queue), NO_MESSAGE_IN_QUEUE (empty),
    OFFSET_TOO_SMALL / OFFSET_OVERFLOW_ONE (== max) / OFFSET_OVERFLOW_BADLY (> max) with a corrected
    ``next_begin_offset`` (kept as asked on a slave unless ``offsetCheckInSlave``),
    OFFSET_FOUND_NULL (the queue file is gone), MESSAGE_WAS_REMOVING (the commit-log file is
    gone), NO_MATCHED_MESSAGE (nothing passed the filter) or FOUND.

    Transfer caps: ``max_count``, ``max_bytes`` and, depending on whether the data is likely in
    memory (within ``accessMessageInMemoryMaxRatio`` % of RAM from the log's end),
    ``maxTransfer{Bytes,Count}OnMessageIn{Memory,Disk}``. ``suggest_pulling_from_slave`` is set
    when the last message read lies further than that from the end.
    """
    cfg = store.config
    result = GetMessageResult()
    cl = store.commit_log
    max_phy = cl.max_offset
    check_offsets = cfg.brokerRole != BrokerRole.SLAVE or cfg.offsetCheckInSlave
    cq = store.queues.get(topic, queue_id)
    if cq is None:
        result.status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        result.next_begin_offset = 0 if check_offsets else offset
        return result
    min_o = cq.min_offset
    max_o = cq.max_offset
    result.min_offset, result.max_offset = min_o, max_o
    if max_o == 0:
        result.status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
        result.next_begin_offset = 0 if check_offsets else offset
        return result
    if offset < min_o:
        result.status = GetMessageStatus.OFFSET_TOO_SMALL
        result.next_begin_offset = min_o if check_offsets else offset
        return result
    if offset == max_o:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
        result.next_begin_offset = offset
        return result
    if offset > max_o:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
        result.next_begin_offset = max_o if check_offsets else offset
        return result

    flt = as_message_filter(tag_filter)
    max_filter_units = max(cfg.maxFilterMessageSize, max_count * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
    max_pull = min(max(max_bytes, 100), MAX_PULL_MSG_SIZE)
    memory = store.total_physical_memory * cfg.accessMessageInMemoryMaxRatio // 100
    mem_bytes, mem_count = cfg.maxTransferBytesOnMessageInMemory, cfg.maxTransferCountOnMessageInMemory
    disk_bytes, disk_count = cfg.maxTransferBytesOnMessageInDisk, cfg.maxTransferCountOnMessageInDisk
    views = result.message_views
    qos = result.message_queue_offsets
    total = 0
    status = GetMessageStatus.NO_MATCHED_MESSAGE
    next_begin = offset
    max_phy_pulling = 0
    read = cl.read
    files_left = max(cfg.travelCqFileNumWhenGetMessage, 1)
    while total == 0 and next_begin < max_o and files_left > 0:
        files_left -= 1
        units = cq.read_units(next_begin, min(max_filter_units + 1, max_o - next_begin))
        if units is None:
            status = GetMessageStatus.OFFSET_FOUND_NULL
            nxt = cq.next_file_start(next_begin)
            next_begin = nxt if check_offsets else next_begin
            break
        qo = next_begin
        next_phy_file_start = -1
        for phys, size, tags in _CQ_UNIT.iter_unpack(units):
            if qo >= max_o or qo - offset > max_filter_units:
                break
            if size == FILLER_SIZE:  # pre-filled unit before a queue's first message
                qo += 1
                next_begin = qo
                continue
            count = len(views)
            if count:
                if count + 1 > max_count or total + size > max_pull:
                    break
                if max_phy - phys <= memory:
                    if total + size > mem_bytes or count > mem_count - 1:
                        break
                elif total + size > disk_bytes or count > disk_count - 1:
                    break
            if total >= max_pull:
                break
            max_phy_pulling = phys
            cur = qo
            qo += 1
            next_begin = qo
            if phys < next_phy_file_start:
                continue
            if flt is not None and not flt.is_matched_by_consume_queue(tags):
                continue
            view = read(phys, size)
            if view is None:
                if total == 0:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = (phys // cl.file_size + 1) * cl.file_size
                continue
            if flt is not None and not flt.is_matched_by_commit_log(view):
                view.release()
                continue
            if not views:
                result.phy_start = phys
            views.append(view)
            qos.append(cur)
            total += size
            status = GetMessageStatus.FOUND
            next_phy_file_start = -1
            result.phy_end = phys + size
    result.status = status
    result.next_begin_offset = next_begin
    result.buffer_total_size = total
    # upstream measures from 0 when nothing was read
    result.suggest_pulling_from_slave = max_phy - max_phy_pulling > memory
    return result


def query_message(
    store: DefaultMessageStore, topic: str, key: str, max_num: int, begin: int, end: int
) -> QueryMessageResult:
    """Messages indexed under ``topic#key`` stored in [begin, end] ms, newest first."""
    result = QueryMessageResult()
    if store.index is None:
        return result
    found = store.index.query(topic, key, max_num, begin, end)
    result.index_last_update_timestamp = found.index_last_update_timestamp
    result.index_last_update_phyoffset = found.index_last_update_phyoffset
    for phy in found.phy_offsets:
        view = store.look_message_by_offset(phy)
        if view is None:
            continue
        result.message_views.append(view)
        result.phy_offsets.append(phy)
        result.buffer_total_size += len(view)
    return result
