"""Consume-queue and index files and the page cache: a queue reads and writes the pages that hold
its units, not the sparse rest of its 5.7 MB file (store.mapped_file.no_read_around), and a
reader behind the writer has the units ahead of it read together (ConsumeQueue.read_units); an
index query reads the pages of the slot and entries it looks at, and the index file written next
has its slot table read in at load.

Page residency is the kernel's own (``mincore`` of a map of the file); the cases that first drop a
file's pages from the page cache are skipped where the file system keeps them (tmpfs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from store.consume_queue import CQ_UNIT_SIZE, LOAD_READ_IN_MAX, READ_AHEAD, ConsumeQueue, cq_file_size
from store.index import IndexService
from store.index_file import IndexFile, index_key_hash
from store.mapped_file import PAGE_SIZE
from tests.integration.storekit import cached_pages, drop_pages
from tests.unit.test_store_index import Clock, req

#: upstream's consume-queue file: 300,000 units
FULL = cq_file_size(300_000 * CQ_UNIT_SIZE)
PAGE_UNITS = PAGE_SIZE // CQ_UNIT_SIZE  # 204 whole units a page (the 205th straddles two)


def resident(path: str) -> list[int]:
    """Page numbers of ``path`` in the page cache."""
    return [i for i, cached in enumerate(cached_pages(path)) if cached]


def _put(cq: ConsumeQueue, qo: int, phys: int, size: int = 100) -> None:
    """What the store's dispatch does: a new file, or more room in the current one, when needed."""
    while not cq.put(phys, size, 7, qo):
        if cq.needs_room():
            assert cq.cur is not None
            cq.set_reserved(cq.cur, cq.reserve_sync(cq.cur, cq.cur.wrote_position + CQ_UNIT_SIZE))
        else:
            cq.install_file(cq.create_file_sync(cq.file_needed(qo), qo), qo)


def _filled(tmp_path: Path, units: int, file_size: int = FULL) -> ConsumeQueue:
    cq = ConsumeQueue("T", 0, str(tmp_path), file_size)
    for i in range(units):
        _put(cq, i, 1000 + i * 100)
    return cq


def _file(tmp_path: Path, index: int = 0, file_size: int = FULL) -> str:
    return str(tmp_path / "T" / "0" / f"{index * file_size:020d}")


def test_loading_a_queue_reads_only_the_page_that_holds_its_units(tmp_path: Path) -> None:
    _filled(tmp_path, 10).close()
    path = _file(tmp_path)
    drop_pages(path)
    cq = ConsumeQueue("T", 0, str(tmp_path), FULL)
    cq.load_sync()
    # before: the load read 64 KiB in, and a fault read the device's readahead window around
    # its page (here the whole sparse file: 1,465 pages)
    assert resident(path) == [0]
    assert cq.max_offset == 10
    assert cq.unit(9) == (1000 + 9 * 100, 100, 7)
    cq.close()


def test_writing_into_a_new_page_reads_nothing_around_it(tmp_path: Path) -> None:
    cq = _filled(tmp_path, PAGE_UNITS + 100)  # units on pages 0 and 1
    path = _file(tmp_path)
    # before: the write into page 1, a hole, read (zero-filled) the readahead window around it
    assert resident(path) == [0, 1]
    cq.close()


