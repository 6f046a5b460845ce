"""The send path's shortcuts give exactly what the general path gives. The general path: split the
batch body, add CLUSTER (and UNIQ_KEY when missing) the way upstream does (parse, add, write the
map out again), encode each record. The one-pass batch encoder gives the same records, hints and
unique keys, and declines (None) exactly when the general path answers with an error; a
client-form properties string is recognised only when the client's string plus the CLUSTER pair
is what upstream would store; the single-record encoder equals append_record."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from broker.send_records import (
    NO_SLOT,
    UNIFORM_MIN_ITEMS,
    BatchRecordEncoder,
    ClientProperties,
    EncodedBatch,
    Slot,
    encode_single,
    host_port,
)
from broker.send_response import offset_msg_ids, placed_response, send_response
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    BatchItem,
    MessageFormatError,
    append_record,
    decode_message,
    encode_batch_body,
    parse_properties,
    properties_to_string,
    split_batch_body,
    tags_hash_code,
    topic_field,
)
from store.results import PutMessageResult, PutMessageStatus

CLUSTER = "UnitCluster"
V4 = b"\x7f\x00\x00\x01"
V6 = bytes(15) + b"\x01"
MAX_BODY = 64


class UpstreamCompleter:
    """Upstream's rule, literally: parse, set CLUSTER, set UNIQ_KEY when missing or empty, rebuild."""

    def __init__(self) -> None:
        self.counter = itertools.count()

    def __call__(self, props_s: str) -> tuple[dict[str, str], str | None, str]:
        props = parse_properties(props_s)
        props[PROPERTY_CLUSTER] = CLUSTER
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if not uniq:
            uniq = f"GEN{next(self.counter):08d}"
            props[PROPERTY_UNIQ_KEY] = uniq
        return props, None, uniq


Encoded = tuple[bytes, list[tuple[int, str | None, str | None]], list[str], list[int], list[int]]


def general(
    body: bytes, born: tuple[bytes, int], store: tuple[bytes, int], sys_flag: int, slot: Slot = NO_SLOT
) -> Encoded | None:
    """The general path of broker/send.py, with upstream's property rule, then the store's patch
    of every record for ``slot`` (queue offsets, physical offsets, store timestamp); records,
    hints, unique keys, consume-queue units and physical offsets. None where it errs."""
    complete = UpstreamCompleter()
    try:
        items = split_batch_body(body)
    except MessageFormatError:
        return None
    if not items:
        return None
    out = bytearray()
    hints: list[tuple[int, str | None, str | None]] = []
    uniqs: list[str] = []
    topic_b, magic = topic_field("BatchTopic")
    try:
        for flag, data, props_s in items:
            if len(data) > MAX_BODY:
                return None
            props, _, uniq = complete(props_s)
            uniqs.append(uniq)
            hints.append((tags_hash_code(props.get(PROPERTY_TAGS)), props.get(PROPERTY_KEYS), uniq))
            append_record(
                out,
                topic_b,
                magic,
                3,
                flag,
                data,
                properties_to_string(props).encode(),
                sys_flag,
                1_700_000_000_000,
                born[0],
                born[1],
                store[0],
                store[1],
            )
    except MessageFormatError:
        return None
    base, qo, now = slot
    units: list[int] = []
    offsets: list[int] = []
    pos = 0
    for i, (tags_code, _, _) in enumerate(hints):
        msg = decode_message(out, pos)
        struct.pack_into(">qq", out, pos + 20, qo + i, base + pos)  # QUEUEOFFSET, PHYSICALOFFSET
        struct.pack_into(">q", out, pos + (68 if msg.sys_flag & 0x10 else 56), now)  # STORETIMESTAMP
        units += (base + pos, msg.total_size, tags_code)
        offsets.append(base + pos)
        pos += msg.total_size
    return bytes(out), hints, uniqs, units, offsets


def fast(
    body: bytes,
    born: tuple[bytes, int],
    store: tuple[bytes, int],
    sys_flag: int,
    slot: Slot = NO_SLOT,
    encoder: BatchRecordEncoder | None = None,
) -> Encoded | None:
    topic_b, magic = topic_field("BatchTopic")
    if encoder is None:
        encoder = BatchRecordEncoder(UpstreamCompleter(), ClientProperties())
    got = encoder.encode(
        body, topic_b, magic, 3, sys_flag, 1_700_000_000_000, born, store, MAX_BODY, CLUSTER, slot
    )
    if got is None:
        return None
    assert got.placed.slot == slot
    return bytes(got.records), got.hints, got.uniqs, got.placed.units, got.placed.units[::3]


