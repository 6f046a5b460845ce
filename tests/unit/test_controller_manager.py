"""ControllerManager: requests end to end over a fake Raft (commit = apply), leader-only rules,
inactive-broker elections and role-change notifications."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio

from controller.config import ControllerConfig
from controller.events import ElectMasterEvent, decode_events
from controller.manager import ControllerManager, config_to_properties, parse_properties_text
from controller.raft.errors import NotLeaderError, RaftTimeoutError
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.headers import decode_header
from remoting.protocol.controller import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    GetMetaDataResponseHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)

C, B = "DefaultCluster", "broker-a"
PEERS = "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"


def addr(broker_id: int) -> str:
    return f"127.0.0.{broker_id}:10911"


class FakeRaft:
    """Commits a proposal by applying it at once; can be told to lose leadership or time out."""

    def __init__(self, sm: Any) -> None:
        self.sm = sm
        self.is_leader = True
        self.leader_id: str | None = "n0"
        self.leader_address: str | None = "127.0.0.1:9878"
        self.index = 0
        self.proposals: list[bytes] = []
        self.reads = 0
        self.fail_propose: BaseException | None = None

    async def propose(self, data: bytes, timeout: float) -> Any:
        if self.fail_propose is not None:
            raise self.fail_propose
        if not self.is_leader:
            raise NotLeaderError(self.leader_id, self.leader_address)
        self.index += 1
        self.proposals.append(data)
        return self.sm.apply(self.index, data)

    async def linearizable_read(self, timeout: float) -> None:
        if not self.is_leader:
            raise NotLeaderError(self.leader_id, self.leader_address)
        self.reads += 1


class Conn:
    def __init__(self, conn_id: int) -> None:
        self.id = conn_id


class Ctx:
    def __init__(self, conn_id: int) -> None:
        self.connection = Conn(conn_id)


class Env:
    """A manager over a :class:`FakeRaft`; its request queue must run (see ``make_env``)."""

    def __init__(self, **config: Any) -> None:
        self.now = 1_000_000.0
        self.config = ControllerConfig(
            controllerDLegerGroup="group1", controllerDLegerPeers=PEERS, controllerDLegerSelfId="n0", **config
        )
        self.sent: list[tuple[str, RemotingCommand]] = []
        self.manager = ControllerManager(
            self.config,
            None,
            clock_ms=lambda: self.now,
            notify=lambda a, c: self.sent.append((a, c)),  # type: ignore[arg-type]
        )
        self.raft = FakeRaft(self.manager.replicas)
        self.manager.raft = self.raft

    async def call(
        self, code: int, ext: dict[str, object] | None = None, body: bytes | None = None, conn: int = 1
    ) -> RemotingCommand:
        return await self.manager.handle(Ctx(conn), request(code, ext, body))

    async def heartbeat(
        self, broker_id: int, *, epoch: int = -1, max_offset: int = 0, conn: int | None = None
    ) -> RemotingCommand:
        return await self.call(
            RequestCode.BROKER_HEARTBEAT,
            {
                "clusterName": C,
                "brokerName": B,
                "brokerAddr": addr(broker_id),
                "brokerId": broker_id,
                "epoch": epoch,
                "maxOffset": max_offset,
                "confirmOffset": max_offset,
                "heartbeatTimeoutMills": 10_000,
                "electionPriority": 0,
            },
            conn=broker_id if conn is None else conn,
        )

    async def register(self, broker_id: int) -> RemotingCommand:
        """The broker-side persistent-id flow: next id → apply → register; returns the register reply."""
        r = await self.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B})
        assert r.code == ResponseCode.SUCCESS
        assert r.ext_fields["nextBrokerId"] == str(broker_id)
        check = f"{addr(broker_id)};{broker_id}"
        r = await self.call(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {"clusterName": C, "brokerName": B, "appliedBrokerId": broker_id, "registerCheckCode": check},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        return await self.call(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            {
                "clusterName": C,
                "brokerName": B,
                "brokerId": broker_id,
                "brokerAddress": addr(broker_id),
                "invokeTime": 1,
            },
        )

    async def elect(self, broker_id: int, designate: bool = False) -> RemotingCommand:
        return await self.call(
            RequestCode.CONTROLLER_ELECT_MASTER,
            {"clusterName": C, "brokerName": B, "brokerId": broker_id, "designateElect": designate},
        )

    async def group(self, ids: list[int], in_sync: set[int]) -> None:
        for bid in ids:
            await self.register(bid)
            await self.heartbeat(bid)
        assert (await self.elect(ids[0])).code == ResponseCode.SUCCESS
        self.sent.clear()
        if in_sync != {ids[0]}:
            r = await self.call(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {"brokerName": B, "masterBrokerId": ids[0], "masterEpoch": 1, "invokeTime": 1},
                SyncStateSet(syncStateSet=frozenset(in_sync), syncStateSetEpoch=1).encode(),
            )
            assert r.code == ResponseCode.SUCCESS, r.remark

    def expire(self, *alive: int) -> list:
        """Advance past the heartbeat timeout keeping ``alive`` fresh; returns the scan's removals."""
        self.now += 10_001
        for info in self.manager.heartbeats.entries():
            if info.brokerId in alive:
                info.lastUpdateTimestamp = self.now
        return self.manager.scan_not_active_brokers()


