"""Model test of a consumer group (hypothesis): Python push consumers of one group join and leave a
real broker while a producer sends, and what a RocketMQ user relies on holds throughout:

- every acknowledged message is consumed (at least once) while the group has a member -- also when
  listeners are slow, or answer "later" (orderly: the queue suspended a moment and the messages
  consumed again; concurrent: sent back, to the retry topic);
- orderly consumption: no two members consume a queue at the same time (the broker's queue locks),
  and a queue is consumed without a gap -- offset ``n`` only after ``n - 1`` (a queue handed over
  may repeat what its last owner had not committed yet: at least once, in order);
- when the last member leaves (gracefully) the group's committed offsets are the queues' ends, the
  broker lists no consumer of the group and holds none of its queue locks but a killed member's (a
  lock left behind stalls the next orderly consumer of the queue for the lock's 60 s).

Members are separate client instances (their own client ids and connections): most in this process,
some in a process of their own (``consumer_member_child``), which a sequence kills with SIGKILL --
the broker tells the group when the connection closes and the others take the queues over from the
committed offsets; an orderly member's locks outlive it until they expire (here after
``LOCK_MAX_LIVE_MS``; upstream 60 s). Each sequence is concurrent or orderly throughout, with
rebalance, lock, heartbeat and offset intervals shortened. Sequences also restart the broker on
its port, gracefully or as a crash (its committed offsets may go back to its last flush: consumed
again), also while the producer sends (a send cut short may or may not be stored). A restarted
broker holds no queue lock and hears its consumers again one by one; the member heard first takes
and locks every queue while the others still hold client-side locks (upstream's clients go on
consuming under them; the Python client drops them with its connection to the master, see
``PushConsumer.master_connection_lost``). The one overlap no client can prevent is a listener call
already running when the broker lost its locks: the next owner of the queue may start meanwhile. So
the orderly check lets a call that began before a restart ended overlap another member's; every
other overlap is a violation.

A second variant runs the sequences on three controller-mode replicas (``allAckInSyncStateSet``),
where a broker restart is a failover: the master crashes or stops, a replica of its SyncStateSet
takes over (routed by the name server; the members poll routes every 0.3 s, the producer every
30 s, as by default, and asks again when it cannot reach the old master; the new master holds no
queue lock either), and the old master returns as a slave. The same promises hold across it: an
acknowledged message is on every replica of the SyncStateSet, and the members commit their offsets
to whichever replica is master. ``CONSUMER_MODEL_EXAMPLES`` sets the number of sequences (4),
``CONSUMER_FAILOVER_MODEL_EXAMPLES`` the failover variant's (2)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import trio
from hypothesis import given
from hypothesis import strategies as st

from broker.controller import BrokerController
from client.instance import ClientInstance
from client.message import ConsumeStatus, Message, MessageExt, MessageQueue, MQClientError, SendStatus
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.errors import RemotingError
from remoting.protocol.broker import ConsumeFromWhere
from remoting.protocol.namesrv import TopicRouteData
from tests.integration.broker_env import model_settings, run_in_temp_dir, wait_until
from tests.integration.replication_kit import Group as Servers
from tests.integration.replication_kit import Running, replication_group
from tests.integration.test_controller_mode import ControllerMode, Node, controller_mode

TOPIC = "GroupModelTopic"
GROUP = "GroupModelG"
QUEUES = 4
MAX_MEMBERS = 4
#: the broker's queue-lock lifetime (upstream's ``rocketmq.broker.rebalance.lockMaxLiveTime``, 60 s):
#: a killed orderly member's queues are free again after it
LOCK_MAX_LIVE_MS = 3000
#: how long the group may take to consume what was sent (rebalances and lock hand-overs included)
SETTLE = 30.0
FAST = {
    "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    "rebalance_interval": 0.3,
    "persist_offset_interval": 0.2,
    "lock_interval": 0.3,
    "broker_suspend_max_time": 1.0,
    "consumer_timeout_when_suspend": 3.0,
    "pull_delay_on_exception": 0.1,
    "await_termination_when_shutdown": 5.0,
    "suspend_current_queue_time": 0.05,
}


@dataclass
class Member:
    name: str
    leave: trio.Event = field(default_factory=trio.Event)
    started: trio.Event = field(default_factory=trio.Event)
    gone: trio.Event = field(default_factory=trio.Event)
    consumer: PushConsumer | None = None
    #: the member's own process (see :mod:`tests.integration.consumer_member_child`), if it has one
    process: trio.Process | None = None


@dataclass
class Group:
    """What the members did and what the model expects."""

    orderly: bool
    #: body -> (queue, queue offset) of every message answered SEND_OK
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    #: sends that failed (a timeout, the broker restarting): stored or not, consumed or not
    unsure: int = 0
    #: bodies consumed (at least once)
    consumed: set[bytes] = field(default_factory=set)
    #: queue -> highest offset consumed so far
    highest: dict[int, int] = field(default_factory=dict)
    #: queue -> (member inside a listener call for it now, when the call began)
    inside: dict[int, tuple[str, float]] = field(default_factory=dict)
    #: when the master's lock table was last lost (a restart or failover began) and when that
    #: ended (``math.inf`` while it goes on): see :meth:`listener`
    lost_locks: tuple[float, float] = (-math.inf, -math.inf)
    #: broken promises, named when the sequence checks
    violations: list[str] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    serial: int = 0
    #: seconds a listener call takes
    work: float = 0.001
    #: listener calls still to answer "later" (orderly: suspend the queue a moment; concurrent:
    #: reconsume later, i.e. send the messages back)
    refuse: int = 0

    def add_member(self, kind: str) -> Member:
        """A new member, named ``kind`` (m: in this process, p: in its own) and its number."""
        member = Member(f"{kind}{len(self.members)}")
        self.members.append(member)
        return member

    def ends(self, broker: BrokerController) -> dict[int, int]:
        """Queue -> its end offset on ``broker``, checked against the model: it holds every
        acknowledged message and no more than the failed sends besides (a send whose answer was
        lost may have been stored)."""
        store = broker.store
        ends = {q: store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
        beyond = [(body, qo) for body, qo in self.acked.items() if qo[1] >= ends[qo[0]]]
        assert not beyond, f"acknowledged messages beyond the queues' ends {ends}: {beyond[:5]}"
        extra = sum(ends.values()) - len(self.acked)
        assert 0 <= extra <= self.unsure, (
            f"{extra} messages stored besides the acknowledged ({self.unsure} sends failed)"
        )
        return ends

    def record(self, name: str, q: int, o: int, body: bytes) -> None:
        """Member ``name`` was given the message at ``q@o``."""
        if self.acked.get(body, (q, o)) != (q, o):
            self.violations.append(f"{body!r} delivered from {q}@{o}, sent to {self.acked[body]}")
        if self.orderly and o > self.highest.get(q, -1) + 1:
            self.violations.append(
                f"{name} consumes queue {q}@{o} before {self.highest.get(q, -1) + 1} was consumed"
            )
        self.highest[q] = max(self.highest.get(q, -1), o)
        self.consumed.add(body)

    def listener(self, name: str) -> Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]:
        """Member ``name``'s listener: records what it is given and checks the promises above."""

        async def on_messages(msgs: list[MessageExt]) -> ConsumeStatus:
            queues = {m.queue_id for m in msgs}
            if self.orderly:
                now = trio.current_time()
                for q in queues:
                    other = self.inside.get(q)
                    # a call that began before the master lost its locks (and was already running
                    # when that member learnt it) may overlap the next owner's: no client can stop
                    # it -- every other overlap is a broken promise
                    if other is not None and other[1] >= self.lost_locks[1]:
                        self.violations.append(f"{name} consumes queue {q} while {other[0]} does")
                    self.inside[q] = (name, now)
            try:
                for m in msgs:
                    self.record(name, m.queue_id, m.queue_offset, m.body)
                await trio.sleep(self.work)  # a consumer's work: others run meanwhile
                if self.refuse > 0:
                    self.refuse -= 1
                    if self.orderly:
                        return ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    return ConsumeStatus.RECONSUME_LATER
            finally:
                if self.orderly:
                    for q in queues:
                        if self.inside.get(q, ("",))[0] == name:
                            del self.inside[q]
            return ConsumeStatus.CONSUME_SUCCESS

        return on_messages


