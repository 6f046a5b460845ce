"""Typed custom headers: the one place where extFields strings become typed values and back.

Upstream: ``CommandCustomHeader`` classes and ``RemotingCommand.decodeCommandCustomHeader`` /
``makeCustomHeaderToNet``. A header class is a :class:`CommandHeader` subclass whose fields use
the upstream Java field names; fields without a default are required::

    class PullMessageRequestHeader(CommandHeader):
        consumerGroup: str
        topic: str
        queueId: int
        subscription: str | None = None

Decoding (:func:`decode_header`) is lax the way peers need it: ``"123"`` for ints,
``"true"``/``"false"`` (any case) and ``"1"``/``"0"`` for booleans (the C++ client sends those),
enums by name (case-insensitive) or value, unknown keys ignored, an empty string for a
non-string field counts as absent. A missing required field or a bad value raises
:class:`HeaderError` naming the field. Encoding (:func:`encode_header`) produces strings only:
None omitted, booleans ``"true"``/``"false"``, enums by name, numbers in decimal.
"""

from __future__ import annotations

import enum
import re
from typing import Any, TypeVar

import msgspec

from remoting.command import RemotingCommand

__all__ = ["CommandHeader", "HeaderError", "decode_header", "encode_header"]


class HeaderError(ValueError):
    """A request's custom header is missing a required field or has a bad value.

    The server turns it into SYSTEM_ERROR with this message as the remark (upstream turns
    header decode failures into system errors).
    """


class CommandHeader(msgspec.Struct, kw_only=True):
    """Base class of every typed custom header (upstream ``CommandCustomHeader``)."""


H = TypeVar("H", bound=CommandHeader)


class _Plan(msgspec.Struct, gc=False):
    """Per-class facts computed once: which fields need which pre-conversion."""

    #: field name -> enum class, for fields typed as an enum (optionally | None)
    enums: dict[str, type[enum.Enum]]
    #: names of fields whose type admits str (an empty string is a value there, not "absent")
    stringy: frozenset[str]
    #: field name -> readable expected type, for error messages
    expected: dict[str, str]
    #: fields in declaration order, for encoding
    names: tuple[str, ...]


_plans: dict[type, _Plan] = {}
_MISSING_RE = re.compile(r"missing required field `([^`]+)`")
_AT_RE = re.compile(r"at `\$\.([^`\[]+)")


def _type_name(t: msgspec.inspect.Type) -> str:
    if isinstance(t, msgspec.inspect.UnionType):
        return " | ".join(_type_name(x) for x in t.types if not isinstance(x, msgspec.inspect.NoneType))
    if isinstance(t, msgspec.inspect.EnumType):
        return "one of " + ", ".join(m.name for m in t.cls)
    if isinstance(t, msgspec.inspect.IntType):
        return "int"
    if isinstance(t, msgspec.inspect.FloatType):
        return "float"
    if isinstance(t, msgspec.inspect.BoolType):
        return "bool"
    if isinstance(t, msgspec.inspect.StrType):
        return "str"
    return type(t).__name__.removesuffix("Type").lower()


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is not None:
        return plan
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    enums: dict[str, type[enum.Enum]] = {}
    stringy: set[str] = set()
    expected: dict[str, str] = {}
    for f in info.fields:
        members = f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,)
        for m in members:
            if isinstance(m, msgspec.inspect.EnumType):
                enums[f.name] = m.cls
            elif isinstance(m, msgspec.inspect.StrType | msgspec.inspect.AnyType):
                stringy.add(f.name)
        expected[f.name] = _type_name(f.type)
    plan = _Plan(
        enums=enums,
        stringy=frozenset(stringy),
        expected=expected,
        names=tuple(f.name for f in info.fields),
    )
    _plans[cls] = plan
    return plan


def _enum_value(name: str, value: str, cls: type[enum.Enum]) -> object:
    member = cls.__members__.get(value)
    if member is None:
        upper = value.upper()
        for k, m in cls.__members__.items():
            if k.upper() == upper:
                member = m
                break
    if member is None:
        for m in cls:
            if str(m.value) == value:
                member = m
                break
    if member is None:
        names = ", ".join(cls.__members__)
        raise HeaderError(f"header field {name!r}: expected one of {names}, got {value!r}")
    return member.value


def decode_header(cmd: RemotingCommand, cls: type[H]) -> H:
    """The typed header of ``cmd`` (from its extFields); raises :class:`HeaderError`."""
    ext: dict[str, Any] = cmd.ext_fields or {}
    plan = _plans.get(cls) or _plan(cls)
    if plan.enums or "" in ext.values():
        ext = dict(ext)
        for k, v in list(ext.items()):
            if v == "" and k not in plan.stringy:
                del ext[k]
        for k, ecls in plan.enums.items():
            v = ext.get(k)
            if isinstance(v, str):
                ext[k] = _enum_value(k, v, ecls)
    try:
        return msgspec.convert(ext, cls, strict=False)
    except msgspec.ValidationError as e:
        raise _header_error(str(e), ext, plan) from None


def _header_error(msg: str, ext: dict[str, Any], plan: _Plan) -> HeaderError:
    m = _MISSING_RE.search(msg)
    if m:
        return HeaderError(f"missing required header field {m.group(1)!r}")
    m = _AT_RE.search(msg)
    if m and m.group(1) in plan.expected:
        field = m.group(1)
        return HeaderError(f"header field {field!r}: expected {plan.expected[field]}, got {ext.get(field)!r}")
    return HeaderError(f"bad header: {msg}")


def _to_str(value: object) -> str:
    if type(value) is str:
        return value  # type: ignore[return-value]
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, enum.Enum):
        return value.name
    return str(value)


def encode_header(header: CommandHeader) -> dict[str, str]:
    """``header`` as extFields: strings only, None omitted, bools true/false, enums by name."""
    plan = _plans.get(type(header)) or _plan(type(header))
    out: dict[str, str] = {}
    for name in plan.names:
        v = getattr(header, name)
        if v is not None:
            out[name] = v if type(v) is str else _to_str(v)
    return out
