"""Controller-mode failure modes users hit upstream, each reproduced with real ``rmq-container``
processes (issue #5): one process hosts the name server and a one-peer controller group, and each
replica of ``broker-a`` runs in a process of its own, so a SIGKILL or SIGSTOP hits one replica only.
Timings are the dev cluster's (``bench.failover_kit.DEV_BROKER_KEYS``), ``allAckInSyncStateSet=true``.

* upstream #5663 — no acknowledged message is lost while the SyncStateSet expands: a lone master
  acknowledges sends on its own; a slave starts and catches up while sends go on; the master is
  SIGKILLed the moment the controller has accepted the wider set (the master may not have heard the
  answer yet); the new master holds every acknowledged message. Four rounds, alternating (the killed
  master is restarted as the next joining slave).
* upstream #9804 — topics (a transactional one included) and a subscription group created on the
  master are on the new master after a failover, and the name server routes the topics to it.
* upstream #6316 — two brokers both believing they are master: a frozen (SIGSTOPped) master is
  replaced by a higher-epoch master. (a) It thaws while the controller is frozen too, so it keeps
  acting as master and re-registers as id 0 with its old epoch: the name server refuses it (route id
  0 stays the higher epoch, the stale master's new topic gets no route) and its send is not
  acknowledged; once the controller runs, it steps down. (b) It thaws with a send queued on its
  connection, served while the role change to slave is under way: the send must not be acknowledged,
  the broker steps down within the bound, refuses sends and rejoins the new master's SyncStateSet.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from bench.failover_kit import (
    DirectSender,
    FailoverCluster,
    ProcSpec,
    alive_in_sync,
    broker_role,
    create_topic,
    new_master,
    read_all,
    replicas,
    route,
    route_master,
    send_request,
    wait_settled,
)
from client.admin import MQAdmin
from client.admin_controller import ControllerAdmin
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.protocol.broker import SubscriptionGroupConfig
from remoting.protocol.common import TopicConfig
from remoting.protocol.controller import ReplicasInfo
from tests.cluster.harness import HarnessError, call, wait_until

GROUP = "broker-a"
QUEUES = 4
#: a failover (master gone → new master accepting sends) must complete within this
FAILOVER_BOUND = 10.0
#: a stale master must step down within this after it runs again
STEP_DOWN_BOUND = 10.0
#: #5663: pairs of rounds (a1 → a2, then a2 → a1)
ROUNDS_5663 = 2


def layout() -> list[ProcSpec]:
    return [
        ProcSpec("c0", namesrv=True, controller=True),
        ProcSpec("a1", groups=(GROUP,)),
        ProcSpec("a2", groups=(GROUP,)),
    ]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FailoverCluster]:
    c = FailoverCluster(tmp_path, layout(), cluster="FailureModes")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def cluster_own_controller(tmp_path: Path) -> Iterator[FailoverCluster]:
    """Like :func:`cluster`, with the controller in a process of its own (``ctl``), so that it can be
    frozen while the name server runs on."""
    specs = [
        ProcSpec("c0", namesrv=True),
        ProcSpec("ctl", controller=True),
        ProcSpec("a1", groups=(GROUP,)),
        ProcSpec("a2", groups=(GROUP,)),
    ]
    c = FailoverCluster(tmp_path, specs, cluster="FailureModes")
    try:
        yield c
    finally:
        c.close()


# --- #5663 -------------------------------------------------------------------------------------------


async def _join_then_kill(
    cluster: FailoverCluster,
    admin: ControllerAdmin,
    client: RemotingClient,
    sender: DirectSender,
    master: str,
    joiner: str,
) -> None:
    """Start ``joiner`` (process name) while ``master`` (process name) is alone in the SyncStateSet
    and sends go on; SIGKILL ``master`` as soon as the controller lists ``joiner`` in the set; the
    joiner becomes master and holds every send acknowledged before the kill."""
    joiner_addr = cluster.broker_addr(joiner, GROUP)
    master_addr = cluster.broker_addr(master, GROUP)
    before = await replicas(admin, GROUP)
    assert before.masterAddress == master_addr, before
    assert alive_in_sync(before) == {master_addr}, f"the master is not alone in the set: {before}"
    proc = cluster.procs[joiner]
    proc.spawn()

    async def expanded() -> ReplicasInfo | None:
        if not proc.running:
            raise HarnessError(f"{joiner} exited\n{proc.output()}")
        r = await replicas(admin, GROUP)
        return r if joiner_addr in alive_in_sync(r) else None

    acked_at_spawn = len(sender.acked)
    info: ReplicasInfo = await wait_until(expanded, 30, f"{joiner} in the SyncStateSet", interval=0.005)
    cluster.procs[master].kill_now()
    killed_at = trio.current_time()
    acked = [a.body for a in sender.acked]
    during = len(acked) - acked_at_spawn
    assert during > 0, "no send was acknowledged while the slave joined"
    await proc.wait_ready()

    after = await new_master(admin, GROUP, info, FAILOVER_BOUND)
    assert after.masterAddress == joiner_addr, after
    await sender.wait_acked(20, FAILOVER_BOUND, at=joiner_addr, after=killed_at)

    missing: list[bytes] = []
    with trio.move_on_after(10):  # the last acknowledged messages may still be on their way to the queues
        while True:
            stored = Counter(await read_all(client, joiner_addr, sender.topic, QUEUES))
            missing = [b for b in acked if not stored[b]]
            if not missing:
                break
            await trio.sleep(0.2)
    assert not missing, (
        f"{len(missing)} of {len(acked)} acknowledged messages missing on the new master {joiner_addr} "
        f"(e.g. {missing[:3]}); {during} were acknowledged while {joiner} joined, SyncStateSet {info}"
        f"\n{cluster.output()}"
    )


async def test_5663_no_acknowledged_message_lost_while_the_sync_state_set_expands(
    cluster: FailoverCluster,
) -> None:
    with trio.fail_after(80):
        await cluster.start(["c0", "a1"])
        async with RemotingClient(name="test.5663") as client:
            admin = ControllerAdmin(client, cluster.controllers, timeout=5.0)
            await wait_settled(admin, GROUP, 1, 20)
            a1, a2 = cluster.broker_addr("a1", GROUP), cluster.broker_addr("a2", GROUP)
            await create_topic(client, [a1], "Topic5663", QUEUES)
            sender = DirectSender(client, [a1, a2], "Topic5663", body_size=1024)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop, 4)
                # a lone master acknowledges on its own: a few MB for the slave to catch up with
                await sender.wait_acked(3000, 30)
                # then the other way round (the killed master comes back as the joining slave), ...
                for master, joiner in [("a1", "a2"), ("a2", "a1")] * ROUNDS_5663:
                    await _join_then_kill(cluster, admin, client, sender, master, joiner)
                stop.set()
            # everything acknowledged in every round is on the last master, once
            stored = Counter(await read_all(client, a1, sender.topic, QUEUES))
            missing = [a.body for a in sender.acked if not stored[a.body]]
            assert not missing, f"{len(missing)} of {len(sender.acked)} acknowledged messages lost"
            twice = [b for b, n in stored.items() if n > 1]
            assert not twice, f"{len(twice)} messages stored twice, e.g. {twice[:3]}"


# --- #9804 -------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_9804_topics_and_groups_created_on_the_old_master_exist_on_the_new_one(
    cluster: FailoverCluster,
) -> None:
    normal, trans, group = "Topic9804", "Topic9804Trans", "CG_9804"
    with trio.fail_after(80):
        await cluster.start()
        async with RemotingClient(name="test.9804") as client:
            admin = ControllerAdmin(client, cluster.controllers, timeout=5.0)
            mq = MQAdmin(client, cluster.namesrvs)
            before = await wait_settled(admin, GROUP, 2, 30)
            master = before.masterAddress
            assert master is not None
            slave = next(a for a in cluster.replica_addrs(GROUP) if a != master)

            await mq.create_and_update_topic_config(
                master, TopicConfig(topicName=normal, readQueueNums=3, writeQueueNums=3)
            )
            await mq.create_and_update_topic_config(
                master,
                TopicConfig(topicName=trans, readQueueNums=2, writeQueueNums=2),
                {"+message.type": "TRANSACTION"},
            )
            wanted_group = SubscriptionGroupConfig(
                groupName=group, retryMaxTimes=5, consumeMessageOrderly=True
            )
            await mq.create_and_update_subscription_group_config(master, wanted_group)
            on_master = {t: await mq.get_topic_config(master, t) for t in (normal, trans)}
            assert on_master[trans].attributes.get("message.type") == "TRANSACTION", on_master[trans]

            async def slave_has_them() -> bool:
                for t in (normal, trans):
                    r = await call(client, slave, RequestCode.GET_TOPIC_CONFIG, {"topic": t})
                    if r.code != ResponseCode.SUCCESS:
                        return False
                # GET_SUBSCRIPTIONGROUP_CONFIG auto-creates a default group (upstream behaviour), so the
                # probe waits for the master's values, not for the group's existence.
                sub = await mq.get_subscription_group_config(slave, group)
                return (sub.retryMaxTimes, sub.consumeMessageOrderly) == (5, True)

            # slave metadata sync: at most one full-sync interval (10 s) plus its tick (3 s)
            await wait_until(slave_has_them, 20, "the slave's metadata sync of the new topics and group")

            cluster.procs[cluster.process_of(master)].kill_now()
            after = await new_master(admin, GROUP, before, FAILOVER_BOUND)
            assert after.masterAddress == slave

            for t in (normal, trans):
                got = await mq.get_topic_config(slave, t)
                want = on_master[t]
                assert (got.readQueueNums, got.writeQueueNums, got.perm, got.attributes) == (
                    want.readQueueNums,
                    want.writeQueueNums,
                    want.perm,
                    want.attributes,
                ), f"{t} on the new master {got}, on the old one {want}"
            sub = await mq.get_subscription_group_config(slave, group)
            assert (sub.retryMaxTimes, sub.consumeMessageOrderly) == (5, True), sub

            namesrv = cluster.namesrvs.split(";")[0]
            for t in (normal, trans):

                async def routed(t: str = t) -> bool:
                    return await route_master(client, namesrv, t, GROUP) == slave

                await wait_until(routed, FAILOVER_BOUND, f"the route of {t} naming the new master")
                data = await route(client, namesrv, t)
                assert data is not None
                queues = {q.brokerName: q.writeQueueNums for q in data.queueDatas}
                assert queues == {GROUP: on_master[t].writeQueueNums}, data

            # and the new master takes writes to them
            r = await client.invoke(slave, _send(normal), 5.0)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


def _send(topic: str):
    from bench.failover_kit import send_request

    return send_request(topic, 0, b"after failover", "9804AFTERFAILOVER")


# --- #6316 -------------------------------------------------------------------------------------------


def _topic_update(topic: str) -> RemotingCommand:
    ext = {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 2, "writeQueueNums": 2,
        "perm": 6, "topicFilterType": "SINGLE_TAG", "order": "false",
    }  # fmt: skip
    return request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext)


class RouteWatch:
    """Polls the name server's route of ``topic`` every 10 ms and counts what id 0 of the group was."""

    def __init__(self, client: RemotingClient, namesrv: str, topic: str) -> None:
        self.client = client
        self.namesrv = namesrv
        self.topic = topic
        self.seen: Counter[str | None] = Counter()
        self.started = trio.Event()

    async def run(self) -> None:
        while True:
            try:
                self.seen[await route_master(self.client, self.namesrv, self.topic, GROUP)] += 1
            except RemotingError:
                self.seen["<name server unreachable>"] += 1
            self.started.set()
            await trio.sleep(0.01)