class Layout(Protocol):
    """Where the group consumes: one broker (:class:`Cluster`) or a controller-mode group of
    replicas (:class:`Replicated`)."""

    @property
    def namesrv_addr(self) -> str: ...

    @property
    def broker(self) -> BrokerController:
        """The broker that serves the group: the master."""
        ...

    async def restart(self, crash: bool) -> None:
        """The master goes down (crashes, or stops cleanly) and the group is served again."""
        ...

    async def restart_slave(self, crash: bool) -> None:
        """A slave, if there is one, goes down and comes back."""
        ...


@dataclass
class Cluster:
    """The name server and the broker, which a sequence may restart on its port or crash."""

    servers: Servers
    running: Running
    config: dict[str, object]

    @property
    def namesrv_addr(self) -> str:
        return self.servers.namesrv_addr

    @property
    def broker(self) -> BrokerController:
        return self.running.broker

    async def restart(self, crash: bool) -> None:
        await self.servers.stop(self.running, crash=crash)
        self.running = await self.servers.start("broker", **self.config)
        self.broker.locks.max_live_ms = LOCK_MAX_LIVE_MS

    async def restart_slave(self, crash: bool) -> None:
        pass  # no slave here


REPLICAS = ("a", "b", "c")


@dataclass
class Replicated:
    """Three replicas of the broker in controller mode (``allAckInSyncStateSet``): a "restart" is
    a failover -- the master crashes or stops, the controller elects a replica of its SyncStateSet,
    the name server routes to it, and the old master comes back (on a new port) as its slave."""

    ctl: ControllerMode
    nodes: dict[str, Node]

    @property
    def namesrv_addr(self) -> str:
        return self.ctl.namesrv_addr

    def masters(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_master]

    @property
    def master(self) -> Node:
        masters = self.masters()
        assert len(masters) == 1, f"masters: {[n.name for n in masters]}"
        return masters[0]

    @property
    def broker(self) -> BrokerController:
        return self.master.broker

    def in_sync(self) -> bool:
        """One master, and every replica in its SyncStateSet (so that any may take over next)."""
        masters = self.masters()
        return len(masters) == 1 and len(masters[0].broker.replication.sync_state_set) == len(self.nodes)

    async def routed_master(self) -> str | None:
        """The master's address in the name server's route of the model's topic."""
        response = await self.ctl.call(
            self.namesrv_addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        )
        if response.code != ResponseCode.SUCCESS:
            return None
        route = TopicRouteData.decode(response.body_bytes)
        return next((bd.brokerAddrs.get(0) for bd in route.brokerDatas), None)

    async def settled(self) -> None:
        """Every replica in the master's SyncStateSet, and the name server routing to the master."""
        await wait_until(self.in_sync, SETTLE, "every replica in the SyncStateSet of one master")
        with trio.fail_after(SETTLE):
            while await self.routed_master() != self.master.addr:
                await trio.sleep(0.02)

    async def start(self, name: str) -> Node:
        node = await self.ctl.start(name)
        node.broker.locks.max_live_ms = LOCK_MAX_LIVE_MS  # whichever replica is master next
        return node

    async def restart(self, crash: bool) -> None:
        old = self.master
        await self.ctl.stop(old, crash=crash)
        others = [n for n in self.nodes.values() if n is not old]
        await wait_until(lambda: any(n.is_master for n in others), SETTLE, "a replica to take over")
        self.nodes[old.name] = await self.start(old.name)
        await self.settled()

    async def restart_slave(self, crash: bool) -> None:
        slave = next(n for n in self.nodes.values() if not n.is_master)
        await self.ctl.stop(slave, crash=crash)
        self.nodes[slave.name] = await self.start(slave.name)
        await self.settled()


