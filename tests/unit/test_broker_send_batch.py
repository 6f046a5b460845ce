"""The one-pass batch encoder gives exactly what the general path gives: split the batch body, add
CLUSTER (and UNIQ_KEY when missing) the way upstream does (parse, add, write the map out again),
encode each record; and it declines (None) exactly when the general path answers with an error."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.send_batch import BatchRecordEncoder
from remoting.protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
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


def general(
    body: bytes, born: tuple[bytes, int], store: tuple[bytes, int], sys_flag: int
) -> tuple[bytes, list[tuple[int, str | None, str | None]], list[str]] | None:
    """The general path of broker/send.py, with upstream's property rule; None where it errs."""
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
    return bytes(out), hints, uniqs


def fast(
    body: bytes, born: tuple[bytes, int], store: tuple[bytes, int], sys_flag: int
) -> tuple[bytes, list[tuple[int, str | None, str | None]], list[str]] | None:
    topic_b, magic = topic_field("BatchTopic")
    got = BatchRecordEncoder(UpstreamCompleter()).encode(
        body, topic_b, magic, 3, sys_flag, 1_700_000_000_000, born, store, MAX_BODY, CLUSTER
    )
    return None if got is None else (bytes(got[0]), got[1], got[2])


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


@settings(max_examples=400, deadline=None)
@given(items=_ITEMS, born=_HOST, store=_HOST, sys_flag=st.sampled_from([0, 0x1, 0x30, 0x2]))
def test_fast_batch_equals_general_path(
    items: list[BatchItem], born: tuple[bytes, int], store: tuple[bytes, int], sys_flag: int
) -> None:
    body = encode_batch_body(items)
    assert fast(body, born, store, sys_flag) == general(body, born, store, sys_flag)


@settings(max_examples=300, deadline=None)
@given(items=_ITEMS.filter(bool), cut=st.integers(0, 10_000), junk=st.binary(min_size=1, max_size=4))
def test_fast_batch_declines_where_the_general_path_errs(
    items: list[BatchItem], cut: int, junk: bytes
) -> None:
    body = encode_batch_body(items)
    at = cut % len(body)
    for broken in (body[:at], body[:at] + junk + body[at + len(junk) :]):
        assert fast(broken, (V4, 1), (V4, 2), 0) == general(broken, (V4, 1), (V4, 2), 0)


def test_client_style_batch_takes_the_shortcut_and_decodes() -> None:
    props = [f"UNIQ_KEY\x01ABCDEF{i:04d}\x02TAGS\x01t{i % 2}\x02WAIT\x01true\x02" for i in range(8)]
    body = encode_batch_body(BatchItem(i, f"body{i}".encode(), p) for i, p in enumerate(props))

    def no_general(props_s: str) -> tuple[dict[str, str], str | None, str]:
        raise AssertionError(f"client-style properties went the general way: {props_s!r}")

    topic_b, magic = topic_field("BatchTopic")
    got = BatchRecordEncoder(no_general).encode(
        body, topic_b, magic, 1, 0, 5, (V4, 1), (V4, 2), MAX_BODY, CLUSTER
    )
    assert got is not None
    records, hints, uniqs = got
    assert uniqs == [f"ABCDEF{i:04d}" for i in range(8)]
    assert hints == [(tags_hash_code(f"t{i % 2}"), None, uniqs[i]) for i in range(8)]
    pos = 0
    for i in range(8):
        msg = decode_message(records, pos, check_crc=True)
        assert (msg.topic, msg.queue_id, msg.flag, msg.body) == ("BatchTopic", 1, i, f"body{i}".encode())
        assert msg.properties_raw == props[i] + f"CLUSTER\x01{CLUSTER}\x02"
        pos += msg.total_size
    assert pos == len(records)
