"""Headers and bodies of the broker's client-facing and admin requests.

Field names are upstream's (``SendMessageRequestHeader``, ``PullMessageRequestHeader``,
``HeartbeatData``, ...). The C++ client sends numbers where Java sends strings and integer
ordinals where Java sends enum names; the types here accept both (see
``../shared/reference/cpp-client-wire.md``).
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from remoting.headers import CommandHeader
from remoting.protocol.common import Body, DataVersion, MessageQueue, TopicConfig

# ---------------------------------------------------------------------------------------------
# Send


class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) header; SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE arrive as the V2 form."""

    producerGroup: str
    topic: str
    defaultTopic: str = "TBW102"
    defaultTopicQueueNums: int = 4
    queueId: int = -1
    sysFlag: int = 0
    bornTimestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsumeTimes: int | None = None
    unitMode: bool | None = None
    maxReconsumeTimes: int | None = None
    batch: bool | None = None
    brokerName: str | None = None
    bname: str | None = None


#: SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE name each V1 header field with one letter.
V2_FIELD_NAMES: dict[str, str] = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "brokerName": "n",
}

#: The V2 header decoded straight into V1 field names (what ``SendMessageRequestHeaderV2.to_v1()``
#: gives, without a second object): V1's fields and defaults, V2's wire names. ``bname`` has no V2
#: letter; it is renamed to a key no peer sends.
SendMessageRequestHeaderV2AsV1 = msgspec.defstruct(
    "SendMessageRequestHeaderV2AsV1",
    [
        (f.name, f.type) if f.required else (f.name, f.type, f.default)
        for f in msgspec.structs.fields(SendMessageRequestHeader)
    ],
    bases=(CommandHeader,),
    kw_only=True,
    gc=False,
    rename={**V2_FIELD_NAMES, "bname": " bname (not in V2)"},
)


