"""Stored-message byte format: hand-built fixtures, round trips, patching, ids, batch bodies."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting.protocol import message as m

# --- a record built by hand from the reference table (§5.1), not by encode_message ---------------


def _hand_record(
    *,
    topic: bytes,
    body: bytes,
    props: bytes,
    born: tuple[bytes, int],
    store: tuple[bytes, int],
    sys_flag: int,
    magic: int = m.MAGIC_V1,
    crc: int | None = None,
) -> bytes:
    parts = [
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc),  # BODYCRC
        struct.pack(">i", 7),  # QUEUEID
        struct.pack(">i", 42),  # FLAG
        struct.pack(">q", 1001),  # QUEUEOFFSET
        struct.pack(">q", 123456789),  # PHYSICALOFFSET
        struct.pack(">i", sys_flag),  # SYSFLAG
        struct.pack(">q", 1700000000000),  # BORNTIMESTAMP
        born[0] + struct.pack(">i", born[1]),  # BORNHOST
        struct.pack(">q", 1700000000123),  # STORETIMESTAMP
        store[0] + struct.pack(">i", store[1]),  # STOREHOST
        struct.pack(">i", 3),  # RECONSUMETIMES
        struct.pack(">q", 555),  # PREPARED TX OFFSET
        struct.pack(">i", len(body)) + body,
        (struct.pack(">b", len(topic)) if magic == m.MAGIC_V1 else struct.pack(">h", len(topic))) + topic,
        struct.pack(">h", len(props)) + props,
    ]
    rest = b"".join(parts)
    total = 8 + len(rest)
    return struct.pack(">i", total) + struct.pack(">i", magic) + rest


PROPS = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01AABBCC\x02"
IPV4 = (bytes([10, 0, 0, 2]), 5555)
STORE4 = (bytes([10, 0, 0, 1]), 10911)


def test_hand_built_ipv4_record_decodes_to_expected_fields() -> None:
    raw = _hand_record(topic=b"TopicTest", body=b"hello", props=PROPS, born=IPV4, store=STORE4, sys_flag=0)
    assert len(raw) == 91 + 5 + 9 + len(PROPS)  # the reference's size formula
    msg = m.decode_message(raw, check_crc=True)
    assert msg.total_size == len(raw)
    assert msg.magic == m.MAGIC_V1
    assert msg.queue_id == 7
    assert msg.flag == 42
    assert msg.queue_offset == 1001
    assert msg.physical_offset == 123456789
    assert msg.sys_flag == 0
    assert msg.born_timestamp == 1700000000000
    assert msg.born_host == "10.0.0.2:5555"
    assert msg.store_timestamp == 1700000000123
    assert msg.store_host == "10.0.0.1:10911"
    assert msg.reconsume_times == 3
    assert msg.prepared_transaction_offset == 555
    assert msg.body == b"hello"
    assert msg.topic == "TopicTest"
    assert msg.properties_raw == PROPS.decode()
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AABBCC"}
    assert msg.msg_id == "AABBCC"
    assert m.peek_header(raw) == (len(raw), m.MAGIC_V1)


def test_hand_built_ipv6_v2_record_decodes() -> None:
    born6 = (socket.inet_pton(socket.AF_INET6, "::1"), 1234)
    store6 = (socket.inet_pton(socket.AF_INET6, "fe80::2"), 10911)
    topic = b"%RETRY%" + b"g" * 150
    flags = m.BORNHOST_V6_FLAG | m.STOREHOSTADDRESS_V6_FLAG | m.COMPRESSED_FLAG
    raw = _hand_record(
        topic=topic, body=b"", props=b"", born=born6, store=store6, sys_flag=flags, magic=m.MAGIC_V2
    )
    msg = m.decode_message(raw, check_crc=True)
    assert msg.topic == topic.decode()
    assert msg.born_host == "[::1]:1234"
    assert msg.store_host == "[fe80::2]:10911"
    assert msg.store_timestamp == 1700000000123
    assert msg.body == b""
    assert msg.properties == {}


def test_encode_matches_hand_built_bytes() -> None:
    raw = _hand_record(topic=b"TopicTest", body=b"hello", props=PROPS, born=IPV4, store=STORE4, sys_flag=0)
    enc = m.encode_message(
        topic="TopicTest",
        queue_id=7,
        flag=42,
        body=b"hello",
        properties=PROPS.decode(),
        sys_flag=0,
        born_timestamp=1700000000000,
        born_host=("10.0.0.2", 5555),
        store_host=("10.0.0.1", 10911),
        reconsume_times=3,
        prepared_transaction_offset=555,
        store_timestamp=1700000000123,
        queue_offset=1001,
        physical_offset=123456789,
    )
    assert bytes(enc) == raw


def test_crc_mismatch_is_detected_only_when_asked() -> None:
    raw = _hand_record(topic=b"T", body=b"hello", props=b"", born=IPV4, store=STORE4, sys_flag=0, crc=1)
    assert m.decode_message(raw).body_crc == 1
    with pytest.raises(m.MessageFormatError, match="CRC"):
        m.decode_message(raw, check_crc=True)
    with pytest.raises(m.MessageFormatError, match="CRC"):
        m.dispatch_info(raw, check_crc=True)


def test_crc32_masked_matches_java() -> None:
    # java.util.zip.CRC32 of "123456789" is 0xCBF43926; masked drops the top bit.
    assert m.crc32_masked(b"123456789") == 0xCBF43926 & 0x7FFFFFFF


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda r: r[:4] + struct.pack(">i", 12345) + r[8:], "magic"),
        (lambda r: struct.pack(">i", len(r) + 10) + r[4:], "total size"),
        (lambda r: r[:-3], "total size"),
        (lambda r: struct.pack(">i", 20) + r[4:], "total size|shorter"),
        (lambda r: r[:4] + struct.pack(">i", m.BLANK_MAGIC) + r[8:], "blank"),
    ],
)
def test_malformed_records_raise(mutate, match: str) -> None:
    raw = _hand_record(topic=b"T", body=b"hello", props=PROPS, born=IPV4, store=STORE4, sys_flag=0)
    with pytest.raises(m.MessageFormatError, match=match):
        m.decode_message(mutate(raw))


def test_body_length_overrun_raises() -> None:
    raw = bytearray(_hand_record(topic=b"T", body=b"hello", props=b"", born=IPV4, store=STORE4, sys_flag=0))
    struct.pack_into(">i", raw, 84, 1000)  # BODY length field for IPv4/IPv4
    with pytest.raises(m.MessageFormatError, match="body length"):
        m.decode_message(raw)


# --- encode / decode round trip --------------------------------------------------------------------

ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
hosts = st.tuples(st.one_of(ipv4, ipv6), st.integers(0, 65535))
prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(
    topic=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(
        lambda t: len(t.encode()) <= 255
    )
    | st.text(alphabet="abc%_-", min_size=120, max_size=255),
    body=st.binary(max_size=2000),
    props=st.dictionaries(prop_text, prop_text, max_size=6).filter(
        lambda d: all(len(k) + len(v) >= 2 for k, v in d.items())
    ),
    born=hosts,
    store=hosts,
    sys_flag=st.sampled_from([0, 1, 0x4, 0x8, 0xC, 0x301]),
    nums=st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**62),
        st.integers(0, 2**62),
    ),
)
def test_round_trip(topic, body, props, born, store, sys_flag, nums) -> None:
    flag, qoff, phy, born_ts, store_ts = nums
    props_s = m.properties_to_string(props)
    enc = m.encode_message(
        topic=topic,
        queue_id=3,
        flag=flag,
        body=body,
        properties=props_s,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born,
        store_host=store,
    )
    m.patch_append_fields(enc, 0, queue_offset=qoff, physical_offset=phy, store_timestamp=store_ts)
    msg = m.decode_message(bytes(enc), check_crc=True)
    assert msg.total_size == len(enc)
    assert msg.magic == (m.MAGIC_V2 if len(topic.encode()) > 127 else m.MAGIC_V1)
    assert msg.topic == topic
    assert msg.body == body
    assert msg.flag == flag
    assert msg.queue_offset == qoff
    assert msg.physical_offset == phy
    assert msg.store_timestamp == store_ts
    assert msg.born_timestamp == born_ts
    assert msg.properties == props
    assert m.parse_host(msg.born_host) == (socket.inet_ntop(_fam(born[0]), _pton(born[0])), born[1])
    assert m.parse_host(msg.store_host)[1] == store[1]
    assert bool(msg.sys_flag & m.BORNHOST_V6_FLAG) == (":" in born[0])
    assert bool(msg.sys_flag & m.STOREHOSTADDRESS_V6_FLAG) == (":" in store[0])
    assert msg.sys_flag & ~(m.BORNHOST_V6_FLAG | m.STOREHOSTADDRESS_V6_FLAG) == sys_flag
    d = m.dispatch_info(enc, check_crc=True)
    assert (d.topic, d.queue_id, d.consume_queue_offset, d.commit_log_offset) == (topic, 3, qoff, phy)
    assert (d.msg_size, d.store_timestamp, d.sys_flag) == (len(enc), store_ts, msg.sys_flag)


def _fam(ip: str) -> int:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def _pton(ip: str) -> bytes:
    return socket.inet_pton(_fam(ip), ip)


def test_patch_append_fields_in_place_at_offset_with_ipv6_born_host() -> None:
    enc = m.encode_message(
        topic="T",
        queue_id=0,
        flag=0,
        body=b"abc",
        properties="",
        sys_flag=0,
        born_timestamp=5,
        born_host=("::1", 1),
        store_host=("127.0.0.1", 2),
    )
    buf = bytearray(10) + enc + bytearray(10)
    m.patch_append_fields(buf, 10, queue_offset=77, physical_offset=88, store_timestamp=99)
    msg = m.decode_message(buf, 10)
    assert (msg.queue_offset, msg.physical_offset, msg.store_timestamp, msg.born_timestamp) == (77, 88, 99, 5)
    assert buf[:10] == bytearray(10)
    assert buf[-10:] == bytearray(10)
    assert m.store_timestamp_position(msg.sys_flag) == 68


def test_encode_limits() -> None:
    kw = dict(
        queue_id=0,
        flag=0,
        body=b"",
        sys_flag=0,
        born_timestamp=0,
        born_host=("1.1.1.1", 1),
        store_host=("1.1.1.1", 1),
    )
    m.encode_message(topic="t" * 255, properties="", **kw)
    with pytest.raises(m.MessageFormatError, match="topic"):
        m.encode_message(topic="t" * 256, properties="", **kw)
    m.encode_message(topic="t", properties="p" * 32767, **kw)
    with pytest.raises(m.MessageFormatError, match="properties"):
        m.encode_message(topic="t", properties="é" * 16384, **kw)
    with pytest.raises(m.MessageFormatError, match="IP"):
        m.encode_message(topic="t", properties="", **{**kw, "born_host": ("localhost", 1)})


def test_iter_messages_over_concatenated_records() -> None:
    recs = [
        m.encode_message(
            topic=f"T{i}",
            queue_id=i,
            flag=0,
            body=bytes([i]) * i,
            properties="",
            sys_flag=0,
            born_timestamp=i,
            born_host=("127.0.0.1", 1),
            store_host=("127.0.0.1", 2),
        )
        for i in range(5)
    ]
    out = list(m.iter_messages(memoryview(b"".join(recs))))
    assert [x.topic for x in out] == [f"T{i}" for i in range(5)]
    assert [x.body for x in out] == [bytes([i]) * i for i in range(5)]
    with pytest.raises(m.MessageFormatError):
        list(m.iter_messages(b"".join(recs) + b"\x00\x00"))


def test_dispatch_info_fields() -> None:
    props = m.properties_to_string({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "DELAY": "3"})
    enc = m.encode_message(
        topic="TopicTest",
        queue_id=2,
        flag=0,
        body=b"x" * 100,
        properties=props,
        sys_flag=m.TRANSACTION_COMMIT_TYPE,
        born_timestamp=10,
        born_host=("127.0.0.1", 1),
        store_host=("127.0.0.1", 2),
        prepared_transaction_offset=999,
    )
    m.patch_append_fields(enc, 0, queue_offset=4, physical_offset=4096, store_timestamp=20)
    d = m.dispatch_info(enc)
    assert d == m.DispatchRequest(
        topic="TopicTest",
        queue_id=2,
        commit_log_offset=4096,
        msg_size=len(enc),
        tags_code=2598919,
        store_timestamp=20,
        consume_queue_offset=4,
        keys="k1 k2",
        uniq_key="U1",
        sys_flag=m.TRANSACTION_COMMIT_TYPE,
        born_timestamp=10,
        prepared_transaction_offset=999,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "DELAY": "3"},
    )
    assert m.transaction_type(d.sys_flag) == m.TRANSACTION_COMMIT_TYPE


# --- properties -----------------------------------------------------------------------------------


def test_parse_properties_upstream_rules() -> None:
    s = "A\x01\x02KEYS\x01k\x02ab\x01\x02noval\x02x\x01y\x01z\x02\x02"
    # "A\x01" is shorter than 3 chars -> skipped; "noval" has no separator -> skipped;
    # the key ends at the first 0x01.
    assert m.parse_properties(s) == {"KEYS": "k", "ab": "", "x": "y\x01z"}
    assert m.parse_properties("") == {}


def test_properties_to_string_trailing_separator_and_none() -> None:
    assert m.properties_to_string({"A": "1", "B": None, "C": "2"}) == "A\x011\x02C\x012\x02"
    assert m.properties_to_string({}) == ""


# --- Java String.hashCode -------------------------------------------------------------------------


def _java_hash_independent(s: str) -> int:
    """String.hashCode by its definition: sum s[i]*31^(n-1-i) over UTF-16 code units, mod 2^32."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("TagA", 2598919),
        ("", 0),
        (None, 0),
        ("a", 97),
        ("hello world", 1794106052),
        ("polygenelubricants", -(2**31)),  # famous Integer.MIN_VALUE hash
        ("Aa", 2112),
        ("BB", 2112),
    ],
)
def test_tags_hash_code_known_values(tag: str | None, expected: int) -> None:
    assert m.tags_hash_code(tag) == expected


