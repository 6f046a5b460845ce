"""The controller state machine: every request's validation rules and every event's effect."""

from __future__ import annotations

import pytest

from controller.elect_policy import DefaultElectPolicy
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    UpdateBrokerAddressEvent,
    encode_events,
)
from controller.heartbeat import BrokerHeartbeatManager
from controller.replicas import ControllerResult, ReplicasInfoManager
from remoting.codes import ResponseCode
from remoting.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)

C = "DefaultCluster"
B = "broker-a"
NOW = 1_000_000.0


def addr(broker_id: int) -> str:
    return f"127.0.0.{broker_id}:10911"


class World:
    """A state machine plus a heartbeat table; ``commit`` applies a result's events like Raft would."""

    def __init__(self, *, unclean: bool = False) -> None:
        self.sm = ReplicasInfoManager(enable_elect_unclean_master=unclean)
        self.hb = BrokerHeartbeatManager()
        self.now = NOW

    def alive(self, cluster: str, name: str, broker_id: int) -> bool:
        return self.hb.is_alive(cluster, name, broker_id, self.now)

    def live_address(self, cluster: str, name: str, broker_id: int) -> str | None:
        info = self.hb.live_info(cluster, name, broker_id)
        return info.brokerAddr if info is not None and self.alive(cluster, name, broker_id) else None

    def policy(self) -> DefaultElectPolicy:
        return DefaultElectPolicy(self.alive, self.hb.live_info)

    def beat(
        self, broker_id: int, *, epoch: int = 0, max_offset: int = 0, priority: int | None = None
    ) -> None:
        self.hb.on_heartbeat(
            clusterName=C,
            brokerName=B,
            brokerAddr=addr(broker_id),
            brokerId=broker_id,
            now_ms=self.now,
            heartbeatTimeoutMillis=10_000,
            epoch=epoch,
            maxOffset=max_offset,
            electionPriority=priority,
        )

    def kill(self, broker_id: int) -> None:
        """Let time pass until ``broker_id``'s heartbeat expires (the others keep beating), then scan."""
        self.now += 10_001
        for info in self.hb.entries():
            if info.brokerId != broker_id:
                self.beat(
                    info.brokerId, epoch=info.epoch, max_offset=info.maxOffset, priority=info.electionPriority
                )
        expired = self.hb.scan_inactive(self.now)
        assert [e.brokerId for e in expired] in ([broker_id], [])

    def commit(self, result: ControllerResult) -> ControllerResult:
        for event in result.events:
            self.sm.apply_event(event)
        return result

    def register(self, broker_id: int, check: str | None = None, name: str = B) -> ControllerResult:
        req = ApplyBrokerIdRequestHeader(
            clusterName=C,
            brokerName=name,
            appliedBrokerId=broker_id,
            registerCheckCode=check or f"{addr(broker_id)};{broker_id}000",
        )
        return self.commit(self.sm.handle_apply_broker_id(req))

    def elect(self, broker_id: int = -1, *, designate: bool = False) -> ControllerResult:
        req = ElectMasterRequestHeader(
            clusterName=C, brokerName=B, brokerId=broker_id, designateElect=designate
        )
        return self.commit(self.sm.handle_elect_master(req, self.policy()))

    def alter(
        self,
        new_set: set[int],
        *,
        master: int | None = None,
        master_epoch: int | None = None,
        set_epoch: int | None = None,
    ) -> ControllerResult:
        info = self.sm.sync_state_info(B)
        req = AlterSyncStateSetRequestHeader(
            brokerName=B,
            masterBrokerId=info.masterBrokerId if master is None else master,
            masterEpoch=info.masterEpoch if master_epoch is None else master_epoch,
        )
        body = SyncStateSet(
            syncStateSet=frozenset(new_set),
            syncStateSetEpoch=info.syncStateSetEpoch if set_epoch is None else set_epoch,
        )
        return self.commit(self.sm.handle_alter_sync_state_set(req, body, self.alive))

    def group(self, ids: list[int], *, master: int = 1, in_sync: set[int] | None = None) -> None:
        """Register ``ids``, all alive, elect ``master`` (first election), then set the SyncStateSet."""
        for bid in ids:
            assert self.register(bid).code == ResponseCode.SUCCESS
            self.beat(bid)
        assert self.elect(master).code == ResponseCode.SUCCESS
        if in_sync and in_sync != {master}:
            assert self.alter(in_sync).code == ResponseCode.SUCCESS


@pytest.fixture
def w() -> World:
    return World()


