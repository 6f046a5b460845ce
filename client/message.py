"""Client-side message types, results, subscriptions and errors.

Upstream: ``Message``, ``MessageExt`` / ``MessageClientExt``, ``SendResult`` / ``SendStatus``,
``PullResult`` / ``PullStatus``, ``ConsumeConcurrentlyStatus`` / ``ConsumeOrderlyStatus``,
``FilterAPI.buildSubscriptionData`` and ``MQClientException`` / ``MQBrokerException``.

:func:`decode_pull_body` turns a PULL_MESSAGE response body (stored-format records, see
``remoting-protocol.md`` §5) into :class:`MessageExt` objects, inflating zlib bodies and
re-filtering by tag the way Java's ``PullAPIWrapper.processPullResult`` does.
"""

from __future__ import annotations

import enum
import logging
import re
import time
import zlib
from collections.abc import Iterable

import msgspec

from remoting.codes import ResponseCode
from remoting.protocol.broker import SubscriptionData
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import (
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB_TYPE,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    iter_messages,
    offset_msg_id,
    tags_hash_code,
)

__all__ = [
    "ConsumeStatus",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "build_subscription",
    "decode_pull_body",
    "dlq_topic",
    "inflate_body",
    "retry_topic",
    "validate_group",
    "validate_topic",
]

log = logging.getLogger("client")

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY = "TBW102"
SUB_ALL = "*"
MASTER_ID = 0

_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 120


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``: where a clustering group's failed messages come back."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where messages go after ``maxReconsumeTimes`` failures."""
    return DLQ_GROUP_TOPIC_PREFIX + group


# ---------------------------------------------------------------------------------------------
# Errors


class MQClientError(Exception):
    """A client-side failure (upstream ``MQClientException``): bad argument, no route, all retries failed.

    ``code`` is a ResponseCode when the failure maps to one (e.g. 13 MESSAGE_ILLEGAL for an
    oversized message, 17 TOPIC_NOT_EXIST when no route exists), else -1.
    """

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


