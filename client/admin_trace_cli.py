"""``rmq-admin queryMsgTraceById``: mqadmin's message trace query, with its name, flags (``-i`` message
id, ``-t`` trace topic, ``-b``/``-e`` time window, ``-c`` max messages, ``-n``) and output lines.

A tracing client (upstream ``AsyncTraceDispatcher``) sends its trace records as messages of the trace
topic (``RMQ_SYS_TRACE_TOPIC`` unless configured otherwise) whose KEYS hold the ids of the messages
traced. The command queries the trace topic by key = the message id on every broker of its route
(QUERY_MESSAGE, as ``queryMsgByKey``), decodes each body into trace records, keeps those of the message
id, and prints mqadmin's tables: one ``Pub`` table per send record, in the order found; then, per
consumer group in the order a Java ``HashMap`` iterates the group names, a table of its ``Sub`` lines
(``SubAfter`` records). ``SubBefore``, ``EndTransaction`` and ``Recall`` records are decoded but, as
upstream, not printed. ``#ClientHost`` is the address the trace message was sent from (its born host).

The body text (upstream ``TraceDataEncoder``): records separated by ``FIELD_SPLITOR`` (``\\x02``), the
fields of a record by ``CONTENT_SPLITOR`` (``\\x01``), the first field naming the record type::

    Pub            timeStamp regionId groupName topic msgId tags keys storeHost bodyLength costTime
                   msgType [offsetMsgId] success [clientHost]
    SubBefore      timeStamp regionId groupName requestId msgId retryTimes keys
    SubAfter       requestId msgId costTime success keys [contextCode [timeStamp groupName]]
    EndTransaction timeStamp regionId groupName topic msgId tags keys storeHost msgType transactionId
                   transactionState fromTransactionCheck
    Recall         timeStamp regionId groupName topic msgId success

The decoder is pure (:func:`decode_trace_data`, :func:`trace_views`, :func:`trace_lines`) and never
raises on a body: a record of a known type with a missing or unparsable field is skipped and described
in a :class:`MalformedRecord`; a record of an unknown type is ignored, as upstream does.

Deviations from mqadmin, each deliberate:

* A malformed record is skipped, with a line on stderr naming the trace message, the record and what is
  wrong, and the command goes on (mqadmin: the first one ends the command with a stack trace). So is a
  trace message whose body cannot be inflated (LZ4 or ZSTD compression; only zlib is read here).
* Fields are split as written: a trailing empty field is an empty value. Java's ``String.split`` drops
  trailing empty fields, so mqadmin fails on a ``SubBefore`` record with empty keys, and takes the
  consume time of a ``SubAfter`` record with an empty group name to be missing.
* Times are shown in the proleptic Gregorian calendar (Java's switches to the Julian one before
  October 1582); a time the platform's ``localtime`` cannot convert prints as the number of
  milliseconds. (Not a deviation: a ``SubAfter`` record without its own time -- an old or cloud
  client's -- shows the time of the query, as in mqadmin, whose ``TraceContext`` defaults to it.)
* No trace message for the id ends the command with mqadmin's reason (``query message by key finished,
  but no message.``) and the topic and key, exit status 1 (mqadmin: a stack trace). A broker answering
  the query with an error ends it too (mqadmin logs it and asks the other brokers); the brokers are
  asked in route order, one after the other (mqadmin: all at once, results in the order they arrive).
* ``-b``/``-e``/``-c`` out of Java's long/int range, or not numbers, are usage errors (exit status 2).
"""

from __future__ import annotations

import enum
import ipaddress
import re
import time
from collections.abc import Iterable

import click
import msgspec

from client.admin import MQAdmin
from client.admin_common import echo_lines, namesrv_option, run_admin
from client.admin_messages import query_by_key
from client.admin_print_cli import java_hash_order
from client.message import inflate_body
from remoting.protocol.message import (
    COMPRESSED_FLAG,
    StoredMessage,
    parse_host,
)
from remoting.protocol.topics import TRACE_TOPIC