@pytest.mark.parametrize("tag", ["标签", "TagÄ", "😀x", "a😀标", "k" * 700, "标" * 300 + "😀" * 200])
def test_tags_hash_code_non_ascii_uses_utf16_units(tag: str) -> None:
    assert m.tags_hash_code(tag) == _java_hash_independent(tag)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=600))
def test_tags_hash_code_matches_definition(s: str) -> None:
    assert m.tags_hash_code(s) == _java_hash_independent(s)


@given(st.text(alphabet=st.characters(max_codepoint=127), min_size=0, max_size=2500))
def test_java_string_hash_ascii_matches_definition(s: str) -> None:
    # the ASCII path converts base-31 digit strings in chunks of 1024 characters
    assert m.java_string_hash(s) == _java_hash_independent(s)


@pytest.mark.parametrize("n", [1, 2, 1023, 1024, 1025, 2048, 2049, 5000])
def test_java_string_hash_ascii_chunk_boundaries(n: int) -> None:
    for ch in ("\x00", "\x7f", "z", "#"):
        assert m.java_string_hash(ch * n) == _java_hash_independent(ch * n)


# --- message ids ----------------------------------------------------------------------------------


def test_offset_msg_id_reference_example() -> None:
    assert m.offset_msg_id(("10.0.0.1", 10911), 0x1234) == "0A00000100002A9F0000000000001234"
    assert m.offset_msg_id("10.0.0.1:10911", 0x1234) == "0A00000100002A9F0000000000001234"
    assert m.decode_offset_msg_id("0A00000100002A9F0000000000001234") == ("10.0.0.1", 10911, 0x1234)


