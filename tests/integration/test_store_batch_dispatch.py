"""Batches put with dispatch hints (``put_messages(..., hints=...)``, the send path's way) build the
same consume queues and index as batches dispatched by decoding the log, also when a consume-queue
file or a commit-log file fills up in the middle of the run; so do batches encoded for the store's
next slot (``placed=...``), right or wrong, and every stored record carries its own offsets."""

from __future__ import annotations

from pathlib import Path

from remoting.protocol.message import decode_message, tags_hash_code
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus
from tests.integration.storekit import Clock, encode, place_batch, running_store, small_config

TOPIC = "BatchTopic"


def _batch(n: int, first: int, queue_id: int) -> tuple[bytearray, list[tuple[int, str | None, str | None]]]:
    block = bytearray()
    hints: list[tuple[int, str | None, str | None]] = []
    for i in range(first, first + n):
        tags = f"tag{i % 3}" if i % 4 else None
        keys = f"k{i} shared" if i % 2 else None
        uniq = f"U{i:06d}"
        block += encode(TOPIC, queue_id, b"b" * (300 + i % 50), tags=tags, keys=keys, uniq=uniq)
        hints.append((tags_hash_code(tags), keys, uniq))
    return block, hints


def _units(store: DefaultMessageStore, queue_id: int) -> list[tuple[int, int, int]]:
    cq = store.queues.get(TOPIC, queue_id)
    assert cq is not None
    out = []
    for qo in range(cq.min_offset, cq.max_offset):
        unit = cq.unit(qo)
        assert unit is not None
        out.append(tuple(unit))
    return out


async def _fill(root: Path, mode: str) -> tuple[list[list[tuple[int, int, int]]], list[list[int]], int]:
    """``mode``: "decoded" (no hints), "hinted", "placed" (hints and records encoded for the
    store's slot) or "stale" (encoded for a slot one record off)."""
    async with running_store(small_config(root), now_ms=Clock()) as store:
        sent = 0
        slots = copied = 0
        for n in (7, 1, 13, 9, 30, 5, 11, 17, 3, 25, 8, 19, 6, 29, 2, 14):
            for queue_id in (0, 1):
                block, hints = _batch(n, sent, queue_id)
                placed = None
                if mode in ("placed", "stale"):
                    slot = store.plain_batch_slot(TOPIC, queue_id)
                    if slot is not None:
                        slots += 1
                        if mode == "stale":
                            slot = (slot[0] - 300, slot[1] - 1, slot[2])
                        placed = place_batch(block, hints, slot)
                res = await store.put_messages(
                    block,
                    TOPIC,
                    queue_id,
                    sys_flag=0,
                    hints=None if mode == "decoded" else hints,
                    placed=placed,
                )
                assert res.status is PutMessageStatus.PUT_OK
                if placed is not None:
                    # copied as encoded: the slot's timestamp, not one the store read later (the
                    # clock ticks on every read); not when the batch needed a new file
                    stored = store.look_message_by_offset(res.wrote_offset)
                    assert stored is not None
                    copied += decode_message(stored).store_timestamp == placed[0][2]
                sent += n
        if mode in ("placed", "stale"):
            assert slots > 20  # most batches had a slot (not the first of a queue, not at a roll)
            # ... and were copied as encoded for it when it was right, never when it was wrong
            assert copied > 15 if mode == "placed" else copied == 0
        assert store.dispatcher.reput_offset == store.max_phy_offset
        assert len(store.commit_log.mfq.files) > 2  # the run crossed commit-log files
        units = [_units(store, q) for q in (0, 1)]
        assert sum(len(u) for u in units) == sent
        for queue_id, queue_units in enumerate(units):
            for qo, (phys, size, _) in enumerate(
                queue_units, start=store.queues.get(TOPIC, queue_id).min_offset
            ):
                view = store.look_message_by_offset(phys)
                assert view is not None
                msg = decode_message(view)
                assert (msg.queue_id, msg.queue_offset, msg.physical_offset, msg.total_size) == (
                    queue_id,
                    qo,
                    phys,
                    size,
                )
        # ... and consume-queue files, the first one in the middle of a batch (units 96..120)
        assert len(units[0]) > store.config.mappedFileSizeConsumeQueue // 20
        found = []
        for i in range(0, sent, 7):
            found.append(store.query_message(TOPIC, f"U{i:06d}", 4, 0, 2**62).phy_offsets)
            found.append(store.query_message(TOPIC, f"k{i}", 4, 0, 2**62).phy_offsets)
        found.append(store.query_message(TOPIC, "shared", 64, 0, 2**62).phy_offsets)
        return units, found, store.max_phy_offset


async def test_hinted_batches_dispatch_like_decoded_ones(tmp_path: Path) -> None:
    hinted = await _fill(tmp_path / "hinted", "hinted")
    decoded = await _fill(tmp_path / "decoded", "decoded")
    assert hinted == decoded
    # records encoded for the store's slot are appended as they are; for a wrong slot the store
    # patches them like any batch -- the same queues and index either way
    assert await _fill(tmp_path / "placed", "placed") == decoded
    assert await _fill(tmp_path / "stale", "stale") == decoded
    units, found, _ = hinted
    assert all(u[1] > 0 for q in units for u in q)
    assert all(found[:-1:2])  # every unique key found
    assert len(found[-1]) == 64