class SendMessageRequestHeaderV2(CommandHeader):
    """The compact form (upstream ``SendMessageRequestHeaderV2``): one letter per V1 field."""

    a: str
    b: str
    c: str = "TBW102"
    d: int = 4
    e: int = -1
    f: int = 0
    g: int = 0
    h: int = 0
    i: str | None = None
    j: int | None = None
    k: bool | None = None
    l: int | None = None  # noqa: E741 - the wire name is "l"
    m: bool | None = None
    n: str | None = None

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producerGroup=self.a,
            topic=self.b,
            defaultTopic=self.c,
            defaultTopicQueueNums=self.d,
            queueId=self.e,
            sysFlag=self.f,
            bornTimestamp=self.g,
            flag=self.h,
            properties=self.i,
            reconsumeTimes=self.j,
            unitMode=self.k,
            maxReconsumeTimes=self.l,
            batch=self.m,
            brokerName=self.n,
        )

    @classmethod
    def from_v1(cls, h: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        return cls(
            a=h.producerGroup,
            b=h.topic,
            c=h.defaultTopic,
            d=h.defaultTopicQueueNums,
            e=h.queueId,
            f=h.sysFlag,
            g=h.bornTimestamp,
            h=h.flag,
            i=h.properties,
            j=h.reconsumeTimes,
            k=h.unitMode,
            l=h.maxReconsumeTimes,
            m=h.batch,
            n=h.brokerName,
        )


class SendMessageResponseHeader(CommandHeader):
    msgId: str
    queueId: int
    queueOffset: int
    transactionId: str | None = None
    batchUniqId: str | None = None
    MSG_REGION: str | None = None
    TRACE_ON: str | None = None


class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: int
    group: str
    delayLevel: int = 0
    originMsgId: str | None = None
    originTopic: str | None = None
    unitMode: bool = False
    maxReconsumeTimes: int | None = None


# ---------------------------------------------------------------------------------------------
# Pull


class PullSysFlag:
    """Bits of ``PullMessageRequestHeader.sysFlag`` (upstream ``PullSysFlag``)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


class PullMessageRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int
    queueOffset: int
    maxMsgNums: int = 32
    sysFlag: int = 0
    commitOffset: int = 0
    suspendTimeoutMillis: int = 15000
    subscription: str | None = None
    subVersion: int = 0
    expressionType: str | None = None
    maxMsgBytes: int | None = None


class PullMessageResponseHeader(CommandHeader):
    suggestWhichBrokerId: int
    nextBeginOffset: int
    minOffset: int
    maxOffset: int
    offsetDelta: int | None = None
    topicSysFlag: int | None = None
    groupSysFlag: int | None = None
    forbiddenType: int | None = None


# ---------------------------------------------------------------------------------------------
# Offsets and queries


class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int
    setZeroIfNotFound: bool | None = None


class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int
    commitOffset: int


class OffsetResponseHeader(CommandHeader):
    """Response of 14, 29, 30, 31: ``offset``."""

    offset: int


class TopicQueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str
    queueId: int
    committed: bool = True


class SearchOffsetRequestHeader(CommandHeader):
    topic: str
    queueId: int
    timestamp: int
    boundaryType: str = "LOWER"


class EarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: int


class ViewMessageRequestHeader(CommandHeader):
    offset: int
    topic: str | None = None


class QueryMessageRequestHeader(CommandHeader):
    topic: str
    key: str
    maxNum: int
    beginTimestamp: int
    endTimestamp: int


class QueryMessageResponseHeader(CommandHeader):
    indexLastUpdateTimestamp: int
    indexLastUpdatePhyoffset: int


# ---------------------------------------------------------------------------------------------
# Clients


class ConsumeType(enum.IntEnum):
    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1
    CONSUME_POP = 2


class MessageModel(enum.IntEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


def enum_of(cls: type[enum.IntEnum], value: int | str | None, default: enum.IntEnum) -> enum.IntEnum:
    """An enum from a Java name (``"CLUSTERING"``) or a C++ ordinal (``1``); ``default`` when absent."""
    if value is None:
        return default
    if isinstance(value, int):
        return cls(value)
    if value.lstrip("-").isdigit():
        return cls(int(value))
    return cls[value]


class SubscriptionData(Body, kw_only=True):
    """One topic subscription (upstream ``SubscriptionData``). C++ sends ``subVersion`` as a string."""

    topic: str
    subString: str = "*"
    tagsSet: list[str] = []
    codeSet: list[int] = []
    subVersion: int | str = 0
    expressionType: str = "TAG"
    classFilterMode: bool = False

    @property
    def sub_version(self) -> int:
        return int(self.subVersion) if self.subVersion not in ("", None) else 0


class ProducerData(Body, kw_only=True):
    groupName: str


class ConsumerData(Body, kw_only=True):
    groupName: str
    consumeType: int | str | None = None
    messageModel: int | str | None = None
    consumeFromWhere: int | str | None = None
    subscriptionDataSet: list[SubscriptionData] = []
    unitMode: bool = False

    @property
    def consume_type(self) -> ConsumeType:
        return enum_of(ConsumeType, self.consumeType, ConsumeType.CONSUME_PASSIVELY)  # type: ignore[return-value]

    @property
    def message_model(self) -> MessageModel:
        return enum_of(MessageModel, self.messageModel, MessageModel.CLUSTERING)  # type: ignore[return-value]

    @property
    def consume_from_where(self) -> ConsumeFromWhere:
        return enum_of(  # type: ignore[return-value]
            ConsumeFromWhere, self.consumeFromWhere, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        )


class HeartbeatData(Body, kw_only=True):
    clientID: str
    producerDataSet: list[ProducerData] = []
    consumerDataSet: list[ConsumerData] = []
    heartbeatFingerprint: int = 0
    withoutSub: bool = False


class UnregisterClientRequestHeader(CommandHeader):
    clientID: str
    producerGroup: str | None = None
    consumerGroup: str | None = None


class GetConsumerListByGroupRequestHeader(CommandHeader):
    consumerGroup: str


class GetConsumerListByGroupResponseBody(Body, kw_only=True):
    consumerIdList: list[str] = []


class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    consumerGroup: str


class LockBatchRequestBody(Body, kw_only=True):
    consumerGroup: str
    clientId: str
    onlyThisBroker: bool = False
    mqSet: list[MessageQueue] = []


class UnlockBatchRequestBody(Body, kw_only=True):
    consumerGroup: str
    clientId: str
    onlyThisBroker: bool = False
    mqSet: list[MessageQueue] = []


class LockBatchResponseBody(Body, kw_only=True):
    lockOKMQSet: list[MessageQueue] = []


class Connection(Body, kw_only=True):
    clientId: str
    clientAddr: str
    language: str
    version: int


class ProducerInfo(Body, kw_only=True):
    """One producer registration as GET_ALL_PRODUCER_INFO (328) reports it (upstream
    ``ProducerInfo``; ``remoteIP`` is Java's ``SocketAddress.toString()``, ``/host:port``)."""

    clientId: str
    remoteIP: str
    language: str
    version: int
    lastUpdateTimestamp: int = 0


class ProducerTableInfo(Body, kw_only=True):
    """Every producer group of a broker with its registrations (upstream ``ProducerTableInfo``)."""

    data: dict[str, list[ProducerInfo]] = {}


class ConsumerConnection(Body, kw_only=True):
    connectionSet: list[Connection] = []
    subscriptionTable: dict[str, SubscriptionData] = {}
    consumeType: str | None = None
    messageModel: str | None = None
    consumeFromWhere: str | None = None


class ProducerConnection(Body, kw_only=True):
    connectionSet: list[Connection] = []


class GetConsumerConnectionListRequestHeader(CommandHeader):
    consumerGroup: str


class GetProducerConnectionListRequestHeader(CommandHeader):
    producerGroup: str


# ---------------------------------------------------------------------------------------------
# Admin


class CreateTopicRequestHeader(CommandHeader):
    topic: str
    defaultTopic: str = "TBW102"
    readQueueNums: int = 8
    writeQueueNums: int = 8
    perm: int = 6
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int | None = None
    order: bool = False
    attributes: str | None = None
    force: bool | None = None


class DeleteTopicRequestHeader(CommandHeader):
    topic: str


class GetTopicConfigRequestHeader(CommandHeader):
    topic: str


class GetAllTopicConfigResponseHeader(CommandHeader):
    totalTopicNum: int | None = None


class GetTopicStatsInfoRequestHeader(CommandHeader):
    topic: str


class GetConsumeStatsRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str | None = None
    topicList: str | None = None


class ResetOffsetRequestHeader(CommandHeader, kw_only=True):
    """INVOKE_BROKER_TO_RESET_OFFSET (222): every queue of the topic (``queueId`` -1) to the offset
    of ``timestamp`` (negative: the queue's max), or one queue to ``offset``."""

    group: str
    topic: str
    queueId: int = -1
    offset: int | None = None
    timestamp: int
    isForce: bool = False


class ResetOffsetBody(Body, kw_only=True):
    """The offsets a reset assigned (upstream ``ResetOffsetBody``)."""

    offsetTable: dict[MessageQueue, int] = {}


class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    groupName: str
    cleanOffset: bool = False


class GetSubscriptionGroupConfigRequestHeader(CommandHeader):
    group: str


class GetBrokerConfigResponseHeader(CommandHeader):
    version: str


class QueryTopicConsumeByWhoRequestHeader(CommandHeader):
    topic: str


class SubscriptionGroupConfig(Body, kw_only=True):
    """A consumer group's configuration (upstream ``SubscriptionGroupConfig``; upstream defaults)."""

    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    consumeMessageOrderly: bool = False
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True
    groupSysFlag: int = 0
    consumeTimeoutMinute: int = 15
    attributes: dict[str, str] = {}


class SubscriptionGroupWrapper(Body, kw_only=True):
    """``config/subscriptionGroup.json`` and the GET_ALL_SUBSCRIPTIONGROUP_CONFIG body."""

    subscriptionGroupTable: dict[str, SubscriptionGroupConfig] = {}
    forbiddenTable: dict[str, dict[str, int]] = {}
    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)


class CreateTopicListRequestBody(Body, kw_only=True):
    """UPDATE_AND_CREATE_TOPIC_LIST (18) body: the topics to create or update at once. Each
    config's ``attributes`` is a modification (``{"+message.type": "FIFO", "-k": ""}``)."""

    topicConfigList: list[TopicConfig]


class SubscriptionGroupList(Body, kw_only=True):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225) body: the groups to create or update at once."""

    groupConfigList: list[SubscriptionGroupConfig]


class ConsumerOffsetWrapper(Body, kw_only=True):
    """``config/consumerOffset.json`` and the GET_ALL_CONSUMER_OFFSET body: ``topic@group`` → {queueId: offset}."""

    offsetTable: dict[str, dict[int, int]] = {}
    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)


class DelayOffsetWrapper(Body, kw_only=True):
    """``config/delayOffset.json``: delay level → schedule-topic queue offset."""

    offsetTable: dict[int, int] = {}
    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)


class TopicOffset(Body, kw_only=True):
    minOffset: int
    maxOffset: int
    lastUpdateTimestamp: int = 0


class TopicStatsTable(Body, kw_only=True):
    offsetTable: dict[MessageQueue, TopicOffset] = {}
    topicPutTps: float = 0.0


class OffsetWrapper(Body, kw_only=True):
    brokerOffset: int
    consumerOffset: int
    pullOffset: int = 0
    lastTimestamp: int = 0


class ConsumeStats(Body, kw_only=True):
    offsetTable: dict[MessageQueue, OffsetWrapper] = {}
    consumeTps: float = 0.0


class GetConsumerRunningInfoRequestHeader(CommandHeader):
    """GET_CONSUMER_RUNNING_INFO (307): an admin asks a broker, the broker asks the client."""

    consumerGroup: str
    clientId: str
    jstackEnable: bool = False


class ProcessQueueInfo(Body, kw_only=True):
    """One queue of a consumer's running info (upstream ``ProcessQueueInfo``; ``droped`` sic)."""

    commitOffset: int = 0
    cachedMsgMinOffset: int = 0
    cachedMsgMaxOffset: int = 0
    cachedMsgCount: int = 0
    cachedMsgSizeInMiB: int = 0
    transactionMsgMinOffset: int = 0
    transactionMsgMaxOffset: int = 0
    transactionMsgCount: int = 0
    locked: bool = False
    tryUnlockTimes: int = 0
    lastLockTimestamp: int = 0
    droped: bool = False
    lastPullTimestamp: int = 0
    lastConsumeTimestamp: int = 0


