"""Controller mode under network partitions: every ``rmq-container`` process runs in a network
namespace of its own (:class:`tests.cluster.netlab.NetLab`, pyroute2), and the tests cut the network
between processes while every process runs on -- unlike a SIGKILL or SIGSTOP, the cut-off side keeps
its timers, its clients and its belief in its role. The test's clients sit in the test's own
namespace and reach every process unless a test cuts them off too. Timings are the dev cluster's
(``bench.failover_kit.DEV_BROKER_KEYS``), ``allAckInSyncStateSet=true``.

* A master cut off from the controller (and from its slave, or not), while producers still reach
  it: the controller elects the slave; the old master, unable to replicate (or replicating to a
  slave that stops following it once elected) and unable to shrink its SyncStateSet (that needs the
  controller), acknowledges nothing the new master does not hold. After the heal it steps down,
  drops what it stored unacknowledged and rejoins as a slave with the new master's log.
* A slave cut off from its master only: the master's sends stall until it drops the slave from the
  SyncStateSet (``haMaxTimeSlaveNotCatchup``), then go on; after the heal the slave catches up and is
  back in the set.
* The controller leader cut off from the other controller peers but not from the brokers: it steps
  down (no quorum heard from), the others elect a leader, the brokers find it, and a master killed
  then is replaced through it. After the heal of the 15 s cut all three agree on the leader within
  seconds.
* The name server's and controller's process isolated for 15 s: the data path does not notice, and
  the controller hears the brokers again within seconds of the heal.
* A broker cut off from the name server only, long enough to be dropped from its routes: routed
  again within a second of the heal.
* ``conf/failover``'s layout, one node process isolated (its link down): the master it held fails
  over, the other group drops its slave there; after the heal both replicas there rejoin as slaves.

Each test ends with the same check: every send acknowledged by any replica, at any time, is on the
group's master, and the replicas hold the same messages.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from bench.failover_kit import (
    DirectSender,
    FailoverCluster,
    ProcSpec,
    alive_in_sync,
    broker_role,
    create_routed_topic,
    create_topic,
    new_master,
    read_all,
    replicas,
    route_master,
    spread_specs,
    wait_settled,
)
from client.admin import AdminError
from client.admin_controller import ControllerAdmin
from client.message import ConsumeStatus, Message, MessageExt, MQClientError, SendStatus
from client.producer import Producer
from client.push_consumer import PushConsumer
from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from remoting.protocol.broker import ConsumeFromWhere
from remoting.protocol.controller import ReplicasInfo
from tests.cluster.harness import HarnessError, wait_until
from tests.cluster.netlab import NetLab, unavailable

_WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=_WHY_NOT or "")

GROUP = "broker-a"
GROUP_B = "broker-b"
QUEUES = 4
#: a failover (master gone → new master accepting sends) must complete within this
FAILOVER_BOUND = 10.0
#: after the heal: the old master a slave in the new master's SyncStateSet within this
REJOIN_BOUND = 20.0
#: seconds a process stays cut off in the tests of what the heal of a long partition takes: long
#: enough that TCP's retransmissions on a connection silent since the cut have backed off to
#: ~13 s, so a connection left waiting for them would stay silent ~10 s after the heal
LONG_PARTITION = 15
#: after the heal of a :data:`LONG_PARTITION`: the controller hears the brokers again, and a cut-off
#: controller peer agrees with the others on the leader, within this
HEARD_AGAIN_BOUND = 5.0
#: after the heal: a broker the name server dropped during the partition is routed again within this
ROUTED_AGAIN_BOUND = 3.0


def _cluster(
    tmp_path: Path, specs: list[ProcSpec], broker_keys: dict[str, object] | None = None
) -> Iterator[tuple[FailoverCluster, NetLab]]:
    net = NetLab([s.name for s in specs])
    try:
        cluster = FailoverCluster(tmp_path, specs, cluster="Partitions", net=net, broker_keys=broker_keys)
        try:
            yield cluster, net
        finally:
            cluster.close()
    finally:
        net.close()


@pytest.fixture
def controller_lab(tmp_path: Path) -> Iterator[tuple[FailoverCluster, NetLab]]:
    """``c0`` (name server), ``k1``-``k3`` (a controller peer each), ``a1`` and ``a2``."""
    yield from _cluster(
        tmp_path,
        [
            ProcSpec("c0", namesrv=True),
            *(ProcSpec(f"k{i}", controller=True) for i in (1, 2, 3)),
            ProcSpec("a1", groups=(GROUP,)),
            ProcSpec("a2", groups=(GROUP,)),
        ],
    )


@pytest.fixture
def node_lab(tmp_path: Path) -> Iterator[tuple[FailoverCluster, NetLab]]:
    """``conf/failover``'s layout: ``c0`` (name server + controller), ``p1`` and ``p2`` (a replica
    of broker-a and one of broker-b each)."""
    yield from _cluster(tmp_path, spread_specs((GROUP, GROUP_B)))


@pytest.fixture
def ns_lab(tmp_path: Path) -> Iterator[tuple[FailoverCluster, NetLab]]:
    """``ns`` (name server), ``c0`` (controller), ``p1`` (broker-a's one replica), the broker
    telling the name server to drop it after 3 s without a heartbeat (upstream does so with
    ``enableSlaveActingMaster``, else after 120 s)."""
    yield from _cluster(
        tmp_path,
        [ProcSpec("ns", namesrv=True), ProcSpec("c0", controller=True), ProcSpec("p1", groups=(GROUP,))],
        {"enableSlaveActingMaster": True, "brokerNotActiveTimeoutMillis": 3000},
    )


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[FailoverCluster, NetLab]]:
    """``c0`` (name server + controller), ``a1`` and ``a2`` (a replica of broker-a each)."""
    yield from _cluster(
        tmp_path,
        [
            ProcSpec("c0", namesrv=True, controller=True),
            ProcSpec("a1", groups=(GROUP,)),
            ProcSpec("a2", groups=(GROUP,)),
        ],
    )


@asynccontextmanager
async def _started(cluster: FailoverCluster) -> AsyncIterator[tuple[RemotingClient, ControllerAdmin]]:
    """Every process started; the test's remoting client and a controller admin on it."""
    await cluster.start()
    async with RemotingClient(name="test.partition") as client:
        yield client, ControllerAdmin(client, cluster.controllers, timeout=5.0)


async def _settled_with_topic(
    cluster: FailoverCluster, admin: ControllerAdmin, client: RemotingClient, topic: str
) -> tuple[ReplicasInfo, str, str]:
    """Once broker-a has a master and both replicas in its SyncStateSet: its replica info, the
    master's and the slave's address; ``topic`` created on both."""
    before = await wait_settled(admin, GROUP, 2, 30)
    master = before.masterAddress
    assert master is not None
    slave = next(a for a in cluster.replica_addrs(GROUP) if a != master)
    await create_topic(client, [master, slave], topic, QUEUES)
    return before, master, slave


async def _place_masters(cluster: FailoverCluster, admin: ControllerAdmin, where: dict[str, str]) -> None:
    """Each group's master on the process ``where`` names (designated elections where needed),
    both replicas in sync."""
    for group, proc in where.items():
        want = cluster.broker_addr(proc, group)

        async def placed(group: str = group, want: str = want) -> bool:
            return (await replicas(admin, group)).masterAddress == want

        info = await wait_settled(admin, group, 2, 30)
        if info.masterAddress != want:
            target = next(r.brokerId for r in info.inSyncReplicas if r.brokerAddress == want)
            await admin.elect_master(cluster.cluster, group, target)
            await wait_until(placed, 10, f"{group}'s master on {proc}")
        await wait_settled(admin, group, 2, 10)


async def _rejoined(
    cluster: FailoverCluster, admin: ControllerAdmin, group: str, master: str, member: str, what: str
) -> None:
    """Wait (up to :data:`REJOIN_BOUND`) until ``group``'s master is ``master`` and ``member`` is
    a live member of its SyncStateSet; the processes' output on failure."""

    async def done() -> bool:
        info = await replicas(admin, group)
        return info.masterAddress == master and member in alive_in_sync(info)

    try:
        await wait_until(done, REJOIN_BOUND, what)
    except HarnessError as e:
        raise HarnessError(f"{e}\n{cluster.output()}") from None


async def _converged(
    cluster: FailoverCluster,
    client: RemotingClient,
    senders: list[DirectSender],
    master: str,
    topic: str,
    group: str = GROUP,
) -> tuple[int, int]:
    """Every body a sender had acknowledged is on ``master``, and every replica holds what ``master``
    holds (waiting up to 15 s for the replicas to catch up); returns (acknowledged, stored on master)."""
    acks = [a for sender in senders for a in sender.acked]
    acked = [a.body for a in acks]
    others = [a for a in cluster.replica_addrs(group) if a != master]
    problems: list[str] = []
    stored: Counter[bytes] = Counter()
    with trio.move_on_after(15):
        while True:
            stored = Counter(await read_all(client, master, topic, QUEUES))
            problems = []
            missing = [b for b in acked if not stored[b]]
            if missing:
                problems.append(
                    f"{len(missing)} of {len(acked)} acknowledged messages missing on the master {master}, "
                    f"e.g. {missing[:3]} (acknowledged by {Counter(a.addr for a in acks if a.body in set(missing))})"
                )
            for other in others:
                held = Counter(await read_all(client, other, topic, QUEUES))
                if held != stored:
                    problems.append(
                        f"replica {other} differs from the master: {len(set(held) - set(stored))} only there, "
                        f"{len(set(stored) - set(held))} missing there"
                    )
            if not problems:
                return len(acked), sum(stored.values())
            await trio.sleep(0.3)
    raise AssertionError("; ".join(problems) + f"\n{cluster.output()}")


@pytest.mark.parametrize("slave_too", [True, False], ids=["from-controller-and-slave", "from-controller"])
async def test_a_cut_off_master_acknowledges_nothing_the_new_master_lacks(
    lab: tuple[FailoverCluster, NetLab], slave_too: bool
) -> None:
    """The master loses the controller (and, ``slave_too``, its slave); producers still reach it.
    Cut off from the controller only, it still replicates to the slave until the slave, elected,
    stops following it: what it acknowledged meanwhile the slave confirmed, so holds."""
    cluster, net = lab
    topic = "PartitionMasterTopic"
    with trio.fail_after(120):
        async with _started(cluster) as (client, admin):
            before, old, new = await _settled_with_topic(cluster, admin, client, topic)
            old_proc, new_proc = cluster.process_of(old), cluster.process_of(new)
            # producers that follow the replicas' answers (a refusal or a timeout moves a send to
            # the other replica), and one that keeps sending to the old master whatever happens
            sender = DirectSender(client, [old, new], topic, QUEUES, timeout=3.0)
            stubborn = DirectSender(client, [old], topic, QUEUES, prefix="s", timeout=8.0, pause=0.05)
            stop, stop_stubborn = trio.Event(), trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop, 4)
                nursery.start_soon(stubborn.run, stop_stubborn, 4)
                await sender.wait_acked(100, 10, at=old)
                net.cut_off(old_proc, ["c0", new_proc] if slave_too else ["c0"])
                cut_at = trio.current_time()
                after = await new_master(admin, GROUP, before, FAILOVER_BOUND)
                elected_in = trio.current_time() - cut_at
                assert after.masterAddress == new, after
                await sender.wait_acked(50, FAILOVER_BOUND, at=new, after=cut_at)
                # the cut-off master still believes it leads, and its producers still reach it:
                # they go on for longer than it takes the master to give up on its slave
                assert await broker_role(client, old) != "SLAVE", "the cut-off master learned of the new one"
                await trio.sleep(max(0.0, cut_at + 8.0 - trio.current_time()))
                tried = stubborn.attempts
                net.heal()
                healed_at = trio.current_time()

                await _rejoined(cluster, admin, GROUP, new, old, "the old master back as a slave in the set")
                rejoin_took = trio.current_time() - healed_at
                stop_stubborn.set()
                assert await broker_role(client, old) == "SLAVE"
                await sender.wait_acked(20, FAILOVER_BOUND, at=new, after=trio.current_time())
                stop.set()
            namesrv = cluster.namesrvs.split(";")[0]
            assert await route_master(client, namesrv, topic, GROUP) == new
            # cut off from its slave, the old master can acknowledge only what was in flight at the
            # cut; still followed by it, only until the slave takes over (1 s for answers in flight)
            since, what = (cut_at, "the cut") if slave_too else (cut_at + elected_in, "the election")
            late = [
                a for a in sender.acked + stubborn.acked if a.addr == old and since + 1.0 < a.at < healed_at
            ]
            assert not late, f"the cut-off master acknowledged {len(late)} sends more than 1 s after {what}"
            acked, stored = await _converged(cluster, client, [sender, stubborn], new, topic)
            print(
                f"{acked} acknowledged, {stored} stored; new master {elected_in:.2f}s after the cut; "
                f"while cut off the old master was sent "
                f"{tried} times, acknowledged {sum(1 for a in stubborn.acked if cut_at < a.at < healed_at)} "
                f"(answers: {dict(stubborn.failures)}, {stubborn.remarks}); rejoined {rejoin_took:.2f}s after the heal"
            )


