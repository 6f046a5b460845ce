"""The trace record decoder and the output of ``rmq-admin queryMsgTraceById`` (client.admin_trace_cli).

Bodies are written out by hand in upstream's format (``TraceDataEncoder``): fields joined by 0x01,
records ended by 0x02, in the field order of each record type.
"""

from __future__ import annotations

import zlib

import pytest

from client.admin_trace_cli import (
    MalformedRecord,
    TraceContext,
    TraceType,
    TraceView,
    born_host_string,
    collect_trace_views,
    decode_trace_data,
    trace_lines,
    trace_views,
)
from remoting.protocol.message import COMPRESSED_FLAG, COMPRESSION_ZLIB_TYPE, StoredMessage

MSG_ID = "AC1FF54E81C418B4AAC24F92E1E00000"
OTHER_ID = "AC1FF54E81C418B4AAC24F92E1E00001"
T0 = 1700000000000  # 2023-11-14 22:13:20 UTC
NOW = 1800000000000  # 2027-01-15 08:00:00 UTC

# one record of each type, as a Java client of today writes them
PUB = f"Pub\x01{T0}\x01DefaultRegion\x01PG_ORDER\x01OrderTopic\x01{MSG_ID}\x01TagA\x01order-1\x01192.168.0.7:10911\x0142\x0112\x010\x01C0A8000700002A9F0000000000000010\x01true\x02"
SUB_BEFORE = f"SubBefore\x01{T0 + 1000}\x01DefaultRegion\x01CG_A\x01REQ1\x01{MSG_ID}\x012\x01order-1\x02"
SUB_AFTER = f"SubAfter\x01REQ1\x01{MSG_ID}\x017\x01false\x01order-1\x011\x01{T0 + 2000}\x01CG_A\x02"
END_TX = f"EndTransaction\x01{T0 + 3000}\x01DefaultRegion\x01PG_ORDER\x01OrderTopic\x01{MSG_ID}\x01TagA\x01order-1\x01192.168.0.7:10911\x011\x01TX-9\x01COMMIT_MESSAGE\x01true\x02"
RECALL = f"Recall\x01{T0 + 4000}\x01DefaultRegion\x01PG_ORDER\x01OrderTopic\x01{MSG_ID}\x01true\x02"


def pub(msg_id: str, group: str, ts: int, cost: int, success: str = "true") -> str:
    return (
        f"Pub\x01{ts}\x01DefaultRegion\x01{group}\x01OrderTopic\x01{msg_id}\x01\x01\x01"
        f"192.168.0.7:10911\x015\x01{cost}\x010\x01OFFSETID\x01{success}\x02"
    )


def sub_after(msg_id: str, group: str, ts: int, cost: int, success: str = "true") -> str:
    return f"SubAfter\x01REQ\x01{msg_id}\x01{cost}\x01{success}\x01\x010\x01{ts}\x01{group}\x02"


def stored(body: bytes, *, born_host: str = "10.1.2.3:50123", sys_flag: int = 0) -> StoredMessage:
    """A trace message as QUERY_MESSAGE returns it."""
    return StoredMessage(
        total_size=0,
        magic=0,
        body_crc=0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=4096,
        sys_flag=sys_flag,
        born_timestamp=T0,
        born_host=born_host,
        store_timestamp=T0,
        store_host="127.0.0.1:10911",
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic="RMQ_SYS_TRACE_TOPIC",
        properties_raw="",
        properties={"KEYS": MSG_ID, "UNIQ_KEY": "7F0000010000000000000000000000AA"},
    )


