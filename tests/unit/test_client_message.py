"""Client message types, subscriptions, pull-body decoding and SEND header construction."""

from __future__ import annotations

import zlib

import pytest

from client.message import (
    ConsumeStatus,
    Message,
    MQClientError,
    build_subscription,
    decode_pull_body,
    validate_group,
    validate_topic,
)
from client.producer import build_send_header
from remoting.command import RemotingCommand
from remoting.headers import decode_header
from remoting.protocol.broker import SendMessageRequestHeader, SendMessageRequestHeaderV2
from remoting.protocol.message import encode_message, properties_to_string, tags_hash_code


def record(offset: int, body: bytes, props: dict[str, str], *, sys_flag: int = 0, topic: str = "T") -> bytes:
    return bytes(
        encode_message(
            topic=topic,
            queue_id=3,
            flag=7,
            body=body,
            properties=properties_to_string(props),
            sys_flag=sys_flag,
            born_timestamp=1_700_000_000_000,
            born_host=("10.0.0.9", 5555),
            store_host=("10.0.0.1", 10911),
            reconsume_times=2,
            store_timestamp=1_700_000_000_100,
            queue_offset=offset,
            physical_offset=1000 + offset * 100,
        )
    )


def test_decode_pull_body_refilters_tags_and_fills_message_fields() -> None:
    body = b"".join(
        [
            record(0, b"a", {"TAGS": "TagA", "UNIQ_KEY": "U0"}),
            record(1, b"b", {"TAGS": "TagB"}),
            record(2, b"n", {}),
            record(3, b"c", {"TAGS": "TagC", "KEYS": "k1 k2"}),
        ]
    )
    msgs = decode_pull_body(body, "broker-a", frozenset({"TagA", "TagC"}), min_offset=0, max_offset=4)
    assert [m.body for m in msgs] == [b"a", b"c"]
    a, c = msgs
    assert a.msg_id == "U0"
    assert c.msg_id == c.offset_msg_id
    assert c.offset_msg_id == "0A00000100002A9F" + f"{1300:016X}"
    assert (a.topic, a.queue_id, a.queue_offset, a.flag) == ("T", 3, 0, 7)
    assert (a.commit_log_offset, a.reconsume_times, a.broker_name) == (1000, 2, "broker-a")
    assert a.born_host == "10.0.0.9:5555"
    assert a.store_host == "10.0.0.1:10911"
    assert a.store_timestamp == 1_700_000_000_100
    assert c.keys == "k1 k2"
    assert a.properties["MIN_OFFSET"] == "0"
    assert a.properties["MAX_OFFSET"] == "4"
    assert a.message_queue.queueId == 3
    # no filter: everything
    assert len(decode_pull_body(body, "broker-a", None)) == 4


def test_decode_pull_body_inflates_zlib_bodies() -> None:
    raw = b"hello world " * 500
    body = record(0, zlib.compress(raw), {}, sys_flag=0x1) + record(1, zlib.compress(raw), {}, sys_flag=0x301)
    assert [m.body for m in decode_pull_body(body, "b", None)] == [raw, raw]


def test_build_subscription_parses_tags_and_java_hash_codes() -> None:
    sub = build_subscription("T", " TagA ||TagB|| TagA ", sub_version=42)
    assert sub.subString == "TagA ||TagB|| TagA"
    assert sub.tagsSet == ["TagA", "TagB"]
    assert sub.codeSet == [tags_hash_code("TagA"), tags_hash_code("TagB")]
    assert sub.subVersion == 42
    everything = build_subscription("T", "*")
    assert everything.subString == "*"
    assert everything.tagsSet == []
    assert build_subscription("T", "").subString == "*"


def test_message_views_of_properties() -> None:
    m = Message("T", "text", tags="A", keys=["k1", "k2"], delay_time_level=3, wait_store_msg_ok=False)
    assert m.body == b"text"
    assert m.properties == {"TAGS": "A", "KEYS": "k1 k2", "DELAY": "3", "WAIT": "false"}
    m.tags = None
    m.delay_time_level = 0
    m.put_user_property("x", "y")
    assert m.properties == {"KEYS": "k1 k2", "WAIT": "false", "x": "y"}
    assert m.delay_time_level == 0


def test_name_validation() -> None:
    validate_topic("Topic_1-a|%b")
    validate_topic("%RETRY%" + "g" * 200)
    for bad in ("", "  ", "has space", "T" * 128, "ünïcode"):
        with pytest.raises(MQClientError):
            validate_topic(bad)
    validate_group("CG_1")
    with pytest.raises(MQClientError):
        validate_group("g" * 121)


def test_consume_status_aliases() -> None:
    assert ConsumeStatus.SUCCESS is ConsumeStatus.CONSUME_SUCCESS
    assert ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT is not ConsumeStatus.RECONSUME_LATER


@pytest.mark.parametrize("v2", [True, False])
def test_send_header_decodes_as_the_broker_reads_it(v2: bool) -> None:
    ext = build_send_header(
        v2=v2,
        group="PG",
        topic="T",
        queue_id=3,
        sys_flag=0x301,
        born_timestamp=1_700_000_000_000,
        flag=9,
        properties="TAGS\x01A\x02",
        default_topic_queue_nums=4,
        reconsume_times=2,
        max_reconsume_times=16,
        batch=False,
        broker_name="broker-a",
    )
    assert all(isinstance(v, str) for v in ext.values())
    cmd = RemotingCommand(code=310 if v2 else 10, ext_fields=ext)
    h = (
        decode_header(cmd, SendMessageRequestHeaderV2).to_v1()
        if v2
        else decode_header(cmd, SendMessageRequestHeader)
    )
    assert (h.producerGroup, h.topic, h.defaultTopic, h.defaultTopicQueueNums) == ("PG", "T", "TBW102", 4)
    assert (h.queueId, h.sysFlag, h.bornTimestamp, h.flag) == (3, 0x301, 1_700_000_000_000, 9)
    assert (h.properties, h.reconsumeTimes, h.maxReconsumeTimes, h.batch) == ("TAGS\x01A\x02", 2, 16, False)
    assert h.unitMode is False
    assert (h.brokerName if v2 else h.bname) == "broker-a"