@asynccontextmanager
async def member_consumer(
    namesrv_addr: str,
    name: str,
    orderly: bool,
    listener: Callable[[list[MessageExt]], Awaitable[ConsumeStatus]],
) -> AsyncIterator[PushConsumer]:
    """A running member of the group: its own client instance named ``name``, the model's settings
    (also :mod:`tests.integration.consumer_member_child`'s)."""
    async with ClientInstance(
        namesrv_addr, instance_name=name, heartbeat_interval=0.3, poll_name_server_interval=0.3
    ) as instance:
        consumer = PushConsumer(GROUP, instance=instance, orderly=orderly, **FAST)  # type: ignore[arg-type]
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(listener)
        async with consumer:
            yield consumer


async def run_member(env: Layout, group: Group, member: Member) -> None:
    async with member_consumer(
        env.namesrv_addr, member.name, group.orderly, group.listener(member.name)
    ) as consumer:
        member.consumer = consumer
        member.started.set()
        await member.leave.wait()
    member.gone.set()


ROOT = Path(__file__).resolve().parents[2]


async def spawn_member(env: Layout, group: Group, member: Member, nursery: trio.Nursery) -> None:
    """Start a member in a process of its own; what it consumes is read from its stdout."""
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "tests.integration.consumer_member_child",
            env.namesrv_addr,
            member.name,
            "1" if group.orderly else "0",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    member.process = process
    nursery.start_soon(read_member, group, member, process)
    with trio.fail_after(SETTLE):
        await member.started.wait()


