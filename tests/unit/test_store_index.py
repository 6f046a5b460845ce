"""Key index: queries, collisions, rolling, reload, truncation, retention, damaged files."""

from __future__ import annotations

import functools
import logging
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoting.protocol import message as m
from store.index import INDEX_ENTRY_SIZE, IndexService, build_key, index_file_name, index_key_hash
from store.index_file import IndexFile, _read_pages_sync

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        self.ms += 1
        return self.ms


def req(
    offset: int,
    *,
    topic: str = "T",
    keys: str | None = None,
    uniq: str | None = None,
    ts: int | None = None,
    sys_flag: int = 0,
) -> m.DispatchRequest:
    return m.DispatchRequest(
        topic=topic,
        queue_id=0,
        commit_log_offset=offset,
        msg_size=100,
        tags_code=0,
        store_timestamp=T0 + offset * 10 if ts is None else ts,
        consume_queue_offset=0,
        keys=keys,
        uniq_key=uniq,
        sys_flag=sys_flag,
        born_timestamp=0,
        prepared_transaction_offset=0,
        properties={},
    )


def service(root: Path, slots: int = 1000, entries: int = 4000) -> IndexService:
    svc = IndexService(str(root / "index"), max_hash_slot_num=slots, max_index_num=entries, now_ms=Clock())
    svc.load(True, 0)
    return svc


def q(
    svc: IndexService, key: str, *, topic: str = "T", begin: int = 0, end: int = 2**62, n: int = 64
) -> list[int]:
    return svc.query(topic, key, n, begin, end).phy_offsets