def sync_info(w: World):
    return w.sm.sync_state_info(B)


# -------------------------------------------------------------------------------------------
# Persistent broker id: GET_NEXT_BROKER_ID / APPLY_BROKER_ID
# -------------------------------------------------------------------------------------------


def next_id(w: World, name: str = B) -> int | None:
    return w.sm.handle_get_next_broker_id(
        GetNextBrokerIdRequestHeader(clusterName=C, brokerName=name)
    ).header.nextBrokerId


def test_next_broker_id_is_1_for_unknown_set_and_advances_per_registered_id(w: World) -> None:
    assert next_id(w) == 1
    w.register(1)
    assert next_id(w) == 2
    w.register(2)
    assert next_id(w) == 3
    assert next_id(w, "other") == 1


def test_apply_first_id_of_unknown_set_creates_both_tables(w: World) -> None:
    result = w.sm.handle_apply_broker_id(
        ApplyBrokerIdRequestHeader(
            clusterName=C, brokerName=B, appliedBrokerId=1, registerCheckCode="10.0.0.9:10911;42"
        )
    )
    assert result.code == ResponseCode.SUCCESS
    assert result.header.clusterName == C
    assert result.header.brokerName == B
    assert result.events == [
        ApplyBrokerIdEvent(
            clusterName=C,
            brokerName=B,
            brokerAddress="10.0.0.9:10911",
            registerCheckCode="10.0.0.9:10911;42",
            newBrokerId=1,
        )
    ]
    assert not w.sm.contains(B), "handle_* must not change state"
    w.commit(result)
    assert w.sm.contains(B)
    info = sync_info(w)
    assert (info.masterEpoch, info.syncStateSetEpoch, info.syncStateSet, info.masterBrokerId) == (
        0,
        0,
        set(),
        None,
    )
    assert w.sm.replica_info(B).broker_address(1) == "10.0.0.9:10911"


def test_apply_other_than_first_id_on_unknown_set_is_invalid(w: World) -> None:
    result = w.register(2)
    assert result.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert result.events == []
    assert not w.sm.contains(B)


def test_apply_id_taken_by_another_check_code_is_invalid(w: World) -> None:
    w.register(1, check="127.0.0.1:10911;1")
    result = w.register(1, check="127.0.0.2:10911;2")
    assert result.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert result.events == []
    assert w.sm.replica_info(B).broker_address(1) == "127.0.0.1:10911"


def test_apply_retry_with_same_check_code_succeeds_and_keeps_the_id(w: World) -> None:
    w.register(1, check="127.0.0.1:10911;1")
    w.register(2, check="127.0.0.2:10911;2")
    retry = w.register(2, check="127.0.0.2:10911;2")
    assert retry.code == ResponseCode.SUCCESS
    assert len(retry.events) == 1
    replicas = w.sm.replica_info(B)
    assert replicas.nextAssignBrokerId == 3, "applying an id that is already present changes nothing"
    assert replicas.register_check_code(2) == "127.0.0.2:10911;2"


def test_apply_free_id_above_next_counts_up_by_one(w: World) -> None:
    w.register(1)
    assert w.register(5).code == ResponseCode.SUCCESS
    assert w.sm.replica_info(B).all_brokers() == {1, 5}
    assert next_id(w) == 3  # upstream: +1 per added broker, not max+1
    assert w.register(3).code == ResponseCode.SUCCESS
    assert w.register(4).code == ResponseCode.SUCCESS
    assert w.sm.replica_info(B).nextAssignBrokerId == 5
    # upstream would hand out 5, which broker 5 holds: every replica asking for it is refused
    assert next_id(w) == 6
    assert w.register(6).code == ResponseCode.SUCCESS


def test_apply_without_check_code_is_an_invalid_request(w: World) -> None:
    result = w.sm.handle_apply_broker_id(
        ApplyBrokerIdRequestHeader(clusterName=C, brokerName=B, appliedBrokerId=1)
    )
    assert result.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert result.events == []


# -------------------------------------------------------------------------------------------
# REGISTER_BROKER (and the address update that keeps a broker's identity)
# -------------------------------------------------------------------------------------------


def register_broker(w: World, broker_id: int | None, address: str, name: str = B) -> ControllerResult:
    req = RegisterBrokerToControllerRequestHeader(
        clusterName=C, brokerName=name, brokerId=broker_id, brokerAddress=address
    )
    return w.commit(w.sm.handle_register_broker(req, w.alive, w.live_address))


