"""SEND_BATCH_MESSAGE in one pass: split the batch body and encode every stored record together.

The general path of :mod:`broker.send` splits the body (:func:`split_batch_body`), completes each
item's properties (CLUSTER, UNIQ_KEY) and encodes each record (:func:`append_record`).
:class:`BatchRecordEncoder` gives the same bytes, hints and unique keys in one loop, with what all
records of a batch share (topic, queue, sysflag, born/store hosts, born timestamp) packed once:

- an item whose properties hold a non-empty UNIQ_KEY at a key position, end with 0x02, are well
  formed (every piece has 0x01 and at least 3 characters, no key twice) and have no CLUSTER -- what
  clients send -- is stored as the client's bytes plus the CLUSTER pair, exactly what upstream's
  parse + rebuild gives. Whether the rest of the string is in that form is cached by its *shape*
  (the string with the UNIQ_KEY value cut out), which repeats from message to message; other
  items get the general per-item treatment (the ``complete`` callback).
- anything the general path answers with an error (lengths that do not add up, a body over the
  limit, properties that are not UTF-8 or over 32767 bytes, an empty body) makes :meth:`encode`
  return None, and the caller runs the general path, which gives the error response.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from remoting.protocol.message import (
    BORNHOST_V6_FLAG,
    MAX_PROPERTIES_LENGTH,
    PROPERTY_CLUSTER,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    STOREHOSTADDRESS_V6_FLAG,
    parse_properties,
    properties_to_string,
    tags_hash_code,
)

__all__ = ["BatchHint", "BatchRecordEncoder", "Completer"]

#: (tags hash code, KEYS, UNIQ_KEY) of one record, as ``put_messages`` takes them.
BatchHint = tuple[int, str | None, str | None]
#: ``SendProcessor._complete_properties``: (map, pairs to append or None, unique key).
Completer = Callable[[str], tuple[dict[str, str], str | None, str]]

_ITEM_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen of a batch item
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TIMES = struct.Struct(">qqiq")  # QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP
_ZERO8 = bytes(8)  # STORETIMESTAMP (set at append)
_ZERO12 = bytes(12)  # RECONSUMETIMES (0 for batches), PREPARED_TRANSACTION_OFFSET
_UNIQ_AT = PROPERTY_UNIQ_KEY + "\x01"
_UNIQ_LEN = len(_UNIQ_AT)
_SHAPE_LIMIT = 4096
_MISSING = object()


class BatchRecordEncoder:
    """One per send processor (it keeps the shape cache)."""

    def __init__(self, complete: Completer) -> None:
        self._complete = complete
        #: shape -> (tags code, KEYS) when items of that shape take the shortcut, else None
        self._shapes: dict[str, tuple[int, str | None] | None] = {}
        self._prefix_structs: dict[int, struct.Struct] = {}
        self._cluster = ""
        self._cluster_pair = b""

    def _shape_info(self, shape: str) -> tuple[int, str | None] | None:
        props = parse_properties(shape)
        info: tuple[int, str | None] | None = None
        if shape[-1:] == "\x02" and len(props) == shape.count("\x02") and PROPERTY_CLUSTER not in props:
            info = (tags_hash_code(props.get(PROPERTY_TAGS)), props.get(PROPERTY_KEYS))
        if len(self._shapes) >= _SHAPE_LIMIT:
            self._shapes.clear()
        self._shapes[shape] = info
        return info

    def encode(
        self,
        body: bytes,
        topic_field: bytes,
        magic: int,
        queue_id: int,
        sys_flag: int,
        born_timestamp: int,
        born: tuple[bytes, int],
        store: tuple[bytes, int],
        max_body_size: int,
        cluster: str,
    ) -> tuple[bytearray, list[BatchHint], list[str]] | None:
        """The records of every item of ``body`` laid end to end, their dispatch hints and unique
        keys; None when the general path must decide (see the module docstring)."""
        n = len(body)
        if not n:
            return None
        if cluster != self._cluster:
            self._cluster = cluster
            self._cluster_pair = f"{PROPERTY_CLUSTER}\x01{cluster}\x02".encode()
        pair = self._cluster_pair
        pair_len = len(pair)
        born_ip, born_port = born
        store_ip, store_port = store
        sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        if len(born_ip) == 16:
            sys_flag |= BORNHOST_V6_FLAG
        if len(store_ip) == 16:
            sys_flag |= STOREHOSTADDRESS_V6_FLAG
        # QUEUEOFFSET .. PREPARED_TRANSACTION_OFFSET: the same for every record of the batch
        middle = (
            _TIMES.pack(0, 0, sys_flag, born_timestamp)
            + born_ip
            + _I32.pack(born_port)
            + _ZERO8
            + store_ip
            + _I32.pack(store_port)
            + _ZERO12
        )
        prefix = self._prefix_structs.get(len(middle))
        if prefix is None:
            prefix = self._prefix_structs[len(middle)] = struct.Struct(f">iiiii{len(middle)}si")
        pack_prefix = prefix.pack
        fixed = prefix.size + len(topic_field) + 2
        unpack_head = _ITEM_HEAD.unpack_from
        unpack_i16 = _I16.unpack_from
        crc32 = zlib.crc32
        shapes_get = self._shapes.get
        complete = self._complete
        mv = memoryview(body)
        tails: dict[int, bytes] = {}  # stored properties length -> topic field + that length
        parts: list[bytes | memoryview] = []
        add = parts.append
        hints: list[BatchHint] = []
        uniqs: list[str] = []
        pos = 0
        while pos < n:
            if pos + 22 > n:
                return None
            total, _magic, _crc, flag, body_len = unpack_head(body, pos)
            p = pos + 20
            body_end = p + body_len
            if body_len < 0 or body_end + 2 > n:
                return None
            props_len = unpack_i16(body, body_end)[0]
            ps = body_end + 2
            pe = ps + props_len
            if props_len < 0 or pe > n or total != pe - pos or body_len > max_body_size:
                return None
            try:
                props_s = str(mv[ps:pe], "utf-8")
            except UnicodeDecodeError:
                return None
            info: tuple[int, str | None] | object | None = None
            i = props_s.find(_UNIQ_AT)
            if i == 0 or (i > 0 and props_s[i - 1] == "\x02"):
                vs = i + _UNIQ_LEN
                j = props_s.find("\x02", vs)
                if j > vs:
                    shape = props_s[:vs] + props_s[j:]
                    info = shapes_get(shape, _MISSING)
                    if info is _MISSING:
                        info = self._shape_info(shape)
            data = mv[p:body_end]
            if info is not None:
                tags_code, keys = info  # type: ignore[misc]
                uniq = props_s[vs:j]
                stored_len = props_len + pair_len
                if stored_len > MAX_PROPERTIES_LENGTH:
                    return None
                tail = tails.get(stored_len)
                if tail is None:
                    tail = tails[stored_len] = topic_field + _I16.pack(stored_len)
                add(
                    pack_prefix(
                        fixed + body_len + stored_len,
                        magic,
                        crc32(data) & 0x7FFFFFFF,
                        queue_id,
                        flag,
                        middle,
                        body_len,
                    )
                )
                add(data)
                add(tail)
                add(mv[ps:pe])
                add(pair)
            else:
                props, more, uniq = complete(props_s)
                stored = (props_s + more if more is not None else properties_to_string(props)).encode()
                stored_len = len(stored)
                if stored_len > MAX_PROPERTIES_LENGTH:
                    return None
                tags_code = tags_hash_code(props.get(PROPERTY_TAGS))
                keys = props.get(PROPERTY_KEYS)
                add(
                    pack_prefix(
                        fixed + body_len + stored_len,
                        magic,
                        crc32(data) & 0x7FFFFFFF,
                        queue_id,
                        flag,
                        middle,
                        body_len,
                    )
                )
                add(data)
                add(topic_field + _I16.pack(stored_len))
                add(stored)
            hints.append((tags_code, keys, uniq))
            uniqs.append(uniq)
            pos = pe
        return bytearray().join(parts), hints, uniqs
