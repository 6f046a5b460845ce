"""The send path's shortcuts give exactly what the general path gives: the V2 header decoded into
V1 names, and the stored properties string (the client's string with CLUSTER / UNIQ_KEY appended
only when that equals upstream's parse + rebuild)."""

from __future__ import annotations

import os

import msgspec
import pytest

from broker.send import decode_send_header
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.headers import HeaderError, decode_header
from remoting.protocol.broker import SendMessageRequestHeader, SendMessageRequestHeaderV2
from remoting.protocol.broker import SendMessageRequestHeaderV2AsV1 as _SendHeaderV2
from remoting.protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_message,
    decode_offset_msg_id,
    parse_properties,
    properties_to_string,
    tags_hash_code,
)
from tests.integration.broker_env import CLUSTER, broker_env
from tests.integration.broker_requests import batch_body, describe, send_header, send_request

TOPIC = "FastPathTopic"


def test_v2_header_class_mirrors_v1_fields_and_v2_names() -> None:
    v1 = msgspec.structs.fields(SendMessageRequestHeader)
    fast = msgspec.structs.fields(_SendHeaderV2)
    assert [(f.name, f.type, f.default) for f in fast] == [(f.name, f.type, f.default) for f in v1]
    v2_names = [f.name for f in msgspec.structs.fields(SendMessageRequestHeaderV2)]
    assert [f.encode_name for f in fast][: len(v2_names)] == v2_names


@pytest.mark.parametrize(
    "ext",
    [
        {"a": "G", "b": "T"},
        {"a": "G", "b": "T", "c": "X", "d": "8", "e": "3", "f": "4", "g": "17", "h": "5", "i": "K\x01v\x02"},
        {"a": "G", "b": "T", "j": "2", "k": "true", "l": "16", "m": "FALSE", "n": "broker-a"},
        {"a": "G", "b": "T", "e": "", "m": "1"},  # empty = absent for non-string fields
        {"a": "G", "b": "T", "c": "", "i": "", "k": ""},  # empty strings stay, empty bool is absent
        {"a": "G", "b": "T", "bname": "x"},  # not a V2 field
    ],
)
def test_v2_fast_decode_equals_generic_decode(ext: dict[str, str]) -> None:
    cmd = request(RequestCode.SEND_MESSAGE_V2, dict(ext))
    fast = decode_send_header(cmd)
    slow = decode_header(cmd, SendMessageRequestHeaderV2).to_v1()
    assert msgspec.structs.asdict(fast) == msgspec.structs.asdict(slow)


@pytest.mark.parametrize(
    ("code", "ext", "message"),
    [
        (RequestCode.SEND_MESSAGE_V2, {"b": "T"}, "missing required header field 'a'"),
        (RequestCode.SEND_MESSAGE_V2, {"a": "G", "b": "T", "e": "x"}, "header field 'e': expected int"),
        (RequestCode.SEND_MESSAGE, {"producerGroup": "G"}, "missing required header field 'topic'"),
        (RequestCode.SEND_MESSAGE, {"producerGroup": "G", "topic": "T", "sysFlag": "1.5"}, "'sysFlag'"),
    ],
)
def test_send_header_errors_name_the_wire_field(code: int, ext: dict[str, str], message: str) -> None:
    with pytest.raises(HeaderError, match=message):
        decode_send_header(request(code, dict(ext)))


PROPERTY_STRINGS = [
    "",
    "UNIQ_KEY\x01ABC\x02WAIT\x01true\x02",
    "TAGS\x01t\x02KEYS\x01k1 k2\x02",  # no UNIQ_KEY: the broker makes one
    "UNIQ_KEY\x01ABC\x02UNIQ_KEY\x01DEF\x02",  # repeated key: last one wins, rebuilt
    "UNIQ_KEY\x01ABC\x02junk\x02a\x02",  # a piece without 0x01 and one too short: dropped
    "UNIQ_KEY\x01ABC\x02K\x01v",  # no trailing separator
    "UNIQ_KEY\x01ABC\x02CLUSTER\x01other\x02X\x01y\x02",  # CLUSTER replaced in place
    "UNIQ_KEY\x01\x02X\x01y\x02",  # empty UNIQ_KEY replaced in place
    "UNIQ_KEY\x01ABC\x02K\x01a\x01b\x02",  # value holding 0x01
    "UNIQ_KEY\x01ÄÖ标\x02名\x01值\x02",  # non-ASCII
]