# Properties strings from pieces that hit every rule: the keys that matter, separators in odd
# places, repeated keys, empty values, pieces too short or without 0x01, non-ASCII.
_KEYS = st.sampled_from(
    [PROPERTY_UNIQ_KEY, PROPERTY_CLUSTER, PROPERTY_TAGS, PROPERTY_KEYS, "WAIT", "K", "名", ""]
)
_VALUES = st.text(alphabet="ab\x01Z标0", max_size=6)
_PIECE = st.one_of(
    st.builds(lambda k, v: f"{k}\x01{v}\x02", _KEYS, _VALUES),
    st.text(alphabet="ab\x01\x02", max_size=3),
)
_PROPS = st.one_of(
    st.lists(_PIECE, max_size=5).map("".join),
    st.builds(
        lambda u, rest: f"UNIQ_KEY\x01{u}\x02{rest}",
        st.text(alphabet="0123456789ABCDEF", min_size=1, max_size=32),
        st.lists(_PIECE, max_size=3).map("".join),
    ),
)
_ITEMS = st.lists(
    st.builds(BatchItem, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=MAX_BODY + 4), _PROPS),
    max_size=6,
)
_HOST = st.sampled_from([(V4, 4000), (V6, 5000)])


_SLOT = st.one_of(
    st.just(NO_SLOT),
    st.tuples(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62)),
)


@settings(max_examples=400, deadline=None)
@given(
    items=_ITEMS,
    born=_HOST,
    store=_HOST,
    sys_flag=st.sampled_from([0, 0x1, 0x30, 0x2]),
    slot=_SLOT,
)
def test_fast_batch_equals_general_path_patched_for_its_slot(
    items: list[BatchItem], born: tuple[bytes, int], store: tuple[bytes, int], sys_flag: int, slot: Slot
) -> None:
    body = encode_batch_body(items)
    assert fast(body, born, store, sys_flag, slot) == general(body, born, store, sys_flag, slot)


@settings(max_examples=300, deadline=None)
@given(items=_ITEMS.filter(bool), cut=st.integers(0, 10_000), junk=st.binary(min_size=1, max_size=4))
def test_fast_batch_declines_where_the_general_path_errs(
    items: list[BatchItem], cut: int, junk: bytes
) -> None:
    body = encode_batch_body(items)
    at = cut % len(body)
    for broken in (body[:at], body[:at] + junk + body[at + len(junk) :]):
        assert fast(broken, (V4, 1), (V4, 2), 0) == general(broken, (V4, 1), (V4, 2), 0)


