"""Durable Raft storage: records on disk, torn tails, restarts, snapshots and compaction."""

from __future__ import annotations

import os

import pytest

from controller.raft.errors import StorageCorruptError, StorageLockedError
from controller.raft.messages import Entry, HardState, Snapshot, SnapshotMeta
from controller.raft.storage import LOG_MAGIC, FileStorage, MemoryStorage, encode_snapshot_file


def ents(term: int, lo: int, hi: int, tag: bytes = b"e") -> list[Entry]:
    return [Entry(term, i, tag + b"%d" % i) for i in range(lo, hi + 1)]


def reopen(path) -> tuple[FileStorage, object]:
    st = FileStorage(path)
    return st, st.load()


def test_fresh_directory_loads_empty_state_and_creates_files(tmp_path):
    st, state = reopen(tmp_path / "raft")
    assert state.hard_state == HardState()
    assert state.entries == []
    assert state.snapshot.meta.index == 0
    assert (tmp_path / "raft" / "raft.log").read_bytes() == LOG_MAGIC
    st.close()


def test_entries_and_hard_state_survive_restart(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, "n0", 0), ents(1, 1, 3), None)
    st.save(HardState(1, "n0", 3), [], None)
    st.close()
    st, state = reopen(tmp_path)
    assert state.hard_state == HardState(1, "n0", 3)
    assert state.entries == ents(1, 1, 3)
    st.close()


def test_conflicting_suffix_replacement_survives_restart(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 2), ents(1, 1, 5), None)
    st.save(HardState(2, None, 2), ents(2, 3, 4, b"new"), None)  # replaces 3..5
    st.close()
    _, state = reopen(tmp_path)
    assert state.entries == ents(1, 1, 2) + ents(2, 3, 4, b"new")


def test_torn_tail_is_cut_and_appending_continues(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, "n1", 1), ents(1, 1, 2), None)
    good_size = os.path.getsize(st.log_path)
    st.save(HardState(1, "n1", 2), ents(1, 3, 3), None)
    st.close()
    # Crash mid-write: only part of the last record reached the disk.
    os.truncate(st.log_path, good_size + 7)
    st, state = reopen(tmp_path)
    assert state.entries == ents(1, 1, 2)
    assert state.hard_state == HardState(1, "n1", 1)
    assert os.path.getsize(st.log_path) == good_size
    st.save(None, ents(1, 3, 4), None)
    st.close()
    _, state = reopen(tmp_path)
    assert state.entries == ents(1, 1, 4)


def test_corrupt_last_record_is_dropped_by_crc(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 0), ents(1, 1, 2), None)
    st.save(None, ents(1, 3, 3), None)
    st.close()
    data = bytearray(st.log_path.read_bytes())
    data[-2] ^= 0xFF
    st.log_path.write_bytes(bytes(data))
    _, state = reopen(tmp_path)
    assert state.entries == ents(1, 1, 2)


def test_zero_filled_tail_is_treated_as_torn(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 0), ents(1, 1, 1), None)
    st.close()
    with open(st.log_path, "ab") as f:
        f.write(b"\0" * 64)
    _, state = reopen(tmp_path)
    assert state.entries == ents(1, 1, 1)


def test_not_a_raft_log_is_refused(tmp_path):
    (tmp_path / "raft.log").write_bytes(b"something else entirely")
    with pytest.raises(StorageCorruptError, match="magic"):
        FileStorage(tmp_path).load()


def test_received_snapshot_resets_log_across_restart(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 2), ents(1, 1, 6), None)
    snap = Snapshot(SnapshotMeta(10, 3), b"image")
    st.save(HardState(3, None, 10), [], snap)
    st.save(None, ents(3, 11, 12), None)
    st.close()
    _, state = reopen(tmp_path)
    assert state.snapshot == snap
    assert state.entries == ents(3, 11, 12)
    assert state.hard_state.commit == 10