class MQBrokerError(MQClientError):
    """The broker answered with a non-success response code (upstream ``MQBrokerException``)."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = "CODE"
        where = f" from {addr}" if addr else ""
        super().__init__(f"{name} ({code}){where}: {remark or ''}".rstrip(": "), code)
        self.remark = remark or ""
        self.addr = addr


def validate_topic(topic: str) -> None:
    """Upstream ``Validators.checkTopic``: raises :class:`MQClientError` (code 29) for a bad name."""
    if not topic or not topic.strip():
        raise MQClientError("the specified topic is blank", ResponseCode.INVALID_PARAMETER)
    limit = 255 if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise MQClientError(
            f"the specified topic is longer than topic max length {limit}", ResponseCode.INVALID_PARAMETER
        )
    if not _NAME_RE.match(topic):
        raise MQClientError(
            f"the specified topic [{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            ResponseCode.INVALID_PARAMETER,
        )


def validate_group(group: str) -> None:
    """Upstream ``Validators.checkGroup``: raises :class:`MQClientError` for a bad group name."""
    if not group or not group.strip():
        raise MQClientError("the specified group is blank", ResponseCode.INVALID_PARAMETER)
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(
            f"the specified group is longer than group max length {GROUP_MAX_LENGTH}",
            ResponseCode.INVALID_PARAMETER,
        )
    if not _NAME_RE.match(group):
        raise MQClientError(
            f"the specified group [{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            ResponseCode.INVALID_PARAMETER,
        )


# ---------------------------------------------------------------------------------------------
# Messages


class Message:
    """A message to send: topic, body, user flag and properties (tags, keys, delay level, user ones).

    ``tags``, ``keys`` and ``delay_time_level`` are views of the ``TAGS``, ``KEYS`` and ``DELAY``
    properties. ``keys`` accepts a list (joined with spaces, upstream ``KEY_SEPARATOR``).
    """

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str = b"",
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        flag: int = 0,
        delay_time_level: int = 0,
        properties: dict[str, str] | None = None,
        wait_store_msg_ok: bool = True,
    ) -> None:
        self.topic = topic
        self.body: bytes = body.encode() if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = dict(properties) if properties else {}
        if tags:
            self.properties[PROPERTY_TAGS] = tags
        if keys:
            self.keys = keys  # type: ignore[assignment]
        if delay_time_level > 0:
            self.properties[PROPERTY_DELAY] = str(delay_time_level)
        if not wait_store_msg_ok:
            self.properties[PROPERTY_WAIT] = "false"

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} topic={self.topic!r} body={len(self.body)}B props={self.properties!r}>"
        )

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(PROPERTY_TAGS, value)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        if value is not None and not isinstance(value, str):
            value = " ".join(value)
        self._set(PROPERTY_KEYS, value)

    @property
    def delay_time_level(self) -> int:
        v = self.properties.get(PROPERTY_DELAY)
        return int(v) if v else 0

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        self._set(PROPERTY_DELAY, str(level) if level > 0 else None)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def put_user_property(self, name: str, value: str) -> None:
        self.properties[name] = value

    def _set(self, key: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(key, None)
        else:
            self.properties[key] = value


class MessageExt(Message):
    """A message as a consumer receives it (upstream ``MessageExt`` / ``MessageClientExt``).

    ``msg_id`` is the client unique id (``UNIQ_KEY``) when the message has one, else the offset
    message id; ``commit_log_offset`` is what CONSUMER_SEND_MSG_BACK sends back.
    """

    __slots__ = (
        "body_crc",
        "born_host",
        "born_timestamp",
        "broker_name",
        "commit_log_offset",
        "prepared_transaction_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_size",
        "store_timestamp",
        "sys_flag",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        *,
        flag: int = 0,
        properties: dict[str, str] | None = None,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        store_size: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "",
        store_timestamp: int = 0,
        store_host: str = "",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        broker_name: str = "",
    ) -> None:
        self.topic = topic
        self.body = body
        self.flag = flag
        self.properties = properties if properties is not None else {}
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.store_size = store_size
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.broker_name = broker_name

    def __repr__(self) -> str:
        return (
            f"<MessageExt topic={self.topic!r} queue={self.broker_name}/{self.queue_id}"
            f"@{self.queue_offset} id={self.msg_id} reconsume={self.reconsume_times}>"
        )

    @property
    def offset_msg_id(self) -> str:
        """Store host + commit-log offset as 32 (IPv4) or 56 (IPv6) hex chars."""
        return offset_msg_id(self.store_host, self.commit_log_offset) if self.store_host else ""

    @property
    def msg_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def transaction_id(self) -> str | None:
        return self.properties.get(PROPERTY_TRANSACTION_ID)

    @property
    def origin_msg_id(self) -> str | None:
        return self.properties.get(PROPERTY_ORIGIN_MESSAGE_ID)

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(topic=self.topic, brokerName=self.broker_name, queueId=self.queue_id)


# ---------------------------------------------------------------------------------------------
# Results


class SendStatus(enum.Enum):
    """Upstream ``SendStatus``; anything but SEND_OK means stored but not yet safe as configured."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


#: SEND response codes that mean "stored" (with a status) rather than "failed".
SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


class SendResult(msgspec.Struct, kw_only=True):
    """Outcome of a send (upstream ``SendResult``).

    ``msg_id`` is the client id (UNIQ_KEY; comma-joined for a batch), ``offset_msg_id`` the
    broker's store-position id, ``queue_offset`` the consume-queue offset (of the first message
    of a batch).
    """

    send_status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None


class PullStatus(enum.Enum):
    """Upstream ``PullStatus``: 0 → FOUND, 19 → NO_NEW_MSG, 20 → NO_MATCHED_MSG, 21 → OFFSET_ILLEGAL."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class PullResult(msgspec.Struct, kw_only=True):
    """Outcome of one pull (upstream ``PullResult``). ``messages`` are already tag-filtered."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = []
    suggest_which_broker_id: int = MASTER_ID


