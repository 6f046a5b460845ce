"""Populating and range-flushing mapped files (store/mapped_file.py): populate calls go in chunks and
still cover their whole range (or stop where asked), pages the writer passed are skipped, and a
range flush drops the written pages from the page tables but keeps (and persists) their data while
the pages ahead of the writer stay mapped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import mapped_file
from store.mapped_file import PAGE_SIZE, MappedFile
from tests.integration.storekit import cached_pages, mapped_pages

MIB = 1024 * 1024
CHUNK = MIB  # populate chunk size in these tests (the real one is larger)


def _new(tmp_path: Path, size: int) -> MappedFile:
    return MappedFile.open_sync(str(tmp_path / "f"), 0, size, create=True, prefault=True)


def test_prefault_reserves_blocks_but_maps_nothing(tmp_path: Path) -> None:
    mf = _new(tmp_path, 4 * MIB)
    try:
        assert os.stat(mf.path).st_blocks * 512 >= 4 * MIB  # posix_fallocate
        assert not any(mapped_pages(mf, 0, 4 * MIB))
    finally:
        assert mf.close()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(mapped_file, "POPULATE_CHUNK", CHUNK)
    return CHUNK


@pytest.mark.parametrize("stoppable", [False, True])
def test_populate_write_covers_its_whole_range(tmp_path: Path, small_chunks: int, stoppable: bool) -> None:
    size = 3 * CHUNK + 5 * PAGE_SIZE  # several chunks and a partial one
    mf = _new(tmp_path, size)
    try:
        start = PAGE_SIZE + 100  # rounded down to its page
        keep_going = (lambda: True) if stoppable else None
        assert mf.populate_write_sync(start, size, keep_going) == size
        assert mf.write_ahead_end == size
        assert all(mapped_pages(mf, PAGE_SIZE, size))
        assert not mapped_pages(mf, 0, PAGE_SIZE)[0]
    finally:
        assert mf.close()


def test_populate_skips_what_the_writer_passed_and_stops_when_asked(
    tmp_path: Path, small_chunks: int
) -> None:
    size = 4 * CHUNK
    mf = _new(tmp_path, size)
    try:
        mf.wrote_position = CHUNK + 100  # the writer is in the second chunk
        assert mf.populate_write_sync(0, 2 * CHUNK) == 2 * CHUNK
        present = mapped_pages(mf, 0, 2 * CHUNK)
        assert not any(present[: CHUNK // PAGE_SIZE])  # passed: left alone
        assert all(present[CHUNK // PAGE_SIZE :])  # from the writer's page on
        calls = []

        def once() -> bool:
            calls.append(1)
            return len(calls) == 1

        assert mf.populate_read_sync(2 * CHUNK, size, once) == 3 * CHUNK  # one chunk, then stopped
        assert all(cached_pages(mf.path, 2 * CHUNK, 3 * CHUNK))  # in the page cache...
        assert not any(mapped_pages(mf, 2 * CHUNK, size))  # ...by the page helper, not mapped here
        assert mf.write_ahead_end == 2 * CHUNK  # read-populating is not write-ahead
    finally:
        assert mf.close()


def test_range_flush_unmaps_written_pages_keeps_their_data_and_the_window(tmp_path: Path) -> None:
    size = 8 * MIB
    mf = _new(tmp_path, size)
    try:
        end = 2 * MIB + 100
        data = os.urandom(end)
        mf.populate_write_sync(0, 4 * MIB)  # the writer's window, then the writer fills part of it
        mf.mm[:end] = data
        mf.wrote_position = end
        mf.flush_range_sync(0, end)
        present = mapped_pages(mf, 0, 4 * MIB)
        whole = end // PAGE_SIZE
        assert not any(present[:whole])  # written and synced: no longer mapped
        assert all(present[whole:])  # the page holding ``end`` and the window ahead stay mapped
        # the synced pages are clean (written back): the kernel can drop them from the page
        # cache; the window's pages are dirty and stay
        fd = os.open(mf.path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        cached = cached_pages(mf.path, 0, 4 * MIB)
        assert sum(cached[: 2 * MIB // PAGE_SIZE]) < MIB // PAGE_SIZE // 10, (
            "synced pages stayed in the cache"
        )
        assert all(cached[whole + 1 :])
        # nothing lost: through the file (from disk) and through the map (which maps them again)
        with open(mf.path, "rb") as f:
            assert f.read(end) == data
        assert mf.mm[:end] == data
    finally:
        assert mf.close()