async def test_a_slave_cut_off_from_its_master_leaves_the_sync_state_set_and_comes_back(
    lab: tuple[FailoverCluster, NetLab],
) -> None:
    cluster, net = lab
    topic = "PartitionSlaveTopic"
    with trio.fail_after(120):
        async with _started(cluster) as (client, admin):
            _, master, slave = await _settled_with_topic(cluster, admin, client, topic)
            # a timeout longer than the master's wait for its slave: the sends wait out the stall
            sender = DirectSender(client, [master], topic, QUEUES, timeout=15.0)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop, 4)
                await sender.wait_acked(100, 10)
                net.cut(cluster.process_of(master), cluster.process_of(slave))
                cut_at = trio.current_time()

                async def shrunk() -> ReplicasInfo | None:
                    info = await replicas(admin, GROUP)
                    return info if alive_in_sync(info) == {master} else None

                # haMaxTimeSlaveNotCatchup (5 s) after the slave's last ack, then the next check
                info = await wait_until(shrunk, 15, "the master alone in the SyncStateSet")
                shrunk_in = trio.current_time() - cut_at
                assert info.masterAddress == master, info
                await sender.wait_acked(50, 10, after=trio.current_time())
                stalled = max(
                    (b.at - a.at for a, b in itertools.pairwise(sender.acked) if b.at > cut_at),
                    default=0.0,
                )
                net.heal()
                healed_at = trio.current_time()

                await _rejoined(cluster, admin, GROUP, master, slave, "the slave back in the SyncStateSet")
                back_in = trio.current_time() - healed_at
                await sender.wait_acked(50, 10, after=trio.current_time())
                stop.set()
            acked, stored = await _converged(cluster, client, [sender], master, topic)
            # a send waiting for the slave when the master gave up on it is answered
            # FLUSH_SLAVE_TIMEOUT (stored, not confirmed by the slave), as upstream; nothing else fails
            timed_out = f"{master}: code {ResponseCode.FLUSH_SLAVE_TIMEOUT}"
            others = {k: v for k, v in sender.failures.items() if k != timed_out}
            assert not others, f"sends to the master failed: {dict(sender.failures)} {sender.remarks}"
            print(
                f"{acked} acknowledged, {stored} stored; the master dropped its slave {shrunk_in:.2f}s after "
                f"the cut (longest gap between acks {stalled:.2f}s, {sender.failures[timed_out]} answered "
                f"FLUSH_SLAVE_TIMEOUT); the slave was back {back_in:.2f}s after the heal"
            )


