"""Model test of controller-mode failover (hypothesis): three replicas of one group and a Raft
controller in one process, and random sequences of sends (one at a time, concurrent, batches), consumer
offset commits, crashes and clean stops of the master or of any replica, restarts, sends cut short
by the master's crash, a message the master appended but never replicated, and a restart of the
controller -- then, at checkpoints and at the end, what a RocketMQ user relies on:

- every message answered SEND_OK (``allAckInSyncStateSet``: held by the whole SyncStateSet) is
  served by whichever replica is master, at the queue offset and physical offset of its answer;
- a queue's offsets run without a gap, each message is one that was sent and appears once (no
  retries here: a body twice is a duplicate the store made);
- a message a consumer pulled from any replica stays where it was read (a slave serves only
  what the SyncStateSet confirmed);
- every live slave, caught up, holds the master's commit log byte for byte, its consume-queue units
  and its epoch entries;
- a committed consumer offset reads back as a value that was committed (a failover may lose the
  commits since the last metadata sync, never invent one), and a synced slave has the master's;
- the controller names the master and its epoch.

A message whose send failed, timed out or was refused may or may not be there (its producer would
retry it). ``FAILOVER_MODEL_EXAMPLES`` sets the number of sequences (4 by default: each failover
takes a second or so of heartbeat timeout), ``FAILOVER_MODEL_MIN_OPS`` their least length (4)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio
from hypothesis import given
from hypothesis import strategies as st

from remoting.codes import RequestCode, ResponseCode
from remoting.errors import RemotingError
from remoting.protocol.message import StoredMessage, decode_offset_msg_id
from tests.integration.broker_env import model_settings, run_in_temp_dir, wait_until
from tests.integration.broker_requests import (
    batch_body,
    describe,
    send_header,
    send_request,
    simple_request,
)
from tests.integration.replication_kit import commit_log_bytes, consume_queue_units
from tests.integration.test_controller_mode import (
    NAME,
    QUEUES,
    TOPIC,
    ControllerMode,
    Node,
    append_unreplicated,
    controller_mode,
)

NODES = ("a", "b", "c")
GROUP = "FailoverModelG"
#: how long a step may wait for an election, a catch-up or a message to become readable
SETTLE = 20.0
OVERRIDES = {
    # a dead slave leaves the SyncStateSet after 3 s (sends wait for it until then)
    "haMaxTimeSlaveNotCatchup": 3000,
    "syncFlushTimeout": 3000,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
}


@dataclass
class Model:
    #: (queue, queue offset) -> (body, physical offset) of every message answered SEND_OK
    acked: dict[tuple[int, int], tuple[bytes, int]] = field(default_factory=dict)
    #: bodies whose send failed, timed out or was refused: stored or not
    maybe: set[bytes] = field(default_factory=set)
    #: (queue, queue offset) -> body of every message a consumer pulled, from any replica
    observed: dict[tuple[int, int], bytes] = field(default_factory=dict)
    #: queue -> every offset committed (or perhaps committed: the answer was lost) so far
    committed: dict[int, set[int]] = field(default_factory=dict)
    #: response codes of the sends that were not SEND_OK, for the failure notes
    refusals: dict[int, int] = field(default_factory=dict)
    serial: int = 0

    def body(self, size: int) -> bytes:
        self.serial += 1
        head = f"f{self.serial}:".encode()
        return head + b"y" * max(0, size - len(head))


def epochs_with_data(pairs: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """The epoch entries under which messages below ``end`` were written: a slave learns an epoch
    from the data it receives (as upstream's AutoSwitchHAClient), so a master's epoch that wrote
    nothing has no entry there."""
    out = []
    for i, (epoch, start) in enumerate(pairs):
        stop = pairs[i + 1][1] if i + 1 < len(pairs) else end
        if start < min(stop, end):
            out.append((epoch, start))
    return out


class Run:
    def __init__(self, env: ControllerMode) -> None:
        self.env = env
        self.model = Model()
        self.nodes: dict[str, Node | None] = dict.fromkeys(NODES)
        self.peers = len(env.controller_addrs)

    # --- the replicas ------------------------------------------------------------------------

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n is not None]

    def roles(self) -> str:
        out = [f"controller peers up {sorted(self.env.controllers)}"] if self.peers > 1 else []
        for name, n in self.nodes.items():
            if n is None:
                out.append(f"{name}: down")
            else:
                role = "master" if n.is_master else "slave" if n.is_slave else "starting"
                store = n.broker.store
                out.append(
                    f"{name}: {role} epoch {n.epoch} max {store.max_phy_offset} confirm {store.confirm_offset}"
                )
        return "; ".join(out)

    async def start(self, name: str) -> None:
        if self.nodes[name] is None:
            self.nodes[name] = await self.env.start(name, **OVERRIDES)

    async def stop(self, name: str, *, crash: bool) -> None:
        node = self.nodes[name]
        if node is not None:
            self.nodes[name] = None
            await self.env.stop(node, crash=crash)

    def current_master(self) -> Node | None:
        masters = [n for n in self.live() if n.is_master]
        assert len(masters) <= 1, f"two masters: {self.roles()}"
        return masters[0] if masters else None

    async def master(self) -> Node:
        """The live master; when none is elected in time (no SyncStateSet member alive), every
        stopped replica is started and one must be."""
        for attempt in range(2):
            with trio.move_on_after(SETTLE / 2 if attempt == 0 else SETTLE):
                while (m := self.current_master()) is None:
                    await trio.sleep(0.02)
                return m
            await self.start_all()
        raise AssertionError(f"no master elected with every replica and controller up: {self.roles()}")

    async def start_all(self) -> None:
        for peer in range(self.peers):
            await self.start_peer(peer)
        for name in NODES:
            await self.start(name)

    async def wait(self, predicate: Callable[[], bool], what: str) -> None:
        try:
            await wait_until(predicate, SETTLE, what)
        except AssertionError as exc:
            exc.add_note(self.roles())
            raise

    # --- the operations ----------------------------------------------------------------------

    async def deliver(self, node: Node, queue: int, bodies: list[bytes], *, batch: bool = False) -> None:
        """One send (SEND_BATCH_MESSAGE with ``batch``): acknowledged, every body is at its queue
        offset and physical offset; else any of them may be stored."""
        if batch:
            cmd = send_request(
                TOPIC, batch_body(bodies), code=RequestCode.SEND_BATCH_MESSAGE, queue_id=queue, batch=True
            )
        else:
            (body,) = bodies
            cmd = send_request(TOPIC, body, queue_id=queue)
        try:
            response = await self.env.call(node.addr, cmd)
        except RemotingError:
            self.model.maybe.update(bodies)
            return
        if response.code != ResponseCode.SUCCESS:
            self.model.maybe.update(bodies)
            self.model.refusals[response.code] = self.model.refusals.get(response.code, 0) + 1
            return
        header = send_header(response)
        ids = header.msgId.split(",")
        assert (header.queueId, len(ids)) == (queue, len(bodies)), describe(response)
        for i, (body, msg_id) in enumerate(zip(bodies, ids, strict=True)):
            key = (queue, header.queueOffset + i)
            assert key not in self.model.acked, (
                f"queue offset {key} answered twice: {self.model.acked[key][0][:12]!r} and {body[:12]!r}"
            )
            self.model.acked[key] = (body, decode_offset_msg_id(msg_id)[2])

    async def send_one(self, node: Node, queue: int, body: bytes) -> None:
        await self.deliver(node, queue, [body])

    async def send_batch(self, queue: int, count: int) -> None:
        await self.deliver(
            await self.master(), queue, [self.model.body(200) for _ in range(count)], batch=True
        )

    async def send(self, queue: int, count: int, size: int, concurrent: bool) -> None:
        node = await self.master()
        bodies = [self.model.body(size) for _ in range(count)]
        if concurrent:
            async with trio.open_nursery() as nursery:
                for i, body in enumerate(bodies):
                    nursery.start_soon(self.send_one, node, (queue + i) % QUEUES, body)
        else:
            for body in bodies:
                await self.send_one(node, queue, body)

    async def sends_cut_by_a_crash(self, queue: int, count: int, delay_ms: int) -> None:
        node = await self.master()
        name = node.name
        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(self.send_one, node, (queue + i) % QUEUES, self.model.body(600))
            await trio.sleep(delay_ms / 1000)
            await self.stop(name, crash=True)

    async def pull(self, name: str, queue: int) -> None:
        """A consumer reads a queue from one replica (a slave serves what the SyncStateSet
        confirmed): what it saw must stay, whoever is master later."""
        node = self.nodes[name]
        if node is None:
            return
        try:
            got = await self.env.pull_queue(node, queue, GROUP)
        except RemotingError:
            return
        for msg in got:
            key = (queue, msg.queue_offset)
            seen = self.model.observed.setdefault(key, msg.body)
            assert seen == msg.body, f"{name} served {key} as {msg.body[:12]!r}, earlier {seen[:12]!r}"

    async def commit(self, queue: int, offset: int) -> None:
        node = await self.master()
        cmd = simple_request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            consumerGroup=GROUP,
            topic=TOPIC,
            queueId=queue,
            commitOffset=offset,
        )
        self.model.committed.setdefault(queue, set()).add(offset)  # a lost answer may still have stored it
        try:
            response = await self.env.call(node.addr, cmd)
        except RemotingError:
            return
        assert response.code == ResponseCode.SUCCESS, describe(response)

    async def unreplicated(self) -> None:
        """A message the master appended and nobody else got (its producer saw no answer)."""
        node = await self.master()
        body = self.model.body(300)
        self.model.maybe.add(body)
        await append_unreplicated(node, body)

    async def restart_controller(self) -> None:
        """Every controller peer stops, then starts again on its Raft log."""
        for peer in sorted(self.env.controllers):
            await self.env.stop_controller(peer)
        await trio.sleep(0.2)
        for peer in range(self.peers):
            await self.env.start_controller(peer=peer)

    async def start_peer(self, peer: int) -> None:
        if peer not in self.env.controllers:
            await self.env.start_controller(peer=peer)

    async def stop_peer(self, peer: int) -> None:
        if peer in self.env.controllers:
            await self.env.stop_controller(peer)

    async def stop_controller_leader(self) -> None:
        """The leading controller peer dies (at once, or once one leads: up to a second)."""
        with trio.move_on_after(1.0):
            while (leader := await self.env.controller_leader()) is None:
                await trio.sleep(0.05)
            await self.stop_peer(leader)

    async def apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "send":
            await self.send(*op[1:])
        elif kind == "batch":
            await self.send_batch(*op[1:])
        elif kind == "sends_crash":
            await self.sends_cut_by_a_crash(*op[1:])
        elif kind == "pull":
            await self.pull(NODES[op[1]], op[2])
        elif kind == "commit":
            await self.commit(*op[1:])
        elif kind == "crash_master":
            await self.stop((await self.master()).name, crash=True)
        elif kind in ("crash", "stop"):
            await self.stop(NODES[op[1]], crash=kind == "crash")
        elif kind == "start":
            await self.start(NODES[op[1]])
        elif kind == "unreplicated":
            await self.unreplicated()
        elif kind == "controller_restart":
            await self.restart_controller()
        elif kind == "ctl_stop":
            await self.stop_peer(op[1])
        elif kind == "ctl_start":
            await self.start_peer(op[1])
        elif kind == "ctl_stop_leader":
            await self.stop_controller_leader()
        elif kind == "check":
            await self.check()
        else:
            raise AssertionError(f"unknown op {op}")

    # --- the checks --------------------------------------------------------------------------

    async def check(self) -> None:
        if 2 * len(self.env.controllers) <= self.peers:
            # no controller quorum: a replica that (re)started cannot join its group, nor can the
            # controller answer -- the peers come back first
            for peer in range(self.peers):
                await self.start_peer(peer)
        m = await self.master()
        slaves = [n for n in self.live() if n is not m]
        mstore = m.broker.store

        def caught_up() -> bool:
            # the epochs too: a replica back from a crash may hold as many bytes as the master,
            # of its own old epoch, until its handshake truncates them (seen: a crashed master's
            # unreplicated tail exactly as long as what its successor appended meanwhile)
            end = mstore.max_phy_offset
            epochs = epochs_with_data(mstore.epoch_file.pairs(), end)
            return mstore.dispatch_behind_bytes == 0 and all(
                s.is_slave
                and s.broker.store.max_phy_offset == end
                and s.broker.store.dispatch_behind_bytes == 0
                and epochs_with_data(s.broker.store.epoch_file.pairs(), end) == epochs
                for s in slaves
            )

        await self.wait(caught_up, "the slaves to catch up")
        assert self.current_master() is m, f"the master changed while nothing happened: {self.roles()}"

        # what a consumer reads from the master: every acknowledged message, once the
        # SyncStateSet's acks have made it readable
        acked = self.model.acked
        want_ends = {q: 1 + max((o for qq, o in acked if qq == q), default=-1) for q in range(QUEUES)}
        pulled: dict[int, list[StoredMessage]] = {}
        with trio.move_on_after(SETTLE):
            while True:
                pulled = {q: await self.env.pull_queue(m, q, GROUP) for q in range(QUEUES)}
                if all(len(pulled[q]) >= want_ends[q] for q in range(QUEUES)):
                    break
                await trio.sleep(0.05)
        seen: set[bytes] = set()
        for q in range(QUEUES):
            got = pulled[q]
            assert len(got) >= want_ends[q], (
                f"queue {q}: the master serves {len(got)} messages, acknowledged up to offset {want_ends[q] - 1}; "
                f"{self.roles()}"
            )
            for i, msg in enumerate(got):
                assert msg.queue_offset == i, f"queue {q}: offset {msg.queue_offset} at position {i}"
                assert msg.body not in seen, f"queue {q}@{i}: {msg.body[:12]!r} stored twice"
                seen.add(msg.body)
                want = acked.get((q, i))
                if want is not None:
                    assert (msg.body, msg.physical_offset) == want, (
                        f"queue {q}@{i}: {msg.body[:12]!r} at {msg.physical_offset}, acknowledged "
                        f"{want[0][:12]!r} at {want[1]}"
                    )
                else:
                    assert msg.body in self.model.maybe, f"queue {q}@{i}: {msg.body[:12]!r} was never sent"
                seen_before = self.model.observed.get((q, i))
                assert seen_before in (None, msg.body), (
                    f"queue {q}@{i}: a consumer read {seen_before[:12]!r} there before, now {msg.body[:12]!r}"
                )
            lost = [k for k in self.model.observed if k[0] == q and k[1] >= len(got)]
            assert not lost, f"queue {q}: offsets {sorted(lost)} were read by a consumer and are gone"

        # every slave: the master's bytes, units and epochs
        end = mstore.max_phy_offset
        master_log = commit_log_bytes(self.env.root / m.name / "store", 0, end)
        for s in slaves:
            sstore = s.broker.store
            assert epochs_with_data(sstore.epoch_file.pairs(), end) == epochs_with_data(
                mstore.epoch_file.pairs(), end
            ), f"epochs of {s.name} {sstore.epoch_file.pairs()}, master {m.name} {mstore.epoch_file.pairs()}"
            assert commit_log_bytes(self.env.root / s.name / "store", 0, end) == master_log, (
                f"{s.name}'s commit log differs from master {m.name}'s below {end}"
            )
            for q in range(QUEUES):
                try:
                    await self.wait(
                        lambda s=s, q=q: (
                            consume_queue_units(s.broker.store, TOPIC, q)
                            == consume_queue_units(mstore, TOPIC, q)
                        ),
                        f"{s.name}'s consume queue {q} to match the master's",
                    )
                except AssertionError as exc:
                    exc.add_note(
                        f"{s.name}: {consume_queue_units(s.broker.store, TOPIC, q)}; "
                        f"master: {consume_queue_units(mstore, TOPIC, q)}"
                    )
                    raise

        # offsets: a committed value or none; a synced slave agrees
        for q in range(QUEUES):
            got = m.broker.offsets.query(GROUP, TOPIC, q)
            assert got == -1 or got in self.model.committed.get(q, set()), (
                f"master's offset of queue {q}: {got}, committed {sorted(self.model.committed.get(q, ()))}"
            )
        for s in slaves:
            # the master's offsets reach the slave; an offset the master lacks stays there (upstream's
            # putAll: a commit an old master took just before it died, a value that was committed)
            await s.broker.replication.slave_sync.sync_all(m.addr)
            for q in range(QUEUES):
                want = m.broker.offsets.query(GROUP, TOPIC, q)
                got = s.broker.offsets.query(GROUP, TOPIC, q)
                assert got == want or (want == -1 and got in self.model.committed.get(q, set())), (
                    f"{s.name}'s offset of queue {q} after a sync: {got}, master {want}"
                )

        info = (await self.env.replicas(within=SETTLE)).replicasInfoTable[NAME]
        assert (info.masterBrokerId, info.masterEpoch) == (m.controller_id, m.epoch), (
            f"controller: master {info.masterBrokerId} epoch {info.masterEpoch}; {self.roles()}"
        )


# --- the sequences ---------------------------------------------------------------------------------

node_ix = st.integers(0, len(NODES) - 1)
queue_ix = st.integers(0, QUEUES - 1)
PEERS = 3
peer_ix = st.integers(0, PEERS - 1)
broker_ops = [
    st.tuples(st.just("send"), queue_ix, st.integers(1, 6), st.integers(1, 6000), st.booleans()),
    st.tuples(st.just("batch"), queue_ix, st.integers(1, 16)),
    st.tuples(st.just("sends_crash"), queue_ix, st.integers(1, 8), st.integers(0, 30)),
    st.tuples(st.just("commit"), queue_ix, st.integers(0, 40)),
    st.tuples(st.just("pull"), node_ix, queue_ix),
    st.just(("crash_master",)),
    st.tuples(st.just("crash"), node_ix),
    st.tuples(st.just("stop"), node_ix),
    st.tuples(st.just("start"), node_ix),
    st.just(("unreplicated",)),
    st.just(("controller_restart",)),
    st.just(("check",)),
]
#: what a group of three controller peers adds: a peer stops or starts, the leading peer stops
peer_ops = [
    st.tuples(st.just("ctl_stop"), peer_ix),
    st.tuples(st.just("ctl_start"), peer_ix),
    st.just(("ctl_stop_leader",)),
]
MIN_OPS = int(os.environ.get("FAILOVER_MODEL_MIN_OPS", "4"))
ops = st.lists(st.one_of(*broker_ops), min_size=MIN_OPS, max_size=20)
ops_with_peers = st.lists(st.one_of(*broker_ops, *peer_ops), min_size=MIN_OPS, max_size=20)


async def run_sequence(root: str, sequence: list[tuple], peers: int = 1) -> None:
    async with controller_mode(Path(root), deadline=600, peers=peers) as env:
        run = Run(env)
        await run.start("a")
        await run.wait(lambda: run.nodes["a"] is not None and run.nodes["a"].is_master, "a to lead")
        await env.create_topic(run.nodes["a"])  # type: ignore[arg-type]
        await run.start("b")
        await run.start("c")
        a = run.nodes["a"]
        assert a is not None
        await run.wait(lambda: a.broker.replication.sync_state_set == {1, 2, 3}, "SyncStateSet {1, 2, 3}")
        for i, op in enumerate([*sequence, ("start_all",)]):
            try:
                if op[0] == "start_all":
                    await run.start_all()
                    await run.check()
                else:
                    await run.apply(op)
            except AssertionError as exc:
                exc.add_note(
                    f"at op {i}: {op}; {run.roles()}; refusals {run.model.refusals}; "
                    f"{len(run.model.acked)} acknowledged, {len(run.model.maybe)} unknown"
                )
                raise


EXAMPLES = int(os.environ.get("FAILOVER_MODEL_EXAMPLES", "4"))


@model_settings(EXAMPLES)
@given(sequence=ops)
def test_a_failover_loses_nothing_acknowledged(sequence: list[tuple]) -> None:
    run_in_temp_dir("failover-model-", run_sequence, sequence)


PEERS_EXAMPLES = int(os.environ.get("FAILOVER_MODEL_PEERS_EXAMPLES", "3"))


@model_settings(PEERS_EXAMPLES)
@given(sequence=ops_with_peers)
def test_a_failover_loses_nothing_acknowledged_while_controller_peers_die(sequence: list[tuple]) -> None:
    """The same, with a Raft group of three controller peers, any of which -- the leader on
    purpose -- stops and starts between the other operations."""
    run_in_temp_dir("failover-model-peers-", run_sequence, sequence, PEERS)