def test_a_body_of_every_record_type_decodes_each_record_in_order() -> None:
    contexts, malformed = decode_trace_data(PUB + SUB_BEFORE + SUB_AFTER + END_TX + RECALL, NOW)
    assert malformed == []
    assert [c.traceType for c in contexts] == [
        TraceType.Pub,
        TraceType.SubBefore,
        TraceType.SubAfter,
        TraceType.EndTransaction,
        TraceType.Recall,
    ]
    p, before, after, end, recall = contexts
    assert (p.timeStamp, p.regionId, p.groupName, p.costTime, p.isSuccess) == (
        T0,
        "DefaultRegion",
        "PG_ORDER",
        12,
        True,
    )
    b = p.traceBean
    assert (b.topic, b.msgId, b.tags, b.keys, b.storeHost, b.bodyLength, b.msgType, b.offsetMsgId) == (
        "OrderTopic",
        MSG_ID,
        "TagA",
        "order-1",
        "192.168.0.7:10911",
        42,
        "Normal_Msg",
        "C0A8000700002A9F0000000000000010",
    )
    assert (before.timeStamp, before.groupName, before.requestId) == (T0 + 1000, "CG_A", "REQ1")
    assert (before.traceBean.msgId, before.traceBean.retryTimes, before.traceBean.keys) == (
        MSG_ID,
        2,
        "order-1",
    )
    assert (after.requestId, after.costTime, after.isSuccess, after.contextCode) == ("REQ1", 7, False, 1)
    assert (after.timeStamp, after.groupName, after.traceBean.msgId, after.traceBean.keys) == (
        T0 + 2000,
        "CG_A",
        MSG_ID,
        "order-1",
    )
    eb = end.traceBean
    assert (end.timeStamp, end.groupName, eb.msgType, eb.transactionId, eb.transactionState) == (
        T0 + 3000,
        "PG_ORDER",
        "Trans_Msg_Half",
        "TX-9",
        "COMMIT_MESSAGE",
    )
    assert eb.fromTransactionCheck is True
    assert (recall.timeStamp, recall.isSuccess, recall.traceBean.topic, recall.traceBean.msgId) == (
        T0 + 4000,
        True,
        "OrderTopic",
        MSG_ID,
    )


@pytest.mark.parametrize(
    ("tail", "offset_msg_id", "success"),
    [
        ("", "", True),  # 12 fields: no success field, upstream's default (true)
        ("\x01false", "", False),  # 13: an old client without the offset id
        ("\x01OFF\x01false", "OFF", False),  # 14: today's clients
        ("\x01OFF\x01TRUE\x01192.168.0.9", "OFF", True),  # 15: with the client host
    ],
)
def test_a_pub_record_takes_every_field_count_upstream_reads(
    tail: str, offset_msg_id: str, success: bool
) -> None:
    record = f"Pub\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}\x01\x01\x01h:1\x010\x013\x014{tail}"
    [context], malformed = decode_trace_data(record, NOW)
    assert malformed == []
    assert (context.traceBean.offsetMsgId, context.isSuccess) == (offset_msg_id, success)
    assert (context.costTime, context.traceBean.msgType) == (3, "Order_Msg")