async def _freeze_master_until_replaced(
    cluster: FailoverCluster, admin: ControllerAdmin, client: RemotingClient, topic: str
) -> tuple[ReplicasInfo, ReplicasInfo]:
    """With broker-a settled (2 in sync) and ``topic`` on both replicas: SIGSTOP the master's process
    and wait until the controller elected the other replica and the name server routes to it.
    Returns the replica info before and after."""
    namesrv = cluster.namesrvs.split(";")[0]
    before = await wait_settled(admin, GROUP, 2, 30)
    old = before.masterAddress
    assert old is not None
    new = next(a for a in cluster.replica_addrs(GROUP) if a != old)
    await create_topic(client, [old, new], topic, QUEUES)

    async def routed_to(addr: str) -> bool:
        return await route_master(client, namesrv, topic, GROUP) == addr

    await wait_until(lambda: routed_to(old), 10, "the route naming the first master")
    pid = cluster.procs[cluster.process_of(old)].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    after = await new_master(admin, GROUP, before, FAILOVER_BOUND)
    assert after.masterAddress == new
    await wait_until(lambda: routed_to(new), FAILOVER_BOUND, "the route naming the new master")
    return before, after


async def _steps_down(client: RemotingClient, old: str, topic: str) -> float:
    """The stale master ``old`` becomes a slave within the bound (seconds taken, from now) and then
    refuses sends."""
    t0 = trio.current_time()

    async def stepped_down() -> bool:
        return await broker_role(client, old) == "SLAVE"

    await wait_until(stepped_down, STEP_DOWN_BOUND, "the stale master stepping down")
    took = trio.current_time() - t0
    r = await client.invoke(old, send_request(topic, 1, b"to the demoted master", "6316DEMOTED"), 5.0)
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
    return took