__all__ = [
    "COMMANDS",
    "CONTENT_SPLITOR",
    "FIELD_SPLITOR",
    "MalformedRecord",
    "TraceBean",
    "TraceContext",
    "TraceType",
    "TraceView",
    "born_host_string",
    "collect_trace_views",
    "decode_trace_data",
    "query_msg_trace_by_id",
    "trace_body_text",
    "trace_lines",
    "trace_views",
]

#: upstream ``TraceConstants.CONTENT_SPLITOR``: between the fields of a record
CONTENT_SPLITOR = "\x01"
#: upstream ``TraceConstants.FIELD_SPLITOR``: between records
FIELD_SPLITOR = "\x02"

#: upstream ``MessageType`` constants, in ordinal order (a Pub record carries the ordinal)
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg", "Order_Msg")
#: upstream ``LocalTransactionState`` names (an EndTransaction record carries the name)
TRANSACTION_STATES = frozenset({"COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"})

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
# Java's Integer/Long.parseInt accept an optional sign and decimal digits (Unicode's too), nothing else
_JAVA_INTEGER = re.compile(r"[+-]?\d+")


class TraceType(enum.Enum):
    """Upstream ``TraceType``: the first field of a record."""

    Pub = "Pub"
    Recall = "Recall"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class TraceBean(msgspec.Struct, frozen=True, kw_only=True):
    """The traced message's side of a record (upstream ``TraceBean``). Fields a record type does not
    carry keep these defaults (upstream's, except ``storeHost``/``clientHost``, there the local IP)."""

    topic: str = ""
    msgId: str = ""
    offsetMsgId: str = ""
    tags: str = ""
    keys: str = ""
    storeHost: str = ""
    clientHost: str = ""
    retryTimes: int = 0
    bodyLength: int = 0
    #: upstream ``MessageType`` name (Pub and EndTransaction records)
    msgType: str | None = None
    transactionId: str | None = None
    #: upstream ``LocalTransactionState`` name (EndTransaction records)
    transactionState: str | None = None
    fromTransactionCheck: bool = False


class TraceContext(msgspec.Struct, frozen=True, kw_only=True):
    """One decoded record (upstream ``TraceContext``, whose ``traceBeans`` list holds exactly one bean
    after decoding: ``traceBean`` here)."""

    traceType: TraceType
    timeStamp: int
    regionId: str = ""
    groupName: str = ""
    costTime: int = 0
    isSuccess: bool = True
    requestId: str = ""
    contextCode: int = 0
    traceBean: TraceBean


class MalformedRecord(msgspec.Struct, frozen=True):
    """A record of a known type that could not be decoded: its position among the body's records
    (from 0), its text and why."""

    index: int
    record: str
    reason: str


class TraceView(msgspec.Struct, frozen=True, kw_only=True):
    """What mqadmin shows of a record of the queried message (upstream ``TraceView``)."""

    msgId: str
    tags: str
    keys: str
    storeHost: str
    clientHost: str | None
    costTime: int
    #: the record type's name: ``Pub``, ``SubBefore``, ``SubAfter``, ...
    msgType: str
    offSetMsgId: str
    timeStamp: int
    topic: str
    groupName: str
    #: ``success`` or ``failed``
    status: str


class _Malformed(ValueError):
    pass


def _field(line: list[str], i: int, name: str) -> str:
    if i >= len(line):
        raise _Malformed(f"no {name} (field {i + 1}; the record has {len(line)})")
    return line[i]


def _java_integer(line: list[str], i: int, name: str, low: int, high: int) -> int:
    text = _field(line, i, name)
    if _JAVA_INTEGER.fullmatch(text) is None or not low <= (value := int(text)) <= high:
        kind = "int" if high == _INT_MAX else "long"
        raise _Malformed(f"{name} {text!r} is not a Java {kind}")
    return value


def _int(line: list[str], i: int, name: str) -> int:
    return _java_integer(line, i, name, _INT_MIN, _INT_MAX)


def _long(line: list[str], i: int, name: str) -> int:
    return _java_integer(line, i, name, _LONG_MIN, _LONG_MAX)


def _bool(text: str) -> bool:
    """Java's ``Boolean.parseBoolean``: true for "true" in any case, false for anything else."""
    return text.lower() == "true"


