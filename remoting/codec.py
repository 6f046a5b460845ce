"""Sans-IO frame codec for the remoting protocol (upstream ``RemotingCommand.encode/decode``, ``NettyDecoder``).

Frame layout (all integers big-endian)::

    int32 length        bytes after this field = 4 + headerLen + bodyLen
    int32 word          top byte = serialize type (0 JSON, 1 ROCKETMQ), low 24 bits = headerLen
    header              JSON object or ROCKETMQ binary header
    body                the rest

:func:`encode` turns a :class:`RemotingCommand` into a list of buffers (a small header buffer
followed by the body part(s) untouched, so mapped-file views are never copied here).
:class:`FrameDecoder` is fed received bytes in arbitrary chunks and returns whole commands;
any protocol violation raises a :class:`FrameError` subclass and leaves the decoder dead (the
caller closes the connection, as upstream does).

JSON header decoding is as tolerant as upstream and the C++ client need: ``language`` as a
name or an ordinal, extFields values that are JSON numbers or booleans (coerced to strings),
a trailing newline after the object, unknown keys, ``remark: ""``.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import msgspec

from remoting.command import LanguageCode, RemotingCommand, SerializeType, _ext_str

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "BinaryHeaderError",
    "Buffer",
    "FrameDecoder",
    "FrameError",
    "FrameLengthError",
    "HeaderDecodeError",
    "HeaderLengthError",
    "MissingFieldError",
    "UnknownSerializeTypeError",
    "buffer_len",
    "encode",
    "encode_header_bytes",
]

#: Largest frame accepted, counting the 4-byte length prefix (upstream ``frameMaxLength``).
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024

Buffer = bytes | bytearray | memoryview

_PREFIX = struct.Struct(">iI")
_INT = struct.Struct(">i")
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_SHORT = struct.Struct(">h")
_HEADER_LEN_MASK = 0xFFFFFF


class FrameError(ValueError):
    """The peer sent bytes that are not a valid remoting frame; the connection must be closed."""


class FrameLengthError(FrameError):
    """The length prefix is negative, too small, or over the frame size limit."""


class HeaderLengthError(FrameError):
    """The header length in the second word does not fit in the frame."""


class UnknownSerializeTypeError(FrameError):
    """The serialize type byte is neither JSON (0) nor ROCKETMQ (1)."""


class HeaderDecodeError(FrameError):
    """The header bytes could not be decoded (not JSON, not an object, wrong field types)."""


class MissingFieldError(HeaderDecodeError):
    """The header has no ``code``."""


class BinaryHeaderError(HeaderDecodeError):
    """A ROCKETMQ binary header is truncated or has inconsistent lengths."""


# --------------------------------------------------------------------------- JSON header types


class _JsonHeaderIn(msgspec.Struct, gc=False):
    """Fast path: what Java and Python peers send (extFields values are all strings)."""

    code: int
    language: str | int = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    extFields: dict[str, str] | None = None


class _LaxJsonHeaderIn(msgspec.Struct, gc=False):
    """Slow path: extFields values of any JSON type (the C++ client sends numbers)."""

    code: int
    language: str | int = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    extFields: dict[str, Any] | None = None


_FAST_DECODER = msgspec.json.Decoder(_JsonHeaderIn)
_LAX_DECODER = msgspec.json.Decoder(_LaxJsonHeaderIn, strict=False)
_ENCODER = msgspec.json.Encoder()
_LANG_BY_NAME: dict[str, LanguageCode] = {m.name: m for m in LanguageCode}
_LANG_BY_VALUE: dict[int, LanguageCode] = {m.value: m for m in LanguageCode}


def _language(value: str | int) -> LanguageCode:
    """Unknown names or ordinals decode as OTHER rather than failing the frame."""
    if isinstance(value, str):
        return _LANG_BY_NAME.get(value.upper(), LanguageCode.OTHER)
    return _LANG_BY_VALUE.get(value, LanguageCode.OTHER)


def _ext_value(value: object) -> str | None:
    """A JSON extFields value as the string upstream would have seen (None = drop the key)."""
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return _ENCODER.encode(value).decode()


def _decode_json_header(header: memoryview) -> tuple[Any, dict[str, str] | None]:
    try:
        h: Any = _FAST_DECODER.decode(header)
        return h, h.extFields
    except msgspec.DecodeError as e:
        # ValidationError is a DecodeError subclass: retry leniently before giving up.
        if not isinstance(e, msgspec.ValidationError):
            raise HeaderDecodeError(f"header is not valid JSON: {e}") from None
    try:
        h = _LAX_DECODER.decode(header)
    except msgspec.ValidationError as e:
        msg = str(e)
        if "missing required field `code`" in msg:
            raise MissingFieldError("header has no 'code' field") from None
        if msg.startswith("Expected `object`") and " - at " not in msg:
            raise HeaderDecodeError(f"header is not a JSON object: {msg}") from None
        raise HeaderDecodeError(f"header has a field of the wrong type: {msg}") from None
    except msgspec.DecodeError as e:  # pragma: no cover - the fast decoder already parsed it
        raise HeaderDecodeError(f"header is not valid JSON: {e}") from None
    ext: dict[str, str] | None = None
    if h.extFields is not None:
        ext = {}
        for k, v in h.extFields.items():
            s = _ext_value(v)
            if s is not None:
                ext[k] = s
    return h, ext


# --------------------------------------------------------------------------- binary header


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    """ROCKETMQ binary header (upstream ``RocketMQSerializable.rocketMQProtocolDecode``).

    Zero-length remark, keys and values decode as absent, like upstream's null.
    """
    n = len(header)
    if n < 21:
        raise BinaryHeaderError(f"binary header is {n} bytes, shorter than the 21-byte minimum")
    code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
    pos = 13
    (remark_len,) = _INT.unpack_from(header, pos)
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > n:
        raise BinaryHeaderError(f"binary header remark length {remark_len} exceeds the header")
    remark: str | None = None
    try:
        if remark_len:
            remark = str(header[pos : pos + remark_len], "utf-8")
        pos += remark_len
        (ext_len,) = _INT.unpack_from(header, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len != n:
            raise BinaryHeaderError(
                f"binary header extFields length {ext_len} does not match the {n - pos} bytes left"
            )
        ext: dict[str, str] | None = None
        if ext_len:
            ext = {}
            while pos < n:
                if pos + 2 > n:
                    raise BinaryHeaderError("binary header extFields entry truncated in key length")
                (klen,) = _SHORT.unpack_from(header, pos)
                pos += 2
                if klen < 0 or pos + klen + 4 > n:
                    raise BinaryHeaderError(f"binary header extFields key length {klen} exceeds the header")
                key = str(header[pos : pos + klen], "utf-8")
                pos += klen
                (vlen,) = _INT.unpack_from(header, pos)
                pos += 4
                if vlen < 0 or pos + vlen > n:
                    raise BinaryHeaderError(
                        f"binary header extFields value length {vlen} for key {key!r} exceeds the header"
                    )
                value = str(header[pos : pos + vlen], "utf-8")
                pos += vlen
                if key and value:
                    ext[key] = value
    except UnicodeDecodeError as e:
        raise BinaryHeaderError(f"binary header text is not UTF-8: {e}") from None
    return RemotingCommand(
        code=code,
        language=_LANG_BY_VALUE.get(lang, LanguageCode.OTHER),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    if not -0x8000 <= cmd.code <= 0x7FFF:
        raise ValueError(f"code {cmd.code} does not fit the ROCKETMQ header's 16-bit code field")
    out = bytearray(_BIN_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag))
    remark = cmd.remark.encode() if cmd.remark else b""
    out += _INT.pack(len(remark))
    out += remark
    entries = bytearray()
    if cmd.ext_fields:
        for k, v in cmd.ext_fields.items():
            if k is None or v is None:
                continue
            kb = k.encode()
            vb = _ext_str(v).encode()
            entries += _SHORT.pack(len(kb))
            entries += kb
            entries += _INT.pack(len(vb))
            entries += vb
    out += _INT.pack(len(entries))
    out += entries
    return bytes(out)


# --------------------------------------------------------------------------- encode


def _string_ext(ext: dict[str, str]) -> dict[str, str]:
    """extFields must be strings on the wire (the C++ client reads JSON numbers as 0)."""
    for v in ext.values():
        if type(v) is not str:
            return {k: _ext_str(v) for k, v in ext.items() if v is not None}
    return ext


def buffer_len(part: Buffer) -> int:
    """Byte length of one buffer (``len`` of a memoryview counts items, not bytes)."""
    return part.nbytes if isinstance(part, memoryview) else len(part)


def encode_header_bytes(cmd: RemotingCommand) -> bytes:
    """Only the serialized header (no length prefix), in the command's serialize type.

    JSON: upstream's keys in upstream's (alphabetical) order, compact, ``extFields`` and
    ``remark`` omitted when None. The fixed keys are formatted directly (faster than building
    an object for msgspec); extFields and remark go through msgspec for escaping.
    """
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    ext = cmd.ext_fields
    remark = cmd.remark
    lang = _LANG_NAME_BYTES.get(cmd.language, b"OTHER")
    if ext is not None:
        ext_json = _ENCODER.encode(_string_ext(ext))
        if remark is None:
            return _JSON_EXT % (cmd.code, ext_json, cmd.flag, lang, cmd.opaque, cmd.version)
        return _JSON_EXT_REMARK % (
            cmd.code,
            ext_json,
            cmd.flag,
            lang,
            cmd.opaque,
            _ENCODER.encode(remark),
            cmd.version,
        )
    if remark is None:
        return _JSON_BARE % (cmd.code, cmd.flag, lang, cmd.opaque, cmd.version)
    return _JSON_REMARK % (cmd.code, cmd.flag, lang, cmd.opaque, _ENCODER.encode(remark), cmd.version)


_JSON_EXT = b'{"code":%d,"extFields":%b,"flag":%d,"language":"%b","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
_JSON_EXT_REMARK = (
    b'{"code":%d,"extFields":%b,"flag":%d,"language":"%b","opaque":%d,"remark":%b,'
    b'"serializeTypeCurrentRPC":"JSON","version":%d}'
)
_JSON_BARE = (
    b'{"code":%d,"flag":%d,"language":"%b","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
)
_JSON_REMARK = b'{"code":%d,"flag":%d,"language":"%b","opaque":%d,"remark":%b,"serializeTypeCurrentRPC":"JSON","version":%d}'
_LANG_NAME_BYTES: dict[int, bytes] = {m.value: m.name.encode() for m in LanguageCode}


def encode(cmd: RemotingCommand) -> list[Buffer]:
    """The frame for ``cmd`` as buffers to write in order.

    The first buffer holds length prefix, serialize word and header; the body part(s) follow
    unchanged (a list body is spliced in part by part, never concatenated).
    """
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
        word = 0x1000000 | len(header)
    else:
        # encode_header_bytes' JSON branch, inlined: this runs for every response
        ext = cmd.ext_fields
        remark = cmd.remark
        lang = _LANG_NAME_BYTES.get(cmd.language, b"OTHER")
        if ext is not None:
            for v in ext.values():
                if type(v) is not str:
                    ext = _string_ext(ext)
                    break
            if remark is None:
                header = _JSON_EXT % (cmd.code, _ENCODER.encode(ext), cmd.flag, lang, cmd.opaque, cmd.version)
            else:
                header = _JSON_EXT_REMARK % (
                    cmd.code,
                    _ENCODER.encode(ext),
                    cmd.flag,
                    lang,
                    cmd.opaque,
                    _ENCODER.encode(remark),
                    cmd.version,
                )
        elif remark is None:
            header = _JSON_BARE % (cmd.code, cmd.flag, lang, cmd.opaque, cmd.version)
        else:
            header = _JSON_REMARK % (
                cmd.code,
                cmd.flag,
                lang,
                cmd.opaque,
                _ENCODER.encode(remark),
                cmd.version,
            )
        word = len(header)
    body = cmd.body
    if body is None:
        return [_PREFIX.pack(4 + len(header), word) + header]
    if isinstance(body, list):
        parts: list[Buffer] = [b""]
        blen = 0
        for p in body:
            n = buffer_len(p)
            if n:
                parts.append(p)
                blen += n
        parts[0] = _PREFIX.pack(4 + len(header) + blen, word) + header
        return parts
    blen = buffer_len(body)
    head = _PREFIX.pack(4 + len(header) + blen, word) + header
    return [head, body] if blen else [head]


# --------------------------------------------------------------------------- decode


class FrameDecoder:
    """Incremental frame decoder: ``feed`` bytes as they arrive, get back whole commands.

    The length prefix is validated as soon as its 4 bytes arrive, before the body is
    buffered. After a :class:`FrameError` the decoder is dead: every later ``feed`` raises
    the same error again.
    """

    __slots__ = ("_buf", "_error", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means a truncated frame)."""
        return len(self._buf)

    @property
    def error(self) -> FrameError | None:
        """The error that killed the decoder, if any."""
        return self._error

    def feed(self, data: Buffer) -> list[RemotingCommand]:
        """Commands completed by ``data``.

        Raises the :class:`FrameError` when the input is bad and no command precedes the bad
        part in this call; otherwise returns the good commands first and the error is raised
        by the next call (check :attr:`error` to close the connection right after handling them).
        """
        if self._error is not None:
            raise self._error
        out: list[RemotingCommand] = []
        src: Buffer = data
        try:
            if self._buf:
                # Only the pending frame's missing bytes join the held part: the frames after it
                # are parsed where they arrived, and only the next partial frame is held back (a
                # whole chunk appended would copy every frame after a split one twice more).
                src = self._complete(data, out)
            consumed = self._parse(src, out)
        except FrameError as e:
            self._error = e
            self._buf = bytearray()  # not clear(): the traceback may still hold a view of it
            if out:
                return out
            raise
        if consumed < buffer_len(src):
            self._buf += memoryview(src)[consumed:]
        return out

    def _complete(self, data: Buffer, out: list[RemotingCommand]) -> memoryview:
        """Move into the held partial frame what it lacks from ``data`` (the rest of its length
        field first); append it to ``out`` once whole. Returns the unused rest of ``data``."""
        buf = self._buf
        view = memoryview(data)
        have = len(buf)
        if have < 4:
            take = 4 - have
            buf += view[:take]
            view = view[take:]
            if len(buf) < 4:
                return view
            (length,) = _INT.unpack_from(buf, 0)
            if length < 4 or length > self.max_frame_size - 4:
                raise FrameLengthError(self._length_problem(length))
            have = 4
        else:
            (length,) = _INT.unpack_from(buf, 0)
        take = 4 + length - have
        buf += view[:take]
        if len(buf) < 4 + length:
            return view[len(view) :]
        self._buf = bytearray()  # the commands hold copies of their bodies, not views of it
        self._parse(buf, out)
        return view[take:]

    def _parse(self, src: Buffer, out: list[RemotingCommand]) -> int:
        """Append the whole frames at the start of ``src`` to ``out``; return the bytes used."""
        end = buffer_len(src)
        pos = 0
        limit = self.max_frame_size - 4
        unpack_prefix = _PREFIX.unpack_from
        fast_decode = _FAST_DECODER.decode
        lang_by_name = _LANG_BY_NAME
        append = out.append
        with memoryview(src) as mv:
            while end - pos >= 8:
                length, word = unpack_prefix(mv, pos)
                if length < 4 or length > limit:
                    raise FrameLengthError(self._length_problem(length))
                fend = pos + 4 + length
                if fend > end:
                    break
                hlen = word & _HEADER_LEN_MASK
                if hlen > length - 4:
                    raise HeaderLengthError(
                        f"header length {hlen} does not fit in a frame of length {length}"
                    )
                bstart = pos + 8 + hlen
                stype = word >> 24
                if stype == 0:
                    try:
                        h: Any = fast_decode(mv[pos + 8 : bstart])
                        ext = h.extFields
                    except msgspec.DecodeError:
                        h, ext = _decode_json_header(mv[pos + 8 : bstart])
                    lang = lang_by_name.get(h.language)
                    cmd = RemotingCommand(
                        code=h.code,
                        language=_language(h.language) if lang is None else lang,
                        version=h.version,
                        opaque=h.opaque,
                        flag=h.flag,
                        remark=h.remark,
                        ext_fields=ext,
                        body=bytes(mv[bstart:fend]) if fend > bstart else None,
                    )
                elif stype == 1:
                    cmd = _decode_binary_header(mv[pos + 8 : bstart])
                    if fend > bstart:
                        cmd.body = bytes(mv[bstart:fend])
                else:
                    raise UnknownSerializeTypeError(
                        f"unknown serialize type {stype} (word 0x{word & 0xFFFFFFFF:08x})"
                    )
                append(cmd)
                pos = fend
            if end - pos >= 4:
                # only the length of the next frame has arrived: check it now, not when all of it is here
                (length,) = _INT.unpack_from(mv, pos)
                if length < 4 or length > limit:
                    raise FrameLengthError(self._length_problem(length))
        return pos

    def _length_problem(self, length: int) -> str:
        if length < 0:
            return f"negative frame length {length}"
        if length < 4:
            return f"frame length {length} is shorter than the 4-byte header-length word"
        problem = f"frame length {length} (+4) exceeds the limit of {self.max_frame_size} bytes"
        text = length.to_bytes(4, "big")
        if all(0x20 <= b < 0x7F for b in text):  # e.g. 'HTTP' (a response), 'GET ' (a request)
            problem += (
                f"; its bytes are the text {text.decode('ascii')!r}: the peer speaks a text protocol"
                " (HTTP?), not RocketMQ remoting -- check the address and port"
            )
        return problem
