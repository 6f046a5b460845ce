"""Unit tests of the sans-IO Raft core: nodes wired back to back, no I/O, no trio."""

from __future__ import annotations

import random

import pytest

from controller.raft.core import RaftNode, Role
from controller.raft.errors import NotLeaderError, PeersConfigError
from controller.raft.messages import (
    Entry,
    HardState,
    Message,
    MsgApp,
    MsgAppResp,
    MsgHeartbeat,
    MsgSnap,
    MsgVote,
    PersistentState,
    ReadState,
    Snapshot,
    SnapshotMeta,
    decode_message,
    encode_message,
)
from controller.raft.peers import check_self_id, parse_peers
from controller.raft.storage import MemoryStorage


class Cluster:
    """Synchronous cluster: every sent message is delivered in the next round unless its link
    is cut. Persists each Ready to a MemoryStorage before "sending" (the driver's contract)."""

    def __init__(
        self, n: int, *, pre_vote: bool = True, seed: int = 1, states: list[PersistentState] | None = None
    ):
        self.ids = [f"n{i}" for i in range(n)]
        self.storage = {i: MemoryStorage() for i in self.ids}
        self.rng = random.Random(seed)
        self.pre_vote = pre_vote
        self.nodes: dict[str, RaftNode] = {}
        for k, nid in enumerate(self.ids):
            if states is not None:
                st = states[k]
                self.storage[nid].save(st.hard_state, st.entries, None)
            self.nodes[nid] = self._make(nid)
        self.cut: set[tuple[str, str]] = set()
        self.in_flight: list[Message] = []
        self.applied: dict[str, list[Entry]] = {i: [] for i in self.ids}
        self.snapshots_restored: dict[str, list[Snapshot]] = {i: [] for i in self.ids}
        self.read_states: dict[str, list[ReadState]] = {i: [] for i in self.ids}
        self.sent: list[Message] = []

    def _make(self, nid: str) -> RaftNode:
        return RaftNode(
            nid,
            self.ids,
            election_tick=10,
            heartbeat_tick=1,
            rng=random.Random(self.rng.getrandbits(32)),
            pre_vote=self.pre_vote,
            storage_state=self.storage[nid].load(),
        )

    def restart(self, nid: str) -> RaftNode:
        self.nodes[nid] = self._make(nid)
        return self.nodes[nid]

    def isolate(self, nid: str) -> None:
        for other in self.ids:
            if other != nid:
                self.cut |= {(nid, other), (other, nid)}

    def heal(self) -> None:
        self.cut.clear()

    def process(self) -> None:
        for nid, node in self.nodes.items():
            while (rd := node.ready()) is not None:
                self.storage[nid].save(rd.hard_state, rd.entries, rd.snapshot)
                self.in_flight.extend(rd.messages)
                self.sent.extend(rd.messages)
                if rd.snapshot is not None:
                    self.snapshots_restored[nid].append(rd.snapshot)
                self.applied[nid].extend(rd.committed_entries)
                self.read_states[nid].extend(rd.read_states)
                node.advance(rd)

    def deliver(self, rounds: int = 20, drop: type | None = None) -> None:
        """Deliver until quiet (at most ``rounds`` rounds), losing messages of type ``drop``."""
        for _ in range(rounds):
            self.process()
            if not self.in_flight:
                return
            batch, self.in_flight = self.in_flight, []
            for m in batch:
                if (m.frm, m.to) not in self.cut and not (drop and isinstance(m, drop)):
                    self.nodes[m.to].step(m)
        self.process()

    def tick(self, n: int = 1, only: list[str] | None = None) -> None:
        for _ in range(n):
            for nid, node in self.nodes.items():
                if only is None or nid in only:
                    node.tick()
            self.deliver()

    def leaders(self) -> list[RaftNode]:
        return [n for n in self.nodes.values() if n.role is Role.LEADER]

    def elect(self, nid: str) -> RaftNode:
        self.nodes[nid].campaign()
        self.deliver()
        assert self.nodes[nid].is_leader
        return self.nodes[nid]