async def _leader(admin: ControllerAdmin, cluster: FailoverCluster, among: list[str]) -> str | None:
    """The process (of ``among``) whose controller peer says it leads, when every one of ``among``
    that answers names the same leader; else None."""
    said: dict[str, tuple[bool, str | None]] = {}
    for proc in among:
        address = f"{cluster.ips[proc]}:{cluster.ctl_ports[proc]}"
        try:
            m = await admin.get_metadata(address)
        except (RemotingError, AdminError):
            continue
        said[proc] = (m.isLeader, m.controllerLeaderAddress)
    leaders = [p for p, (is_leader, _) in said.items() if is_leader]
    if len(leaders) != 1:
        return None
    leader = leaders[0]
    address = f"{cluster.ips[leader]}:{cluster.ctl_ports[leader]}"
    return leader if all(named == address for _, named in said.values()) else None


async def test_a_controller_leader_cut_off_from_its_peers_hands_over_and_a_failover_goes_through(
    controller_lab: tuple[FailoverCluster, NetLab],
) -> None:
    cluster, net = controller_lab
    topic = "PartitionControllerTopic"
    peers = ["k1", "k2", "k3"]
    with trio.fail_after(150):
        async with _started(cluster) as (client, admin):
            before, master, other = await _settled_with_topic(cluster, admin, client, topic)
            old_leader = await wait_until(lambda: _leader(admin, cluster, peers), 10, "a controller leader")
            sender = DirectSender(client, [master, other], topic, QUEUES, timeout=3.0)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop, 4)
                await sender.wait_acked(100, 10, at=master)
                rest = [p for p in peers if p != old_leader]
                net.cut_off(old_leader, rest)
                cut_at = trio.current_time()
                new_leader = await wait_until(
                    lambda: _leader(admin, cluster, rest), 10, "a leader among the rest"
                )
                handed_in = trio.current_time() - cut_at

                async def stepped_down() -> bool:
                    m = await admin.get_metadata(f"{cluster.ips[old_leader]}:{cluster.ctl_ports[old_leader]}")
                    return not m.isLeader

                await wait_until(stepped_down, 10, "the cut-off leader stepping down")
                # the brokers heartbeat to the new leader: the group stays settled there
                await wait_settled(admin, GROUP, 2, 10)
                cluster.procs[cluster.process_of(master)].kill_now()
                killed_at = trio.current_time()
                after = await new_master(admin, GROUP, before, FAILOVER_BOUND)
                failover_in = trio.current_time() - killed_at
                assert after.masterAddress == other, after
                await sender.wait_acked(50, FAILOVER_BOUND, at=other, after=killed_at)
                await trio.sleep_until(cut_at + LONG_PARTITION)
                net.heal()
                healed_at = trio.current_time()
                # the peers' connections to the cut-off one (and its to them) carried only oneway Raft
                # messages since the cut: they must end and be made anew, not wait for TCP
                await wait_until(
                    lambda: _leader(admin, cluster, peers),
                    HEARD_AGAIN_BOUND,
                    "one leader for all three peers",
                )
                agreed_in = trio.current_time() - healed_at
                await cluster.procs[cluster.process_of(master)].start()

                await _rejoined(cluster, admin, GROUP, other, master, "the restarted replica back in the set")
                await sender.wait_acked(20, 10, at=other, after=trio.current_time())
                stop.set()
            acked, stored = await _converged(cluster, client, [sender], other, topic)
            print(
                f"{acked} acknowledged, {stored} stored; controller leader {old_leader} -> {new_leader} "
                f"{handed_in:.2f}s after the cut; master failover {failover_in:.2f}s after the kill; "
                f"after the {LONG_PARTITION} s cut, all three peers agreed on the leader {agreed_in:.2f}s "
                "after the heal"
            )


