"""Frame codec: round trips, arbitrary chunking, hand-built reference frames, every FrameError."""

from __future__ import annotations

import json
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting.codec import (
    BinaryHeaderError,
    FrameDecoder,
    FrameError,
    FrameLengthError,
    HeaderDecodeError,
    HeaderLengthError,
    MissingFieldError,
    UnknownSerializeTypeError,
    encode,
)
from remoting.command import FLAG_RESPONSE, LanguageCode, RemotingCommand, SerializeType


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    """A frame built by hand from the reference table (not by our encoder)."""
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def wire(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) for p in encode(cmd))


def normalized(cmd: RemotingCommand) -> RemotingCommand:
    """What a decoded copy of ``cmd`` must equal (empty body -> None; binary drops empty strings)."""
    ext = cmd.ext_fields
    remark = cmd.remark
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        if ext is not None:
            ext = {k: v for k, v in ext.items() if k and v} if ext else None
        remark = remark or None
    return RemotingCommand(
        code=cmd.code,
        opaque=cmd.opaque,
        flag=cmd.flag,
        language=cmd.language,
        version=cmd.version,
        remark=remark,
        ext_fields=ext,
        body=cmd.body_bytes or None,
        serialize_type=cmd.serialize_type,
    )


int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
text = st.text(max_size=20)


@st.composite
def commands(draw: st.DrawFn, stype: SerializeType) -> RemotingCommand:
    small = stype == SerializeType.ROCKETMQ
    return RemotingCommand(
        code=draw(int16 if small else int32),
        opaque=draw(int32),
        flag=draw(st.integers(0, 3)),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(int16 if small else int32),
        remark=draw(st.none() | text),
        ext_fields=draw(st.none() | st.dictionaries(text, text, max_size=6)),
        body=draw(st.none() | st.binary(max_size=300)),
        serialize_type=stype,
    )


any_command = st.sampled_from(SerializeType).flatmap(commands)


@given(any_command)
def test_round_trip_both_serialize_types(cmd: RemotingCommand) -> None:
    assert FrameDecoder().feed(wire(cmd)) == [normalized(cmd)]


@given(st.lists(any_command, min_size=1, max_size=5), st.randoms(use_true_random=False))
@settings(max_examples=60)
def test_random_chunking_yields_same_commands(cmds: list[RemotingCommand], rnd: random.Random) -> None:
    data = b"".join(wire(c) for c in cmds)
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    pos = 0
    while pos < len(data):
        step = rnd.randint(1, 64)
        got += dec.feed(data[pos : pos + step])
        pos += step
    assert got == [normalized(c) for c in cmds]
    assert dec.buffered == 0


@pytest.mark.parametrize("stype", list(SerializeType))
def test_every_split_point_yields_same_commands(stype: SerializeType) -> None:
    cmds = [
        RemotingCommand(code=10, opaque=1, ext_fields={"topic": "T", "queueId": "3"}, body=b"hello"),
        RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE, remark="ok"),
        RemotingCommand(code=34, opaque=2, body=[b"ab", memoryview(b"cdef")[1:]]),
    ]
    for c in cmds:
        c.serialize_type = stype
    data = b"".join(wire(c) for c in cmds)
    want = [normalized(c) for c in cmds]
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1, 7):
            dec = FrameDecoder()
            got = dec.feed(data[:i]) + dec.feed(data[i:j]) + dec.feed(data[j:])
            assert got == want, (i, j)


def test_feed_accepts_memoryview_and_bytearray() -> None:
    data = wire(RemotingCommand(code=1, body=b"x"))
    dec = FrameDecoder()
    assert len(dec.feed(memoryview(data)[:5])) == 0
    assert len(dec.feed(bytearray(data[5:]))) == 1


def test_encode_keeps_body_parts_unjoined() -> None:
    a, b = memoryview(b"A" * 100), memoryview(b"B" * 50)
    parts = encode(RemotingCommand(code=0, body=[a, b]))
    assert parts[1] is a
    assert parts[2] is b
    assert struct.unpack(">i", bytes(parts[0][:4]))[0] == len(bytes(parts[0])) - 4 + 150


