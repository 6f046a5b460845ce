"""Client management requests (upstream ``ClientManageProcessor`` and the client parts of
``ConsumerManageProcessor`` / ``AdminBrokerProcessor``).

Codes: HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46), GET_CONSUMER_LIST_BY_GROUP
(38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), GET_CONSUMER_CONNECTION_LIST (203),
GET_PRODUCER_CONNECTION_LIST (204), GET_ALL_PRODUCER_INFO (328).

Registrations are keyed by connection (see :mod:`broker.clients`). A producer needs no heartbeat
to send: the send path never looks at the producer table.

Notifications. When a heartbeat or an unregister changes a consumer group's membership or
subscriptions, the handler first sends its own response (``ctx.respond``) and then, in the same
task, sends NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member of the group, giving up after
:data:`NOTIFY_TIMEOUT` seconds so that one stuck peer cannot hold the handler. The requester
therefore always sees its response before the notification.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

import msgspec
import trio

from broker.clients import ClientChannel
from broker.topics import retry_topic
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import decode_header
from remoting.protocol.broker import Connection as ConnectionBody
from remoting.protocol.broker import (
    ConsumerConnection,
    ConsumeType,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerListByGroupResponseBody,
    GetProducerConnectionListRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProducerConnection,
    ProducerInfo,
    ProducerTableInfo,
    SubscriptionData,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
)
from remoting.protocol.common import Body, PermName

if TYPE_CHECKING:
    from broker.controller import BrokerController

__all__ = ["NOTIFY_TIMEOUT", "ClientProcessor", "register"]

B = TypeVar("B", bound=Body)

log = logging.getLogger("broker.client")

#: Seconds the notifications after a heartbeat/unregister may take before the rest are dropped.
NOTIFY_TIMEOUT = 3.0

#: ``TopicSysFlag`` bit for unit-mode subscriptions (upstream ``FLAG_UNIT_SUB``).
FLAG_UNIT_SUB = 0x2

IS_SUPPORT_HEART_BEAT_V2 = "IS_SUPPORT_HEART_BEAT_V2"
IS_SUB_CHANGE = "IS_SUB_CHANGE"

#: Expression types the broker filters itself (upstream ``ExpressionType.isTagType``).
_TAG_TYPES = ("", "TAG")


class _CheckClientRequestBody(Body, kw_only=True):
    """CHECK_CLIENT_CONFIG body (upstream ``CheckClientRequestBody``)."""

    clientId: str | None = None
    group: str | None = None
    namespace: str | None = None
    subscriptionData: SubscriptionData | None = None


def _decode_body(cmd: RemotingCommand, cls: type[B]) -> B | str:
    """The request body as ``cls``, or a readable reason why it is not one."""
    try:
        return cls.decode(cmd.body_bytes)
    except (ValueError, msgspec.ValidationError) as e:
        return f"bad {cls.__name__} body: {e}"


class ClientProcessor:
    """The handlers; one instance per broker."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        #: group -> fingerprint of the last heartbeat (heartbeat v2 change detection)
        self.fingerprints: dict[str, int] = {}

    def register_into(self, table: ProcessorTable) -> None:
        table.register(RequestCode.HEART_BEAT, self.heartbeat)
        table.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        table.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)
        table.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list_by_group)
        table.register(RequestCode.LOCK_BATCH_MQ, self.lock_batch_mq)
        table.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock_batch_mq)
        table.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.get_consumer_connection_list)
        table.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, self.get_producer_connection_list)
        table.register(RequestCode.GET_ALL_PRODUCER_INFO, self.get_all_producer_info)

    # --- helpers -------------------------------------------------------------------------------

    async def _respond_then_notify(
        self, ctx: RequestContext, request: RemotingCommand, response: RemotingCommand, groups: list[str]
    ) -> RemotingCommand | None:
        if not groups:
            return response
        if not request.is_oneway:
            await ctx.respond(response)
        with trio.move_on_after(NOTIFY_TIMEOUT) as scope:
            for group in groups:
                await self.broker.notify_consumer_ids_changed(group)
        if scope.cancelled_caught:
            log.warning("notifying groups %s took longer than %.1f s; gave up", groups, NOTIFY_TIMEOUT)
        return None

    def _find_group_config(self, group: str) -> bool:
        """Whether ``group`` has (or just got, by auto-creation) a subscription group config."""
        groups = self.broker.groups
        existed = group in groups.table
        config = groups.find(group)
        if config is not None and not existed:
            self.broker.groups_changed()
        return config is not None

    # --- HEART_BEAT ----------------------------------------------------------------------------

    async def heartbeat(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        data = _decode_body(request, HeartbeatData)
        if isinstance(data, str):
            return request.response(ResponseCode.SYSTEM_ERROR, data)
        for consumer in data.consumerDataSet:
            try:
                _ = (consumer.consume_type, consumer.message_model, consumer.consume_from_where)
            except (KeyError, ValueError) as e:
                return request.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"bad HeartbeatData body: consumer group {consumer.groupName}: unknown enum value {e}",
                )
        broker = self.broker
        now, wall = broker.liveness_ms(), broker.now_ms()
        conn = ctx.connection
        language = request.language.name
        v2 = data.heartbeatFingerprint != 0
        sub_changed = False
        changed_groups: list[str] = []
        for consumer in data.consumerDataSet:
            group = consumer.groupName
            if broker.broker_config.rejectPullConsumerEnable and (
                consumer.consume_type == ConsumeType.CONSUME_ACTIVELY
            ):
                continue
            previous = self.fingerprints.get(group)
            if v2 and previous is not None and previous != data.heartbeatFingerprint:
                sub_changed = True
            self.fingerprints[group] = data.heartbeatFingerprint
            if not self._find_group_config(group):
                log.debug(
                    "heartbeat of %s: group %s has no subscription config; skipped", data.clientID, group
                )
                continue
            config = broker.groups.table[group]
            broker.topics.create_system_like(
                retry_topic(group),
                config.retryQueueNums,
                PermName.PERM_READ | PermName.PERM_WRITE,
                FLAG_UNIT_SUB if consumer.unitMode else 0,
            )
            channel = ClientChannel(data.clientID, conn, language, request.version, now, wall)
            if broker.consumers.register(consumer, channel, now, without_sub=v2 and data.withoutSub):
                log.info(
                    "consumer group %s changed: client %s at %s (%d subscriptions)",
                    group,
                    data.clientID,
                    conn.remote_address,
                    len(consumer.subscriptionDataSet),
                )
                changed_groups.append(group)
        for producer in data.producerDataSet:
            broker.producers.register(
                producer.groupName, ClientChannel(data.clientID, conn, language, request.version, now, wall)
            )
        response = request.response(ResponseCode.SUCCESS)
        response.ext_fields = {
            IS_SUPPORT_HEART_BEAT_V2: "true",
            IS_SUB_CHANGE: "true" if (sub_changed or not v2) else "false",
        }
        return await self._respond_then_notify(ctx, request, response, changed_groups)

    # --- UNREGISTER_CLIENT ---------------------------------------------------------------------

    async def unregister_client(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand | None:
        header = decode_header(request, UnregisterClientRequestHeader)
        conn_id = ctx.connection.id
        if header.producerGroup:  # the C++ client sends "" for "none"
            self.broker.producers.unregister(header.producerGroup, conn_id)
        changed: list[str] = []
        if header.consumerGroup and self.broker.consumers.unregister(header.consumerGroup, conn_id):
            log.info("client %s left consumer group %s", header.clientID, header.consumerGroup)
            changed.append(header.consumerGroup)
        return await self._respond_then_notify(ctx, request, request.response(ResponseCode.SUCCESS), changed)

    # --- CHECK_CLIENT_CONFIG -------------------------------------------------------------------

    async def check_client_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _decode_body(request, _CheckClientRequestBody)
        if isinstance(body, str):
            return request.response(ResponseCode.SYSTEM_ERROR, body)
        sub = body.subscriptionData
        if sub is None or sub.expressionType.upper() in _TAG_TYPES:
            return request.response(ResponseCode.SUCCESS)
        if not self.broker.broker_config.enablePropertyFilter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expressionType}",
            )
        return request.response(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"expression type {sub.expressionType} is not supported by this broker",
        )

    # --- GET_CONSUMER_LIST_BY_GROUP ------------------------------------------------------------

    async def get_consumer_list_by_group(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(request, GetConsumerListByGroupRequestHeader)
        info = self.broker.consumers.get(header.consumerGroup)
        ids = info.client_ids() if info is not None else []
        if not ids:
            log.warning(
                "no consumer for group %s (asked by %s)", header.consumerGroup, ctx.connection.remote_address
            )
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumerGroup}"
            )
        response = request.response(ResponseCode.SUCCESS)
        response.body = GetConsumerListByGroupResponseBody(consumerIdList=ids).encode()
        return response

    # --- LOCK_BATCH_MQ / UNLOCK_BATCH_MQ -------------------------------------------------------

    async def lock_batch_mq(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _decode_body(request, LockBatchRequestBody)
        if isinstance(body, str):
            return request.response(ResponseCode.SYSTEM_ERROR, body)
        granted = self.broker.locks.try_lock_batch(
            body.consumerGroup, body.mqSet, body.clientId, self.broker.liveness_ms()
        )
        if len(granted) < len(body.mqSet):
            log.info(
                "lock for %s of group %s: %d of %d queues granted",
                body.clientId,
                body.consumerGroup,
                len(granted),
                len(body.mqSet),
            )
        response = request.response(ResponseCode.SUCCESS)
        response.body = LockBatchResponseBody(lockOKMQSet=granted).encode()
        return response

    async def unlock_batch_mq(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _decode_body(request, UnlockBatchRequestBody)
        if isinstance(body, str):
            return request.response(ResponseCode.SYSTEM_ERROR, body)
        self.broker.locks.unlock_batch(body.consumerGroup, body.mqSet, body.clientId)
        return request.response(ResponseCode.SUCCESS)

    # --- connection lists ----------------------------------------------------------------------

    async def get_consumer_connection_list(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(request, GetConsumerConnectionListRequestHeader)
        info = self.broker.consumers.get(header.consumerGroup)
        if info is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{header.consumerGroup}] not online"
            )
        body = ConsumerConnection(
            connectionSet=[_connection(ch) for ch in info.channels.values()],
            subscriptionTable=dict(info.subscriptions),
            consumeType=info.consume_type.name,
            messageModel=info.message_model.name,
            consumeFromWhere=info.consume_from_where.name,
        )
        response = request.response(ResponseCode.SUCCESS)
        response.body = body.encode()
        return response

    async def get_producer_connection_list(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        header = decode_header(request, GetProducerConnectionListRequestHeader)
        if header.producerGroup not in self.broker.producers.groups:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{header.producerGroup}] not exist"
            )
        body = ProducerConnection(
            connectionSet=[_connection(ch) for ch in self.broker.producers.channels(header.producerGroup)]
        )
        response = request.response(ResponseCode.SUCCESS)
        response.body = body.encode()
        return response

    async def get_all_producer_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """Every producer group with its registrations (mqadmin ``producer``)."""
        producers = self.broker.producers
        body = ProducerTableInfo(
            data={
                group: [
                    ProducerInfo(
                        clientId=ch.client_id,
                        remoteIP=f"/{ch.connection.remote_address}",
                        language=ch.language,
                        version=ch.version,
                        lastUpdateTimestamp=ch.heard_at_ms,
                    )
                    for ch in producers.channels(group)
                ]
                for group in sorted(producers.groups)
            }
        )
        response = request.response(ResponseCode.SUCCESS)
        response.body = body.encode()
        return response


def _connection(ch: ClientChannel) -> ConnectionBody:
    return ConnectionBody(
        clientId=ch.client_id,
        clientAddr=ch.connection.remote_address,
        language=ch.language,
        version=ch.version,
    )


def register(broker: BrokerController, table: ProcessorTable) -> None:
    """Register the client-management handlers of ``broker`` into ``table``."""
    ClientProcessor(broker).register_into(table)