def _message_type(line: list[str], i: int) -> str:
    ordinal = _int(line, i, "msgType")
    if not 0 <= ordinal < len(MESSAGE_TYPES):
        raise _Malformed(f"msgType {ordinal} is not a MessageType ordinal (0..{len(MESSAGE_TYPES) - 1})")
    return MESSAGE_TYPES[ordinal]


def _origin(line: list[str]) -> tuple[int, str, str]:
    """timeStamp, regionId and groupName: fields 1-3 of every record type but SubAfter."""
    return _long(line, 1, "timeStamp"), _field(line, 2, "regionId"), _field(line, 3, "groupName")


def _message_fields(line: list[str]) -> tuple[str, str, str, str, str]:
    """topic, msgId, tags, keys and storeHost: fields 4-8 of a Pub or EndTransaction record."""
    return (
        _field(line, 4, "topic"),
        _field(line, 5, "msgId"),
        _field(line, 6, "tags"),
        _field(line, 7, "keys"),
        _field(line, 8, "storeHost"),
    )


def _decode_pub(line: list[str], now_ms: int) -> TraceContext:
    timestamp, region, group = _origin(line)
    topic, msg_id, tags, keys, store_host = _message_fields(line)
    body_length = _int(line, 9, "bodyLength")
    cost = _int(line, 10, "costTime")
    msg_type = _message_type(line, 11)
    offset_msg_id, success, client_host = "", True, ""
    if len(line) == 13:  # no offsetMsgId (an old client)
        success = _bool(line[12])
    elif len(line) >= 14:
        offset_msg_id, success = line[12], _bool(line[13])
        if len(line) >= 15:
            client_host = line[14]
    bean = TraceBean(
        topic=topic,
        msgId=msg_id,
        offsetMsgId=offset_msg_id,
        tags=tags,
        keys=keys,
        storeHost=store_host,
        clientHost=client_host,
        bodyLength=body_length,
        msgType=msg_type,
    )
    return TraceContext(
        traceType=TraceType.Pub,
        timeStamp=timestamp,
        regionId=region,
        groupName=group,
        costTime=cost,
        isSuccess=success,
        traceBean=bean,
    )


def _decode_sub_before(line: list[str], now_ms: int) -> TraceContext:
    timestamp, region, group = _origin(line)
    request_id, msg_id = _field(line, 4, "requestId"), _field(line, 5, "msgId")
    retry_times = _int(line, 6, "retryTimes")
    keys = _field(line, 7, "keys")
    return TraceContext(
        traceType=TraceType.SubBefore,
        timeStamp=timestamp,
        regionId=region,
        groupName=group,
        requestId=request_id,
        traceBean=TraceBean(msgId=msg_id, retryTimes=retry_times, keys=keys),
    )


def _decode_sub_after(line: list[str], now_ms: int) -> TraceContext:
    request_id, msg_id = _field(line, 1, "requestId"), _field(line, 2, "msgId")
    keys = _field(line, 5, "keys")
    cost = _int(line, 3, "costTime")
    success = _bool(line[4])
    context_code = _int(line, 6, "contextCode") if len(line) >= 7 else 0
    timestamp, group = now_ms, ""
    if len(line) >= 9:  # a cloud or old client writes no time and group
        timestamp, group = _long(line, 7, "timeStamp"), line[8]
    return TraceContext(
        traceType=TraceType.SubAfter,
        timeStamp=timestamp,
        groupName=group,
        costTime=cost,
        isSuccess=success,
        requestId=request_id,
        contextCode=context_code,
        traceBean=TraceBean(msgId=msg_id, keys=keys),
    )


def _decode_end_transaction(line: list[str], now_ms: int) -> TraceContext:
    timestamp, region, group = _origin(line)
    topic, msg_id, tags, keys, store_host = _message_fields(line)
    msg_type = _message_type(line, 9)
    transaction_id = _field(line, 10, "transactionId")
    state = _field(line, 11, "transactionState")
    if state not in TRANSACTION_STATES:
        raise _Malformed(f"transactionState {state!r} is not one of {', '.join(sorted(TRANSACTION_STATES))}")
    from_check = _bool(_field(line, 12, "fromTransactionCheck"))
    bean = TraceBean(
        topic=topic,
        msgId=msg_id,
        tags=tags,
        keys=keys,
        storeHost=store_host,
        msgType=msg_type,
        transactionId=transaction_id,
        transactionState=state,
        fromTransactionCheck=from_check,
    )
    return TraceContext(
        traceType=TraceType.EndTransaction,
        timeStamp=timestamp,
        regionId=region,
        groupName=group,
        traceBean=bean,
    )