def test_three_nodes_elect_exactly_one_leader_and_replicate():
    c = Cluster(3)
    c.tick(30)
    leaders = c.leaders()
    assert len(leaders) == 1
    leader = leaders[0]
    res = leader.propose(b"hello")
    c.deliver()
    for nid in c.ids:
        assert [e.data for e in c.applied[nid] if e.data] == [b"hello"]
        assert c.nodes[nid].leader_id == leader.id
    assert res.term == leader.term


def test_single_node_elects_itself_and_commits():
    c = Cluster(1)
    c.tick(20)
    node = c.nodes["n0"]
    assert node.is_leader
    node.propose(b"a")
    c.process()
    assert [e.data for e in c.applied["n0"] if e.data] == [b"a"]


def test_propose_on_follower_raises_not_leader_with_leader_id():
    c = Cluster(3)
    leader = c.elect("n1")
    with pytest.raises(NotLeaderError) as info:
        c.nodes["n0"].propose(b"x")
    assert info.value.leader_id == leader.id


def test_prevote_keeps_isolated_node_from_inflating_terms_and_disrupting():
    c = Cluster(3, pre_vote=True)
    leader = c.elect("n0")
    term = leader.term
    c.isolate("n2")
    c.tick(100)
    assert c.nodes["n2"].term == term
    c.heal()
    c.tick(5)
    assert leader.is_leader
    assert leader.term == term


def test_without_prevote_isolated_node_inflates_its_term():
    """The contrast that shows pre-vote is what keeps the term stable above."""
    c = Cluster(3, pre_vote=False)
    leader = c.elect("n0")
    term = leader.term
    c.isolate("n2")
    c.tick(100)
    assert c.nodes["n2"].term > term + 2


def test_check_quorum_makes_isolated_leader_step_down_and_others_elect():
    c = Cluster(3)
    old = c.elect("n0")
    c.isolate("n0")
    c.tick(9)
    assert old.is_leader  # quorum is checked once per election timeout...
    c.tick(11)
    assert old.role is Role.FOLLOWER  # ...so it steps down within two of them
    with pytest.raises(NotLeaderError):
        old.propose(b"x")
    c.tick(30)
    new = [n for n in c.leaders() if n.id != "n0"]
    assert len(new) == 1
    assert new[0].term > 1


def test_follower_in_leader_lease_ignores_vote_requests():
    c = Cluster(3)
    leader = c.elect("n0")
    c.nodes["n1"].step(MsgVote("n1", "n2", leader.term + 5, 99, 99))
    assert c.nodes["n1"].term == leader.term
    rd = c.nodes["n1"].ready()
    assert rd is None or not rd.messages
    if rd:
        c.nodes["n1"].advance(rd)


def test_vote_is_durable_across_restart_no_second_vote_in_same_term():
    c = Cluster(3)
    n1 = c.nodes["n1"]
    n1.step(MsgVote("n1", "n0", 5, 0, 0))
    c.process()
    assert n1.vote == "n0"
    n1 = c.restart("n1")
    assert (n1.term, n1.vote) == (5, "n0")
    n1.step(MsgVote("n1", "n2", 5, 0, 0))
    rd = n1.ready()
    assert rd is not None
    assert [m.reject for m in rd.messages] == [True]
    n1.advance(rd)


def test_vote_refused_to_candidate_with_stale_log():
    entries = [Entry(1, 1, b"a"), Entry(2, 2, b"b")]
    c = Cluster(3, states=[PersistentState(HardState(2, None, 0), Snapshot(), entries)] * 3)
    node = c.nodes["n0"]
    node.step(MsgVote("n0", "n1", 3, 1, 5))  # longer but older last term
    rd = node.ready()
    assert rd is not None
    assert [m.reject for m in rd.messages] == [True]
    node.advance(rd)