def test_register_unknown_set_or_id_needs_registration(w: World) -> None:
    assert register_broker(w, 1, addr(1)).code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    w.register(1)
    result = register_broker(w, 2, addr(2))
    assert result.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert result.events == []


def test_register_without_master_returns_empty_master_fields_and_the_sync_state_set(w: World) -> None:
    w.register(1)
    result = register_broker(w, 1, addr(1))
    assert result.code == ResponseCode.SUCCESS
    h = result.header
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (None, None, None, None)
    assert SyncStateSet.decode(result.body) == SyncStateSet(syncStateSet=frozenset(), syncStateSetEpoch=0)
    assert result.events == []


def test_register_returns_alive_master_only(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1, 2})
    result = register_broker(w, 2, addr(2))
    h = result.header
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (1, addr(1), 1, 2)
    assert SyncStateSet.decode(result.body) == SyncStateSet(
        syncStateSet=frozenset({1, 2}), syncStateSetEpoch=2
    )
    w.kill(1)
    h = register_broker(w, 2, addr(2)).header
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (None, None, None, None)


def test_ip_change_keeps_identity_through_update_broker_address(w: World) -> None:
    w.register(1, check="127.0.0.1:10911;7")
    w.beat(1)
    w.elect(1)
    w.kill(1)  # the broker restarts on another address: nobody is alive at the old one
    result = register_broker(w, 1, "192.168.7.7:10911")
    assert result.code == ResponseCode.SUCCESS
    assert result.events == [
        UpdateBrokerAddressEvent(clusterName=C, brokerName=B, brokerAddress="192.168.7.7:10911", brokerId=1)
    ]
    replicas = w.sm.replica_info(B)
    assert replicas.broker_address(1) == "192.168.7.7:10911"
    assert replicas.register_check_code(1) == "127.0.0.1:10911;7", "check code (identity) kept"
    assert replicas.all_brokers() == {1}
    assert replicas.nextAssignBrokerId == 2
    info = w.sm.handle_get_replica_info(GetReplicaInfoRequestHeader(brokerName=B)).header
    assert (info.masterBrokerId, info.masterAddress) == (1, "192.168.7.7:10911")
    assert register_broker(w, 1, "192.168.7.7:10911").events == [], "same address: nothing to commit"


def test_register_of_an_id_alive_at_another_address_is_refused(w: World) -> None:
    """rmq-container rule: a register from a new address is an address change only when nobody is
    alive under the id at the recorded one; else two brokers claim one id (after a controller lost
    its data and handed a replica's persisted id to another one) and the register is refused."""
    w.register(1)
    w.beat(1)  # alive at addr(1)
    w.elect(1)
    result = register_broker(w, 1, "127.0.0.9:10911")
    assert result.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert result.remark == (
        f"BrokerId: 1 of broker-set: {B} is in use by the live broker at {addr(1)}; "
        "127.0.0.9:10911 must obtain another id"
    )
    assert result.events == []
    assert w.sm.replica_info(B).broker_address(1) == addr(1)
    w.kill(1)  # the holder's heartbeat expires: now it is an address change
    moved = register_broker(w, 1, "127.0.0.9:10911")
    assert moved.code == ResponseCode.SUCCESS
    assert w.sm.replica_info(B).broker_address(1) == "127.0.0.9:10911"


# -------------------------------------------------------------------------------------------
# ELECT_MASTER
# -------------------------------------------------------------------------------------------


def test_first_election_makes_the_caller_master_without_liveness_check(w: World) -> None:
    w.register(1)
    w.register(2)
    result = w.elect(2)  # broker 2 never sent a heartbeat
    assert result.code == ResponseCode.SUCCESS
    h = result.header
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (2, addr(2), 1, 1)
    body = ElectMasterResponseBody.decode(result.body)
    assert body.syncStateSet == {2}
    assert body.brokerMemberGroup.cluster == C
    assert body.brokerMemberGroup.brokerName == B
    assert body.brokerMemberGroup.brokerAddrs == {1: addr(1), 2: addr(2)}
    assert result.events == [ElectMasterEvent(newMasterElected=True, brokerName=B, newMasterBrokerId=2)]
    info = sync_info(w)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet, info.syncStateSetEpoch) == (
        2,
        1,
        {2},
        1,
    )


def test_elect_unknown_set_needs_registration(w: World) -> None:
    result = w.elect(1)
    assert result.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert result.events == []


