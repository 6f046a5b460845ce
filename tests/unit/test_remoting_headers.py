"""Typed custom headers: lax decoding, string-only encoding, errors that name the field."""

from __future__ import annotations

import enum

import pytest

from remoting.command import RemotingCommand
from remoting.headers import CommandHeader, HeaderError, decode_header, encode_header


class BoundaryType(enum.Enum):
    LOWER = "lower"
    UPPER = "upper"


class Perm(enum.IntEnum):
    READ = 4
    WRITE = 2


class PullHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int
    queueOffset: int
    sysFlag: int = 0
    suspend: bool = False
    subscription: str | None = None
    maxOffset: int | None = None
    lo: bool | None = None
    boundary: BoundaryType | None = None
    perm: Perm = Perm.READ
    ratio: float | None = None


def cmd(**ext: str) -> RemotingCommand:
    return RemotingCommand(code=11, ext_fields=ext)


BASE = {"consumerGroup": "CG", "topic": "T", "queueId": "3", "queueOffset": "-12"}


def test_decodes_ints_from_strings_and_applies_defaults() -> None:
    h = decode_header(cmd(**BASE), PullHeader)
    assert h == PullHeader(consumerGroup="CG", topic="T", queueId=3, queueOffset=-12)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("false", False),
        ("FALSE", False),
        ("1", True),
        ("0", False),
    ],
)
def test_booleans_lax(raw: str, want: bool) -> None:
    assert decode_header(cmd(**BASE, suspend=raw), PullHeader).suspend is want
    assert decode_header(cmd(**BASE, lo=raw), PullHeader).lo is want


def test_enums_by_name_any_case_or_value() -> None:
    assert decode_header(cmd(**BASE, boundary="UPPER"), PullHeader).boundary is BoundaryType.UPPER
    assert decode_header(cmd(**BASE, boundary="lower"), PullHeader).boundary is BoundaryType.LOWER
    assert decode_header(cmd(**BASE, perm="WRITE"), PullHeader).perm is Perm.WRITE
    assert decode_header(cmd(**BASE, perm="write"), PullHeader).perm is Perm.WRITE
    assert decode_header(cmd(**BASE, perm="2"), PullHeader).perm is Perm.WRITE


def test_bad_enum_names_the_field() -> None:
    with pytest.raises(
        HeaderError, match=r"header field 'boundary': expected one of LOWER, UPPER, got 'MIDDLE'"
    ):
        decode_header(cmd(**BASE, boundary="MIDDLE"), PullHeader)


def test_unknown_keys_ignored() -> None:
    h = decode_header(cmd(**BASE, AccessKey="", OnsChannel="ALIYUN", Signature="x"), PullHeader)
    assert h.topic == "T"


def test_missing_required_field() -> None:
    ext = dict(BASE)
    del ext["topic"]
    with pytest.raises(HeaderError, match=r"^missing required header field 'topic'$"):
        decode_header(cmd(**ext), PullHeader)


def test_no_ext_fields_at_all() -> None:
    with pytest.raises(HeaderError, match="missing required header field"):
        decode_header(RemotingCommand(code=11), PullHeader)


def test_bad_int_names_the_field_and_value() -> None:
    with pytest.raises(HeaderError, match=r"^header field 'queueId': expected int, got 'abc'$"):
        decode_header(cmd(**{**BASE, "queueId": "abc"}), PullHeader)
    with pytest.raises(HeaderError, match=r"^header field 'maxOffset': expected int, got 'x1'$"):
        decode_header(cmd(**BASE, maxOffset="x1"), PullHeader)


def test_bad_bool_names_the_field() -> None:
    with pytest.raises(HeaderError, match=r"header field 'suspend': expected bool, got 'yes'"):
        decode_header(cmd(**BASE, suspend="yes"), PullHeader)


def test_empty_string_is_absent_for_non_string_fields() -> None:
    h = decode_header(cmd(**BASE, maxOffset="", subscription=""), PullHeader)
    assert h.maxOffset is None
    assert h.subscription == ""
    with pytest.raises(HeaderError, match="missing required header field 'queueId'"):
        decode_header(cmd(**{**BASE, "queueId": ""}), PullHeader)


def test_floats() -> None:
    assert decode_header(cmd(**BASE, ratio="0.25"), PullHeader).ratio == 0.25


def test_encode_strings_only() -> None:
    h = PullHeader(
        consumerGroup="CG",
        topic="T",
        queueId=3,
        queueOffset=-1,
        suspend=True,
        lo=False,
        boundary=BoundaryType.LOWER,
        perm=Perm.WRITE,
        ratio=1.0,
    )
    assert encode_header(h) == {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": "3",
        "queueOffset": "-1",
        "sysFlag": "0",
        "suspend": "true",
        "lo": "false",
        "boundary": "LOWER",
        "perm": "WRITE",
        "ratio": "1.0",
    }


def test_encode_decode_round_trip() -> None:
    h = PullHeader(
        consumerGroup="CG", topic="T", queueId=1, queueOffset=2, suspend=True, boundary=BoundaryType.UPPER
    )
    assert decode_header(RemotingCommand(code=11, ext_fields=encode_header(h)), PullHeader) == h


class Empty(CommandHeader):
    pass


def test_header_without_fields() -> None:
    assert encode_header(Empty()) == {}
    assert decode_header(cmd(x="1"), Empty) == Empty()
