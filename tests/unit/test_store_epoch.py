"""EpochFile: upstream file format, durability, lookups, truncation and the consistent-point search."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import pytest

from store.epoch import (
    LONG_MAX,
    EpochEntry,
    EpochFile,
    EpochFileError,
    decode_epoch_file,
    encode_epoch_file,
)


def make(path: Path | None, *pairs: tuple[int, int], end: int | None = None) -> EpochFile:
    ef = EpochFile(path)
    for epoch, start in pairs:
        assert ef.append(epoch, start)
    if end is not None:
        ef.set_end_offset(end)
    return ef


# ---------------------------------------------------------------- format


def test_encode_matches_reference_example_bytes() -> None:
    # Example from the fact sheet §3.3, built by hand.
    assert encode_epoch_file([(7, 7000), (8, 8000)]) == b"2\n773307083\n7-7000\n8-8000\n"


def test_checksum_is_masked_crc32_of_entry_lines_with_separators() -> None:
    body = b"1-0\n2-4096\n3-123456789012\n"
    expected_crc = zlib.crc32(body) & 0x7FFFFFFF
    data = b"3\n" + str(expected_crc).encode() + b"\n" + body
    assert decode_epoch_file(data) == [(1, 0), (2, 4096), (3, 123456789012)]
    assert encode_epoch_file([(1, 0), (2, 4096), (3, 123456789012)]) == data


def test_zero_checksum_means_unchecked() -> None:
    assert decode_epoch_file(b"2\n0\n1-0\n2-100\n") == [(1, 0), (2, 100)]


def test_file_round_trip_through_persist_and_load(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    ef = make(path, (1, 100), (2, 300), (3, 500))
    assert ef.dirty
    ef.persist()
    assert not ef.dirty
    assert path.read_bytes() == encode_epoch_file([(1, 100), (2, 300), (3, 500)])
    again = EpochFile(path)
    again.load()
    assert again.entries() == [
        EpochEntry(1, 100, 300),
        EpochEntry(2, 300, 500),
        EpochEntry(3, 500, LONG_MAX),
    ]
    assert not (tmp_path / "epochFileCheckpoint.tmp").exists()


def test_truncating_to_no_entries_writes_an_empty_file(tmp_path: Path) -> None:
    # Deliberate deviation from upstream, whose write of an empty list is a no-op (stale file kept).
    path = tmp_path / "epoch"
    ef = make(path, (1, 100))
    ef.persist()
    ef.truncate_suffix(50)
    ef.persist()
    again = EpochFile(path)
    again.load()
    assert again.entries() == []


def test_missing_file_loads_empty_without_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ef = EpochFile(tmp_path / "nope")
    with caplog.at_level(logging.WARNING, logger="store.epoch"):
        ef.load()
    assert len(ef) == 0
    assert ef.last_epoch() == -1
    assert caplog.records == []


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage",
        b"2\n773307083\n7-7000\n",  # count mismatch
        b"2\n773307084\n7-7000\n8-8000\n",  # bad checksum
        b"2\n0\n7-7000\n8x8000\n",  # bad line
        b"2\n0\n8-7000\n7-8000\n",  # epochs out of order
        b"\xff\xfe\n",  # not UTF-8
    ],
)
def test_corrupt_file_loads_empty_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    path = tmp_path / "epochFileCheckpoint"
    path.write_bytes(content)
    ef = EpochFile(path)
    with caplog.at_level(logging.WARNING, logger="store.epoch"):
        ef.load()
    assert len(ef) == 0
    assert any("corrupt" in r.getMessage() for r in caplog.records)


def test_corrupt_file_falls_back_to_upstream_backup(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    path.write_bytes(b"2\n1\n7-7000\n8-8000\n")
    (tmp_path / "epochFileCheckpoint.bak").write_bytes(encode_epoch_file([(7, 7000)]))
    ef = EpochFile(path)
    ef.load()
    assert ef.pairs() == [(7, 7000)]


def test_in_memory_file_never_touches_disk(tmp_path: Path) -> None:
    ef = make(None, (1, 0))
    ef.persist()
    assert not ef.dirty
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- append and lookups


def test_append_rules() -> None:
    ef = make(None, (1, 100), (2, 300))
    assert ef.append(2, 300) is False  # same epoch again: no-op
    with pytest.raises(EpochFileError):
        ef.append(2, 400)  # same epoch, other start
    with pytest.raises(EpochFileError):
        ef.append(1, 500)  # lower epoch
    with pytest.raises(EpochFileError):
        ef.append(3, 200)  # start before the last start
    assert ef.append(3, 300)  # an empty epoch 2 is allowed
    assert ef.pairs() == [(1, 100), (2, 300), (3, 300)]
    assert ef.find(2) == EpochEntry(2, 300, 300)
    assert ef.find_epoch_at(300) == EpochEntry(3, 300, LONG_MAX)


def test_lookups_use_derived_end_offsets() -> None:
    ef = make(None, (1, 100), (2, 300), (3, 500), end=700)
    assert ef.last_entry() == EpochEntry(3, 500, 700)
    assert ef.last_epoch() == 3
    assert ef.first_entry() == EpochEntry(1, 100, 300)
    assert ef.find(2) == EpochEntry(2, 300, 500)
    assert ef.find(4) is None
    assert ef.next_entry(1) == EpochEntry(2, 300, 500)
    assert ef.next_entry(3) is None
    assert ef.find_epoch_at(350) == EpochEntry(2, 300, 500)
    assert ef.find_epoch_at(500) == EpochEntry(3, 500, 700)
    assert ef.find_epoch_at(99) is None
    assert ef.find_epoch_at(700) is None
    assert ef.entries(max_offset=900)[-1] == EpochEntry(3, 500, 900)


def test_truncate_suffix_drops_entries_starting_at_or_after_offset() -> None:
    ef = make(None, (1, 100), (2, 300), (3, 500), end=700)
    ef.truncate_suffix(500)
    assert ef.pairs() == [(1, 100), (2, 300)]
    assert ef.last_entry() == EpochEntry(2, 300, 500)
    ef.truncate_suffix(150)  # upstream EpochFileCacheTest.testTruncate
    assert ef.pairs() == [(1, 100)]
    assert ef.last_entry() == EpochEntry(1, 100, 150)


def test_truncate_suffix_by_epoch() -> None:
    ef = make(None, (1, 100), (2, 300), (3, 500))
    ef.truncate_suffix_by_epoch(2)
    assert ef.pairs() == [(1, 100)]


def test_truncate_prefix_drops_ended_entries_and_moves_first_start() -> None:
    ef = make(None, (1, 100), (2, 300), (3, 500), end=700)
    ef.truncate_prefix(300)
    assert ef.pairs() == [(2, 300), (3, 500)]
    ef.truncate_prefix(400)
    assert ef.pairs() == [(2, 400), (3, 500)]
    ef.truncate_prefix(650)
    assert ef.pairs() == [(3, 650)]


def test_persist_after_concurrent_change_never_loses_the_newer_state(tmp_path: Path) -> None:
    path = tmp_path / "e"
    ef = make(path, (1, 0))
    ef.persist()
    ef.append(2, 10)
    ef.persist()
    ef.persist()  # clean: no rewrite needed
    assert decode_epoch_file(path.read_bytes()) == [(1, 0), (2, 10)]


# ---------------------------------------------------------------- consistent point (§3.4, upstream tests)


def test_consistent_point_last_epoch_started_elsewhere() -> None:
    local = make(None, (1, 100), (2, 300), (3, 500))
    master = make(None, (1, 100), (2, 300), (3, 450))
    assert local.find_consistent_point(master) == 450


def test_consistent_point_same_last_epoch_is_the_shorter_end() -> None:
    local = make(None, (1, 100), (2, 300), (3, 500), end=700)
    master = make(None, (1, 100), (2, 300), (3, 500), end=600)
    assert local.find_consistent_point(master) == 600


def test_consistent_point_none_found_is_minus_one() -> None:
    local = make(None, (1, 100), (2, 300), (3, 500), end=700)
    master = make(None, (1, 200), (2, 500))
    assert local.find_consistent_point(master) == -1


def test_consistent_point_master_has_a_newer_epoch() -> None:
    local = make(None, (1, 100), (2, 300), (3, 500), end=700)
    master = make(None, (1, 100), (2, 300), (3, 500), (4, 800))
    assert master.find_consistent_point(local) == 700
    assert local.find_consistent_point(master.entries(max_offset=900)) == 700


def test_consistent_point_with_empty_local_history_is_minus_one() -> None:
    assert EpochFile().find_consistent_point(make(None, (1, 0), end=10)) == -1


def test_consistent_point_takes_local_max_offset_argument() -> None:
    local = make(None, (1, 0))
    master = make(None, (1, 0), (2, 900), end=1200)
    assert local.find_consistent_point(master, local_max_offset=1000) == 900
    assert local.find_consistent_point(master, local_max_offset=800) == 800