MakeEnv = Callable[..., Env]


@pytest.fixture
def make_env(nursery: trio.Nursery) -> MakeEnv:
    """Build an :class:`Env` whose manager's request queue runs for the rest of the test."""

    def make(**config: Any) -> Env:
        env = Env(**config)
        nursery.start_soon(env.manager.run)
        return env

    return make


async def test_registration_flow_and_first_election_over_commands(make_env: MakeEnv) -> None:
    env = make_env()
    r = await env.register(1)
    assert r.code == ResponseCode.SUCCESS
    h = decode_header(r, RegisterBrokerToControllerResponseHeader)
    assert (h.clusterName, h.brokerName, h.masterBrokerId) == (C, B, None)
    assert SyncStateSet.decode(r.body) == SyncStateSet()
    assert (await env.heartbeat(1)).remark == "Heart beat success"
    r = await env.elect(1)
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields == {
        "masterBrokerId": "1",
        "masterAddress": addr(1),
        "masterEpoch": "1",
        "syncStateSetEpoch": "1",
    }
    assert ElectMasterResponseBody.decode(r.body).syncStateSet == {1}
    r = await env.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert r.ext_fields == {"masterBrokerId": "1", "masterAddress": addr(1), "masterEpoch": "1"}
    r = await env.register(2)
    h = decode_header(r, RegisterBrokerToControllerResponseHeader)
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (1, addr(1), 1, 1)
    assert len(env.raft.proposals) == 3, "apply 1, elect, apply 2 (registers committed nothing)"


async def test_follower_answers_leader_only_requests_with_not_leader_and_the_leader_address(
    make_env: MakeEnv,
) -> None:
    env = make_env()
    env.raft.is_leader = False
    env.raft.leader_id, env.raft.leader_address = "n1", None
    for code in (
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RequestCode.CONTROLLER_GET_REPLICA_INFO,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        RequestCode.CLEAN_BROKER_DATA,
    ):
        r = await env.call(code, {"brokerName": B, "clusterName": C})
        assert r.code == ResponseCode.CONTROLLER_NOT_LEADER, code
        assert r.remark == "The controller is not in leader state"
        assert r.ext_fields == {"controllerLeaderId": "n1", "controllerLeaderAddress": "127.0.0.1:9868"}
    assert env.raft.proposals == []
    # any-peer requests still work
    assert (await env.heartbeat(1)).code == ResponseCode.SUCCESS
    r = await env.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
    meta = decode_header(r, GetMetaDataResponseHeader)
    assert (meta.isLeader, meta.controllerLeaderId, meta.controllerLeaderAddress) == (
        False,
        "n1",
        "127.0.0.1:9868",
    )
    assert (await env.call(RequestCode.GET_CONTROLLER_CONFIG)).code == ResponseCode.SUCCESS


async def test_unknown_leader_gives_not_leader_without_address(make_env: MakeEnv) -> None:
    env = make_env()
    env.raft.is_leader = False
    env.raft.leader_id = env.raft.leader_address = None
    r = await env.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
    assert r.ext_fields is None


async def test_leadership_lost_during_commit_answers_not_leader(make_env: MakeEnv) -> None:
    env = make_env()
    await env.register(1)
    env.raft.fail_propose = NotLeaderError("n2", "127.0.0.1:9858")
    r = await env.call(
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        {"clusterName": C, "brokerName": B, "appliedBrokerId": 2, "registerCheckCode": "x:1;1"},
    )
    assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
    assert env.manager.replicas.replica_info(B).all_brokers() == {1}, "nothing applied"