def test_offset_msg_id_ipv6() -> None:
    s = m.offset_msg_id("[fe80::1]:10911", 2**40)
    assert len(s) == 56
    assert s == s.upper()
    assert m.decode_offset_msg_id(s) == ("fe80::1", 10911, 2**40)


@pytest.mark.parametrize(
    "bad", ["", "0A", "ZZ00000100002A9F0000000000001234", "0A00000100002A9F00000000000012"]
)
def test_decode_offset_msg_id_rejects_bad_input(bad: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        m.decode_offset_msg_id(bad)


def test_uniq_id_layout_and_uniqueness() -> None:
    import datetime
    import os

    # 2024-03-05 00:00:01.5 local time -> 4 days + 1.5 s after the start of the month
    t0 = int(datetime.datetime(2024, 3, 5, 0, 0, 1, 500000).timestamp() * 1000)
    now = [t0]
    gen = m.UniqIdGenerator("10.1.2.3", now_ms=lambda: now[0])
    ids = [gen.create() for _ in range(1000)]
    assert len(set(ids)) == 1000
    for s in ids:
        assert len(s) == 32
        assert s == s.upper()
    raw = bytes.fromhex(ids[0])
    assert raw[:4] == bytes([10, 1, 2, 3])
    assert int.from_bytes(raw[4:6], "big") == os.getpid() & 0xFFFF
    assert int.from_bytes(raw[10:14], "big") == 4 * 86_400_000 + 1500
    c0 = int.from_bytes(raw[14:16], "big")
    assert int.from_bytes(bytes.fromhex(ids[1])[14:16], "big") == (c0 + 1) & 0xFFFF
    now[0] = int(datetime.datetime(2024, 4, 1, 0, 0, 0, 7000).timestamp() * 1000)  # month rolls over
    assert int.from_bytes(bytes.fromhex(gen.create())[10:14], "big") == 7
    assert len(m.create_uniq_id()) == 32


# --- batch body -----------------------------------------------------------------------------------


def _hand_batch_record(flag: int, body: bytes, props: bytes) -> bytes:
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(props)) + props


