"""The controller's trio layer: role-change notifier coalescing, scan schedules."""

from __future__ import annotations

import random
import time

import trio
import trio.testing

from controller.config import ControllerConfig
from controller.raft.driver import RaftDriver
from controller.raft.storage import MemoryStorage
from controller.raft.transport import MemoryNetwork
from controller.replicas import ReplicasInfoManager
from controller.service import ControllerService, RoleChangeNotifier, raft_timing
from remoting.clock import AWAKE_PAUSE_MS, AWAKE_TICK_MS, AwakeClock
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingConnectError
from remoting.protocol.controller import SyncStateSet


def note(epoch: int) -> RemotingCommand:
    return request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, {"masterEpoch": epoch})


async def test_notifier_sends_latest_epoch_per_address_and_survives_send_errors() -> None:
    sent: list[tuple[str, int]] = []
    release = trio.Event()

    async def send(address: str, cmd: RemotingCommand, timeout: float) -> None:
        if address == "down:1":
            raise RemotingConnectError("down:1 refused")
        await release.wait()
        sent.append((address, int(cmd.ext_fields["masterEpoch"])))

    notifier = RoleChangeNotifier(send)
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        notifier.submit("a:1", note(2))
        notifier.submit("a:1", note(3))  # replaces the queued epoch 2
        notifier.submit("a:1", note(1))  # older than the queued one: ignored
        notifier.submit("down:1", note(3))
        await trio.testing.wait_all_tasks_blocked()
        notifier.submit("b:1", note(3))
        await trio.testing.wait_all_tasks_blocked()
        notifier.submit("b:1", note(4))  # cancels the in-flight epoch 3 send to b
        await trio.testing.wait_all_tasks_blocked()
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert sorted(sent) == [("a:1", 3), ("b:1", 4)]
    assert sorted(notifier.sent) == [("a:1", 3), ("b:1", 4)]


# ---------------------------------------------------------------------------------------------
# Three controller peers over the real Raft driver and the in-memory transport
# ---------------------------------------------------------------------------------------------

PEERS = "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"
C, B = "DefaultCluster", "broker-a"


def baddr(broker_id: int) -> str:
    return f"127.0.0.{broker_id}:10911"


class Cluster:
    def __init__(self, nursery: trio.Nursery, **driver_kw: object) -> None:
        self.nursery = nursery
        self.driver_kw = driver_kw
        self.net = MemoryNetwork()
        self.services: dict[str, ControllerService] = {}
        self.notified: list[tuple[str, RemotingCommand]] = []
        self.beating: dict[int, trio.CancelScope] = {}

    async def send_oneway(self, address: str, cmd: RemotingCommand, timeout: float) -> None:
        self.notified.append((address, cmd))

    async def start(self) -> None:
        for nid in ("n0", "n1", "n2"):
            config = ControllerConfig(
                controllerDLegerGroup="g",
                controllerDLegerPeers=PEERS,
                controllerDLegerSelfId=nid,
                scanNotActiveBrokerInterval=1000,
                scanInactiveMasterInterval=2000,
            )
            replicas = ReplicasInfoManager()
            driver = RaftDriver(
                nid,
                config.peers,
                None,
                self.net.transport(nid),
                replicas,
                storage=MemoryStorage(),
                rng=random.Random(nid),
                **self.driver_kw,  # type: ignore[arg-type]
            )
            self.net.attach(nid, driver.receive)
            service = ControllerService(
                config, driver, replicas=replicas, send_oneway=self.send_oneway, run_driver=True
            )
            await self.nursery.start(service.run)
            self.services[nid] = service

    async def leader(self, exclude: str | None = None) -> ControllerService:
        with trio.fail_after(30):
            while True:
                for nid, svc in self.services.items():
                    if nid != exclude and svc.driver.is_leader:
                        return svc
                await trio.sleep(0.05)

    async def call(
        self,
        svc: ControllerService,
        code: int,
        ext: dict | None = None,
        body: bytes | None = None,
        conn: int = 0,
    ) -> RemotingCommand:
        return await svc.manager.handle(_Ctx(conn), request(code, ext, body))

    def start_heartbeats(self, broker_id: int, **extra: object) -> None:
        """Like a broker: a oneway heartbeat to every controller peer every second."""
        scope = trio.CancelScope()
        self.beating[broker_id] = scope

        async def beat() -> None:
            with scope:
                while True:
                    for svc in self.services.values():
                        ext = {
                            "clusterName": C,
                            "brokerName": B,
                            "brokerAddr": baddr(broker_id),
                            "brokerId": broker_id,
                            "heartbeatTimeoutMills": 3000,
                            "epoch": 0,
                            "maxOffset": 0,
                            **extra,
                        }
                        await svc.manager.handle(_Ctx(broker_id), request(RequestCode.BROKER_HEARTBEAT, ext))
                    await trio.sleep(1.0)

        self.nursery.start_soon(beat)

    async def converged(self, predicate) -> None:
        with trio.fail_after(30):
            while not all(predicate(s.manager.replicas) for s in self.services.values()):
                await trio.sleep(0.05)