async def _rejoins(
    cluster: FailoverCluster, admin: ControllerAdmin, client: RemotingClient, old: str, new: str, topic: str
) -> None:
    """The demoted ``old`` rejoins the SyncStateSet of ``new`` and registers as a slave (route id 0
    stays ``new``, which takes sends)."""

    async def rejoined() -> bool:
        info = await replicas(admin, GROUP)
        return info.masterAddress == new and old in alive_in_sync(info)

    try:
        await wait_until(rejoined, 20, "the old master back in the SyncStateSet as a slave")
    except HarnessError as e:
        raise HarnessError(f"{e}\n{cluster.output()}") from None
    namesrv = cluster.namesrvs.split(";")[0]
    data = await route(client, namesrv, topic)
    assert data is not None
    addrs = next(bd.brokerAddrs for bd in data.brokerDatas if bd.brokerName == GROUP)
    assert addrs.get(0) == new, addrs
    assert old in addrs.values(), addrs
    r = await client.invoke(new, send_request(topic, 1, b"to the new master", "6316NEW"), 5.0)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


async def test_6316_a_stale_master_that_still_believes_it_leads_is_not_routed(
    cluster_own_controller: FailoverCluster,
) -> None:
    """The frozen master thaws while the controller is frozen too, so it cannot learn the new epoch:
    it goes on as master, takes a topic update and re-registers as id 0 with its old epoch. The name
    server refuses that registration (route id 0 stays the higher epoch, the stale master's new topic
    gets no route), its sends are not acknowledged; once the controller runs again it steps down."""
    cluster = cluster_own_controller
    topic, stale_topic = "Topic6316", "Topic6316Stale"
    with trio.fail_after(80):
        await cluster.start()
        async with RemotingClient(name="test.6316") as client:
            admin = ControllerAdmin(client, cluster.controllers, timeout=5.0)
            namesrv = cluster.namesrvs.split(";")[0]
            before, after = await _freeze_master_until_replaced(cluster, admin, client, topic)
            old, new = before.masterAddress, after.masterAddress
            assert old is not None
            assert new is not None
            old_pid, ctl_pid = cluster.procs[cluster.process_of(old)].pid, cluster.procs["ctl"].pid
            assert old_pid is not None
            assert ctl_pid is not None
            watch = RouteWatch(client, namesrv, topic)
            stale_send: list[object] = []

            async def send_to_stale() -> None:
                try:
                    r = await client.invoke(
                        old, send_request(topic, 0, b"to the stale master", "6316STALE"), 15.0
                    )
                    stale_send.append((r.code, r.remark))
                except RemotingError as e:
                    stale_send.append(e)

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch.run)
                    await watch.started.wait()
                    os.kill(ctl_pid, signal.SIGSTOP)
                    os.kill(old_pid, signal.SIGCONT)
                    # the stale master still acts as master: it takes the topic update and registers it
                    r = await client.invoke(old, _topic_update(stale_topic), 5.0)
                    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
                    nursery.start_soon(send_to_stale)
                    conflict = f"registration of {old} as {GROUP}/0 conflicts with {new}"

                    async def refused() -> bool:
                        return conflict in cluster.procs["c0"].log_text()

                    await wait_until(refused, 10, "the name server refusing the stale master's registration")
                    assert await broker_role(client, old) != "SLAVE", (
                        "the stale master stepped down too early"
                    )
                    r = await call(
                        client, namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": stale_topic}
                    )
                    assert r.code == ResponseCode.TOPIC_NOT_EXIST, (
                        f"the name server took a topic from the stale master: {r.code} {r.body_bytes[:300]!r}"
                    )
                    os.kill(ctl_pid, signal.SIGCONT)
                    took = await _steps_down(client, old, topic)
                    await _rejoins(cluster, admin, client, old, new, topic)

                    async def answered() -> bool:
                        return bool(stale_send)

                    await wait_until(answered, 15, "the answer to the send to the stale master")
                    nursery.cancel_scope.cancel()
            finally:
                for pid in (old_pid, ctl_pid):
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            assert set(watch.seen) == {new}, (
                f"route id 0 seen as {dict(watch.seen)}; higher-epoch master {new}"
            )
            sent = stale_send[0]
            assert not (isinstance(sent, tuple) and sent[0] == ResponseCode.SUCCESS), (
                f"the stale master acknowledged a send: {sent}"
            )
            print(f"stale master stepped down {took:.2f}s after the controller ran again; its send: {sent}")