def test_master_still_alive_is_kept(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2, 3})
    for trigger in (-1, 2):
        result = w.elect(trigger)
        assert result.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
        assert result.events == []
        h = result.header
        assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (1, addr(1), 1, 2)
        body = ElectMasterResponseBody.decode(result.body)
        assert body.brokerMemberGroup is None
        assert body.syncStateSet == {1, 2, 3}


def test_live_master_behind_a_reported_epoch_is_elected_again_above_it(w: World) -> None:
    """rmq-container rule: a record whose master epoch is below an epoch a live replica reports
    (the controller's store is older than the brokers' epoch files) is stale even with its master
    alive: the master is elected again, at an epoch above the reported one."""
    w.group([1, 2], master=1, in_sync={1, 2})

    def elect(reported: int) -> ControllerResult:
        req = ElectMasterRequestHeader(clusterName=C, brokerName=B, brokerId=1)
        return w.commit(w.sm.handle_elect_master(req, w.policy(), lambda cluster, name: reported))

    assert elect(1).code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST  # the recorded epoch: nothing to do
    result = elect(4)
    assert result.code == ResponseCode.SUCCESS
    h = result.header
    assert (h.masterBrokerId, h.masterEpoch, h.syncStateSetEpoch) == (1, 5, 3)
    assert ElectMasterResponseBody.decode(result.body).syncStateSet == {1}
    assert result.events == [
        ElectMasterEvent(newMasterElected=True, brokerName=B, newMasterBrokerId=1, newMasterEpoch=5)
    ]
    info = sync_info(w)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet) == (1, 5, {1})
    assert elect(5).code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST  # caught up with the replicas


def test_stale_record_elects_the_live_replica_with_the_newest_history(w: World) -> None:
    """A stale record (a live replica reports an epoch beyond it) trusts neither its master nor its
    SyncStateSet: the live replica with the highest epoch leads, even one outside the recorded set."""
    w.group([1, 2], master=1, in_sync={1})
    w.beat(1, epoch=1, max_offset=900)  # the recorded master: the old history, longer
    w.beat(2, epoch=4, max_offset=500)  # led epochs 2..4 under another controller
    req = ElectMasterRequestHeader(clusterName=C, brokerName=B, brokerId=1)
    result = w.commit(w.sm.handle_elect_master(req, w.policy(), lambda cluster, name: 4))
    assert result.code == ResponseCode.SUCCESS
    assert (result.header.masterBrokerId, result.header.masterEpoch) == (2, 5)
    assert (sync_info(w).masterBrokerId, sync_info(w).syncStateSet) == (2, {2})


def test_dead_master_is_replaced_by_the_most_advanced_in_sync_replica(w: World) -> None:
    w.group([1, 2, 3, 4], master=1, in_sync={1, 2, 3})
    w.beat(2, epoch=1, max_offset=500)
    w.beat(3, epoch=1, max_offset=900)
    w.beat(4, epoch=1, max_offset=5000)  # not in sync: not a candidate
    w.kill(1)
    result = w.elect(-1)
    assert result.code == ResponseCode.SUCCESS
    h = result.header
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch, h.syncStateSetEpoch) == (3, addr(3), 2, 3)
    body = ElectMasterResponseBody.decode(result.body)
    assert body.syncStateSet == {3}
    assert set(body.brokerMemberGroup.brokerAddrs) == {1, 2, 3, 4}
    info = sync_info(w)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet, info.syncStateSetEpoch) == (
        3,
        2,
        {3},
        3,
    )


def test_election_order_is_epoch_then_max_offset_then_priority() -> None:
    cases = [
        # (beats for 2 and 3 as (epoch, maxOffset, priority), expected winner)
        (((2, 10, 0), (1, 999, 0)), 2),  # higher epoch beats larger offset
        (((1, 10, 0), (1, 20, 9)), 3),  # same epoch: larger offset beats priority
        (((1, 20, 5), (1, 20, 1)), 3),  # same epoch and offset: smaller priority wins
        (((1, 20, 1), (1, 20, 5)), 2),
        (((1, 2**33, 0), (1, 2, 0)), 2),  # offsets compared as longs
    ]
    for (b2, b3), winner in cases:
        w = World()
        w.group([1, 2, 3], master=1, in_sync={1, 2, 3})
        w.beat(2, epoch=b2[0], max_offset=b2[1], priority=b2[2])
        w.beat(3, epoch=b3[0], max_offset=b3[1], priority=b3[2])
        w.kill(1)
        assert w.elect(-1).header.masterBrokerId == winner, (b2, b3)


