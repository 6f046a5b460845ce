"""Batches put with dispatch hints (``put_messages(..., hints=...)``, the send path's way) build the
same consume queues and index as batches dispatched by decoding the log, also when a consume-queue
file or a commit-log file fills up in the middle of the run."""

from __future__ import annotations

from pathlib import Path

from remoting.protocol.message import tags_hash_code
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus
from tests.integration.storekit import Clock, encode, running_store, small_config

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


async def _fill(
    root: Path, with_hints: bool
) -> tuple[list[list[tuple[int, int, int]]], list[list[int]], int]:
    async with running_store(small_config(root), now_ms=Clock()) as store:
        sent = 0
        for n in (7, 1, 13, 9, 30, 5, 11, 17, 3, 25, 8, 19, 6, 29, 2, 14):
            for queue_id in (0, 1):
                block, hints = _batch(n, sent, queue_id)
                res = await store.put_messages(
                    block, TOPIC, queue_id, sys_flag=0, hints=hints if with_hints else None
                )
                assert res.status is PutMessageStatus.PUT_OK
                sent += n
        assert store.dispatcher.reput_offset == store.max_phy_offset
        assert len(store.commit_log.mfq.files) > 2  # the run crossed commit-log files
        units = [_units(store, q) for q in (0, 1)]
        assert sum(len(u) for u in units) == sent
        # ... and consume-queue files, the first one in the middle of a batch (units 96..120)
        assert len(units[0]) > store.config.mappedFileSizeConsumeQueue // 20
        found = []
        for i in range(0, sent, 7):
            found.append(store.query_message(TOPIC, f"U{i:06d}", 4, 0, 2**62).phy_offsets)
            found.append(store.query_message(TOPIC, f"k{i}", 4, 0, 2**62).phy_offsets)
        found.append(store.query_message(TOPIC, "shared", 64, 0, 2**62).phy_offsets)
        return units, found, store.max_phy_offset


async def test_hinted_batches_dispatch_like_decoded_ones(tmp_path: Path) -> None:
    hinted = await _fill(tmp_path / "hinted", True)
    decoded = await _fill(tmp_path / "decoded", False)
    assert hinted == decoded
    units, found, _ = hinted
    assert all(u[1] > 0 for q in units for u in q)
    assert all(found[:-1:2])  # every unique key found
    assert len(found[-1]) == 64
