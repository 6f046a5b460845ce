"""JSON as Apache RocketMQ's Java side writes and reads it (fastjson 1.2.x).

fastjson is not standard JSON. What matters on the wire:

* Maps with ``Integer``/``Long`` keys are written with **unquoted** keys: ``{0:"10.0.0.1:10911"}``.
* Maps keyed by objects (``MessageQueue``) are written with the **object as the key**:
  ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``.
* Bean properties are written in alphabetical order, null properties and null map values are
  omitted, enums are written by name, sets as arrays, ``byte[]`` as base64.
* The parser is lenient: unquoted keys, single-quoted strings, numbers given as strings.

:func:`loads` parses all of that. It first tries :func:`msgspec.json.decode` (standard JSON, C
speed) and falls back to a small lenient parser only when that fails. Keys that are JSON objects
come back as :class:`FrozenDict` (a hashable ``dict``), so ``msgspec.convert`` can turn them into
a frozen struct such as ``MessageQueue``; unquoted numeric keys come back as ``int``.

:func:`dumps` writes fastjson style (compact, unquoted integer keys, object keys as objects,
struct fields sorted by name, ``None`` omitted, enums by name). With ``standard=True`` it writes
what fastjson's ``BrowserCompatible`` + ``MapSortField`` mode writes, i.e. standard JSON: every
map key quoted, map keys sorted, non-ASCII escaped as ``\\uXXXX``, integers beyond ±2^53 as strings.

:func:`decode` is the typed entry point: ``decode(data, SomeStruct)``.
"""

from __future__ import annotations

import base64
import enum
import re
from collections.abc import Callable
from decimal import Decimal
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, TypeVar

import msgspec

__all__ = [
    "JSON_STRING",
    "FastjsonError",
    "FrozenDict",
    "decode",
    "dumps",
    "dumps_pretty",
    "java_double",
    "loads",
]

T = TypeVar("T")

_JS_SAFE_INT = 2**53


class FastjsonError(ValueError):
    """The input is neither standard JSON nor something fastjson would have written."""


class FrozenDict(dict):  # type: ignore[type-arg]
    """A hashable, read-only ``dict``: what a JSON object used as a map key parses to.

    It is a real ``dict`` subclass, so ``msgspec.convert`` converts it like any object (for
    example into a frozen ``MessageQueue`` struct used as a dict key type).
    """

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def _readonly(self, *args: object, **kwargs: object) -> None:
        raise TypeError("FrozenDict is read-only")

    __setitem__ = _readonly  # type: ignore[assignment]
    __delitem__ = _readonly  # type: ignore[assignment]
    clear = _readonly  # type: ignore[assignment]
    pop = _readonly  # type: ignore[assignment]
    popitem = _readonly  # type: ignore[assignment]
    setdefault = _readonly  # type: ignore[assignment]
    update = _readonly  # type: ignore[assignment]


# ---------------------------------------------------------------------------------------------
# Parsing


