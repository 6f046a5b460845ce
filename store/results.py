"""Statuses and results of store operations, and the message filter protocol.

Upstream: ``PutMessageStatus``, ``AppendMessageStatus``, ``PutMessageResult`` /
``AppendMessageResult``, ``GetMessageStatus``, ``GetMessageResult``, ``BoundaryType`` and
``MessageFilter``. Results are plain in-process objects (never serialized), kept small because
one is built per send and per pull.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import msgspec


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    PUT_TO_REMOTE_BROKER_FAILED = "PUT_TO_REMOTE_BROKER_FAILED"
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"
    WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"


class BoundaryType(enum.Enum):
    """Which end of a run of equal store timestamps a time search returns (upstream ``BoundaryType``)."""

    LOWER = "lower"
    UPPER = "upper"


#: A message the store's plain send path stored (:meth:`~store.put.PutPaths.try_put_message`):
#: (physical offset, record size, queue offset, store timestamp). A plain tuple: the send path
#: makes one per message, at a fraction of a :class:`PutMessageResult`'s cost (whose fields these
#: are, status PUT_OK: :meth:`PutMessageResult.placed`).
Placed = tuple[int, int, int, int]


class PutMessageResult(msgspec.Struct):
    """Outcome of :meth:`DefaultMessageStore.put_message` / ``put_messages``.

    ``wrote_offset`` / ``wrote_bytes`` locate the appended bytes in the commit log: a replication
    gate awaits acks up to :attr:`end_offset`. ``logics_offset`` is the queue offset of the (first)
    message; :attr:`msg_id` the offset message id (comma-separated for a batch).
    """

    status: PutMessageStatus
    wrote_offset: int = -1
    wrote_bytes: int = 0
    logics_offset: int = 0
    store_timestamp: int = 0
    msg_num: int = 1
    remark: str = ""
    #: store IP bytes + port (4 bytes), for :attr:`msg_id`
    store_host: bytes = b""
    #: physical offsets of every message of a batch (None for a single message)
    offsets: list[int] | None = None

    @classmethod
    def placed(cls, placed: Placed, store_host: bytes) -> PutMessageResult:
        """The result of a message stored by the plain send path."""
        phys, size, queue_offset, store_timestamp = placed
        return cls(PutMessageStatus.PUT_OK, phys, size, queue_offset, store_timestamp, 1, "", store_host)

    @property
    def is_ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        """Commit-log offset just past the appended bytes (what replication must reach)."""
        return self.wrote_offset + self.wrote_bytes

    @property
    def msg_id(self) -> str:
        """Offset message id(s): store IP + port + physical offset as uppercase hex (ref. §5.7)."""
        if self.wrote_offset < 0 or not self.store_host:
            return ""
        prefix = _host_hex(self.store_host)
        if self.offsets is None:
            return f"{prefix}{self.wrote_offset:016X}"
        return ",".join(f"{prefix}{off:016X}" for off in self.offsets)


@functools.lru_cache(maxsize=64)
def _host_hex(store_host: bytes) -> str:
    """The store-host part of an offset message id: IP bytes + port, uppercase hex."""
    return store_host.hex().upper()


class GetMessageResult:
    """Outcome of :meth:`DefaultMessageStore.get_message`.

    ``message_views`` are zero-copy memoryviews of the commit-log maps, one per message;
    ``message_queue_offsets`` their queue offsets. Call :meth:`release` once the views are sent so
    the maps of deleted files can be closed.
    """

    __slots__ = (
        "buffer_total_size",
        "max_offset",
        "message_queue_offsets",
        "message_views",
        "min_offset",
        "next_begin_offset",
        "phy_end",
        "phy_start",
        "status",
        "suggest_pulling_from_slave",
    )

    def __init__(self) -> None:
        self.status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
        #: commit-log offsets of the first message's start and the last one's end (0, 0: none),
        #: for :meth:`DefaultMessageStore.read_in` of the views before they are sent
        self.phy_start = 0
        self.phy_end = 0
        self.next_begin_offset = 0
        self.min_offset = 0
        self.max_offset = 0
        self.suggest_pulling_from_slave = False
        self.message_views: list[memoryview] = []
        self.message_queue_offsets: list[int] = []
        self.buffer_total_size = 0

    @property
    def message_count(self) -> int:
        return len(self.message_views)

    def body(self) -> bytes:
        """All messages concatenated (a copy): the pull response body."""
        return b"".join(self.message_views)

    def release(self) -> None:
        for v in self.message_views:
            v.release()
        self.message_views = []

    def __repr__(self) -> str:
        return (
            f"GetMessageResult({self.status.name}, count={self.message_count}, "
            f"next={self.next_begin_offset}, min={self.min_offset}, max={self.max_offset})"
        )


@runtime_checkable
class MessageFilter(Protocol):
    """Pull-side filter (upstream ``MessageFilter``): first by the consume-queue tags code, then,
    for messages that pass, optionally by the stored record itself."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: memoryview) -> bool: ...


class TagsCodeFilter:
    """Matches tags codes in a set (upstream ``ExpressionMessageFilter`` for TAG subscriptions:
    the broker compares hash codes only; clients re-check the exact tag)."""

    def __init__(self, codes: set[int] | frozenset[int]) -> None:
        self.codes = codes

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return tags_code in self.codes

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return True


class _CallableFilter:
    def __init__(self, fn: Callable[[int], bool]) -> None:
        self.fn = fn

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.fn(tags_code)

    def is_matched_by_commit_log(self, record: memoryview) -> bool:
        return True


def as_message_filter(f: MessageFilter | Callable[[int], bool] | None) -> MessageFilter | None:
    """Accept a :class:`MessageFilter`, a ``callable(tags_code) -> bool`` or None."""
    if f is None or hasattr(f, "is_matched_by_consume_queue"):
        return f  # type: ignore[return-value]
    if callable(f):
        return _CallableFilter(f)
    raise TypeError(f"not a message filter: {f!r}")


class QueryMessageResult:
    """Outcome of :meth:`DefaultMessageStore.query_message` (upstream ``QueryMessageResult``):
    zero-copy views of the matching messages, newest first, and the index's last update."""

    __slots__ = (
        "buffer_total_size",
        "index_last_update_phyoffset",
        "index_last_update_timestamp",
        "message_views",
        "phy_offsets",
    )

    def __init__(self) -> None:
        self.message_views: list[memoryview] = []
        self.phy_offsets: list[int] = []
        self.index_last_update_timestamp = 0
        self.index_last_update_phyoffset = 0
        self.buffer_total_size = 0

    def release(self) -> None:
        for v in self.message_views:
            v.release()
        self.message_views = []
