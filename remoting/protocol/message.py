"""The stored-message byte format: encode, patch, decode, peek (pure, no I/O).

Upstream: ``MessageDecoder``, ``MessageExtEncoder``, ``MessageSysFlag``, ``MessageConst``,
``MessageClientIDSetter`` and ``CommitLog.checkMessageAndReturnSize``. Layout and constants are in
``shared/reference/remoting-protocol.md`` §5 (record, sysflags, properties, message ids) and §2.2
(batch body). All integers are big-endian.

A record is encoded once, on the send path, with :func:`encode_message`; the store then assigns the
queue offset, physical offset and store timestamp at append time with :func:`patch_append_fields`.
Readers use :func:`decode_message` / :func:`iter_messages` (full decode), :func:`peek_header` (size
and magic only) or :func:`dispatch_info` (what the consume queue and index need, without the body).
"""

from __future__ import annotations

import calendar
import ipaddress
import itertools
import operator
import os
import random
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache

import msgspec

from remoting.crc import crc32

# --- magic codes -----------------------------------------------------------------------------------

MAGIC_V1 = -626843481  # 0xDAA320A7: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-file filler (upstream BLANK_MAGIC_CODE)

# --- sysflag bits (upstream MessageSysFlag) -------------------------------------------------------

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_LZ4_TYPE = 0x100
COMPRESSION_ZSTD_TYPE = 0x200
COMPRESSION_ZLIB_TYPE = 0x300
COMPRESSION_TYPE_MASK = 0x700


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of ``sys_flag`` (one of the ``TRANSACTION_*_TYPE`` values)."""
    return sys_flag & TRANSACTION_TYPE_MASK


# --- properties (upstream MessageConst) -----------------------------------------------------------

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_UNIQ_KEY = PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_WAIT = PROPERTY_WAIT_STORE_MSG_OK
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_DELAY = PROPERTY_DELAY_TIME_LEVEL
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_REAL_QID = PROPERTY_REAL_QUEUE_ID
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_TRAN_MSG = PROPERTY_TRANSACTION_PREPARED
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_PGROUP = PROPERTY_PRODUCER_GROUP
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_BUYER_ID = "BUYER_ID"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSFER_FLAG = "TRANSFER_FLAG"
PROPERTY_CORRECTION_FLAG = "CORRECTION_FLAG"
PROPERTY_MQ2_FLAG = "MQ2_FLAG"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_INSTANCE_ID = "INSTANCE_ID"
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "TTL"
PROPERTY_REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_POP_CK_OFFSET = "POP_CK_OFFSET"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROPERTY_DUP_INFO = "DUP_INFO"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_CRC32 = "__CRC32#"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"
#: Properties with this prefix are never stored.
TRANSIENT_PROPERTY_PREFIX = "__RMQ.TRANSIENT."
#: Separator of several business keys in ``KEYS`` (upstream ``KEY_SEPARATOR``).
KEY_SEPARATOR = " "

#: Upper bound of the UTF-8 properties string (stored as a signed short).
MAX_PROPERTIES_LENGTH = 32767
#: Hard cap on the UTF-8 topic length.
MAX_TOPIC_LENGTH = 255


class MessageFormatError(ValueError):
    """Bytes or arguments that do not form a valid stored message / batch body."""


# --- field positions (upstream MessageDecoder *_POSITION) -----------------------------------------

TOTALSIZE_POSITION = 0
MAGIC_CODE_POSITION = 4
BODY_CRC_POSITION = 8
QUEUE_ID_POSITION = 12
FLAG_POSITION = 16
QUEUE_OFFSET_POSITION = 20
PHYSIC_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
BORN_TIMESTAMP_POSITION = 40
BORN_HOST_POSITION = 48


def store_timestamp_position(sys_flag: int) -> int:
    """Offset of STORETIMESTAMP within a record: 56 for an IPv4 born host, 68 for IPv6."""
    return 68 if sys_flag & BORNHOST_V6_FLAG else 56


# Whole fixed prefix (TOTALSIZE .. BODY length) for each (born v6, store v6) combination.
# Index = (born_v6 << 1) | store_v6.
def _prefix_format(born_v6: bool, store_v6: bool) -> str:
    born = "16si" if born_v6 else "4si"
    store = "16si" if store_v6 else "4si"
    return ">iiiiiqqiq" + born + "q" + store + "iqi"


_PREFIX = [
    struct.Struct(_prefix_format(bool(i & 2), bool(i & 1)))  # index: born<<1 | store
    for i in range(4)
]
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_SIZE_MAGIC = struct.Struct(">ii")
_SYSFLAG_V6_MASK = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG


def _prefix_for(sys_flag: int) -> struct.Struct:
    return _PREFIX[
        (2 if sys_flag & BORNHOST_V6_FLAG else 0) | (1 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0)
    ]


def crc32_masked(data: bytes | bytearray | memoryview) -> int:
    """RocketMQ's ``UtilAll.crc32``: CRC-32 (zlib's) masked with 0x7FFFFFFF."""
    return crc32(data) & 0x7FFFFFFF


# --- hosts ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _ip_bytes(ip: str) -> bytes:
    """4 bytes for an IPv4 address, 16 for an IPv6 one (brackets allowed)."""
    if ip.startswith("[") and ip.endswith("]"):
        ip = ip[1:-1]
    try:
        return socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)
    except OSError as exc:
        raise MessageFormatError(f"not an IP address: {ip!r}") from exc


def _format_host(raw: bytes, port: int) -> str:
    if len(raw) == 4:
        return f"{socket.inet_ntoa(raw)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, raw)}]:{port}"


def parse_host(host: str | tuple[str, int]) -> tuple[str, int]:
    """``"ip:port"`` / ``"[v6]:port"`` / ``(ip, port)`` → ``(ip, port)`` (no brackets)."""
    if isinstance(host, tuple):
        ip, port = host
    else:
        ip, sep, port_s = host.rpartition(":")
        if not sep or not port_s.isdigit():
            raise ValueError(f"host must be 'ip:port': {host!r}")
        port = int(port_s)
    if ip.startswith("[") and ip.endswith("]"):
        ip = ip[1:-1]
    return ip, port


# --- properties -----------------------------------------------------------------------------------


def parse_properties(s: str) -> dict[str, str]:
    """Upstream ``string2messageProperties``: split on 0x02, skip pieces shorter than 3 chars or
    without 0x01; the key runs up to the first 0x01, the value is the rest."""
    out: dict[str, str] = {}
    if not s:
        return out
    for item in s.split(PROPERTY_SEPARATOR):
        if len(item) < 3:
            continue
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[key] = value
    return out


def properties_to_string(d: Mapping[str, str | None]) -> str:
    """Upstream ``messageProperties2String``: ``name 0x01 value 0x02`` per pair, None values skipped."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in d.items() if v is not None)