# Batches whose items share a shape around varying UNIQ_KEY values -- the encoder's
# same-shape-as-the-previous-item shortcut -- with values that try to break it: separators,
# another UNIQ_KEY inside, empty, non-ASCII, and shapes that change mid-batch.
_UNIQ_VALUES = st.one_of(
    st.text(alphabet="0123456789ABCDEF", min_size=0, max_size=34),
    st.text(alphabet="A\x01\x02标", max_size=5),
    st.sampled_from(["UNIQ_KEY\x01X", "a\x02UNIQ_KEY\x01b", "\x02", "TAGS\x01t"]),
)
_SHAPES = st.sampled_from(
    [
        ("UNIQ_KEY\x01", "\x02TAGS\x01t\x02WAIT\x01true\x02"),
        ("TAGS\x01t\x02UNIQ_KEY\x01", "\x02"),
        ("KEYS\x01k1 k2\x02UNIQ_KEY\x01", "\x02名\x01v\x02"),
        ("UNIQ_KEY\x01", "\x02UNIQ_KEY\x01again\x02"),
        ("XUNIQ_KEY\x01", "\x02"),
        ("UNIQ_KEY\x01", ""),
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    runs=st.lists(st.tuples(_SHAPES, st.lists(_UNIQ_VALUES, min_size=1, max_size=4)), min_size=1, max_size=4),
    body=st.binary(max_size=8),
)
def test_fast_batch_of_repeated_shapes_equals_general_path(
    runs: list[tuple[tuple[str, str], list[str]]], body: bytes
) -> None:
    items = [
        BatchItem(k, body, head + value + tail)
        for k, ((head, tail), values) in enumerate(runs)
        for value in values
    ]
    batch = encode_batch_body(items)
    assert fast(batch, (V4, 1), (V4, 2), 0) == general(batch, (V4, 1), (V4, 2), 0)


class RowPathSpy:
    """An encoder whose row path (``_encode_uniform``) reports whether it gave the batch's records."""

    def __init__(self, uniform: bool = True) -> None:
        self.encoder = BatchRecordEncoder(UpstreamCompleter(), ClientProperties())
        if not uniform:
            self.encoder.uniform_min_items = 1 << 30
        self.took: list[bool] = []
        row_path = self.encoder._encode_uniform

        def spy(*args: Any) -> EncodedBatch | None:
            got = row_path(*args)
            self.took.append(got is not None)
            return got

        self.encoder._encode_uniform = spy  # type: ignore[method-assign]


# Batches of one layout (the row path's case): every item the same body length and properties
# shape, UNIQ_KEY values of one width -- then one item changed in a way that keeps or breaks it.
_CHANGES = st.one_of(
    st.sampled_from(["none", "flag"]),
    st.sampled_from(
        ["wider uniq", "longer body, narrower uniq", "non-ASCII uniq", "0x02 in uniq", "NUL in uniq", "shape"]
    ),
)
_LAYOUT_SHAPES = st.one_of(
    st.sampled_from(
        [
            ("UNIQ_KEY\x01", "\x02TAGS\x01t\x02WAIT\x01true\x02"),
            ("TAGS\x01t\x02UNIQ_KEY\x01", "\x02"),
            ("KEYS\x01k1 k2\x02UNIQ_KEY\x01", "\x02名\x01v\x02"),
        ]
    ),
    _SHAPES,
)


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    # around 64 too: the row path keeps the step column of batches up to 64 items
    count=st.one_of(st.integers(UNIFORM_MIN_ITEMS, UNIFORM_MIN_ITEMS + 8), st.integers(62, 66)),
    body_len=st.integers(0, MAX_BODY + 1),
    shape=_LAYOUT_SHAPES,
    width=st.integers(0, 6),
    change=_CHANGES,
    born=_HOST,
    store=_HOST,
    slot=_SLOT,
)
def test_batches_of_one_layout_equal_the_general_path(
    data: st.DataObject,
    count: int,
    body_len: int,
    shape: tuple[str, str],
    width: int,
    change: str,
    born: tuple[bytes, int],
    store: tuple[bytes, int],
    slot: Slot,
) -> None:
    head, tail = shape
    bodies = [data.draw(st.binary(min_size=body_len, max_size=body_len)) for _ in range(count)]
    items = [
        BatchItem(7, bodies[k], f"{head}{k:0{width}X}"[: len(head) + width] + tail) for k in range(count)
    ]
    at = data.draw(st.integers(0, count - 1))
    item = items[at]
    value = item.properties[len(head) : len(head) + width]
    if change == "flag":
        item = BatchItem(-3, item.body, item.properties)
    elif change == "wider uniq":
        item = BatchItem(7, item.body, head + value + "F" + tail)
    elif change == "longer body, narrower uniq" and width:
        item = BatchItem(7, item.body + b"x", head + value[1:] + tail)
    elif change == "non-ASCII uniq" and width >= 3:
        item = BatchItem(7, item.body, head + "标" + value[3:] + tail)
    elif change == "0x02 in uniq" and width:
        item = BatchItem(7, item.body, head + "\x02" + value[1:] + tail)
    elif change == "NUL in uniq" and width:
        item = BatchItem(7, item.body, head + value[:-1] + "\x00" + tail)
    elif change == "shape" and head[:1].isascii():
        item = BatchItem(7, item.body, "Q" + item.properties[1:])
    items[at] = item
    body = encode_batch_body(items)
    rows = RowPathSpy()
    assert fast(body, born, store, 0, slot, rows.encoder) == general(body, born, store, 0, slot)
    event(f"row path: {'taken' if rows.took == [True] else 'declined' if rows.took else 'not tried'}")
    assert fast(body, born, store, 0, slot, RowPathSpy(uniform=False).encoder) == general(
        body, born, store, 0, slot
    )


def test_batches_of_one_layout_take_the_row_path_and_others_the_item_loop() -> None:
    props = [f"UNIQ_KEY\x01{i:032X}\x02TAGS\x01t\x02WAIT\x01true\x02" for i in range(40)]
    one_layout = encode_batch_body(BatchItem(0, b"%04d" % i, p) for i, p in enumerate(props))
    rows = RowPathSpy()
    got = fast(one_layout, (V4, 1), (V4, 2), 0, (1000, 5, 99), rows.encoder)
    assert rows.took == [True]
    assert got == general(one_layout, (V4, 1), (V4, 2), 0, (1000, 5, 99))
    assert got is not None
    assert got[2] == [f"{i:032X}" for i in range(40)]
    # one item's body a byte longer: the sizes differ, the rows do not line up
    mixed = encode_batch_body(BatchItem(0, b"%04d" % i + b"x" * (i == 9), p) for i, p in enumerate(props))
    rows = RowPathSpy()
    assert fast(mixed, (V4, 1), (V4, 2), 0, (1000, 5, 99), rows.encoder) == general(
        mixed, (V4, 1), (V4, 2), 0, (1000, 5, 99)
    )
    assert rows.took in ([], [False])
    # below UNIFORM_MIN_ITEMS the item loop is as fast: not tried
    few = encode_batch_body(
        BatchItem(0, b"%04d" % i, p) for i, p in enumerate(props[: UNIFORM_MIN_ITEMS - 1])
    )
    rows = RowPathSpy()
    assert fast(few, (V4, 1), (V4, 2), 0, NO_SLOT, rows.encoder) is not None
    assert rows.took == []


