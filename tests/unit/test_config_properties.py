"""Java .properties parsing (container/properties.py), checked against java.util.Properties rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from container.properties import (
    PropertiesSyntaxError,
    decode_properties_bytes,
    parse_properties,
)


def kv(text: str) -> dict[str, str]:
    return {p.key: p.value for p in parse_properties(text)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a : b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a\tb", {"a": "b"}),
        ("a\fb", {"a": "b"}),
        ("  a=b", {"a": "b"}),
        ("a=", {"a": ""}),
        ("a", {"a": ""}),
        ("a   ", {"a": ""}),
        # only one separator is consumed; the second '=' belongs to the value
        ("a==b", {"a": "=b"}),
        ("a = = b", {"a": "= b"}),
        ("a :=b", {"a": "=b"}),
        # trailing whitespace of a value is kept, like Java
        ("a=b  ", {"a": "b  "}),
        ("url=http://h:1/x?y=z", {"url": "http://h:1/x?y=z"}),
        ("a=b#c", {"a": "b#c"}),
        ("a=é ü 中", {"a": "é ü 中"}),
    ],
)
def test_key_value_separators_and_whitespace(text: str, expected: dict[str, str]) -> None:
    assert kv(text) == expected


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# comment\n! bang comment\n   # indented\n\n   \n\t\na=1\n"
    assert kv(text) == {"a": "1"}


def test_continuation_joins_lines_and_drops_leading_whitespace() -> None:
    assert kv("a=one \\\n      two \\\n\tthree") == {"a": "one two three"}


def test_even_number_of_backslashes_does_not_continue() -> None:
    entries = parse_properties("path=c:\\\\\nnext=1")
    assert [(e.key, e.value) for e in entries] == [("path", "c:\\"), ("next", "1")]


def test_odd_number_of_backslashes_continues() -> None:
    assert kv("a=x\\\\\\\ny") == {"a": "x\\y"}


def test_comment_line_ending_in_backslash_does_not_continue() -> None:
    assert kv("# comment \\\nb=1") == {"b": "1"}


def test_continuation_line_starting_with_hash_is_text() -> None:
    assert kv("a=1\\\n  #2") == {"a": "1#2"}


def test_continuation_into_blank_line_ends_value() -> None:
    assert kv("a=1\\\n\nb=2") == {"a": "1", "b": "2"}


def test_trailing_backslash_at_end_of_file() -> None:
    assert kv("a=1\\") == {"a": "1"}


def test_escapes() -> None:
    assert kv(r"a=\t\n\r\f\\\u0041\z\=\:\ \#") == {"a": "\t\n\r\f\\Az=: #"}


def test_escaped_separators_in_key() -> None:
    assert kv(r"k\=ey=v") == {"k=ey": "v"}
    assert kv(r"k\:ey:v") == {"k:ey": "v"}
    assert kv(r"k\ ey v") == {"k ey": "v"}


def test_escaped_leading_space_in_value_is_kept() -> None:
    assert kv(r"a=\ b") == {"a": " b"}


@pytest.mark.parametrize("bad", [r"a=\u12", r"a=\u12G4", r"a=\u"])
def test_malformed_unicode_escape_names_the_line(bad: str) -> None:
    with pytest.raises(PropertiesSyntaxError) as err:
        parse_properties("ok=1\n\n" + bad)
    assert err.value.line == 3


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_line_numbers_with_every_line_ending(eol: str) -> None:
    text = eol.join(["# c", "a=1", "", "b=2 \\", "   more", "c=3"])
    entries = parse_properties(text)
    assert [(e.key, e.value, e.line) for e in entries] == [
        ("a", "1", 2),
        ("b", "2 more", 4),
        ("c", "3", 6),
    ]


def test_duplicates_are_all_returned_in_order() -> None:
    entries = parse_properties("a=1\na=2")
    assert [(e.key, e.value) for e in entries] == [("a", "1"), ("a", "2")]


def test_vertical_tab_is_not_a_line_break() -> None:
    # str.splitlines would split here; Java does not.
    assert kv("a=x\x0by") == {"a": "x\x0by"}


def test_decode_falls_back_to_latin1() -> None:
    assert decode_properties_bytes("a=é".encode()) == "a=é"
    assert decode_properties_bytes(b"a=\xe9") == "a=é"


def _escape(s: str, key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c in "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[c])
        elif c in "=:#!" or (c == " " and (key or i == 0)):
            out.append("\\" + c)
        elif ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


@given(
    st.dictionaries(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
        st.text(st.characters(codec="utf-8"), max_size=30),
        max_size=6,
    ),
    st.sampled_from(["=", ":", " = ", "\t", " : "]),
)
def test_escaped_entries_round_trip(entries: dict[str, str], sep: str) -> None:
    text = "\n".join(f"{_escape(k, True)}{sep}{_escape(v, False)}" for k, v in entries.items())
    assert kv(text) == entries