async def read_member(group: Group, member: Member, process: trio.Process) -> None:
    assert process.stdout is not None
    pending = b""
    async for chunk in process.stdout:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line == b"started":
                member.started.set()
                continue
            q, o, body = line.split(b" ", 2)
            group.record(member.name, int(q), int(o), body)
    await process.wait()
    member.gone.set()


# --- the sequences ---------------------------------------------------------------------------------

one_op = st.one_of(
    st.just(("join",)),
    st.tuples(st.just("leave"), st.integers(0, MAX_MEMBERS - 1)),
    st.tuples(st.just("send"), st.integers(1, 40)),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.1, 0.5])),
    st.just(("settle",)),
    st.tuples(st.just("work"), st.sampled_from([0.0, 0.001, 0.005, 0.05])),
    st.tuples(st.just("refuse"), st.integers(1, 5)),
    st.tuples(st.just("broker_restart"), st.booleans()),  # gracefully, or as a crash
    # a restart (or failover) while the producer sends: the sends it cuts short are unsure
    st.tuples(st.just("send_restart"), st.integers(1, 40), st.booleans(), st.sampled_from([0.0, 0.01, 0.03])),
    # the same with a slave (the failover variant; a no-op on one broker): an all-ack send waits for
    # it until the master drops it from the SyncStateSet, or is answered FLUSH_SLAVE_TIMEOUT
    st.tuples(
        st.just("slave_restart"), st.integers(0, 40), st.booleans(), st.sampled_from([0.0, 0.01, 0.03])
    ),
    st.just(("spawn",)),  # a member in a process of its own
    st.tuples(st.just("kill"), st.integers(0, MAX_MEMBERS - 1)),  # SIGKILL of such a member
)
ops = st.lists(one_op, min_size=int(os.environ.get("CONSUMER_MODEL_MIN_OPS", "4")), max_size=16)


def by_key(queues: list[MessageQueue], _msg: Message, arg: object) -> MessageQueue:
    """The order key's queue, as an orderly producer picks it."""
    return sorted(queues, key=lambda mq: mq.queueId)[int(arg) % len(queues)]  # type: ignore[call-overload]


async def send(producer: Producer, group: Group, n: int) -> None:
    for _ in range(n):
        group.serial += 1
        body = b"g%d" % group.serial
        try:
            result = await producer.send(Message(TOPIC, body), selector=by_key, arg=group.serial)
        except (MQClientError, RemotingError):
            group.unsure += 1  # stored or not (the broker just restarted): consumed or not
            continue
        if result.send_status in (SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE):
            group.unsure += 1  # stored, not (yet) held by the SyncStateSet: consumed once it is
            continue
        assert result.send_status is SendStatus.SEND_OK, result
        group.acked[body] = (result.message_queue.queueId, result.queue_offset)


async def master_restart(env: Layout, group: Group, crash: bool) -> None:
    """The master restarts (one broker) or fails over (replicas): its queue locks are lost."""
    group.lost_locks = (trio.current_time(), math.inf)
    await env.restart(crash)
    group.lost_locks = (group.lost_locks[0], trio.current_time())


