"""Child process for the SIGKILL crash tests:
``python -m tests.integration.store_crash_child ROOT FIRST [SYNC_FLUSH|ASYNC_FLUSH]``.

Opens (and so recovers) the store at ROOT with small files and the given flush mode (SYNC_FLUSH by
default), prints ``ready``, then appends message FIRST, FIRST+1, ... forever, printing ``<i> <queue
id> <queue offset> <offset>`` after each acknowledged (PUT_OK) message. The parent kills it with
SIGKILL at a random moment. With ASYNC_FLUSH the appends take the store's plain path, whose
consume-queue units wait in staging buffers (store.consume_queue): a killed process loses those,
and recovery must rebuild them from the commit log (which the page cache keeps).
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from store.config import FlushDiskType, MessageStoreConfig
from store.message_store import DefaultMessageStore
from tests.integration.storekit import STORE_HOST, put, small_config

TOPIC = "CrashTopic"
QUEUES = 3


def body_of(i: int) -> bytes:
    """The body of message ``i``: deterministic, 40..2000 bytes."""
    return (b"%08d" % i) * (5 + (i * 7919) % 245)


def child_config(root: str | Path, flush: str) -> MessageStoreConfig:
    if flush == "SYNC_FLUSH":
        return small_config(root, flushDiskType=FlushDiskType.SYNC_FLUSH)
    # complete flush rounds (every dirty file, then the checkpoint) every 20 ms, and consume-queue
    # files that rarely roll: the checkpoint's logicsFlushedOffset keeps moving past units that
    # were staged a moment before, and staged units are mostly not in the map when the kill comes
    return small_config(
        root,
        flushDiskType=FlushDiskType.ASYNC_FLUSH,
        flushIntervalCommitLog=20,
        flushCommitLogLeastPages=0,
        flushIntervalConsumeQueue=20,
        flushConsumeQueueLeastPages=0,
        mappedFileSizeConsumeQueue=3000 * 20,
    )


async def main(root: str, first: int, flush: str) -> None:
    cfg = child_config(root, flush)
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        i = first
        while True:
            qid = i % QUEUES
            res = await put(store, TOPIC, qid, body_of(i), keys=f"K{i}", uniq=f"U{i}")
            if not res.is_ok:
                raise SystemExit(f"put {i} failed: {res}")
            out.write(f"{i} {qid} {res.logics_offset} {res.wrote_offset}\n")
            out.flush()
            i += 1


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "SYNC_FLUSH")
