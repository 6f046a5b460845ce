"""Pulling messages: the pull API both consumers share, and the application-driven PullConsumer.

Upstream: ``PullAPIWrapper`` (request building, result processing, the per-queue "pull from
which broker id next" table), ``MQAdminImpl`` offset queries and ``DefaultMQPullConsumer``::

    async with PullConsumer("CG", "127.0.0.1:9876") as consumer:
        for mq in await consumer.fetch_subscribe_message_queues("TopicTest"):
            result = await consumer.pull(mq, "TagA || TagB", 0, 32)

Response code → :class:`~client.message.PullStatus`: 0 FOUND, 19 NO_NEW_MSG,
20 NO_MATCHED_MSG, 21 OFFSET_ILLEGAL; any other code raises
:class:`~client.message.MQBrokerError`. Messages are re-filtered by exact tag on the client (a
FOUND result may therefore carry no messages while ``next_begin_offset`` still advances). The
response's ``suggestWhichBrokerId`` decides which broker of the group the next pull of that
queue goes to (a slave when the master suggests it; the master when the suggested id is not
in the route); pulls sent to a slave never carry the commit-offset flag.
"""

from __future__ import annotations

import logging

import trio

from client.instance import ClientInstance, own_or_shared
from client.lifecycle import StartStop
from client.message import (
    MASTER_ID,
    MQBrokerError,
    MQClientError,
    PullResult,
    PullStatus,
    build_subscription,
    decode_pull_body,
    validate_group,
)
from client.offset_store import RemoteOffsetStore
from client.rebalance import mq_sort_key
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.protocol.broker import ConsumerData, ConsumeType, MessageModel, PullSysFlag, SubscriptionData
from remoting.protocol.common import MessageQueue

__all__ = ["PullAPI", "PullConsumer"]

log = logging.getLogger("client.consumer")

_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def _int_field(ext: dict[str, str], key: str, default: int) -> int:
    v = ext.get(key)
    if v is None or v == "":
        return default
    return int(v)


class PullAPI:
    """Builds PULL_MESSAGE requests and turns responses into :class:`PullResult` (one per group)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        #: queue -> broker id suggested by the last pull response
        self.suggested: dict[MessageQueue, int] = {}

    async def pull(
        self,
        mq: MessageQueue,
        subscription: SubscriptionData,
        offset: int,
        max_nums: int,
        *,
        sys_flag: int,
        commit_offset: int = 0,
        suspend_timeout_ms: int = 0,
        timeout: float,
    ) -> PullResult:
        """One PULL_MESSAGE round trip. Raises MQBrokerError / RemotingError / MQClientError."""
        instance = self.instance
        broker_id = self.suggested.get(mq, MASTER_ID)
        found = instance.brokers.find_subscribe(mq.brokerName, broker_id, False)
        if found is None:
            found = await instance.subscribe_addr(mq.brokerName, broker_id, mq.topic)
        if found.slave:
            sys_flag &= ~PullSysFlag.COMMIT_OFFSET
        ext = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": str(mq.queueId),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(sys_flag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_timeout_ms),
            "subscription": subscription.subString,
            "subVersion": str(subscription.subVersion),
            "expressionType": subscription.expressionType,
            "bname": mq.brokerName,
        }
        cmd = RemotingCommand(code=int(RequestCode.PULL_MESSAGE), ext_fields=ext)
        response = await instance.invoke(found.addr, cmd, timeout)
        return self.process_response(mq, subscription, offset, response, found.addr)

    def process_response(
        self,
        mq: MessageQueue,
        subscription: SubscriptionData,
        offset: int,
        response: RemotingCommand,
        addr: str,
    ) -> PullResult:
        """Map the response code, remember the suggested broker id, decode and re-filter messages."""
        status = _STATUS_BY_CODE.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr)
        ext = response.ext_fields or {}
        try:
            next_begin = _int_field(ext, "nextBeginOffset", offset)
            min_offset = _int_field(ext, "minOffset", 0)
            max_offset = _int_field(ext, "maxOffset", 0)
            suggest = _int_field(ext, "suggestWhichBrokerId", MASTER_ID)
        except ValueError as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull response header: {e}", addr) from None
        self.suggested[mq] = suggest
        messages = []
        if status is PullStatus.FOUND and response.body:
            tags = (
                subscription.tagsSet
                if subscription.tagsSet and subscription.expressionType == "TAG"
                else None
            )
            messages = decode_pull_body(
                response.body_bytes,
                mq.brokerName,
                frozenset(tags) if tags else None,
                min_offset=min_offset,
                max_offset=max_offset,
            )
        return PullResult(
            status=status,
            next_begin_offset=next_begin,
            min_offset=min_offset,
            max_offset=max_offset,
            messages=messages,
            suggest_which_broker_id=suggest,
        )

    # ------------------------------------------------------------------ offset queries (master)

    async def _offset_call(self, code: int, mq: MessageQueue, ext: dict[str, str], field: str) -> int:
        fields = {"topic": mq.topic, "queueId": str(mq.queueId), "bname": mq.brokerName}
        fields.update(ext)
        cmd = RemotingCommand(code=int(code), ext_fields=fields)
        addr, response = await self.instance.invoke_master(mq.brokerName, mq.topic, cmd)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr)
        try:
            return int((response.ext_fields or {})[field])
        except (KeyError, ValueError):
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"response without {field}", addr) from None

    async def max_offset(self, mq: MessageQueue) -> int:
        """GET_MAX_OFFSET: the next offset the queue will be written at."""
        return await self._offset_call(RequestCode.GET_MAX_OFFSET, mq, {}, "offset")

    async def min_offset(self, mq: MessageQueue) -> int:
        """GET_MIN_OFFSET: the lowest offset still stored."""
        return await self._offset_call(RequestCode.GET_MIN_OFFSET, mq, {}, "offset")

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int, boundary: str = "LOWER") -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: first offset stored at or after ``timestamp_ms`` (LOWER)."""
        return await self._offset_call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            mq,
            {"timestamp": str(timestamp_ms), "boundaryType": boundary},
            "offset",
        )

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        """GET_EARLIEST_MSG_STORETIME: store time (ms) of the oldest stored message."""
        return await self._offset_call(RequestCode.GET_EARLIEST_MSG_STORETIME, mq, {}, "timestamp")


