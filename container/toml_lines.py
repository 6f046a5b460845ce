"""Line numbers for keys of a TOML file, which ``tomllib`` does not report.

A line scanner good for the files people write by hand: ``[table]`` and ``[[array]]`` headers,
``key = value`` lines (bare or quoted keys), comments, and multi-line strings/arrays (whose inner
lines are never taken for keys). Dotted keys and inline tables are not resolved; for them callers
fall back to the table header's line.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"\s*(\[\[|\[)\s*([A-Za-z0-9_\-]+)\s*(\]\]|\])\s*(#.*)?$")
_KEY = re.compile(r"""\s*(?:"([^"\\]*)"|'([^']*)'|([A-Za-z0-9_\-]+))\s*=""")


class TomlLines:
    """Index of ``(table, array index) → key → line`` and table headers, for one file's text."""

    def __init__(self, text: str, file: str = "") -> None:
        self.file = file
        self._keys: dict[tuple[object, ...], dict[str, int]] = {}
        self._tables: dict[tuple[str, int], int] = {}
        counts: dict[str, int] = {}
        current: tuple[object, ...] = ()
        in_multiline: str | None = None
        depth = 0  # open brackets of a multi-line array
        for lineno, line in enumerate(text.splitlines(), start=1):
            if in_multiline is not None:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            if depth > 0:
                depth += _bracket_balance(line)
                continue
            m = _HEADER.match(line)
            if m and not _KEY.match(line):
                name = m.group(2)
                if m.group(1) == "[[":
                    index = counts.get(name, -1) + 1
                    counts[name] = index
                else:
                    index = 0
                current = (name, index)
                self._tables.setdefault((name, index), lineno)
                continue
            k = _KEY.match(line)
            if k:
                key = k.group(1) or k.group(2) or k.group(3)
                self._keys.setdefault(current, {}).setdefault(key, lineno)
                rest = line[k.end() :]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_multiline = quote
                        break
                else:
                    depth = max(0, _bracket_balance(rest))

    def key_line(self, table: tuple[object, ...], key: str) -> int:
        """Line of ``key`` in ``table`` (``()`` = top level, else ``(name, index)``); 0 if not found."""
        return self._keys.get(table, {}).get(key, 0)

    def table_line(self, name: str, index: int) -> int:
        """Line of the ``index``-th ``[name]``/``[[name]]`` header; 0 if not found."""
        return self._tables.get((name, index), 0)


def _bracket_balance(s: str) -> int:
    """Open minus closed brackets outside strings and comments (good enough for arrays of scalars)."""
    balance = 0
    quote: str | None = None
    for c in s:
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            break
        elif c == "[":
            balance += 1
        elif c == "]":
            balance -= 1
    return balance
