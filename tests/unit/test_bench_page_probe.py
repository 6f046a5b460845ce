"""bench.common.page_touch_costs: the first-touch probe the store and broker benchmarks print."""

from __future__ import annotations

import mmap
import time
from pathlib import Path

import pytest

from bench.common import page_touch_costs
from store.mapped_file import MappedFile


def test_reports_microseconds_per_page_and_leaves_no_file(tmp_path: Path) -> None:
    pages = 1024
    t0 = time.perf_counter()
    fresh, reused = page_touch_costs(tmp_path, pages * mmap.PAGESIZE)
    elapsed_us = (time.perf_counter() - t0) * 1e6
    assert fresh > 0
    assert reused > 0
    # microseconds per page: the two populations are no more than the whole call, and not a
    # thousandth of it either (the bound is loose: a busy machine may pause the other steps)
    assert 0.01 * elapsed_us <= (fresh + reused) * pages <= elapsed_us
    assert list(tmp_path.iterdir()) == []


def test_a_missing_directory_fails_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        page_touch_costs(tmp_path / "gone", 16 * mmap.PAGESIZE)
    assert list(tmp_path.iterdir()) == []


def test_without_the_populate_advice_it_touches_the_pages_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touched: list[int] = []

    def refused(self: MappedFile, start: int, end: int, keep_going: object = None) -> int:
        touched.append(end - start)
        return start  # what populate_write_sync returns when madvise fails: nothing mapped

    monkeypatch.setattr(MappedFile, "populate_write_sync", refused)
    pages = 256
    t0 = time.perf_counter()
    fresh, reused = page_touch_costs(tmp_path, pages * mmap.PAGESIZE)
    elapsed_us = (time.perf_counter() - t0) * 1e6
    assert touched == [pages * mmap.PAGESIZE] * 2
    assert 0.01 * elapsed_us <= (fresh + reused) * pages <= elapsed_us
    assert list(tmp_path.iterdir()) == []