def test_snapshot_written_but_reset_record_lost_discards_unproven_suffix(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(2, None, 2), ents(1, 1, 3) + ents(2, 4, 8), None)
    st.close()
    # The snapshot file reached the disk, the log record announcing it did not.
    (tmp_path / "snapshot").write_bytes(encode_snapshot_file(Snapshot(SnapshotMeta(6, 3), b"img")))
    _, state = reopen(tmp_path)
    assert state.snapshot.meta == SnapshotMeta(6, 3)
    assert state.entries == []  # our (6, 2) is not the snapshot's (6, 3): nothing after it is trusted
    assert state.hard_state.commit == 6


def test_compaction_drops_prefix_shrinks_file_and_survives_restart(tmp_path):
    st, _ = reopen(tmp_path)
    for i in range(1, 101):
        st.save(HardState(1, "n0", i - 1), [Entry(1, i, b"x" * 100)], None)
    before = os.path.getsize(st.log_path)
    st.compact(Snapshot(SnapshotMeta(90, 1), b"state@90"))
    st.save(HardState(1, "n0", 100), [Entry(1, 101, b"y")], None)
    st.close()
    assert os.path.getsize(st.log_path) < before / 5
    _, state = reopen(tmp_path)
    assert state.snapshot == Snapshot(SnapshotMeta(90, 1), b"state@90")
    assert [e.index for e in state.entries] == list(range(91, 102))
    assert state.hard_state == HardState(1, "n0", 100)


def test_crash_between_snapshot_file_and_log_rewrite_skips_covered_prefix(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 8), ents(1, 1, 10), None)
    st.close()
    (tmp_path / "snapshot").write_bytes(encode_snapshot_file(Snapshot(SnapshotMeta(8, 1), b"s")))
    _, state = reopen(tmp_path)
    assert state.entries == ents(1, 9, 10)
    assert state.snapshot.meta.index == 8


def test_corrupt_snapshot_file_is_refused(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 3), ents(1, 1, 3), None)
    st.compact(Snapshot(SnapshotMeta(3, 1), b"img"))
    st.close()
    data = bytearray((tmp_path / "snapshot").read_bytes())
    data[-1] ^= 1
    (tmp_path / "snapshot").write_bytes(bytes(data))
    with pytest.raises(StorageCorruptError, match="CRC"):
        FileStorage(tmp_path).load()  # refused before the log is opened


def test_lost_snapshot_file_is_detected(tmp_path):
    st, _ = reopen(tmp_path)
    st.save(HardState(1, None, 3), ents(1, 1, 3), None)
    st.compact(Snapshot(SnapshotMeta(3, 1), b"img"))
    st.close()
    (tmp_path / "snapshot").unlink()
    with pytest.raises(StorageCorruptError, match="snapshot"):
        FileStorage(tmp_path).load()


def test_memory_storage_replays_like_file_storage(tmp_path):
    ops = [
        (HardState(1, "n0", 0), ents(1, 1, 5), None),
        (HardState(2, None, 2), ents(2, 3, 4, b"n"), None),
        (HardState(3, None, 9), [], Snapshot(SnapshotMeta(9, 3), b"s")),
        (None, ents(3, 10, 11), None),
    ]
    mem = MemoryStorage()
    fs, _ = reopen(tmp_path)
    for op in ops:
        mem.save(*op)
        fs.save(*op)
    fs.close()
    fs = FileStorage(tmp_path)
    assert mem.load() == fs.load()
    fs.close()


def test_a_second_user_of_the_directory_is_refused_until_the_first_closes(tmp_path):
    """Two peers appending to one raft.log would corrupt it: the second load is refused, and
    nothing is written; a refused or failed load holds no lock."""
    st, _ = reopen(tmp_path)
    st.save(HardState(1, "n0", 0), ents(1, 1, 2), None)
    before = (tmp_path / "raft.log").read_bytes()
    with pytest.raises(StorageLockedError, match="in use by another controller peer"):
        FileStorage(tmp_path).load()
    assert (tmp_path / "raft.log").read_bytes() == before
    st.close()
    st, state = reopen(tmp_path)
    assert state.entries == ents(1, 1, 2)
    st.close()
    (tmp_path / "raft.log").write_bytes(b"not a raft log at all")
    with pytest.raises(StorageCorruptError):
        FileStorage(tmp_path).load()
    (tmp_path / "raft.log").unlink()
    reopen(tmp_path)[0].close()  # the failed load released the directory
