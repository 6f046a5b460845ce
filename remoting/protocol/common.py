"""Bodies shared by broker, name server and clients (upstream ``common`` / ``remoting.protocol``).

Field names are upstream's JSON property names. Every body struct derives from :class:`Body`,
which gives ``obj.encode()`` (fastjson style, :func:`remoting.fastjson.dumps`) and
``Cls.decode(data)`` (:func:`remoting.fastjson.decode`, accepts standard JSON and fastjson).
"""

from __future__ import annotations

import enum
from typing import Any, Self

import msgspec

from remoting import fastjson

__all__ = [
    "Body",
    "DataVersion",
    "GroupList",
    "KVTable",
    "MessageQueue",
    "PermName",
    "TopicConfig",
    "TopicConfigAndMappingSerializeWrapper",
    "TopicConfigSerializeWrapper",
    "TopicFilterType",
    "TopicList",
]


class PermName:
    """Permission bits of topics and brokers (upstream ``PermName``)."""

    PERM_PRIORITY = 8
    PERM_READ = 4
    PERM_WRITE = 2
    PERM_INHERIT = 1

    @staticmethod
    def is_readable(perm: int) -> bool:
        return bool(perm & PermName.PERM_READ)

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return bool(perm & PermName.PERM_WRITE)

    @staticmethod
    def is_inherited(perm: int) -> bool:
        return bool(perm & PermName.PERM_INHERIT)

    @staticmethod
    def to_string(perm: int) -> str:
        """``RWX`` form as mqadmin prints it (``-`` for a missing bit)."""
        return (
            ("R" if perm & PermName.PERM_READ else "-")
            + ("W" if perm & PermName.PERM_WRITE else "-")
            + ("X" if perm & PermName.PERM_INHERIT else "-")
        )


class TopicFilterType(enum.StrEnum):
    """Upstream ``TopicFilterType``; on the wire by name."""

    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


class Body(msgspec.Struct, kw_only=True):
    """Base of JSON bodies: fastjson encoding and lenient decoding."""

    def encode(self, *, standard: bool = False) -> bytes:
        return fastjson.dumps(self, standard=standard)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        return fastjson.decode(data, cls)


class DataVersion(Body, kw_only=True):
    """Version stamp of a broker's metadata table (upstream ``DataVersion``).

    Equality is all three fields equal (struct equality). ``counter`` is an ``AtomicLong``
    upstream and a plain number on the wire.
    """

    stateVersion: int = 0
    timestamp: int = 0
    counter: int = 0

    def next_version(self, now_ms: int, state_version: int | None = None) -> DataVersion:
        """The following version: counter + 1, timestamp = ``now_ms`` (upstream ``nextVersion``)."""
        return DataVersion(
            stateVersion=self.stateVersion if state_version is None else state_version,
            timestamp=now_ms,
            counter=self.counter + 1,
        )


class TopicConfig(Body, kw_only=True):
    """A topic's configuration on one broker (upstream ``TopicConfig``; defaults are upstream's).

    ``attributes`` holds string attributes such as ``message.type``; keys and values must not
    contain spaces (the compressed registration format is space-separated).
    """

    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = PermName.PERM_READ | PermName.PERM_WRITE
    topicFilterType: TopicFilterType = TopicFilterType.SINGLE_TAG
    topicSysFlag: int = 0
    order: bool = False
    attributes: dict[str, str] = {}

    def encode_text(self) -> str:
        """The space-separated form used inside a compressed RegisterBrokerBody."""
        parts = [
            self.topicName,
            str(self.readQueueNums),
            str(self.writeQueueNums),
            str(self.perm),
            self.topicFilterType.name,
            fastjson.dumps(self.attributes).decode("utf-8"),
        ]
        return " ".join(parts)

    @classmethod
    def decode_text(cls, text: str) -> TopicConfig:
        """Parse :meth:`encode_text` output; raises ``ValueError`` on fewer than 5 fields."""
        parts = text.split(" ")
        if len(parts) < 5:
            raise ValueError(f"topic config text has {len(parts)} fields, need at least 5: {text!r}")
        attributes: dict[str, str] = {}
        if len(parts) >= 6:
            try:
                attributes = fastjson.decode(parts[5], dict[str, str])
            except (ValueError, msgspec.ValidationError):
                # Upstream ignores unparseable attributes here (values may contain spaces).
                attributes = {}
        return cls(
            topicName=parts[0],
            readQueueNums=int(parts[1]),
            writeQueueNums=int(parts[2]),
            perm=int(parts[3]),
            topicFilterType=TopicFilterType[parts[4]],
            attributes=attributes,
        )


class TopicConfigSerializeWrapper(Body, kw_only=True):
    """A broker's whole topic table with its DataVersion (upstream ``TopicConfigSerializeWrapper``)."""

    topicConfigTable: dict[str, TopicConfig] = {}
    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)


class TopicConfigAndMappingSerializeWrapper(TopicConfigSerializeWrapper, kw_only=True):
    """Topic table plus static-topic mappings (kept as raw JSON values; static topics unsupported)."""

    mappingDataVersion: DataVersion = msgspec.field(default_factory=DataVersion)
    topicQueueMappingInfoMap: dict[str, Any] = {}
    topicQueueMappingDetailMap: dict[str, Any] = {}
    #: rmq-container's own, in GET_ALL_TOPIC_CONFIG answers only (upstream ignores it): topics the
    #: broker deleted lately -> its commit-log end at the deletion (``broker.topics.DeletedTopics``)
    deletedTopicOffsets: dict[str, int] | None = None


class MessageQueue(msgspec.Struct, frozen=True, kw_only=True):
    """One queue of a topic on a broker; hashable, so it can key the object-keyed maps of 4.11."""

    topic: str
    brokerName: str
    queueId: int

    def encode(self) -> bytes:
        return fastjson.dumps(self)


class KVTable(Body, kw_only=True):
    """``{"table":{k:v}}`` (upstream ``KVTable``)."""

    table: dict[str, str] = {}


class TopicList(Body, kw_only=True):
    """``{"topicList":[...],"brokerAddr":...}`` (upstream ``TopicList``; a Set upstream)."""

    topicList: list[str] = []
    brokerAddr: str | None = None


class GroupList(Body, kw_only=True):
    """``{"groupList":[...]}`` (upstream ``GroupList``)."""

    groupList: list[str] = []