def test_json_header_keys_order_and_omissions() -> None:
    parts = encode(RemotingCommand(code=105, opaque=7, ext_fields={"topic": "T"}, language=LanguageCode.JAVA))
    header = bytes(parts[0])[8:]
    assert header == (
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":479}'
    )


def test_encode_coerces_non_string_ext_values() -> None:
    cmd = RemotingCommand(code=0, ext_fields={"n": 3, "b": True})  # type: ignore[dict-item]
    header = json.loads(bytes(encode(cmd)[0])[8:])
    assert header["extFields"] == {"n": "3", "b": "true"}


def test_response_uses_request_serialize_type() -> None:
    req = RemotingCommand(code=10, opaque=9, serialize_type=SerializeType.ROCKETMQ)
    head = bytes(encode(req.response(0))[0])
    assert head[4] == 1  # serialize type byte


def test_binary_header_rejects_code_over_16_bits() -> None:
    with pytest.raises(ValueError, match="16-bit"):
        encode(RemotingCommand(code=200050, serialize_type=SerializeType.ROCKETMQ))


# ------------------------------------------------------------------ hand-built reference frames

CPP_ROUTE_QUERY = (
    b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=","topic":"TopicTest"},'
    b'"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n'
)


def test_cpp_route_query_header_decodes() -> None:
    [cmd] = FrameDecoder().feed(frame(CPP_ROUTE_QUERY))
    assert cmd.code == 105
    assert cmd.language == LanguageCode.CPP
    assert cmd.version == 63
    assert cmd.opaque == 0
    assert cmd.flag == 0
    assert cmd.remark == ""
    assert cmd.ext_fields == {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",
        "topic": "TopicTest",
    }
    assert cmd.body is None
    assert cmd.serialize_type == SerializeType.JSON


def test_cpp_pull_with_number_ext_values_coerced_to_strings() -> None:
    header = (
        b'{"code":11,"extFields":{"commitOffset":"0","consumerGroup":"CG","maxMsgNums":32,'
        b'"queueId":0,"queueOffset":"2","sysFlag":6,"ratio":1.5,"big":1e3,"on":true,"off":false,"n":null},'
        b'"flag":0,"language":"CPP","opaque":12,"remark":"","version":63}\n'
    )
    [cmd] = FrameDecoder().feed(frame(header))
    assert cmd.ext_fields == {
        "commitOffset": "0",
        "consumerGroup": "CG",
        "maxMsgNums": "32",
        "queueId": "0",
        "queueOffset": "2",
        "sysFlag": "6",
        "ratio": "1.5",
        "big": "1000",
        "on": "true",
        "off": "false",
    }


def test_java_header_with_body_language_ordinal_and_unknown_keys() -> None:
    header = (
        b'{"code":10,"extFields":{"topic":"T"},"flag":2,"language":9,"opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":479,"futureKey":{"a":[1]}}'
    )
    [cmd] = FrameDecoder().feed(frame(header, b"payload"))
    assert (cmd.code, cmd.language, cmd.opaque, cmd.flag, cmd.is_oneway) == (10, LanguageCode.GO, 7, 2, True)
    assert cmd.body == b"payload"
    assert cmd.remark is None


def test_minimal_json_header_and_unknown_language_name() -> None:
    [cmd] = FrameDecoder().feed(frame(b'{"code":0,"language":"COBOL"}'))
    assert cmd.code == 0
    assert cmd.language == LanguageCode.OTHER
    assert cmd.ext_fields is None


def test_binary_header_by_hand() -> None:
    remark = "héllo".encode()
    entries = b""
    for k, v in [(b"topic", b"TopicTest"), (b"queueId", b"3"), (b"empty", b"")]:
        entries += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    header = (
        struct.pack(">hbhii", 10, 1, 333, 42, 1)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(entries))
        + entries
    )
    assert len(header) == 21 + len(remark) + len(entries)
    [cmd] = FrameDecoder().feed(frame(header, b"\x00\x01", stype=1))
    assert cmd.code == 10
    assert cmd.language == LanguageCode.CPP
    assert cmd.version == 333
    assert cmd.opaque == 42
    assert cmd.is_response
    assert cmd.remark == "héllo"
    assert cmd.ext_fields == {"topic": "TopicTest", "queueId": "3"}
    assert cmd.body == b"\x00\x01"
    assert cmd.serialize_type == SerializeType.ROCKETMQ


