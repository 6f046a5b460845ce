"""The sans-IO Raft state machine of one peer, shaped like etcd's ``raft.RawNode``.

Feed it events — :meth:`RaftNode.tick`, :meth:`RaftNode.step` (a peer message),
:meth:`RaftNode.propose`, :meth:`RaftNode.read_index` — then drain its decisions with
:meth:`RaftNode.ready` / :meth:`RaftNode.advance`. It never does I/O, never reads a clock and
draws randomness only from the ``rng`` it is given, so a seeded simulation replays exactly.

The Ready contract (the driver's obligations, in this order):

1. persist ``ready.snapshot`` (if any), then ``ready.entries`` — the first entry's index
   replaces every stored entry at or after it — and ``ready.hard_state`` (if any), and make
   them durable (fsync);
2. only then send ``ready.messages`` (a vote or an append acknowledgement must never leave
   before the state it promises is on disk);
3. restore the state machine from ``ready.snapshot`` (if any), then apply
   ``ready.committed_entries`` in order; serve ``ready.read_states`` once the state machine
   has applied their index;
4. call :meth:`RaftNode.advance` with the same Ready. No other method may be called between
   :meth:`RaftNode.ready` and :meth:`RaftNode.advance`.

Implemented: randomized election timeouts, pre-vote, check-quorum (leader steps down without
a live quorum; followers in a leader lease ignore vote requests), log replication with fast
backtracking (reject hints), commit only of current-term entries by counting (§5.4.2), an
empty entry appended on election, read index (leader only: followers raise
:class:`NotLeaderError` rather than forwarding), snapshots (local compaction and
InstallSnapshot). Membership is static.
"""

from __future__ import annotations

import enum
import logging
import random

import msgspec

from controller.raft.errors import NotLeaderError
from controller.raft.log import RaftLog
from controller.raft.messages import (
    Entry,
    HardState,
    Message,
    MsgApp,
    MsgAppResp,
    MsgHeartbeat,
    MsgHeartbeatResp,
    MsgPreVote,
    MsgPreVoteResp,
    MsgSnap,
    MsgVote,
    MsgVoteResp,
    PersistentState,
    ReadState,
    Snapshot,
    SnapshotMeta,
)
from controller.raft.progress import Progress, ProgressState, ReadOnly

logger = logging.getLogger("controller.raft")


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class Ready(msgspec.Struct):
    """A batch of work for the driver; see the module docstring for the order to handle it."""

    hard_state: HardState | None
    entries: list[Entry]
    snapshot: Snapshot | None
    messages: list[Message]
    committed_entries: list[Entry]
    read_states: list[ReadState]


class ProposalResult(msgspec.Struct, frozen=True):
    """Where a proposal was appended. It took effect iff the entry applied at ``index`` has
    ``term``; if another term's entry is applied there, the proposal was dropped."""

    index: int
    term: int