@pytest.mark.parametrize(
    "units",
    [0, 1, PAGE_UNITS, PAGE_UNITS + 1, 2 * PAGE_UNITS + 1, 3_277, 60_000, FULL // CQ_UNIT_SIZE],
)
def test_reload_finds_every_unit_whichever_page_it_ends_on(tmp_path: Path, units: int) -> None:
    """The load reads the last file in growing steps (a page, then twice as much each time, up to
    LOAD_READ_IN_MAX) and scans each step: a unit cut by a step's end is scanned with the next."""
    _filled(tmp_path, units).close()
    cq = ConsumeQueue("T", 0, str(tmp_path), FULL)
    cq.load_sync()
    assert cq.max_offset == units
    if units:
        assert cq.unit(units - 1) == (1000 + (units - 1) * 100, 100, 7)
        assert cq.max_physic_offset == 1000 + units * 100
    assert LOAD_READ_IN_MAX < FULL  # the last case scans several steps of the largest size
    cq.close()


def test_a_reader_behind_the_writer_has_the_units_ahead_read_together(tmp_path: Path) -> None:
    """The maps read no more than a fault's page; ``read_units`` asks for READ_AHEAD bytes of
    written units at once, never the holes past them."""
    size = 1024 * CQ_UNIT_SIZE * 20  # 400 KiB files (100 pages): the first full, the second not
    units = size // CQ_UNIT_SIZE + 3 * PAGE_UNITS
    _filled(tmp_path, units, size).close()
    first, second = _file(tmp_path, 0, size), _file(tmp_path, 1, size)
    drop_pages(first)
    drop_pages(second)
    cq = ConsumeQueue("T", 0, str(tmp_path), size)
    cq.load_sync()
    assert resident(first) == [0]  # the min-offset check's page; nothing else was read yet
    start = 10 * PAGE_UNITS + 5
    chunk = cq.read_units(start, 32)
    assert chunk is not None
    assert len(chunk) == 32 * CQ_UNIT_SIZE
    want = set(range(start * CQ_UNIT_SIZE // PAGE_SIZE, (start * CQ_UNIT_SIZE + READ_AHEAD) // PAGE_SIZE))
    deadline = time.monotonic() + 10
    while not want <= set(resident(first)) and time.monotonic() < deadline:
        time.sleep(0.01)  # asked for, not waited for
    assert want <= set(resident(first))
    # the second file: its units were read by the load; the holes past them were not
    written_pages = -(-3 * PAGE_UNITS * CQ_UNIT_SIZE // PAGE_SIZE)
    assert max(resident(second)) < written_pages
    cq.close()


#: the dev profile's index files (42 MB: 500,000 slots, 2,000,000 entries)
SLOTS, ENTRIES = 500_000, 2_000_000


def _indexed(tmp_path: Path, messages: int) -> tuple[IndexService, str]:
    svc = IndexService(
        str(tmp_path / "index"), max_hash_slot_num=SLOTS, max_index_num=ENTRIES, now_ms=Clock()
    )
    svc.load(True, 0)
    for i in range(messages):
        svc.put(req(i * 100, keys=f"k{i % 10}", uniq=f"U{i}"))
    svc.flush()
    (name,) = svc.file_names
    svc.close()
    return svc, str(tmp_path / "index" / name)


def test_a_query_of_a_cold_index_file_reads_the_pages_it_looks_at(tmp_path: Path) -> None:
    _svc, path = _indexed(tmp_path, 2000)
    drop_pages(path)
    f = IndexFile(path, SLOTS, ENTRIES, create=False)
    try:
        out: list[int] = []
        f.select(out, set(), index_key_hash("T#k3"), 64, 0, 2**62)
        assert out == [i * 100 for i in range(1993, 1993 - 64 * 10, -10)]
        # the header, the slot, and the pages of the 64 entries of the chain (4,000 entries of
        # 20 bytes: up to 20 pages); before, each fault read the readahead window around it
        assert len(resident(path)) <= 1 + 1 + 20
    finally:
        f.close()


def test_loading_reads_in_the_slot_table_of_the_index_file_written_next(tmp_path: Path) -> None:
    _svc, path = _indexed(tmp_path, 100)
    drop_pages(path)
    svc = IndexService(
        str(tmp_path / "index"), max_hash_slot_num=SLOTS, max_index_num=ENTRIES, now_ms=Clock()
    )
    svc.load(True, 0)
    try:
        slot_pages = set(range(40 // PAGE_SIZE, (40 + SLOTS * 4) // PAGE_SIZE))
        assert slot_pages <= set(resident(path))
        assert svc.query("T", "U42", 4, 0, 2**62).phy_offsets == [4200]
    finally:
        svc.close()
