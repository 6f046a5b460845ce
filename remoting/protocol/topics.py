"""Upstream ``TopicValidator``'s fixed topic names and sets, shared by the broker and the tools.

A broker adds the system topics it makes for itself (its cluster's and its own name, the reply,
revive, member-sync and trace topics) to upstream's set at start; see
``broker.topics.TopicConfigManager.system_topics``. :func:`is_system_topic` is the fixed part.
"""

from __future__ import annotations

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "BENCHMARK_TOPIC",
    "NOT_ALLOWED_SEND_TOPICS",
    "OFFSET_MOVED_EVENT",
    "ROCKSDB_OFFSET_TOPIC",
    "SCHEDULE_TOPIC",
    "SELF_TEST_TOPIC",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TRACE_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "is_system_topic",
]

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
#: upstream ``RMQ_SYS_TRACE_TOPIC`` and ``RMQ_SYS_ROCKSDB_OFFSET_TOPIC``
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
ROCKSDB_OFFSET_TOPIC = "CHECKPOINT_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

#: Topics a client may never send to (upstream ``NOT_ALLOWED_SEND_TOPIC_SET``).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

#: upstream ``SYSTEM_TOPIC_SET`` as initialised, before a broker adds its own
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    TRACE_TOPIC,
    ROCKSDB_OFFSET_TOPIC,
}


def is_system_topic(topic: str) -> bool:
    """Upstream ``TopicValidator.isSystemTopic`` without any broker's own system topics."""
    return topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in SYSTEM_TOPICS
