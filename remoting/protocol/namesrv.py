"""Name-server headers and bodies (reference: remoting-protocol.md §2.9, §4.2, §4.5, §4.6, §4.8).

Headers are :class:`remoting.headers.CommandHeader` subclasses named after their upstream class;
fields without a default are required. Bodies derive from :class:`remoting.protocol.common.Body`.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgspec

from remoting import fastjson
from remoting.crc import crc32 as _crc32
from remoting.headers import CommandHeader
from remoting.protocol.common import (
    Body,
    DataVersion,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
)

__all__ = [
    "MASTER_ID",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "SYNC_BROKER_MEMBER_GROUP_PREFIX",
    "V3_0_11",
    "V4_9_4",
    "V5_0_0",
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "BrokerData",
    "BrokerHeartbeatRequestHeader",
    "BrokerMemberGroup",
    "ClusterInfo",
    "DeleteKVConfigRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "GetBrokerMemberGroupRequestHeader",
    "GetBrokerMemberGroupResponseBody",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "NotifyMinBrokerIdChangeRequestHeader",
    "PutKVConfigRequestHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueueData",
    "RegisterBrokerBody",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "RegisterTopicRequestHeader",
    "TopicRouteData",
    "UnRegisterBrokerRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
    "crc32",
]

#: brokerId of a group's master (upstream ``MixAll.MASTER_ID``).
MASTER_ID = 0
#: KV namespace holding order-topic configs (upstream ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``).
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
#: Topic each broker creates so old name servers can answer member-group queries.
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"

#: MQVersion ordinals that change name-server behaviour (remoting-protocol.md §1.8).
V3_0_11 = 37
V4_9_4 = 401
V5_0_0 = 413


def crc32(data: bytes | bytearray | memoryview) -> int:
    """RocketMQ's crc32: zlib CRC-32 masked to 31 bits (upstream ``UtilAll.crc32``)."""
    return _crc32(data) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# Route bodies


class QueueData(Body, kw_only=True):
    """A topic's queues on one broker group (upstream ``QueueData``).

    Accepts the pre-4.9 spelling ``topicSynFlag`` on input; always writes ``topicSysFlag``.
    """

    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int = 0
    topicSynFlag: int | None = None

    def __post_init__(self) -> None:
        if self.topicSynFlag is not None:
            if self.topicSysFlag == 0:
                self.topicSysFlag = self.topicSynFlag
            self.topicSynFlag = None


class BrokerData(Body, kw_only=True):
    """One broker group: id → address, id 0 = master (upstream ``BrokerData``)."""

    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = {}
    zoneName: str | None = None
    enableActingMaster: bool = False

    @property
    def master_addr(self) -> str | None:
        return self.brokerAddrs.get(MASTER_ID)

    def copy(self) -> BrokerData:
        return BrokerData(
            cluster=self.cluster,
            brokerName=self.brokerName,
            brokerAddrs=dict(self.brokerAddrs),
            zoneName=self.zoneName,
            enableActingMaster=self.enableActingMaster,
        )


class TopicRouteData(Body, kw_only=True):
    """GET_ROUTEINFO_BY_TOPIC response body (upstream ``TopicRouteData``)."""

    orderTopicConf: str | None = None
    queueDatas: list[QueueData] = []
    brokerDatas: list[BrokerData] = []
    filterServerTable: dict[str, list[str]] = {}
    topicQueueMappingByBroker: dict[str, Any] | None = None


class ClusterInfo(Body, kw_only=True):
    """GET_BROKER_CLUSTER_INFO response body (upstream ``ClusterInfo``; sets as arrays)."""

    brokerAddrTable: dict[str, BrokerData] = {}
    clusterAddrTable: dict[str, list[str]] = {}


class BrokerMemberGroup(Body, kw_only=True):
    """The registered members of one broker group (upstream ``BrokerMemberGroup``)."""

    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = {}


class GetBrokerMemberGroupResponseBody(Body, kw_only=True):
    brokerMemberGroup: BrokerMemberGroup | None = None


