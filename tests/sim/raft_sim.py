"""Deterministic simulation of a Raft cluster built from the sans-IO core (no trio, no sockets).

One seed fixes everything: cluster size, timings, the fault mix, and every individual fault
decision (drops, duplicates, delays/reordering, partitions, crashes with or without the last
Ready's fsync, compactions, proposals, reads). Invariants are checked as events happen:

- election safety: at most one leader per term;
- log matching: an entry (index, term) always has the same data and the same predecessor term,
  on every node — checked for every entry any node persists, so by induction logs sharing an
  (index, term) are identical up to it;
- leader completeness: a new leader's log holds the highest committed entry;
- state-machine safety: every node applies the same entry (and reaches the same state digest)
  at each index; commit indexes never disagree on the term at an index;
- read linearizability: a released read index is >= everything committed anywhere before the
  read was requested;
- durability: every acknowledged proposal (applied on the leader that proposed it) is applied
  by every node at the end;
- liveness: after all faults heal, a leader is elected and a final proposal commits and applies
  everywhere within a bound.

Time is logical: each tick has ``SUBSTEPS`` sub-steps; messages take 1.. ``max_delay`` sub-steps.
"""

from __future__ import annotations

import heapq
import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

from controller.raft.core import RaftNode, Ready, Role
from controller.raft.messages import Message, Snapshot, SnapshotMeta, decode_message, encode_message
from controller.raft.storage import MemoryStorage

SUBSTEPS = 4


class InvariantViolation(AssertionError):
    """A safety or liveness property failed; the message says which and when."""


class DigestMachine:
    """A state machine whose state is a CRC chain over applied payloads (cheap to compare)."""

    __slots__ = ("digest", "index")

    def __init__(self) -> None:
        self.index = 0
        self.digest = 0

    def apply(self, index: int, data: bytes) -> None:
        if index != self.index + 1:
            raise InvariantViolation(f"applied index {index} after {self.index}")
        self.index = index
        self.digest = zlib.crc32(data, self.digest)

    def snapshot(self) -> bytes:
        return struct.pack(">QI", self.index, self.digest)

    def restore(self, data: bytes) -> None:
        self.index, self.digest = struct.unpack(">QI", data)


class SimConfig:
    """Fault mix and timings drawn from the seed (so both calm and chaotic runs occur)."""

    def __init__(self, rng: random.Random) -> None:
        self.n_nodes = rng.choice((3, 3, 5))
        self.election_tick = rng.randint(4, 8)
        self.heartbeat_tick = rng.randint(1, 2)
        self.fault_ticks = rng.randint(50, 110)
        self.max_delay = rng.randint(1, 2 * SUBSTEPS)
        self.p_drop = rng.choice((0.0, 0.02, 0.1, 0.3))
        self.p_dup = rng.choice((0.0, 0.02, 0.1))
        self.p_partition = rng.choice((0.0, 0.03, 0.08))
        self.p_crash = rng.choice((0.0, 0.02, 0.05))
        self.p_torn = rng.choice((0.0, 0.5, 1.0))
        self.p_propose = rng.choice((0.05, 0.2, 0.5))
        self.p_read = rng.choice((0.0, 0.05, 0.2))
        self.p_compact = rng.choice((0.0, 0.01, 0.05))
        self.p_skew = rng.choice((0.0, 0.05))
        self.codec = rng.random() < 0.1
        self.max_msg_entries = rng.choice((1, 2, 4, 256))