async def test_raft_timeout_is_a_system_error(make_env: MakeEnv) -> None:
    env = make_env()
    env.raft.fail_propose = RaftTimeoutError("slow")
    r = await env.call(
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        {"clusterName": C, "brokerName": B, "appliedBrokerId": 1, "registerCheckCode": "x:1;1"},
    )
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert "timed out" in r.remark


async def test_reads_go_through_a_read_barrier(make_env: MakeEnv) -> None:
    env = make_env()
    before = env.raft.reads
    await env.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert env.raft.reads == before + 1


async def test_heartbeat_without_broker_id_is_invalid(make_env: MakeEnv) -> None:
    env = make_env()
    r = await env.call(
        RequestCode.BROKER_HEARTBEAT, {"clusterName": C, "brokerName": B, "brokerAddr": addr(1)}
    )
    assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert r.remark == "Heart beat with empty brokerId"
    assert len(env.manager.heartbeats) == 0


async def test_bad_header_and_unknown_code(make_env: MakeEnv) -> None:
    env = make_env()
    r = await env.call(RequestCode.CLEAN_BROKER_DATA, {"clusterName": C})  # brokerName is required
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert "brokerName" in r.remark
    r = await env.call(RequestCode.SEND_MESSAGE)
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_metadata_names_group_leader_and_peers(make_env: MakeEnv) -> None:
    env = make_env()
    r = await env.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields == {
        "group": "group1",
        "controllerLeaderId": "n0",
        "controllerLeaderAddress": "127.0.0.1:9878",
        "isLeader": "true",
        "peers": "n0:127.0.0.1:9878;n1:127.0.0.1:9868;n2:127.0.0.1:9858;",
    }


async def test_alter_sync_state_set_over_commands_and_bad_body(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1})
    r = await env.call(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 1},
        SyncStateSet(syncStateSet=frozenset({1, 2}), syncStateSetEpoch=1).encode(),
    )
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields == {"newSyncStateSetEpoch": "2"}
    assert SyncStateSet.decode(r.body) == SyncStateSet(syncStateSet=frozenset({1, 2}), syncStateSetEpoch=2)
    r = await env.call(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 1},
        b"[1,2]",
    )
    assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    r = await env.call(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": B, "masterBrokerId": 2, "masterEpoch": 1},
        SyncStateSet(syncStateSet=frozenset({1}), syncStateSetEpoch=2).encode(),
    )
    assert r.code == ResponseCode.CONTROLLER_INVALID_MASTER


async def test_get_sync_state_data_over_commands(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    r = await env.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, b'["broker-a","nope"]')
    info = BrokerReplicasInfo.decode(r.body)
    assert list(info.replicasInfoTable) == [B]
    assert [x.brokerId for x in info.replicasInfoTable[B].inSyncReplicas] == [1, 2]
    r = await env.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA)
    # upstream's code and bare remark, with the reason added
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "not set any response code: the request names no broker (its body must be a JSON array of broker names)",
    )
    r = await env.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, b"[]")
    assert (r.code, "names no broker" in (r.remark or "")) == (ResponseCode.SYSTEM_ERROR, True)
    r = await env.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, b'{"a":1}')
    assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST


async def test_inactive_master_triggers_election_and_notifies_live_members(make_env: MakeEnv) -> None:
    env = make_env()
    for bid in (1, 2, 3):
        await env.register(bid)
        await env.heartbeat(bid)  # fresh stores: epoch -1
    assert (await env.elect(1)).code == ResponseCode.SUCCESS
    for bid in (1, 2, 3):
        await env.heartbeat(bid, epoch=1, max_offset=100 * bid)
    r = await env.call(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 1},
        SyncStateSet(syncStateSet=frozenset({1, 2, 3}), syncStateSetEpoch=1).encode(),
    )
    assert r.code == ResponseCode.SUCCESS
    env.sent.clear()
    expired = env.expire(2, 3)
    assert [e.brokerId for e in expired] == [1]
    assert await env.manager.on_broker_inactive(C, B, 1)
    info = env.manager.replicas.sync_state_info(B)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet) == (3, 2, {3})
    assert sorted(a for a, _ in env.sent) == [addr(2), addr(3)], "dead broker 1 is not notified"
    cmd = env.sent[0][1]
    assert cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED
    assert cmd.ext_fields == {
        "masterAddress": addr(3),
        "masterEpoch": "2",
        "syncStateSetEpoch": "3",
        "masterBrokerId": "3",
    }
    assert SyncStateSet.decode(cmd.body) == SyncStateSet(syncStateSet=frozenset({3}), syncStateSetEpoch=3)