async def settle(group: Group, what: str) -> None:
    live = [m for m in group.members if not m.leave.is_set()]
    if not live:
        return
    await wait_until(
        lambda: group.consumed >= group.acked.keys() or bool(group.violations),
        timeout=SETTLE,
        what=f"{len(group.acked) - len(group.consumed & group.acked.keys())} messages to be consumed ({what})",
    )
    assert not group.violations, group.violations


async def leave(member: Member) -> None:
    member.leave.set()
    if member.process is not None and member.process.stdin is not None:
        await member.process.stdin.aclose()  # the child leaves gracefully when its stdin closes
    with trio.fail_after(SETTLE):
        await member.gone.wait()


async def last_member_commits_everything(env: Layout, group: Group, nursery: trio.Nursery) -> None:
    """The group down to one member, which takes every queue, consumes what its predecessors
    consumed but had not committed (a queue handed over mid-batch) and commits each queue's end;
    then it leaves too."""
    for m in group.members:
        if m.process is not None and not m.leave.is_set():
            await leave(m)
    live = [m for m in group.members if not m.leave.is_set()]
    for m in live[1:]:
        await leave(m)
    if live:
        last = live[0]
    else:
        last = group.add_member("m")
        nursery.start_soon(run_member, env, group, last)
        with trio.fail_after(SETTLE):
            await last.started.wait()
    consumer = last.consumer
    assert consumer is not None
    ends = group.ends(env.broker)
    name = env.broker.broker_config.brokerName
    await wait_until(
        lambda: all(
            consumer.offset_store.read_memory(MessageQueue(topic=TOPIC, brokerName=name, queueId=q)) == end
            for q, end in ends.items()
            if end
        ),
        timeout=SETTLE,
        what=f"{last.name}, the last member, to consume up to the ends {ends}",
    )
    await leave(last)


async def check_left(env: Layout, group: Group) -> None:
    """Every member gone: the group committed every queue's end, and the broker forgot it."""
    broker = env.broker
    info = broker.consumers.get(GROUP)
    assert info is None or not info.channels, f"the broker still lists consumers: {list(info.channels)}"
    # a killed member's locks stay until they expire (LOCK_MAX_LIVE_MS), as upstream's
    killed = {f"@{m.name}" for m in group.members if m.process is not None and m.process.returncode == -9}
    left = {
        mq: lock.client_id
        for mq, lock in broker.locks.table.get(GROUP, {}).items()
        if broker.locks.is_locked(GROUP, mq, lock.client_id, broker.liveness_ms())
        and not any(lock.client_id.endswith(k) for k in killed)
    }
    assert not left, f"locks left by members that left gracefully: {left}"
    async with PullConsumer(GROUP, env.namesrv_addr) as reader:
        for q, end in group.ends(broker).items():
            mq = MessageQueue(topic=TOPIC, brokerName=env.broker.broker_config.brokerName, queueId=q)
            committed = await reader.query_consumer_offset(mq)
            if end == 0:
                assert committed in (0, -1), f"queue {q}: committed {committed}, nothing sent"
            else:
                assert committed == end, f"queue {q}: committed {committed}, its end {end}"


async def run_sequence(root: str, orderly: bool, sequence: list[tuple]) -> None:
    group = Group(orderly=orderly)
    async with replication_group(Path(root)) as servers, trio.open_nursery() as nursery:
        running = await servers.start("broker")
        env = Cluster(servers, running, {"listenPort": int(running.addr.rsplit(":", 1)[1])})
        await servers.create_topic(running.addr, TOPIC, QUEUES)
        await wait_until(lambda: TOPIC in servers.namesrv.routes.topicQueueTable, what=f"a route of {TOPIC}")
        env.broker.locks.max_live_ms = LOCK_MAX_LIVE_MS  # upstream: a system property
        await run_ops(env, group, sequence, nursery)


async def run_failover_sequence(root: str, orderly: bool, sequence: list[tuple]) -> None:
    """``sequence`` on three controller-mode replicas, where a broker restart is a failover (see
    :class:`Replicated`)."""
    group = Group(orderly=orderly)
    async with controller_mode(Path(root), deadline=3600) as ctl, trio.open_nursery() as nursery:
        env = Replicated(ctl, {})
        first = env.nodes[REPLICAS[0]] = await env.start(REPLICAS[0])
        await wait_until(lambda: first.is_master, SETTLE, f"{first.name} to lead")
        await ctl.create_topic(first, TOPIC, QUEUES)
        for name in REPLICAS[1:]:
            env.nodes[name] = await env.start(name)
        await env.settled()
        await run_ops(env, group, sequence, nursery)