async def test_sends_go_on_while_the_controller_and_name_server_are_isolated(
    lab: tuple[FailoverCluster, NetLab],
) -> None:
    """The process of the name server and the (only) controller peer loses its network for 15 s
    (far longer than the controller's broker timeout): the master and slave keep their roles and
    the master acknowledges every send meanwhile; within seconds of the heal the controller hears
    both replicas again (their connections to it, silent since the cut, ended -- not waiting for
    TCP's next retransmission, which by then comes about as long after the heal as the partition
    lasted), the group has a master again and holds every acknowledged send."""
    cluster, net = lab
    topic = "PartitionControlPlaneTopic"
    with trio.fail_after(120):
        async with _started(cluster) as (client, admin):
            before, master, slave = await _settled_with_topic(cluster, admin, client, topic)
            sender = DirectSender(client, [master, slave], topic, QUEUES, timeout=5.0)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop, 4)
                await sender.wait_acked(100, 10)
                net.isolate("c0")
                cut_at = trio.current_time()
                await trio.sleep(LONG_PARTITION)
                during = [a for a in sender.acked if a.at > cut_at]
                gaps = [b.at - a.at for a, b in itertools.pairwise(during)]
                assert await broker_role(client, master) != "SLAVE"
                assert await broker_role(client, slave) == "SLAVE"
                failed_while_isolated = dict(sender.failures)
                net.heal()
                healed_at = trio.current_time()

                async def both_heard() -> bool:
                    return len(alive_in_sync(await replicas(admin, GROUP))) == 2

                await wait_until(both_heard, HEARD_AGAIN_BOUND, "the controller hearing both replicas again")
                heard_in = trio.current_time() - healed_at
                await sender.wait_acked(50, 10, after=trio.current_time())
                after = await wait_settled(admin, GROUP, 2, 10)
                stop.set()
            # The controller's own elections during the isolation found no live replica and recorded
            # no master (upstream does the same); after the heal the last master is elected again,
            # with a new epoch (its sends are refused for a moment while it takes it). Unless the
            # controller's expiry scan caught the master's last heartbeat one scan before the
            # slave's: then it elected the slave meanwhile (as upstream would), and the slave,
            # the SyncStateSet's only member by that election, leads after the heal. Either way
            # no replica truncates anything acknowledged.
            assert after.masterAddress in (master, slave), (before, after)
            assert not failed_while_isolated, f"sends failed: {failed_while_isolated} {sender.remarks}"
            assert during, "no send acknowledged during the isolation"
            assert max(gaps, default=0.0) < 1.0, (
                f"{len(during)} sends acknowledged during the isolation, longest gap {max(gaps):.2f}s"
            )
            acked, stored = await _converged(cluster, client, [sender], after.masterAddress, topic)
            print(
                f"{acked} acknowledged, {stored} stored; {len(during)} during the {LONG_PARTITION} s "
                f"isolation of the control plane, longest gap {max(gaps, default=0.0) * 1000:.0f} ms; "
                f"both replicas heard by the controller {heard_in:.2f} s after the heal; master "
                f"{'the same' if after.masterAddress == master else 'the former slave'}, epoch "
                f"{before.masterEpoch} -> {after.masterEpoch}; refused while it was elected: "
                f"{dict(sender.failures)}"
            )