def test_broker_triggered_election_after_master_death_uses_the_policy(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1, 2})
    w.kill(1)
    result = w.elect(2)
    assert result.code == ResponseCode.SUCCESS
    assert result.header.masterBrokerId == 2


def test_designated_election_picks_the_designated_in_sync_broker_over_a_live_master(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2, 3})
    result = w.elect(3, designate=True)
    assert result.code == ResponseCode.SUCCESS
    assert (result.header.masterBrokerId, result.header.masterEpoch) == (3, 2)
    assert sync_info(w).masterBrokerId == 3


def test_designated_election_never_falls_back(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2})
    for target in (3, 9):  # not in sync / not registered
        result = w.elect(target, designate=True)
        assert result.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, target
        assert result.events == []
    w.kill(2)
    result = w.elect(2, designate=True)  # dead
    assert result.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert w.elect(1, designate=True).code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    assert sync_info(w).masterBrokerId == 1
    assert sync_info(w).masterEpoch == 1


def test_no_candidate_controller_triggered_clears_master_and_bumps_epoch_keeping_the_set(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1})
    before = sync_info(w).syncStateSetEpoch
    w.kill(1)
    result = w.elect(-1)  # 2 is alive but not in sync; unclean is off
    assert result.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert result.events == [ElectMasterEvent(newMasterElected=False, brokerName=B)]
    info = sync_info(w)
    assert (info.masterBrokerId, info.masterEpoch, info.syncStateSet, info.syncStateSetEpoch) == (
        None,
        2,
        {1},
        before,
    )
    reply = w.sm.handle_get_replica_info(GetReplicaInfoRequestHeader(brokerName=B)).header
    assert (reply.masterBrokerId, reply.masterAddress, reply.masterEpoch) == (None, None, 2)


def test_no_candidate_broker_triggered_fails_without_event(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1})
    w.kill(1)
    result = w.elect(2)
    assert result.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert result.events == []
    assert sync_info(w).masterBrokerId == 1
    assert sync_info(w).masterEpoch == 1


def test_failed_election_says_who_is_missing_and_how_to_recover(w: World) -> None:
    # the dev-machine case: the SyncStateSet's replicas are gone for good (their stores deleted),
    # the replicas alive now are outside it
    w.group([1, 2, 3], master=1, in_sync={1, 2})
    w.kill(1)
    w.kill(2)
    for broker_id, code in (
        (3, ResponseCode.CONTROLLER_ELECT_MASTER_FAILED),
        (-1, ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE),
    ):
        result = w.elect(broker_id)
        assert result.code == code
        remark = result.remark or ""
        assert remark.startswith(
            (
                "Failed to elect a new master: ",
                "Old master has down and failed to elect a new broker master: ",
            )
        )
        assert f"SyncStateSet is alive (1@{addr(1)}, 2@{addr(2)})" in remark
        assert f"alive replicas 3@{addr(3)} are outside it" in remark
        assert "enableElectUncleanMaster=false" in remark
        assert "updateControllerConfig -a <controller> -k enableElectUncleanMaster -v true" in remark
        assert f"cleanBrokerMetadata -a <controller> -c {C} -bn {B} -b '1;2'" in remark


def test_failed_election_remarks_for_nobody_alive_and_a_designated_outsider(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1})
    result = w.elect(2, designate=True)
    assert result.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert "designated broker 2 is not an alive member of the SyncStateSet (SyncStateSet [1]; alive: " in (
        result.remark or ""
    )
    w.kill(2)
    w.kill(1)
    result = w.elect(-1)
    assert result.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert result.remark == (
        "Old master has down and failed to elect a new broker master: "
        f"no replica of {B} is alive (registered: 1@{addr(1)}, 2@{addr(2)})"
    )


def test_unclean_election_picks_a_live_out_of_sync_replica_only_when_enabled() -> None:
    clean, unclean = World(), World(unclean=True)
    for w in (clean, unclean):
        w.group([1, 2, 3], master=1, in_sync={1})
        w.beat(2, epoch=1, max_offset=10)
        w.beat(3, epoch=1, max_offset=30)
        w.kill(1)
    assert clean.elect(-1).code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    result = unclean.elect(-1)
    assert result.code == ResponseCode.SUCCESS
    assert result.header.masterBrokerId == 3
    assert sync_info(unclean).syncStateSet == {3}


