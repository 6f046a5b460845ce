"""The controller's replicated state machine (upstream ``ReplicasInfoManager``).

Two tables, both keyed by brokerName (ha-controller-container §2.2):

* ``replicaInfoTable`` → :class:`BrokerReplicaInfo`: cluster, next assignable broker id, and
  brokerId → (address, registerCheckCode);
* ``syncStateSetInfoTable`` → :class:`SyncStateInfo`: SyncStateSet, master broker id, master
  epoch, SyncStateSet epoch.

A broker-set "exists" only when it is in both tables. The table entries and the snapshot
encoding live in :mod:`controller.replica_tables`.

Two phases, as upstream:

1. ``handle_*`` methods validate a request against the current state and the caller's liveness
   view and return a :class:`ControllerResult` (response code, remark, response header, body,
   events) **without changing anything**;
2. :meth:`ReplicasInfoManager.apply_event` changes the state; it runs only for events committed
   through Raft, on every peer, in log order (:meth:`ReplicasInfoManager.apply` is the Raft
   ``StateMachine.apply`` entry point that decodes a committed entry first).

The validation rules and effects are those of §2.5; deviations are named where they occur.

:meth:`ReplicasInfoManager.fork` gives a scratch copy on which the controller leader applies the
events of requests it has computed but not yet committed, so that the next requests of the same
Raft batch are validated against the state they will really meet (see :mod:`controller.manager`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from controller.elect_policy import BrokerValidPredicate, DefaultElectPolicy
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
    decode_events,
)
from controller.replica_tables import (
    BrokerReplicaInfo,
    SyncStateInfo,
    decode_snapshot,
    encode_snapshot,
)
from remoting.codes import ResponseCode
from remoting.headers import CommandHeader
from remoting.protocol.controller import (
    EQUAL_SYNC_STATE_SET_REMARK,
    FIRST_BROKER_CONTROLLER_ID,
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from remoting.repeats import RepeatedLog

log = logging.getLogger("controller.replicas")


@dataclass(slots=True)
class ControllerResult:
    """What a request produced: the response to send once ``events`` are committed.

    Upstream ``ControllerResult``. ``events`` empty means nothing to commit (a read, or a
    rejected write); the response can go out after the read barrier.
    """

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: CommandHeader | None = None
    body: bytes | None = None
    events: list[Event] = field(default_factory=list)

    def fail(self, code: int, remark: str) -> ControllerResult:
        self.code = code
        self.remark = remark
        return self


_ID_TOKEN = re.compile(r"[+-]?\d+")

#: (clusterName, brokerName) → the highest epoch a live replica of the set reports in its
#: heartbeats (the last epoch of its epoch file), −1 when none does.
ReportedEpoch = Callable[[str, str], int]
#: (clusterName, brokerName, brokerId) -> the address of the id's live heartbeat entry, None if none
LiveAddress = Callable[[str, str, int], str | None]


# ---------------------------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------------------------


class ReplicasInfoManager:
    """The controller state machine; also the Raft ``StateMachine`` (apply / snapshot / restore).

    ``enable_elect_unclean_master`` is ``enableElectUncleanMaster``: when on, an election that
    finds nobody alive in the SyncStateSet may pick any live registered replica.
    """

    def __init__(self, *, enable_elect_unclean_master: bool = False) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self._replica_info: dict[str, BrokerReplicaInfo] = {}
        self._sync_state: dict[str, SyncStateInfo] = {}
        self.last_applied_index = 0
        #: On a :meth:`fork`: the broker-sets whose entries still belong to the original.
        self._shared: set[str] | None = None
        #: an election that keeps failing for the same reason is logged once per change (or
        #: REPEAT_INTERVAL); shared with forks
        self.elect_failures = RepeatedLog(log)

    def fork(self) -> ReplicasInfoManager:
        """A scratch copy: ``apply_event`` on it never changes this manager.

        Copy-on-write per broker-set (every event names exactly one set), so a fork costs two
        dict copies plus one entry copy per set an event touches.
        """
        scratch = ReplicasInfoManager(enable_elect_unclean_master=self.enable_elect_unclean_master)
        scratch.elect_failures = self.elect_failures
        scratch._replica_info = dict(self._replica_info)
        scratch._sync_state = dict(self._sync_state)
        scratch._shared = set(self._replica_info) | set(self._sync_state)
        scratch.last_applied_index = self.last_applied_index
        return scratch

    def _unshare(self, name: str) -> None:
        """Before a fork changes ``name``'s entries: replace them by private copies."""
        if self._shared is None or name not in self._shared:
            return
        self._shared.discard(name)
        replicas = self._replica_info.get(name)
        if replicas is not None:
            self._replica_info[name] = msgspec.structs.replace(
                replicas,
                brokerIdInfo={k: msgspec.structs.replace(v) for k, v in replicas.brokerIdInfo.items()},
            )
        info = self._sync_state.get(name)
        if info is not None:
            self._sync_state[name] = msgspec.structs.replace(info, syncStateSet=set(info.syncStateSet))

    # -- inspection ------------------------------------------------------------------------

    def contains(self, broker_name: str | None) -> bool:
        """Whether the broker-set exists (it is in both tables)."""
        return broker_name in self._replica_info and broker_name in self._sync_state

    def replica_info(self, broker_name: str) -> BrokerReplicaInfo | None:
        return self._replica_info.get(broker_name)

    def sync_state_info(self, broker_name: str) -> SyncStateInfo | None:
        return self._sync_state.get(broker_name)

    def broker_names(self) -> list[str]:
        """Names present in either table, sorted."""
        return sorted(set(self._replica_info) | set(self._sync_state))

    # -- writes ----------------------------------------------------------------------------

    def handle_alter_sync_state_set(
        self,
        request: AlterSyncStateSetRequestHeader,
        sync_state_set: SyncStateSet,
        is_alive: BrokerValidPredicate,
    ) -> ControllerResult:
        """CONTROLLER_ALTER_SYNC_STATE_SET; checks in upstream's order (§2.5 table)."""
        name = request.brokerName
        result = ControllerResult(header=AlterSyncStateSetResponseHeader())
        if not self.contains(name):
            return result.fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed"
            )
        assert name is not None
        info = self._sync_state[name]
        replicas = self._replica_info[name]
        new_set = set(sync_state_set.syncStateSet)
        if new_set == info.syncStateSet:
            return result.fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, EQUAL_SYNC_STATE_SET_REMARK
            )
        # Upstream NPEs when no master is recorded; that is an invalid master as well.
        if info.masterBrokerId is None or info.masterBrokerId != request.masterBrokerId:
            return result.fail(
                ResponseCode.CONTROLLER_INVALID_MASTER,
                f"Rejecting alter syncStateSet request because the current leader is:{{{info.masterBrokerId}}}, "
                f"not {{{request.masterBrokerId}}}",
            )
        if request.masterEpoch != info.masterEpoch:
            return result.fail(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"Rejecting alter syncStateSet request because the current master epoch is:{{{info.masterEpoch}}}, "
                f"not {{{request.masterEpoch}}}",
            )
        if sync_state_set.syncStateSetEpoch != info.syncStateSetEpoch:
            return result.fail(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                "Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                f"{{{info.syncStateSetEpoch}}}, not {{{sync_state_set.syncStateSetEpoch}}}",
            )
        for replica in sorted(new_set):
            if not replicas.is_broker_exist(replica):
                return result.fail(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS,
                    f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't exist",
                )
            if not is_alive(replicas.clusterName, replicas.brokerName, replica):
                return result.fail(
                    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                    f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't alive",
                )
        if info.masterBrokerId not in new_set:
            return result.fail(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin leader "
                f"{{{info.masterBrokerId}}}",
            )
        epoch = info.syncStateSetEpoch + 1
        result.header = AlterSyncStateSetResponseHeader(newSyncStateSetEpoch=epoch)
        result.body = SyncStateSet(syncStateSet=frozenset(new_set), syncStateSetEpoch=epoch).encode()
        result.events.append(AlterSyncStateSetEvent(brokerName=name, newSyncStateSet=frozenset(new_set)))
        return result

    def handle_elect_master(
        self,
        request: ElectMasterRequestHeader,
        policy: DefaultElectPolicy,
        reported_epoch: ReportedEpoch | None = None,
    ) -> ControllerResult:
        """CONTROLLER_ELECT_MASTER (broker-, controller- or admin-triggered), §2.5 steps 1–7.

        rmq-container safety rule (not upstream): with ``reported_epoch``, a new master's epoch is
        also above every epoch a live replica of the set reports. Normally those are never above
        the recorded ``masterEpoch``; they are when this controller lost its data (a fresh Raft log,
        or the set cleaned and registered again) or runs on a store older than the brokers' epoch
        files (a restored backup, another controllerStorePath for a while), and a master epoch at
        or below a replica's epoch file would be refused by that replica's HA (the group would
        stay fenced) or, worse, give two different histories the same epoch number. For the same
        reason a record behind a reported epoch is stale even when its master is alive: the
        election is real (not CONTROLLER_MASTER_STILL_EXIST) and ranks every live replica by its
        reported epoch and max offset, ignoring the recorded master and SyncStateSet, so that the
        replica with the newest history leads and the others truncate to it, not the reverse.
        """
        name = request.brokerName
        broker_id = request.brokerId
        result = ControllerResult(header=ElectMasterResponseHeader())
        if not self.contains(name):
            return result.fail(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
            )
        info = self._sync_state[name]
        replicas = self._replica_info[name]
        old_master = info.masterBrokerId
        all_replicas = replicas.all_brokers() if self.enable_elect_unclean_master else None
        reported = reported_epoch(replicas.clusterName, replicas.brokerName) if reported_epoch else -1
        new_master: int | None = None
        if info.is_first_time_for_elect():
            # Never had a master: the caller becomes the first one, without a liveness check.
            new_master = broker_id
        # a live replica holds an epoch this record never handed out: the record is stale
        stale = reported > info.masterEpoch and new_master is None
        prefer = broker_id if request.designateElect else None
        if new_master is None or new_master == -1:
            if stale:
                # neither the recorded master nor the recorded SyncStateSet can be trusted: the
                # most advanced live replica (epoch, then max offset) keeps the newest history
                new_master = policy.elect(
                    replicas.clusterName, replicas.brokerName, None, replicas.all_brokers(), None, prefer
                )
            else:
                # with no recorded master (an election found nobody), the last one is preferred
                # as upstream prefers a live recorded master: it wrote the longest log
                new_master = policy.elect(
                    replicas.clusterName,
                    replicas.brokerName,
                    set(info.syncStateSet),
                    all_replicas,
                    old_master if old_master is not None else info.lastMasterBrokerId,
                    prefer,
                )
        if new_master is not None and new_master == old_master and not stale:
            result.header = ElectMasterResponseHeader(
                masterBrokerId=old_master,
                masterAddress=replicas.broker_address(old_master),
                masterEpoch=info.masterEpoch,
                syncStateSetEpoch=info.syncStateSetEpoch,
            )
            result.body = ElectMasterResponseBody(syncStateSet=frozenset(info.syncStateSet)).encode()
            return result.fail(
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                f"The old master {old_master} is still alive, not need to elect new master for broker {name}",
            )
        if new_master is not None:
            epoch = info.masterEpoch + 1
            if reported >= epoch:
                log.warning(
                    "broker-set %s: a replica reports epoch %d but the recorded master epoch is %d "
                    "(controller data lost, or a controller store older than the brokers'); the new "
                    "master epoch is %d%s",
                    name,
                    reported,
                    info.masterEpoch,
                    reported + 1,
                    " (the recorded master again)" if new_master == old_master else "",
                )
                epoch = reported + 1
            result.header = ElectMasterResponseHeader(
                masterBrokerId=new_master,
                masterAddress=replicas.broker_address(new_master),
                masterEpoch=epoch,
                syncStateSetEpoch=info.syncStateSetEpoch + 1,
            )
            result.body = ElectMasterResponseBody(
                brokerMemberGroup=self.broker_member_group(name), syncStateSet=frozenset({new_master})
            ).encode()
            result.events.append(
                ElectMasterEvent(
                    newMasterElected=True,
                    brokerName=name,
                    newMasterBrokerId=new_master,
                    newMasterEpoch=epoch if epoch != info.masterEpoch + 1 else None,
                )
            )
            log.info(
                "Elect new master %s for broker %s (master epoch %d; replicas: %s)",
                new_master,
                name,
                epoch,
                policy.describe(replicas.clusterName, name, replicas.all_brokers()),
            )
            return result
        why = self._no_master_reason(info, replicas, policy, prefer if not stale else None)
        self.elect_failures.log(
            name, logging.WARNING, f"Failed to elect a new master for broker {name}: {why}"
        )
        if broker_id == -1:
            # Controller-triggered: record that the old master is gone and nobody replaced it.
            result.events.append(ElectMasterEvent(newMasterElected=False, brokerName=name))
            return result.fail(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"Old master has down and failed to elect a new broker master: {why}",
            )
        return result.fail(
            ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, f"Failed to elect a new master: {why}"
        )

    def _no_master_reason(
        self,
        info: SyncStateInfo,
        replicas: BrokerReplicaInfo,
        policy: DefaultElectPolicy,
        prefer: int | None,
    ) -> str:
        """Why an election found nobody, with what an operator can do about it (upstream only says
        that it failed). The usual case on a dev machine: the brokers' stores were deleted but not
        the controller's, so the replicas came back under new ids, outside the SyncStateSet."""
        name = replicas.brokerName

        def alive(broker_id: int) -> bool:
            check = policy.valid_predicate
            return check is None or check(replicas.clusterName, name, broker_id)

        def named(ids: Iterable[int]) -> str:
            return ", ".join(f"{i}@{replicas.broker_address(i)}" for i in sorted(ids)) or "none"

        in_sync = set(info.syncStateSet)
        live = {i for i in replicas.all_brokers() if alive(i)}
        if prefer is not None:
            where = "the registered replicas" if self.enable_elect_unclean_master else "the SyncStateSet"
            return (
                f"the designated broker {prefer} is not an alive member of {where} "
                f"(SyncStateSet {sorted(in_sync)}; alive: {named(live)})"
            )
        if not live:
            return f"no replica of {name} is alive (registered: {named(replicas.all_brokers())})"
        outside = live - in_sync
        if in_sync & live or not outside:
            return f"no candidate (SyncStateSet {sorted(in_sync)}; alive: {named(live)})"
        lost = ";".join(str(i) for i in sorted(in_sync - live))
        return (
            f"no replica of its SyncStateSet is alive ({named(in_sync)}); the alive replicas "
            f"{named(outside)} are outside it and may lack acknowledged messages "
            "(enableElectUncleanMaster=false). To recover: bring a SyncStateSet replica back; or "
            "allow an unclean election: rmq-admin updateControllerConfig -a <controller> "
            "-k enableElectUncleanMaster -v true; or forget the lost replicas, so that the alive "
            f"ones register afresh: rmq-admin cleanBrokerMetadata -a <controller> -c {replicas.clusterName} "
            f"-bn {name} -b '{lost}'. (A dev cluster whose broker stores were deleted without the "
            "controller's data ends here: delete both to start over.)"
        )

    def handle_apply_broker_id(self, request: ApplyBrokerIdRequestHeader) -> ControllerResult:
        """CONTROLLER_APPLY_BROKER_ID: claim an id with a registerCheckCode (``addr;millis``)."""
        name = request.brokerName
        broker_id = request.appliedBrokerId
        code = request.registerCheckCode
        result = ControllerResult(
            header=ApplyBrokerIdResponseHeader(clusterName=request.clusterName, brokerName=name)
        )
        if name is None or broker_id is None or code is None or request.clusterName is None:
            return result.fail(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                "clusterName, brokerName, appliedBrokerId and registerCheckCode are required",
            )
        event = ApplyBrokerIdEvent(
            clusterName=request.clusterName,
            brokerName=name,
            brokerAddress=code.split(";")[0],
            registerCheckCode=code,
            newBrokerId=broker_id,
        )
        replicas = self._replica_info.get(name)
        if replicas is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                result.events.append(event)
                return result
            return result.fail(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"Broker-set: {name} hasn't been registered in controller, but broker try to apply brokerId: {broker_id}",
            )
        if not replicas.is_broker_exist(broker_id) or code == replicas.register_check_code(broker_id):
            # The id is free, or it is already this broker's (an idempotent retry).
            result.events.append(event)
            return result
        return result.fail(
            ResponseCode.CONTROLLER_BROKER_ID_INVALID,
            f"Fail to apply brokerId: {broker_id} in broker-set: {name}",
        )

    def handle_register_broker(
        self,
        request: RegisterBrokerToControllerRequestHeader,
        is_alive: BrokerValidPredicate,
        live_address: LiveAddress | None = None,
    ) -> ControllerResult:
        """CONTROLLER_REGISTER_BROKER: the master (if alive), the SyncStateSet, and an address update.

        rmq-container rule (not upstream): a register from another address than the id's recorded
        one is an address change (upstream's reading) only when no broker at the recorded address
        is alive under that id (``live_address``: the address of the id's live heartbeat entry).
        Otherwise two brokers claim one id -- after a controller lost its data, a replica can be
        handed the id another replica has persisted -- and upstream would move the id's address
        back and forth between them, both acting on one identity (two masters of one epoch).
        The register is refused with CONTROLLER_BROKER_ID_INVALID; the broker obtains a new id."""
        name = request.brokerName
        cluster = request.clusterName
        broker_id = request.brokerId
        result = ControllerResult(
            header=RegisterBrokerToControllerResponseHeader(clusterName=cluster, brokerName=name)
        )
        if not self.contains(name):
            return result.fail(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"Broker-set: {name} hasn't been registered in controller",
            )
        assert name is not None
        replicas = self._replica_info[name]
        info = self._sync_state[name]
        if not replicas.is_broker_exist(broker_id):
            return result.fail(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"BrokerId: {broker_id} hasn't been registered in broker-set: {name}",
            )
        assert broker_id is not None
        address = request.brokerAddress
        recorded = replicas.broker_address(broker_id)
        if address is not None and address != recorded and live_address is not None:
            holder = live_address(cluster if cluster is not None else replicas.clusterName, name, broker_id)
            if holder is not None and holder == recorded:
                return result.fail(
                    ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                    f"BrokerId: {broker_id} of broker-set: {name} is in use by the live broker at {recorded}; "
                    f"{address} must obtain another id",
                )
        master = info.masterBrokerId
        if master is not None and is_alive(
            cluster if cluster is not None else replicas.clusterName, name, master
        ):
            result.header = RegisterBrokerToControllerResponseHeader(
                clusterName=cluster,
                brokerName=name,
                masterBrokerId=master,
                masterAddress=replicas.broker_address(master),
                masterEpoch=info.masterEpoch,
                syncStateSetEpoch=info.syncStateSetEpoch,
            )
        result.body = SyncStateSet(
            syncStateSet=frozenset(info.syncStateSet), syncStateSetEpoch=info.syncStateSetEpoch
        ).encode()
        if address is not None and address != recorded:
            result.events.append(
                UpdateBrokerAddressEvent(
                    clusterName=cluster or replicas.clusterName,
                    brokerName=name,
                    brokerAddress=address,
                    brokerId=broker_id,
                )
            )
        return result

    def handle_clean_broker_data(
        self, request: CleanControllerBrokerDataRequestHeader, is_alive: BrokerValidPredicate
    ) -> ControllerResult:
        """CLEAN_BROKER_DATA. Living brokers can only be cleaned with ``isCleanLivingBroker``.

        Deviation: the id list is honoured with ``isCleanLivingBroker`` too (upstream ignores
        it then and wipes the whole broker-set).
        """
        name = request.brokerName
        known = self._replica_info.get(name)
        # Upstream looks liveness up under the request's (optional) cluster name; without one it
        # would find nobody alive and clean living brokers, so fall back to the registered name.
        cluster = request.clusterName or (known.clusterName if known is not None else "")
        ids_text = request.brokerControllerIdsToClean
        result = ControllerResult()
        ids: frozenset[int] | None = None
        if ids_text is not None and ids_text.strip():
            tokens = ids_text.split(";")
            while tokens and tokens[-1] == "":
                tokens.pop()  # Java's String.split drops trailing empty strings
            if not all(_ID_TOKEN.fullmatch(t) for t in tokens):
                return result.fail(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"Please set the option <brokerControllerIdsToClean> according to the format, got: {ids_text!r}",
                )
            ids = frozenset(int(t) for t in tokens)
        if not request.isCleanLivingBroker:
            info = self._sync_state.get(name)
            if ids is None and info is not None and info.masterBrokerId is not None:
                return result.fail(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"Broker {name} is still alive, clean up failure",
                )
            for broker_id in sorted(ids or ()):
                if is_alive(cluster, name, broker_id):
                    return result.fail(
                        ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        f"Broker [{name},  {broker_id}] is still alive, clean up failure",
                    )
        if self.contains(name):
            result.events.append(CleanBrokerDataEvent(brokerName=name, brokerIdSetToClean=ids))
            return result
        return result.fail(
            ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
            f"Broker {name} is not existed,clean broker data failure.",
        )

    # -- reads -----------------------------------------------------------------------------

    def handle_get_next_broker_id(self, request: GetNextBrokerIdRequestHeader) -> ControllerResult:
        """CONTROLLER_GET_NEXT_BROKER_ID: 1 for an unknown set, else ``nextAssignBrokerId`` (an id in
        use never: see ``BrokerReplicaInfo.next_free_id``)."""
        replicas = self._replica_info.get(request.brokerName) if request.brokerName is not None else None
        next_id = FIRST_BROKER_CONTROLLER_ID if replicas is None else replicas.next_free_id()
        return ControllerResult(
            header=GetNextBrokerIdResponseHeader(
                clusterName=request.clusterName, brokerName=request.brokerName, nextBrokerId=next_id
            )
        )

    def handle_get_replica_info(self, request: GetReplicaInfoRequestHeader) -> ControllerResult:
        """CONTROLLER_GET_REPLICA_INFO: master id/address/epoch (even if dead) and the SyncStateSet."""
        name = request.brokerName
        result = ControllerResult(header=GetReplicaInfoResponseHeader())
        if not self.contains(name):
            return result.fail(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed"
            )
        assert name is not None
        info = self._sync_state[name]
        replicas = self._replica_info[name]
        result.header = GetReplicaInfoResponseHeader(
            masterBrokerId=info.masterBrokerId,
            masterAddress=replicas.broker_address(info.masterBrokerId),
            masterEpoch=info.masterEpoch,
        )
        result.body = SyncStateSet(
            syncStateSet=frozenset(info.syncStateSet), syncStateSetEpoch=info.syncStateSetEpoch
        ).encode()
        return result

    def handle_get_sync_state_data(
        self, broker_names: Iterable[str], is_alive: BrokerValidPredicate
    ) -> ControllerResult:
        """CONTROLLER_GET_SYNC_STATE_DATA: a :class:`BrokerReplicasInfo` for the known names."""
        table: dict[str, ReplicasInfo] = {}
        for name in broker_names:
            if not self.contains(name):
                continue
            info = self._sync_state[name]
            replicas = self._replica_info[name]
            in_sync: list[ReplicaIdentity] = []
            not_in_sync: list[ReplicaIdentity] = []
            for broker_id, address in replicas.broker_id_table().items():
                replica = ReplicaIdentity(
                    brokerName=name,
                    brokerId=broker_id,
                    brokerAddress=address,
                    alive=is_alive(replicas.clusterName, name, broker_id),
                )
                (in_sync if broker_id in info.syncStateSet else not_in_sync).append(replica)
            table[name] = ReplicasInfo(
                masterBrokerId=info.masterBrokerId,
                masterAddress=replicas.broker_address(info.masterBrokerId),
                masterEpoch=info.masterEpoch,
                syncStateSetEpoch=info.syncStateSetEpoch,
                inSyncReplicas=in_sync,
                notInSyncReplicas=not_in_sync,
            )
        return ControllerResult(body=BrokerReplicasInfo(replicasInfoTable=table).encode())

    def broker_member_group(self, broker_name: str) -> BrokerMemberGroup | None:
        """All registered ids → addresses of a broker-set, or None when unknown."""
        replicas = self._replica_info.get(broker_name)
        if replicas is None:
            return None
        return BrokerMemberGroup(
            cluster=replicas.clusterName, brokerName=broker_name, brokerAddrs=replicas.broker_id_table()
        )

    def scan_need_reelect_broker_sets(self, is_alive: BrokerValidPredicate) -> list[str]:
        """Broker-sets whose recorded master is dead while at least one registered replica lives."""
        out: list[str] = []
        for name in sorted(self._sync_state):
            info = self._sync_state[name]
            master = info.masterBrokerId
            if master is None or is_alive(info.clusterName, name, master):
                continue
            replicas = self._replica_info.get(name)
            if replicas is not None and any(
                is_alive(info.clusterName, name, b) for b in replicas.brokerIdInfo
            ):
                out.append(name)
        return out

    # -- apply -----------------------------------------------------------------------------

    def apply_event(self, event: Event) -> None:
        """Change the state by one committed event (upstream ``applyEvent``)."""
        if self._shared is not None:
            self._unshare(event.brokerName)
        match event:
            case AlterSyncStateSetEvent():
                if self.contains(event.brokerName):
                    self._sync_state[event.brokerName].update_sync_state_set_info(event.newSyncStateSet)
            case ApplyBrokerIdEvent():
                self._apply_broker_id(event)
            case ElectMasterEvent():
                self._apply_elect_master(event)
            case CleanBrokerDataEvent():
                self._apply_clean_broker_data(event)
            case UpdateBrokerAddressEvent():
                replicas = self._replica_info.get(event.brokerName)
                entry = replicas.brokerIdInfo.get(event.brokerId) if replicas is not None else None
                if entry is None:
                    log.error("UpdateBrokerAddressEvent for an unknown broker, event = %s", event)
                    return
                entry.brokerAddress = event.brokerAddress
            case _:
                raise TypeError(f"not a controller event: {event!r}")

    def _apply_broker_id(self, event: ApplyBrokerIdEvent) -> None:
        name = event.brokerName
        if self.contains(name):
            replicas = self._replica_info[name]
            if not replicas.is_broker_exist(event.newBrokerId):
                replicas.add_broker(event.newBrokerId, event.brokerAddress, event.registerCheckCode)
            return
        # First broker of this set: create both tables' entries (an empty SyncStateInfo).
        replicas = BrokerReplicaInfo(clusterName=event.clusterName, brokerName=name)
        replicas.add_broker(event.newBrokerId, event.brokerAddress, event.registerCheckCode)
        self._replica_info[name] = replicas
        self._sync_state[name] = SyncStateInfo(clusterName=event.clusterName, brokerName=name)

    def _apply_elect_master(self, event: ElectMasterEvent) -> None:
        if not self.contains(event.brokerName):
            log.error(
                "Receive an ElectMasterEvent which contains the un-registered broker, event = %s", event
            )
            return
        info = self._sync_state[event.brokerName]
        if event.newMasterElected:
            info.update_master_info(event.newMasterBrokerId)
            if event.newMasterEpoch is not None and event.newMasterEpoch > info.masterEpoch:
                info.masterEpoch = event.newMasterEpoch
            info.update_sync_state_set_info(
                {event.newMasterBrokerId} if event.newMasterBrokerId is not None else ()
            )
        else:
            # The old master is gone and nobody replaced it: forget it, keep the SyncStateSet.
            info.update_master_info(None)

    def _apply_clean_broker_data(self, event: CleanBrokerDataEvent) -> None:
        name = event.brokerName
        ids = event.brokerIdSetToClean
        if not ids:
            self._replica_info.pop(name, None)
            self._sync_state.pop(name, None)
            return
        if not self.contains(name):
            return
        replicas = self._replica_info[name]
        info = self._sync_state[name]
        for broker_id in ids:
            replicas.brokerIdInfo.pop(broker_id, None)
            info.syncStateSet.discard(broker_id)
        if info.lastMasterBrokerId in ids:
            info.lastMasterBrokerId = None
        if not replicas.brokerIdInfo:
            del self._replica_info[name]
        if not info.syncStateSet:
            # Upstream quirk kept: an emptied SyncStateSet drops the entry, so the set stops
            # "existing" until a broker applies for an id again.
            del self._sync_state[name]

    # -- Raft StateMachine -----------------------------------------------------------------

    def apply(self, index: int, data: bytes) -> int:
        """Apply one committed Raft entry (a batch of events; empty = no-op); returns the event count."""
        events = decode_events(data)
        for event in events:
            self.apply_event(event)
        self.last_applied_index = index
        return len(events)

    def snapshot(self) -> bytes:
        """The whole state (see :func:`controller.replica_tables.encode_snapshot`)."""
        return encode_snapshot(self._replica_info, self._sync_state)

    def restore(self, data: bytes) -> None:
        """Replace the state with a :meth:`snapshot`."""
        self._replica_info, self._sync_state = decode_snapshot(data)
        if self._shared is not None:
            self._shared = set()