async def test_a_broker_cut_off_from_the_name_server_is_routed_again_at_once_after_the_heal(
    ns_lab: tuple[FailoverCluster, NetLab],
) -> None:
    """The name server drops the broker it no longer hears from, and the broker's registrations
    fail meanwhile, retried after 1 s, 2 s, 4 s ... up to ``registerNameServerPeriod``. After the
    heal the broker registers as soon as a connection to the name server is made again (its next
    heartbeat's), not at the next retry -- which after a 12 s cut is ~20 s later, and after a
    longer one up to 30 s: that long the name server routes none of its topics."""
    cluster, net = ns_lab
    topic = "PartitionNameServerTopic"
    with trio.fail_after(90):
        async with _started(cluster) as (client, _):
            await create_routed_topic(client, cluster, topic, QUEUES, [GROUP])

            async def routed() -> bool:
                try:
                    return await route_master(client, cluster.namesrvs, topic, GROUP) is not None
                except RemotingError:
                    return False

            async def unrouted() -> bool:
                return not await routed()

            net.cut("p1", "ns")
            cut_at = trio.current_time()
            await wait_until(unrouted, 10, "the name server dropping the broker it no longer hears from")
            dropped_in = trio.current_time() - cut_at
            await trio.sleep_until(cut_at + 12)
            net.heal()
            healed_at = trio.current_time()
            await wait_until(routed, ROUTED_AGAIN_BOUND, "the broker routed again")
            print(
                f"route lost {dropped_in:.2f}s after the cut, back {trio.current_time() - healed_at:.2f}s "
                "after the heal"
            )