def test_unclean_election_still_prefers_the_in_sync_set() -> None:
    w = World(unclean=True)
    w.group([1, 2, 3], master=1, in_sync={1, 2})
    w.beat(2, epoch=1, max_offset=1)
    w.beat(3, epoch=1, max_offset=10_000)
    w.kill(1)
    assert w.elect(-1).header.masterBrokerId == 2


# -------------------------------------------------------------------------------------------
# ALTER_SYNC_STATE_SET
# -------------------------------------------------------------------------------------------


def test_alter_sync_state_set_by_master_expands_and_bumps_epoch(w: World) -> None:
    w.group([1, 2, 3], master=1)
    result = w.alter({1, 2})
    assert result.code == ResponseCode.SUCCESS
    assert result.header.newSyncStateSetEpoch == 2
    assert SyncStateSet.decode(result.body) == SyncStateSet(
        syncStateSet=frozenset({1, 2}), syncStateSetEpoch=2
    )
    assert result.events == [AlterSyncStateSetEvent(brokerName=B, newSyncStateSet=frozenset({1, 2}))]
    info = sync_info(w)
    assert (info.syncStateSet, info.syncStateSetEpoch, info.masterEpoch) == ({1, 2}, 2, 1)
    assert w.alter({1}).code == ResponseCode.SUCCESS, "shrink"
    assert (sync_info(w).syncStateSet, sync_info(w).syncStateSetEpoch) == ({1}, 3)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"new_set": {1}}, ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # unchanged
        ({"new_set": {1, 2}, "master": 2}, ResponseCode.CONTROLLER_INVALID_MASTER),  # non-master caller
        ({"new_set": {1, 2}, "master_epoch": 0}, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
        ({"new_set": {1, 2}, "master_epoch": 2}, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
        ({"new_set": {1, 2}, "set_epoch": 0}, ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        ({"new_set": {1, 7}}, ResponseCode.CONTROLLER_INVALID_REPLICAS),  # 7 unregistered
        ({"new_set": {1, 3}}, ResponseCode.CONTROLLER_BROKER_NOT_ALIVE),  # 3 dead
        ({"new_set": {2}}, ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),  # master dropped
        # order: the master check comes before the epoch checks
        (
            {"new_set": {1, 2}, "master": 2, "master_epoch": 0, "set_epoch": 0},
            ResponseCode.CONTROLLER_INVALID_MASTER,
        ),
        ({"new_set": {1, 2}, "master_epoch": 0, "set_epoch": 0}, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
    ],
)
def test_alter_sync_state_set_rejections(w: World, kwargs: dict, code: ResponseCode) -> None:
    w.group([1, 2, 3], master=1)
    w.kill(3)
    before = (sync_info(w).syncStateSet, sync_info(w).syncStateSetEpoch)
    new_set = kwargs.pop("new_set")
    result = w.alter(new_set, **kwargs)
    assert result.code == code, result.remark
    assert result.events == []
    assert result.remark
    assert (sync_info(w).syncStateSet, sync_info(w).syncStateSetEpoch) == before


def test_alter_sync_state_set_unknown_set_or_no_master(w: World) -> None:
    req = AlterSyncStateSetRequestHeader(brokerName=B, masterBrokerId=1, masterEpoch=0)
    body = SyncStateSet(syncStateSet=frozenset({1}), syncStateSetEpoch=0)
    result = w.sm.handle_alter_sync_state_set(req, body, w.alive)
    assert result.code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    w.register(1)
    w.beat(1)
    result = w.sm.handle_alter_sync_state_set(req, body, w.alive)
    assert result.code == ResponseCode.CONTROLLER_INVALID_MASTER, "no master recorded yet"


def test_stale_master_cannot_alter_after_reelection(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1, 2})
    w.kill(1)
    w.elect(-1)
    w.beat(1)  # the old master comes back and still thinks it leads with epoch 1
    result = w.alter({1, 2}, master=1, master_epoch=1, set_epoch=2)
    assert result.code == ResponseCode.CONTROLLER_INVALID_MASTER
    result = w.alter({1, 2}, master=2, master_epoch=1, set_epoch=3)
    assert result.code == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert w.alter({1, 2}, master=2, master_epoch=2, set_epoch=3).code == ResponseCode.SUCCESS


# -------------------------------------------------------------------------------------------
# CLEAN_BROKER_DATA
# -------------------------------------------------------------------------------------------


def clean(
    w: World, ids: str | None, *, living: bool = False, name: str = B, cluster: str | None = C
) -> ControllerResult:
    req = CleanControllerBrokerDataRequestHeader(
        clusterName=cluster, brokerName=name, brokerControllerIdsToClean=ids, isCleanLivingBroker=living
    )
    return w.commit(w.sm.handle_clean_broker_data(req, w.alive))


def test_clean_whole_set_with_recorded_master_needs_the_living_flag(w: World) -> None:
    w.group([1, 2], master=1)
    w.kill(1)
    w.kill(2)
    result = clean(w, None)
    assert result.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert result.events == []
    assert w.sm.contains(B)
    result = clean(w, "", living=True)
    assert result.code == ResponseCode.SUCCESS
    assert result.events == [CleanBrokerDataEvent(brokerName=B)]
    assert not w.sm.contains(B)
    assert w.sm.broker_names() == []
    reply = w.sm.handle_get_replica_info(GetReplicaInfoRequestHeader(brokerName=B))
    assert reply.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    assert next_id(w) == 1


def test_clean_living_broker_is_refused_without_the_flag_and_done_with_it(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2, 3})
    result = clean(w, "2")
    assert result.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert w.sm.replica_info(B).all_brokers() == {1, 2, 3}
    result = clean(w, "2", living=True)
    assert result.code == ResponseCode.SUCCESS
    assert result.events == [CleanBrokerDataEvent(brokerName=B, brokerIdSetToClean=frozenset({2}))]
    assert w.sm.replica_info(B).all_brokers() == {1, 3}, (
        "only the listed id goes (upstream would wipe the set)"
    )
    assert sync_info(w).syncStateSet == {1, 3}