def test_an_item_whose_longer_body_mimics_the_layout_is_not_taken_for_a_row() -> None:
    """Item 5's body is 11 bytes longer and its UNIQ_KEY 11 shorter: the same TOTALSIZE, and its
    body ends in the bytes the first item has where its properties begin (length + shape head),
    so that only BODYLEN tells the rows apart (the properties lengths 782 and 771 are ASCII)."""
    head, tail = "UNIQ_KEY\x01", "\x02"
    width = 782 - len(head) - len(tail)
    items = [BatchItem(0, bytes(20), head + f"{i:0{width}X}" + tail) for i in range(UNIFORM_MIN_ITEMS)]
    items[5] = BatchItem(
        0, bytes(20) + struct.pack(">h", 782) + head.encode(), head + "A" * (width - 11) + tail
    )
    body = encode_batch_body(items)
    rows = RowPathSpy()
    assert fast(body, (V4, 1), (V4, 2), 0, NO_SLOT, rows.encoder) == general(body, (V4, 1), (V4, 2), 0)
    assert rows.took == [False]


def test_client_style_batch_takes_the_shortcut_and_decodes() -> None:
    props = [f"UNIQ_KEY\x01ABCDEF{i:04d}\x02TAGS\x01t{i % 2}\x02WAIT\x01true\x02" for i in range(8)]
    body = encode_batch_body(BatchItem(i, f"body{i}".encode(), p) for i, p in enumerate(props))

    def no_general(props_s: str) -> tuple[dict[str, str], str | None, str]:
        raise AssertionError(f"client-style properties went the general way: {props_s!r}")

    topic_b, magic = topic_field("BatchTopic")
    got = BatchRecordEncoder(no_general, ClientProperties()).encode(
        body, topic_b, magic, 1, 0, 5, (V4, 1), (V4, 2), MAX_BODY, CLUSTER
    )
    assert got is not None
    records, hints, uniqs, _ = got
    assert uniqs == [f"ABCDEF{i:04d}" for i in range(8)]
    assert hints == [(tags_hash_code(f"t{i % 2}"), None, uniqs[i]) for i in range(8)]
    pos = 0
    for i in range(8):
        msg = decode_message(records, pos, check_crc=True)
        assert (msg.topic, msg.queue_id, msg.flag, msg.body) == ("BatchTopic", 1, i, f"body{i}".encode())
        assert msg.properties_raw == props[i] + f"CLUSTER\x01{CLUSTER}\x02"
        pos += msg.total_size
    assert pos == len(records)


@settings(max_examples=1000, deadline=None)
@given(props_s=_PROPS)
def test_client_form_is_recognised_only_where_appending_cluster_equals_upstream(props_s: str) -> None:
    cache = ClientProperties()
    for _ in range(2):  # the second lookup comes from the shape cache
        found = cache.lookup(props_s)
        if found is None:
            continue
        uniq, (tags_code, keys, wait, delay) = found
        props = parse_properties(props_s)
        assert uniq == props[PROPERTY_UNIQ_KEY] != ""
        assert (tags_code, keys) == (tags_hash_code(props.get(PROPERTY_TAGS)), props.get(PROPERTY_KEYS))
        assert wait == (props.get(PROPERTY_WAIT, "true") != "false")
        assert delay == (PROPERTY_DELAY in props)
        props[PROPERTY_CLUSTER] = CLUSTER
        assert properties_to_string(props).encode() == props_s.encode() + cache.cluster_pair(CLUSTER)