async def test_stored_properties_equal_parse_and_rebuild(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            for props_s in PROPERTY_STRINGS:
                response = await env.call(send_request(TOPIC, b"body", code=code, properties=props_s))
                assert response.code == ResponseCode.SUCCESS, describe(response)
                _ip, _port, phys = decode_offset_msg_id(send_header(response).msgId)
                view = env.broker.store.look_message_by_offset(phys)
                assert view is not None
                stored = decode_message(view)
                expected = parse_properties(props_s)
                expected[PROPERTY_CLUSTER] = CLUSTER
                if not expected.get(PROPERTY_UNIQ_KEY):
                    expected[PROPERTY_UNIQ_KEY] = stored.properties[PROPERTY_UNIQ_KEY]
                assert stored.properties_raw == properties_to_string(expected), (code, props_s)
                assert send_header(response).transactionId == expected[PROPERTY_UNIQ_KEY]


async def test_batch_stored_properties_equal_parse_and_rebuild(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        bodies = [f"m{i}".encode() for i in range(len(PROPERTY_STRINGS))]
        cmd = send_request(TOPIC, batch_body(bodies, PROPERTY_STRINGS), code=RequestCode.SEND_BATCH_MESSAGE)
        response = await env.call(cmd)
        assert response.code == ResponseCode.SUCCESS, describe(response)
        header = send_header(response)
        ids = header.msgId.split(",")
        uniqs = (header.transactionId or "").split(",")
        assert len(ids) == len(uniqs) == len(bodies)
        for msg_id, uniq, body, props_s in zip(ids, uniqs, bodies, PROPERTY_STRINGS, strict=True):
            view = env.broker.store.look_message_by_offset(decode_offset_msg_id(msg_id)[2])
            assert view is not None
            stored = decode_message(view)
            assert stored.body == body
            expected = parse_properties(props_s)
            expected[PROPERTY_CLUSTER] = CLUSTER
            if not expected.get(PROPERTY_UNIQ_KEY):
                expected[PROPERTY_UNIQ_KEY] = stored.properties[PROPERTY_UNIQ_KEY]
            assert stored.properties_raw == properties_to_string(expected), props_s
            assert uniq == expected[PROPERTY_UNIQ_KEY]


async def test_batches_encoded_for_the_store_slot_carry_their_own_offsets(tmp_path: os.PathLike[str]) -> None:
    """Client-form batches are encoded for the place the store appends next (queue offsets,
    physical offsets, store timestamp and consume-queue units written by the encoder): interleaved
    with single sends and batches to other queues, every stored record still carries its own
    offsets, a valid body CRC, and the consume queue points at it."""
    async with broker_env(tmp_path) as env:
        store = env.broker.store
        sent: dict[int, list[str]] = {0: [], 1: []}
        for round_no in range(6):
            for queue_id in (0, 1):
                uniqs = [f"C0A80001{round_no:04X}{queue_id:04X}{i:012X}" for i in range(5)]
                props = [
                    f"UNIQ_KEY\x01{u}\x02TAGS\x01t{i % 2}\x02WAIT\x01true\x02" for i, u in enumerate(uniqs)
                ]
                bodies = [f"r{round_no}q{queue_id}m{i}".encode() * (i + 1) for i in range(5)]
                cmd = send_request(
                    TOPIC, batch_body(bodies, props), code=RequestCode.SEND_BATCH_MESSAGE, queue_id=queue_id
                )
                response = await env.call(cmd)
                assert response.code == ResponseCode.SUCCESS, describe(response)
                assert (send_header(response).transactionId or "").split(",") == uniqs
                sent[queue_id] += uniqs
                # a single send in between moves the log on
                single = send_request(TOPIC, b"single", code=RequestCode.SEND_MESSAGE_V2, queue_id=queue_id)
                assert (await env.call(single)).code == ResponseCode.SUCCESS
                sent[queue_id].append("")
        for queue_id, expected in sent.items():
            cq = store.queues.get(TOPIC, queue_id)
            assert cq is not None
            assert cq.max_offset == len(expected)
            for qo, uniq in enumerate(expected):
                unit = cq.unit(qo)
                assert unit is not None
                phys, size, tags = unit
                view = store.look_message_by_offset(phys)
                assert view is not None
                msg = decode_message(view, check_crc=True)
                assert (msg.queue_id, msg.queue_offset, msg.physical_offset, msg.total_size) == (
                    queue_id,
                    qo,
                    phys,
                    size,
                )
                assert msg.store_timestamp > 0
                assert tags == tags_hash_code(msg.properties.get(PROPERTY_TAGS))
                if uniq:
                    assert msg.properties[PROPERTY_UNIQ_KEY] == uniq
