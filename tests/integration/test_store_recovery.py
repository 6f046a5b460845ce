"""Recovery on real files: clean and crashed restarts, and damaged files of every kind.

"Crash" here is :meth:`DefaultMessageStore.abandon` (maps closed, nothing flushed, abort marker
left); the bytes written stay in the page cache, as after a killed process. The SIGKILL tests are
in ``test_store_crash.py``.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from remoting.protocol.message import decode_message
from store.config import MessageStoreConfig
from store.mapped_file import StoreLayoutError
from store.message_store import DefaultMessageStore
from store.recovery import RecoveryReport
from tests.integration.storekit import STORE_HOST, put, read_queue, small_config


async def _open(cfg: MessageStoreConfig) -> tuple[DefaultMessageStore, RecoveryReport]:
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    report = await store.start()
    return store, report


async def _write(store: DefaultMessageStore, n: int, start: int = 0) -> list[int]:
    offsets = []
    for i in range(start, start + n):
        res = await put(store, "TopicA", i % 2, f"message-{i}".encode() * 20, keys=f"K{i}", uniq=f"U{i}")
        assert res.is_ok
        offsets.append(res.wrote_offset)
    return offsets


async def _checkpoint(store: DefaultMessageStore) -> None:
    await store.flush()
    await store.logics_flusher.flush()


def _bodies(store: DefaultMessageStore) -> list[bytes]:
    msgs = [decode_message(b) for q in (0, 1) for b in read_queue(store, "TopicA", q)]
    return [m.body for m in sorted(msgs, key=lambda m: m.physical_offset)]


def _expected(n: int) -> list[bytes]:
    return [f"message-{i}".encode() * 20 for i in range(n)]


def _zero(cfg: MessageStoreConfig, offset: int, n: int) -> None:
    """Overwrite ``n`` log bytes at ``offset`` with zeros, behind the store's back."""
    size = cfg.mappedFileSizeCommitLog
    path = os.path.join(cfg.commitlog_dir, f"{offset // size * size:020d}")
    with open(path, "r+b") as f:
        f.seek(offset % size)
        f.write(bytes(n))


def _flip(cfg: MessageStoreConfig, offset: int) -> None:
    size = cfg.mappedFileSizeCommitLog
    path = os.path.join(cfg.commitlog_dir, f"{offset // size * size:020d}")
    with open(path, "r+b") as f:
        f.seek(offset % size)
        b = f.read(1)
        f.seek(offset % size)
        f.write(bytes([b[0] ^ 0xFF]))


async def test_clean_restart_scans_nothing_and_keeps_everything(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 200)
    await store.shutdown()
    store, report = await _open(cfg)
    assert not report.abnormal
    assert report.scanned_messages == 0
    assert not report.problems
    assert _bodies(store) == _expected(200)
    await store.shutdown()


async def test_crash_recovery_rescans_only_the_unflushed_tail(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 150)
    await _checkpoint(store)
    flushed = store.max_phy_offset
    await _write(store, 40, start=150)
    store.abandon()
    store, report = await _open(cfg)
    assert report.abnormal
    assert report.scan_start == flushed
    assert report.scanned_messages == 40
    assert _bodies(store) == _expected(190)
    assert store.query_message("TopicA", "K170", 4, 0, 2**62).phy_offsets
    # the next message gets the next queue offset
    res = await put(store, "TopicA", 0, b"next")
    assert res.logics_offset == 95
    await store.shutdown()


async def test_units_staged_at_a_crash_come_back_from_the_scan_after_the_checkpoint(tmp_path: Path) -> None:
    """The plain append path stages consume-queue units in memory (store.consume_queue); a crash
    loses them. The logics flush copies staged units into the maps before its checkpoint, so
    every lost unit belongs to a message after the checkpoint and the usual scan restores it --
    no queue has a gap to rebuild."""
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 150)
    staged = [store.queues.get("TopicA", q).staged for q in (0, 1)]  # type: ignore[union-attr]
    assert all(staged)  # units of messages before the checkpoint wait in memory ...
    await _checkpoint(store)
    flushed = store.max_phy_offset
    await _write(store, 10, start=150)  # ... and more after it, fewer than a buffer holds
    assert all(store.queues.get("TopicA", q).staged for q in (0, 1))  # type: ignore[union-attr]
    store.abandon()
    store, report = await _open(cfg)
    assert report.abnormal
    assert report.scan_start == flushed
    assert report.scanned_messages == 10
    assert not report.rebuilt_queues, report.problems
    assert _bodies(store) == _expected(160)
    await store.shutdown()


async def test_flipped_byte_in_the_tail_drops_that_record_and_everything_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 100)
    await _checkpoint(store)
    offsets = await _write(store, 50, start=100)
    store.abandon()
    _flip(cfg, offsets[20] + 120)  # inside the body of message 120
    with caplog.at_level(logging.WARNING, logger="store"):
        store, report = await _open(cfg)
    assert report.max_offset == offsets[20]
    assert "CRC" in report.end_reason
    assert report.dropped_bytes > 0
    assert report.problems
    assert any("cleared" in r.message for r in caplog.records)
    assert _bodies(store) == _expected(120)
    assert store.query_message("TopicA", "K125", 4, 0, 2**62).phy_offsets == []
    assert store.get_max_offset_in_queue("TopicA", 0) == 60
    await store.shutdown()
    # the repair is durable: a second (clean) start finds nothing to do
    store, report = await _open(cfg)
    assert not report.problems
    assert _bodies(store) == _expected(120)
    await store.shutdown()