def test_divergent_follower_suffix_replaced_with_fast_backtracking():
    # n0 and n1 share (1,1..5); n2 has a long divergent tail from term 2 (an old leader).
    common = [Entry(1, i, b"c%d" % i) for i in range(1, 6)]
    bad = [Entry(2, i, b"bad%d" % i) for i in range(6, 60)]
    good = [Entry(3, i, b"good%d" % i) for i in range(6, 10)]
    states = [
        PersistentState(HardState(3, None, 5), Snapshot(), common + good),
        PersistentState(HardState(3, None, 5), Snapshot(), common + good),
        PersistentState(HardState(3, None, 5), Snapshot(), common + bad),
    ]
    c = Cluster(3, states=states)
    c.elect("n0")
    c.deliver()
    rejects = [m for m in c.sent if isinstance(m, MsgAppResp) and m.reject and m.frm == "n2"]
    assert len(rejects) <= 2  # one hint jumps over the whole term-2 tail
    n0_log = [(e.index, e.term) for e in c.nodes["n0"].log.entries]
    n2_log = [(e.index, e.term) for e in c.nodes["n2"].log.entries]
    assert n2_log == n0_log
    assert not any(e.data.startswith(b"bad") for e in c.applied["n2"])


def test_old_term_entry_is_not_committed_by_counting_replicas():
    """Raft §5.4.2: a leader of term 3 replicating a term-2 entry to a majority must not
    commit it until an entry of term 3 is replicated too."""
    common = [Entry(1, 1, b"a")]
    states = [
        PersistentState(HardState(3, None, 1), Snapshot(), [*common, Entry(2, 2, b"old")]),
        PersistentState(HardState(3, None, 1), Snapshot(), common),
        PersistentState(HardState(3, None, 1), Snapshot(), common),
    ]
    c = Cluster(3, states=states)
    leader = c.nodes["n0"]
    leader.campaign()
    c.deliver(drop=MsgApp)
    assert leader.is_leader
    assert leader.term == 4
    # n1 acknowledges only the old entry (as if the append carried just that one).
    leader.step(MsgAppResp("n0", "n1", leader.term, 2))
    assert leader.committed == 1
    # Once the term-4 empty entry (index 3) is matched by n1, everything up to 3 commits.
    leader.step(MsgAppResp("n0", "n1", leader.term, 3))
    assert leader.committed == 3


def test_lagging_follower_gets_snapshot_and_catches_up():
    c = Cluster(3)
    leader = c.elect("n0")
    c.isolate("n2")
    for i in range(20):
        leader.propose(b"e%d" % i)
    c.deliver()
    applied = leader.applied
    leader.compact(applied, b"image@%d" % applied)
    assert leader.log.first_index == applied + 1
    c.heal()
    c.tick(3)
    n2 = c.nodes["n2"]
    assert [s.data for s in c.snapshots_restored["n2"]] == [b"image@%d" % applied]
    assert any(isinstance(m, MsgSnap) and m.to == "n2" for m in c.sent)
    leader.propose(b"after")
    c.deliver()
    assert n2.committed == leader.committed
    assert c.applied["n2"][-1].data == b"after"
    # Restarted from its storage, n2 comes back from the snapshot plus the log after it.
    n2 = c.restart("n2")
    assert n2.log.snapshot.meta.index == applied
    assert n2.log.last_index == leader.log.last_index


def test_snapshot_message_for_an_already_held_entry_keeps_the_log():
    c = Cluster(3)
    leader = c.elect("n0")
    for i in range(5):
        leader.propose(b"e%d" % i)
    c.deliver()
    n1 = c.nodes["n1"]
    last = n1.log.last_index
    snap = Snapshot(SnapshotMeta(3, leader.term), b"img")
    n1.step(MsgSnap("n1", "n0", leader.term, snap))
    c.process()
    assert n1.log.last_index == last
    assert c.snapshots_restored["n1"] == []