async def test_inactive_slave_or_follower_triggers_nothing(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    env.expire(1)
    proposals = len(env.raft.proposals)
    assert not await env.manager.on_broker_inactive(C, B, 2)
    env.raft.is_leader = False
    env.expire()
    assert not await env.manager.on_broker_inactive(C, B, 1)
    assert len(env.raft.proposals) == proposals
    assert env.sent == []


async def test_connection_close_removes_heartbeats_of_that_connection(make_env: MakeEnv) -> None:
    env = make_env()
    await env.heartbeat(1, conn=7)
    await env.heartbeat(2, conn=8)
    gone = env.manager.on_connection_closed(7)
    assert [g.brokerId for g in gone] == [1]
    assert not env.manager.is_alive(C, B, 1)
    assert env.manager.is_alive(C, B, 2)


async def test_scan_inactive_masters_elects_where_a_replica_lives(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    assert await env.manager.scan_inactive_masters() == []
    env.now += 10_001
    await env.heartbeat(2)  # 1 silently stops heartbeating; no scan has removed it yet
    assert await env.manager.scan_inactive_masters() == [B]
    assert env.manager.replicas.sync_state_info(B).masterBrokerId == 2
    env.raft.is_leader = False
    env.now += 10_001
    await env.heartbeat(1)
    assert await env.manager.scan_inactive_masters() == []


async def test_controller_triggered_election_retries_and_records_no_master(
    make_env: MakeEnv, caplog: pytest.LogCaptureFixture
) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1})
    env.expire(2)
    caplog.set_level(logging.WARNING, logger="controller")
    assert not await env.manager.trigger_elect_master(B)
    info = env.manager.replicas.sync_state_info(B)
    # electMasterMaxRetryCount = 3 attempts, each commits a "no master" event (upstream behaviour)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet) == (None, 4, {1})
    assert env.sent == []
    # one warning for the three attempts, with the reason; the same again later is not repeated
    assert not await env.manager.trigger_elect_master(B)
    warned = [
        r.getMessage() for r in caplog.records if r.name == "controller" and r.levelno >= logging.WARNING
    ]
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        f"Failed to trigger elect-master in broker-set {B} (3 attempts): CONTROLLER_MASTER_NOT_AVAILABLE "
        "Old master has down and failed to elect a new broker master: no replica of its SyncStateSet "
        "is alive (1@"
    )