class RegisterBrokerBody(Body, kw_only=True):
    """REGISTER_BROKER body (upstream ``RegisterBrokerBody``): plain JSON or the deflate format."""

    topicConfigSerializeWrapper: TopicConfigAndMappingSerializeWrapper = msgspec.field(
        default_factory=TopicConfigAndMappingSerializeWrapper
    )
    filterServerList: list[str] = []

    def encode_compressed(self, version: int = V5_0_0) -> bytes:
        """The deflate format of remoting-protocol.md §4.5 (zlib stream, level 9)."""
        wrapper = self.topicConfigSerializeWrapper
        parts: list[bytes] = []

        def put(blob: bytes) -> None:
            parts.append(struct.pack(">i", len(blob)))
            parts.append(blob)

        put(wrapper.dataVersion.encode())
        parts.append(struct.pack(">i", len(wrapper.topicConfigTable)))
        for tc in wrapper.topicConfigTable.values():
            put(tc.encode_text().encode("utf-8"))
        put(fastjson.dumps(self.filterServerList))
        if version >= V5_0_0:
            mapping = wrapper.topicQueueMappingInfoMap
            parts.append(struct.pack(">i", len(mapping)))
            for info in mapping.values():
                put(fastjson.dumps(info))
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode_compressed(cls, data: bytes, version: int) -> RegisterBrokerBody:
        """Parse the deflate format; raises ``ValueError`` when it is damaged or truncated."""
        try:
            raw = zlib.decompress(data)
        except zlib.error as e:
            raise ValueError(f"compressed RegisterBrokerBody: {e}") from None
        pos = 0

        def take(n: int) -> bytes:
            nonlocal pos
            if n < 0 or pos + n > len(raw):
                raise ValueError("compressed RegisterBrokerBody is truncated")
            blob = raw[pos : pos + n]
            pos += n
            return blob

        def take_int() -> int:
            return int(struct.unpack(">i", take(4))[0])

        data_version = DataVersion.decode(take(take_int()))
        table: dict[str, TopicConfig] = {}
        for _ in range(take_int()):
            tc = TopicConfig.decode_text(take(take_int()).decode("utf-8"))
            table[tc.topicName] = tc
        filter_servers = fastjson.decode(take(take_int()), list[str] | None) or []
        mapping: dict[str, Any] = {}
        if version >= V5_0_0 and pos < len(raw):
            for _ in range(take_int()):
                info = fastjson.loads(take(take_int()))
                if isinstance(info, dict) and isinstance(info.get("topic"), str):
                    mapping[info["topic"]] = info
        wrapper = TopicConfigAndMappingSerializeWrapper(
            topicConfigTable=table, dataVersion=data_version, topicQueueMappingInfoMap=mapping
        )
        return cls(topicConfigSerializeWrapper=wrapper, filterServerList=filter_servers)


# ---------------------------------------------------------------------------------------------
# Headers


class RegisterBrokerRequestHeader(CommandHeader):
    brokerName: str
    brokerAddr: str
    clusterName: str
    haServerAddr: str
    brokerId: int
    heartbeatTimeoutMillis: int | None = None
    enableActingMaster: bool | None = None
    compressed: bool = False
    bodyCrc32: int = 0


class RegisterBrokerResponseHeader(CommandHeader):
    haServerAddr: str | None = None
    masterAddr: str | None = None


class UnRegisterBrokerRequestHeader(CommandHeader):
    brokerName: str
    brokerAddr: str
    clusterName: str
    brokerId: int


class GetRouteInfoRequestHeader(CommandHeader):
    topic: str
    acceptStandardJsonOnly: bool | None = None


class BrokerHeartbeatRequestHeader(CommandHeader):
    """BROKER_HEARTBEAT (904), shared with the controller; the name server uses the first three."""

    clusterName: str
    brokerAddr: str
    brokerName: str
    brokerId: int | None = None
    epoch: int | None = None
    maxOffset: int | None = None
    confirmOffset: int | None = None
    heartbeatTimeoutMills: int | None = None  # sic, upstream spelling
    electionPriority: int | None = None


class QueryDataVersionRequestHeader(CommandHeader):
    brokerName: str
    brokerAddr: str
    clusterName: str
    brokerId: int


class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool


class GetBrokerMemberGroupRequestHeader(CommandHeader):
    clusterName: str
    brokerName: str


class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    topic: str
    clusterName: str | None = None


class RegisterTopicRequestHeader(CommandHeader):
    topic: str


class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str


class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    brokerName: str


class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipeTopicCount: int


class AddWritePermOfBrokerRequestHeader(CommandHeader):
    brokerName: str


class AddWritePermOfBrokerResponseHeader(CommandHeader):
    addTopicCount: int


class PutKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str
    value: str


class GetKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


class DeleteKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: str


class NotifyMinBrokerIdChangeRequestHeader(CommandHeader):
    """NOTIFY_MIN_BROKER_ID_CHANGE (905), name server → brokers, oneway; all fields nullable."""

    minBrokerId: int | None = None
    brokerName: str | None = None
    minBrokerAddr: str | None = None
    offlineBrokerAddr: str | None = None
    haBrokerAddr: str | None = None
