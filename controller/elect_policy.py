"""Master election policy (upstream ``DefaultElectPolicy``, ha-controller-container §2.7).

Pure: the policy is given a validity predicate (is this broker alive, per the leader's heartbeat
table) and a getter for the brokers' heartbeat info, and picks a broker id or ``None``.

For candidate set S — the SyncStateSet first; only if that yields nothing, all replicas (the
caller passes ``all_replica_brokers`` only when ``enableElectUncleanMaster`` is on):

1. keep only valid (alive) brokers; empty → nothing;
2. the old master, if it is in S and no broker is preferred (or the preferred one is the old
   master) → the old master;
3. a preferred broker (designated election) → it if it is in S, else nothing — a designated
   election never falls back to another broker;
4. otherwise sort by heartbeat info: ``epoch`` descending, then ``maxOffset`` descending, then
   ``electionPriority`` ascending, and take the first.

Differences from upstream, both on ties/edge cases only: offsets are compared as integers
(upstream casts the difference to int, which misorders offsets 2 GiB apart), and remaining
ties go to the smallest broker id (upstream: whichever the TreeSet kept). A valid broker with
no heartbeat info sorts last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller.heartbeat import BrokerLiveInfo

#: (clusterName, brokerName, brokerId) → is the broker valid (alive)? Upstream ``BrokerValidPredicate``.
BrokerValidPredicate = Callable[[str, str, int], bool]
#: (clusterName, brokerName, brokerId) → its heartbeat info. Upstream ``BrokerLiveInfoGetter``.
BrokerLiveInfoGetter = Callable[[str, str, int], BrokerLiveInfo | None]


class DefaultElectPolicy:
    """Pick a master among live candidates; see the module docstring for the rules."""

    def __init__(
        self,
        valid_predicate: BrokerValidPredicate | None = None,
        live_info_getter: BrokerLiveInfoGetter | None = None,
    ) -> None:
        self.valid_predicate = valid_predicate
        self.live_info_getter = live_info_getter

    def elect(
        self,
        cluster_name: str,
        broker_name: str,
        sync_state_brokers: Iterable[int] | None,
        all_replica_brokers: Iterable[int] | None,
        old_master: int | None,
        prefer_broker_id: int | None,
    ) -> int | None:
        """The new master's id, or ``None`` when nobody qualifies."""
        if sync_state_brokers is not None:
            chosen = self._try_elect(
                cluster_name, broker_name, sync_state_brokers, old_master, prefer_broker_id
            )
            if chosen is not None:
                return chosen
        if all_replica_brokers is not None:
            return self._try_elect(
                cluster_name, broker_name, all_replica_brokers, old_master, prefer_broker_id
            )
        return None

    def _try_elect(
        self,
        cluster_name: str,
        broker_name: str,
        brokers: Iterable[int],
        old_master: int | None,
        prefer_broker_id: int | None,
    ) -> int | None:
        candidates = set(brokers)
        if self.valid_predicate is not None:
            candidates = {b for b in candidates if self.valid_predicate(cluster_name, broker_name, b)}
        if not candidates:
            return None
        if old_master in candidates and (prefer_broker_id is None or prefer_broker_id == old_master):
            return old_master
        if prefer_broker_id is not None:
            return prefer_broker_id if prefer_broker_id in candidates else None
        if self.live_info_getter is not None:
            getter = self.live_info_getter
            return min(candidates, key=lambda b: _rank(getter(cluster_name, broker_name, b), b))
        return min(candidates)

    def describe(self, cluster_name: str, broker_name: str, brokers: Iterable[int]) -> str:
        """What the policy sees of ``brokers`` (for the election's log line): each id, whether it is
        alive, and the epoch and max offset of its last heartbeat."""
        parts: list[str] = []
        for b in sorted(brokers):
            alive = self.valid_predicate is None or self.valid_predicate(cluster_name, broker_name, b)
            info = self.live_info_getter(cluster_name, broker_name, b) if self.live_info_getter else None
            heard = f"epoch {info.epoch} max offset {info.maxOffset}" if info is not None else "no heartbeat"
            parts.append(f"{b} {'alive' if alive else 'not alive'}, {heard}")
        return "; ".join(parts)


def _rank(info: BrokerLiveInfo | None, broker_id: int) -> tuple[int, int, int, int, int]:
    """Sort key: has info first, epoch desc, maxOffset desc, electionPriority asc, id asc."""
    if info is None:
        return (1, 0, 0, 0, broker_id)
    return (0, -info.epoch, -info.maxOffset, info.electionPriority, broker_id)
