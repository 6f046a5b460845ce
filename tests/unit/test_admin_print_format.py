"""The Java ``toString`` pieces of ``printMsg``: HashMap iteration order, ``MessageExt`` and the tag
counts of ``printMsgByQueue -f``."""

from __future__ import annotations

from client.admin_output import java_date
from client.admin_print_cli import java_hash_order, message_ext_str, message_line, tag_count_lines
from client.message import MessageExt


def test_java_hash_order_is_by_bucket_then_insertion_order() -> None:
    # "a" (97) and "q" (113) share bucket 1 of 16, "b" (98) is bucket 2
    assert java_hash_order(["q", "b", "a"]) == ["q", "a", "b"]
    # with 128 buckets they part: 97, 98, 113
    assert java_hash_order(["q", "b", "a"], 128) == ["a", "b", "q"]
    # 13 keys overflow 16 buckets (threshold 12): 32 buckets, where "a" (97 -> 1) and "q" (113 -> 17) part
    keys = ["q", "a", *(chr(c) for c in range(ord("c"), ord("n")))]
    assert java_hash_order(keys).index("a") < java_hash_order(keys).index("q")


def test_message_ext_str_is_javas_to_string() -> None:
    # UNIQ_KEY is bucket 28 of 128, TRAN_MSG bucket 73
    msg = MessageExt(
        "T",
        b"h\xff",
        properties={"UNIQ_KEY": "U1", "TRAN_MSG": "true"},
        queue_id=1,
        queue_offset=2,
        commit_log_offset=3,
        store_size=4,
        born_timestamp=5,
        born_host="10.0.0.1:7",
        store_timestamp=6,
        store_host="10.0.0.2:8",
        body_crc=9,
        broker_name="b",
    )
    assert message_ext_str(msg) == (
        "MessageExt [brokerName=b, queueId=1, storeSize=4, queueOffset=2, sysFlag=0, bornTimestamp=5, "
        "bornHost=/10.0.0.1:7, storeTimestamp=6, storeHost=/10.0.0.2:8, "
        f"msgId={msg.offset_msg_id}, commitLogOffset=3, bodyCRC=9, reconsumeTimes=0, "
        "preparedTransactionOffset=0, toString()=Message{topic='T', flag=0, "
        "properties={UNIQ_KEY=U1, TRAN_MSG=true}, body=[104, -1], transactionId='U1'}]"
    )
    assert message_line(msg, "UTF-8", True).startswith("MSGID: U1 MessageExt [")
    assert message_line(msg, "UTF-8", True).endswith(" BODY: h\ufffd")
    assert message_line(msg, "UTF-8", False).endswith(" BODY: NOT PRINT BODY")


def test_tag_counts_largest_first() -> None:
    assert tag_count_lines({"b": 1, "a": 3, "q": 1}) == [
        f"Tag: {'a':<30} Count: 3",
        f"Tag: {'q':<30} Count: 1",  # ties in HashMap order: "q" shares bucket 1 with "a", "b" is 2
        f"Tag: {'b':<30} Count: 1",
    ]


def test_java_date_floors_to_the_second_and_prints_an_impossible_time_as_its_number(utc: None) -> None:
    assert java_date(1_700_000_000_999) == "2023-11-14 22:13:20"
    assert java_date(-1) == "1969-12-31 23:59:59"  # a float division made this 1970-01-01 00:00:00
    assert java_date(2**63 - 1) == "292278994-08-17 07:12:55"  # as Java prints Long.MAX_VALUE
    assert java_date(2**80) == str(2**80)  # beyond any calendar (not a Java long)