def test_clean_dead_brokers_removes_them_from_both_tables(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2, 3})
    w.kill(2)
    w.kill(3)
    result = clean(w, "2;3;")
    assert result.code == ResponseCode.SUCCESS
    assert result.events == [CleanBrokerDataEvent(brokerName=B, brokerIdSetToClean=frozenset({2, 3}))]
    assert w.sm.replica_info(B).all_brokers() == {1}
    assert sync_info(w).syncStateSet == {1}
    assert sync_info(w).syncStateSetEpoch == 2, "set epoch untouched"


def test_clean_that_empties_the_sync_state_set_drops_the_set(w: World) -> None:
    w.group([1, 2], master=1)
    w.kill(1)
    result = clean(w, "1")
    assert result.code == ResponseCode.SUCCESS
    assert w.sm.replica_info(B).all_brokers() == {2}
    assert w.sm.sync_state_info(B) is None
    assert not w.sm.contains(B)


def test_clean_bad_id_list_or_unknown_set_is_invalid(w: World) -> None:
    w.group([1, 2], master=1)
    for ids in ("a", "1;;2", "1,2"):
        assert clean(w, ids).code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, ids
    assert clean(w, "5", name="nope").code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert w.sm.replica_info(B).all_brokers() == {1, 2}


def test_clean_without_cluster_name_still_sees_living_brokers(w: World) -> None:
    w.group([1, 2], master=1)
    assert clean(w, "2", cluster=None).code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


def test_clean_set_without_master_needs_no_flag(w: World) -> None:
    w.register(1)
    result = clean(w, None)
    assert result.code == ResponseCode.SUCCESS
    assert not w.sm.contains(B)


# -------------------------------------------------------------------------------------------
# Reads and the inactive-master scan
# -------------------------------------------------------------------------------------------


def test_get_replica_info_returns_master_even_if_dead(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1, 2})
    w.kill(1)
    result = w.sm.handle_get_replica_info(GetReplicaInfoRequestHeader(brokerName=B))
    h = result.header
    assert (h.masterBrokerId, h.masterAddress, h.masterEpoch) == (1, addr(1), 1)
    assert SyncStateSet.decode(result.body) == SyncStateSet(
        syncStateSet=frozenset({1, 2}), syncStateSetEpoch=2
    )


def test_get_sync_state_data_lists_in_and_out_of_sync_replicas_with_liveness(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2})
    w.kill(3)
    result = w.sm.handle_get_sync_state_data([B, "unknown"], w.alive)
    info = BrokerReplicasInfo.decode(result.body)
    assert list(info.replicasInfoTable) == [B]
    r = info.replicasInfoTable[B]
    assert (r.masterBrokerId, r.masterAddress, r.masterEpoch, r.syncStateSetEpoch) == (1, addr(1), 1, 2)
    assert [(x.brokerId, x.brokerAddress, x.alive, x.brokerName) for x in r.inSyncReplicas] == [
        (1, addr(1), True, B),
        (2, addr(2), True, B),
    ]
    assert [(x.brokerId, x.alive) for x in r.notInSyncReplicas] == [(3, False)]