class PullConsumer(StartStop):
    """An application-driven consumer: the application chooses queues and offsets.

    The group is announced in heartbeats as CONSUME_ACTIVELY; committed offsets are only
    read/written when the application calls :meth:`query_consumer_offset` /
    :meth:`update_consumer_offset`.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        instance: ClientInstance | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        broker_suspend_max_time: float = 20.0,
        consumer_timeout_when_suspend: float = 30.0,
    ) -> None:
        validate_group(group)
        instance, self._owns_instance = own_or_shared(instance, namesrv_addr)
        self.group = group
        self.instance = instance
        self.message_model = message_model
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend
        self.api = PullAPI(instance, group)
        self.offset_store = RemoteOffsetStore(instance, group)
        self._topics: set[str] = set()
        self._subs: dict[tuple[str, str], SubscriptionData] = {}
        self._started = False

    # ------------------------------------------------------------------ ConsumerHook

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            groupName=self.group,
            consumeType=ConsumeType.CONSUME_ACTIVELY.name,
            messageModel=self.message_model.name,
            consumeFromWhere="CONSUME_FROM_LAST_OFFSET",
            subscriptionDataSet=[],
        )

    def subscribed_topics(self) -> set[str]:
        return set(self._topics)

    def request_rebalance(self) -> None:
        return None

    def master_connection_lost(self, broker_name: str) -> None:
        return None  # no queue locks

    def master_moved(self, broker_name: str) -> None:
        return None  # its pulls are the caller's, each with the caller's timeout

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._started:
            return
        if self._owns_instance:
            await self.instance.start()
        elif not self.instance.running:
            raise MQClientError("the shared client instance must be started before the consumer")
        try:
            self.instance.register_consumer(self)
        except BaseException:
            if self._owns_instance:
                await self.instance.shutdown()
            raise
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            with trio.CancelScope(shield=True):
                await self.instance.unregister_consumer(self.group)
        finally:
            if self._owns_instance:
                await self.instance.shutdown()

    # ------------------------------------------------------------------ API

    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted. Raises MQClientError (17) when the topic has no route."""
        self._topics.add(topic)
        if not await self.instance.update_route(topic) or not self.instance.subscribe.get(topic):
            raise MQClientError(f"can not find message queue for topic {topic}", ResponseCode.TOPIC_NOT_EXIST)
        return sorted(self.instance.subscribe[topic], key=mq_sort_key)

    def _subscription(self, topic: str, expression: str) -> SubscriptionData:
        key = (topic, expression)
        sub = self._subs.get(key)
        if sub is None:
            sub = self._subs[key] = build_subscription(topic, expression, 0)
        return sub

    async def pull(
        self, mq: MessageQueue, expression: str, offset: int, max_nums: int, *, timeout: float = 10.0
    ) -> PullResult:
        """Pull up to ``max_nums`` messages from ``offset``; the broker answers at once."""
        if offset < 0:
            raise MQClientError("offset < 0", ResponseCode.INVALID_PARAMETER)
        if max_nums <= 0:
            raise MQClientError("max_nums <= 0", ResponseCode.INVALID_PARAMETER)
        self._topics.add(mq.topic)
        return await self.api.pull(
            mq,
            self._subscription(mq.topic, expression),
            offset,
            max_nums,
            sys_flag=PullSysFlag.SUBSCRIPTION,
            suspend_timeout_ms=int(self.broker_suspend_max_time * 1000),
            timeout=timeout,
        )

    async def pull_block_if_not_found(
        self, mq: MessageQueue, expression: str, offset: int, max_nums: int
    ) -> PullResult:
        """Like :meth:`pull`, but the broker holds the request until a message arrives (or its
        suspend time passes)."""
        if offset < 0:
            raise MQClientError("offset < 0", ResponseCode.INVALID_PARAMETER)
        self._topics.add(mq.topic)
        return await self.api.pull(
            mq,
            self._subscription(mq.topic, expression),
            offset,
            max_nums,
            sys_flag=PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND,
            suspend_timeout_ms=int(self.broker_suspend_max_time * 1000),
            timeout=self.consumer_timeout_when_suspend,
        )

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.api.max_offset(mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.api.min_offset(mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self.api.search_offset(mq, timestamp_ms)

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return await self.api.earliest_msg_store_time(mq)

    async def query_consumer_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` (QUERY_CONSUMER_OFFSET), -1 if none."""
        return await self.offset_store.read_store(mq)

    async def update_consumer_offset(self, mq: MessageQueue, offset: int) -> None:
        """Commit ``offset`` for the group (UPDATE_CONSUMER_OFFSET, waiting for the answer)."""
        self.offset_store.update(mq, offset)
        await self.offset_store.update_remote(mq, offset, oneway=False)
