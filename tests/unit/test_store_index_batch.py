"""Batched index writes: queued messages, vectorized hashes and entries, byte-identical files.

The reference is the index as it was before batching: every message written at once, entry by
entry, through ``IndexFile.put_key`` (:class:`ScalarIndex` keeps that ``put_keys`` verbatim).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from remoting.protocol import message as m
from store import index_batch
from store.config import MessageStoreConfig
from store.index import (
    DEFAULT_BATCH_SIZE,
    VECTOR_MIN,
    IndexFile,
    IndexService,
    _abs_hash,
)
from store.message_store import DefaultMessageStore

T0 = 1_700_000_000_000
ROLLBACK = m.TRANSACTION_ROLLBACK_TYPE


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        self.ms += 1
        return self.ms


class ScalarIndex(IndexService):
    """The pre-batching index: ``put_keys`` checks and writes each message at once. Like the
    service, it indexes the newest indexed message again after a load (its entries may be
    partial after a crash): ``IndexService.load`` leaves ``last_phy`` just below it."""

    def put_keys(
        self, topic: str, phy: int, ts: int, sys_flag: int, keys: str | None, uniq_key: str | None
    ) -> None:
        if sys_flag & m.TRANSACTION_TYPE_MASK == m.TRANSACTION_ROLLBACK_TYPE:
            return
        files = self._files
        last = files[-1] if files else None
        if phy <= self.last_phy:
            return
        if not uniq_key and not (keys and keys.strip(m.KEY_SEPARATOR)):
            return
        self.last_phy = phy
        prefix_hash = self._prefix_hash(topic)
        if uniq_key:
            h = _abs_hash(m.java_string_hash_extend(prefix_hash, uniq_key))
            if last is None or not last.put_key(h, phy, ts):
                self._put_hash(h, phy, ts)
        if keys:
            for key in keys.split(m.KEY_SEPARATOR):
                if key:
                    self._put_hash(_abs_hash(m.java_string_hash_extend(prefix_hash, key)), phy, ts)


def make(root: Path, cls: type[IndexService], slots: int, entries: int, **kw: int) -> IndexService:
    svc = cls(str(root), max_hash_slot_num=slots, max_index_num=entries, now_ms=Clock(), **kw)
    svc.load(True, 0)
    return svc


def file_bytes(svc: IndexService) -> list[tuple[str, bytes]]:
    return [(n, (Path(svc.index_dir) / n).read_bytes()) for n in svc.file_names]


# --- hashes --------------------------------------------------------------------------------------

ascii_keys = st.text(st.characters(min_codepoint=0, max_codepoint=127), min_size=1, max_size=40)
any_keys = st.text(min_size=1, max_size=12)  # BMP, astral, lone surrogates
hex32 = st.text("0123456789ABCDEF", min_size=32, max_size=32)


@settings(max_examples=300, deadline=None)
@given(
    keys=st.one_of(
        st.lists(hex32, min_size=1, max_size=40),
        st.lists(ascii_keys, min_size=1, max_size=40),
        st.lists(st.one_of(any_keys, ascii_keys), min_size=1, max_size=40),
    ),
    prefixes=st.lists(st.integers(0, 2**32 - 1), min_size=40, max_size=40),
    shared=st.booleans(),
)
def test_key_hashes_match_scalar_java_hash(keys: list[str], prefixes: list[int], shared: bool) -> None:
    pre = prefixes[: len(keys)]
    if shared:
        got = index_batch.key_hashes(pre[0], keys)
        pre = [pre[0]] * len(keys)
    else:
        got = index_batch.key_hashes(np.array(pre, np.uint64), keys)
    assert got.tolist() == [
        _abs_hash(m.java_string_hash_extend(p, k)) for p, k in zip(pre, keys, strict=True)
    ]


def test_key_hashes_known_values() -> None:
    prefix = m.java_string_hash("T#") & 0xFFFFFFFF
    keys = ["hello", "k", "\u00e9t\u00e9", "\U0001f600x", "Aa", "BB", "a" * 10_000]
    got = index_batch.key_hashes(prefix, keys).tolist()
    want = [abs(m.java_string_hash("T#" + k)) for k in keys]
    assert got == want
    assert got[4] == got[5]  # "Aa" and "BB" share a Java hash
    # Integer.MIN_VALUE maps to 0 ("polygenelubricants" hashes to it)
    assert index_batch.key_hashes(0, ["polygenelubricants", "x"]).tolist() == [0, ord("x")]


@pytest.mark.parametrize(
    ("keys", "rows"),
    [
        (["AB", "CD", "EF"], True),  # equal ASCII lengths: one row each
        (["ABC"], True),
        (["AB", "CDE"], False),  # unequal
        (["ABC", "D", "EF"], False),  # unequal, but n * (width + 1) bytes in all
        (["xy\0", "z"], False),  # a NUL where a separator would be: the last column still all NUL
        (["ab", "c\0"], False),  # equal lengths with a NUL
        (["\u00e9t", "ab"], False),  # not ASCII
    ],
)
def test_equal_length_keys_are_recognised_without_a_call_per_key(keys: list[str], rows: bool) -> None:
    got = index_batch._equal_ascii_rows(keys)
    assert (got is not None) == rows
    if got is not None:
        assert [bytes(r[:-1]).decode() for r in got] == keys
        assert not got[:, -1].any()
    want = [
        abs(m.java_string_hash("T#" + k)) if m.java_string_hash("T#" + k) != -(2**31) else 0 for k in keys
    ]
    assert index_batch.key_hashes(m.java_string_hash("T#") & 0xFFFFFFFF, keys).tolist() == want


# --- byte identity against the scalar index ------------------------------------------------------

TOPICS = ["T", "Topic-B", "t\u00f6pic"]
tokens = st.one_of(
    st.sampled_from(["a", "b", "order-7", "", "\u00e4", "\U0001f600"]), ascii_keys.filter(str.strip)
)
put_op = st.tuples(
    st.just("put"),
    st.tuples(
        st.sampled_from(TOPICS),
        st.one_of(st.none(), st.lists(tokens, max_size=4).map(" ".join)),  # KEYS, maybe with empty tokens
        st.one_of(hex32, st.none(), st.just(""), any_keys),  # UNIQ_KEY
        st.integers(-3, 40),  # offset step; <= 0 re-dispatches an indexed (or skipped) offset
        st.integers(-2000, 4000) | st.just(3 * 10**12),  # timestamp step, ms (huge: diff clipped)
        st.sampled_from([0, 0, 0, m.TRANSACTION_PREPARED_TYPE, ROLLBACK, m.TRANSACTION_COMMIT_TYPE]),
    ),
)
ops = st.lists(
    st.one_of(
        put_op,
        put_op,
        put_op,
        put_op,
        st.tuples(st.just("burst"), st.integers(1, 90)),  # many uniq-key-only messages
        st.tuples(st.just("query"), st.sampled_from(["a", "b", "order-7", "\u00e4", "\U0001f600"])),
        st.tuples(st.just("drain"), st.none()),
        st.tuples(st.just("truncate"), st.integers(0, 40)),  # back by this many offsets
        st.tuples(st.just("retain"), st.integers(0, 60)),
        st.tuples(st.just("torn"), st.integers(0, 10**6)),  # a slot head a crash left past the count
        st.tuples(st.just("reload"), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(  # the newest message indexed again after a reload fills a new file (found by a run)
    ops=[("put", ("T", None, "0" * 32, 0, 0, 0)), ("reload", None), ("put", ("T", None, "0" * 32, 0, 0, 0))],
    slots=1,
    entries=2,
    batch=1,
)
@given(
    ops=ops,
    slots=st.integers(1, 5),
    entries=st.integers(2, 40),
    batch=st.sampled_from([1, 2, VECTOR_MIN, VECTOR_MIN + 1, 23, 64]),
)
def test_batched_index_is_byte_identical_to_scalar(
    tmp_path_factory: pytest.TempPathFactory, ops, slots: int, entries: int, batch: int
) -> None:
    root = tmp_path_factory.mktemp("idx")
    ref = make(root / "ref", ScalarIndex, slots, entries)
    svc = make(root / "batch", IndexService, slots, entries, batch_size=batch)
    phy, ts = 0, T0
    uniq_n = 0
    try:
        for op, arg in ops:
            if op == "put":
                topic, keys, uniq, step, ts_step, flag = arg
                phy = max(phy + step, 0)
                ts += ts_step
                for s in (ref, svc):
                    s.put_keys(topic, phy, ts, flag, keys, uniq)
            elif op == "burst":
                for _ in range(arg):
                    phy += 7
                    ts += 300
                    uniq_n += 1
                    uniq = f"{uniq_n:032X}"
                    for s in (ref, svc):
                        s.put_keys(TOPICS[uniq_n % 2], phy, ts, 0, None, uniq)
            elif op == "query":
                for topic in TOPICS:
                    a = ref.query(topic, arg, 1000, 0, 2**62)
                    assert svc.query(topic, arg, 1000, 0, 2**62) == a
                assert svc.pending_count == 0
            elif op == "drain":
                svc.drain()
                assert file_bytes(svc) == file_bytes(ref)
            elif op == "truncate":
                cut = max(phy - arg, 0)
                assert svc.truncate_after(cut) == ref.truncate_after(cut)
                phy = cut
            elif op == "retain":
                gone = [os.path.basename(p) for p in ref.delete_files_before(phy - arg)]
                assert [os.path.basename(p) for p in svc.delete_files_before(phy - arg)] == gone
            elif op == "torn":
                for s in (ref, svc):
                    s.drain()
                    if s._files:
                        f = s._files[-1]
                        slot = arg % f.slot_num
                        struct.pack_into(">i", f.map, f.slots_pos + 4 * slot, f.index_count + arg % 3)
            else:
                for s in (ref, svc):
                    s.drain()
                    s.flush()
                    s.close()
                ref = make(root / "ref", ScalarIndex, slots, entries)
                svc = make(root / "batch", IndexService, slots, entries, batch_size=batch)
            assert svc.pending_count < batch
        assert svc.max_indexed_phy_offset == ref.max_indexed_phy_offset
        assert file_bytes(svc) == file_bytes(ref)
        for key in ("a", "b", "order-7", f"{uniq_n:032X}"):
            for topic in TOPICS:
                assert svc.query(topic, key, 1000, 0, 2**62) == ref.query(topic, key, 1000, 0, 2**62)
    finally:
        ref.close()
        svc.close()


def test_one_batch_rolls_over_several_files(tmp_path: Path) -> None:
    ref = make(tmp_path / "ref", ScalarIndex, 3, 7)
    svc = make(tmp_path / "batch", IndexService, 3, 7, batch_size=100)
    for s in (ref, svc):
        for i in range(99):
            s.put_keys("T", 10 * i, T0 + 100 * i, 0, "k x" if i % 5 == 0 else None, f"{i:032x}")
    assert svc.pending_count == 99  # nothing written yet
    assert svc._files == []
    svc.put_keys("T", 990, T0, 0, None, "last")  # the 100th: one vectorized write
    ref.put_keys("T", 990, T0, 0, None, "last")
    assert svc.pending_count == 0
    assert len(svc._files) == len(ref._files) == 24  # 140 entries, 6 per file
    assert file_bytes(svc) == file_bytes(ref)
    assert svc.query("T", "k", 100, 0, 2**62).phy_offsets == [i * 10 for i in reversed(range(0, 99, 5))]
    ref.close()
    svc.close()


# --- no caller sees the lag ----------------------------------------------------------------------


def test_query_right_after_put_finds_the_message(tmp_path: Path) -> None:
    svc = make(tmp_path, IndexService, 1000, 4000)
    assert svc.batch_size == DEFAULT_BATCH_SIZE
    svc.put_keys("T", 0, T0, 0, "order-1", "U0")
    assert svc.pending_count == 1
    assert svc.query("T", "order-1", 10, 0, 2**62).phy_offsets == [0]
    assert svc.pending_count == 0
    svc.put_keys("T", 100, T0 + 5, 0, None, "U1")
    assert svc.max_indexed_phy_offset == 100
    svc.put_keys("T", 200, T0 + 9, 0, None, "U2")
    svc.put_keys("T", 200, T0 + 9, 0, None, "U2")  # re-dispatch while still queued: skipped
    svc.put_keys("T", 150, T0 + 9, 0, None, "U9")  # below a queued offset: skipped
    assert svc.pending_count == 1
    res = svc.query("T", "U2", 10, 0, 2**62)
    assert res.phy_offsets == [200]
    assert (res.index_last_update_timestamp, res.index_last_update_phyoffset) == (T0 + 9, 200)
    assert svc.query("T", "U9", 10, 0, 2**62).phy_offsets == []
    svc.put_keys("T", 300, T0, 0, "k", None)
    assert len(svc.file_names) == 1
    assert svc.pending_count == 0
    svc.put_keys("T", 400, T0, 0, "k", None)
    assert svc.truncate_after(350) == 1
    svc.put_keys("T", 500, T0, 0, "k", None)
    assert svc.delete_files_before(0) == []
    assert svc.query("T", "k", 10, 0, 2**62).phy_offsets == [500, 300]
    svc.close()


def test_messages_without_keys_do_not_count_as_indexed(tmp_path: Path) -> None:
    svc = make(tmp_path, IndexService, 10, 100)
    svc.put_keys("T", 100, T0, 0, "   ", None)  # only separators: no entry
    svc.put_keys("T", 50, T0, 0, "k", None)  # so a lower offset is still taken, as before batching
    svc.put_keys("T", 60, T0, ROLLBACK, "k", None)  # rollbacks never are
    assert svc.pending_count == 1
    assert svc.max_indexed_phy_offset == 50
    svc.close()


def test_flush_does_not_drain_and_close_drops_the_queue(tmp_path: Path) -> None:
    svc = make(tmp_path, IndexService, 10, 100)
    svc.put_keys("T", 0, T0 + 1, 0, "a", None)
    svc.drain()
    svc.put_keys("T", 100, T0 + 2, 0, "b", None)
    assert svc.flush() == T0 + 1  # the queued message is not covered
    assert svc.pending_count == 1
    svc.close()  # a crash: the queued message is lost like unflushed data
    again = make(tmp_path, IndexService, 10, 100)
    assert again.max_indexed_phy_offset == 0  # recovery re-dispatches from here
    assert again.query("T", "b", 10, 0, 2**62).phy_offsets == []
    again.put_keys("T", 100, T0 + 2, 0, "b", None)
    assert again.query("T", "b", 10, 0, 2**62).phy_offsets == [100]
    again.close()


def test_write_entries_releases_the_map(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 3, 10, create=True)
    hashes = np.array([5, 7, 5], np.int64)
    index_batch.write_entries(f, hashes, np.array([1, 2, 3], np.int64), np.array([T0, T0, T0], np.int64))
    assert (f.index_count, f.hash_slot_count, f.end_phy_offset) == (4, 2, 3)
    with pytest.raises(ValueError, match="do not fit"):
        index_batch.write_entries(f, np.zeros(7, np.int64), np.zeros(7, np.int64), np.zeros(7, np.int64))
    f.close()  # BufferError if a numpy view of the map were still alive


# --- the store: shutdown leaves every queued entry on disk ---------------------------------------


async def test_store_shutdown_writes_queued_entries(tmp_path: Path) -> None:
    config = MessageStoreConfig(
        storePathRootDir=str(tmp_path), mappedFileSizeCommitLog=64 * 1024, maxHashSlotNum=100, maxIndexNum=400
    )
    store = DefaultMessageStore(config, store_host=("127.0.0.1", 10911))
    await store.start()
    offsets = []
    for i in range(5):
        uniq = f"{i:032X}"
        rec = m.encode_message(
            topic="T",
            queue_id=0,
            flag=0,
            body=b"x" * 10,
            properties=f"KEYS\x01k{i}\x02UNIQ_KEY\x01{uniq}\x02",
            sys_flag=0,
            born_timestamp=T0,
            born_host=("127.0.0.1", 40000),
            store_host=("127.0.0.1", 10911),
            prepared_transaction_offset=0,
        )
        res = await store.put_message(rec, "T", 0, sys_flag=0, tags_code=0, keys=f"k{i}", uniq_key=uniq)
        offsets.append(res.wrote_offset)
    assert store.index is not None
    assert store.index.pending_count == 5
    await store.shutdown()
    # read the files as they are on disk, without the store's recovery
    index = IndexService(config.index_dir, max_hash_slot_num=100, max_index_num=400, now_ms=Clock())
    index.load(True, 0)
    for i, off in enumerate(offsets):
        assert index.query("T", f"k{i}", 10, 0, 2**62).phy_offsets == [off]
        assert index.query("T", f"{i:032X}", 10, 0, 2**62).phy_offsets == [off]
    index.close()


def test_many_topics_in_one_batch_overflowing_the_prefix_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a drain over more topics than the prefix-hash cache holds clears it and still hashes every
    # topic right: the files equal the one-entry-at-a-time reference's
    monkeypatch.setattr("store.index._PREFIX_CACHE_MAX", 4)
    svc = make(tmp_path / "vec", IndexService, 50, 400, batch_size=64)
    ref = make(tmp_path / "ref", ScalarIndex, 50, 400, batch_size=1)

    def topic(i: int) -> str:
        return f"topic-{i % 3}" if i < 30 else f"topic-{i % 9}"

    for s in (svc, ref):
        for i in range(30):  # 3 topics: all cached
            s.put_keys(topic(i), 100 + i * 10, T0 + i, 0, f"k{i}", f"{i:032X}")
        s.drain()
        for i in range(30, 90):  # 9 topics, 3 of them cached: the cache overflows and is cleared
            s.put_keys(topic(i), 100 + i * 10, T0 + i, 0, f"k{i}", f"{i:032X}")
        s.drain()
    assert file_bytes(svc) == file_bytes(ref)
    for i in range(0, 90, 7):
        assert svc.query(topic(i), f"k{i}", 10, 0, 2**62).phy_offsets == [100 + i * 10]