class RaftNode:
    """One Raft peer. All peers in ``peers`` (this node included or not) are voters."""

    def __init__(
        self,
        id: str,
        peers: list[str],
        *,
        election_tick: int = 10,
        heartbeat_tick: int = 1,
        rng: random.Random,
        pre_vote: bool = True,
        check_quorum: bool = True,
        storage_state: PersistentState | None = None,
        max_msg_entries: int = 256,
        max_msg_bytes: int = 1 << 20,
        max_apply_entries: int = 1024,
        max_inflight_msgs: int = 64,
    ) -> None:
        if heartbeat_tick < 1 or election_tick <= heartbeat_tick:
            raise ValueError("need 1 <= heartbeat_tick < election_tick")
        self.id = id
        self.voters: tuple[str, ...] = tuple(sorted({*peers, id}))
        self.others: tuple[str, ...] = tuple(p for p in self.voters if p != id)
        self.quorum = len(self.voters) // 2 + 1
        self.election_tick = election_tick
        self.heartbeat_tick = heartbeat_tick
        self.pre_vote = pre_vote
        self.check_quorum = check_quorum
        self._rng = rng
        self._max_msg_entries = max_msg_entries
        self._max_msg_bytes = max_msg_bytes
        self._max_apply = max_apply_entries
        self._max_inflight = max_inflight_msgs

        state = storage_state or PersistentState()
        self.log = RaftLog(state.snapshot, state.entries, state.hard_state.commit)
        self.term = state.hard_state.term
        self.vote: str | None = state.hard_state.vote
        self._prev_hard_state = HardState(self.term, self.vote, self.log.committed)
        self.role = Role.FOLLOWER
        self.lead: str | None = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = election_tick
        self._ticks = 0
        self._votes: dict[str, bool] = {}
        self._prs: dict[str, Progress] = {}
        self._read_only = ReadOnly()
        self._reads_waiting_commit: list[bytes] = []
        self._msgs: list[Message] = []
        self._read_states: list[ReadState] = []
        self._in_ready: Ready | None = None
        self._reset_randomized_timeout()

    # --- introspection -------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def leader_id(self) -> str | None:
        return self.lead

    @property
    def committed(self) -> int:
        return self.log.committed

    @property
    def applied(self) -> int:
        return self.log.applied

    @property
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    # --- inputs --------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick (the driver calls this every tick_interval)."""
        self._check_not_in_ready()
        self._ticks += 1
        if self.role is Role.LEADER:
            self._tick_heartbeat()
        else:
            self._election_elapsed += 1
            if self._election_elapsed >= self._randomized_timeout:
                self._election_elapsed = 0
                self._campaign(pre=self.pre_vote)

    def campaign(self) -> None:
        """Start an election now (etcd ``MsgHup``); a no-op on the leader."""
        self._check_not_in_ready()
        if self.role is not Role.LEADER:
            self._campaign(pre=self.pre_vote)

    def propose(self, data: bytes) -> ProposalResult:
        """Append ``data`` as a new entry; raises :class:`NotLeaderError` on a non-leader."""
        return self.propose_batch([data])[0]

    def propose_batch(self, datas: list[bytes]) -> list[ProposalResult]:
        """Append several entries at once (one broadcast)."""
        self._check_not_in_ready()
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.lead)
        first = self.log.last_index + 1
        entries = [Entry(self.term, first + i, bytes(d)) for i, d in enumerate(datas)]
        self._append_entries(entries)
        self._bcast_append()
        return [ProposalResult(e.index, e.term) for e in entries]

    def read_index(self, context: bytes) -> None:
        """Request a linearizable read; a :class:`ReadState` with this ``context`` appears in a
        later Ready once a quorum confirmed this node's leadership. Leader only (raises
        :class:`NotLeaderError`; no forwarding). ``context`` must be unique among pending
        reads. Pending reads are dropped silently if leadership is lost."""
        self._check_not_in_ready()
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.lead)
        if self.log.term(self.log.committed) != self.term:
            # Until an entry of this term commits, our commit index may lag the true one.
            self._reads_waiting_commit.append(context)
            return
        self._start_read(context)

    def compact(self, index: int, snapshot_data: bytes) -> None:
        """The application has a snapshot of its state after applying ``index``: drop entries
        up to ``index`` and send this snapshot to peers that need them. The caller must have
        stored the snapshot durably first."""
        self._check_not_in_ready()
        if self.log.pending_snapshot is not None:
            raise ValueError("cannot compact while a received snapshot is pending")
        term = self.log.term(index)
        if term is None:
            raise ValueError(f"cannot compact to {index}: not in log")
        self.log.compact(Snapshot(SnapshotMeta(index, term), snapshot_data))

    def step(self, m: Message) -> None:
        """Handle one peer message (any message type; unknown senders are ignored)."""
        self._check_not_in_ready()
        if m.to != self.id or m.frm not in self.voters or m.frm == self.id:
            logger.debug("%s: dropping misaddressed %s", self.id, type(m).__name__)
            return
        if m.term > self.term:
            if isinstance(m, (MsgVote, MsgPreVote)):
                in_lease = (
                    self.check_quorum
                    and self.lead is not None
                    and self._election_elapsed < self.election_tick
                )
                if in_lease:
                    return
            if isinstance(m, MsgPreVote) or (isinstance(m, MsgPreVoteResp) and not m.reject):
                pass  # pre-votes never change terms
            elif isinstance(m, (MsgApp, MsgHeartbeat, MsgSnap)):
                self._become_follower(m.term, m.frm)
            else:
                self._become_follower(m.term, None)
        elif m.term < self.term:
            if isinstance(m, (MsgApp, MsgHeartbeat)) and (self.check_quorum or self.pre_vote):
                # A stale leader (or a peer stuck at a lower term behind pre-vote): tell it our term.
                self._send(MsgAppResp(m.frm, self.id, self.term, 0))
            elif isinstance(m, MsgPreVote):
                self._send(MsgPreVoteResp(m.frm, self.id, self.term, True))
            return

        if isinstance(m, (MsgVote, MsgPreVote)):
            self._handle_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    # --- outputs -------------------------------------------------------------------------

    def has_ready(self) -> bool:
        log = self.log
        return bool(
            self._msgs
            or self._read_states
            or log.stabled < log.last_index
            or log.pending_snapshot is not None
            or log.has_next_committed()
            or self.term != self._prev_hard_state.term
            or self.vote != self._prev_hard_state.vote
            or log.committed != self._prev_hard_state.commit
        )

    def ready(self) -> Ready | None:
        """The next batch of work, or ``None`` if there is nothing to do."""
        self._check_not_in_ready()
        if not self.has_ready():
            return None
        hs = HardState(self.term, self.vote, self.log.committed)
        rd = Ready(
            hard_state=hs if hs != self._prev_hard_state else None,
            entries=self.log.unstable_entries(),
            snapshot=self.log.pending_snapshot,
            messages=self._msgs,
            committed_entries=self.log.next_committed(self._max_apply),
            read_states=self._read_states,
        )
        self._msgs = []
        self._read_states = []
        self._in_ready = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """Everything in ``rd`` was persisted, sent and applied."""
        if rd is not self._in_ready:
            raise RuntimeError("advance() called with a Ready that is not the outstanding one")
        self._in_ready = None
        log = self.log
        if rd.hard_state is not None:
            self._prev_hard_state = rd.hard_state
        if rd.snapshot is not None:
            log.pending_snapshot = None
            log.applied = max(log.applied, rd.snapshot.meta.index)
        if rd.entries:
            log.stabled = rd.entries[-1].index
        if rd.committed_entries:
            log.applied = rd.committed_entries[-1].index

    # --- roles ---------------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.lead = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._reset_randomized_timeout()
        self._votes = {}
        self._prs = {}
        self._read_only.clear()
        self._reads_waiting_commit.clear()

    def _reset_randomized_timeout(self) -> None:
        self._randomized_timeout = self._rng.randint(self.election_tick, 2 * self.election_tick - 1)

    def _become_follower(self, term: int, lead: str | None) -> None:
        was = self.role
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead
        if was is not Role.FOLLOWER:
            logger.info("%s: became follower at term %d (leader %s)", self.id, term, lead)

    def _become_pre_candidate(self) -> None:
        self.role = Role.PRE_CANDIDATE
        self.lead = None
        self._votes = {}
        self._reset_randomized_timeout()

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        last = self.log.last_index
        for peer in self.voters:
            self._prs[peer] = Progress(last + 1, self._max_inflight)
        me = self._prs[self.id]
        me.match = last
        me.recent_active = True
        me.become_replicate()
        logger.info("%s: became leader at term %d", self.id, self.term)
        # The empty entry lets the leader commit (and so apply) everything before it (§5.4.2, §8).
        self._append_entries([Entry(self.term, last + 1)])
        self._bcast_append()

    def _campaign(self, *, pre: bool) -> None:
        if pre:
            self._become_pre_candidate()
            term = self.term + 1
        else:
            self._become_candidate()
            term = self.term
        if self._poll(self.id, True):
            if pre:
                self._campaign(pre=False)
            else:
                self._become_leader()
            return
        last_index, last_term = self.log.last_index, self.log.last_term
        for peer in self.others:
            if pre:
                self._send(MsgPreVote(peer, self.id, term, last_term, last_index))
            else:
                self._send(MsgVote(peer, self.id, term, last_term, last_index))

    def _poll(self, peer: str, granted: bool) -> bool | None:
        """Record a vote; True if won, False if lost, None if undecided."""
        self._votes.setdefault(peer, granted)
        yes = sum(1 for v in self._votes.values() if v)
        if yes >= self.quorum:
            return True
        if len(self._votes) - yes >= self.quorum:
            return False
        return None

    # --- message handling ----------------------------------------------------------------

    def _handle_vote_request(self, m: MsgVote | MsgPreVote) -> None:
        pre = isinstance(m, MsgPreVote)
        can_vote = (
            self.vote == m.frm or (self.vote is None and self.lead is None) or (pre and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.index, m.logTerm):
            if pre:
                self._send(MsgPreVoteResp(m.frm, self.id, m.term, False))
            else:
                self._election_elapsed = 0
                self.vote = m.frm
                self._send(MsgVoteResp(m.frm, self.id, m.term, False))
        elif pre:
            self._send(MsgPreVoteResp(m.frm, self.id, self.term, True))
        else:
            self._send(MsgVoteResp(m.frm, self.id, self.term, True))

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, MsgApp):
            self._election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif isinstance(m, MsgHeartbeat):
            self._election_elapsed = 0
            self.lead = m.frm
            self._handle_heartbeat(m)
        elif isinstance(m, MsgSnap):
            self._election_elapsed = 0
            self.lead = m.frm
            self._handle_snapshot(m)

    def _step_candidate(self, m: Message) -> None:
        if isinstance(m, MsgApp):
            self._become_follower(m.term, m.frm)
            self._handle_append(m)
        elif isinstance(m, MsgHeartbeat):
            self._become_follower(m.term, m.frm)
            self._handle_heartbeat(m)
        elif isinstance(m, MsgSnap):
            self._become_follower(m.term, m.frm)
            self._handle_snapshot(m)
        elif isinstance(m, MsgPreVoteResp if self.role is Role.PRE_CANDIDATE else MsgVoteResp):
            result = self._poll(m.frm, not m.reject)
            if result is True:
                if self.role is Role.PRE_CANDIDATE:
                    self._campaign(pre=False)
                else:
                    self._become_leader()
            elif result is False:
                self._become_follower(self.term, None)

    def _handle_append(self, m: MsgApp) -> None:
        log = self.log
        if m.index < log.committed:
            self._send(MsgAppResp(m.frm, self.id, self.term, log.committed))
            return
        last_new = log.maybe_append(m.index, m.logTerm, m.commit, m.entries)
        if last_new is not None:
            self._send(MsgAppResp(m.frm, self.id, self.term, last_new))
            return
        hint_index, hint_term = log.find_conflict_by_term(min(m.index, log.last_index), m.logTerm)
        self._send(MsgAppResp(m.frm, self.id, self.term, m.index, True, hint_index, hint_term))

    def _handle_heartbeat(self, m: MsgHeartbeat) -> None:
        self.log.commit_to(m.commit)
        self._send(MsgHeartbeatResp(m.frm, self.id, self.term, m.context))

    def _handle_snapshot(self, m: MsgSnap) -> None:
        log = self.log
        meta = m.snapshot.meta
        if meta.index <= log.committed:
            self._send(MsgAppResp(m.frm, self.id, self.term, log.committed))
            return
        if log.match_term(meta.index, meta.term):
            # We already hold the snapshot's last entry: it is committed; keep our log.
            log.commit_to(meta.index)
            self._send(MsgAppResp(m.frm, self.id, self.term, log.last_index))
            return
        logger.info("%s: installing snapshot at index %d term %d", self.id, meta.index, meta.term)
        log.restore(m.snapshot)
        self._send(MsgAppResp(m.frm, self.id, self.term, log.last_index))

    def _step_leader(self, m: Message) -> None:
        pr = self._prs.get(m.frm)
        if pr is None:
            return
        if isinstance(m, MsgAppResp):
            pr.recent_active = True
            if m.reject:
                next_probe = m.rejectHint
                if m.logTerm > 0:
                    next_probe, _ = self.log.find_conflict_by_term(m.rejectHint, m.logTerm)
                if pr.maybe_decrease_to(m.index, next_probe):
                    if pr.state is ProgressState.REPLICATE:
                        pr.become_probe()
                    self._send_append(m.frm)
                return
            was_paused = pr.is_paused()
            if pr.maybe_update(m.index):
                if pr.state is ProgressState.PROBE:
                    pr.become_replicate()
                elif pr.state is ProgressState.SNAPSHOT and pr.match + 1 >= self.log.first_index:
                    pr.become_probe()
                    pr.become_replicate()
                if self._maybe_commit():
                    self._bcast_append()
                    return
            if was_paused:
                self._send_append(m.frm)
            while self._send_append(m.frm, send_if_empty=False):
                pass
        elif isinstance(m, MsgHeartbeatResp):
            pr.recent_active = True
            pr.probe_sent = False
            if pr.inflight and pr.is_paused():
                pr.inflight.popleft()  # an append or its answer may be lost: let one more through
            if pr.state is ProgressState.SNAPSHOT and self._ticks - pr.snapshot_sent_at >= self.election_tick:
                # The snapshot (or its answer) was probably lost: find out where the follower is.
                pr.become_probe()
            if pr.match < self.log.last_index:
                self._send_append(m.frm)
            if m.context:
                for ctx, index in self._read_only.ack(m.context, m.frm, self.quorum):
                    self._read_states.append(ReadState(index, ctx))

    # --- leader helpers ------------------------------------------------------------------

    def _append_entries(self, entries: list[Entry]) -> None:
        self.log.append(entries)
        self._prs[self.id].maybe_update(self.log.last_index)
        self._maybe_commit()

    def _maybe_commit(self) -> bool:
        matches = sorted((pr.match for pr in self._prs.values()), reverse=True)
        index = matches[self.quorum - 1]
        log = self.log
        if index <= log.committed or log.term(index) != self.term:
            return False
        first_in_term = log.term(log.committed) != self.term
        log.commit_to(index)
        if first_in_term and self._reads_waiting_commit:
            waiting, self._reads_waiting_commit = self._reads_waiting_commit, []
            for ctx in waiting:
                self._start_read(ctx)
        return True

    def _start_read(self, context: bytes) -> None:
        if len(self.voters) == 1:
            self._read_states.append(ReadState(self.log.committed, context))
            return
        self._read_only.add(context, self.log.committed, self.id)
        self._bcast_heartbeat(context)

    def _bcast_append(self) -> None:
        for peer in self.others:
            if self._send_append(peer):
                while self._send_append(peer, send_if_empty=False):
                    pass

    def _bcast_heartbeat(self, context: bytes) -> None:
        committed = self.log.committed
        for peer in self.others:
            pr = self._prs[peer]
            self._send(MsgHeartbeat(peer, self.id, self.term, min(pr.match, committed), context))

    def _send_append(self, to: str, *, send_if_empty: bool = True) -> bool:
        """Send ``to`` the entries it needs next (or a snapshot); returns whether a message was sent."""
        pr = self._prs[to]
        if pr.is_paused():
            return False
        log = self.log
        prev = pr.next - 1
        prev_term = log.term(prev)
        if prev_term is None:
            if not pr.recent_active:
                return False
            snapshot = log.snapshot
            self._send(MsgSnap(to, self.id, self.term, snapshot))
            pr.become_snapshot(snapshot.meta.index, self._ticks)
            return True
        entries = (
            log.slice(pr.next, self._max_msg_entries, self._max_msg_bytes) if prev < log.last_index else []
        )
        if not entries and not send_if_empty:
            return False
        self._send(MsgApp(to, self.id, self.term, prev_term, prev, entries, log.committed))
        pr.sent(entries[-1].index if entries else prev)
        return True

    def _tick_heartbeat(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self.election_tick:
            self._election_elapsed = 0
            if self.check_quorum:
                active = 0
                for peer, pr in self._prs.items():
                    if peer == self.id or pr.recent_active:
                        active += 1
                    pr.recent_active = peer == self.id
                if active < self.quorum:
                    logger.warning("%s: stepping down at term %d: no quorum heard from", self.id, self.term)
                    self._become_follower(self.term, None)
                    return
        if self._heartbeat_elapsed >= self.heartbeat_tick:
            self._heartbeat_elapsed = 0
            self._bcast_heartbeat(self._read_only.last_context())

    # --- misc ----------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        self._msgs.append(m)

    def _check_not_in_ready(self) -> None:
        if self._in_ready is not None:
            raise RuntimeError("RaftNode used between ready() and advance()")
