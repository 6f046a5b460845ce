"""Checkpoint, abort marker and lock file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from store.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    CheckpointData,
    StoreCheckpoint,
    StoreLock,
    StoreLockedError,
    create_abort_file_sync,
    decode_checkpoint,
    encode_checkpoint,
    remove_abort_file_sync,
)


def test_checkpoint_layout_matches_the_reference() -> None:
    data = CheckpointData(
        physicMsgTimestamp=1,
        logicsMsgTimestamp=2,
        indexMsgTimestamp=3,
        masterFlushedOffset=4,
        confirmPhyOffset=5,
        physicFlushedOffset=6,
        logicsFlushedOffset=7,
    )
    raw = encode_checkpoint(data)
    assert len(raw) == CHECKPOINT_FILE_SIZE
    # upstream fields at 0, 8, 16, 24, 32 (big-endian longs); this store's extension after them
    assert struct.unpack_from(">qqqqq", raw, 0) == (1, 2, 3, 4, 5)
    assert struct.unpack_from(">qqi", raw, 40) == (6, 7, 0x524D5143)
    assert decode_checkpoint(raw) == data


def test_upstream_checkpoint_without_extension_decodes_with_unknown_offsets() -> None:
    raw = struct.pack(">qqqqq", 10_000, 20_000, 30, 40, 50) + bytes(4096 - 40)
    data = decode_checkpoint(raw)
    assert (data.physicMsgTimestamp, data.confirmPhyOffset) == (10_000, 50)
    assert (data.physicFlushedOffset, data.logicsFlushedOffset) == (-1, -1)
    assert data.min_timestamp == 7_000  # older of physic/logics minus 3 s
    assert decode_checkpoint(b"") == CheckpointData()


def test_checkpoint_file_round_trip(tmp_path: Path) -> None:
    ck = StoreCheckpoint(str(tmp_path / "checkpoint"))
    assert ck.load_sync() == CheckpointData()
    ck.data.confirmPhyOffset = 1234
    ck.flush_sync()
    assert os.path.getsize(tmp_path / "checkpoint") == 4096
    again = StoreCheckpoint(str(tmp_path / "checkpoint"))
    assert again.load_sync().confirmPhyOffset == 1234


def test_abort_file_holds_the_pid(tmp_path: Path) -> None:
    path = str(tmp_path / "abort")
    create_abort_file_sync(path)
    assert Path(path).read_text() == str(os.getpid())
    remove_abort_file_sync(path)
    assert not os.path.exists(path)


def test_lock_file_is_exclusive(tmp_path: Path) -> None:
    a = StoreLock(str(tmp_path / "lock"))
    b = StoreLock(str(tmp_path / "lock"))
    a.acquire_sync()
    with pytest.raises(StoreLockedError):
        b.acquire_sync()
    a.release()
    b.acquire_sync()
    b.release()


def test_an_unchanged_checkpoint_is_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint"
    ck = StoreCheckpoint(str(path))
    synced: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    ck.data.confirmPhyOffset = 7
    ck.flush_sync()
    ck.flush_sync()  # the same bytes: nothing to do
    assert len(synced) == 1
    ck.data.confirmPhyOffset = 8
    ck.flush_sync()
    assert len(synced) == 2
    path.unlink()  # gone (removed by hand): written again although unchanged
    ck.flush_sync()
    assert len(synced) == 3
    assert StoreCheckpoint(str(path)).load_sync().confirmPhyOffset == 8
