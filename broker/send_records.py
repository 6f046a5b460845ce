"""Stored records straight from send requests, for properties in the form clients send them.

The general send path (:mod:`broker.send`) parses a client's properties, adds CLUSTER (and UNIQ_KEY
when missing) and writes the map out again, as upstream does; for SEND_BATCH_MESSAGE it splits the
body first (:func:`split_batch_body`) and encodes item by item (:func:`append_record`). This
module gives the same bytes with less work:

- :class:`ClientProperties` recognises the client form: a non-empty UNIQ_KEY at a key position,
  a trailing 0x02, every piece well formed (0x01 inside, at least 3 characters), no key twice, no
  CLUSTER. For such a string upstream's parse + rebuild is the client's string plus the CLUSTER
  pair. Whether a string is in that form -- and its TAGS hash, KEYS, WAIT and whether it has a
  DELAY -- depends only on its *shape* (the string with the UNIQ_KEY value cut out), which repeats
  from message to message, so it is worked out once per shape and cached.
- :func:`encode_single` encodes one record from parts already in wire form.
- :class:`BatchRecordEncoder` splits a batch body and encodes every record in one loop, packing
  what all records of a batch share (topic, queue, sysflag, born/store hosts, born timestamp) once,
  and the queue offsets, physical offsets and store timestamp of the slot the store will append
  them at (``DefaultMessageStore.plain_batch_slot``), with their consume-queue units;
  items not in the client form get the general per-item treatment (the ``complete`` callback).
  A batch of at least ``UNIFORM_MIN_ITEMS`` items of one layout (one size, body length and
  properties shape, UNIQ_KEY values of one width -- what a producer sending same-size messages
  gives) is encoded as the rows of a numpy array instead, column by column, three times faster.
  Anything the general path answers with an error (lengths that do not add up, a body over the
  limit, properties that are not UTF-8 or over 32767 bytes, an empty body) makes
  :meth:`BatchRecordEncoder.encode` return None, and the caller runs the general path, which
  gives the error response.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from remoting.crc import crc32
from remoting.protocol.message import (
    BORNHOST_V6_FLAG,
    MAX_PROPERTIES_LENGTH,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    STOREHOSTADDRESS_V6_FLAG,
    parse_properties,
    properties_to_string,
    tags_hash_code,
)

__all__ = [
    "NO_SLOT",
    "BatchHint",
    "BatchRecordEncoder",
    "ClientProperties",
    "Completer",
    "EncodedBatch",
    "PlacedBatch",
    "PropsInfo",
    "Slot",
    "encode_single",
]

#: (tags hash code, KEYS, UNIQ_KEY) of one record, as ``put_messages`` takes them.
BatchHint = tuple[int, str | None, str | None]
#: (first physical offset, first queue offset, store timestamp) a batch is encoded for
Slot = tuple[int, int, int]
#: the slot of a batch whose place is not known: the store patches every record when it appends
NO_SLOT: Slot = (0, 0, 0)


class PlacedBatch(NamedTuple):
    """Where :meth:`BatchRecordEncoder.encode` placed the records: ``slot`` as given and ``units``
    the consume-queue units (PHYSICALOFFSET, size, tags code of every record, flat). When the slot
    is where the store appends next (``plain_batch_slot``), the store copies the records as they
    are; otherwise it patches them like any batch."""

    slot: Slot
    units: list[int]


class EncodedBatch(NamedTuple):
    records: bytearray
    hints: list[BatchHint]
    uniqs: list[str]
    placed: PlacedBatch


#: (TAGS hash code, KEYS, WAIT is not "false", has DELAY) of a properties string in client form.
PropsInfo = tuple[int, str | None, bool, bool]
#: ``SendProcessor._complete_properties``: (map, pairs to append or None, unique key).
Completer = Callable[[str], tuple[dict[str, str], str | None, str]]

_ITEM_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen of a batch item
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ZERO12 = bytes(12)  # RECONSUMETIMES (0 for batches), PREPARED_TRANSACTION_OFFSET
_UNIQ_AT = PROPERTY_UNIQ_KEY + "\x01"
_UNIQ_AT_B = _UNIQ_AT.encode()
_UNIQ_LEN = len(_UNIQ_AT)
_SHAPE_LIMIT = 4096
#: batches of at least this many items of one layout are encoded as numpy rows: about 21 us a
#: batch plus 0.5 us an item against the item loop's 1.7 us an item (2026-11-26, 1 KiB bodies:
#: even at 16 items, 37.5 against 58 us at 32, 54 against 114 us at 64)
UNIFORM_MIN_ITEMS = 16
_STEPS = np.arange(64, dtype=np.int64)


def _steps(count: int) -> np.ndarray:
    """0, 1, ..., count - 1 as int64."""
    return _STEPS[:count] if count <= 64 else np.arange(count, dtype=np.int64)


_MISSING = object()


class ClientProperties:
    """The shape cache (see the module docstring); one per send processor."""

    def __init__(self) -> None:
        #: shape -> its PropsInfo when strings of that shape are in client form, else None
        self._shapes: dict[str, PropsInfo | None] = {}
        #: the same for shapes as UTF-8 bytes (the batch path reads properties from the body)
        self.raw_shapes: dict[bytes, PropsInfo | None] = {}
        self._cluster = ""
        self._cluster_pair = b""

    def cluster_pair(self, cluster: str) -> bytes:
        """The CLUSTER pair a client-form string gets appended, UTF-8 encoded."""
        if cluster != self._cluster:
            self._cluster_pair = f"{PROPERTY_CLUSTER}\x01{cluster}\x02".encode()
            self._cluster = cluster
        return self._cluster_pair

    def lookup(self, props_s: str) -> tuple[str, PropsInfo] | None:
        """(UNIQ_KEY, info) when ``props_s`` is in client form, else None."""
        i = props_s.find(_UNIQ_AT)
        if i == 0 or (i > 0 and props_s[i - 1] == "\x02"):
            vs = i + _UNIQ_LEN
            j = props_s.find("\x02", vs)
            if j > vs:
                shape = props_s[:vs] + props_s[j:]
                info = self._shapes.get(shape, _MISSING)
                if info is _MISSING:
                    info = self._learn(shape)
                if info is not None:
                    return props_s[vs:j], info  # type: ignore[return-value]
        return None

    def learn_raw(self, shape: bytes) -> PropsInfo | None:
        """The PropsInfo of a shape given as UTF-8 bytes (None when not UTF-8), cached."""
        try:
            text = shape.decode()
        except UnicodeDecodeError:
            info = None
        else:
            info = self._shapes.get(text, _MISSING)
            if info is _MISSING:
                info = self._learn(text)
        if len(self.raw_shapes) >= _SHAPE_LIMIT:
            self.raw_shapes.clear()
        self.raw_shapes[shape] = info  # type: ignore[assignment]
        return info  # type: ignore[return-value]

    def _learn(self, shape: str) -> PropsInfo | None:
        props = parse_properties(shape)
        info: PropsInfo | None = None
        if shape[-1:] == "\x02" and len(props) == shape.count("\x02") and PROPERTY_CLUSTER not in props:
            info = (
                tags_hash_code(props.get(PROPERTY_TAGS)),
                props.get(PROPERTY_KEYS),
                props.get(PROPERTY_WAIT, "true") != "false",
                PROPERTY_DELAY in props,
            )
        if len(self._shapes) >= _SHAPE_LIMIT:
            self._shapes.clear()
        self._shapes[shape] = info
        return info


#: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, (QUEUEOFFSET, PHYSICALOFFSET: 0), SYSFLAG,
#: BORNTIMESTAMP, BORNHOST, (STORETIMESTAMP: 0), STOREHOST, RECONSUMETIMES,
#: PREPAREDTRANSACTIONOFFSET, BODY length -- per (born, store) host+port length (8 or 20 bytes)
_SINGLE_PREFIX = {(b, s): struct.Struct(f">iiiii16xiq{b}s8x{s}siqi") for b in (8, 20) for s in (8, 20)}


def host_port(host: tuple[bytes, int]) -> bytes:
    """The BORNHOST / STOREHOST field of ``(ip bytes, port)``: IP bytes + 4-byte port."""
    return host[0] + _I32.pack(host[1])


def encode_single(
    topic_field: bytes,
    magic: int,
    queue_id: int,
    flag: int,
    body: bytes,
    properties: bytes,
    more_properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born: bytes,
    store: bytes,
    reconsume_times: int,
) -> bytearray | None:
    """:func:`append_record` of one record whose properties are ``properties + more_properties``,
    with the hosts as :func:`host_port` gives them; None when the properties exceed 32767 bytes."""
    props_len = len(properties) + len(more_properties)
    if props_len > MAX_PROPERTIES_LENGTH:
        return None
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if len(born) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store) == 20:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    prefix = _SINGLE_PREFIX[len(born), len(store)]
    body_len = len(body)
    return bytearray().join(
        (
            prefix.pack(
                prefix.size + body_len + len(topic_field) + 2 + props_len,
                magic,
                crc32(body) & 0x7FFFFFFF,
                queue_id,
                flag,
                sys_flag,
                born_timestamp,
                born,
                store,
                reconsume_times,
                0,
                body_len,
            ),
            body,
            topic_field,
            _I16.pack(props_len),
            properties,
            more_properties,
        )
    )


class BatchRecordEncoder:
    """One per send processor; shares the processor's :class:`ClientProperties`."""

    def __init__(self, complete: Completer, client_properties: ClientProperties) -> None:
        self._complete = complete
        self._props = client_properties
        self._cluster_pair = client_properties.cluster_pair
        self._prefix_structs: dict[tuple[int, int], struct.Struct] = {}
        self._record_dtypes: dict[int, np.dtype] = {}
        self._item_dtypes: dict[int, np.dtype] = {}
        #: batches of at least this many items of one layout take :meth:`_encode_uniform`
        self.uniform_min_items = UNIFORM_MIN_ITEMS

    def _record_fields(self, size: int) -> np.dtype:
        """A record of ``size`` bytes seen as its BODYCRC, FLAG, QUEUEOFFSET and PHYSICALOFFSET."""
        dt = self._record_dtypes.get(size)
        if dt is None:
            if len(self._record_dtypes) >= _SHAPE_LIMIT:
                self._record_dtypes.clear()
            dt = self._record_dtypes[size] = np.dtype(
                {
                    "names": ["crc", "flag", "qo", "phys"],
                    "formats": [">u4", ">i4", ">i8", ">i8"],
                    "offsets": [8, 16, 20, 28],
                    "itemsize": size,
                }
            )
        return dt

    def _item_flag(self, total: int) -> np.dtype:
        """A batch item of ``total`` bytes seen as its FLAG."""
        dt = self._item_dtypes.get(total)
        if dt is None:
            if len(self._item_dtypes) >= _SHAPE_LIMIT:
                self._item_dtypes.clear()
            dt = self._item_dtypes[total] = np.dtype(
                {"names": ["flag"], "formats": [">i4"], "offsets": [12], "itemsize": total}
            )
        return dt

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
        slot: Slot = NO_SLOT,
    ) -> EncodedBatch | None:
        """The records of every item of ``body`` laid end to end, their dispatch hints and unique
        keys, and where they were placed; None when the general path must decide (see the module
        docstring). The records carry the queue offsets, physical offsets and store timestamp of
        ``slot`` (see :class:`PlacedBatch`)."""
        n = len(body)
        if not n:
            return None
        pair = self._cluster_pair(cluster)
        pair_len = len(pair)
        born_ip, born_port = born
        store_ip, store_port = store
        sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        if len(born_ip) == 16:
            sys_flag |= BORNHOST_V6_FLAG
        if len(store_ip) == 16:
            sys_flag |= STOREHOSTADDRESS_V6_FLAG
        # SYSFLAG .. BORNHOST and STOREHOST .. PREPARED_TRANSACTION_OFFSET: the same for every
        # record of the batch; QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP come from the slot
        born_part = _I32.pack(sys_flag) + _I64.pack(born_timestamp) + born_ip + _I32.pack(born_port)
        store_part = store_ip + _I32.pack(store_port) + _ZERO12
        shape = (len(born_part), len(store_part))
        prefix = self._prefix_structs.get(shape)
        if prefix is None:
            prefix = self._prefix_structs[shape] = struct.Struct(f">iiiiiqq{shape[0]}sq{shape[1]}si")
        if n >= self.uniform_min_items * 22:
            total = _I32.unpack_from(body, 0)[0]
            if total >= 22 and not n % total and n // total >= self.uniform_min_items:
                uniform = self._encode_uniform(
                    body,
                    total,
                    topic_field,
                    magic,
                    queue_id,
                    prefix,
                    born_part,
                    store_part,
                    max_body_size,
                    pair,
                    slot,
                )
                if uniform is not None:
                    return uniform
        pack_prefix = prefix.pack
        fixed = prefix.size + len(topic_field) + 2
        phys, qo, now = slot  # phys: the PHYSICALOFFSET of the record being encoded
        units: list[int] = []  # (PHYSICALOFFSET, size, tags code) of every record, flat
        unpack_head = _ITEM_HEAD.unpack_from
        unpack_i16 = _I16.unpack_from
        shapes_get = self._props.raw_shapes.get
        learn = self._props.learn_raw
        find = body.find
        complete = self._complete
        mv = memoryview(body)
        tails: dict[int, bytes] = {}  # stored properties length -> topic field + that length
        parts: list[bytes | memoryview] = []
        extend = parts.extend
        hints: list[BatchHint] = []
        uniqs: list[str] = []
        shape_head = shape_tail = b""  # the last shape looked up, split at its UNIQ_KEY value
        head_len = tail_len = 0
        last_info: PropsInfo | None = None
        tags_code, keys = 0, None  # of last_info
        pos = 0
        while pos < n:
            if pos + 22 > n:
                return None
            total, _magic, _crc, flag, body_len = unpack_head(body, pos)
            body_end = pos + 20 + body_len
            ps = body_end + 2  # the properties: ps .. pe
            pe = pos + total
            # split_batch_body's checks, in a form that needs no more reads
            if body_len < 0 or body_len > max_body_size or not ps <= pe <= n:
                return None
            props_len = pe - ps
            if unpack_i16(body, body_end)[0] != props_len:
                return None
            # ClientProperties.lookup on the bytes (inlined: this runs for every message); cuts at
            # 0x01 / 0x02 keep UTF-8 validity, so shape and value decode apart
            info: PropsInfo | None = None
            # the items of a batch mostly share one shape: the previous item's head (up to its
            # UNIQ_KEY value) and tail (from the 0x02 after it) around a value without 0x02 is
            # that shape again -- its first UNIQ_KEY sits where the previous one's did
            vs = ps + head_len
            j = pe - tail_len
            if (
                last_info is not None
                and j > vs
                and body.startswith(shape_head, ps)
                and body.startswith(shape_tail, j)
                and find(b"\x02", vs, j) < 0
            ):
                info = last_info
            else:
                i = find(_UNIQ_AT_B, ps, pe)
                if i == ps or (i > ps and body[i - 1] == 2):
                    vs = i + _UNIQ_LEN
                    j = find(b"\x02", vs, pe)
                    if j > vs:
                        shape_head = body[ps:vs]
                        shape_tail = body[j:pe]
                        head_len, tail_len = vs - ps, pe - j
                        shape = shape_head + shape_tail
                        info = shapes_get(shape, _MISSING)  # type: ignore[arg-type]
                        if info is _MISSING:
                            info = learn(shape)
                        last_info = info
                        if info is not None:
                            tags_code, keys = info[0], info[1]
            data = mv[body_end - body_len : body_end]
            if info is not None:
                try:
                    uniq = body[vs:j].decode()
                except UnicodeDecodeError:
                    return None
                item_tags, item_keys = tags_code, keys  # of info (== last_info), set at its lookup
                stored_len = props_len + pair_len
                stored: bytes | memoryview = mv[ps:pe]
                more_stored = pair
            else:
                try:
                    props_s = str(mv[ps:pe], "utf-8")
                except UnicodeDecodeError:
                    return None
                props, more, uniq = complete(props_s)
                stored = (props_s + more if more is not None else properties_to_string(props)).encode()
                more_stored = b""
                stored_len = len(stored)
                item_tags = tags_hash_code(props.get(PROPERTY_TAGS))
                item_keys = props.get(PROPERTY_KEYS)
            if stored_len > MAX_PROPERTIES_LENGTH:
                return None
            tail = tails.get(stored_len)
            if tail is None:
                tail = tails[stored_len] = topic_field + _I16.pack(stored_len)
            size = fixed + body_len + stored_len
            extend(
                (
                    pack_prefix(
                        size,
                        magic,
                        crc32(data) & 0x7FFFFFFF,
                        queue_id,
                        flag,
                        qo,
                        phys,
                        born_part,
                        now,
                        store_part,
                        body_len,
                    ),
                    data,
                    tail,
                    stored,
                    more_stored,
                )
            )
            units += (phys, size, item_tags)
            hints.append((item_tags, item_keys, uniq))
            uniqs.append(uniq)
            phys += size
            qo += 1
            pos = pe
        return EncodedBatch(bytearray().join(parts), hints, uniqs, PlacedBatch(slot, units))

    def _encode_uniform(
        self,
        body: bytes,
        total: int,
        topic_field: bytes,
        magic: int,
        queue_id: int,
        prefix: struct.Struct,
        born_part: bytes,
        store_part: bytes,
        max_body_size: int,
        pair: bytes,
        slot: Slot,
    ) -> EncodedBatch | None:
        """:meth:`encode` of a batch whose items all have ``total`` bytes, one body length and one
        properties shape in client form (UNIQ_KEY values of one length, ASCII): the records then
        have one layout too, and numpy builds them as the rows of one array, column by column,
        instead of item by item. The same bytes, hints and units as the item loop; None when the
        batch is not like that (the loop then decides)."""
        n = len(body)
        count = n // total
        _total, _magic, _crc, _flag, body_len = _ITEM_HEAD.unpack_from(body, 0)
        ps = 22 + body_len  # the first item's properties: ps .. total
        props_len = total - ps
        if (
            body_len < 0
            or body_len > max_body_size
            or props_len < 0
            or _I16.unpack_from(body, ps - 2)[0] != props_len
        ):
            return None
        i = body.find(_UNIQ_AT_B, ps, total)
        if not (i == ps or (i > ps and body[i - 1] == 2)):
            return None
        vs = i + _UNIQ_LEN
        j = body.find(b"\x02", vs, total)
        if j <= vs:
            return None
        shape = body[ps:vs] + body[j:total]
        info = self._props.raw_shapes.get(shape, _MISSING)
        if info is _MISSING:
            info = self._props.learn_raw(shape)
        if info is None:
            return None
        stored_len = props_len + len(pair)
        if stored_len > MAX_PROPERTIES_LENGTH:
            return None
        rows = np.frombuffer(body, np.uint8).reshape(count, total)
        # every item as the first: TOTALSIZE, BODYLEN, properties length + shape head, shape tail
        # (then each starts where the first's size says, and its UNIQ_KEY value sits where the
        # first's does -- what the item loop finds for it too)
        for lo, hi in ((0, 4), (16, 20), (ps - 2, vs), (j, total)):
            if rows[:, lo:hi].tobytes() != body[lo:hi] * count:
                return None
        uniq_bytes = rows[:, vs:j].tobytes()
        if not uniq_bytes.isascii() or b"\x02" in uniq_bytes or b"\x00" in uniq_bytes:
            return None
        phys, qo, now = slot
        size = prefix.size + len(topic_field) + 2 + body_len + stored_len
        head = prefix.size
        body_end = head + body_len
        props_at = body_end + len(topic_field) + 2
        records = bytearray(count * size)
        out = np.frombuffer(records, np.uint8).reshape(count, size)  # the rows, written in place
        out[:, :head] = np.frombuffer(
            prefix.pack(size, magic, 0, queue_id, 0, 0, 0, born_part, now, store_part, body_len), np.uint8
        )
        # the per-record fields through structured views (big-endian, converted as assigned)
        fields = np.frombuffer(records, self._record_fields(size))
        mv = memoryview(body)
        fields["crc"] = [crc32(mv[o : o + body_len]) & 0x7FFFFFFF for o in range(20, n, total)]
        fields["flag"] = np.frombuffer(body, self._item_flag(total))["flag"]  # each item's own
        steps = _steps(count)
        fields["qo"] = steps + qo
        fields["phys"] = steps * size + phys
        out[:, head:body_end] = rows[:, 20 : 20 + body_len]
        out[:, body_end:props_at] = np.frombuffer(topic_field + _I16.pack(stored_len), np.uint8)
        out[:, props_at : props_at + props_len] = rows[:, ps:total]
        out[:, props_at + props_len :] = np.frombuffer(pair, np.uint8)
        # fixed-width byte strings (no NUL in them, so none is cut short), decoded one by one
        uniqs = [u.decode() for u in np.frombuffer(uniq_bytes, f"S{j - vs}").tolist()]
        tags_code, keys = info[0], info[1]
        units = [0, size, tags_code] * count
        units[::3] = range(phys, phys + count * size, size)
        del out, fields  # the bytearray's exports end here
        return EncodedBatch(records, [(tags_code, keys, u) for u in uniqs], uniqs, PlacedBatch(slot, units))