# --- tags hash code -------------------------------------------------------------------------------


_HASH_CHUNK = 256
_POW31 = [pow(31, i, 1 << 32) for i in range(_HASH_CHUNK + 1)]
_POW31_DESC = _POW31[_HASH_CHUNK - 1 :: -1]  # 31^255 .. 31^0
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
# ASCII fast path: a code unit c < 128 is hi * 31 + lo with both base-31 digits, so the hash
# sum(c_i * 31^(n-1-i)) is int(HI digits + "0", 31) + int(LO digits, 31) -- two translates and
# two conversions in C instead of a multiply per character in the interpreter.
_B31 = b"0123456789abcdefghijklmnopqrstu"
_HI31 = bytes(_B31[c // 31] for c in range(128)) + bytes(128)
_LO31 = bytes(_B31[c % 31] for c in range(128)) + bytes(128)
_ASCII_CHUNK = 1024  # well below int()'s 4300-digit limit; conversion cost grows quadratically


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()``: over UTF-16 code units, as a signed 32-bit int ("" → 0)."""
    if s.isascii():
        data = s.encode("ascii")
        n = len(data)
        if n <= _ASCII_CHUNK:
            if not n:
                return 0
            h = (int(data.translate(_HI31) + b"0", 31) + int(data.translate(_LO31), 31)) & 0xFFFFFFFF
        else:
            h = 0
            for start in range(0, n, _ASCII_CHUNK):
                chunk = data[start : start + _ASCII_CHUNK]
                part = int(chunk.translate(_HI31) + b"0", 31) + int(chunk.translate(_LO31), 31)
                h = (h * pow(31, len(chunk), 1 << 32) + part) & 0xFFFFFFFF
        return h - 0x100000000 if h & 0x80000000 else h
    units = memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H")
    h = 0
    # sum(unit * 31^k) per chunk runs in C; chunks are folded Horner-style.
    for start in range(0, len(units), _HASH_CHUNK):
        chunk = units[start : start + _HASH_CHUNK]
        k = len(chunk)
        h = (h * _POW31[k] + sum(map(operator.mul, chunk, _POW31_DESC[_HASH_CHUNK - k :]))) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def java_string_hash_extend(prefix_hash: int, s: str) -> int:
    """Java ``String.hashCode()`` of ``prefix + s`` as an unsigned 32-bit int, from the unsigned
    hash of ``prefix`` alone: ``prefix_hash * 31^len16(s) + hash(s)`` mod 2^32 (``len16`` counts
    UTF-16 code units). Lets callers hash ``topic#key`` without building the string."""
    if s.isascii():
        n = len(s)
        if n <= _ASCII_CHUNK:
            if not n:
                return prefix_hash
            data = s.encode()  # ASCII: the UTF-8 bytes are the code units
            return (
                prefix_hash * (_POW31[n] if n <= _HASH_CHUNK else pow(31, n, 1 << 32))
                + 31 * int(data.translate(_HI31), 31)
                + int(data.translate(_LO31), 31)
            ) & 0xFFFFFFFF
        units = n
    else:
        units = len(s.encode(_UTF16_NATIVE, "surrogatepass")) // 2
    return (prefix_hash * pow(31, units, 1 << 32) + java_string_hash(s)) & 0xFFFFFFFF


@lru_cache(maxsize=4096)
def tags_hash_code(tag: str | None) -> int:
    """The consume-queue tags code: Java ``String.hashCode()`` of ``tag``, 0 for None or ""
    (cached: tags repeat)."""
    return java_string_hash(tag) if tag else 0


# --- encode / patch -------------------------------------------------------------------------------


def encode_message(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    body: bytes | bytearray | memoryview,
    properties: str,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
) -> bytearray:
    """Encode one full commit-log record.

    The V6 bits of ``sys_flag`` are set from the host address families (and cleared for IPv4);
    MAGIC_V2 with a 2-byte topic length is used only when the topic's UTF-8 length exceeds 127.
    Raises :class:`MessageFormatError` when the topic exceeds 255 bytes or the properties 32767.
    """
    topic_b, magic = topic_field(topic)
    props_b = properties.encode()
    if len(props_b) > MAX_PROPERTIES_LENGTH:  # checked before the hosts, as it always was
        raise MessageFormatError(
            f"properties are {len(props_b)} bytes in UTF-8, the limit is {MAX_PROPERTIES_LENGTH}"
        )
    return encode_record(
        topic_b,
        magic,
        queue_id,
        flag,
        body,
        props_b,
        sys_flag,
        born_timestamp,
        _ip_bytes(born_host[0]),
        born_host[1],
        _ip_bytes(store_host[0]),
        store_host[1],
        reconsume_times,
        prepared_transaction_offset,
        store_timestamp,
        queue_offset,
        physical_offset,
    )


@lru_cache(maxsize=4096)
def topic_field(topic: str) -> tuple[bytes, int]:
    """The TOPIC part of a record for ``topic`` (length byte(s) + UTF-8 bytes) and the magic code
    that goes with it. Raises :class:`MessageFormatError` beyond 255 bytes."""
    topic_b = topic.encode()
    n = len(topic_b)
    if n > MAX_TOPIC_LENGTH:
        raise MessageFormatError(f"topic is {n} bytes in UTF-8, the limit is {MAX_TOPIC_LENGTH}")
    if n > 127:
        return _U16.pack(n) + topic_b, MAGIC_V2
    return bytes((n,)) + topic_b, MAGIC_V1


def host_bytes(host: str | tuple[str, int]) -> tuple[bytes, int]:
    """``(ip bytes, port)`` of ``"ip:port"`` / ``"[v6]:port"`` / ``(ip, port)`` for
    :func:`encode_record` (4 IP bytes for IPv4, 16 for IPv6)."""
    ip, port = parse_host(host)
    return _ip_bytes(ip), port


def encode_record(
    topic_field: bytes,
    magic: int,
    queue_id: int,
    flag: int,
    body: bytes | bytearray | memoryview,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_ip: bytes,
    born_port: int,
    store_ip: bytes,
    store_port: int,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
) -> bytearray:
    """:func:`encode_message` from parts already in wire form: ``topic_field`` / ``magic`` from
    :func:`topic_field`, UTF-8 ``properties``, hosts from :func:`host_bytes` (the send path keeps
    those per topic and connection). Raises :class:`MessageFormatError` for properties over 32767
    bytes."""
    out = bytearray()
    append_record(
        out,
        topic_field,
        magic,
        queue_id,
        flag,
        body,
        properties,
        sys_flag,
        born_timestamp,
        born_ip,
        born_port,
        store_ip,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        store_timestamp,
        queue_offset,
        physical_offset,
    )
    return out


def append_record(
    out: bytearray,
    topic_field: bytes,
    magic: int,
    queue_id: int,
    flag: int,
    body: bytes | bytearray | memoryview,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_ip: bytes,
    born_port: int,
    store_ip: bytes,
    store_port: int,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
) -> int:
    """:func:`encode_record` appending to ``out`` (a batch is encoded into one buffer); returns
    the record's size. Nothing is appended when it raises."""
    props_len = len(properties)
    if props_len > MAX_PROPERTIES_LENGTH:
        raise MessageFormatError(
            f"properties are {props_len} bytes in UTF-8, the limit is {MAX_PROPERTIES_LENGTH}"
        )
    idx = 0
    sys_flag &= ~_SYSFLAG_V6_MASK
    if len(born_ip) == 16:
        sys_flag |= BORNHOST_V6_FLAG
        idx = 2
    if len(store_ip) == 16:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
        idx |= 1
    prefix = _PREFIX[idx]
    body_len = len(body)
    total = prefix.size + body_len + len(topic_field) + 2 + props_len
    out += prefix.pack(
        total,
        magic,
        crc32(body) & 0x7FFFFFFF,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_ip,
        born_port,
        store_timestamp,
        store_ip,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        body_len,
    )
    out += body
    out += topic_field
    out += _I16.pack(props_len)
    out += properties
    return total


def patch_append_fields(
    buf: bytearray | memoryview, pos: int, *, queue_offset: int, physical_offset: int, store_timestamp: int
) -> None:
    """Write the fields the store assigns at append time into the record starting at ``buf[pos]``."""
    _I64.pack_into(buf, pos + QUEUE_OFFSET_POSITION, queue_offset)
    _I64.pack_into(buf, pos + PHYSIC_OFFSET_POSITION, physical_offset)
    sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    _I64.pack_into(buf, pos + store_timestamp_position(sys_flag), store_timestamp)


# --- decode ---------------------------------------------------------------------------------------


class StoredMessage(msgspec.Struct, kw_only=True):
    """A decoded commit-log record (upstream ``MessageExt``). Hosts are ``"ip:port"``
    (``"[v6]:port"`` for IPv6)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties_raw: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def msg_id(self) -> str:
        """What clients show as the message id: UNIQ_KEY if present, else the offset msg id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id


class DispatchRequest(msgspec.Struct, kw_only=True, frozen=True):
    """What dispatch (consume queue + index) needs from one record (upstream ``DispatchRequest``).

    ``tags_code`` is the Java hash of TAGS; the store substitutes the delivery time for
    SCHEDULE_TOPIC_XXXX itself (it has the delay levels). ``properties`` is the parsed map.
    """

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    born_timestamp: int
    prepared_transaction_offset: int
    properties: dict[str, str]


def peek_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """``(total_size, magic)`` of the record (or BLANK filler) at ``pos``."""
    try:
        return _SIZE_MAGIC.unpack_from(buf, pos)  # type: ignore[return-value]
    except struct.error as exc:
        raise MessageFormatError(f"no record header at {pos}: {exc}") from exc


def _parse(
    buf: bytes | bytearray | memoryview, pos: int, check_crc: bool, want_body: bool
) -> tuple[tuple, bytes | None, str, str, int]:
    """Shared decoder: returns (prefix fields, body or None, topic, properties string, end)."""
    n = len(buf)
    if pos < 0 or pos + BORN_HOST_POSITION > n:
        raise MessageFormatError(f"record at {pos} is truncated (buffer is {n} bytes)")
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        if magic == BLANK_MAGIC:
            raise MessageFormatError(f"blank filler at {pos}, not a message")
        raise MessageFormatError(f"bad magic code {magic:#x} at {pos}")
    end = pos + total
    if total < BORN_HOST_POSITION or end > n:
        raise MessageFormatError(f"record at {pos} has total size {total}, buffer has {n - pos} bytes left")
    sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    prefix = _prefix_for(sys_flag)
    p = pos + prefix.size
    if p > end:
        raise MessageFormatError(f"record at {pos} is shorter ({total}) than its fixed part")
    fields = prefix.unpack_from(buf, pos)
    body_len = fields[-1]
    body_end = p + body_len
    if body_len < 0 or body_end > end:
        raise MessageFormatError(f"record at {pos}: body length {body_len} overruns the record")
    body: bytes | None = None
    if want_body or check_crc:
        body = bytes(buf[p:body_end])
        if check_crc and (crc32(body) & 0x7FFFFFFF) != fields[2]:
            raise MessageFormatError(f"record at {pos}: body CRC mismatch")
    p = body_end
    try:
        if magic == MAGIC_V1:
            topic_len = buf[p]
            p += 1
        else:
            topic_len = _U16.unpack_from(buf, p)[0]
            p += 2
        topic = bytes(buf[p : p + topic_len]).decode()
        p += topic_len
        props_len = _I16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len != end:
            raise MessageFormatError(
                f"record at {pos}: properties length {props_len} does not fit total size {total}"
            )
        props = bytes(buf[p:end]).decode() if props_len else ""
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise MessageFormatError(f"record at {pos} is malformed: {exc}") from exc
    return fields, body, topic, props, end


def decode_message(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False
) -> StoredMessage:
    """Decode the record at ``buf[pos]``. Raises :class:`MessageFormatError` on a bad magic code,
    lengths inconsistent with TOTALSIZE or the buffer, or (with ``check_crc``) a body CRC mismatch."""
    f, body, topic, props, _ = _parse(buf, pos, check_crc, True)
    assert body is not None
    return StoredMessage(
        total_size=f[0],
        magic=f[1],
        body_crc=f[2],
        queue_id=f[3],
        flag=f[4],
        queue_offset=f[5],
        physical_offset=f[6],
        sys_flag=f[7],
        born_timestamp=f[8],
        born_host=_format_host(f[9], f[10]),
        store_timestamp=f[11],
        store_host=_format_host(f[12], f[13]),
        reconsume_times=f[14],
        prepared_transaction_offset=f[15],
        body=body,
        topic=topic,
        properties_raw=props,
        properties=parse_properties(props),
    )


def iter_messages(buf: bytes | bytearray | memoryview) -> Iterator[StoredMessage]:
    """Decode concatenated records (a pull / query response body) until the end of ``buf``."""
    pos = 0
    n = len(buf)
    while pos < n:
        msg = decode_message(buf, pos)
        yield msg
        pos += msg.total_size


def dispatch_info(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = False
) -> DispatchRequest:
    """Extract what dispatch needs from the record at ``buf[pos]`` without copying the body
    (unless ``check_crc``). Raises :class:`MessageFormatError` like :func:`decode_message`."""
    f, _, topic, props_s, _ = _parse(buf, pos, check_crc, False)
    props = parse_properties(props_s)
    return DispatchRequest(
        topic=topic,
        queue_id=f[3],
        commit_log_offset=f[6],
        msg_size=f[0],
        tags_code=tags_hash_code(props.get(PROPERTY_TAGS)),
        store_timestamp=f[11],
        consume_queue_offset=f[5],
        keys=props.get(PROPERTY_KEYS),
        uniq_key=props.get(PROPERTY_UNIQ_KEY),
        sys_flag=f[7],
        born_timestamp=f[8],
        prepared_transaction_offset=f[15],
        properties=props,
    )


# --- message ids ----------------------------------------------------------------------------------


def offset_msg_id(store_host: tuple[str, int] | str, physical_offset: int) -> str:
    """Upstream ``createMessageId``: store IP + port (int) + offset (long) as uppercase hex
    (32 chars for IPv4, 56 for IPv6)."""
    ip, port = parse_host(store_host)
    return (_ip_bytes(ip) + struct.pack(">iq", port, physical_offset)).hex().upper()


def decode_offset_msg_id(s: str) -> tuple[str, int, int]:
    """Inverse of :func:`offset_msg_id`: ``(ip, port, physical_offset)``; ValueError on bad input."""
    if len(s) not in (32, 56):
        raise ValueError(f"offset message id must be 32 or 56 hex chars, got {len(s)}")
    try:
        raw = bytes.fromhex(s)
    except ValueError as exc:
        raise ValueError(f"offset message id is not hex: {s!r}") from exc
    ip_len = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, ip_len)
    family = socket.AF_INET if ip_len == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw[:ip_len]), port, offset


