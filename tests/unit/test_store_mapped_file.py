"""Mapped files and their queue on real (small) files."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from store.index_file import IndexFile
from store.mapped_file import (
    MAP_BUDGET,
    MAP_RESERVE,
    MappedFile,
    MappedFileQueue,
    StoreLayoutError,
    clear_nonzero_tail_sync,
    count_maps,
    file_name_of,
    offset_of_name,
    zero_file_range_sync,
)

SIZE = 8192


def _queue(tmp_path: Path, files: int) -> MappedFileQueue:
    q = MappedFileQueue(str(tmp_path), SIZE, prefault=True)
    for i in range(files):
        mf = q.create_file_sync(q.next_offset())
        mf.view[:4] = bytes([i + 1]) * 4
        mf.wrote_position = SIZE
        q.install(mf)
    return q


def test_file_names_are_20_digit_start_offsets() -> None:
    assert file_name_of(1073741824) == "00000000001073741824"
    assert offset_of_name("00000000000006000000") == 6_000_000
    assert offset_of_name("0000000000000600000") is None
    assert offset_of_name("abc") is None


def test_find_maps_offsets_to_files(tmp_path: Path) -> None:
    q = _queue(tmp_path, 3)
    assert sorted(os.listdir(tmp_path)) == [file_name_of(i * SIZE) for i in range(3)]
    assert q.find(0) is q.files[0]
    assert q.find(SIZE - 1) is q.files[0]
    assert q.find(SIZE) is q.files[1]
    assert q.find(3 * SIZE) is None
    assert q.find(-1) is None
    assert (q.min_offset, q.max_offset) == (0, 3 * SIZE)
    q.close_all()


def test_load_resizes_short_files_and_drops_files_after_a_gap(tmp_path: Path) -> None:
    q = _queue(tmp_path, 4)
    q.close_all()
    os.truncate(tmp_path / file_name_of(SIZE), 100)
    os.remove(tmp_path / file_name_of(2 * SIZE))
    (tmp_path / "notes.txt").write_text("ignored")
    q2 = MappedFileQueue(str(tmp_path), SIZE)
    problems = q2.load_sync()
    assert [mf.file_from_offset for mf in q2.files] == [0, SIZE]
    assert not (tmp_path / file_name_of(3 * SIZE)).exists()
    assert any("had size 100" in p for p in problems)
    assert any("does not follow" in p for p in problems)
    assert os.path.getsize(tmp_path / file_name_of(SIZE)) == SIZE
    assert q2.files[1].mm[:4] == bytes([2]) * 4
    q2.close_all()


def _fingerprint(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("configured", [SIZE // 2, SIZE * 2], ids=["smaller", "bigger"])
def test_files_made_with_another_size_are_refused_and_left_alone(tmp_path: Path, configured: int) -> None:
    """The config's file size changed under an existing store: resizing would cut messages off
    (smaller) or orphan every file after the first (bigger); upstream refuses to load too."""
    _queue(tmp_path, 3).close_all()
    before = _fingerprint(tmp_path)
    q = MappedFileQueue(str(tmp_path), configured, size_key="mappedFileSizeCommitLog")
    with pytest.raises(StoreLayoutError) as err:
        q.load_sync()
    assert f"holds files of {SIZE} bytes, but mappedFileSizeCommitLog is {configured}" in str(err.value)
    assert f"Set mappedFileSizeCommitLog = {SIZE} to open it" in str(err.value)
    assert q.files == []
    assert _fingerprint(tmp_path) == before
    # with the size it was made with, everything is there
    q = MappedFileQueue(str(tmp_path), SIZE)
    assert q.load_sync() == []
    assert [bytes(mf.mm[:4]) for mf in q.files] == [bytes([i]) * 4 for i in (1, 2, 3)]
    q.close_all()


def test_a_single_shorter_file_is_extended_not_refused(tmp_path: Path) -> None:
    """One file of a smaller size (a store that never rolled, opened with a bigger size) keeps
    its bytes and grows: nothing is lost, so nothing is refused."""
    _queue(tmp_path, 1).close_all()
    q = MappedFileQueue(str(tmp_path), SIZE * 2)
    problems = q.load_sync()
    assert any(f"had size {SIZE}" in p for p in problems)
    assert bytes(q.files[0].mm[:4]) == bytes([1]) * 4
    assert os.path.getsize(tmp_path / file_name_of(0)) == SIZE * 2
    q.close_all()


def test_close_waits_for_live_views(tmp_path: Path) -> None:
    q = _queue(tmp_path, 2)
    view = q.files[0].view[0:4]
    gone = q.detach_first(1)
    q.retire(gone)
    assert q.closing == gone
    assert bytes(view) == bytes([1]) * 4
    view.release()
    q.retry_closing()
    assert q.closing == []
    assert gone[0].closed
    q.close_all()


def test_detach_after_keeps_the_position_of_an_emptied_queue(tmp_path: Path) -> None:
    q = _queue(tmp_path, 3)
    gone = q.detach_after(SIZE)
    assert [mf.file_from_offset for mf in gone] == [SIZE, 2 * SIZE]
    q.retire(gone)
    gone = q.detach_after(0)
    q.retire(gone)
    assert q.files == []
    assert q.next_offset() == 0
    q.close_all()


def test_zeroing_helpers_clear_exactly_the_range(tmp_path: Path) -> None:
    path = str(tmp_path / file_name_of(0))
    mf = MappedFile.open_sync(path, 0, SIZE, create=True)
    mf.view[:] = b"\xab" * SIZE
    zero_file_range_sync(path, 100, 5000)
    data = mf.mm[:]
    assert data[:100] == b"\xab" * 100
    assert data[100:5000] == bytes(4900)
    assert data[5000:] == b"\xab" * (SIZE - 5000)
    assert clear_nonzero_tail_sync(mf, 6000) == SIZE - 6000
    assert mf.mm[6000:] == bytes(SIZE - 6000)
    assert clear_nonzero_tail_sync(mf, 6000) == 0
    mf.close()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_mapped_files_hold_no_descriptor(tmp_path: Path) -> None:
    """A map keeps no descriptor of its file (CPython's ``mmap`` keeps a duplicate unless told not
    to): a process with tens of thousands of consume-queue files ran out of descriptors. The maps
    still read and write the file, flush and close."""
    before = _open_descriptors()
    q = _queue(tmp_path / "log", 40)
    index = IndexFile(str(tmp_path / "index"), 16, 16, create=True)
    assert _open_descriptors() == before + 1  # the index file's own descriptor, for fallocate
    for i, mf in enumerate(q.files):
        assert bytes(mf.view[:4]) == bytes([i + 1]) * 4
    mf = q.files[7]
    mf.view[8:13] = b"hello"
    mf.mm.flush()
    mf.flush_range_sync(0, SIZE)
    with open(mf.path, "rb") as f:
        assert f.read(13)[8:] == b"hello"
    view = mf.view[0:4]
    assert not mf.close()  # live views still keep it mapped
    view.release()
    assert mf.close()
    q.close_all()
    index.close()
    assert _open_descriptors() == before


def test_a_store_file_is_refused_short_of_max_map_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``vm.max_map_count`` maps no allocation of the process succeeds (a dev cluster with
    ~37,000 store files died of MemoryError); a store file is refused MAP_RESERVE maps short of
    it, with the limit and the ways out, and a raised limit counts at once. (The sysctl is the
    machine's, so the budget reads a file of the test's.)"""
    limit_file = tmp_path / "max_map_count"
    monkeypatch.setattr(MAP_BUDGET, "limit_path", str(limit_file))
    limit = count_maps() + MAP_RESERVE + 3
    limit_file.write_text(f"{limit}\n")
    q = MappedFileQueue(str(tmp_path / "log"), SIZE, prefault=True)

    def fill() -> None:
        for _ in range(1000):
            q.install(q.create_file_sync(q.next_offset()))

    with pytest.raises(OSError, match="max_map_count") as refused:
        fill()
    assert refused.value.errno == errno.ENOMEM
    made = len(q.files)
    assert 0 < made <= 3
    refused_path = str(tmp_path / "log" / file_name_of(made * SIZE))
    text = str(refused.value)
    assert f"cannot map {refused_path}" in text
    assert f"vm.max_map_count is {limit}" in text
    assert "sysctl -w vm.max_map_count=" in text
    assert not os.path.exists(refused_path)  # no empty file left for recovery to find
    limit_file.write_text(f"{limit + 100}\n")  # raised: the next file maps, no restart
    q.install(q.create_file_sync(q.next_offset()))
    assert len(q.files) == made + 1
    q.close_all()


def test_without_the_sysctl_nothing_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MAP_BUDGET, "limit_path", str(tmp_path / "absent"))
    q = _queue(tmp_path / "log", 3)
    assert len(q.files) == 3
    q.close_all()