def test_decode_hand_built_batch_body() -> None:
    raw = _hand_batch_record(1, b"first", b"KEYS\x01a\x02UNIQ_KEY\x01U1\x02") + _hand_batch_record(
        0, b"", b""
    )
    items = m.decode_batch_body(raw)
    assert items == [
        m.BatchItem(1, b"first", "KEYS\x01a\x02UNIQ_KEY\x01U1\x02"),
        m.BatchItem(0, b"", ""),
    ]
    assert m.encode_batch_body(items) == raw
    assert m.decode_batch_body(b"") == []


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00",  # shorter than a record header
        struct.pack(">iiiii", 100, 0, 0, 0, 50) + b"x" * 10,  # body overruns
        struct.pack(">iiiii", 27, 0, 0, 0, 5) + b"hello" + struct.pack(">h", 10),  # props overrun
        struct.pack(">iiiii", 99, 0, 0, 0, 5) + b"hello" + struct.pack(">h", 0),  # total size mismatch
        struct.pack(">iiiii", 22, 0, 0, 0, -1) + struct.pack(">h", 0),  # negative body length
        struct.pack(">iiiii", 24, 0, 0, 0, 0) + struct.pack(">h", 2) + b"\xff\xfe",  # not UTF-8
    ],
)
def test_decode_malformed_batch_body_raises(raw: bytes) -> None:
    with pytest.raises(m.MessageFormatError):
        m.decode_batch_body(raw)


@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300), prop_text), max_size=10))
def test_batch_round_trip(items: list[tuple[int, bytes, str]]) -> None:
    batch = [m.BatchItem(f, b, p) for f, b, p in items]
    assert m.decode_batch_body(m.encode_batch_body(batch)) == batch
