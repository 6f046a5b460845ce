"""Consume queues on real (small) files: unit layout, rolling, pre-fill, reload, search, truncation."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from store.consume_queue import (
    CQ_UNIT_SIZE,
    FILLER_SIZE,
    RESERVE_MAX,
    RESERVE_MIN,
    ConsumeQueue,
    cq_file_size,
)

UNITS = 10
FILE = UNITS * CQ_UNIT_SIZE


def _put(cq: ConsumeQueue, qo: int, phys: int, size: int = 100, tags: int = 0) -> None:
    """What the store's dispatch does: a new file, or more room in the current one, when needed."""
    while not cq.put(phys, size, tags, qo):
        if cq.needs_room():
            assert cq.cur is not None
            cq.set_reserved(cq.cur, cq.reserve_sync(cq.cur, cq.cur.wrote_position + CQ_UNIT_SIZE))
        else:
            cq.install_file(cq.create_file_sync(cq.file_needed(qo), qo, cq.first_step()), qo)


def test_a_queue_that_filled_a_file_reserves_its_next_one_in_big_steps(tmp_path: Path) -> None:
    # each reservation is a worker job: a busy queue's next file starts at the largest step
    cq = ConsumeQueue("T", 0, str(tmp_path), 3 * RESERVE_MAX)
    size = cq.file_size  # a whole number of units
    units = size // CQ_UNIT_SIZE
    steps: dict[int, list[int]] = {}
    for i in range(units + units // 2):
        if not cq.put(i * 100, 100, 0, i) and cq.needs_room():
            assert cq.cur is not None
            steps.setdefault(cq.cur.file_from_offset, []).append(cq.cur.reserved)
        if i == units:
            assert cq.first_step() == RESERVE_MAX  # the first file is full
        _put(cq, i, i * 100)
        if i == units:
            second = cq.cur
            assert second is not None
            assert second.file_from_offset == size
            assert second.reserved >= RESERVE_MAX  # reserved at its creation
    first, later = steps[0], steps[size]
    assert first[0] < 4 * RESERVE_MIN  # a new queue starts small (most queues stay small)
    assert len(later) < len(first) // 2
    cq.close()
    assert ConsumeQueue("U", 0, str(tmp_path), 3 * RESERVE_MAX).first_step() == RESERVE_MIN  # no file yet


def test_queues_at_the_same_reservation_step_share_one_stage_limit_object(tmp_path: Path) -> None:
    """The plain send path reads ``stage_limit`` for every message: queues with the same limit
    share one int object (one cache line for thousands of queues), and it follows the steps."""
    queues = [ConsumeQueue("T", q, str(tmp_path), 3 * RESERVE_MAX) for q in range(3)]
    for cq in queues:
        _put(cq, 0, 0)
        assert cq.cur is not None
        assert cq.stage_limit * CQ_UNIT_SIZE == cq.cur.reserved
    assert queues[0].stage_limit is queues[1].stage_limit is queues[2].stage_limit
    first = queues[0].stage_limit
    for i in range(1, first + 1):  # one past the first step: the next step is reserved
        _put(queues[0], i, i * 100)
    assert queues[0].cur is not None
    assert queues[0].stage_limit * CQ_UNIT_SIZE == queues[0].cur.reserved > first * CQ_UNIT_SIZE
    assert queues[1].stage_limit is first
    for cq in queues:
        cq.close()
        assert cq.stage_limit == 0


def test_unit_bytes_follow_the_reference_layout(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 0, str(tmp_path), FILE)
    _put(cq, 0, 0x0102030405060708, 0x0A0B0C0D, -2)
    raw = (tmp_path / "T" / "0" / "00000000000000000000").read_bytes()[:20]
    # commit-log offset (8, big-endian), size (4), tags code (8, signed)
    assert raw == bytes.fromhex("0102030405060708") + bytes.fromhex("0A0B0C0D") + struct.pack(">q", -2)
    cq.close()


def test_file_size_rounds_up_to_whole_units() -> None:
    assert cq_file_size(300_000 * 20) == 6_000_000
    assert cq_file_size(105) == 120


def test_rolls_files_and_reads_across_them(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 1, str(tmp_path), FILE)
    for i in range(25):
        _put(cq, i, i * 100)
    assert len(cq.mfq.files) == 3
    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (0, 25, 2400 + 100)
    assert [u[1] for u in cq.iter_units(0, 25)] == [i * 100 for i in range(25)]
    chunk = cq.read_units(8, 32)
    assert chunk is not None
    assert len(chunk) == 2 * CQ_UNIT_SIZE
    assert cq.next_file_start(8) == 10
    cq.close()


def test_queue_starting_mid_file_is_prefilled(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 2, str(tmp_path), FILE)
    _put(cq, 13, 5000)
    _put(cq, 14, 5100)
    assert (cq.min_offset, cq.max_offset) == (13, 15)
    assert cq.unit(10) == (0, FILLER_SIZE, 0)
    assert cq.unit(13) == (5000, 100, 0)
    cq.close()


def test_reload_finds_the_valid_units_and_repeated_puts_are_ignored(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 0, str(tmp_path), FILE)
    for i in range(14):
        _put(cq, i, i * 100)
    cq.close()
    again = ConsumeQueue("T", 0, str(tmp_path), FILE)
    again.load_sync()
    assert (again.min_offset, again.max_offset, again.max_physic_offset) == (0, 14, 1400)
    assert again.put(500, 100, 0, 5)  # re-dispatch of an existing unit: no change
    assert again.unit(5) == (500, 100, 0)
    _put(again, 14, 1400)
    assert again.max_offset == 15
    again.close()


def test_search_by_store_time(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 0, str(tmp_path), FILE)
    times = [10, 20, 20, 20, 30, 40, 40, 50]
    for i in range(len(times)):
        _put(cq, i, i * 100)

    def store_time(offset: int, size: int) -> int:
        return times[offset // 100]

    assert cq.offset_by_time(20, False, store_time, 0) == 1
    assert cq.offset_by_time(20, True, store_time, 0) == 3
    assert cq.offset_by_time(41, False, store_time, 0) == 7
    assert cq.offset_by_time(5, True, store_time, 0) == 0
    assert cq.offset_by_time(99, False, store_time, 0) == 8
    # messages below the commit log's min offset count as older than anything
    assert cq.offset_by_time(5, False, store_time, 300) == 3
    cq.close()


def test_truncate_zeroes_dropped_units_and_rewinds(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 0, str(tmp_path), FILE)
    for i in range(25):
        _put(cq, i, i * 100)
    gone, cut = cq.truncate_to_phys(1250)
    assert [mf.file_from_offset for mf in gone] == [2 * FILE]
    assert cut is not None
    assert (cq.max_offset, cq.next_offset, cq.max_physic_offset) == (13, 13, 1300)
    assert cut.mm[3 * CQ_UNIT_SIZE :] == bytes(FILE - 3 * CQ_UNIT_SIZE)
    cq.mfq.retire(gone)
    _put(cq, 13, 1300)
    assert cq.unit(13) == (1300, 100, 0)
    cq.close()


def test_retention_drops_files_and_moves_the_min_offset(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 0, str(tmp_path), FILE)
    for i in range(25):
        _put(cq, i, i * 100)
    gone = cq.detach_expired(1250)
    assert [mf.file_from_offset for mf in gone] == [0]
    cq.mfq.retire(gone)
    cq.correct_min_offset(1250)
    assert cq.min_offset == 13
    cq.close()


def test_units_are_written_only_where_blocks_were_reserved(tmp_path: Path) -> None:
    # upstream's file size (6 MB): the file is sparse, blocks are reserved in growing steps ahead
    # of the units -- a store into a hole of the map is a SIGBUS on a full disk
    size = 300_000 * CQ_UNIT_SIZE
    cq = ConsumeQueue("T", 0, str(tmp_path), size)
    steps = []
    for i in range(120_000):
        if not cq.put(i * 100, 100, 0, i):
            if cq.needs_room():
                assert cq.cur is not None
                steps.append(cq.cur.reserved)
            _put(cq, i, i * 100)
        mf = cq.cur
        assert mf is not None
        assert mf.wrote_position <= mf.reserved < mf.file_size
        assert mf.reserved % CQ_UNIT_SIZE == 0
    assert mf.reserved - mf.wrote_position <= RESERVE_MAX + 4096
    blocks = os.stat(mf.path).st_blocks * 512
    assert mf.reserved <= blocks < mf.reserved + 4096 + RESERVE_MIN  # the rest stays a hole
    # steps grow from RESERVE_MIN to RESERVE_MAX: few of them
    assert 5 <= len(steps) <= 12
    assert steps == sorted(steps)
    cq.close()
    again = ConsumeQueue("T", 0, str(tmp_path), size)
    again.load_sync()
    cur = again.cur
    assert cur is not None
    # after a reload only the pages holding units are known to have blocks
    assert cur.wrote_position <= cur.reserved <= cur.wrote_position + 4096
    for i in range(120_000, 130_000):
        _put(again, i, i * 100)
    assert again.max_offset == 130_000
    assert cur.wrote_position <= cur.reserved
    again.close()