async def test_admin_designated_election_notifies_and_master_still_exist_does_not(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    r = await env.elect(1)
    assert r.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    assert env.sent == []
    r = await env.elect(2, designate=True)
    assert r.code == ResponseCode.SUCCESS
    assert sorted(a for a, _ in env.sent) == [addr(1), addr(2)]


async def _restarted_set(make_env: MakeEnv) -> Env:
    """Master 1 and replica 2 in sync; then every broker gone and the controller leading anew;
    broker 2 reports first."""
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    env.expire()
    env.manager.on_role_change()
    await env.heartbeat(2)
    return env


async def test_a_new_leader_waits_for_the_recorded_master_before_a_broker_elects_another(
    make_env: MakeEnv,
) -> None:
    """A container restarting all its brokers at once: the slave registers first and asks for an
    election while the recorded master is still starting; it is told to retry, and once the
    master reports it stays master, same epoch."""
    env = await _restarted_set(make_env)
    proposals = len(env.raft.proposals)
    r = await env.elect(2)
    assert r.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert r.remark.startswith(
        "election deferred: waiting for the recorded master (broker id 1) of broker set broker-a:"
    )
    assert r.remark.endswith("retry")
    assert len(env.raft.proposals) == proposals  # nothing decided
    await env.heartbeat(1)  # the master is back
    for broker_id in (1, 2):
        r = await env.elect(broker_id)
        assert r.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("1", "1")


async def test_the_wait_for_the_recorded_master_ends(make_env: MakeEnv) -> None:
    env = await _restarted_set(make_env)
    assert (await env.elect(2)).code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    # the master (1) never comes back: after scanInactiveMasterInterval the broker's election goes
    env.now += env.config.scanInactiveMasterInterval
    await env.heartbeat(2)
    r = await env.elect(2)
    assert r.code == ResponseCode.SUCCESS
    assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("2", "2")


async def test_an_admin_designation_does_not_wait(make_env: MakeEnv) -> None:
    env = await _restarted_set(make_env)
    r = await env.elect(2, designate=True)
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields["masterBrokerId"] == "2"


async def test_a_leader_that_heard_the_set_long_ago_elects_at_once(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    env.expire(2)  # the master dies while the leader has heard the set all along
    r = await env.elect(2)
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields["masterBrokerId"] == "2"


async def _set_without_master(make_env: MakeEnv) -> Env:
    """Master 1 and replica 2 in sync (epoch 1); then both silent past the heartbeat timeout (the
    set's processes, or this controller's network, gone): the leader's election finds nobody and
    records no master."""
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    await env.heartbeat(1, epoch=1, max_offset=5000)
    await env.heartbeat(2, epoch=1, max_offset=5000)
    env.expire()
    assert not await env.manager.trigger_elect_master(B)
    info = env.manager.replicas.sync_state_info(B)
    assert info.masterBrokerId is None
    assert info.syncStateSet == {1, 2}
    return env


async def test_a_set_without_master_waits_for_its_last_master_to_report(make_env: MakeEnv) -> None:
    """The slave is back first and asks: it is told to retry; the last master reports within the
    window and is elected (a new epoch), not the slave that asked first."""
    env = await _set_without_master(make_env)
    await env.heartbeat(2, epoch=1, max_offset=7000)
    r = await env.elect(2)
    assert r.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, r.remark
    assert r.remark.startswith(
        "election deferred: broker set broker-a has no master; waiting for its last master (broker id 1)"
    )
    assert r.remark.endswith("retry")
    env.now += 300
    await env.heartbeat(1, epoch=1, max_offset=9000)
    r = await env.elect(2)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("1", "5")


async def test_a_lone_replica_back_after_its_set_had_no_master_is_elected_at_once(make_env: MakeEnv) -> None:
    """The last master itself asking does not wait (a set of one replica restarting after a crash)."""
    env = await _set_without_master(make_env)
    await env.heartbeat(1, epoch=1, max_offset=5000)
    r = await env.elect(1)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["masterBrokerId"] == "1"


async def test_a_set_without_master_prefers_its_last_master_when_it_is_back(make_env: MakeEnv) -> None:
    """Upstream prefers a live recorded master; with none recorded (an election found nobody) the
    last master is preferred the same way -- even when the only heartbeat heard from it is an old
    one, with a lower offset than its slave's (it wrote the log the slave copies)."""
    env = await _set_without_master(make_env)
    await env.heartbeat(1, epoch=1, max_offset=5000)
    await env.heartbeat(2, epoch=1, max_offset=7000)
    env.now += env.config.scanInactiveMasterInterval
    await env.heartbeat(2, epoch=1, max_offset=7000)
    r = await env.elect(2)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("1", "5")
    info = env.manager.replicas.sync_state_info(B)
    assert (info.masterBrokerId, info.lastMasterBrokerId, info.syncStateSet) == (1, 1, {1})


async def test_the_reporting_window_starts_when_a_replica_returns_not_before(make_env: MakeEnv) -> None:
    """The leader heard the set long ago, but the window counts from the first report after the
    set had no replica in the heartbeat table; once it has passed, the first to ask is elected."""
    env = await _set_without_master(make_env)
    env.now += 60_000  # however long the set was gone
    await env.heartbeat(2, epoch=1, max_offset=7000)
    assert (await env.elect(2)).code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    env.now += env.config.scanInactiveMasterInterval
    await env.heartbeat(2, epoch=1, max_offset=7000)
    r = await env.elect(2)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["masterBrokerId"] == "2"


async def test_a_first_election_never_waits(make_env: MakeEnv) -> None:
    env = make_env()
    for broker_id in (1, 2):
        await env.register(broker_id)
        await env.heartbeat(broker_id)
    r = await env.elect(2)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["masterBrokerId"] == "2"


async def test_notifications_off_when_configured(make_env: MakeEnv) -> None:
    env = make_env(notifyBrokerRoleChanged=False)
    await env.group([1, 2], in_sync={1, 2})
    assert (await env.elect(2, designate=True)).code == ResponseCode.SUCCESS
    assert env.sent == []


async def test_controller_config_get_and_update(make_env: MakeEnv) -> None:
    env = make_env()
    r = await env.call(RequestCode.GET_CONTROLLER_CONFIG)
    props = parse_properties_text(r.body.decode())
    assert props["controllerDLegerGroup"] == "group1"
    assert props["enableElectUncleanMaster"] == "false"
    r = await env.call(RequestCode.UPDATE_CONTROLLER_CONFIG, None, b"configStorePath=/tmp/x\n")
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    r = await env.call(RequestCode.UPDATE_CONTROLLER_CONFIG, None, b"scanInactiveMasterInterval=abc\n")
    assert r.code == ResponseCode.SYSTEM_ERROR
    r = await env.call(
        RequestCode.UPDATE_CONTROLLER_CONFIG, None, b"# c\nenableElectUncleanMaster = true\nnoSuchKey=1\n"
    )
    assert r.code == ResponseCode.SUCCESS
    assert env.config.enableElectUncleanMaster is True
    # and it takes effect: a live out-of-sync replica can now be elected
    await env.group([1, 2], in_sync={1})
    env.expire(2)
    assert await env.manager.trigger_elect_master(B)
    assert env.manager.replicas.sync_state_info(B).masterBrokerId == 2


def test_config_properties_round_trip() -> None:
    cfg = ControllerConfig(
        controllerDLegerGroup="g", controllerDLegerPeers=PEERS, controllerDLegerSelfId="n1"
    )
    props = parse_properties_text(config_to_properties(cfg))
    assert props["controllerDLegerPeers"] == PEERS
    assert props["notifyBrokerRoleChanged"] == "true"
    assert props["scanNotActiveBrokerInterval"] == "5000"


@pytest.mark.parametrize("code", [RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_GET_METADATA_INFO])
async def test_codes_lists_every_served_code(code: int, make_env: MakeEnv) -> None:
    env = make_env()
    assert code in env.manager.codes()
    assert len(env.manager.codes()) == 12


async def test_writes_need_one_barrier_per_term_reads_always(make_env: MakeEnv) -> None:
    env = make_env()
    env.raft.term = 3  # type: ignore[attr-defined]
    await env.register(1)  # next id (read), apply (write), register (write)
    assert env.raft.reads == 1, "the first read's barrier also serves the term's writes"
    await env.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert env.raft.reads == 2, "every read has its own barrier"
    await env.heartbeat(1)
    await env.elect(1)
    assert env.raft.reads == 2, "same term: writes skip the barrier"
    env.raft.term = 4  # type: ignore[attr-defined]
    await env.elect(1)
    assert env.raft.reads == 3, "new term: barrier again"
    env.raft.fail_propose = RaftTimeoutError("slow")
    await env.call(
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        {"clusterName": C, "brokerName": B, "appliedBrokerId": 2, "registerCheckCode": "x:1;1"},
    )
    env.raft.fail_propose = None
    reads = env.raft.reads
    await env.elect(1)
    assert env.raft.reads == reads + 1, "after a proposal of unknown outcome: barrier again"


async def test_new_master_epoch_is_above_every_live_replica_epoch(make_env: MakeEnv) -> None:
    """rmq-container safety rule: a controller that lost its data (here: a fresh one) must not hand
    out a master epoch at or below one a replica's epoch file already holds."""
    env = make_env()
    await env.register(1)
    await env.register(2)
    await env.register(3)
    await env.heartbeat(1, epoch=5, max_offset=10)
    await env.heartbeat(2, epoch=7, max_offset=10)
    await env.heartbeat(3, epoch=9, max_offset=10, conn=3)
    env.manager.on_connection_closed(3)  # a dead replica's epoch does not count
    r = await env.elect(1)
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields["masterEpoch"] == "8"
    (event,) = decode_events(env.raft.proposals[-1])
    assert event == ElectMasterEvent(
        newMasterElected=True, brokerName=B, newMasterBrokerId=1, newMasterEpoch=8
    )
    info = env.manager.replicas.sync_state_info(B)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSetEpoch) == (1, 8, 1)
    r = await env.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert r.ext_fields["masterEpoch"] == "8"
    # from then on epochs simply count up, and the event is upstream's again
    r = await env.call(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 8},
        SyncStateSet(syncStateSet=frozenset({1, 2}), syncStateSetEpoch=1).encode(),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await env.elect(2, designate=True)
    assert r.ext_fields["masterEpoch"] == "9"
    (event,) = decode_events(env.raft.proposals[-1])
    assert event.newMasterEpoch is None
    assert b"newMasterEpoch" not in env.raft.proposals[-1]


async def test_replica_epochs_below_the_recorded_one_change_nothing(make_env: MakeEnv) -> None:
    env = make_env()
    await env.group([1, 2], in_sync={1, 2})
    await env.heartbeat(1, epoch=1, max_offset=10)
    await env.heartbeat(2, epoch=1, max_offset=10)
    r = await env.elect(2, designate=True)
    assert r.ext_fields["masterEpoch"] == "2"
    assert b"newMasterEpoch" not in env.raft.proposals[-1]