def test_binary_header_empty_remark_and_ext() -> None:
    header = struct.pack(">hbhii", 0, 0, 0, 1, 1) + struct.pack(">ii", 0, 0)
    [cmd] = FrameDecoder().feed(frame(header, stype=1))
    assert cmd.remark is None
    assert cmd.ext_fields is None
    assert cmd.language == LanguageCode.JAVA


def test_many_frames_in_one_chunk() -> None:
    data = b"".join(frame(b'{"code":%d,"opaque":%d}' % (i, i)) for i in range(50))
    cmds = FrameDecoder().feed(data)
    assert [(c.code, c.opaque) for c in cmds] == [(i, i) for i in range(50)]


# ------------------------------------------------------------------ errors


def _raises(data: bytes, exc: type[FrameError], match: str, max_frame_size: int = 1024) -> FrameDecoder:
    dec = FrameDecoder(max_frame_size=max_frame_size)
    with pytest.raises(exc, match=match):
        dec.feed(data)
    return dec


def test_negative_length() -> None:
    _raises(struct.pack(">i", -5), FrameLengthError, "negative frame length -5")


def test_length_shorter_than_header_word() -> None:
    _raises(struct.pack(">i", 3) + b"abc", FrameLengthError, "shorter than the 4-byte")


def test_length_over_limit_detected_before_body_arrives() -> None:
    dec = _raises(struct.pack(">i", 1021), FrameLengthError, "exceeds the limit of 1024")
    assert dec.buffered == 0
    # exactly at the limit (length + 4 == max) is fine
    ok = FrameDecoder(max_frame_size=1024)
    head = b'{"code":1}'
    assert ok.feed(frame(head, b"x" * (1020 - 4 - len(head)))) != []


def test_text_instead_of_a_frame_is_named() -> None:
    # an HTTP server's answer ('HTTP/1.1 ...') or request ('GET / ...') read as a length
    _raises(b"HTTP/1.1 200 OK\r\n", FrameLengthError, "the text 'HTTP': the peer speaks a text protocol")
    _raises(b"GET / HTTP/1.1\r\n", FrameLengthError, "the text 'GET '")
    # a length over the limit with bytes that are not all printable gets no such guess
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameLengthError) as info:
        dec.feed(struct.pack(">i", 17 * 1024 * 1024) + bytes(8))
    assert "text" not in str(info.value)


def test_default_limit_is_16_mib() -> None:
    _raises(struct.pack(">iI", 16 * 1024 * 1024 - 3, 0), FrameLengthError, "16777216", 16 * 1024 * 1024)


def test_header_length_larger_than_frame() -> None:
    _raises(struct.pack(">iI", 10, 7) + b"x" * 6, HeaderLengthError, "header length 7")


def test_unknown_serialize_type() -> None:
    _raises(frame(b'{"code":1}', stype=5), UnknownSerializeTypeError, "unknown serialize type 5")