def _decode_recall(line: list[str], now_ms: int) -> TraceContext:
    timestamp, region, group = _origin(line)
    topic, msg_id = _field(line, 4, "topic"), _field(line, 5, "msgId")
    success = _bool(_field(line, 6, "success"))
    return TraceContext(
        traceType=TraceType.Recall,
        timeStamp=timestamp,
        regionId=region,
        groupName=group,
        isSuccess=success,
        traceBean=TraceBean(topic=topic, msgId=msg_id),
    )


_DECODERS = {
    TraceType.Pub.value: _decode_pub,
    TraceType.SubBefore.value: _decode_sub_before,
    TraceType.SubAfter.value: _decode_sub_after,
    TraceType.EndTransaction.value: _decode_end_transaction,
    TraceType.Recall.value: _decode_recall,
}


def decode_trace_data(data: str, now_ms: int) -> tuple[list[TraceContext], list[MalformedRecord]]:
    """The records of a trace message body (upstream ``TraceDataEncoder.decoderFromTraceDataString``),
    in body order, and the records of a known type that could not be decoded. Records of an unknown
    type (and empty ones) are ignored. ``now_ms`` is the time of a SubAfter record that has none."""
    contexts: list[TraceContext] = []
    malformed: list[MalformedRecord] = []
    for index, record in enumerate(data.split(FIELD_SPLITOR)):
        line = record.split(CONTENT_SPLITOR)
        decode = _DECODERS.get(line[0])
        if decode is None:
            continue
        try:
            contexts.append(decode(line, now_ms))
        except _Malformed as e:
            malformed.append(MalformedRecord(index, record, f"{line[0]} record: {e}"))
    return contexts, malformed


def trace_views(key: str, contexts: Iterable[TraceContext], client_host: str | None) -> list[TraceView]:
    """The views of the records of message ``key`` (upstream ``TraceView.decodeFromTraceTransData``);
    ``client_host`` is the born host of the trace message that held them."""
    views: list[TraceView] = []
    for c in contexts:
        bean = c.traceBean
        if bean.msgId != key:
            continue
        views.append(
            TraceView(
                msgId=bean.msgId,
                tags=bean.tags,
                keys=bean.keys,
                storeHost=bean.storeHost,
                clientHost=client_host,
                costTime=c.costTime,
                msgType=c.traceType.value,
                offSetMsgId=bean.offsetMsgId,
                timeStamp=c.timeStamp,
                topic=bean.topic,
                groupName=c.groupName,
                status="success" if c.isSuccess else "failed",
            )
        )
    return views


def born_host_string(born_host: str) -> str:
    """Upstream ``MessageExt.getBornHostString`` of a stored ``ip:port`` / ``[v6]:port``: the address
    alone, as Java's ``InetAddress.getHostAddress`` writes it (IPv6 in eight uncompressed groups, an
    IPv4-mapped one as IPv4)."""
    ip, _ = parse_host(born_host)
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return ":".join(f"{int(group, 16):x}" for group in addr.exploded.split(":"))
    return str(addr)


def trace_body_text(msg: StoredMessage) -> str:
    """The text of a trace message's body, inflated when compressed (zlib only); ValueError saying
    why when it cannot be read. Bytes that are not UTF-8 become U+FFFD, as Java's decoder does."""
    body = inflate_body(msg.body, msg.sys_flag) if msg.sys_flag & COMPRESSED_FLAG else msg.body
    return body.decode("utf-8", "replace")


