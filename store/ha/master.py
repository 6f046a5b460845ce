"""Master-side group state: acks, confirm offset, SyncStateSet bookkeeping, send gating (sans-IO).

Upstream: the SyncStateSet parts of ``AutoSwitchHAService`` and ``ReplicasManager``.

* ``sync_state_set`` is the set last confirmed by the controller; a change is *proposed*
  (``propose_sync_state_set``) and adopted only when the controller accepts it
  (``on_sync_state_set_accepted``). While a proposal is in flight the union of both sets is used for
  the confirm offset and for counting acks, and ``in_sync_replicas_nums`` is the larger size.
* A proposal whose outcome is unknown (no answer, the controller's leader stopped or timed out under
  it: the set may have been committed all the same) leaves the replicas it would have added
  *unconfirmed*: they still count for acks and the confirm offset, as upstream keeps its
  ``remoteSyncStateSet`` after a failed report, until the controller's set is known -- accepted,
  pushed, or a definite refusal (which the controller gives only for its current set). Dropping them
  at once let a master acknowledge sends without a replica that the controller, having committed
  the set after all, could elect next: acknowledged messages were lost (found by the failover model
  with a controller restarted under a proposal). They are proposed again (or, gone, left out) at
  the next check, so that an answer settles them.
* Confirm offset (§3.6): with a one-member set (confirmed ∪ in flight) or without
  ``allAckInSyncStateSet`` it is the max offset;
  else the minimum ack over the connected members (the master counts with its max offset). If a member
  other than the master has no connection or no ack yet, the previous value is kept.
* Caught-up time (§3.7): on an ack ``>= lastMasterMaxOffset`` of the connection's last batch,
  ``lastCaughtUpTime = max(old, now if ack == max offset else lastTransferTime)``; also refreshed when the
  slave has acked everything. Async learners are never caught up and never join.
* Expand: a connected non-learner outside the set whose ack ``>= confirm offset`` and ``>=`` the start of
  the current epoch, checked on the ack and again when the proposal is made. Shrink: members not caught up for ``haMaxTimeSlaveNotCatchup`` and members without
  a connection. ``propose_sync_state_set`` returns at most one proposal at a time.
* Hold-back (ours): a replica whose joining the controller refused is not proposed again for
  :data:`HOLD_BACK` seconds, doubling on each refusal up to :data:`HOLD_BACK_MAX`, until its
  connection closes. Upstream proposes it again on every ack: a replica the controller does not know
  (its metadata cleaned while it runs, one registered with another controller) made a controller
  round trip and two log lines per ack.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from store.config import MessageStoreConfig
from store.ha.connection import HAConnection
from store.ha.gating import ALL_ACK_IN_SYNC_STATE_SET, acked_by_all, acked_by_count
from store.ha.replica_log import ReplicaLog
from store.results import PutMessageStatus

log = logging.getLogger("store.ha.master")

#: seconds before a replica whose joining was refused is proposed again (then doubled per refusal)
HOLD_BACK = 1.0
HOLD_BACK_MAX = 30.0


class HAMasterState:
    """Replication bookkeeping of a master (``self_id`` = its controller broker id)."""

    def __init__(
        self,
        rlog: ReplicaLog,
        config: MessageStoreConfig,
        *,
        self_id: int,
        sync_state_set: Iterable[int] = (),
        sync_state_set_epoch: int = 0,
    ) -> None:
        self.log = rlog
        self.config = config
        self.self_id = self_id
        self.sync_state_set: set[int] = set(sync_state_set) | {self_id}
        self.sync_state_set_epoch = sync_state_set_epoch
        #: Proposal sent to the controller and not answered yet (upstream ``remoteSyncStateSet``).
        self.proposal: set[int] | None = None
        #: Replicas a proposal with an unknown outcome would have added (see the module docstring).
        self.unconfirmed: set[int] = set()
        #: Current connection per slave id.
        self.connections: dict[int, HAConnection] = {}
        #: Upstream ``connectionCaughtUpTimeTable``.
        self.caught_up_time: dict[int, float] = {}
        self._pending_expand: set[int] = set()
        #: slave id -> (not proposed before this time, the hold-back that set it)
        self._held_back: dict[int, tuple[float, float]] = {}
        self._shrink_now = False
        self._confirm = min(rlog.confirm_offset, rlog.max_offset)
        self.refresh_confirm_offset()

    # ------------------------------------------------------------------ connection callbacks

    def on_handshake(self, conn: HAConnection) -> None:
        old = self.connections.get(conn.slave_id)
        if old is not None and old is not conn:
            log.info("slave %d reconnected; replacing its old connection", conn.slave_id)
            old.group = None
            old.connection_lost()
        self.connections[conn.slave_id] = conn

    def on_ack(self, conn: HAConnection, now: float) -> None:
        if self.connections.get(conn.slave_id) is not conn:
            return
        ack = conn.ack_offset
        if not conn.is_async_learner and ack >= conn.last_master_max_offset:
            caught = now if ack == self.log.max_offset else conn.last_transfer_time
            self.update_caught_up_time(conn.slave_id, caught)
            self._maybe_expand(conn.slave_id, ack)
        if conn.slave_id in self.effective_sync_state_set:
            self.refresh_confirm_offset()

    def update_caught_up_time(self, slave_id: int, when: float) -> None:
        old = self.caught_up_time.get(slave_id)
        if old is None or when > old:
            self.caught_up_time[slave_id] = when

    def on_connection_closed(self, conn: HAConnection) -> None:
        if self.connections.get(conn.slave_id) is not conn:
            return
        del self.connections[conn.slave_id]
        self._pending_expand.discard(conn.slave_id)
        self._held_back.pop(conn.slave_id, None)  # a new connection gets a fresh chance
        if conn.slave_id in self.effective_sync_state_set:
            self._shrink_now = True

    # ------------------------------------------------------------------ confirm offset

    @property
    def effective_sync_state_set(self) -> set[int]:
        """The set used for acks and the confirm offset: confirmed ∪ unconfirmed ∪ in-flight proposal."""
        known = self.sync_state_set | self.unconfirmed if self.unconfirmed else self.sync_state_set
        return known | self.proposal if self.proposal is not None else known

    @property
    def in_sync_replicas_nums(self) -> int:
        known = len(self.sync_state_set | self.unconfirmed)
        if self.proposal is not None:
            return max(known, len(self.proposal))
        return known

    def _compute_confirm(self) -> int:
        max_offset = self.log.max_offset
        acks = []
        for member in self.effective_sync_state_set:
            if member == self.self_id:
                continue
            conn = self.connections.get(member)
            if conn is None or conn.ack_offset < 0:
                return min(self._confirm, max_offset)
            acks.append(conn.ack_offset)
        return min([max_offset, *acks])

    def confirm_offset(self) -> int:
        """The master's confirm offset now (§3.6). Deviation: while a proposal is in flight the union
        of both sets decides (upstream looks at the confirmed set only, so a joining slave's lag could
        be exposed and the confirm offset move backwards once the controller accepts)."""
        if len(self.effective_sync_state_set) <= 1 or not self.config.allAckInSyncStateSet:
            return self.log.max_offset
        return min(self._confirm, self.log.max_offset)

    @property
    def confirm_follows_appends(self) -> bool:
        """True when the confirm offset is the max offset (a one-member set, or no
        ``allAckInSyncStateSet``), so every append moves it. Otherwise appends cannot move it: it is
        the minimum over acks (which never exceed what was written) or the kept previous value, and
        only acks, closes and SyncStateSet changes refresh it."""
        return not self.config.allAckInSyncStateSet or len(self.effective_sync_state_set) <= 1

    def refresh_confirm_offset(self) -> int:
        """Recompute and publish the confirm offset into the log; call after appends as well."""
        self._confirm = self._compute_confirm()
        value = self.confirm_offset()
        self.log.confirm_offset = value
        return value

    # ------------------------------------------------------------------ SyncStateSet

    def _may_join(self, ack: int) -> bool:
        last = self.log.epoch_file.last_entry()
        epoch_start = last.start_offset if last is not None else 0
        return ack >= self.confirm_offset() and ack >= epoch_start

    def _maybe_expand(self, slave_id: int, ack: int) -> None:
        if slave_id not in self.effective_sync_state_set and self._may_join(ack):
            self._pending_expand.add(slave_id)

    def propose_sync_state_set(self, now: float) -> set[int] | None:
        """A new SyncStateSet to send to the controller (CONTROLLER_ALTER_SYNC_STATE_SET), or None.

        Call on every ack/close (cheap) and every ``checkSyncStateSetPeriod``. While a proposal is in
        flight, returns None.
        """
        if self.proposal is not None:
            return None
        limit = self.config.haMaxTimeSlaveNotCatchup / 1000
        new = set(self.sync_state_set)
        for slave_id in self.unconfirmed:
            # proposed again while still qualified (the shrink below drops one that is not), so
            # that the controller's answer settles it
            conn = self.connections.get(slave_id)
            if conn is not None and not conn.is_async_learner and self._may_join(conn.ack_offset):
                new.add(slave_id)
        for slave_id in list(self._pending_expand):
            held = self._held_back.get(slave_id)
            if held is not None and now < held[0]:
                continue
            # Re-check: the master may have written more since the ack that qualified the slave.
            conn = self.connections.get(slave_id)
            if conn is not None and not conn.is_async_learner and self._may_join(conn.ack_offset):
                new.add(slave_id)
        for member in list(new):
            if member == self.self_id:
                continue
            conn = self.connections.get(member)
            caught = self.caught_up_time.get(member)
            if conn is None or conn.is_async_learner or caught is None or now - caught > limit:
                new.discard(member)
        new.add(self.self_id)
        self._pending_expand.clear()
        self._shrink_now = False
        if new == self.sync_state_set and not self.unconfirmed:
            return None
        log.info("proposing SyncStateSet %s (current %s)", sorted(new), sorted(self.sync_state_set))
        self.proposal = new
        self.refresh_confirm_offset()
        return set(new)

    @property
    def wants_proposal(self) -> bool:
        """True when a call to ``propose_sync_state_set`` should not wait for the periodic check."""
        return self.proposal is None and (bool(self._pending_expand) or self._shrink_now)

    def on_sync_state_set_accepted(self, new_set: Iterable[int], epoch: int) -> None:
        """The controller accepted (or pushed) a SyncStateSet: adopt it."""
        self.sync_state_set = set(new_set) | {self.self_id}
        self.sync_state_set_epoch = epoch
        self.proposal = None
        self.unconfirmed.clear()
        for member in self.sync_state_set:
            self._held_back.pop(member, None)
        self.refresh_confirm_offset()

    def on_sync_state_set_rejected(self, now: float | None = None) -> None:
        """No new set from the controller. With ``now``: it refused the proposal (a replica it does
        not know or sees dead) -- its set is still the current one, so nothing is unconfirmed, and
        the replicas the proposal would have added are held back. Without: the outcome is unknown
        (no answer, a stale view): those replicas stay in the ack set as unconfirmed."""
        joining = sorted((self.proposal or set()) - self.sync_state_set)
        self.proposal = None
        if now is None:
            if joining:
                self.unconfirmed.update(joining)
                log.info(
                    "SyncStateSet proposal with %s not answered: counting them for acks until the "
                    "controller's set is known",
                    joining,
                )
            self.refresh_confirm_offset()
            return
        self.unconfirmed.clear()
        if joining:
            for slave_id in joining:
                previous = self._held_back.get(slave_id)
                delay = HOLD_BACK if previous is None else min(previous[1] * 2, HOLD_BACK_MAX)
                self._held_back[slave_id] = (now + delay, delay)
            log.info(
                "the controller refused replica(s) %s into the SyncStateSet: not proposed again for %.0f s",
                joining,
                max(self._held_back[i][1] for i in joining),
            )
        self.refresh_confirm_offset()

    # ------------------------------------------------------------------ send gating (controller mode)

    def check_before_put(self) -> PutMessageStatus | None:
        """IN_SYNC_REPLICAS_NOT_ENOUGH when fewer replicas are in sync than ``minInSyncReplicas``."""
        if self.in_sync_replicas_nums < self.config.minInSyncReplicas:
            return PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        return None

    def need_ack_nums(self) -> int:
        """-1 (all SyncStateSet members) with ``allAckInSyncStateSet``, else ``inSyncReplicas``."""
        return ALL_ACK_IN_SYNC_STATE_SET if self.config.allAckInSyncStateSet else self.config.inSyncReplicas

    def is_acked(self, end_offset: int, need_ack_nums: int | None = None) -> bool:
        """Whether a message ending at ``end_offset`` is replicated enough to answer the send."""
        need = self.need_ack_nums() if need_ack_nums is None else need_ack_nums
        if need == ALL_ACK_IN_SYNC_STATE_SET:
            members = self.effective_sync_state_set
            acks = [
                conn.ack_offset
                for member in members
                if member != self.self_id and (conn := self.connections.get(member)) is not None
            ]
            return acked_by_all(end_offset, len(members), acks)
        return acked_by_count(end_offset, need, (c.ack_offset for c in self.connections.values()))
