"""Topic names, validation and the broker's topic table (upstream ``TopicValidator``, ``TopicConfigManager``)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

import msgspec

from broker.persist import EntryTexts, atomic_write, load_json, with_own_attributes
from remoting.protocol.common import DataVersion, PermName, TopicConfig, TopicConfigSerializeWrapper
from remoting.protocol.topics import (  # noqa: F401 -- re-exported: the broker's modules import them from here
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    ROCKSDB_OFFSET_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SCHEDULE_QUEUE_NUMS = 18


_VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
RETRY_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120

log = logging.getLogger("broker.topics")


def _field_text(config: TopicConfig, name: str) -> str:
    value = getattr(config, name)
    if name == "perm":
        return f"{value} ({PermName.to_string(value)})"
    return str(value)  # TopicFilterType is a StrEnum: its name


def describe_topic_change(old: TopicConfig | None, new: TopicConfig) -> str:
    """One log line for a topic's new or changed config: its queues and permission when created
    (with whatever else differs from the defaults), the fields that changed otherwise."""
    if old is None:
        default = TopicConfig(topicName=new.topicName)
        text = (
            f"created topic {new.topicName}: {new.readQueueNums} read / {new.writeQueueNums} write"
            f" queues, perm {_field_text(new, 'perm')}"
        )
        extra = [
            f"{name} {_field_text(new, name)}"
            for name in ("topicFilterType", "topicSysFlag", "order", "attributes")
            if getattr(new, name) != getattr(default, name)
        ]
        return text + "".join(f", {e}" for e in extra)
    changes = [
        f"{name} {_field_text(old, name)} -> {_field_text(new, name)}"
        for name in new.__struct_fields__
        if getattr(old, name) != getattr(new, name)
    ]
    return f"topic {new.topicName} changed: {', '.join(changes)}"


#: deletions a master remembers for its slaves (:class:`DeletedTopics`)
DELETED_TOPICS_KEPT = 1024


class DeletedTopics:
    """The topics a master deleted lately, each with the commit-log end at its deletion: every
    message of the deleted topic lies below it, every message of a topic of that name created
    again above. A slave's metadata sync notices a deletion by the topic missing from the
    master's table; when the topic was created again in between (a send auto-creates it; a test
    suite deletes and recreates its topics), nothing is missing, and the slave's consume queues
    of the old topic would live on -- and be served after a failover. Slaves get this table with
    GET_ALL_TOPIC_CONFIG and drop their queues of such a topic that end below the offset.

    The latest :data:`DELETED_TOPICS_KEPT`, kept in ``deletedTopicOffsets.json`` beside
    ``topics.json`` (written before the deletion is answered): a master restarted, or killed,
    before its slaves synced still tells them (upstream has no such table at all)."""

    def __init__(self, config_dir: str | None = None, kept: int = DELETED_TOPICS_KEPT) -> None:
        self.kept = kept
        self.offsets: dict[str, int] = {}  # in deletion order
        self.path = os.path.join(config_dir, "deletedTopicOffsets.json") if config_dir else ""

    def load(self) -> None:
        if self.path:
            self.offsets = load_json(self.path, dict[str, int], dict)

    def encode(self) -> bytes:
        return msgspec.json.encode(self.offsets)

    def note(self, topic: str, commit_log_end: int) -> None:
        self.offsets.pop(topic, None)
        self.offsets[topic] = commit_log_end
        while len(self.offsets) > self.kept:
            del self.offsets[next(iter(self.offsets))]


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def validate_topic(topic: str) -> str | None:
    """Why ``topic`` is not a valid topic name, or None when it is."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not _VALID_NAME.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    limit = (
        RETRY_TOPIC_MAX_LENGTH
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
        else TOPIC_MAX_LENGTH
    )
    if len(topic.encode()) > limit:
        return f"The specified topic[{topic}] is longer than topic max length {limit}."
    return None


def validate_group(group: str) -> str | None:
    """Why ``group`` is not a valid group name, or None when it is."""
    if not group or not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group[{group}] is longer than group max length {GROUP_MAX_LENGTH}."
    if not _VALID_NAME.match(group):
        return f"the specified group[{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


