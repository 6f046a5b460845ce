"""Admin requests of a broker (upstream ``AdminBrokerProcessor``, admin part).

Topics: UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
GET_TOPIC_CONFIG (351), GET_TOPIC_STATS_INFO (202), GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305).
Groups and offsets: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201), DELETE_SUBSCRIPTIONGROUP (207), GET_SUBSCRIPTIONGROUP_CONFIG (352), GET_CONSUME_STATS (208),
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45), QUERY_TOPIC_CONSUME_BY_WHO (300).
Lists: UPDATE_AND_CREATE_TOPIC_LIST (18), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225), in
:mod:`broker.admin_lists`, which also holds the topic and group checks the single updates share.
Queues: QUERY_CONSUME_QUEUE (321, in :mod:`broker.consume_queue_query`).
Store maintenance (in :mod:`broker.store_maintenance`): CLEAN_EXPIRED_CONSUMEQUEUE (306),
DELETE_EXPIRED_COMMITLOG (329), CLEAN_UNUSED_TOPIC (316), RESET_MASTER_FLUSH_OFFSET (908).
Statistics: VIEW_BROKER_STATS_DATA (315, in :mod:`broker.stats_items`).
Broker: GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25),
GET_BROKER_HA_STATUS (907, from :meth:`broker.replication.Replication.ha_runtime_info`).

Response codes and remarks are upstream's. Deviations, each deliberate:

- GET_ALL_TOPIC_CONFIG / GET_ALL_SUBSCRIPTIONGROUP_CONFIG always answer with the whole table in one
  page (upstream does too unless ``enableSplitMetadata``); the total header makes paging clients stop.
- GET_BROKER_CONFIG lists the broker, the process's transport (netty server and client) and the
  store keys, as upstream; the transport keys are the process's, shared by its brokers.
- UPDATE_BROKER_CONFIG applies values to the running broker only (no config file is rewritten),
  answers 29 INVALID_PARAMETER naming keys that are not broker, transport or store keys (upstream
  ignores them silently), and refuses with 16 NO_PERMISSION the black-listed keys and the keys that only
  take effect at start-up (identity, ports, paths, file sizes, role). Keys upstream has but we give
  no meaning (thread pools, ...) are accepted and ignored.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from broker.admin_lists import (
    Refused,
    altered_topic_attributes,
    check_group,
    check_message_type,
    check_topic,
    update_and_create_subscription_group_list,
    update_and_create_topic_list,
)
from broker.config import IGNORED_BROKER_KEYS, PERIOD_KEYS
from broker.consume_queue_query import query_consume_queue
from broker.stats_items import view_broker_stats_data
from broker.store_maintenance import (
    clean_expired_consume_queue,
    clean_unused_topic,
    delete_expired_commit_log,
    reset_master_flush_offset,
)
from broker.topic_attributes import parse_attribute_modification
from broker.topics import SYSTEM_TOPICS
from remoting.client import bad_addresses
from remoting.codes import RequestCode, ResponseCode
from remoting.command import CURRENT_VERSION, RemotingCommand, version_desc
from remoting.connection import ProcessorTable, RequestContext
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import decode_header, encode_header
from remoting.protocol.broker import (
    ConsumeStats,
    ConsumeStatsList,
    CreateTopicRequestHeader,
    DelayOffsetWrapper,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetAllTopicConfigResponseHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    OffsetWrapper,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    SubscriptionGroupConfig,
    TopicOffset,
    TopicStatsTable,
)
from remoting.protocol.common import (
    GroupList,
    KVTable,
    MessageQueue,
    TopicConfig,
    TopicFilterType,
    TopicList,
)
from store.results import BoundaryType

if TYPE_CHECKING:
    from broker.controller import BrokerController

__all__ = [
    "RESTART_ONLY_KEYS",
    "AdminProcessor",
    "config_properties",
    "parse_properties_text",
    "register",
]

log = logging.getLogger("broker.admin")


# --- broker configuration as properties -------------------------------------------------------------

#: Keys that take effect only when the broker starts: UPDATE_BROKER_CONFIG refuses them (the store
#: and its services are built from them: accepting a new value would show it in GET_BROKER_CONFIG
#: while the broker keeps working with the old one).
RESTART_ONLY_KEYS = frozenset(
    [
        "brokerClusterName",
        "brokerName",
        "brokerId",
        "listenPort",
        "brokerIP1",
        "brokerIP2",
        "enableControllerMode",
        "storePathRootDir",
        "storePathCommitLog",
        "storePathEpochFile",
        "storePathBrokerIdentity",
        "mappedFileSizeCommitLog",
        "mappedFileSizeConsumeQueue",
        "maxHashSlotNum",
        "maxIndexNum",
        "brokerRole",
        "haListenPort",
        "enableDLegerCommitLog",
        "duplicationEnable",
        "transientStorePoolEnable",
        "flushDiskType",
        "messageIndexEnable",
        "messageDelayLevel",
        "warmMapedFileEnable",
        # the process's transport (container.netty_config), set up when it starts
        "bindAddress",
        "connectTimeoutMillis",
    ]
)

_ALWAYS_BLACK_LISTED = ("brokerConfigPath", "brokerConfigPaths", "rocketmqHome", "configBlackList")


def _prop_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return str(value)


def config_properties(*configs: msgspec.Struct) -> str:
    """``key=value`` lines of every non-None field of ``configs`` (GET_BROKER_CONFIG body)."""
    lines = []
    for config in configs:
        for f in msgspec.structs.fields(config):
            value = getattr(config, f.name)
            if value is not None:
                lines.append(f"{f.name}={_prop_value(value)}\n")
    return "".join(lines)


def parse_properties_text(text: str) -> dict[str, str]:
    """Key/value pairs of a properties text as admin tools send it (``key=value`` per line).

    Blank lines and ``#``/``!`` comments are skipped; the key ends at the first ``=``, ``:`` or
    blank; surrounding blanks are dropped. (Line continuations and escapes are not interpreted.)
    """
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        end = len(line)
        for i, c in enumerate(line):
            if c in "=: \t\f":
                end = i
                break
        key, rest = line[:end], line[end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[key] = rest
    return result


def _human_bytes(n: int) -> str:
    """Upstream ``MixAll.humanReadableByteCount(bytes, false)``."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def _disk_usage(path: str) -> tuple[float, int, int]:
    """(used ratio, total bytes, free bytes) of the partition holding ``path`` (-1 if missing)."""
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe or ".")
    except OSError:
        return -1.0, 0, 0
    total = st.f_blocks * st.f_frsize
    free = st.f_bfree * st.f_frsize
    return ((total - free) / total if total else -1.0), total, free