class ConsumeStatus(enum.Enum):
    """What a push-consumer listener returns.

    Concurrent listeners: CONSUME_SUCCESS or RECONSUME_LATER (upstream
    ``ConsumeConcurrentlyStatus``). Orderly listeners: SUCCESS (an alias of CONSUME_SUCCESS) or
    SUSPEND_CURRENT_QUEUE_A_MOMENT (upstream ``ConsumeOrderlyStatus``). A listener that raises
    or returns None counts as a failure (RECONSUME_LATER / SUSPEND), like upstream's null status.
    """

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


# ---------------------------------------------------------------------------------------------
# Subscriptions and pull bodies


def build_subscription(
    topic: str, expression: str | None, sub_version: int | None = None
) -> SubscriptionData:
    """A TAG subscription (``*`` or ``TagA || TagB``) with its tags and Java hash codes.

    Upstream ``FilterAPI.buildSubscriptionData``; ``sub_version`` defaults to now in ms.
    """
    version = int(time.time() * 1000) if sub_version is None else sub_version
    expr = (expression or "").strip()
    if not expr or expr == SUB_ALL:
        return SubscriptionData(topic=topic, subString=SUB_ALL, subVersion=version)
    tags: list[str] = []
    for tok in expr.split("||"):
        t = tok.strip()
        if t and t not in tags:
            tags.append(t)
    return SubscriptionData(
        topic=topic,
        subString=expr,
        tagsSet=tags,
        codeSet=[tags_hash_code(t) for t in tags],
        subVersion=version,
    )


def inflate_body(body: bytes, sys_flag: int) -> bytes:
    """The body of a message whose ``sys_flag`` marks it compressed, inflated; ValueError saying
    why when it cannot be (a compression other than zlib, or corrupt data)."""
    ctype = sys_flag & COMPRESSION_TYPE_MASK
    if ctype not in (0, COMPRESSION_ZLIB_TYPE):
        raise ValueError(f"its body is compressed with type {ctype:#x}, which this client cannot inflate")
    try:
        return zlib.decompress(body)
    except zlib.error as e:
        raise ValueError(f"its compressed body cannot be inflated: {e}") from None


def _inflate(body: bytes, sys_flag: int) -> bytes:
    try:
        return inflate_body(body, sys_flag)
    except ValueError as e:
        log.warning("a message arrived that %s; delivering it as stored", e)
        return body


def decode_pull_body(
    body: bytes | bytearray | memoryview,
    broker_name: str,
    tags: frozenset[str] | set[str] | None = None,
    *,
    min_offset: int | None = None,
    max_offset: int | None = None,
) -> list[MessageExt]:
    """Decode a pull response body into messages, dropping those whose tag is not in ``tags``.

    ``tags`` None or empty means no filtering (``*``). Compressed (zlib) bodies are inflated.
    ``MIN_OFFSET``/``MAX_OFFSET`` properties are set when given (upstream does this too).
    Raises ``remoting.protocol.message.MessageFormatError`` on a malformed body.
    """
    out: list[MessageExt] = []
    min_s = str(min_offset) if min_offset is not None else None
    max_s = str(max_offset) if max_offset is not None else None
    for sm in iter_messages(body):
        props = sm.properties
        if tags and props.get(PROPERTY_TAGS) not in tags:
            continue
        data = sm.body
        if sm.sys_flag & COMPRESSED_FLAG:
            data = _inflate(data, sm.sys_flag)
        if min_s is not None:
            props[PROPERTY_MIN_OFFSET] = min_s
        if max_s is not None:
            props[PROPERTY_MAX_OFFSET] = max_s
        out.append(
            MessageExt(
                sm.topic,
                data,
                flag=sm.flag,
                properties=props,
                queue_id=sm.queue_id,
                queue_offset=sm.queue_offset,
                commit_log_offset=sm.physical_offset,
                store_size=sm.total_size,
                sys_flag=sm.sys_flag,
                born_timestamp=sm.born_timestamp,
                born_host=sm.born_host,
                store_timestamp=sm.store_timestamp,
                store_host=sm.store_host,
                reconsume_times=sm.reconsume_times,
                prepared_transaction_offset=sm.prepared_transaction_offset,
                body_crc=sm.body_crc,
                broker_name=broker_name,
            )
        )
    return out
