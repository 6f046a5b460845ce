"""QUERY_CONSUME_QUEUE (321): the raw units of one consume queue, for mqadmin ``queryCq``.

Upstream: ``AdminBrokerProcessor.queryConsumeQueue``. Answers, with upstream's codes and remarks:

- a queue the store does not hold (unknown topic, bad queue id, or a queue never written):
  SYSTEM_ERROR ``<queueId>@<topic> is not exist!``;
- an ``index`` outside the queue's readable range [min, max): SUCCESS with the remark
  ``Index <index> of <queueId>@<topic> is not exist!`` and no body (upstream's answer, kept for
  wire compatibility; clients must read a body-less success as this refusal);
- else the queue's min and max index and up to ``count`` units from ``index``, never past the
  end of the consume-queue file that holds ``index`` (upstream reads one mapped file; this also
  bounds the work of one request).

With a ``consumerGroup``, the body carries the subscription the group's online consumers
registered for the topic and the filter data (``"null"``: there is no SQL92 filter data here;
``<group>@<topic> is not online!`` when no consumer of the group subscribes the topic). The store
keeps no consume-queue extension, so ``eval`` stays false; a tags code that upstream would read
as an extension address gets upstream's ``Cq extend not exist!`` message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import decode_header
from remoting.protocol.broker import (
    ConsumeQueueData,
    QueryConsumeQueueRequestHeader,
    QueryConsumeQueueResponseBody,
)
from store.consume_queue import CQ_UNIT

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from remoting.processor import RequestContext

__all__ = ["MAX_EXT_ADDR", "query_consume_queue"]

#: upstream ``ConsumeQueueExt.MAX_ADDR``: tags codes at or below it address the extension file
MAX_EXT_ADDR = -(2**31) - 1


def _unit_data(phys: int, size: int, tags_code: int) -> ConsumeQueueData:
    one = ConsumeQueueData(physicOffset=phys, physicSize=size, tagsCode=tags_code)
    if tags_code <= MAX_EXT_ADDR:
        one.msg = f"Cq extend not exist!addr: {tags_code}"
    return one


async def query_consume_queue(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """Handle QUERY_CONSUME_QUEUE for ``broker`` (see the module docstring)."""
    h = decode_header(request, QueryConsumeQueueRequestHeader)
    cq = broker.store.queues.get(h.topic, h.queueId)
    if cq is None:
        return request.response(ResponseCode.SYSTEM_ERROR, f"{h.queueId}@{h.topic} is not exist!")
    body = QueryConsumeQueueResponseBody(maxQueueIndex=cq.max_offset, minQueueIndex=cq.min_offset)
    if h.consumerGroup is not None:
        sub = broker.consumers.find_subscription(h.consumerGroup, h.topic)
        if sub is None:
            body.filterData = f"{h.consumerGroup}@{h.topic} is not online!"
        else:
            body.subscriptionData = sub
            body.filterData = "null"  # upstream: fastjson of the (absent) SQL92 filter data
    missing = f"Index {h.index} of {h.queueId}@{h.topic} is not exist!"
    if not cq.min_offset <= h.index < cq.max_offset:
        return request.response(ResponseCode.SUCCESS, missing)
    units: list[ConsumeQueueData] = []
    if h.count > 0:
        chunk = cq.read_units(h.index, h.count)
        if chunk is None:
            return request.response(ResponseCode.SUCCESS, missing)
        units = [_unit_data(*unit) for unit in CQ_UNIT.iter_unpack(chunk)]
    body.queueData = units
    response = request.response(ResponseCode.SUCCESS)
    response.body = body.encode()
    return response