class ConsumeStatusBody(Body, kw_only=True):
    """Pull and consume rates of one topic in a consumer's running info (upstream ``ConsumeStatus``)."""

    pullRT: float = 0.0
    pullTPS: float = 0.0
    consumeRT: float = 0.0
    consumeOKTPS: float = 0.0
    consumeFailedTPS: float = 0.0
    consumeFailedMsgs: int = 0


class ConsumerRunningInfo(Body, kw_only=True):
    """A consumer's answer to GET_CONSUMER_RUNNING_INFO (upstream ``ConsumerRunningInfo``). The
    C++ client sends property values that are not strings; they are kept as sent."""

    properties: dict[str, Any] = {}
    subscriptionSet: list[SubscriptionData] = []
    mqTable: dict[MessageQueue, ProcessQueueInfo] = {}
    statusTable: dict[str, ConsumeStatusBody] = {}
    userConsumerInfo: dict[str, str] | None = None
    jstack: str | None = None


class QueryConsumeQueueRequestHeader(CommandHeader):
    """QUERY_CONSUME_QUEUE (321, mqadmin ``queryCq``): ``count`` units of a queue from ``index``,
    with the subscription of ``consumerGroup`` when given."""

    topic: str
    queueId: int
    index: int
    count: int
    consumerGroup: str | None = None