def test_scan_need_reelect_broker_sets(w: World) -> None:
    w.group([1, 2], master=1, in_sync={1, 2})
    assert w.sm.scan_need_reelect_broker_sets(w.alive) == []  # master alive
    w.kill(1)
    assert w.sm.scan_need_reelect_broker_sets(w.alive) == [B]  # master dead, 2 alive
    w.kill(2)
    assert w.sm.scan_need_reelect_broker_sets(w.alive) == []  # nobody alive: nothing to elect
    w.beat(2)
    w.elect(-1)
    assert w.sm.scan_need_reelect_broker_sets(w.alive) == []


# -------------------------------------------------------------------------------------------
# Raft StateMachine: apply entries, snapshot and restore
# -------------------------------------------------------------------------------------------


def build_mixed_state(w: World) -> None:
    w.group([1, 2, 3], master=1, in_sync={1, 2, 3})
    w.register(1, name="broker-b")
    w.beat(2)
    register_broker(w, 2, "10.9.9.9:10911")
    w.kill(1)
    w.elect(-1)
    w.kill(3)
    clean(w, "3")


def test_snapshot_restore_round_trip_equals_state(w: World) -> None:
    build_mixed_state(w)
    data = w.sm.snapshot()
    other = ReplicasInfoManager()
    other.restore(data)
    assert other.broker_names() == w.sm.broker_names() == [B, "broker-b"]
    for name in other.broker_names():
        assert other.replica_info(name) == w.sm.replica_info(name)
        assert other.sync_state_info(name) == w.sm.sync_state_info(name)
    assert other.snapshot() == data
    # and the restored machine answers like the original
    req = GetReplicaInfoRequestHeader(brokerName=B)
    a, b = other.handle_get_replica_info(req), w.sm.handle_get_replica_info(req)
    assert (a.code, a.header, a.body) == (b.code, b.header, b.body)


def test_restore_replaces_previous_state_and_empty_snapshot_works(w: World) -> None:
    build_mixed_state(w)
    w.sm.restore(ReplicasInfoManager().snapshot())
    assert w.sm.broker_names() == []


def test_restore_rejects_truncated_or_padded_snapshots(w: World) -> None:
    build_mixed_state(w)
    data = w.sm.snapshot()
    for bad in (data[:-1], data + b"\x00", data[:3]):
        with pytest.raises(ValueError, match="snapshot"):
            ReplicasInfoManager().restore(bad)


def test_apply_entries_replays_to_the_same_state() -> None:
    leader = World()
    entries: list[bytes] = []
    original_commit = leader.commit

    def commit(result: ControllerResult) -> ControllerResult:
        entries.append(encode_events(result.events))
        return original_commit(result)

    leader.commit = commit  # type: ignore[method-assign]
    build_mixed_state(leader)
    follower = ReplicasInfoManager()
    for index, data in enumerate([b"", *entries], start=1):
        follower.apply(index, data)
    assert follower.last_applied_index == len(entries) + 1
    assert follower.snapshot() == leader.sm.snapshot()


def test_handle_methods_never_mutate_state(w: World) -> None:
    build_mixed_state(w)
    before = w.sm.snapshot()
    w.beat(2)
    sm = w.sm
    sm.handle_elect_master(
        ElectMasterRequestHeader(clusterName=C, brokerName=B, brokerId=2, designateElect=True), w.policy()
    )
    sm.handle_alter_sync_state_set(
        AlterSyncStateSetRequestHeader(brokerName=B, masterBrokerId=2, masterEpoch=2),
        SyncStateSet(syncStateSet=frozenset({1, 2}), syncStateSetEpoch=3),
        w.alive,
    )
    sm.handle_apply_broker_id(
        ApplyBrokerIdRequestHeader(clusterName=C, brokerName=B, appliedBrokerId=9, registerCheckCode="x:1;1")
    )
    sm.handle_register_broker(
        RegisterBrokerToControllerRequestHeader(
            clusterName=C, brokerName=B, brokerId=2, brokerAddress="1.1.1.1:1"
        ),
        w.alive,
    )
    sm.handle_clean_broker_data(
        CleanControllerBrokerDataRequestHeader(brokerName=B, isCleanLivingBroker=True), w.alive
    )
    assert sm.snapshot() == before