@pytest.mark.parametrize(
    ("record", "context_code"),
    [
        (f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01true\x01k", 0),  # 6 fields: the oldest clients
        (f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01true\x01k\x013", 3),  # 7: with the context code
        (f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01true\x01k\x013\x01", 3),  # a cloud client's: trailing 0x01
    ],
)
def test_a_sub_after_record_without_time_and_group_takes_the_query_time(
    record: str, context_code: int
) -> None:
    [context], malformed = decode_trace_data(record + "\x02", NOW)
    assert malformed == []
    assert (context.timeStamp, context.groupName, context.contextCode, context.costTime) == (
        NOW,
        "",
        context_code,
        5,
    )


def test_a_trailing_empty_field_is_an_empty_value() -> None:
    [context], malformed = decode_trace_data(
        f"SubBefore\x01{T0}\x01R\x01CG\x01REQ\x01{MSG_ID}\x010\x01\x02", NOW
    )
    assert malformed == []
    assert context.traceBean.keys == ""


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (
            f"Pub\x01yesterday\x01R\x01PG\x01T\x01{MSG_ID}\x01\x01\x01h\x010\x013\x010\x01O\x01true",
            "timeStamp 'yesterday'",
        ),
        (f"Pub\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}", "no tags (field 7; the record has 6)"),
        (f"Pub\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}\x01\x01\x01h\x010\x013\x019\x01O\x01true", "msgType 9"),
        (
            f"Pub\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}\x01\x01\x01h\x01-\x013\x010\x01O\x01true",
            "bodyLength '-'",
        ),
        (f"SubBefore\x01{T0}\x01R\x01CG\x01REQ\x01{MSG_ID}\x01x\x01k", "retryTimes 'x'"),
        (f"SubBefore\x01{T0}\x01R\x01CG", "no requestId"),
        (
            f"SubAfter\x01REQ\x01{MSG_ID}\x01abc\x01true\x01k\x010\x01{T0}\x01CG",
            "costTime 'abc' is not a Java int",
        ),
        (f"SubAfter\x01REQ\x01{MSG_ID}\x01 12\x01true\x01k", "costTime ' 12'"),  # parseInt does not trim
        (f"SubAfter\x01REQ\x01{MSG_ID}\x012147483648\x01true\x01k", "costTime '2147483648'"),  # int overflow
        (
            f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01true\x01k\x010\x011.7e12\x01CG",
            "timeStamp '1.7e12' is not a Java long",
        ),
        (f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01true", "no keys"),
        (f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01true\x01k\x01code", "contextCode 'code'"),
        (
            f"EndTransaction\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}\x01\x01\x01h\x011\x01TX\x01COMMIT\x01false",
            "transactionState 'COMMIT'",
        ),
        (
            f"EndTransaction\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}\x01\x01\x01h\x011\x01TX\x01UNKNOW",
            "no fromTransactionCheck",
        ),
        (f"Recall\x01{T0}\x01R\x01PG\x01T\x01{MSG_ID}", "no success"),
    ],
)
def test_a_malformed_record_is_reported_and_the_records_around_it_still_decode(bad: str, reason: str) -> None:
    contexts, malformed = decode_trace_data(PUB + bad + "\x02" + SUB_AFTER, NOW)
    assert [c.traceType for c in contexts] == [TraceType.Pub, TraceType.SubAfter]
    [report] = malformed
    assert (report.index, report.record) == (1, bad)
    assert report.reason.startswith(bad.split("\x01")[0] + " record: ")
    assert reason in report.reason


@pytest.mark.parametrize(
    "body",
    [
        "",
        "\x00" * 100,  # upstream's own test of this command sends 100 zero bytes
        "\x02\x02\x02",
        "Publish\x01x\x02",
        "pub\x01whatever\x02",  # type names are case-sensitive
        "\x01Pub\x01x",
    ],
)
def test_records_of_unknown_types_are_ignored_without_a_report(body: str) -> None:
    assert decode_trace_data(body, NOW) == ([], [])


@pytest.mark.parametrize(
    ("text", "success"),
    [("true", True), ("True", True), ("TRUE", True), ("yes", False), ("", False), ("1", False)],
)
def test_success_is_java_parse_boolean(text: str, success: bool) -> None:
    [context], _ = decode_trace_data(f"SubAfter\x01REQ\x01{MSG_ID}\x015\x01{text}\x01k", NOW)
    assert context.isSuccess is success


def test_java_integers_take_a_sign() -> None:
    [context], _ = decode_trace_data(
        f"SubAfter\x01REQ\x01{MSG_ID}\x01+5\x01true\x01k\x01-1\x01-1000\x01CG", NOW
    )
    assert (context.costTime, context.contextCode, context.timeStamp) == (5, -1, -1000)


def test_views_keep_only_the_records_of_the_message_id() -> None:
    body = pub(OTHER_ID, "PG_X", T0, 1) + PUB + SUB_BEFORE + sub_after(OTHER_ID, "CG_X", T0, 2) + SUB_AFTER
    contexts, _ = decode_trace_data(body, NOW)
    views = trace_views(MSG_ID, contexts, "10.1.2.3")
    assert [(v.msgType, v.groupName, v.msgId) for v in views] == [
        ("Pub", "PG_ORDER", MSG_ID),
        ("SubBefore", "CG_A", MSG_ID),
        ("SubAfter", "CG_A", MSG_ID),
    ]
    pub_view = views[0]
    assert pub_view == TraceView(
        msgId=MSG_ID,
        tags="TagA",
        keys="order-1",
        storeHost="192.168.0.7:10911",
        clientHost="10.1.2.3",
        costTime=12,
        msgType="Pub",
        offSetMsgId="C0A8000700002A9F0000000000000010",
        timeStamp=T0,
        topic="OrderTopic",
        groupName="PG_ORDER",
        status="success",
    )
    assert views[2].status == "failed"


def test_lines_are_mqadmins_pub_tables_then_consumer_groups_in_java_hash_map_order(utc: None) -> None:
    # CG_A, CG_B, CG_C hash to HashMap buckets 9, 8, 7: Java iterates them CG_C, CG_B, CG_A
    body = (
        sub_after(MSG_ID, "CG_A", T0 + 5000, 3)
        + pub(MSG_ID, "PG_ORDER", T0, 12)
        + SUB_BEFORE
        + sub_after(MSG_ID, "CG_B", T0 + 6000, 40, "false")
        + sub_after(MSG_ID, "CG_C", T0 + 7000, 5)
        + END_TX
        + sub_after(MSG_ID, "CG_A", T0 + 8000, 9)
        + pub(MSG_ID, "PG_ORDER", T0 + 60_000, 1500, "false")
    )
    contexts, _ = decode_trace_data(body, NOW)
    assert trace_lines(trace_views(MSG_ID, contexts, "10.1.2.3")) == [
        "#Type      #ProducerGroup       #ClientHost          #SendTime            #CostTimes #Status   ",
        "Pub        PG_ORDER             10.1.2.3             2023-11-14 22:13:20  12ms       success   ",
        "",
        "#Type      #ProducerGroup       #ClientHost          #SendTime            #CostTimes #Status   ",
        "Pub        PG_ORDER             10.1.2.3             2023-11-14 22:14:20  1500ms     failed    ",
        "",
        "#Type      #ConsumerGroup       #ClientHost          #ConsumerTime        #CostTimes #Status   ",
        "Sub        CG_C                 10.1.2.3             2023-11-14 22:13:27  5ms        success   ",
        "",
        "#Type      #ConsumerGroup       #ClientHost          #ConsumerTime        #CostTimes #Status   ",
        "Sub        CG_B                 10.1.2.3             2023-11-14 22:13:26  40ms       failed    ",
        "",
        "#Type      #ConsumerGroup       #ClientHost          #ConsumerTime        #CostTimes #Status   ",
        "Sub        CG_A                 10.1.2.3             2023-11-14 22:13:25  3ms        success   ",
        "Sub        CG_A                 10.1.2.3             2023-11-14 22:13:28  9ms        success   ",
        "",
    ]


def test_groups_in_one_hash_bucket_keep_their_first_appearance_order(utc: None) -> None:
    # PayConsumer and CG_A share bucket 9 of a 16-bucket HashMap; OrderConsumer is in bucket 2
    body = (
        sub_after(MSG_ID, "PayConsumer", T0, 1)
        + sub_after(MSG_ID, "CG_A", T0, 2)
        + sub_after(MSG_ID, "OrderConsumer", T0, 3)
    )
    contexts, _ = decode_trace_data(body, NOW)
    rows = [
        line.split()[1] for line in trace_lines(trace_views(MSG_ID, contexts, "h")) if line.startswith("Sub ")
    ]
    assert rows == ["OrderConsumer", "PayConsumer", "CG_A"]


def test_long_values_overflow_their_columns_as_printf_does(utc: None) -> None:
    group = "a_consumer_group_longer_than_twenty"
    contexts, _ = decode_trace_data(sub_after(MSG_ID, group, T0, 1234567890), NOW)
    lines = trace_lines(trace_views(MSG_ID, contexts, "0:0:0:0:0:0:0:1"))
    assert lines[1] == f"Sub        {group} 0:0:0:0:0:0:0:1      2023-11-14 22:13:20  1234567890ms success   "


@pytest.mark.parametrize(
    ("ms", "shown"),
    [
        (2**63 - 1, "292278994-08-17 07:12:55"),  # Long.MAX_VALUE, as DateFormatUtils writes it
        (-1500, "1969-12-31 23:59:58"),  # whole seconds floored
    ],
)
def test_times_print_as_java_formats_them(utc: None, ms: int, shown: str) -> None:
    contexts, _ = decode_trace_data(sub_after(MSG_ID, "CG", ms, 1), NOW)
    [_, row, _] = trace_lines(trace_views(MSG_ID, contexts, "h"))
    assert " ".join(row.split()[3:5]) == shown


def test_only_sub_before_and_end_transaction_records_print_nothing() -> None:
    contexts, _ = decode_trace_data(SUB_BEFORE + END_TX + RECALL, NOW)
    assert len(trace_views(MSG_ID, contexts, "h")) == 3
    assert trace_lines(trace_views(MSG_ID, contexts, "h")) == []


@pytest.mark.parametrize(
    ("born_host", "shown"),
    [
        ("127.0.0.1:50123", "127.0.0.1"),
        ("[::1]:50123", "0:0:0:0:0:0:0:1"),
        ("[fe80::1:0:0:0]:7", "fe80:0:0:0:1:0:0:0"),
        ("[::ffff:10.0.0.1]:7", "10.0.0.1"),  # Java makes an IPv4-mapped address an Inet4Address
    ],
)
def test_client_host_is_the_born_address_as_java_writes_it(born_host: str, shown: str) -> None:
    assert born_host_string(born_host) == shown


def test_views_of_stored_trace_messages_inflate_bodies_and_report_what_they_skip(utc: None) -> None:
    plain = stored((PUB + "Pub\x01oops\x02" + SUB_AFTER).encode())
    packed = stored(
        zlib.compress(sub_after(MSG_ID, "CG_Z", T0, 8).encode()),
        born_host="[::1]:5",
        sys_flag=COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE,
    )
    lz4 = stored(b"\x04\x22\x4d\x18", sys_flag=COMPRESSED_FLAG | 0x100)
    broken = stored(b"not zlib", sys_flag=COMPRESSED_FLAG)
    views, problems = collect_trace_views(MSG_ID, [plain, lz4, packed, broken], NOW)
    assert [(v.msgType, v.groupName, v.clientHost) for v in views] == [
        ("Pub", "PG_ORDER", "10.1.2.3"),
        ("SubAfter", "CG_A", "10.1.2.3"),
        ("SubAfter", "CG_Z", "0:0:0:0:0:0:0:1"),
    ]
    where = f"trace message 7F0000010000000000000000000000AA (offset id {plain.offset_msg_id})"
    assert problems == [
        f"skipped record 2 of {where}: Pub record: timeStamp 'oops' is not a Java long: 'Pub|oops'",
        f"skipped {where}: its body is compressed with type 0x100, which this client cannot inflate",
        f"skipped {where}: its compressed body cannot be inflated: "
        "Error -3 while decompressing data: incorrect header check",
    ]


def test_a_body_that_is_not_utf8_does_not_stop_the_decoder() -> None:
    body = PUB.encode() + b"\xff\xfe\x02" + SUB_AFTER.encode()
    views, problems = collect_trace_views(MSG_ID, [stored(body)], NOW)
    assert [v.msgType for v in views] == ["Pub", "SubAfter"]
    assert problems == []


def test_malformed_record_and_context_types_are_plain_values() -> None:
    [context], [report] = decode_trace_data(SUB_AFTER + "SubAfter\x01x", NOW)
    assert isinstance(context, TraceContext)
    assert report == MalformedRecord(
        1, "SubAfter\x01x", "SubAfter record: no msgId (field 3; the record has 2)"
    )
