"""Offsets and lookups (upstream ``ConsumerManageProcessor`` offsets part and ``QueryMessageProcessor``):
QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import decode_header, encode_header
from remoting.protocol.broker import (
    EarliestMsgStoretimeResponseHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from store.results import BoundaryType

if TYPE_CHECKING:
    from broker.controller import BrokerController

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


class QueryProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def _offset(self, cmd: RemotingCommand, offset: int) -> RemotingCommand:
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.ext_fields = encode_header(OffsetResponseHeader(offset=offset))
        return resp

    async def query_consumer_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, QueryConsumerOffsetRequestHeader)
        b = self.broker
        offset = b.offsets.query(h.consumerGroup, h.topic, h.queueId)
        if offset >= 0:
            return self._offset(cmd, offset)
        # Never committed: a queue that still starts at 0 is read from the beginning unless its first
        # message is too far behind to be in memory (upstream 4.x's rule, checkInDiskByConsumeOffset;
        # 5.x asks the page cache, and answers QUERY_NOT_FOUND for an empty queue too, which sends a
        # CONSUME_FROM_LAST_OFFSET client to the queue's max offset -- past a message sent meanwhile).
        # Not found, the client starts where its ConsumeFromWhere says (the last offset, by default).
        min_offset = b.store.get_min_offset_in_queue(h.topic, h.queueId)
        if (
            h.setZeroIfNotFound is not False
            and min_offset <= 0
            and not b.store.check_in_disk_by_consume_offset(h.topic, h.queueId, 0)
        ):
            return self._offset(cmd, 0)
        return cmd.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    async def update_consumer_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, UpdateConsumerOffsetRequestHeader)
        b = self.broker
        if b.topics.get(h.topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {h.topic} not exist!")
        if b.groups.find(h.consumerGroup) is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {h.consumerGroup} not exist!"
            )
        if b.offsets.has_reset(h.consumerGroup, h.topic, h.queueId):
            # the consumer has not seen the reset yet: its offset is the one from before (upstream)
            return cmd.response(ResponseCode.SUCCESS, "Offset has been previously reset")
        b.offsets.commit(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        return cmd.response(ResponseCode.SUCCESS)

    async def get_max_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, TopicQueueRequestHeader)
        return self._offset(cmd, self.broker.store.get_max_offset_in_queue(h.topic, h.queueId))

    async def get_min_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, TopicQueueRequestHeader)
        return self._offset(cmd, self.broker.store.get_min_offset_in_queue(h.topic, h.queueId))

    async def search_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, SearchOffsetRequestHeader)
        boundary = BoundaryType.UPPER if h.boundaryType.upper() == "UPPER" else BoundaryType.LOWER
        return self._offset(
            cmd,
            await self.broker.store.get_offset_in_queue_by_time(h.topic, h.queueId, h.timestamp, boundary),
        )

    async def earliest_msg_storetime(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, TopicQueueRequestHeader)
        timestamp = await self.broker.store.get_earliest_message_time(h.topic, h.queueId)
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.ext_fields = encode_header(EarliestMsgStoretimeResponseHeader(timestamp=timestamp))
        return resp

    async def view_message_by_id(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, ViewMessageRequestHeader)
        await self.broker.store.read_in_message(h.offset)
        view = self.broker.store.look_message_by_offset(h.offset)
        if view is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.body = [view]
        return resp

    async def query_message(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, QueryMessageRequestHeader)
        max_num = h.maxNum
        if (cmd.ext_fields or {}).get(UNIQUE_KEY_QUERY) == "true":
            max_num = self.broker.store_config.defaultQueryMaxNum
        store = self.broker.store
        await store.read_in_query(h.topic, h.key, max_num, h.beginTimestamp, h.endTimestamp)
        result = store.query_message(h.topic, h.key, max_num, h.beginTimestamp, h.endTimestamp)
        views = result.message_views
        last_ts, last_phy = result.index_last_update_timestamp, result.index_last_update_phyoffset
        if not views:
            resp = cmd.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct"
            )
        else:
            resp = cmd.response(ResponseCode.SUCCESS)
            resp.body = list(views)
        resp.ext_fields = encode_header(
            QueryMessageResponseHeader(indexLastUpdateTimestamp=last_ts, indexLastUpdatePhyoffset=last_phy)
        )
        return resp


def register(broker: BrokerController, table: ProcessorTable) -> None:
    p = QueryProcessor(broker)
    table.register(RequestCode.QUERY_CONSUMER_OFFSET, p.query_consumer_offset)
    table.register(RequestCode.UPDATE_CONSUMER_OFFSET, p.update_consumer_offset)
    table.register(RequestCode.GET_MAX_OFFSET, p.get_max_offset)
    table.register(RequestCode.GET_MIN_OFFSET, p.get_min_offset)
    table.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, p.search_offset)
    table.register(RequestCode.GET_EARLIEST_MSG_STORETIME, p.earliest_msg_storetime)
    table.register(RequestCode.VIEW_MESSAGE_BY_ID, p.view_message_by_id)
    table.register(RequestCode.QUERY_MESSAGE, p.query_message)
