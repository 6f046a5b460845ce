"""Typed config values: errors with locations, value conversion by field type, path expansion.

Shared by the ``.properties`` and TOML loaders in :mod:`container.config`. A config struct is any
``msgspec.Struct`` whose fields are ``int``, ``float``, ``bool``, ``str``, a ``StrEnum``, or one of
those ``| None``.

Conversion of ``.properties`` text follows upstream's ``MixAll.properties2Object`` with two
deliberate differences, both stricter: a boolean must be ``true`` or ``false`` (any case; upstream
reads anything else as false), and a number that does not parse is an error (upstream silently keeps
the default). Surrounding whitespace is stripped from every value (upstream strips strings only, and
silently drops a number with trailing blanks).
"""

from __future__ import annotations

import enum
import functools
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi


class ConfigError(Exception):
    """Base class of every configuration problem; ``str()`` is the message for the user."""


class KeyLocation(msgspec.Struct, frozen=True):
    """Where a key was found: file, 1-based line (0 when unknown) and an optional hint."""

    file: str
    line: int
    key: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}: unknown key {self.key!r}{hint}"


class UnknownConfigKey(ConfigError):
    """One or more keys no component knows; ``keys`` lists every one with its location."""

    def __init__(self, keys: list[KeyLocation]) -> None:
        self.keys = keys
        lines = "\n".join(f"  {k}" for k in keys)
        super().__init__(f"{len(keys)} unknown config key(s):\n{lines}")


class BadConfigValue(ConfigError):
    """A value that does not convert to its field's type."""

    def __init__(self, file: str, line: int, key: str, value: object, reason: str) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.value = value
        self.reason = reason
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: bad value for {key}: {value!r} ({reason})")


class InvalidConfig(ConfigError):
    """Values that each parse but do not make a runnable process together."""


# --- field types ---------------------------------------------------------------------------------


class FieldKind(msgspec.Struct, frozen=True):
    """What a field accepts: ``base`` is one of int/float/bool/str/enum; ``enum`` the enum class."""

    base: str
    optional: bool
    enum: type[enum.Enum] | None = None


def _kind_of(t: mi.Type) -> FieldKind:
    optional = False
    if isinstance(t, mi.UnionType):
        rest = [x for x in t.types if not isinstance(x, mi.NoneType)]
        optional = len(rest) != len(t.types)
        if len(rest) != 1:
            raise TypeError(f"unsupported config field type {t}")
        t = rest[0]
    if isinstance(t, mi.IntType):
        return FieldKind("int", optional)
    if isinstance(t, mi.FloatType):
        return FieldKind("float", optional)
    if isinstance(t, mi.BoolType):
        return FieldKind("bool", optional)
    if isinstance(t, mi.StrType):
        return FieldKind("str", optional)
    if isinstance(t, mi.EnumType):
        return FieldKind("enum", optional, t.cls)
    raise TypeError(f"unsupported config field type {t}")


@functools.cache
def field_kinds(cls: type[msgspec.Struct]) -> dict[str, FieldKind]:
    """Field name → accepted kind, in declaration order."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return {f.name: _kind_of(f.type) for f in info.fields}


_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")
_INT64 = (-(2**63), 2**63 - 1)


def _type_name(kind: FieldKind) -> str:
    if kind.base == "enum" and kind.enum is not None:
        return "one of " + ", ".join(m.name for m in kind.enum)
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}[kind.base]


def convert_text(kind: FieldKind, text: str) -> Any:
    """Convert a ``.properties`` value; raises ``ValueError(reason)``."""
    s = text.strip()
    if kind.base == "str":
        return s
    if kind.base == "int":
        if not _INT_RE.fullmatch(s):
            raise ValueError(f"expected {_type_name(kind)}")
        v = int(s)
        if not _INT64[0] <= v <= _INT64[1]:
            raise ValueError("out of range")
        return v
    if kind.base == "float":
        if not _FLOAT_RE.fullmatch(s):
            raise ValueError(f"expected {_type_name(kind)}")
        return float(s.rstrip("dDfF"))
    if kind.base == "bool":
        low = s.lower()
        if low not in ("true", "false"):
            raise ValueError(f"expected {_type_name(kind)}")
        return low == "true"
    assert kind.enum is not None
    try:
        return kind.enum[s]
    except KeyError:
        raise ValueError(f"expected {_type_name(kind)}") from None


def convert_toml(kind: FieldKind, value: object) -> Any:
    """Check and convert a TOML value (already typed by the TOML parser); raises ``ValueError``."""
    if kind.base == "str":
        if isinstance(value, str):
            return value
    elif kind.base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64[0] <= value <= _INT64[1]:
                raise ValueError("out of range")
            return value
    elif kind.base == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind.base == "bool":
        if isinstance(value, bool):
            return value
    else:
        assert kind.enum is not None
        if isinstance(value, str):
            try:
                return kind.enum[value]
            except KeyError:
                pass
    raise ValueError(f"expected {_type_name(kind)}, got {type(value).__name__}")


# --- paths ---------------------------------------------------------------------------------------

#: Keys whose values are file-system paths: ``~``, ``${user.home}`` and ``${rmq.data.dir}`` are
#: expanded and relative paths made absolute (against the working directory, as upstream does).
PATH_KEYS = frozenset(
    {
        "storePathRootDir",
        "storePathCommitLog",
        "storePathEpochFile",
        "storePathBrokerIdentity",
        "kvConfigPath",
        "configStorePath",
        "controllerStorePath",
        "rocketmqHome",
    }
)

DATA_DIR_PLACEHOLDER = "${rmq.data.dir}"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def default_data_dir() -> str:
    """``$RMQ_DATA_DIR``, else ``data/`` in the project checkout: what ``${rmq.data.dir}`` means."""
    env = os.environ.get("RMQ_DATA_DIR")
    return os.path.abspath(env) if env else str(PROJECT_ROOT / "data")


def expand_path(value: str, data_dir: str) -> str:
    """Expand the placeholders of :data:`PATH_KEYS` values and make the path absolute ("" stays "")."""
    if not value:
        return value
    home = os.path.expanduser("~")
    value = value.replace("${user.home}", home).replace(DATA_DIR_PLACEHOLDER, data_dir)
    return os.path.abspath(os.path.expanduser(value))


# --- building structs ----------------------------------------------------------------------------


class Target:
    """One struct being filled from a file: its class and the converted values so far."""

    def __init__(self, cls: type[msgspec.Struct], label: str) -> None:
        self.cls = cls
        self.label = label
        self.kinds = field_kinds(cls)
        self.values: dict[str, Any] = {}
        self.lines: dict[str, int] = {}

    def knows(self, key: str) -> bool:
        return key in self.kinds

    def build(self) -> Any:
        return self.cls(**self.values)