#: upstream ``MQVersion.Version.V3_1_8_SNAPSHOT.ordinal()``: clients before it cannot answer
#: GET_CONSUMER_RUNNING_INFO
V3_1_8_SNAPSHOT = 62
#: how long a broker waits for a client's answer to a request it passes on (upstream ``callClient``)
CALL_CLIENT_TIMEOUT = 10.0


def _format_runtime(ms: int) -> str:
    s = max(ms, 0) // 1000
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"


def _ok(request: RemotingCommand, body: bytes | None = None) -> RemotingCommand:
    response = request.response(ResponseCode.SUCCESS)
    response.body = body
    return response


class AdminProcessor:
    """The admin handlers; one instance per broker."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def register_into(self, table: ProcessorTable) -> None:
        handlers = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: partial(update_and_create_topic_list, self.broker),
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_TOPIC_CONFIG: self.get_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.get_system_topic_list,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: partial(
                update_and_create_subscription_group_list, self.broker
            ),
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_subscription_group,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_BROKER_CONSUME_STATS: self.get_broker_consume_stats,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.QUERY_CONSUME_QUEUE: partial(query_consume_queue, self.broker),
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: partial(clean_expired_consume_queue, self.broker),
            RequestCode.DELETE_EXPIRED_COMMITLOG: partial(delete_expired_commit_log, self.broker),
            RequestCode.CLEAN_UNUSED_TOPIC: partial(clean_unused_topic, self.broker),
            RequestCode.RESET_MASTER_FLUSH_OFFSET: partial(reset_master_flush_offset, self.broker),
            RequestCode.VIEW_BROKER_STATS_DATA: partial(view_broker_stats_data, self.broker),
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_BROKER_HA_STATUS: self.get_broker_ha_status,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
        }
        for code, handler in handlers.items():
            table.register(code, handler)

    # --- topics --------------------------------------------------------------------------------

    async def update_and_create_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, CreateTopicRequestHeader)
        broker = self.broker
        topic = h.topic
        log.info("update or create topic %s (from %s)", topic, ctx.connection.remote_address)
        bc = broker.broker_config
        try:
            check_topic(
                bc,
                topic,
                perm=h.perm,
                read_queue_nums=h.readQueueNums,
                write_queue_nums=h.writeQueueNums,
                is_system=broker.topics.is_system,
            )
            try:
                filter_type = TopicFilterType(h.topicFilterType)
            except ValueError:
                raise Refused(
                    ResponseCode.INVALID_PARAMETER, f"unknown topicFilterType {h.topicFilterType!r}"
                ) from None
            try:
                modification = parse_attribute_modification(h.attributes)
            except ValueError as e:
                # upstream: the attribute parser throws and the processor answers SYSTEM_ERROR
                raise Refused(ResponseCode.SYSTEM_ERROR, str(e)) from None
            check_message_type(bc, modification)
            attributes = altered_topic_attributes(broker.topics.get(topic), modification)
        except Refused as r:
            return request.response(r.code, r.remark)
        config = TopicConfig(
            topicName=topic,
            readQueueNums=h.readQueueNums,
            writeQueueNums=h.writeQueueNums,
            perm=h.perm,
            topicFilterType=filter_type,
            topicSysFlag=h.topicSysFlag or 0,
            order=h.order,
            attributes=attributes,
        )
        broker.topics.update(config)  # bumps the DataVersion and requests a re-registration on change
        await broker.topics_file.persist()  # durable and routed when the answer comes, as upstream
        await broker.wait_routed(topic)
        return _ok(request)

    async def delete_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, DeleteTopicRequestHeader)
        broker = self.broker
        topic = h.topic
        log.info("delete topic %s (from %s)", topic, ctx.connection.remote_address)
        if not topic.strip():
            return request.response(ResponseCode.INVALID_PARAMETER, "The specified topic is blank.")
        if broker.broker_config.validateSystemTopicWhenUpdateTopic and broker.topics.is_system(topic):
            return request.response(
                ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic."
            )
        # every table changes before the first await: a slave's sync in between sees the deletion
        # and the offsets gone together (it took the offsets back when it came between them)
        broker.topics.delete(topic)
        broker.offsets.remove_topic(topic)
        # for the slaves, also after a restart: the topic may be created again before they sync
        broker.deleted_topics.note(topic, broker.store.max_phy_offset)
        broker.deleted_topics_file.changed()
        await broker.deleted_topics_file.persist()
        await broker.topics_file.persist()
        await broker.persist_offsets()
        await broker.store.delete_topics([topic])
        broker.stats.items.on_topic_deleted(topic)
        broker.request_register()
        return _ok(request)

    async def get_all_topic_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        wrapper = self.broker.topic_wrapper(to_encode=True)
        wrapper.deletedTopicOffsets = dict(self.broker.deleted_topics.offsets) or None
        response = _ok(request, wrapper.encode())
        response.ext_fields = encode_header(
            GetAllTopicConfigResponseHeader(totalTopicNum=len(self.broker.topics.table))
        )
        return response

    async def get_topic_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetTopicConfigRequestHeader)
        config = self.broker.topics.get(h.topic)
        if config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {h.topic}"
            )
        return _ok(request, config.encode())

    async def get_topic_stats_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetTopicStatsInfoRequestHeader)
        broker = self.broker
        config = broker.topics.get(h.topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = broker.store
        table: dict[MessageQueue, TopicOffset] = {}
        for qid in range(max(config.readQueueNums, config.writeQueueNums)):
            low = max(store.get_min_offset_in_queue(h.topic, qid), 0)
            high = max(store.get_max_offset_in_queue(h.topic, qid), 0)
            stamp = 0
            if high > 0:
                await store.read_in_store_time(h.topic, qid, high - 1)
                stamp = store.get_message_store_timestamp(h.topic, qid, high - 1)
            mq = MessageQueue(topic=h.topic, brokerName=broker.broker_config.brokerName, queueId=qid)
            table[mq] = TopicOffset(minOffset=low, maxOffset=high, lastUpdateTimestamp=max(stamp, 0))
        return _ok(request, TopicStatsTable(offsetTable=table).encode())

    async def get_system_topic_list(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        # upstream: TopicValidator's whole set (the fixed topics and the ones this broker added)
        topics = sorted(SYSTEM_TOPICS | self.broker.topics.system_topics)
        return _ok(request, TopicList(topicList=topics).encode())

    # --- subscription groups and offsets -------------------------------------------------------

    async def update_and_create_subscription_group(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            config = SubscriptionGroupConfig.decode(request.body_bytes)
        except (ValueError, msgspec.ValidationError) as e:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {e}")
        try:
            check_group(config)
        except Refused as r:
            return request.response(r.code, r.remark)
        log.info("update subscription group %s (from %s)", config.groupName, ctx.connection.remote_address)
        self.broker.groups.update(config)
        self.broker.groups_changed()
        await self.broker.groups_file.persist()
        return _ok(request)

    async def get_all_subscription_group(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        groups = self.broker.groups
        response = _ok(request, groups.encode())
        response.ext_fields = {"totalGroupNum": str(len(groups.table))}
        return response

    async def delete_subscription_group(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        h = decode_header(request, DeleteSubscriptionGroupRequestHeader)
        log.info(
            "delete subscription group %s (clean offsets: %s, from %s)",
            h.groupName,
            h.cleanOffset,
            ctx.connection.remote_address,
        )
        self.broker.groups.delete(h.groupName)
        self.broker.stats.items.on_group_deleted(h.groupName)
        self.broker.groups_changed()
        await self.broker.groups_file.persist()
        if h.cleanOffset:
            self.broker.offsets.remove_group(h.groupName)
            await self.broker.persist_offsets()
        return _ok(request)

    async def get_subscription_group(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetSubscriptionGroupConfigRequestHeader)
        groups = self.broker.groups
        existed = h.group in groups.table
        config = groups.find(h.group)  # auto-creates like upstream when autoCreateSubscriptionGroup
        if config is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        if not existed:
            self.broker.groups_changed()
        return _ok(request, config.encode())

    def _consume_stats_topics(self, h: GetConsumeStatsRequestHeader) -> list[str]:
        broker = self.broker
        listed = [t for t in (h.topicList or "").split(";") if t.strip()]
        if listed:
            return listed
        topics = (
            [h.topic]
            if h.topic and h.topic.strip()
            else sorted(broker.offsets.topics_of_group(h.consumerGroup))
        )
        info = broker.consumers.get(h.consumerGroup)
        if info is not None and info.subscriptions:
            topics = [t for t in topics if t in info.subscriptions]
        return topics

    async def get_consume_stats(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetConsumeStatsRequestHeader)
        broker = self.broker
        table: dict[MessageQueue, OffsetWrapper] = {}
        for topic in self._consume_stats_topics(h):
            config = broker.topics.get(topic)
            if config is None:
                log.warning("consume stats of %s: topic %s does not exist", h.consumerGroup, topic)
                continue
            table.update(await self._offset_table(h.consumerGroup, config))
        return _ok(request, ConsumeStats(offsetTable=table).encode())

    async def _offset_table(self, group: str, config: TopicConfig) -> dict[MessageQueue, OffsetWrapper]:
        """The group's progress in every queue of a topic: the queue's end, the group's offset and
        the store time of the last message it consumed there (0 when none; read in first where it
        may be out of memory)."""
        broker = self.broker
        store = broker.store
        topic = config.topicName
        table: dict[MessageQueue, OffsetWrapper] = {}
        for qid in range(config.readQueueNums):
            broker_offset = max(store.get_max_offset_in_queue(topic, qid), 0)
            consumer_offset = max(broker.offsets.query(group, topic, qid), 0)
            last = 0
            if consumer_offset > 0:
                await store.read_in_store_time(topic, qid, consumer_offset - 1)
                last = max(store.get_message_store_timestamp(topic, qid, consumer_offset - 1), 0)
            mq = MessageQueue(topic=topic, brokerName=broker.broker_config.brokerName, queueId=qid)
            table[mq] = OffsetWrapper(
                brokerOffset=broker_offset,
                consumerOffset=consumer_offset,
                pullOffset=consumer_offset,
                lastTimestamp=last,
            )
        return table

    async def get_broker_consume_stats(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (mqadmin ``brokerConsumeStats``): the consume stats of every
        subscription group for each topic it has offsets of (with consumers online: of the topics
        they subscribe), order topics only with ``isOrder``."""
        h = decode_header(request, GetConsumeStatsInBrokerHeader)
        broker = self.broker
        groups: list[dict[str, list[ConsumeStats]]] = []
        total_diff = 0
        for group in sorted(broker.groups.table):
            info = broker.consumers.get(group)
            subscribed = info.subscriptions if info is not None and info.subscriptions else None
            stats: list[ConsumeStats] = []
            for topic in sorted(broker.offsets.topics_of_group(group)):
                config = broker.topics.get(topic)
                if config is None or (h.isOrder and not config.order):
                    continue
                if subscribed is not None and topic not in subscribed:
                    continue
                table = await self._offset_table(group, config)
                total_diff += sum(w.brokerOffset - w.consumerOffset for w in table.values())
                stats.append(ConsumeStats(offsetTable=table))
            groups.append({group: stats})
        body = ConsumeStatsList(consumeStatsList=groups, brokerAddr=broker.addr, totalDiff=total_diff)
        return _ok(request, body.encode())

    async def reset_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET, upstream's server-side reset (``useServerSideResetOffset``,
        on by default in 5.x): the offsets are committed and kept pending; the next pull of each
        queue by the group answers PULL_OFFSET_MOVED with it, which every client follows (the C++
        client as well), and the group's commits of older positions are ignored until then."""
        h = decode_header(request, ResetOffsetRequestHeader)
        broker = self.broker
        log.info(
            "[reset-offset] reset offset started by %s. topic=%s, group=%s, timestamp=%d, queueId=%d, offset=%s",
            ctx.connection.remote_address,
            h.topic,
            h.group,
            h.timestamp,
            h.queueId,
            h.offset,
        )
        if broker.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, "Can not reset offset in slave broker")
        config = broker.topics.get(h.topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {h.topic} does not exist")
        if h.group not in broker.groups.table:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {h.group} does not exist"
            )
        store = broker.store

        async def by_time(qid: int) -> int:
            if h.timestamp < 0:
                return store.get_max_offset_in_queue(h.topic, qid)
            return await store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp, BoundaryType.LOWER)

        offsets: dict[int, int] = {}
        if h.queueId >= 0:
            if h.queueId >= config.readQueueNums:
                return request.response(
                    ResponseCode.INVALID_PARAMETER,
                    f"queueId {h.queueId} is not a queue of topic {h.topic} (readQueueNums {config.readQueueNums})",
                )
            if h.offset is not None and h.offset != -1:
                low = store.get_min_offset_in_queue(h.topic, h.queueId)
                high = store.get_max_offset_in_queue(h.topic, h.queueId)
                if (low >= 0 and h.offset < low) or h.offset > high + 1:
                    return request.response(
                        ResponseCode.SYSTEM_ERROR,
                        f"Target offset {h.offset} not in consume queue range [{low}-{high}]",
                    )
                offsets[h.queueId] = h.offset
            else:
                offsets[h.queueId] = await by_time(h.queueId)
        else:
            offsets = {qid: await by_time(qid) for qid in range(config.readQueueNums)}
        if not offsets:
            return request.response(ResponseCode.SYSTEM_ERROR, "No queues to reset.")
        name = broker.broker_config.brokerName
        table: dict[MessageQueue, int] = {}
        for qid, offset in offsets.items():
            if offset >= 0:
                broker.offsets.assign_reset(h.group, h.topic, qid, offset)
                broker.hold.wake_queue(h.topic, qid)  # held pulls see it now, not in up to 25 s
            table[MessageQueue(topic=h.topic, brokerName=name, queueId=qid)] = offset
        log.info("[reset-offset] topic=%s, group=%s, offsets=%s", h.topic, h.group, offsets)
        return _ok(request, ResetOffsetBody(offsetTable=table).encode())

    async def get_consumer_running_info(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO from an admin (mqadmin ``consumerStatus``): asked of the
        client itself over its connection, its answer passed back as it is (upstream
        ``callConsumer``)."""
        h = decode_header(request, GetConsumerRunningInfoRequestHeader)
        info = self.broker.consumers.get(h.consumerGroup)
        channel = next(
            (c for c in (info.channels.values() if info is not None else ()) if c.client_id == h.clientId),
            None,
        )
        if channel is None or channel.connection.closed:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{h.consumerGroup}> <{h.clientId}> not online"
            )
        if channel.version < V3_1_8_SNAPSHOT:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{h.clientId}> Version <{version_desc(channel.version)}> too low to finish, "
                "please upgrade it to V3_1_8_SNAPSHOT",
            )
        ask = RemotingCommand(
            code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields=dict(request.ext_fields or {})
        )
        try:
            return await channel.connection.request(ask, CALL_CLIENT_TIMEOUT)
        except RemotingTimeoutError as e:
            return request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{h.consumerGroup}> <{h.clientId}> Timeout: {e}"
            )
        except RemotingError as e:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{h.consumerGroup}> <{h.clientId}> Exception: {e}",
            )

    async def get_all_consumer_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return _ok(request, self.broker.offsets.encode())

    async def get_all_delay_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        delay = getattr(self.broker, "delay_offsets", None)  # the schedule service, once it exists
        wrapper = delay.wrapper() if delay is not None else DelayOffsetWrapper()
        return _ok(request, wrapper.encode())

    async def query_topic_consume_by_who(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        h = decode_header(request, QueryTopicConsumeByWhoRequestHeader)
        groups = self.broker.consumers.groups_of_topic(h.topic) | self.broker.offsets.groups_of_topic(h.topic)
        return _ok(request, GroupList(groupList=sorted(groups)).encode())

    # --- broker runtime info and config --------------------------------------------------------

    async def get_broker_runtime_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        table = await self.runtime_info()
        return _ok(request, KVTable(table=table).encode())

    async def get_broker_ha_status(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        info = self.broker.replication.ha_runtime_info()
        if info is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"broker {self.broker.name} has no replication role yet: the controller has not made "
                "it master or slave",
            )
        return _ok(request, info.encode())

    async def runtime_info(self) -> dict[str, str]:
        """The GET_BROKER_RUNTIME_INFO table (upstream key names; every value a string)."""
        broker = self.broker
        store = broker.store
        sc = broker.store_config
        bc = broker.broker_config
        commitlog_usage, total, free = await trio.to_thread.run_sync(_disk_usage, sc.commitlog_dir)
        cq_usage, _, _ = await trio.to_thread.run_sync(_disk_usage, sc.consumequeue_dir)
        max_phy = store.max_phy_offset
        await store.read_in_message(store.min_phy_offset)  # the oldest record: often out of memory
        now = broker.now_ms()
        t: dict[str, str] = {
            "brokerVersionDesc": version_desc(CURRENT_VERSION),
            "brokerVersion": str(CURRENT_VERSION),
            "brokerActive": "true" if not broker.is_slave else "false",
            "bootTimestamp": str(broker.boot_timestamp),
            "runtime": _format_runtime(now - broker.boot_timestamp),
            "commitLogMinOffset": str(store.min_phy_offset),
            "commitLogMaxOffset": str(max_phy),
            "commitLogDiskRatio": str(commitlog_usage),
            f"commitLogDiskRatio_{sc.commitlog_dir}": str(commitlog_usage),
            "consumeQueueDiskRatio": str(cq_usage),
            "commitLogDirCapacity": f"Total : {_human_bytes(total)}, Free : {_human_bytes(free)}.",
            "earliestMessageTimeStamp": str(store.get_earliest_store_time()),
            "dispatchBehindBytes": str(store.dispatch_behind_bytes),
            "remainHowManyDataToFlush": _human_bytes(max(max_phy - store.flushed_offset, 0)),
            "pageCacheLockTimeMills": "0",
            "startAcceptSendRequestTimeStamp": str(bc.startAcceptSendRequestTimeStamp),
            "putMessageTimesTotal": str(max(broker.stats.put_total, 1)),
            "timerReadBehind": "0",
            "timerOffsetBehind": "0",
            "timerCongestNum": "0",
            "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0",
            "remainTransientStoreBufferNumbs": "0",
            # no transient store pool: every appended byte is in the map at once (upstream's
            # value without one); upstream never sets its dispatchMaxBuffer either
            "remainHowManyDataToCommit": _human_bytes(0),
            "dispatchMaxBuffer": "0",
        }
        # No thread pools here: requests run as tasks, so their queues are always empty.
        for pool, capacity in (
            ("send", 10000),
            ("pull", 100000),
            ("litePull", 100000),
            ("query", 20000),
            ("ack", 100000),
        ):
            t[f"{pool}ThreadPoolQueueSize"] = "0"
            t[f"{pool}ThreadPoolQueueCapacity"] = str(capacity)
            t[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
        t["EndTransactionQueueSize"] = "0"
        t["EndTransactionThreadPoolQueueCapacity"] = "100000"
        t.update(broker.stats.runtime_table())
        return t

    async def get_broker_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        # upstream's order: broker, netty server, netty client, message store
        text = config_properties(broker.broker_config, *broker.transport_configs, broker.store_config)
        response = _ok(request, text.encode("utf-8"))
        response.ext_fields = encode_header(
            GetBrokerConfigResponseHeader(version=broker.config_data_version.encode().decode())
        )
        return response

    def _black_list(self) -> set[str]:
        configured = self.broker.broker_config.configBlackList or ""
        return {k.strip() for k in configured.split(";") if k.strip()} | set(_ALWAYS_BLACK_LISTED)

    async def update_broker_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        if not request.body:
            return _ok(request)
        try:
            text = request.body_bytes.decode("utf-8")
        except UnicodeDecodeError:
            text = request.body_bytes.decode("iso-8859-1")
        props = parse_properties_text(text)
        log.info("update broker config %s (from %s)", props, ctx.connection.remote_address)
        if any(k in props for k in self._black_list()):
            return request.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        targets: dict[str, msgspec.Struct] = {}
        fields: dict[str, Any] = {}
        for target in (broker.broker_config, broker.store_config, *broker.transport_configs):
            for f in msgspec.structs.fields(type(target)):
                targets.setdefault(f.name, target)
                fields.setdefault(f.name, f.type)
        unknown = sorted(k for k in props if k not in targets and k not in IGNORED_BROKER_KEYS)
        if unknown:
            return request.response(
                ResponseCode.INVALID_PARAMETER, f"unknown broker config keys: {', '.join(unknown)}"
            )
        restart = sorted(k for k in props if k in RESTART_ONLY_KEYS)
        if restart:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"config keys {', '.join(restart)} take effect only at start-up; "
                "change them in the config file and restart the broker",
            )
        values: dict[str, object] = {}
        for key, text_value in props.items():
            if key not in targets:
                log.info("ignoring broker config key %s (no meaning in rmq-container)", key)
                continue
            try:
                values[key] = msgspec.convert(text_value, fields[key], strict=False)
            except msgspec.ValidationError as e:
                return request.response(
                    ResponseCode.INVALID_PARAMETER, f"bad value {text_value!r} for config key {key}: {e}"
                )
        for key in ("namesrvAddr", "controllerAddr"):
            value = values.get(key)
            bad = bad_addresses(value) if isinstance(value, str) else []
            if bad:
                return request.response(
                    ResponseCode.INVALID_PARAMETER,
                    f"bad value {value!r} for config key {key}: {bad[0]!r} is not host:port",
                )
        for key in PERIOD_KEYS:
            period = values.get(key)
            if isinstance(period, int) and period <= 0:
                return request.response(
                    ResponseCode.INVALID_PARAMETER,
                    f"bad value {period} for config key {key}: the period of a loop, in milliseconds, must be positive",
                )
        if values.get("aclEnable"):
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                "aclEnable=true is not supported by rmq-container yet (requests are not authenticated)",
            )
        for key, value in values.items():
            setattr(targets[key], key, value)
        self._apply_config_change(set(values))
        return _ok(request)

    def _apply_config_change(self, keys: set[str]) -> None:
        """Push changed values into the components that copied them at construction."""
        broker = self.broker
        bc = broker.broker_config
        broker.topics.auto_create_topic_enable = bc.autoCreateTopicEnable
        broker.groups.auto_create = bc.autoCreateSubscriptionGroup
        broker.offsets.version_step = max(1, bc.consumerOffsetUpdateVersionStep)
        now = broker.now_ms()
        if keys:
            broker.config_data_version = broker.config_data_version.next_version(now)
        if keys & {"maxMessageSize", "syncFlushTimeout"}:
            broker.store.refresh_limits()
        if "brokerPermission" in keys:
            # the name servers learn the new permission with the next registration
            broker.topics.data_version = broker.topics.data_version.next_version(now)
            broker.request_register()
        if "namesrvAddr" in keys:
            broker.namesrvs_changed()


def register(broker: BrokerController, table: ProcessorTable) -> None:
    """Register the admin handlers of ``broker`` into ``table``."""
    AdminProcessor(broker).register_into(table)