async def test_torn_last_record_is_dropped(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    offsets = await _write(store, 30)
    end = store.max_phy_offset
    store.abandon()
    # a cut copy: the size field (written last) and the tail are missing
    _zero(cfg, offsets[-1], 4)
    _zero(cfg, end - 10, 10)
    store, report = await _open(cfg)
    assert report.max_offset == offsets[-1]
    assert _bodies(store) == _expected(29)
    await store.shutdown()


async def test_truncated_middle_file_ends_the_log_there(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    offsets = await _write(store, 700)
    await store.shutdown()
    files = sorted(os.listdir(cfg.commitlog_dir))
    assert len(files) >= 4
    victim = os.path.join(cfg.commitlog_dir, files[1])
    os.truncate(victim, 1000)
    os.remove(cfg.checkpoint_path)  # nothing trusted: scan everything
    os.close(os.open(cfg.abort_path, os.O_CREAT | os.O_WRONLY))
    store, report = await _open(cfg)
    assert cfg.mappedFileSizeCommitLog < report.max_offset < cfg.mappedFileSizeCommitLog + 1400
    kept = [o for o in offsets if o < report.max_offset]
    assert _bodies(store) == _expected(len(kept))
    assert len(report.dropped_files) >= 2
    assert any("had size 1000" in p for p in report.problems)
    await store.shutdown()


async def test_deleted_consume_queue_is_rebuilt_from_the_commit_log(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 300)
    before = read_queue(store, "TopicA", 1)
    await store.shutdown()
    shutil.rmtree(tmp_path / "consumequeue" / "TopicA" / "1")
    store, report = await _open(cfg)
    assert report.rebuilt_queues == ["TopicA/1"]
    assert read_queue(store, "TopicA", 1) == before
    assert store.get_max_offset_in_queue("TopicA", 1) == 150
    await store.shutdown()


async def test_deleted_middle_consume_queue_file_is_rebuilt(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 500)  # 250 per queue: three 100-unit files
    before = read_queue(store, "TopicA", 0)
    await store.shutdown()
    os.remove(tmp_path / "consumequeue" / "TopicA" / "0" / f"{100 * 20:020d}")
    store, report = await _open(cfg)
    assert "TopicA/0" in report.rebuilt_queues
    assert read_queue(store, "TopicA", 0) == before
    await store.shutdown()


async def test_consume_queue_units_past_the_log_are_dropped(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    offsets = await _write(store, 80)
    await store.shutdown()
    # cut the commit log behind the store's back: the queues point past its end
    size = cfg.mappedFileSizeCommitLog
    last = offsets[60]
    _zero(cfg, last, size - last % size)
    for name in os.listdir(cfg.commitlog_dir):
        if int(name) > last:
            os.remove(os.path.join(cfg.commitlog_dir, name))
    os.remove(cfg.checkpoint_path)
    store, report = await _open(cfg)
    assert report.max_offset == last
    assert store.get_max_offset_in_queue("TopicA", 0) == 30
    assert store.get_max_offset_in_queue("TopicA", 1) == 30
    assert _bodies(store) == _expected(60)
    res = await put(store, "TopicA", 0, b"x")
    assert res.logics_offset == 30
    await store.shutdown()


async def test_missing_checkpoint_and_strange_files_do_not_stop_the_start(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 120)
    store.abandon()
    os.remove(cfg.checkpoint_path)
    (tmp_path / "commitlog" / "README").write_text("not a log file")
    (tmp_path / "consumequeue" / "TopicA" / "0" / "junk").write_text("junk")
    store, report = await _open(cfg)
    assert report.abnormal
    assert report.scan_start == 0
    assert _bodies(store) == _expected(120)
    await store.shutdown()


async def test_recovery_after_truncation_crash_does_not_resurrect_the_tail(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    offsets = await _write(store, 100)
    await _checkpoint(store)
    await store.truncate_to(offsets[70])
    store.abandon()
    store, _report = await _open(cfg)
    assert store.max_phy_offset == offsets[70]
    assert _bodies(store) == _expected(70)
    await store.shutdown()


def _log_file_sizes(root: Path) -> dict[Path, int]:
    return {
        p: p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and ("commitlog" in p.parts or "consumequeue" in p.parts)
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mappedFileSizeCommitLog", 32 * 1024),
        ("mappedFileSizeCommitLog", 128 * 1024),
        ("mappedFileSizeConsumeQueue", 50 * 20),
    ],
)
async def test_a_changed_file_size_refuses_to_open_and_changes_nothing(
    tmp_path: Path, key: str, value: int
) -> None:
    """The config's file sizes changed under an existing store (a user editing the dev config):
    the store refuses to start and says which key to set back; nothing on disk changes, and with
    the old value everything is there."""
    cfg = small_config(tmp_path)
    store, _ = await _open(cfg)
    await _write(store, 400)  # several commit-log files, consume-queue files of both queues
    await store.shutdown()
    files = _log_file_sizes(tmp_path)
    assert len(files) > 4
    changed = small_config(tmp_path, **{key: value})
    with pytest.raises(StoreLayoutError) as err:
        await DefaultMessageStore(changed, store_host=STORE_HOST).start()
    assert f"but {key} is {value}" in str(err.value)
    assert _log_file_sizes(tmp_path) == files
    store, _ = await _open(cfg)
    assert _bodies(store) == _expected(400)
    await store.shutdown()