async def test_6316_a_thawed_master_steps_down_refuses_sends_and_rejoins(cluster: FailoverCluster) -> None:
    """The frozen master thaws with a send and a topic update queued on its connection (served while
    it still believes it leads): it steps down within the bound, the queued send is not acknowledged,
    it refuses new sends, rejoins the new master's SyncStateSet, and route id 0 never leaves the new
    master."""
    topic = "Topic6316Thaw"
    body = b"queued for the stale master"
    with trio.fail_after(80):
        await cluster.start()
        async with (
            RemotingClient(name="test.6316") as client,
            RemotingClient(name="test.6316.q") as queue_client,
        ):
            admin = ControllerAdmin(client, cluster.controllers, timeout=5.0)
            namesrv = cluster.namesrvs.split(";")[0]
            # connect before the freeze, so that the queued requests sit in the frozen broker's socket
            before = await wait_settled(admin, GROUP, 2, 30)
            assert before.masterAddress is not None
            await call(queue_client, before.masterAddress, RequestCode.GET_BROKER_CONFIG)
            before, after = await _freeze_master_until_replaced(cluster, admin, client, topic)
            old, new = before.masterAddress, after.masterAddress
            assert old is not None
            assert new is not None
            old_pid = cluster.procs[cluster.process_of(old)].pid
            assert old_pid is not None
            queued: dict[str, object] = {}

            async def queue(what: str, cmd: RemotingCommand) -> None:
                try:
                    r = await queue_client.invoke(old, cmd, 30.0)
                    queued[what] = (r.code, r.remark)
                except RemotingError as e:
                    queued[what] = e

            async def answered() -> bool:
                return len(queued) == 2

            watch = RouteWatch(client, namesrv, topic)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(queue, "update", _topic_update("Topic6316Queued"))
                    nursery.start_soon(queue, "send", send_request(topic, 0, body, "6316Q"))
                    # both requests written (into the frozen broker's socket buffer): their tasks block
                    await trio.testing.wait_all_tasks_blocked()
                    nursery.start_soon(watch.run)
                    await watch.started.wait()
                    os.kill(old_pid, signal.SIGCONT)
                    took = await _steps_down(client, old, topic)
                    await wait_until(answered, 10, "answers to the requests queued while frozen")
                    sent = queued["send"]
                    if isinstance(sent, tuple) and sent[0] == ResponseCode.SUCCESS:
                        on_new = Counter(await read_all(client, new, topic, QUEUES))
                        raise AssertionError(
                            f"the stale master acknowledged the send queued while it was frozen ({sent}); "
                            f"the new master {'has' if on_new[body] else 'does NOT have'} it"
                            f"\n{cluster.output()}"
                        )
                    await _rejoins(cluster, admin, client, old, new, topic)
                    nursery.cancel_scope.cancel()
            finally:
                if cluster.procs[cluster.process_of(old)].running:
                    os.kill(old_pid, signal.SIGCONT)
            assert set(watch.seen) == {new}, (
                f"route id 0 seen as {dict(watch.seen)}; higher-epoch master {new}"
            )
            print(f"stale master stepped down {took:.2f}s after it ran again; queued requests {queued}")