class TopicConfigManager:
    """The broker's topic table, persisted as ``config/topics.json`` with a DataVersion.

    ``on_change(topic)`` is called after every change so the broker re-registers with the name servers
    (``topic``: the one created or changed; None after a deletion).
    """

    def __init__(
        self,
        *,
        config_dir: str,
        cluster_name: str,
        broker_name: str,
        auto_create_topic_enable: bool,
        default_topic_queue_nums: int,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
        trace_topic: str | None = None,
        broker_permission: int = PermName.PERM_READ | PermName.PERM_WRITE,
        now_ms: Callable[[], int],
        on_change: Callable[[str | None], None] = lambda topic: None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.log = logger or log
        self.path = os.path.join(config_dir, "topics.json")
        self.now_ms = now_ms
        self.on_change = on_change
        self.auto_create_topic_enable = auto_create_topic_enable
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        #: configs made by :meth:`adopt_stored` (one that is still in the table may be widened)
        self._adopted: dict[str, TopicConfig] = {}
        #: the table's text, topic by topic: see :meth:`encode`
        self._texts: EntryTexts[TopicConfig] = EntryTexts(with_own_attributes)
        #: the system topics this broker makes (upstream adds them to ``TopicValidator``'s set):
        #: besides the fixed ones its cluster's and its own name, ``<cluster>_REPLY_TOPIC``, the
        #: revive and member-sync topics and the trace topic
        self.system_topics: set[str] = set()
        self._system_topics(
            cluster_name,
            broker_name,
            default_topic_queue_nums,
            cluster_topic_enable,
            broker_topic_enable,
            trace_topic,
            broker_permission,
        )

    def _system_topics(
        self,
        cluster: str,
        broker: str,
        default_queue_nums: int,
        cluster_topic: bool,
        broker_topic: bool,
        trace_topic: str | None,
        broker_perm: int,
    ) -> None:
        def put(name: str, queues: int, perm: int = PermName.PERM_READ | PermName.PERM_WRITE) -> None:
            self.table[name] = TopicConfig(
                topicName=name, readQueueNums=queues, writeQueueNums=queues, perm=perm
            )
            self.system_topics.add(name)

        put(SELF_TEST_TOPIC, 1)
        if self.auto_create_topic_enable:
            put(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                default_queue_nums,
                PermName.PERM_READ | PermName.PERM_WRITE | PermName.PERM_INHERIT,
            )
        put(BENCHMARK_TOPIC, 1024)
        put(cluster, 16, PermName.PERM_INHERIT | (broker_perm if cluster_topic else 0))
        put(broker, 1, PermName.PERM_INHERIT | (broker_perm if broker_topic else 0))
        put(OFFSET_MOVED_EVENT, 1)
        put(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS)
        if trace_topic:
            put(trace_topic, 1)
        put(f"{cluster}_REPLY_TOPIC", 1)
        put(f"rmq_sys_REVIVE_LOG_{cluster}", 8)
        put(f"rmq_sys_SYNC_BROKER_MEMBER_{broker}", 1, PermName.PERM_INHERIT)
        put(TRANS_HALF_TOPIC, 1)
        put(TRANS_OP_HALF_TOPIC, 1)
        put(TRANS_CHECK_MAX_TIME_TOPIC, 1)

    def is_system(self, topic: str) -> bool:
        """Upstream ``TopicValidator.isSystemTopic`` on this broker: :func:`is_system_topic` or
        one of the broker's own :attr:`system_topics`."""
        return is_system_topic(topic) or topic in self.system_topics

    # --- persistence ---

    def load(self) -> None:
        wrapper = load_json(self.path, TopicConfigSerializeWrapper, TopicConfigSerializeWrapper)
        self.table.update(wrapper.topicConfigTable)
        self.data_version = wrapper.dataVersion

    def encode(self) -> bytes:
        """``topics.json``: the bytes of ``TopicConfigSerializeWrapper(table, data_version).encode()``,
        each topic written again only when its config changed (:class:`EntryTexts`). The table
        is written for every new topic, and encoding all of it cost ~20 us a topic: half the
        broker's time when a dev cluster held 7,000 topics."""
        return TopicConfigSerializeWrapper(
            topicConfigTable=self.table_text(),  # type: ignore[arg-type]
            dataVersion=self.data_version,
        ).encode()

    def table_text(self) -> msgspec.Raw:
        """The topic table as ``fastjson.dumps(self.table)`` writes it, from the kept texts: for
        the encodings of wrappers that hold the whole table (GET_ALL_TOPIC_CONFIG, registration)."""
        return self._texts.text_of(self.table)

    def persist(self) -> None:
        atomic_write(self.path, self.encode())

    def _changed(self, topic: str | None) -> None:
        """A new DataVersion, and ``on_change(topic)``: the topic created or changed, None when
        one was deleted (the name servers then need the whole table)."""
        self.data_version = self.data_version.next_version(self.now_ms())
        self.on_change(topic)

    # --- queries and updates ---

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(topicConfigTable=dict(self.table), dataVersion=self.data_version)

    def update(self, config: TopicConfig) -> None:
        old = self.table.get(config.topicName)
        self.table[config.topicName] = config
        if old != config:
            self.log.info("%s", describe_topic_change(old, config))
            self._changed(config.topicName)

    def delete(self, topic: str) -> TopicConfig | None:
        old = self.table.pop(topic, None)
        self._adopted.pop(topic, None)
        if old is not None:
            self.log.info("deleted topic %s", old.topicName)
            self._changed(None)
        return old

    def replace_all(self, table: dict[str, TopicConfig], data_version: DataVersion) -> None:
        """Take a master's whole table and DataVersion (slave metadata sync); nothing adopted
        survives it."""
        self.table = dict(table)
        self.data_version = data_version
        self._adopted.clear()

    def adopt_stored(self, topic: str, max_queue_id: int) -> TopicConfig | None:
        """Route ``topic``, which has messages in queues up to ``max_queue_id`` of the store, when
        it has no config here: a read-write config with that many queues (widened as more of its
        queues turn up, until the config is changed otherwise). Returns the new config, or None
        when nothing changed.

        A replica that became master may hold replicated messages of a topic whose config never
        reached it (slave metadata sync runs every few seconds; upstream loses such topics on
        failover): without a config the name servers would not route those queues and their
        messages could be neither read nor added to. Other configs are never changed (their queue
        counts may have been lowered on purpose, e.g. to drain queues before removing them).
        """
        old = self.table.get(topic)
        queues = max_queue_id + 1
        if old is not None and (old is not self._adopted.get(topic) or old.readQueueNums >= queues):
            return None
        config = TopicConfig(topicName=topic, readQueueNums=queues, writeQueueNums=queues)
        self.log.warning(
            "topic %s has messages in the store (queues up to %d) but %s: routed with %d queues",
            topic,
            max_queue_id,
            "had no config here" if old is None else "only the config adopted for it before",
            queues,
        )
        self.update(config)
        self._adopted[topic] = config
        return config

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from the template ``default_topic`` (upstream ``createTopicInSendMessageMethod``).

        Returns the new config, or None when the template does not exist or may not be inherited.
        """
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic)
        if template is None:
            return None
        perm = template.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.auto_create_topic_enable:
            perm = PermName.PERM_READ | PermName.PERM_WRITE
        if not PermName.is_inherited(perm):
            self.log.warning(
                "create topic %s refused: template %s has perm %d without INHERIT", topic, default_topic, perm
            )
            return None
        queues = max(1, min(client_queue_nums, template.writeQueueNums))
        config = TopicConfig(
            topicName=topic,
            readQueueNums=queues,
            writeQueueNums=queues,
            perm=perm & ~PermName.PERM_INHERIT,
            topicFilterType=template.topicFilterType,
            topicSysFlag=topic_sys_flag,
        )
        self.update(config)
        return config

    def create_system_like(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Create (or return) a retry/DLQ topic (upstream ``createTopicInSendMessageBackMethod``)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        config = TopicConfig(
            topicName=topic,
            readQueueNums=queue_nums,
            writeQueueNums=queue_nums,
            perm=perm,
            topicSysFlag=topic_sys_flag,
        )
        self.update(config)
        return config