def test_query_by_key_and_uniq_key_newest_first(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(req(0, keys="order-1 shared", uniq="U0"))
    svc.put(req(100, keys="order-2 shared", uniq="U1"))
    svc.put(req(200, keys="shared", uniq="U2", topic="Other"))
    svc.put(req(300, keys="  shared  order-1", uniq="U3"))  # empty tokens are ignored
    assert q(svc, "order-1") == [300, 0]
    assert q(svc, "shared") == [300, 100, 0]
    assert q(svc, "shared", topic="Other") == [200]
    assert q(svc, "U1") == [100]
    assert q(svc, "U2") == []
    assert q(svc, "nope") == []
    assert q(svc, "shared", n=2) == [300, 100]
    res = svc.query("T", "shared", 10, 0, 2**62)
    assert res.index_last_update_timestamp == T0 + 3000
    assert res.index_last_update_phyoffset == 300


def test_query_filters_by_time_range(tmp_path: Path) -> None:
    svc = service(tmp_path)
    for i in range(10):
        svc.put(req(i * 100, keys="k", ts=T0 + i * 1000))
    assert q(svc, "k", begin=T0 + 3000, end=T0 + 5000) == [500, 400, 300]
    assert q(svc, "k", begin=T0 + 9000, end=T0 + 99000) == [900]
    assert q(svc, "k", begin=0, end=T0 - 1) == []
    assert q(svc, "k", begin=T0 + 10_000, end=T0 + 20_000) == []


def test_rollback_messages_and_reindexing_are_skipped(tmp_path: Path) -> None:
    svc = service(tmp_path)
    svc.put(req(0, keys="a", sys_flag=m.TRANSACTION_ROLLBACK_TYPE))
    assert q(svc, "a") == []
    assert svc.max_indexed_phy_offset == -1
    svc.put(req(100, keys="a", sys_flag=m.TRANSACTION_PREPARED_TYPE))
    svc.put(req(200, keys="a", sys_flag=m.TRANSACTION_COMMIT_TYPE))
    svc.put(req(200, keys="a"))  # re-dispatch of an indexed message
    svc.put(req(100, keys="a"))
    assert q(svc, "a") == [200, 100]
    assert svc.max_indexed_phy_offset == 200


def test_on_disk_layout_matches_reference(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=7, entries=10)
    svc.put(req(4096, keys="hello", ts=T0 + 5000))
    svc.put(req(8192, keys="hello", ts=T0 + 7500))
    svc.flush()
    [name] = svc.file_names
    raw = (tmp_path / "index" / name).read_bytes()
    assert len(raw) == 40 + 7 * 4 + 10 * 20
    assert struct.unpack_from(">qqqqii", raw, 0) == (T0 + 5000, T0 + 7500, 4096, 8192, 1, 3)
    h = index_key_hash("T#hello")
    slot = h % 7
    assert struct.unpack_from(">i", raw, 40 + slot * 4)[0] == 2
    assert struct.unpack_from(">iqii", raw, 40 + 28 + 1 * 20) == (h, 4096, 0, 0)
    assert struct.unpack_from(">iqii", raw, 40 + 28 + 2 * 20) == (h, 8192, 2, 1)
    assert raw[40 + 28 : 40 + 28 + 20] == bytes(20)  # entry 0 is never used


def test_key_hash_is_abs_java_hash_and_zero_on_overflow() -> None:
    assert index_key_hash("TagA") == 2598919
    assert index_key_hash("polygenelubricants") == 0  # hashCode == Integer.MIN_VALUE
    assert index_key_hash("TopicTest#key1") == abs(m.java_string_hash("TopicTest#key1"))


def test_slot_collisions_with_one_slot(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=1, entries=100)
    for i in range(30):
        svc.put(req(i * 10, keys=f"k{i % 3}", uniq=f"U{i}"))
    assert q(svc, "k1") == [i * 10 for i in reversed(range(30)) if i % 3 == 1]
    assert q(svc, "U17") == [170]


def test_equal_java_hashes_match_like_upstream(tmp_path: Path) -> None:
    # "Aa" and "BB" have the same String.hashCode, so T#Aa and T#BB collide; the caller filters.
    svc = service(tmp_path)
    svc.put(req(0, keys="Aa"))
    svc.put(req(100, keys="BB"))
    assert q(svc, "Aa") == [100, 0]


def test_rolls_to_new_files_when_full(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=3, entries=5)  # 4 usable entries per file
    for i in range(10):
        svc.put(req(i * 100, keys="k"))
    assert len(svc.file_names) == 3
    assert svc.file_names == sorted(svc.file_names)
    assert q(svc, "k") == [i * 100 for i in reversed(range(10))]
    assert q(svc, "k", n=5) == [900, 800, 700, 600, 500]


def test_message_keys_may_straddle_a_roll(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=3, entries=3)  # 2 usable entries per file
    svc.put(req(0, keys="a b c", uniq="u"))
    assert len(svc.file_names) == 2
    for key in ("a", "b", "c", "u"):
        assert q(svc, key) == [0]


def test_reload_after_close(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=5, entries=6)
    for i in range(12):
        svc.put(req(i * 100, keys=f"k{i % 2}", uniq=f"U{i}"))
    before = (q(svc, "k0"), q(svc, "k1"), q(svc, "U7"))
    names = svc.file_names
    svc.flush()
    svc.close()
    again = service(tmp_path, slots=5, entries=6)
    assert again.file_names == names
    assert (q(again, "k0"), q(again, "k1"), q(again, "U7")) == before
    again.put(req(1100, keys="k1"))  # recovery re-dispatch: already indexed
    again.put(req(1200, keys="k0"))
    assert q(again, "k0") == [1200, *before[0]]
    assert q(again, "k1") == before[1]


@pytest.mark.parametrize("entries", [3, 4000])  # the keys straddle a roll / sit in one file
def test_a_message_cut_short_between_its_keys_is_indexed_again_after_a_crash(
    tmp_path: Path, entries: int
) -> None:
    svc = service(tmp_path, slots=5, entries=entries)
    svc.put(req(0, keys="k0", uniq="U0"))
    # message 100's UNIQ_KEY entry is written, the process dies before its KEYS entries
    svc.drain()
    f = svc._files[-1] if svc._files[-1].index_count < entries else svc._new_file()
    assert f.put_key(index_key_hash(build_key("T", "U1")), 100, T0 + 1000)
    svc.close()  # a crash: nothing else is written
    again = service(tmp_path, slots=5, entries=entries)
    assert q(again, "U1") == [100]
    assert q(again, "a") == []
    again.put(req(0, keys="k0", uniq="U0"))  # recovery re-dispatches from before the newest ...
    again.put(req(100, keys="a b", uniq="U1"))  # ... including the newest, which is completed
    assert (q(again, "k0"), q(again, "U0"), q(again, "U1"), q(again, "a"), q(again, "b")) == (
        [0],
        [0],
        [100],
        [100],
        [100],
    )


def test_truncate_after_inside_and_across_files(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=2, entries=5)  # 4 entries per file, heavy chaining
    for i in range(10):
        svc.put(req(i * 100, keys="k", uniq=f"U{i}"))  # 2 entries per message
    assert len(svc.file_names) == 5
    dropped = svc.truncate_after(450)
    assert dropped == 10  # messages 500..900
    assert len(svc.file_names) == 3  # files holding messages 0-1, 2-3, 4
    assert q(svc, "k") == [400, 300, 200, 100, 0]
    assert q(svc, "U5") == []
    assert svc.max_indexed_phy_offset == 400
    assert svc.query("T", "k", 10, 0, 2**62).index_last_update_phyoffset == 400
    # new messages after the cut are indexed and chain onto the surviving entries
    svc.put(req(450, keys="k", uniq="U5b"))
    svc.put(req(550, keys="k"))
    assert q(svc, "k") == [550, 450, 400, 300, 200, 100, 0]
    assert q(svc, "U5b") == [450]
    svc.close()
    again = service(tmp_path, slots=2, entries=5)
    assert q(again, "k") == [550, 450, 400, 300, 200, 100, 0]


def test_truncate_after_undoes_exactly_within_one_file(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=3, entries=100)
    for i in range(20):
        svc.put(req(i * 10, keys=f"k{i % 4}", ts=T0 + i * 1000))
    svc.truncate_after(105)
    for j in range(4):
        assert q(svc, f"k{j}") == [i * 10 for i in reversed(range(11)) if i % 4 == j]
    assert svc.query("T", "k0", 1, 0, 2**62).index_last_update_timestamp >= T0 + 10_000
    assert svc.truncate_after(0) == 11
    assert svc.max_indexed_phy_offset == -1
    assert q(svc, "k0") == []
    svc.put(req(0, keys="k0"))
    assert q(svc, "k0") == [0]


def test_delete_files_before_keeps_newest(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=3, entries=3)
    for i in range(6):
        svc.put(req(i * 100, keys="k"))  # 2 entries per file -> 3 files
    names = svc.file_names
    gone = svc.delete_files_before(250)
    assert [os.path.basename(p) for p in gone] == names[:1]
    assert q(svc, "k") == [500, 400, 300, 200]
    assert svc.delete_files_before(10**9) == [str(tmp_path / "index" / names[1])]
    assert svc.file_names == names[2:]
    assert sorted(os.listdir(tmp_path / "index")) == names[2:]


def test_abnormal_exit_drops_files_newer_than_checkpoint(tmp_path: Path) -> None:
    svc = service(tmp_path, slots=3, entries=3)
    for i in range(4):
        svc.put(req(i * 100, keys="k", ts=T0 + i * 1000))  # files: [0,100], [200,300]
    svc.drain()  # close() drops queued messages (a crash); the store drains before closing
    svc.close()
    again = IndexService(str(tmp_path / "index"), max_hash_slot_num=3, max_index_num=3, now_ms=Clock())
    again.load(False, T0 + 1500)
    assert q(again, "k") == [100, 0]
    assert again.max_indexed_phy_offset == 100
    again.put(req(200, keys="k", ts=T0 + 2000))  # the store re-dispatches from there
    assert q(again, "k") == [200, 100, 0]


def test_damaged_files_are_dropped_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc = service(tmp_path, slots=3, entries=3)
    for i in range(6):
        svc.put(req(i * 100, keys="k"))
    names = svc.file_names
    svc.close()
    d = tmp_path / "index"
    with open(d / names[0], "r+b") as f:
        f.truncate(30)  # short: not even a header
    with open(d / names[1], "r+b") as f:
        f.seek(36)
        f.write(struct.pack(">i", 999))  # index count beyond the file
    (d / "notes.txt").write_text("stray")
    caplog.set_level(logging.WARNING, logger="store.index")
    again = service(tmp_path, slots=3, entries=3)
    assert again.file_names == names[2:]
    assert q(again, "k") == [500, 400]
    text = caplog.text
    assert names[0] in text
    assert names[1] in text
    assert "notes.txt" in text
    assert not (d / names[0]).exists()


def test_a_slot_count_past_the_slots_after_crashes_keeps_the_file(tmp_path: Path) -> None:
    """A batch cut short by a crash after its slot heads, before its header, leaves heads past the
    published count; the next entry of such a slot counts it as newly taken (upstream's rule),
    again after every such crash: the header's slot count may then exceed the slots, never the
    entries. Such a file loads and answers queries (once it was dropped as damaged)."""
    svc = service(tmp_path, slots=2, entries=64)
    offset = 0
    for _crash in range(4):
        for _ in range(3):
            offset += 100
            svc.put(req(offset, keys=f"k{offset}"))
        svc.drain()
        path = tmp_path / "index" / svc.file_names[0]
        with open(path, "r+b") as f:
            f.seek(36)
            (count,) = struct.unpack(">i", f.read(4))
            f.seek(40)
            f.write(struct.pack(">ii", count + 10, count + 10))  # the heads of an unpublished batch
    for key in ("after-1", "after-2", "after-3"):  # written after the last cut: in both slots
        offset += 100
        svc.put(req(offset, keys=key))
    svc.drain()
    svc.close()
    with open(path, "rb") as f:
        f.seek(32)
        slots_taken, count = struct.unpack(">ii", f.read(8))
    assert slots_taken > 2  # more than the file's slots
    assert slots_taken < count
    again = service(tmp_path, slots=2, entries=64)
    assert again.file_names == [path.name]
    assert [q(again, key) for key in ("after-1", "after-2", "after-3")] == [
        [offset - 200],
        [offset - 100],
        [offset],
    ]


def test_slot_heads_left_by_a_batch_cut_short_are_restored_after_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash after a batch wrote its entries and slot heads, before its header: the messages
    are indexed again after the restart, and every key indexed before the batch is still found
    (the next entry of a slot whose head points past the count would otherwise start its chain
    afresh and cut the older entries off)."""
    svc = service(tmp_path, slots=64, entries=4000)
    for i in range(100):
        svc.put(req(100 + i * 100, uniq=f"before-{i}"))
    svc.drain()
    path = tmp_path / "index" / svc.file_names[0]
    header = path.read_bytes()[:40]
    for i in range(100, 200):
        svc.put(req(100 + i * 100, uniq=f"cut-{i}"))
    svc.drain()  # a vector batch: entries, slot heads, header
    with open(path, "r+b") as f:
        f.write(header)  # ... as if killed before the header
    svc.close()
    caplog.set_level(logging.WARNING, logger="store.index")
    again = IndexService(str(tmp_path / "index"), max_hash_slot_num=64, max_index_num=4000, now_ms=Clock())
    again.load(False, 2**62)  # an abnormal exit; the file is older than the checkpoint
    assert "restored to their newest entries" in caplog.text
    for i in range(100, 200):  # the store dispatches them again
        again.put(req(100 + i * 100, uniq=f"cut-{i}"))
    again.drain()
    assert [q(again, f"before-{i}") for i in range(100)] == [[100 + i * 100] for i in range(100)]
    assert [q(again, f"cut-{i}") for i in range(100, 200)] == [[100 + i * 100] for i in range(100, 200)]


def test_a_write_that_fails_after_its_slot_heads_leaves_older_keys_findable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cut without a crash: a batch failing between its slot heads and its header (any
    exception) raises from ``drain``, and the messages written next still find every older key."""
    svc = service(tmp_path, slots=64, entries=4000)
    for i in range(100):
        svc.put(req(100 + i * 100, uniq=f"before-{i}"))
    svc.drain()
    f = svc._files[-1]

    def fail(*_args: int) -> None:
        raise RuntimeError("cut short")

    monkeypatch.setattr(f, "publish", fail)
    for i in range(100, 200):
        svc.put(req(100 + i * 100, uniq=f"cut-{i}"))
    with pytest.raises(RuntimeError, match="cut short"):
        svc.drain()
    monkeypatch.undo()
    for i in range(100, 200):  # dispatched again
        svc.put(req(100 + i * 100, uniq=f"cut-{i}"))
    svc.drain()
    assert [q(svc, f"before-{i}") for i in range(100)] == [[100 + i * 100] for i in range(100)]
    assert [q(svc, f"cut-{i}") for i in range(100, 200)] == [[100 + i * 100] for i in range(100, 200)]


def test_restoring_slot_heads_stops_at_entries_that_are_not_a_chain(tmp_path: Path) -> None:
    """Past the published count, an entry whose previous one is not older (bytes not written by
    a batch: a damaged file) ends the walk: the slot is emptied, and the restart does not loop."""
    svc = service(tmp_path, slots=4, entries=64)
    svc.put(req(100, uniq="kept"))
    svc.drain()
    path = tmp_path / "index" / svc.file_names[0]
    svc.close()
    entries_pos = 40 + 4 * 4
    with open(path, "r+b") as f:
        f.seek(36)
        (count,) = struct.unpack(">i", f.read(4))
        # slot 0 points at entry count + 3, which names itself as its previous one: a cycle;
        # slot 1 at count + 5, whose previous one is count + 9 (newer): not a chain either
        f.seek(40)
        f.write(struct.pack(">ii", count + 3, count + 5))
        for number, prev in ((count + 3, count + 3), (count + 5, count + 9)):
            f.seek(entries_pos + number * INDEX_ENTRY_SIZE)
            f.write(struct.pack(">iqii", 1, 1, 0, prev))
    again = IndexService(str(tmp_path / "index"), max_hash_slot_num=4, max_index_num=64, now_ms=Clock())
    again.load(False, 2**62)
    with open(path, "rb") as f:
        f.seek(40)
        assert struct.unpack(">ii", f.read(8)) == (0, 0)
    assert q(again, "kept") == [100]


def test_files_made_with_other_sizes_are_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc = service(tmp_path, slots=3, entries=3)
    svc.put(req(0, keys="k"))
    svc.drain()
    svc.close()
    caplog.set_level(logging.WARNING, logger="store.index")
    again = service(tmp_path, slots=4, entries=3)
    assert again.file_names == []
    assert "size" in caplog.text


def test_default_sized_file_is_sparse_beyond_its_slots_and_first_entries(tmp_path: Path) -> None:
    svc = IndexService(
        str(tmp_path / "index"), max_hash_slot_num=5_000_000, max_index_num=20_000_000, now_ms=Clock()
    )
    svc.load(True, 0)
    svc.put(req(0, keys="k", uniq="u"))
    assert q(svc, "u") == [0]
    [name] = svc.file_names
    st_ = os.stat(tmp_path / "index" / name)
    assert st_.st_size == 420_000_040
    # blocks for the header, the 20 MB of slots (a key's slot is anywhere) and one step of
    # entries: a store into a hole of the map on a full disk is a SIGBUS
    slots_end = 40 + 5_000_000 * 4
    assert slots_end <= st_.st_blocks * 512 < slots_end + 1024 * 1024
    assert svc.flush() == T0
    svc.destroy()
    assert os.listdir(tmp_path / "index") == []


def test_file_names_are_creation_times_and_sorted_even_if_clock_steps_back(tmp_path: Path) -> None:
    times = iter([T0 + 5000, T0, T0])
    svc = IndexService(
        str(tmp_path / "index"), max_hash_slot_num=3, max_index_num=2, now_ms=lambda: next(times)
    )
    svc.load(True, 0)
    for i in range(3):
        svc.put(req(i, keys="k"))
    names = svc.file_names
    assert names[0] == index_file_name(T0 + 5000)
    assert len(names[0]) == 17
    assert names == sorted(names)
    assert len(set(names)) == 3
    assert q(svc, "k") == [2, 1, 0]


def test_flush_reports_durable_end_timestamp(tmp_path: Path) -> None:
    svc = service(tmp_path)
    assert svc.flush() == 0
    svc.put(req(0, keys="k", ts=T0 + 42))
    assert svc.flush() == 0  # flush() does not drain (it runs in a worker thread): still queued
    svc.drain()
    assert svc.flush() == T0 + 42
    assert svc.flush() == T0 + 42


# --- model-based: random puts, truncations and reloads ----------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=3)),
        st.tuples(st.just("truncate"), st.integers(0, 25)),
        st.tuples(st.just("reload"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, slots=st.integers(1, 4), entries=st.integers(2, 6))
def test_random_operations_match_model(
    tmp_path_factory: pytest.TempPathFactory, ops, slots: int, entries: int
) -> None:
    root = tmp_path_factory.mktemp("idx")
    svc = service(root, slots, entries)
    model: list[tuple[int, set[str]]] = []  # (offset, keys incl. uniq)
    nxt = 0
    for op, arg in ops:
        if op == "put":
            uniq = f"U{nxt}"
            svc.put(req(nxt, keys=" ".join(arg) or None, uniq=uniq, ts=T0 + nxt * 1000))
            model.append((nxt, {*arg, uniq}))
            nxt += 1
        elif op == "truncate":
            svc.truncate_after(arg)
            model = [(o, k) for o, k in model if o < arg]
            nxt = min(nxt, arg)
        else:
            svc.flush()
            svc.close()
            svc = service(root, slots, entries)
        for key in ("a", "b", "c", "d", "e", f"U{max(nxt - 1, 0)}"):
            expect = [o for o, k in reversed(model) if key in k]
            assert q(svc, key) == expect, (key, model)
        assert svc.max_indexed_phy_offset == (model[-1][0] if model else -1)
    svc.close()


def test_flush_from_another_thread_while_files_change(tmp_path: Path) -> None:
    import threading

    svc = service(tmp_path, slots=3, entries=4)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                svc.flush()
        except BaseException as exc:  # report to the main thread
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        off = 0
        for round_ in range(200):
            for _ in range(5):
                svc.put(req(off, keys="k"))
                off += 10
            if round_ % 3 == 0:
                svc.truncate_after(off - 25)
                off -= 20
            if round_ % 7 == 0:
                svc.delete_files_before(off - 30)
    finally:
        stop.set()
        t.join()
    assert errors == []
    assert q(svc, "k", n=3) == [off - 10, off - 20, off - 30]


def test_entries_are_written_only_where_blocks_were_reserved(tmp_path: Path) -> None:
    # scalar and vectorized writes, across reservation steps and a file roll, and after a reload
    # (whose newest file may have holes anywhere: its first write reserves through it)
    svc = IndexService(
        str(tmp_path / "index"), max_hash_slot_num=1000, max_index_num=30_000, now_ms=Clock(), batch_size=512
    )
    svc.load(True, 0)

    def check() -> None:
        for f in svc._files:
            written_end = f.entries_pos + f.index_count * INDEX_ENTRY_SIZE
            assert f.reserved >= min(f.file_size, written_end)
            assert os.fstat(f.fd).st_blocks * 512 >= written_end - written_end % 4096

    phy = 0
    for n in (1, 7, 700, 5000, 30_000):
        for i in range(n):
            svc.put(req(phy, keys=f"k{phy} x{phy}" if i % 3 == 0 else None, uniq=f"u{phy}"))
            phy += 100
        svc.drain()
        check()
    assert len(svc.file_names) >= 2
    svc.close()
    svc = IndexService(
        str(tmp_path / "index"), max_hash_slot_num=1000, max_index_num=30_000, now_ms=Clock(), batch_size=512
    )
    svc.load(True, 0)
    newest = svc._files[-1]
    assert newest.reserved == 0  # nothing known: the next write reserves from the start
    svc.put(req(phy, uniq="after-reload"))
    svc.drain()
    assert newest.reserved >= newest.entries_pos + newest.index_count * INDEX_ENTRY_SIZE
    assert q(svc, "after-reload") == [phy]
    assert os.fstat(newest.fd).st_blocks * 512 >= newest.reserved - newest.reserved % 4096


def test_a_query_walked_step_by_step_survives_files_deleted_between_its_steps(tmp_path: Path) -> None:
    """``query_steps`` (what a reader that brings each page in first walks, awaiting between
    steps) while retention deletes files: their walks end at once, the newest file's entries are
    found, nothing raises -- neither the steps nor a read-in job made for a file that is gone by
    the time it runs."""
    svc = service(tmp_path, slots=3, entries=3)
    for i in range(6):
        svc.put(req(i * 100, keys="k"))  # 2 entries per file -> 3 files
    svc.drain()
    older = svc._files[:-1]
    assert len(older) == 2
    steps = svc.query_steps("T", "k", 64, 0, 2**62)
    newest, _ = next(steps)  # the newest file's slot
    late_jobs = [functools.partial(_read_pages_sync, f.path, 0, INDEX_ENTRY_SIZE) for f in older]
    svc.delete_files_before(10**9)  # the two older files go
    for job in late_jobs:
        job()  # their paths are gone: nothing to read, nothing raised
    rest: list[tuple[IndexFile, int]] = []
    while True:
        try:
            rest.append(next(steps))
        except StopIteration as done:
            found = done.value
            break
    assert found.phy_offsets == [500, 400]
    # the newest file's two entries, then each deleted file's slot, where its walk ends
    assert [f for f, _ in rest] == [newest, newest, *reversed(older)]
    assert all(f.read_in_job(pos) is None for f, pos in rest if f is not newest)  # closed: no job
