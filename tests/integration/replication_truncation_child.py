"""Child process of ``test_replication_truncation_crash``: a slave store that follows a master and dies
(``os._exit``, no cleanup, as SIGKILL) at a chosen step of its handshake truncation.

    python -m tests.integration.replication_truncation_child CONFIG_JSON MASTER_HA EPOCH TARGET POINT WHEN

* ``CONFIG_JSON``: the store's ``MessageStoreConfig`` as JSON;
* ``MASTER_HA`` / ``EPOCH``: whom to follow, in which epoch;
* ``TARGET``: the master's max offset; without a kill the child exits 0 once its log ends there in
  ``EPOCH``;
* ``POINT``: ``checkpoint`` / ``zero`` / ``delete`` / ``logics`` / ``epoch`` (the blocking steps of a
  store truncation: checkpoint rewrite, zeroing the cut file, deleting later files, consume-queue
  fsync, epoch-file persist), ``done`` (right after the truncation returned) or ``append`` (at the
  first replicated append after it);
* ``WHEN``: ``before`` or ``after`` that step (ignored for ``done`` and ``append``).

Exit code 137 means the kill point was reached.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import trio

import store.checkpoint
import store.epoch
import store.truncation
from store.config import MessageStoreConfig
from store.ha.service import HAService
from store.ha.store_log import DrainingStream, StoreReplicaLog
from store.message_store import DefaultMessageStore

KILLED = 137
_truncating = False
_truncated = False


def _die() -> None:
    sys.stdout.flush()
    os._exit(KILLED)


def _install(point: str, when: str) -> None:
    def hook(owner: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hit = _truncating and label == point
            if hit and when == "before":
                _die()
            result = original(*args, **kwargs)
            if hit and when == "after":
                _die()
            return result

        setattr(owner, name, wrapper)

    hook(store.checkpoint.StoreCheckpoint, "flush_sync", "checkpoint")
    hook(store.truncation, "zero_file_range_sync", "zero")
    hook(store.truncation, "delete_paths_sync", "delete")
    hook(store.truncation, "fsync_paths_sync", "logics")
    hook(store.epoch.EpochFile, "persist", "epoch")

    truncate_to = DefaultMessageStore.truncate_to
    append_raw = DefaultMessageStore.append_raw

    async def truncating(self: DefaultMessageStore, offset: int) -> None:
        global _truncating, _truncated
        _truncating = True
        try:
            await truncate_to(self, offset)
        finally:
            _truncating = False
        _truncated = True
        if point == "done":
            _die()

    async def appending(self: DefaultMessageStore, offset: int, data: Any) -> None:
        if point == "append" and _truncated:
            _die()
        await append_raw(self, offset, data)

    DefaultMessageStore.truncate_to = truncating  # type: ignore[method-assign]
    DefaultMessageStore.append_raw = appending  # type: ignore[method-assign]


async def _follow(config: MessageStoreConfig, master_ha: str, epoch: int, target: int) -> None:
    s = DefaultMessageStore(config, store_host=("127.0.0.1", 1), controller_mode=True)
    await s.start()
    rlog = StoreReplicaLog(s)

    async def connect(address: str) -> trio.abc.Stream:
        host, _, port = address.rpartition(":")
        return DrainingStream(await trio.open_tcp_stream(host, int(port)), rlog)

    async with trio.open_nursery() as nursery:
        await nursery.start(s.run)
        ha = HAService(rlog, config, broker_id=1, connect=connect, persist=rlog.persist)
        await nursery.start(ha.run)
        await ha.change_to_slave(master_ha, epoch)
        with trio.fail_after(30):
            while s.max_phy_offset != target or s.epoch_file.last_epoch() != epoch:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await s.shutdown()


def main(argv: list[str]) -> int:
    config_json, master_ha, epoch, target, point, when = argv[1:7]
    config = msgspec.json.decode(config_json.encode(), type=MessageStoreConfig)
    _install(point, when)
    trio.run(_follow, config, master_ha, int(epoch), int(target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
