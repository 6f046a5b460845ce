"""The in-memory Raft log of one node: snapshot base + entries, commit/apply/stable marks.

Upstream analogue: etcd's ``raftLog`` (its ``Storage`` and ``unstable`` folded into one list,
since the controller's log is small and compacted by snapshots). Indexes::

    snapshot.meta.index  <  first_index .. stabled .. last_index
                             applied <= committed <= last_index

``stabled`` is the last index known durable; entries after it are handed out by
:meth:`unstable_entries` for the next Ready. A pending snapshot (received from the leader,
not yet persisted/applied) replaces the whole log.
"""

from __future__ import annotations

from controller.raft.messages import Entry, Snapshot, SnapshotMeta


class RaftLog:
    """Entries after a snapshot, with commit/apply/stable bookkeeping. Pure data, no I/O."""

    __slots__ = ("applied", "committed", "entries", "pending_snapshot", "snapshot", "stabled")

    def __init__(self, snapshot: Snapshot, entries: list[Entry], commit: int) -> None:
        """Restore from storage: ``entries`` must directly follow ``snapshot`` and all be durable."""
        base = snapshot.meta.index
        for offset, entry in enumerate(entries):
            if entry.index != base + 1 + offset:
                raise ValueError(f"log entries not contiguous after snapshot {base}: {entry.index}")
        self.snapshot = snapshot
        self.entries = list(entries)
        self.stabled = base + len(entries)
        self.committed = max(base, min(commit, self.stabled))
        self.applied = base
        self.pending_snapshot: Snapshot | None = None

    # --- positions -----------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self.snapshot.meta.index + 1

    @property
    def last_index(self) -> int:
        return self.snapshot.meta.index + len(self.entries)

    @property
    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.snapshot.meta.term

    def term(self, index: int) -> int | None:
        """Term of the entry at ``index``; ``None`` if compacted away or beyond the end."""
        base = self.snapshot.meta.index
        if index == base:
            return self.snapshot.meta.term
        if index < base or index > base + len(self.entries):
            return None
        return self.entries[index - base - 1].term

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: is a log ending at (last_index, last_term) at least as up to date as ours?"""
        own_term = self.last_term
        return last_term > own_term or (last_term == own_term and last_index >= self.last_index)

    def slice(self, lo: int, max_count: int, max_bytes: int) -> list[Entry]:
        """Entries from ``lo`` (>= first_index) on, at most ``max_count`` and about ``max_bytes``
        of data (at least one entry when any exist)."""
        start = lo - self.snapshot.meta.index - 1
        out = self.entries[start : start + max_count]
        total = 0
        for i, entry in enumerate(out):
            total += len(entry.data) + 16
            if total > max_bytes and i > 0:
                return out[:i]
        return out

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest ``i <= index`` whose term is ``<= term``, with its term (etcd's fast
        backtracking). Below the snapshot the term is unknown: returns ``(index, 0)``."""
        base = self.snapshot.meta.index
        index = min(index, self.last_index)
        while index > base:
            t = self.entries[index - base - 1].term
            if t <= term:
                return index, t
            index -= 1
        if index == base:
            return index, self.snapshot.meta.term
        return index, 0

    # --- mutation ------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Leader append: entries must start at ``last_index + 1``."""
        if entries and entries[0].index != self.last_index + 1:
            raise AssertionError(f"append at {entries[0].index}, log ends at {self.last_index}")
        self.entries.extend(entries)

    def maybe_append(self, index: int, log_term: int, commit: int, entries: list[Entry]) -> int | None:
        """Follower side of AppendEntries. If our entry at ``index`` has ``log_term``, merge
        ``entries`` (truncating a conflicting suffix), advance commit to
        ``min(commit, index + len(entries))`` and return that last new index; else ``None``."""
        if not self.match_term(index, log_term):
            return None
        last_new = index + len(entries)
        conflict = 0
        for entry in entries:
            if not self.match_term(entry.index, entry.term):
                conflict = entry.index
                break
        if conflict:
            if conflict <= self.committed:
                raise AssertionError(f"entry {conflict} conflicts with committed index {self.committed}")
            base = self.snapshot.meta.index
            del self.entries[conflict - base - 1 :]
            self.entries.extend(entries[conflict - index - 1 :])
            if conflict <= self.stabled:
                self.stabled = conflict - 1
        self.commit_to(min(commit, last_new))
        return last_new

    def commit_to(self, index: int) -> bool:
        """Raise the commit mark (never lowers it); returns whether it moved."""
        if index > self.committed:
            if index > self.last_index:
                raise AssertionError(f"commit {index} beyond last index {self.last_index}")
            self.committed = index
            return True
        return False

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log with a received snapshot (pending until persisted/applied)."""
        self.snapshot = snapshot
        self.entries = []
        self.pending_snapshot = snapshot
        self.committed = snapshot.meta.index
        self.stabled = snapshot.meta.index

    def compact(self, snapshot: Snapshot) -> None:
        """Drop entries covered by a locally taken snapshot (index <= applied)."""
        index = snapshot.meta.index
        if index > self.applied or index <= self.snapshot.meta.index:
            raise ValueError(
                f"cannot compact to {index}: applied {self.applied}, snapshot {self.snapshot.meta.index}"
            )
        if self.term(index) != snapshot.meta.term:
            raise ValueError(f"snapshot term {snapshot.meta.term} != log term at {index}")
        del self.entries[: index - self.snapshot.meta.index]
        self.snapshot = snapshot

    # --- Ready support -------------------------------------------------------------------

    def unstable_entries(self) -> list[Entry]:
        base = self.snapshot.meta.index
        return self.entries[self.stabled - base :]

    def next_committed(self, max_count: int) -> list[Entry]:
        """Committed, not yet applied entries (after a pending snapshot, if any)."""
        lo = self.applied
        if self.pending_snapshot is not None:
            lo = max(lo, self.pending_snapshot.meta.index)
        lo = max(lo, self.snapshot.meta.index)
        if self.committed <= lo:
            return []
        base = self.snapshot.meta.index
        hi = min(self.committed, lo + max_count)
        return self.entries[lo - base : hi - base]

    def has_next_committed(self) -> bool:
        lo = max(self.applied, self.snapshot.meta.index)
        return self.committed > lo

    def snapshot_meta(self) -> SnapshotMeta:
        return self.snapshot.meta
