"""Leader-side bookkeeping: per-follower replication progress and pending read-index requests.

Upstream analogue: etcd's ``tracker.Progress`` and ``readOnly``.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque


class ProgressState(enum.Enum):
    """How the leader currently feeds a follower (etcd's StateProbe/Replicate/Snapshot)."""

    PROBE = "probe"  # one append per heartbeat until the match point is found
    REPLICATE = "replicate"  # stream appends optimistically
    SNAPSHOT = "snapshot"  # a snapshot is in flight; wait for it (or retry after a timeout)


class Progress:
    """What the leader knows about one follower's log."""

    __slots__ = (
        "inflight",
        "match",
        "max_inflight",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "snapshot_sent_at",
        "state",
    )

    def __init__(self, next_index: int, max_inflight: int) -> None:
        # Last index of each append in flight (REPLICATE only), oldest first.
        self.inflight: deque[int] = deque()
        self.max_inflight = max_inflight
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.recent_active = False
        self.pending_snapshot = 0
        self.snapshot_sent_at = 0

    def become_probe(self) -> None:
        self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflight.clear()

    def become_snapshot(self, index: int, now: int) -> None:
        self.inflight.clear()
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.snapshot_sent_at = now
        self.probe_sent = False

    def maybe_update(self, index: int) -> bool:
        """An accepted append up to ``index``; returns whether ``match`` moved."""
        updated = False
        if self.match < index:
            self.match = index
            updated = True
        self.next = max(self.next, index + 1)
        self.probe_sent = False
        inflight = self.inflight
        while inflight and inflight[0] <= index:
            inflight.popleft()
        return updated

    def sent(self, last_index: int) -> None:
        """An append whose last entry is ``last_index`` was sent (REPLICATE: optimistic next)."""
        if self.state is ProgressState.REPLICATE:
            if last_index >= self.next:
                self.next = last_index + 1
                self.inflight.append(last_index)
        else:
            self.probe_sent = True

    def maybe_decrease_to(self, rejected: int, match_hint: int) -> bool:
        """A rejected append of index ``rejected``; returns False if the rejection is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= self.max_inflight
        return True


class ReadOnly:
    """Read-index requests waiting for a quorum of heartbeat acks (etcd ``ReadOnlySafe``)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        # context -> (read index, set of acking peer ids), in request order
        self.pending: OrderedDict[bytes, tuple[int, set[str]]] = OrderedDict()

    def add(self, context: bytes, index: int, self_id: str) -> None:
        if context in self.pending:
            raise ValueError(f"read context {context!r} already pending")
        self.pending[context] = (index, {self_id})

    def last_context(self) -> bytes:
        return next(reversed(self.pending)) if self.pending else b""

    def ack(self, context: bytes, peer: str, quorum: int) -> list[tuple[bytes, int]]:
        """Record ``peer``'s ack of ``context``; if that makes a quorum, release (and return)
        that request and every earlier one, as ``(context, index)`` in order."""
        item = self.pending.get(context)
        if item is None:
            return []
        item[1].add(peer)
        if len(item[1]) < quorum:
            return []
        released: list[tuple[bytes, int]] = []
        while self.pending:
            ctx, (index, _acks) = self.pending.popitem(last=False)
            released.append((ctx, index))
            if ctx == context:
                break
        return released

    def clear(self) -> None:
        self.pending.clear()
