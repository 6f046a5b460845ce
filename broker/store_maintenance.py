"""Store maintenance on request: mqadmin ``cleanExpiredCQ``, ``deleteExpiredCommitLog`` and
``cleanUnusedTopic`` (upstream ``AdminBrokerProcessor``'s handlers of the same codes).

- CLEAN_EXPIRED_CONSUMEQUEUE (306): drop every consume queue whose messages all lie below the
  commit log's min offset (retention deleted them) -- system topics excepted, and queues without
  units kept, as upstream. A later message for such a queue starts it again at offset 0.
- DELETE_EXPIRED_COMMITLOG (329): the retention service deletes expired commit-log files on its
  next rounds whatever the hour (``deleteWhen``); files younger than ``fileReservedTime`` stay.
- CLEAN_UNUSED_TOPIC (316): drop the consume queues of topics the topic table does not hold --
  system and LMQ topics excepted, and on a slave those that still have messages (see
  :func:`unused_topics`; upstream drops them there too).

- RESET_MASTER_FLUSH_OFFSET (908, mqadmin ``resetMasterFlushOffset``): a slave records the given
  master flushed offset in its checkpoint (its haStatus shows it); a master ignores it, as upstream.

Each answers SUCCESS (upstream's answer whatever was found) and logs what it did; a failure of the
store answers SYSTEM_ERROR with its message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import decode_header
from remoting.protocol.broker import ResetMasterFlushOffsetHeader

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from remoting.processor import RequestContext

__all__ = [
    "LMQ_PREFIX",
    "clean_expired_consume_queue",
    "clean_unused_topic",
    "delete_expired_commit_log",
    "reset_master_flush_offset",
    "unused_topics",
]

log = logging.getLogger(__name__)

#: upstream ``MixAll.LMQ_PREFIX``: light message queues, which no topic config describes
LMQ_PREFIX = "%LMQ%"


async def clean_expired_consume_queue(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """CLEAN_EXPIRED_CONSUMEQUEUE: see the module docstring."""
    try:
        dropped = await broker.store.delete_expired_queues(broker.topics.is_system)
    except OSError as e:
        log.error("cleanExpiredConsumeQueue from %s failed: %s", ctx.connection.remote_address, e)
        return request.response(ResponseCode.SYSTEM_ERROR, f"cleaning expired consume queues failed: {e}")
    log.info(
        "cleanExpiredConsumeQueue from %s: dropped %d queue(s) below commit-log offset %d: %s",
        ctx.connection.remote_address,
        len(dropped),
        broker.store.commit_log.min_offset,
        dropped,
    )
    return request.response(ResponseCode.SUCCESS)


async def delete_expired_commit_log(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """DELETE_EXPIRED_COMMITLOG: see the module docstring."""
    log.warning(
        "deleteExpiredCommitLog from %s: expired commit-log files go now", ctx.connection.remote_address
    )
    broker.store.request_manual_delete()
    return request.response(ResponseCode.SUCCESS)


def unused_topics(broker: BrokerController) -> list[str]:
    """Topics with consume queues in the store and no config in the topic table (system and LMQ
    topics excepted). On a slave only those whose messages are all below the commit log's min
    offset: a topic created on the master reaches a slave's store before its config does (metadata
    sync), and dropping its queues there would lose its messages at the next failover."""
    table = broker.topics.table
    store = broker.store
    min_phys = store.commit_log.min_offset
    out = []
    for topic in store.queues.topics():
        if topic in table or broker.topics.is_system(topic) or topic.startswith(LMQ_PREFIX):
            continue
        queues = store.queues.tables.get(topic, {}).values()
        if broker.is_slave and any(cq.max_physic_offset > min_phys for cq in queues):
            continue
        out.append(topic)
    return out


async def clean_unused_topic(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """CLEAN_UNUSED_TOPIC: see the module docstring."""
    topics = unused_topics(broker)
    try:
        if topics:
            await broker.store.delete_topics(topics)
    except OSError as e:
        log.error("cleanUnusedTopic from %s failed: %s", ctx.connection.remote_address, e)
        return request.response(ResponseCode.SYSTEM_ERROR, f"cleaning unused topics failed: {e}")
    log.warning(
        "cleanUnusedTopic from %s: dropped the consume queues of %d topic(s): %s",
        ctx.connection.remote_address,
        len(topics),
        topics,
    )
    return request.response(ResponseCode.SUCCESS)


async def reset_master_flush_offset(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """RESET_MASTER_FLUSH_OFFSET: see the module docstring."""
    h = decode_header(request, ResetMasterFlushOffsetHeader)
    if not broker.is_slave:
        log.info("resetMasterFlushOffset from %s ignored: a master", ctx.connection.remote_address)
        return request.response(ResponseCode.SUCCESS)
    try:
        await broker.store.set_master_flushed_offset(h.masterFlushOffset)
    except OSError as e:
        log.error("resetMasterFlushOffset from %s failed: %s", ctx.connection.remote_address, e)
        return request.response(ResponseCode.SYSTEM_ERROR, f"writing the checkpoint failed: {e}")
    log.info("master flushed offset set to %d (from %s)", h.masterFlushOffset, ctx.connection.remote_address)
    return request.response(ResponseCode.SUCCESS)
