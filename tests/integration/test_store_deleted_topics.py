"""A deleted topic stays deleted across a crash (``store.deletion_marks``).

Recovery dispatches again every record from the checkpoint's scan start on; without the marks it
rebuilt a deleted topic's consume queues from its records still in the commit log, and the topic,
created again, served the old messages and continued their queue offsets (found by the broker
model test). "Crash" is :meth:`DefaultMessageStore.abandon`, as in ``test_store_recovery.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from remoting.protocol.message import decode_message
from store.config import MessageStoreConfig
from store.consume_queue_store import MANIFEST_NAME
from store.deletion_marks import FILE_NAME
from store.message_store import DefaultMessageStore
from tests.integration.storekit import STORE_HOST, put, read_queue, small_config


async def _open(cfg: MessageStoreConfig) -> DefaultMessageStore:
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    return store


async def _fill(store: DefaultMessageStore) -> None:
    for i in range(5):
        assert (await put(store, "Gone", 0, f"old-{i}".encode(), keys=f"old{i}")).is_ok
        assert (await put(store, "Kept", 0, f"kept-{i}".encode())).is_ok


def _bodies(store: DefaultMessageStore, topic: str) -> list[bytes]:
    return [decode_message(b).body for b in read_queue(store, topic, 0)]


async def test_a_topic_deleted_just_before_a_crash_is_not_rebuilt_by_recovery(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = await _open(cfg)  # its start wrote a checkpoint: a recovery scans from here
    await _fill(store)
    await store.delete_topics(["Gone"])
    assert await trio.Path(cfg.storePathRootDir, FILE_NAME).exists()
    store.abandon()

    store = await _open(cfg)
    try:
        assert store.recovery_report is not None
        assert store.recovery_report.abnormal
        assert store.get_max_offset_in_queue("Gone", 0) == 0
        assert store.queues.get("Gone", 0) is None
        assert store.recovery_report.rebuilt_queues == []
        assert not any("of deleted topics" in p for p in store.recovery_report.problems)
        assert _bodies(store, "Kept") == [f"kept-{i}".encode() for i in range(5)]
        # the topic created again starts over at queue offset 0, with its own messages only
        res = await put(store, "Gone", 0, b"new-0")
        assert res.is_ok
        assert res.logics_offset == 0
        assert _bodies(store, "Gone") == [b"new-0"]
        # the old records stay in the log, and found by key, as any deleted topic's
        found = store.query_message("Gone", "old3", 10, 0, 1 << 62)
        assert [decode_message(bytes(v)).body for v in found.message_views] == [b"old-3"]
    finally:
        await store.shutdown()


async def test_a_topic_deleted_and_created_again_before_a_crash_keeps_only_its_new_messages(
    tmp_path: Path,
) -> None:
    cfg = small_config(tmp_path)
    store = await _open(cfg)
    await _fill(store)
    await store.delete_topics(["Gone"])
    for i in range(2):
        res = await put(store, "Gone", 0, f"new-{i}".encode())
        assert res.logics_offset == i
    store.abandon()

    store = await _open(cfg)
    try:
        assert _bodies(store, "Gone") == [b"new-0", b"new-1"]
        assert (await put(store, "Gone", 0, b"new-2")).logics_offset == 2
    finally:
        await store.shutdown()


async def test_marks_go_once_a_checkpoint_is_past_them(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = await _open(cfg)
    try:
        await _fill(store)
        await store.delete_topics(["Gone"])
        assert set(store.deletion_marks.marks) == {"Gone"}
        await store.flush()
        await store.logics_flusher.flush()  # the checkpoint now starts a recovery above the mark
        assert store.deletion_marks.marks == {}
        assert not await trio.Path(cfg.storePathRootDir, FILE_NAME).exists()
    finally:
        await store.shutdown()


async def test_a_deletion_cut_short_by_a_crash_is_finished_at_start(tmp_path: Path) -> None:
    """The mark is written before the queue files go: a crash in between leaves both."""
    cfg = small_config(tmp_path)
    store = await _open(cfg)
    await _fill(store)
    await store.flush()
    await store.logics_flusher.flush()  # the queue files are durable, the scan starts past them
    store.deletion_marks.note(["Gone"], store.commit_log.max_offset)
    await store.deletion_marks.save()
    store.abandon()

    store = await _open(cfg)
    try:
        assert store.get_max_offset_in_queue("Gone", 0) == 0
        assert not await trio.Path(cfg.consumequeue_dir, "Gone", "0").exists()
        report = store.recovery_report
        assert report is not None
        assert any("of deleted topics removed" in p for p in report.problems), report.problems
        assert _bodies(store, "Kept") == [f"kept-{i}".encode() for i in range(5)]
    finally:
        await store.shutdown()


async def test_a_truncation_below_a_mark_lowers_it(tmp_path: Path) -> None:
    """Records past a truncation are gone; what is replicated there next is not the deleted
    topic's, so the mark may not cover it."""
    cfg = small_config(tmp_path)
    store = await _open(cfg)
    try:
        await _fill(store)
        first_kept = read_queue(store, "Kept", 0)[0]
        await store.delete_topics(["Gone"])
        cut = decode_message(first_kept).physical_offset + len(first_kept)
        await store.truncate_to(cut)
        assert store.deletion_marks.marks == {"Gone": cut}
    finally:
        await store.shutdown()


async def test_a_deletion_during_a_flush_round_leaves_no_manifest_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush round takes the new queues' manifest lines and appends them in a worker thread; a
    deletion must not rewrite the manifest in between (the line came back, and the next start
    rebuilt the deleted queue). The round's append is held until the deletion has had time to
    run, which it may only do after the round."""
    cfg = small_config(tmp_path)
    store = await _open(cfg)
    await _fill(store)  # both queues are new: their lines await the next round
    release = threading.Event()
    record = store.queues.record_sync

    def held_record(queues: list[tuple[str, int]]) -> None:
        release.wait(10)
        record(queues)

    monkeypatch.setattr(store.queues, "record_sync", held_record)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.logics_flusher.flush)
        await trio.sleep(0.05)  # the round has taken the lines and waits in its thread
        nursery.start_soon(store.delete_topics, ["Gone"])
        await trio.sleep(0.3)
        release.set()
    manifest = await trio.Path(cfg.storePathRootDir, MANIFEST_NAME).read_text()
    assert "Gone" not in manifest
    assert "Kept\t0" in manifest
    await store.shutdown()

    store = await _open(cfg)
    try:
        assert store.recovery_report is not None
        assert store.recovery_report.rebuilt_queues == []
        assert store.queues.get("Gone", 0) is None
    finally:
        await store.shutdown()