async def test_a_node_cut_off_from_everyone_fails_over_its_masters_and_rejoins_as_slaves(
    node_lab: tuple[FailoverCluster, NetLab],
) -> None:
    """``conf/failover``'s layout with broker-a's master on ``p1`` and broker-b's on ``p2``; ``p1``
    loses its network for 8 s (clients cannot reach it either). broker-a fails over to ``p2``,
    broker-b drops its slave on ``p1`` from the SyncStateSet; both take sends again. After the heal
    ``p1``'s replicas are slaves in both sets, and every acknowledged send is on both replicas."""
    cluster, net = node_lab
    topic = "PartitionNodeTopic"
    groups = (GROUP, GROUP_B)
    with trio.fail_after(150):
        async with _started(cluster) as (client, admin):
            await _place_masters(cluster, admin, {GROUP: "p1", GROUP_B: "p2"})
            before = {g: await replicas(admin, g) for g in groups}
            for group in groups:
                await create_topic(client, cluster.replica_addrs(group), topic, QUEUES)
            senders = {
                g: DirectSender(client, cluster.replica_addrs(g), topic, QUEUES, prefix=g[-1], timeout=3.0)
                for g in groups
            }
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                for sender in senders.values():
                    nursery.start_soon(sender.run, stop, 2)
                for group, sender in senders.items():
                    await sender.wait_acked(50, 10, at=before[group].masterAddress)
                net.isolate("p1")
                cut_at = trio.current_time()
                a_after = await new_master(admin, GROUP, before[GROUP], FAILOVER_BOUND)
                assert a_after.masterAddress == cluster.broker_addr("p2", GROUP), a_after
                await senders[GROUP].wait_acked(50, FAILOVER_BOUND, at=a_after.masterAddress, after=cut_at)
                first = senders[GROUP].first_ack_after(cut_at, not_at=before[GROUP].masterAddress)
                assert first is not None
                a_took = first.at - cut_at

                async def b_shrunk() -> bool:
                    info = await replicas(admin, GROUP_B)
                    return alive_in_sync(info) == {cluster.broker_addr("p2", GROUP_B)}

                await wait_until(b_shrunk, 15, "broker-b's master alone in its set")
                b_master = cluster.broker_addr("p2", GROUP_B)
                await senders[GROUP_B].wait_acked(50, 10, at=b_master, after=trio.current_time())
                b_gap = max(
                    (y.at - x.at for x, y in itertools.pairwise(senders[GROUP_B].acked) if y.at > cut_at),
                    default=0.0,
                )
                await trio.sleep(max(0.0, cut_at + 8.0 - trio.current_time()))
                net.heal()
                healed_at = trio.current_time()
                for group in groups:
                    back = cluster.broker_addr("p1", group)
                    master = cluster.broker_addr("p2", group)

                    await _rejoined(
                        cluster, admin, group, master, back, f"p1's replica of {group} back in the set"
                    )

                    async def slave(back: str = back) -> bool:
                        # the test's own connection to p1 may still wait out a TCP retransmission
                        return await broker_role(client, back) == "SLAVE"

                    await wait_until(slave, 10, f"{back} answering as a slave")
                rejoin_took = trio.current_time() - healed_at
                for sender in senders.values():
                    await sender.wait_acked(20, 10, after=trio.current_time())
                stop.set()
            figures = []
            for group, sender in senders.items():
                acked, stored = await _converged(
                    cluster, client, [sender], cluster.broker_addr("p2", group), topic, group
                )
                figures.append(f"{group} {acked} acknowledged / {stored} stored")
            print(
                f"{'; '.join(figures)}; broker-a's first send on p2 {a_took:.2f}s after the cut, broker-b's "
                f"longest gap {b_gap:.2f}s; both sets whole {rejoin_took:.2f}s after the heal (a slave whose HA "
                "connection the partition silenced connects anew 5 s after it ended, as upstream)"
            )