def test_client_strings_are_in_client_form() -> None:
    cache = ClientProperties()
    for props_s in (
        "UNIQ_KEY\x01C0A8010100002A9F0000000000000000\x02WAIT\x01true\x02",
        "TAGS\x01a\x02UNIQ_KEY\x01X\x02KEYS\x01k1 k2\x02",
    ):
        assert cache.lookup(props_s) is not None
    for props_s in (
        "",
        "WAIT\x01true\x02",  # no UNIQ_KEY: the broker adds one
        "UNIQ_KEY\x01\x02",  # empty: replaced
        "UNIQ_KEY\x01X",  # no trailing separator
        "UNIQ_KEY\x01X\x02CLUSTER\x01c\x02",  # CLUSTER replaced in place
        "UNIQ_KEY\x01X\x02a\x02",  # a piece upstream drops
        "UNIQ_KEY\x01X\x02K\x01v\x02K\x01w\x02",  # a key twice
    ):
        assert cache.lookup(props_s) is None, props_s


@settings(max_examples=300, deadline=None)
@given(
    body=st.binary(max_size=200),
    props_s=_PROPS,
    born=_HOST,
    store=_HOST,
    sys_flag=st.sampled_from([0, 0x1, 0x30, 0x4, 0x8]),
    flag=st.integers(-(2**31), 2**31 - 1),
    reconsume=st.integers(0, 20),
    queue_id=st.integers(0, 1000),
)
def test_encode_single_equals_append_record(
    body: bytes,
    props_s: str,
    born: tuple[bytes, int],
    store: tuple[bytes, int],
    sys_flag: int,
    flag: int,
    reconsume: int,
    queue_id: int,
) -> None:
    topic_b, magic = topic_field("SingleTopic")
    pair = ClientProperties().cluster_pair(CLUSTER)
    expected = bytearray()
    append_record(
        expected,
        topic_b,
        magic,
        queue_id,
        flag,
        body,
        props_s.encode() + pair,
        sys_flag,
        123_456_789,
        born[0],
        born[1],
        store[0],
        store[1],
        reconsume,
    )
    got = encode_single(
        topic_b,
        magic,
        queue_id,
        flag,
        body,
        props_s.encode(),
        pair,
        sys_flag,
        123_456_789,
        host_port(born),
        host_port(store),
        reconsume,
    )
    assert got == expected


def test_encode_single_declines_properties_over_the_limit() -> None:
    topic_b, magic = topic_field("SingleTopic")
    fields = (host_port((V4, 1)), host_port((V4, 2)))
    ok = encode_single(topic_b, magic, 0, 0, b"b", b"x" * 32757, b"y" * 10, 0, 1, *fields, 0)
    assert ok is not None
    assert encode_single(topic_b, magic, 0, 0, b"b", b"x" * 32758, b"y" * 10, 0, 1, *fields, 0) is None


@settings(max_examples=200, deadline=None)
@given(
    wrote=st.integers(-1, 2**62),
    host=st.sampled_from([b"", V4 + b"\x00\x00\x2a\x9f", V6 + b"\x00\x00\x01\x00"]),
    batch=st.one_of(st.none(), st.lists(st.integers(0, 2**62), max_size=5)),
)
def test_response_msg_ids_equal_the_store_results(wrote: int, host: bytes, batch: list[int] | None) -> None:
    result = PutMessageResult(PutMessageStatus.PUT_OK, wrote, 10, 0, 0, 1, "", host, batch)
    assert offset_msg_ids(result) == result.msg_id


@settings(max_examples=100, deadline=None)
@given(
    placed=st.tuples(
        st.integers(0, 2**62), st.integers(1, 2**20), st.integers(0, 2**62), st.integers(0, 2**50)
    ),
    host=st.sampled_from([V4 + b"\x00\x00\x2a\x9f", V6 + b"\x00\x00\x01\x00"]),
    queue_id=st.integers(0, 255),
    uniq=st.sampled_from([None, "", "7F0000010F2A18B4AAC2086F5E2A0000"]),
    serialize_type=st.sampled_from([0, 1]),
)
def test_a_response_from_the_plain_path_equals_the_one_from_its_store_result(
    placed: tuple[int, int, int, int], host: bytes, queue_id: int, uniq: str | None, serialize_type: int
) -> None:
    """The send fast path answers from the store's tuple (``placed_response``): the same response
    as the general path's ``send_response`` of the equivalent PutMessageResult."""
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=77, serialize_type=serialize_type)
    ext_ok = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    got = placed_response(cmd, placed, queue_id, uniq, ext_ok, host)
    want = send_response(cmd, PutMessageResult.placed(placed, host), queue_id, uniq, ext_ok)
    assert (got.code, got.opaque, got.flag, got.remark, got.serialize_type) == (
        want.code,
        want.opaque,
        want.flag,
        want.remark,
        want.serialize_type,
    )
    assert got.ext_fields == want.ext_fields
    assert got.ext_fields is not ext_ok
    assert ext_ok == {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