class _Conn:
    def __init__(self, conn_id: int) -> None:
        self.id = conn_id


class _Ctx:
    def __init__(self, conn_id: int) -> None:
        self.connection = _Conn(conn_id)


async def _apply_broker_id(cluster: Cluster, leader: ControllerService, bid: int) -> None:
    r = await cluster.call(
        leader,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        {
            "clusterName": C,
            "brokerName": B,
            "appliedBrokerId": bid,
            "registerCheckCode": f"{baddr(bid)};{bid}",
        },
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


async def _two_brokers_master_1_both_in_sync(cluster: Cluster, leader: ControllerService) -> None:
    """Brokers 1 and 2 register (persistent ids) and heartbeat to every peer; 1 is elected master
    and reports both in sync."""
    for bid in (1, 2):
        r = await cluster.call(
            leader, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}
        )
        assert r.ext_fields["nextBrokerId"] == str(bid)
        await _apply_broker_id(cluster, leader, bid)
        cluster.start_heartbeats(bid)
    r = await cluster.call(
        leader, RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 1}
    )
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields["masterBrokerId"] == "1"
    r = await cluster.call(
        leader,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 1},
        SyncStateSet(syncStateSet=frozenset({1, 2}), syncStateSetEpoch=1).encode(),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark


async def test_three_peers_register_elect_fail_over_broker_and_controller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start()
        leader = await cluster.leader()
        followers = [s for s in cluster.services.values() if s is not leader]

        # a follower refuses leader-only requests and names the leader
        r = await cluster.call(
            followers[0], RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}
        )
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
        assert r.ext_fields["controllerLeaderAddress"] == leader.config.self_address

        await _two_brokers_master_1_both_in_sync(cluster, leader)
        await cluster.converged(
            lambda sm: sm.sync_state_info(B) is not None and sm.sync_state_info(B).syncStateSet == {1, 2}
        )

        # broker 1 (the master) dies: the leader's scan expires it and elects broker 2
        cluster.notified.clear()
        cluster.beating[1].cancel()
        await cluster.converged(lambda sm: sm.sync_state_info(B).masterBrokerId == 2)
        info = leader.manager.replicas.sync_state_info(B)
        assert (info.masterEpoch, info.syncStateSet) == (2, {2})
        with trio.fail_after(10):
            while not cluster.notified:
                await trio.sleep(0.05)
        assert [a for a, _ in cluster.notified] == [baddr(2)], "only the live member is notified"
        assert cluster.notified[0][1].ext_fields["masterBrokerId"] == "2"

        # the controller leader is cut off: another peer leads and answers with the same state
        cluster.net.isolate(leader.config.controllerDLegerSelfId)
        new_leader = await cluster.leader(exclude=leader.config.controllerDLegerSelfId)
        with trio.fail_after(30):
            while True:
                r = await cluster.call(new_leader, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
                if r.code == ResponseCode.SUCCESS:
                    break
                await trio.sleep(0.1)
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("2", "2")
        r = await cluster.call(new_leader, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert r.ext_fields["isLeader"] == "true"
        assert r.ext_fields["controllerLeaderId"] == new_leader.config.controllerDLegerSelfId
        nursery.cancel_scope.cancel()


async def test_a_closing_peer_elects_no_one_for_brokers_going_away(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The process hosting the controller stops gracefully (``close``): its brokers going away
    with it are not failures to act on."""
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery)
        await cluster.start()
        leader = await cluster.leader()
        await _two_brokers_master_1_both_in_sync(cluster, leader)
        for svc in cluster.services.values():
            svc.close()
        cluster.beating[1].cancel()  # the master goes away with the process
        await trio.sleep(30)  # many heartbeat expiries and inactive-master scans
        info = leader.manager.replicas.sync_state_info(B)
        assert (info.masterBrokerId, info.masterEpoch) == (1, 1)
        nursery.cancel_scope.cancel()


def test_raft_timing_from_config() -> None:
    defaults = raft_timing(ControllerConfig())
    assert defaults == {"tick_interval": 0.1, "heartbeat_tick": 20, "election_tick": 60}
    fast = raft_timing(ControllerConfig(rmqRaftHeartbeatIntervalMillis=100, rmqRaftElectionTimeoutMillis=300))
    assert fast["tick_interval"] == 0.025
    assert (fast["heartbeat_tick"], fast["election_tick"]) == (4, 12)
    odd = raft_timing(ControllerConfig(rmqRaftHeartbeatIntervalMillis=1000, rmqRaftElectionTimeoutMillis=500))
    assert odd["election_tick"] > odd["heartbeat_tick"], "the election timeout stays above the heartbeat"


async def test_lagging_peer_catches_up_from_a_controller_snapshot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, snapshot_interval=3)
        await cluster.start()
        leader = await cluster.leader()
        lagging = next(nid for nid, s in cluster.services.items() if s is not leader)
        cluster.net.isolate(lagging)
        for bid in range(1, 7):
            await _apply_broker_id(cluster, leader, bid)
        cluster.start_heartbeats(1)
        r = await cluster.call(
            leader, RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": C, "brokerName": B, "brokerId": 1}
        )
        assert r.code == ResponseCode.SUCCESS
        assert cluster.services[lagging].manager.replicas.broker_names() == []
        cluster.net.heal()
        expected = leader.manager.replicas.snapshot()
        await cluster.converged(lambda sm: sm.snapshot() == expected)
        lagging_sm = cluster.services[lagging].manager.replicas
        assert lagging_sm.replica_info(B).all_brokers() == {1, 2, 3, 4, 5, 6}
        assert lagging_sm.sync_state_info(B).masterBrokerId == 1
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------------------------------
# A controller back from a pause
# ---------------------------------------------------------------------------------------------


def test_the_awake_clock_leaves_out_the_spells_nobody_read_it() -> None:
    now = [1000.0]
    pauses: list[float] = []
    clock = AwakeClock(lambda: now[0], pauses.append)
    assert clock() == 1000.0
    for _ in range(10):  # read every tick: runs as the base does
        now[0] += AWAKE_TICK_MS
        clock()
    assert clock() == 1000.0 + 10 * AWAKE_TICK_MS
    now[0] += AWAKE_PAUSE_MS  # a reading this late is still running time (a busy loop)
    assert clock() == 1000.0 + 10 * AWAKE_TICK_MS + AWAKE_PAUSE_MS
    assert pauses == []
    now[0] += 20_000  # stopped for 20 s: one tick of it counts
    assert clock() == 1000.0 + 11 * AWAKE_TICK_MS + AWAKE_PAUSE_MS
    assert pauses == [20_000 - AWAKE_TICK_MS]


async def test_a_controller_back_from_a_pause_does_not_expire_the_brokers_it_could_not_hear(
    nursery: trio.Nursery,
) -> None:
    """The controller's process does not run for 2 s (stopped, as by a shell's Ctrl-Z; here its
    event loop is blocked) right after a broker's heartbeat: the broker, which could not be heard
    meanwhile, is not expired at the controller's next scan -- before, every broker was, and
    elections were tried for masters that were alive -- but it still expires when it stays silent
    while the controller runs."""
    config = ControllerConfig(
        controllerDLegerGroup="g",
        controllerDLegerPeers="n0-127.0.0.1:9878",
        controllerDLegerSelfId="n0",
        scanNotActiveBrokerInterval=100,
        rmqRaftHeartbeatIntervalMillis=50,
        rmqRaftElectionTimeoutMillis=150,
    )
    net = MemoryNetwork()
    replicas = ReplicasInfoManager()
    driver = RaftDriver(
        "n0", config.peers, None, net.transport("n0"), replicas, storage=MemoryStorage(), rng=random.Random(0)
    )
    net.attach("n0", driver.receive)

    async def send_oneway(address: str, cmd: RemotingCommand, timeout: float) -> None:
        pass

    service = ControllerService(config, driver, replicas=replicas, send_oneway=send_oneway, run_driver=True)
    await nursery.start(service.run)
    ext = {
        "clusterName": C,
        "brokerName": B,
        "brokerAddr": baddr(1),
        "brokerId": 1,
        "heartbeatTimeoutMills": 1000,
        "epoch": 0,
        "maxOffset": 0,
    }
    await service.manager.handle(_Ctx(1), request(RequestCode.BROKER_HEARTBEAT, ext))
    await trio.sleep(0.3)  # a few scans: heard 0.3 s ago, alive
    assert service.manager.heartbeats.live_info(C, B, 1) is not None
    time.sleep(2.0)  # noqa: ASYNC251 -- on purpose: the whole process stands still
    await trio.sleep(0.3)  # the scans after it
    assert service.manager.heartbeats.live_info(C, B, 1) is not None
    assert service.manager.is_alive(C, B, 1)
    with trio.fail_after(3):  # silent while the controller runs: expired after its 1 s timeout
        while service.manager.heartbeats.live_info(C, B, 1) is not None:
            await trio.sleep(0.05)