class ConsumeQueueData(Body, kw_only=True):
    """One consume-queue unit as QUERY_CONSUME_QUEUE reports it (upstream ``ConsumeQueueData``):
    the message's commit-log offset and size, its tags code; the other fields describe the
    consume-queue extension, which this store does not keep."""

    physicOffset: int = 0
    physicSize: int = 0
    tagsCode: int = 0
    extendDataJson: str | None = None
    bitMap: str | None = None
    eval: bool = False
    msg: str | None = None


class QueryConsumeQueueResponseBody(Body, kw_only=True):
    """QUERY_CONSUME_QUEUE's answer (upstream ``QueryConsumeQueueResponseBody``): the units, the
    queue's index range, and for a consumer group its subscription and filter data."""

    subscriptionData: SubscriptionData | None = None
    filterData: str | None = None
    queueData: list[ConsumeQueueData] | None = None
    maxQueueIndex: int = 0
    minQueueIndex: int = 0


class GetConsumeStatsInBrokerHeader(CommandHeader):
    """GET_BROKER_CONSUME_STATS (317): ``isOrder`` limits the answer to order topics."""

    isOrder: bool = False


class ConsumeStatsList(Body, kw_only=True):
    """Every group's consume stats on one broker (upstream ``ConsumeStatsList``): one
    ``{group: [stats of each of its topics]}`` map per group."""

    consumeStatsList: list[dict[str, list[ConsumeStats]]] = []
    brokerAddr: str | None = None
    totalDiff: int = 0
    totalInflightDiff: int = 0


# ---------------------------------------------------------------------------------------------
# Replication status (GET_BROKER_HA_STATUS, 907; mqadmin haStatus)


