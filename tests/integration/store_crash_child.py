"""Child process for the SIGKILL crash tests: ``python -m tests.integration.store_crash_child ROOT FIRST``.

Opens (and so recovers) the store at ROOT with SYNC_FLUSH and small files, prints ``ready``, then
appends message FIRST, FIRST+1, ... forever, printing ``<i> <queue id> <queue offset> <offset>``
after each acknowledged (PUT_OK) message. The parent kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import sys

import trio

from store.config import FlushDiskType
from store.message_store import DefaultMessageStore
from tests.integration.storekit import STORE_HOST, put, small_config

TOPIC = "CrashTopic"
QUEUES = 3


def body_of(i: int) -> bytes:
    """The body of message ``i``: deterministic, 40..2000 bytes."""
    return (b"%08d" % i) * (5 + (i * 7919) % 245)


async def main(root: str, first: int) -> None:
    cfg = small_config(root, flushDiskType=FlushDiskType.SYNC_FLUSH)
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
    trio.run(main, sys.argv[1], int(sys.argv[2]))