@pytest.mark.parametrize("hold", [3.0, 15.0], ids=["hold-3s", "hold-15s"])
async def test_python_clients_find_the_new_masters_while_the_old_node_is_cut_off(
    node_lab: tuple[FailoverCluster, NetLab], hold: float
) -> None:
    """``conf/failover``'s layout with both masters on one node, which loses its network for 10 s
    while the project's Producer (4 concurrent sync sends) and PushConsumer run. The producer's
    calls to the cut-off masters get no answer; it closes those connections and reads the route
    again at once, so it sends to the new masters during the partition (upstream's clients keep
    the route until their 30 s poll, and then sent to the old masters, slaves by then, which
    refuse). The consumer's long polls to the cut-off masters wait on connections whose peer
    acknowledges nothing any more (keepalive probes): the kernel ends them after
    ``PEER_UNACKED_TIMEOUT``, the consumer reads the route again and makes the polls to the new
    masters -- so it consumes during the partition too, with the default hold (15 s,
    ``broker_suspend_max_time``) as well; with a hold of 3 s, a poll unanswered past it would have
    the route read again too (upstream's consumer waits out its 30 s pull timeout). Every message
    sent SEND_OK is consumed."""
    cluster, net = node_lab
    topic = "PartitionClientTopic"
    groups = (GROUP, GROUP_B)
    with trio.fail_after(150):
        async with _started(cluster) as (client, admin):
            await _place_masters(cluster, admin, dict.fromkeys(groups, "p1"))
            await create_routed_topic(client, cluster, topic, QUEUES, groups)
        namesrv = cluster.namesrvs
        sent: dict[bytes, float] = {}
        consumed: dict[bytes, float] = {}
        failures: Counter[str] = Counter()

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            now = trio.current_time()
            for m in msgs:
                consumed.setdefault(m.body, now)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            "CG_PARTITION",
            namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            broker_suspend_max_time=hold,
        )
        consumer.subscribe(topic, "*")
        consumer.register_listener(listener)
        stop = trio.Event()
        async with Producer("PG_PARTITION", namesrv) as producer, consumer:

            async def send_loop(k: int) -> None:
                for n in itertools.count():
                    if stop.is_set():
                        return
                    body = f"{k}-{n}".encode()
                    try:
                        result = await producer.send(Message(topic, body))
                    except MQClientError as e:
                        failures[type(e).__name__] += 1
                    else:
                        if result.send_status is SendStatus.SEND_OK:
                            sent[body] = trio.current_time()
                    await trio.sleep(0.01)

            async with trio.open_nursery() as nursery:
                for k in range(4):
                    nursery.start_soon(send_loop, k)
                await wait_until(lambda: _at_least(sent, 100), 10, "100 sends before the cut")
                net.isolate("p1")
                cut_at = trio.current_time()
                await trio.sleep(10)
                during = sorted(t for t in sent.values() if t > cut_at)
                net.heal()
                healed_at = trio.current_time()
                await trio.sleep(3)
                stop.set()
            assert during, f"no send went through while p1 was cut off (failures {dict(failures)})"
            resumed = during[0] - cut_at
            assert resumed < 8.0, f"the first send after the cut went through only {resumed:.1f}s later"

            async def all_consumed() -> bool:
                return all(b in consumed for b in sent)

            await wait_until(all_consumed, 30, "every message sent SEND_OK consumed")
            caught_up = trio.current_time() - healed_at
            # sent to the new masters (a second after the cut: not an answer already on its way)
            meanwhile = [t for b, t in consumed.items() if cut_at + 1.0 < sent.get(b, 0.0) and t < healed_at]
            assert meanwhile, "nothing sent during the partition was consumed before the heal"
            consumed_after = min(meanwhile) - cut_at
        print(
            f"hold {hold:g} s: {len(sent)} sent SEND_OK, {len(during)} while p1 was cut off, the first "
            f"{resumed:.2f}s after "
            f"the cut; {len(meanwhile)} of them consumed before the heal, the first {consumed_after:.2f}s "
            f"after the cut; all consumed {caught_up:.2f}s after the heal; failed sends {dict(failures)}"
        )


async def _at_least(sent: dict[bytes, float], n: int) -> bool:
    return len(sent) >= n