def _shown_record(record: str, limit: int = 160) -> str:
    text = record.replace(CONTENT_SPLITOR, "|")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def collect_trace_views(
    key: str, messages: Iterable[StoredMessage], now_ms: int
) -> tuple[list[TraceView], list[str]]:
    """The views of message ``key`` in the trace messages, in message then record order, and one line
    per trace message or record that had to be skipped (what mqadmin would have failed on)."""
    views: list[TraceView] = []
    problems: list[str] = []
    for msg in messages:
        where = f"trace message {msg.msg_id} (offset id {msg.offset_msg_id})"
        try:
            text = trace_body_text(msg)
        except ValueError as e:
            problems.append(f"skipped {where}: {e}")
            continue
        contexts, malformed = decode_trace_data(text, now_ms)
        problems.extend(
            f"skipped record {m.index + 1} of {where}: {m.reason}: {_shown_record(m.record)}"
            for m in malformed
        )
        client_host = born_host_string(msg.born_host) if msg.born_host else None
        views.extend(trace_views(key, contexts, client_host))
    return views, problems


_ROW = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"


def _time(ms: int) -> str:
    """``DateFormatUtils.format(ms, "yyyy-MM-dd HH:mm:ss")`` in the local time zone (whole seconds
    floored as Java does, the year padded to four digits)."""
    try:
        t = time.localtime(ms // 1000)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"


def _row(kind: str, v: TraceView) -> str:
    host = v.clientHost if v.clientHost is not None else "null"
    return _ROW.format(kind, v.groupName, host, _time(v.timeStamp), f"{v.costTime}ms", v.status)


def trace_lines(views: list[TraceView]) -> list[str]:
    """mqadmin's output of the views: each Pub as a header, a row and a blank line, in order; then per
    consumer group (Java ``HashMap`` order of the names) a header, its SubAfter rows and a blank line."""
    lines: list[str] = []
    by_group: dict[str, list[TraceView]] = {}
    for v in views:
        if v.msgType == TraceType.Pub.value:
            lines.append(
                _ROW.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status")
            )
            lines.append(_row("Pub", v))
            lines.append("")
        elif v.msgType == TraceType.SubAfter.value:
            by_group.setdefault(v.groupName, []).append(v)
    for group in java_hash_order(list(by_group)):
        lines.append(
            _ROW.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status")
        )
        lines.extend(_row("Sub", v) for v in by_group[group])
        lines.append("")
    return lines


@click.command("queryMsgTraceById")
@namesrv_option
@click.option("-i", "--msgId", "msg_id", required=True, help="Message Id")
@click.option(
    "-t",
    "--traceTopic",
    "trace_topic",
    default=TRACE_TOPIC,
    show_default=True,
    help="The name value of message trace topic",
)
@click.option(
    "-b",
    "--beginTimestamp",
    "begin",
    type=click.IntRange(_LONG_MIN, _LONG_MAX),
    default=0,
    help="Begin timestamp(ms). default:0, eg:1676730526212",
)
@click.option(
    "-e",
    "--endTimestamp",
    "end",
    type=click.IntRange(_LONG_MIN, _LONG_MAX),
    default=_LONG_MAX,
    help="End timestamp(ms). default:Long.MAX_VALUE, eg:1676730526212",
)
@click.option(
    "-c",
    "--maxNum",
    "max_num",
    type=click.IntRange(_INT_MIN, _INT_MAX),
    default=64,
    help="The maximum number of messages returned by the query, default:64",
)
def query_msg_trace_by_id(
    namesrv: str, timeout: float, msg_id: str, trace_topic: str, begin: int, end: int, max_num: int
) -> None:
    """Query a message trace."""
    msg_id, trace_topic = msg_id.strip(), trace_topic.strip()

    async def go(admin: MQAdmin) -> None:
        messages = await query_by_key(admin, trace_topic, msg_id, begin, end, max_num)
        if not messages:
            raise ValueError(
                "query message by key finished, but no message. "
                f"(no message of trace topic {trace_topic} has the key {msg_id})"
            )
        views, problems = collect_trace_views(msg_id, messages, int(time.time() * 1000))
        for problem in problems:
            click.echo(f"rmq-admin queryMsgTraceById: {problem}", err=True)
        echo_lines(trace_lines(views))

    run_admin("queryMsgTraceById", go, namesrv, timeout)


COMMANDS = [query_msg_trace_by_id]
