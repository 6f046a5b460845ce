"""Vectorized index writes (numpy): Java hashes of many ``topic#key`` strings at once, and one
index file's share of a batch of entries written in a few array operations.

Both produce exactly what the scalar code in :mod:`store.index` produces entry by entry
(:func:`remoting.protocol.message.java_string_hash_extend` and ``IndexFile.put_key``); the batch
tests compare the files byte for byte.

Hashes: Java ``String.hashCode()`` of ``topic + "#" + key`` is ``prefix_hash * 31^n + hash(key)``
mod 2^32 (``n`` = UTF-16 code units of ``key``). ``hash(key)`` is a dot product of the key's code
units with powers of 31; with the powers reduced mod 2^32 first, the exact sum stays below 2^53 for
ASCII keys of up to 8192 characters, so a float64 sum of products computes it exactly. Keys of
unequal length are right-padded with zero units, which multiplies the sum by 31^pad; 31 is odd, so
31^-pad mod 2^32 undoes it. Keys with characters outside the BMP (surrogate pairs in Java) are
hashed by the scalar function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from remoting.protocol.message import KEY_SEPARATOR, java_string_hash_extend

if TYPE_CHECKING:
    from store.index_file import IndexFile

#: values per queued message in ``IndexService``'s flat queue: topic, offset, timestamp, UNIQ_KEY, KEYS
PENDING_FIELDS = 5
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
assert ENTRY_DTYPE.itemsize == 20  # the on-disk entry, packed

_MOD = 1 << 32
_INV31 = pow(31, -1, _MOD)
_INT_MAX = 2**31 - 1
# float64 sums of code * (31^k mod 2^32) are exact below 2^53: 127 * 2^32 * n < 2^53 for ASCII
_FLOAT_MAX_ASCII_LEN = 8192


class _Powers:
    """31^k and 31^-k mod 2^32 for k < len, as uint64 (and float64 for 31^k), grown on demand."""

    def __init__(self) -> None:
        self.pow = np.ones(1, np.uint64)
        self.inv = np.ones(1, np.uint64)
        self.pow_f = np.ones(1, np.float64)
        self._desc: dict[int, np.ndarray] = {}
        self._desc_f: dict[int, np.ndarray] = {}

    def ensure(self, n: int) -> None:
        """Tables cover exponents 0..n."""
        have = len(self.pow)
        if have > n:
            return
        size = max(n + 1, 2 * have)
        p, q = int(self.pow[-1]), int(self.inv[-1])
        pows, invs = [], []
        for _ in range(have, size):
            p = p * 31 % _MOD
            q = q * _INV31 % _MOD
            pows.append(p)
            invs.append(q)
        self.pow = np.concatenate([self.pow, np.array(pows, np.uint64)])
        self.inv = np.concatenate([self.inv, np.array(invs, np.uint64)])
        self.pow_f = self.pow.astype(np.float64)

    def desc(self, n: int) -> np.ndarray:
        """[31^(n-1), ..., 31, 1] mod 2^32 (uint64): weights of the code units of an n-unit key."""
        d = self._desc.get(n)
        if d is None:
            self.ensure(n)
            d = self._desc[n] = np.ascontiguousarray(self.pow[:n][::-1])
        return d

    def desc_f(self, n: int) -> np.ndarray:
        """:meth:`desc` as float64."""
        d = self._desc_f.get(n)
        if d is None:
            d = self._desc_f[n] = self.desc(n).astype(np.float64)
        return d


_POWERS = _Powers()


def _unit_sums(codes: np.ndarray, width: int, ascii_: bool) -> np.ndarray:
    """sum(code[i] * 31^(width-1-i)) per row of ``codes`` (n x width), as uint64: right mod 2^32
    (all the uint64 arithmetic here wraps mod 2^64, a multiple of 2^32).

    ``einsum``, not ``@``: a float matrix product goes to OpenBLAS, which hands products of this
    size to its own worker thread; with both cores busy (a broker under load) waking that thread
    took milliseconds per call (measured 3.8 ms for 1024 keys against 0.016 ms with einsum)."""
    if ascii_ and width <= _FLOAT_MAX_ASCII_LEN:
        return np.einsum("ij,j->i", codes.astype(np.float64), _POWERS.desc_f(width)).astype(np.uint64)
    return np.einsum("ij,j->i", codes.astype(np.uint64), _POWERS.desc(width))


def entry_columns(
    pending: list[Any],
) -> tuple[list[str], list[int], list[int], list[str]]:
    """(topics, offsets, timestamps, keys), one item per entry, in write order (the UNIQ_KEY,
    then each non-empty KEYS token), of queued messages laid out flat as ``PENDING_FIELDS``
    values each: topic, offset, timestamp, UNIQ_KEY, KEYS. Messages have at least one key."""
    f = PENDING_FIELDS
    n = len(pending) // f
    uniqs = pending[3::f]
    keyss = pending[4::f]
    if keyss.count(None) == n and all(uniqs):  # the common shape: one entry per message
        return pending[0::f], pending[1::f], pending[2::f], uniqs
    topics: list[str] = []
    phys: list[int] = []
    stamps: list[int] = []
    keys_: list[str] = []
    for i in range(0, len(pending), f):
        topic, phy, ts, uniq_key, keys = pending[i : i + f]
        if uniq_key:
            topics.append(topic)
            phys.append(phy)
            stamps.append(ts)
            keys_.append(uniq_key)
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if key:
                    topics.append(topic)
                    phys.append(phy)
                    stamps.append(ts)
                    keys_.append(key)
    return topics, phys, stamps, keys_


def _equal_ascii_rows(keys: Sequence[str]) -> np.ndarray | None:
    """The keys' bytes as an n x (width + 1) uint8 matrix, each row a key and a 0 after it, when
    all keys are ASCII of one length ``width`` (at most :data:`_FLOAT_MAX_ASCII_LEN`) without a
    NUL; else None. No Python call per key: the keys joined by NULs, one more NUL at the end, are
    n rows of width + 1 exactly when those n NULs, the only ones, each end a row."""
    n = len(keys)
    joined = "\0".join(keys)
    total = len(joined) + 1
    width = total // n - 1
    if total != n * (width + 1) or not 0 < width <= _FLOAT_MAX_ASCII_LEN or not joined.isascii():
        return None
    rows = np.frombuffer(joined.encode("ascii") + b"\0", np.uint8).reshape(n, width + 1)
    if rows[:, width].any() or np.count_nonzero(rows) != n * width:
        return None
    return rows


def key_hashes(prefix_hashes: int | np.ndarray, keys: Sequence[str]) -> np.ndarray:
    """Index hashes (upstream ``indexKeyHashMethod``: |hashCode|, 0 for Integer.MIN_VALUE) of
    ``prefix + key`` for each key, as int32 in [0, 2^31). ``prefix_hashes`` is the unsigned Java
    hash of the prefix (``topic#``), one int for all keys or a uint64 array with one per key.
    Keys must be non-empty."""
    n = len(keys)
    powers = _POWERS
    rows = _equal_ascii_rows(keys)
    if rows is not None:
        # equal lengths (the common case: UNIQ_KEYs), one row per key and its separator
        width = rows.shape[1] - 1
        powers.ensure(width)
        full = _unit_sums(rows[:, :width], width, True)  # the rows without their separators
        if isinstance(prefix_hashes, int):
            full += prefix_hashes * int(powers.pow[width]) % _MOD
        else:
            full += prefix_hashes * powers.pow[width]
    else:
        ascii_ = "".join(keys).isascii()
        lens = np.fromiter(map(len, keys), np.int64, n)
        width = int(lens.max())
        if ascii_:
            codes = np.array(keys, dtype=f"S{width}").view(np.uint8).reshape(n, width)
        else:
            codes = np.array(keys, dtype=f"U{width}").view(np.uint32).reshape(n, width)
        powers.ensure(width)
        sums = _unit_sums(codes, width, ascii_) * powers.inv[width - lens]  # undo the padding
        full = np.asarray(prefix_hashes, np.uint64) * powers.pow[lens] + sums
        if not ascii_:
            astral = np.flatnonzero((codes > 0xFFFF).any(axis=1))  # surrogate pairs in Java
            if len(astral):
                pre = np.broadcast_to(np.asarray(prefix_hashes, np.uint64), (n,))
                for i in astral.tolist():
                    full[i] = java_string_hash_extend(int(pre[i]), keys[i])
    # the Java int (low 32 bits, as int32), then |h| with Integer.MIN_VALUE -> 0
    signed = full.astype(np.uint32).view(np.int32)
    np.abs(signed, out=signed)  # MIN_VALUE stays MIN_VALUE ...
    signed &= _INT_MAX  # ... and becomes 0; the others are unchanged
    return signed


def _arange(n: int) -> np.ndarray:
    global _ARANGE
    if len(_ARANGE) < n:
        _ARANGE = np.arange(max(n, 2 * len(_ARANGE)), dtype=np.int64)
    return _ARANGE[:n]


_ARANGE = np.arange(1024, dtype=np.int64)


def write_entries(f: IndexFile, hashes: np.ndarray, phys: np.ndarray, timestamps: np.ndarray) -> None:
    """Append entries (key hashes in [0, 2^31), offsets and timestamps as equal-length integer
    arrays, at least one entry) to ``f``, which must have room for all of them; same bytes and
    header as ``f.put_key`` called for each in order.

    Entry ``i`` gets number ``count + i`` (``count`` = ``f.index_count`` at the start); its
    ``prev`` is the newest earlier entry of its slot in the batch, else the slot's head in the file
    when ``put_key`` would take it (``0 < head < count + i``), else 0, which also counts one more
    used slot. Write order as ``put_key``: entries, then slot heads, then the header (its count
    publishes them), then the attributes a concurrent ``flush`` reads.
    """
    k = len(hashes)
    count = f.index_count
    if count + k > f.index_num or k < 1:
        raise ValueError(f"{k} entries do not fit a file holding {count} of {f.index_num}")
    if count + k > f.entry_limit:
        f.reserve_entries(k)  # OSError on a full disk, before anything is written
    # sort by (slot, batch position): unique keys, so any sort groups each slot in batch order
    shift = k.bit_length()
    if f.slot_num <= _INT_MAX:  # hashes are int32 >= 0: the division in int32 (faster)
        key = (hashes % np.int32(f.slot_num)).astype(np.int64)
    else:
        key = hashes.astype(np.int64)  # below any such slot count
    key <<= shift
    key |= _arange(k)
    key.sort()
    by_slot = key >> shift  # sorted position -> slot
    order = key & ((1 << shift) - 1)  # sorted position -> batch position
    numbers = order + count  # sorted position -> entry number
    same = by_slot[1:] == by_slot[:-1]  # sorted position i + 1 continues the slot of i
    repeats = bool(same.any())
    if count <= 1:
        begin_ts, begin_phy = int(timestamps[0]), int(phys[0])
    else:
        begin_ts, begin_phy = f.begin_timestamp, f.begin_phy_offset
    diffs = timestamps - begin_ts
    diffs //= 1000
    np.maximum(diffs, 0, out=diffs)
    np.minimum(diffs, _INT_MAX, out=diffs)
    rec = np.empty(k, ENTRY_DTYPE)
    rec["hash"] = hashes
    rec["phy"] = phys
    rec["diff"] = diffs
    m = f.map
    table = np.frombuffer(m, ">i4", f.slot_num, f.slots_pos)  # a view: released below, always
    try:
        heads = table[by_slot]
        # the slot's head as put_key would see it: valid below the count at that entry
        taken = heads > 0
        taken &= heads < numbers
        prev = np.where(taken, heads, 0)
        if repeats:
            prev[1:][same] = numbers[:-1][same]  # within a group: the previous entry of the batch
            taken[1:] |= same  # not a new slot either
            is_last = np.empty(k, np.bool_)
            np.logical_not(same, out=is_last[:-1])
            is_last[-1] = True
            last_slots, last_numbers = by_slot[is_last], numbers[is_last]
        else:
            last_slots, last_numbers = by_slot, numbers
        new_slots = k - int(np.count_nonzero(taken))
        rec["prev"][order] = prev
        pos = f.entries_pos + count * ENTRY_DTYPE.itemsize
        m[pos : pos + k * ENTRY_DTYPE.itemsize] = rec
        table[last_slots] = last_numbers  # one write per slot (no repeated index): its newest entry
    finally:
        del table
    f.publish(
        begin_ts, int(timestamps[-1]), begin_phy, int(phys[-1]), f.hash_slot_count + new_slots, count + k
    )
