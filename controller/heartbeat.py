"""The controller's broker liveness table (upstream ``DefaultBrokerHeartbeatManager``).

Brokers send BROKER_HEARTBEAT (oneway) to every controller peer; each peer keeps its own table
and the leader's table is the one decisions use. The table is keyed by
``(clusterName, brokerName, brokerId)`` and stores the last heartbeat time, the heartbeat
timeout the broker asked for, and what the election policy needs (epoch, max offset, confirm
offset, election priority).

Sans-IO: the caller passes ``now_ms`` (milliseconds on any monotonic clock, the same one for
every call) to every method that looks at time, and closes connections itself when told to.
The rules (ha-controller-container §2.8):

* alive ⇔ ``lastUpdateTimestamp + heartbeatTimeoutMillis >= now``;
* :meth:`scan_inactive` removes every entry with ``now - last > timeout`` and returns them
  (upstream closes their channels and fires "broker inactive" for each);
* closing a connection removes the entries heard on it;
* a heartbeat always refreshes time, timeout and priority, but epoch / max offset / confirm
  offset only when ``epoch > old`` or ``epoch == old and maxOffset > old`` (upstream quirk: the
  values never go down while the entry lives).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import msgspec

log = logging.getLogger("controller.heartbeat")

#: Upstream ``BrokerHeartbeatManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``.
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 10_000
#: Priority assumed when a heartbeat carries none (upstream ``Integer.MAX_VALUE``: least preferred).
DEFAULT_ELECTION_PRIORITY = 2**31 - 1


class BrokerIdentityInfo(NamedTuple):
    """The liveness-table key (upstream ``BrokerIdentityInfo``)."""

    clusterName: str
    brokerName: str
    brokerId: int


class BrokerLiveInfo(msgspec.Struct, kw_only=True):
    """One live broker as the controller sees it (upstream ``BrokerLiveInfo``; ``connId`` = channel)."""

    clusterName: str
    brokerName: str
    brokerAddr: str
    brokerId: int
    lastUpdateTimestamp: float
    heartbeatTimeoutMillis: int
    connId: object | None = None
    epoch: int = -1
    maxOffset: int = -1
    confirmOffset: int = -1
    electionPriority: int = DEFAULT_ELECTION_PRIORITY

    @property
    def identity(self) -> BrokerIdentityInfo:
        return BrokerIdentityInfo(self.clusterName, self.brokerName, self.brokerId)


class BrokerHeartbeatManager:
    """The liveness table. Not thread-safe; one trio task (or a lock) drives it."""

    def __init__(self) -> None:
        self._table: dict[BrokerIdentityInfo, BrokerLiveInfo] = {}

    def on_heartbeat(
        self,
        *,
        clusterName: str,
        brokerName: str,
        brokerAddr: str,
        brokerId: int,
        now_ms: float,
        heartbeatTimeoutMillis: int | None = None,
        epoch: int | None = None,
        maxOffset: int | None = None,
        confirmOffset: int | None = None,
        electionPriority: int | None = None,
        conn_id: object | None = None,
    ) -> BrokerLiveInfo:
        """Record one heartbeat; returns the (new or updated) entry.

        Missing optional values default as upstream: epoch/offsets −1, timeout 10 s, priority
        ``Integer.MAX_VALUE``. ``conn_id`` identifies the connection the heartbeat came on, so
        that :meth:`on_connection_closed` can find the entry; it and the address are refreshed on
        every heartbeat (upstream keeps the first channel, which misses a reconnected broker).
        """
        key = BrokerIdentityInfo(clusterName, brokerName, brokerId)
        real_epoch = -1 if epoch is None else epoch
        real_max = -1 if maxOffset is None else maxOffset
        real_confirm = -1 if confirmOffset is None else confirmOffset
        timeout = (
            DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if heartbeatTimeoutMillis is None else heartbeatTimeoutMillis
        )
        priority = DEFAULT_ELECTION_PRIORITY if electionPriority is None else electionPriority
        prev = self._table.get(key)
        if prev is None:
            info = BrokerLiveInfo(
                clusterName=clusterName,
                brokerName=brokerName,
                brokerAddr=brokerAddr,
                brokerId=brokerId,
                lastUpdateTimestamp=now_ms,
                heartbeatTimeoutMillis=timeout,
                connId=conn_id,
                epoch=real_epoch,
                maxOffset=real_max,
                confirmOffset=real_confirm,
                electionPriority=priority,
            )
            self._table[key] = info
            log.info("new broker registered, %s, brokerAddr:%s", key, brokerAddr)
            return info
        prev.lastUpdateTimestamp = now_ms
        prev.heartbeatTimeoutMillis = timeout
        prev.electionPriority = priority
        prev.brokerAddr = brokerAddr
        if conn_id is not None:
            prev.connId = conn_id
        if real_epoch > prev.epoch or (real_epoch == prev.epoch and real_max > prev.maxOffset):
            prev.epoch = real_epoch
            prev.maxOffset = real_max
            prev.confirmOffset = real_confirm
        return prev

    def is_alive(self, clusterName: str, brokerName: str, brokerId: int | None, now_ms: float) -> bool:
        """``last + timeout >= now`` for a known broker; unknown (or id None) → False."""
        if brokerId is None:
            return False
        info = self._table.get(BrokerIdentityInfo(clusterName, brokerName, brokerId))
        if info is None:
            return False
        return info.lastUpdateTimestamp + info.heartbeatTimeoutMillis >= now_ms

    def live_info(self, clusterName: str, brokerName: str, brokerId: int) -> BrokerLiveInfo | None:
        """The entry, whether or not it has expired yet (upstream ``getBrokerLiveInfo``)."""
        return self._table.get(BrokerIdentityInfo(clusterName, brokerName, brokerId))

    def scan_inactive(self, now_ms: float) -> list[BrokerLiveInfo]:
        """Remove and return every entry with ``now - last > timeout`` (upstream ``scanNotActiveBroker``).

        The caller closes each returned entry's connection and fires "broker inactive".
        """
        expired = [
            info
            for info in self._table.values()
            if now_ms - info.lastUpdateTimestamp > info.heartbeatTimeoutMillis
        ]
        for info in expired:
            del self._table[info.identity]
            log.warning(
                "The broker %s expired (last heartbeat %.0f ms ago, timeout %d ms)",
                info.identity,
                now_ms - info.lastUpdateTimestamp,
                info.heartbeatTimeoutMillis,
            )
        return expired

    def on_connection_closed(self, conn_id: object) -> list[BrokerLiveInfo]:
        """Remove and return the entries last heard on ``conn_id`` (channel close / exception / idle).

        Upstream removes only the first match; a shared connection (several brokers of one
        container) is gone for all of them, so all are removed.
        """
        gone = [info for info in self._table.values() if info.connId is not None and info.connId == conn_id]
        for info in gone:
            del self._table[info.identity]
            log.info("connection %r closed, broker %s inactive", conn_id, info.identity)
        return gone

    def active_brokers_num(self, now_ms: float) -> dict[str, dict[str, int]]:
        """clusterName → brokerName → number of live replicas (upstream ``getActiveBrokersNum``)."""
        out: dict[str, dict[str, int]] = {}
        for key in self._table:
            if self.is_alive(key.clusterName, key.brokerName, key.brokerId, now_ms):
                per = out.setdefault(key.clusterName, {})
                per[key.brokerName] = per.get(key.brokerName, 0) + 1
        return out

    def entries(self) -> list[BrokerLiveInfo]:
        """A snapshot list of all entries (for admin/inspection)."""
        return list(self._table.values())

    def __len__(self) -> int:
        return len(self._table)