class HAConnectionRuntimeInfo(Body, kw_only=True):
    """One slave connection of a master: its address, what it acknowledged, how far behind the
    master's end, whether it counts as in sync, the bytes per second sent to it and the offset
    its next transfer starts at (upstream ``HARuntimeInfo.HAConnectionRuntimeInfo``)."""

    addr: str = ""
    slaveAckOffset: int = 0
    diff: int = 0
    inSync: bool = False
    transferredByteInSecond: int = 0
    transferFromWhere: int = 0


class HAClientRuntimeInfo(Body, kw_only=True):
    """A slave's side: its master's HA address, its own max offset, the bytes per second it
    receives, when it last read from and wrote to the master (epoch ms) and the master flush
    offset it keeps (upstream ``HARuntimeInfo.HAClientRuntimeInfo``)."""

    masterAddr: str | None = None
    transferredByteInSecond: int = 0
    maxOffset: int = 0
    lastReadTimestamp: int = 0
    lastWriteTimestamp: int = 0
    masterFlushOffset: int = 0


class HARuntimeInfo(Body, kw_only=True):
    """A broker's replication status (upstream ``HARuntimeInfo``): a master fills the first four
    fields, a slave ``haClientRuntimeInfo``."""

    master: bool = False
    masterCommitLogMaxOffset: int = 0
    inSyncSlaveNums: int = 0
    haConnectionInfo: list[HAConnectionRuntimeInfo] = []
    haClientRuntimeInfo: HAClientRuntimeInfo = msgspec.field(default_factory=HAClientRuntimeInfo)


# ---------------------------------------------------------------------------------------------
# Per-key broker statistics (VIEW_BROKER_STATS_DATA, 315; mqadmin statsAll)


class ResetMasterFlushOffsetHeader(CommandHeader):
    """RESET_MASTER_FLUSH_OFFSET (908): the master flushed offset a slave records."""

    masterFlushOffset: int


class ViewBrokerStatsDataRequestHeader(CommandHeader):
    """VIEW_BROKER_STATS_DATA (315): the statistics item ``statsKey`` of ``statsName``
    (``TOPIC_PUT_NUMS`` / topic, ``GROUP_GET_NUMS`` / ``topic@group``, ...)."""

    statsName: str
    statsKey: str


class BrokerStatsItem(Body, kw_only=True):
    """One window of a statistics item (upstream ``BrokerStatsItem``): the increase of its value,
    that increase per second, and per counted call."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class BrokerStatsData(Body, kw_only=True):
    """VIEW_BROKER_STATS_DATA's answer (upstream ``BrokerStatsData``): the item over the last
    minute, hour and day."""

    statsMinute: BrokerStatsItem = msgspec.field(default_factory=BrokerStatsItem)
    statsHour: BrokerStatsItem = msgspec.field(default_factory=BrokerStatsItem)
    statsDay: BrokerStatsItem = msgspec.field(default_factory=BrokerStatsItem)


__all__ = [
    "BrokerStatsData",
    "BrokerStatsItem",
    "Connection",
    "ConsumeFromWhere",
    "ConsumeQueueData",
    "ConsumeStats",
    "ConsumeStatsList",
    "ConsumeStatusBody",
    "ConsumeType",
    "ConsumerConnection",
    "ConsumerData",
    "ConsumerOffsetWrapper",
    "ConsumerRunningInfo",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicListRequestBody",
    "CreateTopicRequestHeader",
    "DelayOffsetWrapper",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicRequestHeader",
    "EarliestMsgStoretimeResponseHeader",
    "GetAllTopicConfigResponseHeader",
    "GetBrokerConfigResponseHeader",
    "GetConsumeStatsInBrokerHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerListByGroupResponseBody",
    "GetConsumerRunningInfoRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetSubscriptionGroupConfigRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "HAClientRuntimeInfo",
    "HAConnectionRuntimeInfo",
    "HARuntimeInfo",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "NotifyConsumerIdsChangedRequestHeader",
    "OffsetResponseHeader",
    "OffsetWrapper",
    "ProcessQueueInfo",
    "ProducerConnection",
    "ProducerData",
    "ProducerInfo",
    "ProducerTableInfo",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PullSysFlag",
    "QueryConsumeQueueRequestHeader",
    "QueryConsumeQueueResponseBody",
    "QueryConsumerOffsetRequestHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "ResetOffsetBody",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "SubscriptionGroupList",
    "SubscriptionGroupWrapper",
    "TopicConfig",
    "TopicOffset",
    "TopicQueueRequestHeader",
    "TopicStatsTable",
    "UnlockBatchRequestBody",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewBrokerStatsDataRequestHeader",
    "ViewMessageRequestHeader",
    "enum_of",
]