def _start_of_month_ms(now_ms: int) -> tuple[int, int]:
    """(start of the current local month, start of the next one) in ms since the epoch."""
    t = time.localtime(now_ms / 1000)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    days = calendar.monthrange(t.tm_year, t.tm_mon)[1]
    nxt = time.mktime((t.tm_year, t.tm_mon, days + 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(nxt * 1000)


class UniqIdGenerator:
    """Client unique message ids (upstream ``MessageClientIDSetter``, property UNIQ_KEY).

    16 bytes as 32 uppercase hex chars: IPv4 (4), pid low 16 bits (2), a per-generator random int (4),
    ms since the start of the current local month (4), counter (2).
    """

    def __init__(
        self,
        ip: str = "127.0.0.1",
        *,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        rng: random.Random | None = None,
    ) -> None:
        raw_ip = _ip_bytes(ip)
        if len(raw_ip) != 4:
            raw_ip = raw_ip[-4:]  # keep the 32-char form; ids are opaque anyway
        r = rng if rng is not None else random.Random()
        self._fixed = raw_ip + struct.pack(">HI", os.getpid() & 0xFFFF, r.getrandbits(32))
        self._now_ms = now_ms
        self._counter = itertools.count(r.getrandbits(16))
        self._month_start, self._next_month = _start_of_month_ms(now_ms())

    def create(self) -> str:
        now = self._now_ms()
        if now >= self._next_month or now < self._month_start:
            self._month_start, self._next_month = _start_of_month_ms(now)
        tail = struct.pack(">IH", (now - self._month_start) & 0xFFFFFFFF, next(self._counter) & 0xFFFF)
        return (self._fixed + tail).hex().upper()


def decode_uniq_id(uniq_id: str, now_ms: int) -> tuple[str, int]:
    """(client address, nearly the creation time in ms) of a UNIQ_KEY (upstream
    ``MessageClientIDSetter.getIPStrFromID`` / ``getNearlyTimeFromID``): the id holds only the
    milliseconds since the start of a local month, taken as the current month's unless that is
    after ``now_ms``, then the previous month's (upstream also for a time equal to now). 28-byte
    ids carry an IPv6 address.
    ValueError for anything that is not such an id."""
    try:
        raw = bytes.fromhex(uniq_id.strip())
    except ValueError:
        raise ValueError(f"not a message id (hex): {uniq_id!r}") from None
    if len(raw) not in (16, 28):
        raise ValueError(f"not a message id: {len(raw)} bytes, 16 (IPv4) or 28 (IPv6) expected")
    ip_len = 16 if len(raw) == 28 else 4
    host = str(ipaddress.ip_address(raw[:ip_len]))
    (span,) = struct.unpack_from(">I", raw, ip_len + 6)
    start, _ = _start_of_month_ms(now_ms)
    if start + span > now_ms:
        start, _ = _start_of_month_ms(start - 1)
    return host, start + span


_default_uniq: UniqIdGenerator | None = None


def create_uniq_id() -> str:
    """A fresh UNIQ_KEY from a process-wide :class:`UniqIdGenerator`."""
    global _default_uniq
    if _default_uniq is None:
        _default_uniq = UniqIdGenerator()
    return _default_uniq.create()


# --- batch body (SEND_BATCH_MESSAGE, C++ batch:"1") -----------------------------------------------


class BatchItem(msgspec.Struct, frozen=True):
    """One inner message of a batch body: user flag, body, its own properties string."""

    flag: int
    body: bytes
    properties: str


_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic (0), bodyCRC (0), flag, bodyLen
_BATCH_FIXED = _BATCH_HEAD.size + 2


def decode_batch_body(body: bytes | bytearray | memoryview) -> list[BatchItem]:
    """Split a batch body (upstream ``MessageDecoder.decodesBatch`` layout) into items.
    Raises :class:`MessageFormatError` when a record's lengths do not add up or overrun the body."""
    return [BatchItem(flag, bytes(data), props) for flag, data, props in split_batch_body(body)]


def split_batch_body(body: bytes | bytearray | memoryview) -> list[tuple[int, memoryview, str]]:
    """:func:`decode_batch_body` as ``(flag, body view, properties)`` tuples; the views point into
    ``body`` (nothing is copied). Same checks and errors; the whole body is checked first."""
    items: list[tuple[int, memoryview, str]] = []
    pos = 0
    n = len(body)
    mv = memoryview(body)
    head = _BATCH_HEAD
    head_size = head.size
    while pos < n:
        if pos + _BATCH_FIXED > n:
            raise MessageFormatError(f"batch record at {pos} is truncated ({n - pos} bytes left)")
        total, _magic, _crc, flag, body_len = head.unpack_from(body, pos)
        p = pos + head_size
        if body_len < 0 or p + body_len + 2 > n:
            raise MessageFormatError(f"batch record at {pos}: body length {body_len} overruns the batch")
        data = mv[p : p + body_len]
        p += body_len
        props_len = _I16.unpack_from(body, p)[0]
        p += 2
        if props_len < 0 or p + props_len > n:
            raise MessageFormatError(
                f"batch record at {pos}: properties length {props_len} overruns the batch"
            )
        if total != p + props_len - pos:
            raise MessageFormatError(
                f"batch record at {pos}: total size {total} != {p + props_len - pos} from its lengths"
            )
        try:
            props = str(mv[p : p + props_len], "utf-8")
        except UnicodeDecodeError as exc:
            raise MessageFormatError(f"batch record at {pos}: properties are not UTF-8") from exc
        items.append((flag, data, props))
        pos = p + props_len
    return items


def encode_batch_body(items: Iterable[BatchItem]) -> bytes:
    """Inverse of :func:`decode_batch_body` (magic and body CRC written as 0, like upstream)."""
    parts: list[bytes] = []
    for it in items:
        props_b = it.properties.encode()
        if len(props_b) > MAX_PROPERTIES_LENGTH:
            raise MessageFormatError(f"properties are {len(props_b)} bytes, limit {MAX_PROPERTIES_LENGTH}")
        total = _BATCH_FIXED + len(it.body) + len(props_b)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, it.flag, len(it.body)))
        parts.append(bytes(it.body))
        parts.append(_I16.pack(len(props_b)))
        parts.append(props_b)
    return b"".join(parts)