@pytest.mark.parametrize(
    ("header", "exc", "match"),
    [
        (b"not json", HeaderDecodeError, "not valid JSON"),
        (b'{"code":1', HeaderDecodeError, "not valid JSON"),
        (b"[1,2]", HeaderDecodeError, "not a JSON object"),
        (b'"str"', HeaderDecodeError, "not a JSON object"),
        (b'{"opaque":1}', MissingFieldError, "no 'code'"),
        (b'{"code":{"x":1}}', HeaderDecodeError, "wrong type"),
        (b'{"code":1,"extFields":[1]}', HeaderDecodeError, "wrong type"),
        (b"", HeaderDecodeError, "not valid JSON"),
    ],
)
def test_bad_json_headers(header: bytes, exc: type[FrameError], match: str) -> None:
    _raises(frame(header), exc, match)


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (b"\x00" * 10, "shorter than the 21-byte"),
        (struct.pack(">hbhii", 0, 0, 0, 0, 0) + struct.pack(">i", 100) + b"\x00" * 4, "remark length 100"),
        (struct.pack(">hbhii", 0, 0, 0, 0, 0) + struct.pack(">ii", 0, 9), "extFields length 9"),
        (
            struct.pack(">hbhii", 0, 0, 0, 0, 0) + struct.pack(">ii", 0, 4) + struct.pack(">hh", 50, 0),
            "key length 50",
        ),
        (
            struct.pack(">hbhii", 0, 0, 0, 0, 0)
            + struct.pack(">ii", 0, 6)
            + struct.pack(">h", 1)
            + b"k"
            + b"\x00\x00\x00",
            "key length 1",
        ),
        (
            struct.pack(">hbhii", 0, 0, 0, 0, 0)
            + struct.pack(">ii", 0, 8)
            + struct.pack(">h", 1)
            + b"k"
            + struct.pack(">i", 9)
            + b"v",
            "value length 9",
        ),
        (
            struct.pack(">hbhii", 0, 0, 0, 0, 0) + struct.pack(">i", 2) + b"\xff\xfe" + struct.pack(">i", 0),
            "UTF-8",
        ),
    ],
)
def test_bad_binary_headers(header: bytes, match: str) -> None:
    _raises(frame(header, stype=1), BinaryHeaderError, match)


def test_decoder_dead_after_error() -> None:
    dec = _raises(struct.pack(">i", -1), FrameLengthError, "negative")
    with pytest.raises(FrameLengthError):
        dec.feed(frame(b'{"code":1}'))


def test_good_frames_before_a_bad_one_are_returned_then_the_error() -> None:
    dec = FrameDecoder()
    good = frame(b'{"code":1}')
    assert len(dec.feed(good)) == 1
    assert dec.error is None
    got = dec.feed(good[:-1])
    assert got == []
    got = dec.feed(good[-1:] + good + frame(b"nope") + good)
    assert [c.code for c in got] == [1, 1]
    assert isinstance(dec.error, HeaderDecodeError)
    with pytest.raises(HeaderDecodeError):
        dec.feed(good)


def test_length_split_over_reads_is_checked_once_its_four_bytes_are_there() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    prefix = struct.pack(">i", 5000)
    assert dec.feed(prefix[:1]) == []
    assert dec.feed(prefix[1:3]) == []
    with pytest.raises(FrameLengthError, match="exceeds the limit of 1024"):
        dec.feed(prefix[3:] + bytes(100))
    assert dec.buffered == 0


def test_a_read_completes_the_held_frame_then_decodes_the_rest_where_it_arrived() -> None:
    """A split frame, whole frames and the next partial one in one read: the held part takes only
    what it lacks, and only the new partial frame is held back afterwards."""
    a = frame(b'{"code":1,"opaque":1}', b"A" * 300)
    b = frame(b'{"code":2,"opaque":2}', b"B" * 20)
    c = frame(b'{"code":3,"opaque":3}', b"C" * 50)
    dec = FrameDecoder()
    assert dec.feed(a[:2]) == []  # not even the length yet
    assert dec.feed(memoryview(a[2:100])) == []
    got = dec.feed(bytearray(a[100:] + b + c[:7]))
    assert [(x.code, x.body) for x in got] == [(1, b"A" * 300), (2, b"B" * 20)]
    assert dec.buffered == 7
    got = dec.feed(c[7:] + a)
    assert [(x.code, x.body) for x in got] == [(3, b"C" * 50), (1, b"A" * 300)]
    assert dec.buffered == 0
    # a held frame completed exactly at the end of a read leaves nothing held
    assert dec.feed(b[:10]) == []
    assert [x.code for x in dec.feed(b[10:])] == [2]
    assert dec.buffered == 0


def test_truncated_frame_is_left_buffered() -> None:
    dec = FrameDecoder()
    data = frame(b'{"code":1}', b"body")
    assert dec.feed(data[:-1]) == []
    assert dec.buffered == len(data) - 1