def test_read_index_released_only_after_quorum_heartbeat():
    c = Cluster(3)
    leader = c.elect("n0")
    c.isolate("n0")
    leader.read_index(b"r1")
    c.deliver()
    assert c.read_states["n0"] == []
    c.heal()
    c.tick(1)
    assert c.read_states["n0"] == [ReadState(leader.committed, b"r1")]


def test_read_index_waits_for_first_commit_of_the_term():
    c = Cluster(3)
    leader = c.nodes["n0"]
    leader.campaign()
    c.deliver(drop=MsgApp)  # elected, but the empty entry never reached anyone
    assert leader.is_leader
    assert leader.committed == 0
    leader.read_index(b"r1")
    c.process()
    assert c.read_states["n0"] == []
    c.tick(2)
    assert c.read_states["n0"] == [ReadState(1, b"r1")]


def test_read_index_on_follower_refuses_with_leader_id():
    c = Cluster(3)
    c.elect("n2")
    with pytest.raises(NotLeaderError) as info:
        c.nodes["n0"].read_index(b"r")
    assert info.value.leader_id == "n2"


def test_stale_leader_learns_higher_term_from_append_reply():
    c = Cluster(3)
    old = c.elect("n0")
    c.isolate("n0")
    c.tick(30, only=["n1", "n2"])
    assert any(n.is_leader for n in c.nodes.values() if n.id != "n0")
    # n0 has not ticked, so it still believes it leads; its next heartbeat meets a higher term.
    assert old.is_leader
    c.heal()
    c.tick(1, only=["n0"])
    assert not old.is_leader
    assert old.term == c.nodes["n1"].term


def test_ready_contract_forbids_steps_before_advance():
    c = Cluster(3)
    node = c.nodes["n0"]
    node.campaign()
    rd = node.ready()
    assert rd is not None
    with pytest.raises(RuntimeError):
        node.tick()
    node.advance(rd)
    node.tick()


def test_ready_orders_hard_state_entries_before_messages():
    c = Cluster(3)
    leader = c.elect("n0")
    leader.propose(b"x")
    rd = leader.ready()
    assert rd is not None
    assert [e.data for e in rd.entries] == [b"x"]
    assert any(isinstance(m, MsgApp) and m.entries and m.entries[-1].data == b"x" for m in rd.messages)
    leader.advance(rd)


def test_message_codec_roundtrip_is_compact():
    m = MsgApp("n1", "n0", 7, 6, 41, [Entry(7, 42, b"\x00\x01payload")], 40)
    data = encode_message(m)
    assert decode_message(data) == m
    assert len(data) < 40
    hb = MsgHeartbeat("n2", "n0", 7, 40, b"ctx")
    assert decode_message(encode_message(hb)) == hb


def test_parse_peers_accepts_upstream_format():
    assert parse_peers("n0-127.0.0.1:9878;n1-127.0.0.1:9879;n2-127.0.0.1:9880;") == {
        "n0": "127.0.0.1:9878",
        "n1": "127.0.0.1:9879",
        "n2": "127.0.0.1:9880",
    }
    check_self_id("n1", parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2"))


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("", "empty"),
        ("n0:127.0.0.1:9878", "not 'id-host:port'"),
        ("n0-127.0.0.1", "host:port"),
        ("n0-127.0.0.1:99999", "host:port"),
        ("n0-127.0.0.1:1;n0-127.0.0.1:2", "duplicate peer id"),
        ("n0-127.0.0.1:1;n1-127.0.0.1:1", "used by both"),
        ("n 0-127.0.0.1:1", "bad peer id"),
    ],
)
def test_parse_peers_rejects_malformed_specs_with_clear_errors(spec, needle):
    with pytest.raises(PeersConfigError, match=needle):
        parse_peers(spec)


def test_self_id_must_be_a_peer():
    with pytest.raises(PeersConfigError, match="n9"):
        check_self_id("n9", parse_peers("n0-127.0.0.1:1"))