class Simulation:
    """One seeded run. ``node_factory`` lets tests substitute a deliberately broken core."""

    def __init__(self, seed: int, node_factory: Callable[..., RaftNode] = RaftNode) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = SimConfig(self.rng)
        self.node_factory = node_factory
        self.ids = [f"n{i}" for i in range(self.cfg.n_nodes)]
        self.storage = {i: MemoryStorage() for i in self.ids}
        self.nodes: dict[str, RaftNode | None] = {}
        self.machines: dict[str, DigestMachine] = {}
        self.now = 0  # sub-steps
        self.tick_no = 0
        self.faults = True
        self.queue: list[tuple[int, int, Message]] = []
        self.seq = 0
        self.cut: set[tuple[str, str]] = set()
        self.heal_at = -1
        self.restart_at: dict[str, int] = {}
        self.torn_crash: set[str] = set()
        # invariant bookkeeping
        self.leader_of_term: dict[int, str] = {}
        self.entry_seen: dict[tuple[int, int], tuple[bytes, int | None]] = {}
        self.commit_term: dict[int, int] = {}
        self.max_commit = 0
        self.seen_commit: dict[str, int] = {}
        self.applied_entry: dict[int, tuple[int, bytes]] = {}
        self.digest_at: dict[int, int] = {}
        self.pending_props: dict[str, dict[int, tuple[int, bytes]]] = {i: {} for i in self.ids}
        self.acked: dict[int, bytes] = {}
        self.pending_reads: dict[str, dict[bytes, int]] = {i: {} for i in self.ids}
        self.prop_no = 0
        self.read_no = 0
        self.was_leader: dict[str, int] = {}
        for i in self.ids:
            self._start(i)

    # --- failure reporting ---------------------------------------------------------------

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.seed}, tick {self.tick_no}: {what}")

    # --- node lifecycle ------------------------------------------------------------------

    def _start(self, nid: str) -> None:
        state = self.storage[nid].load()
        node = self.node_factory(
            nid,
            self.ids,
            election_tick=self.cfg.election_tick,
            heartbeat_tick=self.cfg.heartbeat_tick,
            rng=random.Random(self.rng.getrandbits(32)),
            storage_state=state,
            max_msg_entries=self.cfg.max_msg_entries,
        )
        sm = DigestMachine()
        if state.snapshot.meta.index:
            sm.restore(state.snapshot.data)
            self._check_digest(nid, sm)
        self.nodes[nid] = node
        self.machines[nid] = sm
        self.seen_commit[nid] = node.committed
        self.pending_props[nid] = {}
        self.pending_reads[nid] = {}
        self.was_leader.pop(nid, None)

    def _crash(self, nid: str) -> None:
        self.nodes[nid] = None
        self.torn_crash.discard(nid)
        self.restart_at[nid] = self.tick_no + self.rng.randint(1, 3 * self.cfg.election_tick)

    # --- invariant checks ----------------------------------------------------------------

    def _observe(self, nid: str, node: RaftNode) -> None:
        """Checks after any input to ``node``."""
        if node.role is Role.LEADER:
            other = self.leader_of_term.setdefault(node.term, nid)
            if other != nid:
                self.fail(f"election safety: {other} and {nid} both leaders of term {node.term}")
            if self.was_leader.get(nid) != node.term:
                self.was_leader[nid] = node.term
                self._check_leader_completeness(nid, node)
        committed = node.committed
        seen = self.seen_commit[nid]
        if committed > seen:
            log = node.log
            for i in range(seen + 1, committed + 1):
                t = log.term(i)
                if t is None:
                    continue
                known = self.commit_term.setdefault(i, t)
                if known != t:
                    self.fail(f"commit disagreement at index {i}: term {t} on {nid}, {known} elsewhere")
            self.seen_commit[nid] = committed
            if committed > self.max_commit:
                self.max_commit = committed

    def _check_leader_completeness(self, nid: str, node: RaftNode) -> None:
        c = self.max_commit
        if c == 0 or c <= node.log.snapshot.meta.index:
            return
        want = self.commit_term.get(c)
        have = node.log.term(c)
        if want is not None and have != want:
            self.fail(
                f"leader completeness: {nid} leads term {node.term} without committed entry {c} (term {want})"
            )

    def _check_digest(self, nid: str, sm: DigestMachine) -> None:
        known = self.digest_at.setdefault(sm.index, sm.digest)
        if known != sm.digest:
            self.fail(f"state-machine safety: {nid} digest at {sm.index} differs")

    def _check_persisted(self, nid: str, node: RaftNode, rd: Ready) -> None:
        log = node.log
        for e in rd.entries:
            prev = log.term(e.index - 1)
            key = (e.index, e.term)
            seen = self.entry_seen.get(key)
            if seen is None:
                self.entry_seen[key] = (e.data, prev)
            elif seen != (e.data, prev):
                self.fail(f"log matching: entry {key} on {nid} differs from another node's")

    # --- Ready handling (the driver's job) -------------------------------------------------

    def _process_ready(self, nid: str, node: RaftNode) -> None:
        rd = node.ready()
        if rd is None:
            return
        self._check_persisted(nid, node, rd)
        storage = self.storage[nid]
        if nid in self.torn_crash:
            # Crash around this Ready's fsync: nothing, only the snapshot file, or all of it
            # reached the disk — but no message left and nothing was applied.
            r = self.rng.random()
            if r < 0.4:
                if rd.snapshot is not None:
                    storage.save_snapshot_only(rd.snapshot)
            elif r < 0.7:
                storage.save(rd.hard_state, rd.entries, rd.snapshot)
            self._crash(nid)
            return
        storage.save(rd.hard_state, rd.entries, rd.snapshot)
        for m in rd.messages:
            self._send(m)
        sm = self.machines[nid]
        if rd.snapshot is not None:
            sm.restore(rd.snapshot.data)
            self._check_digest(nid, sm)
        props = self.pending_props[nid]
        for e in rd.committed_entries:
            known = self.applied_entry.setdefault(e.index, (e.term, e.data))
            if known != (e.term, e.data):
                self.fail(
                    f"state-machine safety: {nid} applies {(e.term, e.data)} at {e.index}, others {known}"
                )
            sm.apply(e.index, e.data)
            self._check_digest(nid, sm)
            prop = props.pop(e.index, None)
            if prop is not None and prop[0] == e.term:
                if prop[1] != e.data:
                    self.fail(f"proposal at ({e.index}, {e.term}) applied with other data")
                self.acked[e.index] = e.data
        reads = self.pending_reads[nid]
        for rs in rd.read_states:
            required = reads.pop(rs.context, None)
            if required is None:
                self.fail(f"read state {rs.context!r} released on {nid} that did not request it")
            elif rs.index < required:
                self.fail(f"stale read on {nid}: read index {rs.index} < committed {required} at request")
        node.advance(rd)

    # --- network -------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        cfg = self.cfg
        rand = self.rng.random
        if self.faults:
            if cfg.p_drop and rand() < cfg.p_drop:
                return
            copies = 2 if cfg.p_dup and rand() < cfg.p_dup else 1
        else:
            copies = 1
        if cfg.codec:
            m = decode_message(encode_message(m))
        for _ in range(copies):
            self.seq += 1
            heapq.heappush(self.queue, (self.now + 1 + int(rand() * cfg.max_delay), self.seq, m))

    def _deliver_due(self) -> set[str]:
        touched: set[str] = set()
        queue = self.queue
        while queue and queue[0][0] <= self.now:
            _, _, m = heapq.heappop(queue)
            node = self.nodes.get(m.to)
            if node is None or (m.frm, m.to) in self.cut:
                continue
            node.step(m)
            self._observe(m.to, node)
            touched.add(m.to)
        return touched

    def _leader_or_random(self) -> str:
        leaders = [i for i, n in self.nodes.items() if n is not None and n.role is Role.LEADER]
        return self.rng.choice(leaders or self.ids)

    def _partition(self) -> None:
        rng = self.rng
        ids = self.ids
        kind = rng.random()
        self.cut = set()
        if kind < 0.4:  # isolate one node, usually a leader
            lone = self._leader_or_random()
            for other in ids:
                if other != lone:
                    self.cut.add((lone, other))
                    self.cut.add((other, lone))
        elif kind < 0.8:  # split in two groups
            side = {i for i in ids if rng.random() < 0.5}
            for a in ids:
                for b in ids:
                    if (a in side) != (b in side):
                        self.cut.add((a, b))
        else:  # a few one-way link failures
            for _ in range(rng.randint(1, len(ids))):
                a, b = rng.sample(ids, 2)
                self.cut.add((a, b))
        self.heal_at = self.tick_no + rng.randint(self.cfg.election_tick, 4 * self.cfg.election_tick)

    # --- main loop -----------------------------------------------------------------------

    def _client_actions(self) -> None:
        rng = self.rng
        cfg = self.cfg
        if rng.random() < cfg.p_propose:
            leaders = [(i, n) for i, n in self.nodes.items() if n is not None and n.role is Role.LEADER]
            if leaders:
                nid, node = rng.choice(leaders)
                self.prop_no += 1
                data = b"s%d-p%d" % (self.seed, self.prop_no)
                res = node.propose(data)
                self.pending_props[nid][res.index] = (res.term, data)
                self._observe(nid, node)
        if rng.random() < cfg.p_read:
            leaders = [(i, n) for i, n in self.nodes.items() if n is not None and n.role is Role.LEADER]
            if leaders:
                nid, node = rng.choice(leaders)
                self.read_no += 1
                ctx = b"r%d" % self.read_no
                self.pending_reads[nid][ctx] = self.max_commit
                node.read_index(ctx)

    def _faults_per_tick(self) -> None:
        rng = self.rng
        cfg = self.cfg
        if self.cut and self.tick_no >= self.heal_at:
            self.cut = set()
        if not self.cut and rng.random() < cfg.p_partition:
            self._partition()
        if rng.random() < cfg.p_crash:
            up = [i for i, n in self.nodes.items() if n is not None and i not in self.torn_crash]
            if up:
                nid = self._leader_or_random() if rng.random() < 0.5 else rng.choice(up)
                if nid not in up:
                    pass
                elif rng.random() < cfg.p_torn:
                    self.torn_crash.add(nid)
                else:
                    self._crash(nid)
        if rng.random() < cfg.p_compact:
            self._compact(rng.choice(self.ids))

    def _compact(self, nid: str) -> None:
        node = self.nodes[nid]
        if node is None:
            return
        log = node.log
        index = log.applied
        if index - log.snapshot.meta.index < 3:
            return
        sm = self.machines[nid]
        term = log.term(index)
        assert term is not None
        snapshot = Snapshot(SnapshotMeta(index, term), sm.snapshot())
        if self.rng.random() < 0.1:
            # Crash after the snapshot file was written, before the log was rewritten.
            self.storage[nid].save_snapshot_only(snapshot)
            self._crash(nid)
            return
        self.storage[nid].compact(snapshot)
        node.compact(index, snapshot.data)

    def _tick_nodes(self) -> None:
        rng = self.rng
        skew = self.cfg.p_skew if self.faults else 0.0
        for nid, node in self.nodes.items():
            if node is None:
                continue
            n = 1
            if skew and rng.random() < skew:
                n = rng.choice((0, 2))
            for _ in range(n):
                node.tick()
            self._observe(nid, node)

    def step_tick(self) -> None:
        """One tick: restarts, faults, node ticks, then SUBSTEPS rounds of delivery + Ready."""
        self.tick_no += 1
        for nid, at in list(self.restart_at.items()):
            if at <= self.tick_no or not self.faults:
                del self.restart_at[nid]
                self._start(nid)
        if self.faults:
            self._faults_per_tick()
        self._tick_nodes()
        for _ in range(SUBSTEPS):
            self.now += 1
            self._deliver_due()
            self._client_actions()
            for nid, node in self.nodes.items():
                if node is not None and node.has_ready():
                    self._process_ready(nid, node)

    def run(self) -> None:
        for _ in range(self.cfg.fault_ticks):
            self.step_tick()
        self._heal_and_check_liveness()

    def _heal_and_check_liveness(self) -> None:
        """Heal everything, then require a final proposal to apply on every node in bounded time.
        A proposal made to a leader that loses its term before committing is retried."""
        self.faults = False
        self.cut = set()
        self.torn_crash.clear()
        self.cfg.p_propose = 0.0
        self.cfg.p_read = 0.0
        bound = self.tick_no + 16 * self.cfg.election_tick + 40
        final: tuple[RaftNode, int, int, bytes] | None = None
        attempts = 0
        while self.tick_no < bound:
            self.step_tick()
            if final is not None:
                node, index, term, data = final
                if self.applied_entry.get(index) == (term, data):
                    if all(self.machines[i].index >= index for i in self.ids):
                        break
                    continue
                if node.role is Role.LEADER and node.term == term and self.nodes[node.id] is node:
                    continue
            leader = self._stable_leader()
            if leader is not None:
                attempts += 1
                data = b"s%d-final%d" % (self.seed, attempts)
                res = leader.propose(data)
                self._observe(leader.id, leader)
                final = (leader, res.index, res.term, data)
        else:
            self.fail(
                f"liveness: no final proposal applied on every node {bound} ticks after healing "
                f"(final={final and final[1:3]}, applied={ {i: self.machines[i].index for i in self.ids} })"
            )
        for index, data in self.acked.items():
            if self.applied_entry.get(index, (0, b""))[1] != data:
                self.fail(f"durability: acknowledged proposal at {index} lost")

    def _stable_leader(self) -> RaftNode | None:
        if any(n is None for n in self.nodes.values()):
            return None
        for node in self.nodes.values():
            if node is not None and node.role is Role.LEADER and node.log.term(node.committed) == node.term:
                return node
        return None

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "nodes": self.cfg.n_nodes,
            "ticks": self.tick_no,
            "terms": len(self.leader_of_term),
            "committed": self.max_commit,
            "acked": len(self.acked),
        }


def run_seed(seed: int, node_factory: Callable[..., RaftNode] = RaftNode) -> Simulation:
    """Run one seed to completion; raises :class:`InvariantViolation` on any failure."""
    sim = Simulation(seed, node_factory)
    sim.run()
    return sim