async def run_ops(env: Layout, group: Group, sequence: list[tuple], nursery: trio.Nursery) -> None:
    try:
        await run_each_op(env, group, sequence, nursery)
    finally:
        for m in group.members:
            if m.process is not None and m.process.returncode is None:
                m.process.kill()


async def run_each_op(env: Layout, group: Group, sequence: list[tuple], nursery: trio.Nursery) -> None:
    orderly = group.orderly
    # the producer polls routes every 30 s, as by default: after a failover it finds the new master
    # because the old one cannot be reached (ClientInstance.broker_unreachable)
    async with Producer("GroupModelP", env.namesrv_addr) as producer:
        for i, op in enumerate([*sequence, ("end",)]):
            try:
                if op[0] == "join" and sum(not m.leave.is_set() for m in group.members) < MAX_MEMBERS:
                    member = group.add_member("m")
                    nursery.start_soon(run_member, env, group, member)
                    with trio.fail_after(SETTLE):
                        await member.started.wait()
                elif op[0] == "leave":
                    live = [m for m in group.members if not m.leave.is_set()]
                    if live:
                        await leave(live[op[1] % len(live)])
                elif op[0] == "send":
                    await send(producer, group, op[1])
                elif op[0] == "pause":
                    await trio.sleep(op[1])
                elif op[0] == "work":
                    group.work = op[1]
                elif op[0] == "refuse":
                    group.refuse += op[1]
                elif op[0] == "spawn" and sum(not m.leave.is_set() for m in group.members) < MAX_MEMBERS:
                    member = group.add_member("p")
                    await spawn_member(env, group, member, nursery)
                elif op[0] == "kill":
                    alive = [m for m in group.members if m.process is not None and not m.leave.is_set()]
                    if alive:
                        victim = alive[op[1] % len(alive)]
                        victim.leave.set()
                        assert victim.process is not None
                        victim.process.kill()
                        with trio.fail_after(SETTLE):
                            await victim.gone.wait()
                elif op[0] == "broker_restart":
                    await master_restart(env, group, op[1])
                elif op[0] in ("send_restart", "slave_restart"):
                    async with trio.open_nursery() as sending:
                        sending.start_soon(send, producer, group, op[1])
                        await trio.sleep(op[3])
                        if op[0] == "send_restart":
                            await master_restart(env, group, op[2])
                        else:
                            await env.restart_slave(op[2])
                elif op[0] == "settle":
                    await settle(group, "settle")
                elif op[0] == "end":
                    await settle(group, "at the end")
                    await last_member_commits_everything(env, group, nursery)
                    assert not group.violations, group.violations
                    await check_left(env, group)
                assert not group.violations, group.violations
            except AssertionError as exc:
                exc.add_note(
                    f"at op {i}: {op}; orderly={orderly}; members {[m.name for m in group.members]}; "
                    f"{len(group.acked)} sent, {len(group.consumed)} consumed"
                )
                raise


EXAMPLES = int(os.environ.get("CONSUMER_MODEL_EXAMPLES", "4"))
FAILOVER_EXAMPLES = int(os.environ.get("CONSUMER_FAILOVER_MODEL_EXAMPLES", "2"))


@model_settings(EXAMPLES)
@given(orderly=st.booleans(), sequence=ops)
def test_a_consumer_group_consumes_everything_while_members_come_and_go(
    orderly: bool, sequence: list[tuple]
) -> None:
    run_in_temp_dir("consumer-model-", run_sequence, orderly, sequence)


@model_settings(FAILOVER_EXAMPLES)
@given(orderly=st.booleans(), sequence=ops)
def test_a_consumer_group_consumes_everything_across_master_failovers(
    orderly: bool, sequence: list[tuple]
) -> None:
    run_in_temp_dir("consumer-failover-model-", run_failover_sequence, orderly, sequence)
