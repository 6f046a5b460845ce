"""The remoting command: one request or response frame, independent of how it is serialized.

Upstream: ``org.apache.rocketmq.remoting.protocol.RemotingCommand``. The frame codec
(:mod:`remoting.codec`) turns bytes into commands and back; processors receive and return
commands. ``ext_fields`` holds the custom header exactly as on the wire (strings); typed
access goes through :mod:`remoting.headers`.
"""

from __future__ import annotations

import enum

import msgspec

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

#: The version we stamp on commands we originate (upstream ``MQVersion.CURRENT_VERSION``, V5_3_3).
CURRENT_VERSION = 479


#: the first 16 names of upstream's ``MQVersion.Version`` (3.0.0's pre-releases); from V3_0_1 on
#: every release is a ``_SNAPSHOT`` name followed by the release's
_V3_0_0 = (
    "SNAPSHOT",
    "ALPHA1",
    *(f"BETA{b}" for b in range(1, 6)),
    *(f"BETA{b}{s}" for b in range(6, 10) for s in ("_SNAPSHOT", "")),
    "FINAL",
)
#: (minor, first patch, last patch) of the 3.x releases after 3.0.0, in enum order
_V3_PATCHES = ((0, 1, 15), (1, 0, 9), (2, 0, 9), *((m, 1, 9) for m in range(3, 10)))


def _v3_names() -> tuple[str, ...]:
    names = [f"V3_0_0_{n}" for n in _V3_0_0]
    for minor, first, last in _V3_PATCHES:
        for patch in range(first, last + 1):
            names += [f"V3_{minor}_{patch}_SNAPSHOT", f"V3_{minor}_{patch}"]
    return tuple(names)


_V3_NAMES = _v3_names()  # 212 names: V4_0_0_SNAPSHOT is 212


def version_desc(version: int) -> str:
    """Upstream ``MQVersion.getVersionDesc``: the enum name of a client's or broker's version
    number (the C++ client 2.x reports 63, ``V3_1_8``); past V5_9_9, ``HIGHER_VERSION``."""
    if version < 0:
        return f"V_UNKNOWN({version})"
    if version < len(_V3_NAMES):
        return _V3_NAMES[version]
    if version >= 612:
        return "HIGHER_VERSION"
    index = version - 212
    n = index // 2
    name = f"V{4 + n // 100}_{(n // 10) % 10}_{n % 10}"
    return name if index % 2 else name + "_SNAPSHOT"


class SerializeType(enum.IntEnum):
    """Header serialization, the top byte of the second frame word (upstream ``SerializeType``)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(enum.IntEnum):
    """Sender language (upstream ``LanguageCode``); JSON headers carry the name, binary ones the byte."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class RemotingCommand(msgspec.Struct, kw_only=True):
    """One frame's worth of header fields plus body.

    ``body`` is ``bytes`` for received frames; for frames we send it may be any buffer or a
    list of buffers (memoryviews into mapped files on the pull path), so that the codec can
    write them without concatenating first.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    language: LanguageCode = LanguageCode.PYTHON
    version: int = CURRENT_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes | memoryview | list[bytes | memoryview] | None = None
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def body_bytes(self) -> bytes:
        """The body as one bytes object (copies when the body is a view or a list)."""
        b = self.body
        if b is None:
            return b""
        if isinstance(b, bytes):
            return b
        if isinstance(b, list):
            return b"".join(bytes(x) for x in b)
        return bytes(b)

    def response(self, code: int, remark: str | None = None, **ext: object) -> RemotingCommand:
        """A response to this request: same opaque, same serialize type, response flag set."""
        fields = {k: _ext_str(v) for k, v in ext.items() if v is not None} if ext else None
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=fields,
            serialize_type=self.serialize_type,
        )


def _ext_str(value: object) -> str:
    """extFields values are strings on the wire: booleans as true/false, enums by name."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    return str(value)


def request(code: int, ext: dict[str, object] | None = None, body: bytes | None = None) -> RemotingCommand:
    """A new request command (the client assigns the opaque when it sends it)."""
    fields = {k: _ext_str(v) for k, v in ext.items() if v is not None} if ext else None
    return RemotingCommand(code=int(code), ext_fields=fields, body=body)
