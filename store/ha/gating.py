"""Send gating: how many replicas must hold a message before the send is answered (§3.8), pure functions.

Upstream: ``CommitLog.asyncPutMessage`` / ``handleHA`` / ``GroupTransferService``. The result codes
are upstream's ``PutMessageStatus`` from ``store.results`` (the store's own enum); the broker maps them to
response codes (PUT_OK → SUCCESS, FLUSH_SLAVE_TIMEOUT → 12, SLAVE_NOT_AVAILABLE → 11,
IN_SYNC_REPLICAS_NOT_ENOUGH → SYSTEM_ERROR "in-sync replicas not enough").

Three modes:

* controller (auto-switch): before append, ``inSyncReplicasNums < minInSyncReplicas`` →
  IN_SYNC_REPLICAS_NOT_ENOUGH; needAckNums = −1 (every SyncStateSet member) with
  ``allAckInSyncStateSet``, else ``inSyncReplicas`` — see ``HAMasterState``;
* slave-acting-master (RIP-34): ``rip34_*`` below;
* classic: needAckNums = ``inSyncReplicas``; with no slave connected (or the slave too far behind) the
  message is stored but answered SLAVE_NOT_AVAILABLE.

Only SYNC_MASTER waits; needAckNums ≤ 1 answers PUT_OK at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from store.config import MessageStoreConfig
from store.results import PutMessageStatus

__all__ = [
    "ALL_ACK_IN_SYNC_STATE_SET",
    "acked_by_all",
    "acked_by_count",
    "classic_need_ack_nums",
    "classic_slave_available",
    "is_stored",
    "rip34_check_before_put",
    "rip34_in_sync_replicas",
    "rip34_need_ack_nums",
    "wait_result",
]

#: ``MixAll.ALL_ACK_IN_SYNC_STATE_SET``.
ALL_ACK_IN_SYNC_STATE_SET = -1


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


def is_stored(status: PutMessageStatus) -> bool:
    """True for the outcomes where the message is in the commit log (upstream "is OK")."""
    return status in _STORED


# ---------------------------------------------------------------------- counting acks


def acked_by_count(end_offset: int, need_ack_nums: int, slave_acks: Iterable[int]) -> bool:
    """``inSyncReplicas``-style: the master plus slaves with ``ack >= end_offset`` reach ``need_ack_nums``."""
    if need_ack_nums <= 1:
        return True
    return 1 + sum(1 for ack in slave_acks if ack >= end_offset) >= need_ack_nums


def acked_by_all(end_offset: int, sync_state_set_size: int, member_acks: Iterable[int]) -> bool:
    """``allAckInSyncStateSet``: every SyncStateSet member (the master counts itself) has the message.
    ``member_acks`` are the acks of *connected* members other than the master."""
    if sync_state_set_size <= 1:
        return True
    return 1 + sum(1 for ack in member_acks if ack >= end_offset) >= sync_state_set_size


def wait_result(acked: bool) -> PutMessageStatus:
    """Outcome of a replication wait that ended (acked, or the ``slaveTimeout`` deadline passed)."""
    return PutMessageStatus.PUT_OK if acked else PutMessageStatus.FLUSH_SLAVE_TIMEOUT


# ---------------------------------------------------------------------- RIP-34 (slave acting master)


def rip34_in_sync_replicas(
    alive_replica_num: int, master_put_offset: int, slave_acks: Iterable[int], ha_max_gap_not_in_sync: int
) -> int:
    """``min(aliveReplicaNumInGroup, 1 + #slaves with masterPut − ack < haMaxGapNotInSync)``."""
    in_sync = 1 + sum(1 for ack in slave_acks if master_put_offset - ack < ha_max_gap_not_in_sync)
    return min(alive_replica_num, in_sync)


def rip34_need_ack_nums(config: MessageStoreConfig, in_sync_replicas: int) -> int:
    """``inSyncReplicas``, or with ``enableAutoInSyncReplicas``
    ``max(min(inSyncReplicas, inSync), minInSyncReplicas)``."""
    if config.enableAutoInSyncReplicas:
        return max(min(config.inSyncReplicas, in_sync_replicas), config.minInSyncReplicas)
    return config.inSyncReplicas


def rip34_check_before_put(config: MessageStoreConfig, in_sync_replicas: int) -> PutMessageStatus | None:
    """IN_SYNC_REPLICAS_NOT_ENOUGH when more acks are needed than replicas are in sync."""
    if rip34_need_ack_nums(config, in_sync_replicas) > in_sync_replicas:
        return PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    return None


# ---------------------------------------------------------------------- classic


def classic_need_ack_nums(config: MessageStoreConfig) -> int:
    return config.inSyncReplicas


def classic_slave_available(
    connected_slaves: int, master_put_offset: int, best_slave_ack: int, ha_max_gap_not_in_sync: int
) -> bool:
    """Upstream ``isSlaveOK``: a slave is connected and not more than ``haMaxGapNotInSync`` behind.
    When False the stored message is answered SLAVE_NOT_AVAILABLE instead of waiting."""
    return connected_slaves > 0 and master_put_offset - best_slave_ack < ha_max_gap_not_in_sync
