"""Rebalance locks for orderly consumers (upstream ``RebalanceLockManager``).

A queue is locked by one client id of a group; a lock expires ``REBALANCE_LOCK_MAX_LIVE_TIME``
(60 s) after its last renewal. Clients renew every 20 s. The quorum (strict) variant comes later.
"""

from __future__ import annotations

from dataclasses import dataclass

from remoting.protocol.common import MessageQueue

REBALANCE_LOCK_MAX_LIVE_TIME_MS = 60_000


@dataclass
class _Lock:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS) -> None:
        self.max_live_ms = max_live_ms
        self.table: dict[str, dict[MessageQueue, _Lock]] = {}

    def _alive(self, lock: _Lock, now_ms: int) -> bool:
        return now_ms - lock.last_update_ms <= self.max_live_ms

    def try_lock_batch(
        self, group: str, mqs: list[MessageQueue], client_id: str, now_ms: int
    ) -> list[MessageQueue]:
        """Lock (or renew) each queue for ``client_id``; returns the queues it now holds."""
        locks = self.table.setdefault(group, {})
        granted = []
        for mq in mqs:
            lock = locks.get(mq)
            if lock is None or lock.client_id == client_id or not self._alive(lock, now_ms):
                locks[mq] = _Lock(client_id, now_ms)
                granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: list[MessageQueue], client_id: str) -> None:
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            lock = locks.get(mq)
            if lock is not None and lock.client_id == client_id:
                del locks[mq]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str, now_ms: int) -> bool:
        lock = self.table.get(group, {}).get(mq)
        return lock is not None and lock.client_id == client_id and self._alive(lock, now_ms)

    def holds_any(self, group: str, now_ms: int) -> bool:
        return any(self._alive(lock, now_ms) for lock in self.table.get(group, {}).values())
