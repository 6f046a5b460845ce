"""Java ``.properties`` parsing with line numbers (the format of upstream's broker/namesrv/container files).

Follows ``java.util.Properties.load``:

- natural lines end at ``\\n``, ``\\r`` or ``\\r\\n``; leading whitespace (space, tab, form feed) of every
  natural line is skipped, so is a line that is then empty;
- a line whose first non-blank character is ``#`` or ``!`` is a comment (a trailing backslash on a
  comment line does not continue it);
- a logical line continues on the next natural line when it ends with an odd number of backslashes;
  the continuation's leading whitespace is dropped (and a ``#`` there is ordinary text);
- the key ends at the first unescaped ``=``, ``:`` or whitespace; then whitespace, at most one ``=`` or
  ``:``, and more whitespace are skipped; the rest of the logical line is the value (trailing whitespace
  is kept, as in Java);
- escapes in keys and values: ``\\t \\n \\r \\f``, ``\\uXXXX`` (exactly four hex digits), and a backslash
  before any other character stands for that character.

One deliberate difference: files are decoded as UTF-8 (Java's ``load(InputStream)`` uses ISO-8859-1);
bytes that are not valid UTF-8 fall back to ISO-8859-1 so old files still load.
"""

from __future__ import annotations

import msgspec

_BLANK = " \t\f"


class PropertiesSyntaxError(ValueError):
    """A malformed ``\\uXXXX`` escape; carries the 1-based line the logical line starts on."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


class Property(msgspec.Struct, frozen=True):
    """One ``key=value`` entry and the 1-based line number its logical line starts on."""

    key: str
    value: str
    line: int


def decode_properties_bytes(data: bytes) -> str:
    """Decode a properties file's bytes: UTF-8, or ISO-8859-1 when the bytes are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def _natural_lines(text: str) -> list[str]:
    # str.splitlines also splits on \v, \x1c.. and \u2028, which Java treats as ordinary text.
    lines: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n" or c == "\r":
            lines.append(text[start:i])
            if c == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            start = i + 1
        i += 1
    if start < n:
        lines.append(text[start:])
    return lines


def _ends_with_odd_backslashes(s: str) -> bool:
    count = 0
    for c in reversed(s):
        if c != "\\":
            break
        count += 1
    return count % 2 == 1


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; return (first line number, raw logical line) without comments/blanks."""
    out: list[tuple[int, str]] = []
    lines = _natural_lines(text)
    i = 0
    while i < len(lines):
        lineno = i + 1
        raw = lines[i].lstrip(_BLANK)
        i += 1
        if not raw or raw[0] in "#!":
            continue
        parts: list[str] = []
        while _ends_with_odd_backslashes(raw):
            parts.append(raw[:-1])
            if i >= len(lines):
                raw = ""
                break
            raw = lines[i].lstrip(_BLANK)
            i += 1
        parts.append(raw)
        out.append((lineno, "".join(parts)))
    return out


def _split_key_value(logical: str) -> tuple[str, str]:
    """Split a logical line into its (still escaped) key and value parts."""
    n = len(logical)
    i = 0
    while i < n:
        c = logical[i]
        if c == "\\":
            i += 2  # an escaped character never ends the key
            continue
        if c in "=:" or c in _BLANK:
            break
        i += 1
    key = logical[: min(i, n)]
    j = i
    while j < n and logical[j] in _BLANK:
        j += 1
    if j < n and logical[j] in "=:":
        j += 1
        while j < n and logical[j] in _BLANK:
            j += 1
    return key, logical[j:]


_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


def unescape(s: str, line: int = 0) -> str:
    """Resolve the properties escapes in ``s`` (see the module docstring)."""
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            # Only reachable for a key/value cut right after a backslash; Java drops it.
            break
        e = s[i + 1]
        if e == "u":
            digits = s[i + 2 : i + 6]
            if len(digits) != 4 or not set(digits) <= _HEX:
                raise PropertiesSyntaxError(line, f"malformed \\uxxxx escape: {s[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(e, e))
        i += 2
    return "".join(out)


def parse_properties(text: str) -> list[Property]:
    """Parse properties text into entries in file order (duplicates kept; the caller decides)."""
    entries: list[Property] = []
    for lineno, logical in _logical_lines(text):
        raw_key, raw_value = _split_key_value(logical)
        entries.append(Property(unescape(raw_key, lineno), unescape(raw_value, lineno), lineno))
    return entries