_WS = re.compile(r"[ \t\n\r\f\v]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_BARE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SINGLE_ESCAPES = {
    '"': '"',
    "'": "'",
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


class _Parser:
    """Recursive-descent parser for fastjson's dialect; used only when msgspec refuses the input."""

    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> FastjsonError:
        snippet = self.text[self.pos : self.pos + 20]
        return FastjsonError(f"{what} at char {self.pos}: {snippet!r}")

    def skip_ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def parse_document(self) -> Any:
        self.skip_ws()
        value = self.value(frozen=False)
        self.skip_ws()
        if self.pos != len(self.text):
            raise self.fail("trailing data")
        return value

    def value(self, *, frozen: bool) -> Any:
        text = self.text
        if self.pos >= len(text):
            raise self.fail("unexpected end of input")
        ch = text[self.pos]
        if ch == "{":
            return self.obj(frozen=frozen)
        if ch == "[":
            return self.array(frozen=frozen)
        if ch == '"':
            s, self.pos = scanstring(text, self.pos + 1, True)
            return s
        if ch == "'":
            return self.single_quoted()
        m = _NUMBER.match(text, self.pos)
        if m is not None:
            self.pos = m.end()
            if m.group(1) or m.group(2):
                return float(m.group(0))
            return int(m.group(0))
        m = _BARE.match(text, self.pos)
        if m is not None:
            word = m.group(0)
            if word == "true":
                self.pos = m.end()
                return True
            if word == "false":
                self.pos = m.end()
                return False
            if word == "null":
                self.pos = m.end()
                return None
        raise self.fail("unexpected character")

    def single_quoted(self) -> str:
        text = self.text
        i = self.pos + 1
        out: list[str] = []
        while True:
            j = i
            while j < len(text) and text[j] not in "'\\":
                j += 1
            if j >= len(text):
                raise self.fail("unterminated string")
            out.append(text[i:j])
            if text[j] == "'":
                self.pos = j + 1
                return "".join(out)
            esc = text[j + 1 : j + 2]
            if esc == "u":
                try:
                    out.append(chr(int(text[j + 2 : j + 6], 16)))
                except ValueError:
                    self.pos = j
                    raise self.fail("bad \\u escape") from None
                i = j + 6
            elif esc in _SINGLE_ESCAPES:
                out.append(_SINGLE_ESCAPES[esc])
                i = j + 2
            else:
                self.pos = j
                raise self.fail("bad escape")

    def key(self) -> Any:
        """A map key: string, number, bare word, or an object/array (returned hashable)."""
        text = self.text
        ch = text[self.pos] if self.pos < len(text) else ""
        if ch in "{[":
            return self.value(frozen=True)
        if ch == '"':
            s, self.pos = scanstring(text, self.pos + 1, True)
            return s
        if ch == "'":
            return self.single_quoted()
        m = _NUMBER.match(text, self.pos)
        if m is not None:
            self.pos = m.end()
            if m.group(1) or m.group(2):
                return float(m.group(0))
            return int(m.group(0))
        m = _BARE.match(text, self.pos)
        if m is not None:
            self.pos = m.end()
            return m.group(0)
        raise self.fail("expected a key")

    def obj(self, *, frozen: bool) -> Any:
        text = self.text
        self.pos += 1
        result: dict[Any, Any] = {}
        self.skip_ws()
        if self.pos < len(text) and text[self.pos] == "}":
            self.pos += 1
            return FrozenDict() if frozen else result
        while True:
            self.skip_ws()
            if self.pos < len(text) and text[self.pos] == "}":  # trailing comma
                self.pos += 1
                break
            k = self.key()
            self.skip_ws()
            if self.pos >= len(text) or text[self.pos] != ":":
                raise self.fail("expected ':'")
            self.pos += 1
            self.skip_ws()
            result[k] = self.value(frozen=frozen)
            self.skip_ws()
            if self.pos >= len(text):
                raise self.fail("unterminated object")
            ch = text[self.pos]
            self.pos += 1
            if ch == "}":
                break
            if ch != ",":
                self.pos -= 1
                raise self.fail("expected ',' or '}'")
        return FrozenDict(result) if frozen else result

    def array(self, *, frozen: bool) -> Any:
        text = self.text
        self.pos += 1
        items: list[Any] = []
        self.skip_ws()
        if self.pos < len(text) and text[self.pos] == "]":
            self.pos += 1
            return () if frozen else items
        while True:
            self.skip_ws()
            if self.pos < len(text) and text[self.pos] == "]":  # trailing comma
                self.pos += 1
                break
            items.append(self.value(frozen=frozen))
            self.skip_ws()
            if self.pos >= len(text):
                raise self.fail("unterminated array")
            ch = text[self.pos]
            self.pos += 1
            if ch == "]":
                break
            if ch != ",":
                self.pos -= 1
                raise self.fail("expected ',' or ']'")
        return tuple(items) if frozen else items


def _to_text(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FastjsonError(f"not UTF-8: {e}") from None


def loads_lenient(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse with the lenient parser only (no msgspec fast path); exposed for tests and benchmarks."""
    return _Parser(_to_text(data)).parse_document()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON or fastjson output into Python objects.

    Objects become ``dict``; arrays ``list``; unquoted numeric keys ``int``; object keys
    :class:`FrozenDict`. Raises :class:`FastjsonError` on input neither dialect accepts.
    """
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return loads_lenient(data)


def decode(data: bytes | bytearray | memoryview | str, type: type[T]) -> T:
    """Parse ``data`` into ``type`` (a msgspec Struct or any type msgspec understands).

    Standard JSON goes straight through ``msgspec.json.decode``; fastjson-only syntax is parsed
    leniently and then converted. Conversion is lax like fastjson (``"3"`` is accepted for an
    int). Raises :class:`FastjsonError` for unparseable input and ``msgspec.ValidationError``
    when the data does not fit the type.
    """
    try:
        return msgspec.json.decode(data, type=type, strict=False)
    except msgspec.ValidationError:
        # Standard JSON that does not fit; give the lenient converter a chance (e.g. a JSON
        # string holding an object key), and let its ValidationError speak if it also fails.
        pass
    except msgspec.DecodeError:
        quoted = _quote_int_keys(data)
        if quoted is not None:
            try:
                return msgspec.json.decode(quoted, type=type, strict=False)
            except (msgspec.ValidationError, msgspec.DecodeError):
                pass
    return msgspec.convert(loads_lenient(data), type, strict=False)


#: a double-quoted JSON string, escapes included (a pattern, for other patterns to build on)
JSON_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
#: the same, captured: a split keeps each string as its own part
_DQ_STRING = re.compile(b"(" + JSON_STRING + b")")
#: an unquoted integer map key as fastjson writes ``Map<Integer, ...>`` keys (compact); the split
#: keeps the number as its own part
_INT_KEY = re.compile(rb"(?<=[{,])(-?(?:0|[1-9][0-9]*))(?=:)")


def _quote_int_keys(data: bytes | bytearray | memoryview | str) -> bytes | None:
    """``data`` with its unquoted integer map keys quoted, None when it has none.

    The one fastjson-only form of what the Java side writes most (offset tables, broker ids):
    quoted, the document is standard JSON that msgspec decodes at C speed, where the lenient
    parser took ~0.45 s for the 2 MB offset table of 20,000 groups a slave fetches every 10 s.
    Text inside double-quoted strings is left alone; if the result is still not standard JSON
    (single quotes, bare words, object keys, spaces around a key), the caller parses the
    original leniently. Every step is one C call over the whole text: the parts outside strings
    are joined with NULs (never valid there), split around the keys and joined again with a
    quote between each part and the next -- around each key."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if b"\x00" in raw:
        return None
    parts = _DQ_STRING.split(raw)
    outside = _INT_KEY.split(b"\x00".join(parts[::2]))
    if len(outside) == 1:
        return None
    parts[::2] = b'"'.join(outside).split(b"\x00")
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# Writing


_struct_fields_cache: dict[type, tuple[str, ...]] = {}


def _sorted_fields(cls: type) -> tuple[str, ...]:
    names = _struct_fields_cache.get(cls)
    if names is None:
        names = tuple(sorted(cls.__struct_fields__))  # type: ignore[attr-defined]
        _struct_fields_cache[cls] = names
    return names


#: where a msgspec.Raw goes in the writer's text: a NUL, which the writer never writes itself
#: (strings escape it as \\u0000)
_RAW_MARK = "\x00"
_RAW_MARK_B = b"\x00"


class _Writer:
    """Writes one value; ``standard`` selects BrowserCompatible output."""

    __slots__ = ("encstr", "out", "raws", "standard")

    def __init__(self, standard: bool) -> None:
        self.out: list[str] = []
        #: the msgspec.Raw values met, in order (each left as :data:`_RAW_MARK` in ``out``)
        self.raws: list[bytes] = []
        self.standard = standard
        self.encstr: Callable[[str], str] = encode_basestring_ascii if standard else encode_basestring

    def value(self, v: Any) -> None:
        out = self.out
        t = type(v)
        if t is str:
            out.append(self.encstr(v))
        elif t is int:
            if self.standard and not -_JS_SAFE_INT < v < _JS_SAFE_INT:
                out.append('"' + str(v) + '"')
            else:
                out.append(str(v))
        elif t is bool:
            out.append("true" if v else "false")
        elif v is None:
            out.append("null")
        elif isinstance(v, msgspec.Struct):
            self.struct(v)
        elif isinstance(v, dict):
            self.mapping(v)
        elif isinstance(v, list | tuple | set | frozenset):
            self.array(v)
        elif isinstance(v, enum.Enum):
            out.append(self.encstr(v.name))
        elif isinstance(v, int):
            out.append(str(int(v)))
        elif isinstance(v, float):
            # fastjson writes Java's Double.toString (1.0E7, 2.5E-4), null for NaN and infinities
            out.append(java_double(v) if v == v and v not in (float("inf"), float("-inf")) else "null")
        elif isinstance(v, bytes | bytearray | memoryview):
            out.append('"' + base64.b64encode(bytes(v)).decode("ascii") + '"')
        elif isinstance(v, msgspec.Raw):
            # spliced in as bytes by dumps (a whole kept table: megabytes not decoded and encoded)
            self.raws.append(bytes(v))
            out.append(_RAW_MARK)
        else:
            raise TypeError(f"cannot encode {t.__name__} as fastjson")

    def struct(self, s: msgspec.Struct) -> None:
        out = self.out
        out.append("{")
        first = True
        encstr = self.encstr
        for name in _sorted_fields(type(s)):
            fv = getattr(s, name)
            if fv is None:
                continue
            if first:
                first = False
            else:
                out.append(",")
            out.append(encstr(name))
            out.append(":")
            self.value(fv)
        out.append("}")

    def key(self, k: Any) -> None:
        out = self.out
        t = type(k)
        if t is str:
            out.append(self.encstr(k))
        elif t is int or t is bool or isinstance(k, float):
            text = ("true" if k else "false") if t is bool else str(k)
            out.append('"' + text + '"' if self.standard else text)
        elif isinstance(k, enum.Enum):
            out.append(self.encstr(k.name))
        elif isinstance(k, int):
            out.append('"' + str(int(k)) + '"' if self.standard else str(int(k)))
        elif self.standard:
            # BrowserCompatible writes a non-string key as the JSON text of the key, quoted.
            out.append(self.encstr(dumps(k, standard=True).decode("utf-8")))
        else:
            self.value(k)  # object used as key: fastjson writes it as an object
        out.append(":")

    def mapping(self, d: dict[Any, Any]) -> None:
        out = self.out
        out.append("{")
        first = True
        items = d.items()
        if self.standard and len(d) > 1:
            items = sorted(items, key=_sort_key)  # type: ignore[assignment]
        for k, v in items:
            if v is None:
                continue
            if first:
                first = False
            else:
                out.append(",")
            self.key(k)
            self.value(v)
        out.append("}")

    def array(self, items: Any) -> None:
        out = self.out
        out.append("[")
        first = True
        for item in items:
            if first:
                first = False
            else:
                out.append(",")
            self.value(item)
        out.append("]")


def _sort_key(item: tuple[Any, Any]) -> tuple[int, Any]:
    k = item[0]
    if isinstance(k, int | float) and not isinstance(k, bool):
        return (0, k)
    return (1, str(k))


def dumps(obj: Any, *, standard: bool = False) -> bytes:
    """Encode ``obj`` compactly as fastjson would (or as standard JSON with ``standard=True``).

    Supported values: msgspec Structs (fields sorted by name, ``None`` fields omitted), dicts
    (``None`` values omitted; int keys unquoted unless ``standard``; Struct/dict/tuple keys
    written as JSON objects/arrays), lists/tuples/sets, str, int, float, bool, None, enums
    (by name), bytes (base64) and :class:`msgspec.Raw` (inserted verbatim).
    """
    w = _Writer(standard)
    w.value(obj)
    text = "".join(w.out).encode("utf-8")
    if not w.raws:
        return text
    pieces = text.split(_RAW_MARK_B)
    return b"".join(x for pair in zip(pieces, [*w.raws, b""], strict=True) for x in pair)


def java_double(value: float) -> str:
    """Java's ``Double.toString`` of a finite double: ``12.0``, ``0.5``, ``1.0E7``, ``2.5E-4``."""
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = f"{digits[0]}.{''.join(map(str, digits[1:])) or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{exponent + len(digits) - 1}"


def dumps_pretty(obj: Any) -> str:
    """fastjson's ``PrettyFormat`` output (what ``mqadmin topicRoute`` prints).

    Tab indentation; ``"key":value`` without a space; a map's non-string keys stay on the line
    of the brace; a one-element list is not broken over lines (fastjson quirks kept on purpose).
    """
    out: list[str] = []
    _pretty(obj, out, 0)
    return "".join(out)


def _pretty(v: Any, out: list[str], level: int) -> None:
    if isinstance(v, msgspec.Struct):
        names = [n for n in _sorted_fields(type(v)) if getattr(v, n) is not None]
        if not names:
            out.append("{}")
            return
        out.append("{")
        for i, n in enumerate(names):
            if i:
                out.append(",")
            out.append("\n" + "\t" * (level + 1) + encode_basestring(n) + ":")
            _pretty(getattr(v, n), out, level + 1)
        out.append("\n" + "\t" * level + "}")
    elif isinstance(v, dict):
        entries = [(k, x) for k, x in v.items() if x is not None]
        out.append("{")
        for i, (k, x) in enumerate(entries):
            if i:
                out.append(",")
            if isinstance(k, str):
                out.append("\n" + "\t" * (level + 1) + encode_basestring(k) + ":")
            else:
                out.append(dumps(k).decode("utf-8") + ":")
            _pretty(x, out, level + 1)
        if v:  # fastjson ends the line when the map has entries, also null ones it left out
            out.append("\n" + "\t" * level)
        out.append("}")
    elif isinstance(v, list | tuple | set | frozenset):
        items = list(v)
        if len(items) <= 1:
            out.append("[")
            if items:
                _pretty(items[0], out, level)
            out.append("]")
            return
        out.append("[")
        for i, item in enumerate(items):
            if i:
                out.append(",")
            out.append("\n" + "\t" * (level + 1))
            _pretty(item, out, level + 1)
        out.append("\n" + "\t" * level + "]")
    else:
        out.append(dumps(v).decode("utf-8"))
