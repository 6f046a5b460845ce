"""Controller mode on the broker side (upstream ``ReplicasManager``).

With ``enableControllerMode=true`` a broker starts *isolated* (no name-server registration, sends
refused until it has a role) and :class:`ReplicasManager` brings it into its replica group:

1. learn the leader controller (CONTROLLER_GET_METADATA_INFO against ``controllerAddr``, up to three
   tries), then again every ``syncControllerMetadataPeriod``;
2. get its persistent controller id (:mod:`broker.identity`): metadata file present → use it; temp file
   present → re-apply its id and check code; otherwise CONTROLLER_GET_NEXT_BROKER_ID → temp file →
   CONTROLLER_APPLY_BROKER_ID (``registerCheckCode`` = ``addr;millis``) → metadata file;
3. CONTROLLER_REGISTER_BROKER with its current address (the controller records a changed address, so
   a broker moved to another IP/port keeps its id); an answer naming a live master sets the role;
4. one acknowledged heartbeat to every controller, then — when no master is known — a broker-triggered
   CONTROLLER_ELECT_MASTER (own id, not designated); once a master is known the broker is RUNNING:
   isolation ends, controller heartbeats run every ``brokerHeartbeatInterval``, the replica info is
   polled every ``syncBrokerMetadataPeriod`` (a lost notification is caught up there);
5. any failure: the whole sequence is retried (upstream: every 5 s; here every
   ``min(5 s, syncBrokerMetadataPeriod)``).

Role changes come from register/elect answers, NOTIFY_BROKER_ROLE_CHANGED and the poll; they are
decided by :mod:`broker.replica_view` (only a newer master epoch changes the role) and carried out
one at a time through ``broker.replication.change_to_master`` / ``change_to_slave``. A master reports
SyncStateSet changes with CONTROLLER_ALTER_SYNC_STATE_SET (the HA service's callback) and the HA
service adopts a set only after the controller accepted it.

Deviations from upstream, each for robustness:

* a registration refused with CONTROLLER_BROKER_NEED_TO_BE_REGISTERED although the identity file
  holds an id (the controller lost its state) re-applies that id; if the controller refuses it, the
  identity is dropped and a new id is obtained (upstream retries forever);
* the startup heartbeat is acknowledged (upstream: oneway), so the leader counts the broker alive
  before it asks for an election;
* a slave re-registers with the name servers until they name the master the controller chose (the
  slave learns the master's HA address from that answer; upstream waits for the periodic
  registration).

The requests the broker serves for controller mode (GET_BROKER_EPOCH_CACHE, NOTIFY_BROKER_ROLE_CHANGED)
are in :mod:`broker.replicas_processor`, which also creates the manager.
"""

from __future__ import annotations

import enum
import logging
import random
from typing import TYPE_CHECKING, Literal

import trio

from broker.controller_api import ControllerAPI, ControllerError, ControllerUnavailable
from broker.identity import (
    BrokerIdentityFiles,
    BrokerMetadata,
    TempBrokerMetadata,
    mismatch,
    register_check_code,
)
from broker.replica_view import (
    AdoptSyncStateSet,
    ChangeToMaster,
    ChangeToSlave,
    Decision,
    ElectSelf,
    ReplicaView,
    on_master_info,
    on_replica_info,
    record,
)
from remoting.codes import ResponseCode
from remoting.protocol.controller import (
    ELECT_WAIT_REMARK,
    EQUAL_SYNC_STATE_SET_REMARK,
    FIRST_BROKER_CONTROLLER_ID,
    BrokerHeartbeatRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    SyncStateSet,
)
from remoting.repeats import RepeatedLog
from store.ha.role import RoleChangeError
from store.ha.service import NOT_ANSWERED

if TYPE_CHECKING:
    from broker.controller import BrokerController

#: Upstream ``RETRY_INTERVAL_SECOND``: pause between failed startup sequences (upper bound here).
RETRY_INTERVAL = 5.0
#: Upstream: the leader is looked up at most 3 times, 1 s apart, before a startup attempt fails.
LEADER_TRIES = 3
#: Here, within the same 2 s, it is looked up again after 50 ms, pauses doubling up to 200 ms: the
#: controller group often starts with the brokers (the dev cluster's peer, in the same process,
#: leads ~0.4 s after start; with upstream's 1 s pauses its brokers found it only at 1 s)
LEADER_LOOKUP_FIRST_PAUSE = 0.05
LEADER_LOOKUP_MAX_PAUSE = 0.2
#: Upstream: registration is tried 5 times with random 0–1 s pauses.
REGISTER_TRIES = 5
#: Upstream: periodic tasks start after 3 s (here: at most that, at most one period).
FIRST_DELAY = 3.0
#: A new slave re-registers with the name servers until they name its master: first pause, longest.
MASTER_LOOKUP_INTERVAL = 0.2
MASTER_LOOKUP_MAX_INTERVAL = 3.0
#: Upstream ``BrokerOuterAPI``: every controller call waits at most 3 s.
CONTROLLER_CALL_TIMEOUT = 3.0
#: A controller that lost its data knows no broker-set until a replica claims id 1: a replica with
#: another persisted id keeps it (retrying) for at least this long before obtaining a new one,
#: since the id-1 replica usually restarts with it (taking id 1 itself would collide with that one)
RECLAIM_GRACE = 10.0


class State(enum.Enum):
    """Upstream ``ReplicasManager.State``."""

    INITIAL = 0
    FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE = 1
    REGISTER_TO_CONTROLLER_DONE = 2
    RUNNING = 3
    SHUTDOWN = 4


class RegisterState(enum.Enum):
    """Upstream ``ReplicasManager.RegisterState``."""

    INITIAL = 0
    CREATE_TEMP_METADATA_FILE_DONE = 1
    CREATE_METADATA_FILE_DONE = 2
    REGISTERED = 3


class ReplicasManager:
    """Controller-mode membership of one broker; see the module docstring."""

    def __init__(self, broker: BrokerController) -> None:
        bc = broker.broker_config
        self.broker = broker
        self.log = logging.getLogger(f"broker.{broker.name}.replicas")
        self.api = ControllerAPI(
            broker.client,
            bc.controller_addr_list,
            timeout=CONTROLLER_CALL_TIMEOUT,
            logger=self.log,
        )
        self.files = BrokerIdentityFiles(broker.store_config.broker_identity_path)
        self.view = ReplicaView()
        self.state = State.INITIAL
        self.register_state = RegisterState.INITIAL
        #: set once the broker is RUNNING (a master is known, isolation ended)
        self.running = trio.Event()
        self.period = bc.syncBrokerMetadataPeriod / 1000
        self.retry_interval = min(RETRY_INTERVAL, max(0.05, self.period))
        #: the last election request was deferred by the controller for the recorded master
        self._waited_for_master = False
        #: the last register() lost the race for an id to another replica (see start_basic_service)
        self._id_taken = False
        #: a role change was refused: the controller's epochs are behind this broker's epoch file
        self._controller_behind = False
        #: when the controller first refused to take back our persisted id (see _reclaim_identity)
        self._reclaim_since: float | None = None
        self._lock = trio.Lock()
        #: the startup sequence's retry warnings, logged once per change (or REPEAT_INTERVAL)
        self._repeats = RepeatedLog(self.log)
        self._poll_now = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._master_lookup: trio.CancelScope | None = None
        self._random = random.Random()
        broker.replication.alter_sync_state_set = self._alter_sync_state_set

    # ------------------------------------------------------------------ lifecycle

    @property
    def broker_controller_id(self) -> int | None:
        return self.view.broker_controller_id

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join the replica group (retrying until it works), then keep the role in sync; runs until
        cancelled. ``task_status.started()`` comes at once: the broker serves (fenced) meanwhile."""
        bc = self.broker.broker_config
        if not self.api.addresses:
            raise ValueError(f"broker {self.broker.name}: enableControllerMode needs controllerAddr")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                if self.broker.join_after is not None:
                    await self.broker.join_after.wait()
                while not await self.start_basic_service():
                    # a pass that only waited for the recorded master to report is no failure
                    level = logging.INFO if self._waited_for_master else logging.WARNING
                    self._repeats.log(
                        "join", level, f"joining the replica group failed (state {self.state.name}); retrying"
                    )
                    await trio.sleep(self.retry_interval)
                nursery.start_soon(self._controller_metadata_loop)
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._sync_broker_metadata_loop)
                self.log.info(
                    "controller mode running: id %s, %s of epoch %d (controllers %s)",
                    self.view.broker_controller_id,
                    "master" if self.view.is_master else "slave",
                    self.view.master_epoch,
                    bc.controllerAddr,
                )
                await trio.sleep_forever()
        finally:
            self.state = State.SHUTDOWN
            self._nursery = None

    async def start_basic_service(self) -> bool:
        """One pass of the startup sequence (upstream ``startBasicService``); True when RUNNING."""
        self._waited_for_master = False
        if self.state == State.INITIAL:
            if not await self._first_leader_lookup():
                return False
            self.state = State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE
        if self.state == State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE:
            for _ in range(REGISTER_TRIES):
                self._id_taken = False
                if await self.register():
                    self.state = State.REGISTER_TO_CONTROLLER_DONE
                    break
                if not self._id_taken:
                    # upstream's random pause against replicas registering at the same moment; after
                    # losing the race for an id there is no need: the winner's apply moved the next
                    # id on, so asking again at once gets a free one (a fresh dev cluster's slaves
                    # used to wait up to a second for nothing)
                    await trio.sleep(self._random.random() * min(1.0, self.retry_interval))
            else:
                self.log.error("registering to the controller failed %d times", REGISTER_TRIES)
                return False
        if self.state == State.REGISTER_TO_CONTROLLER_DONE:
            await self.send_heartbeat(acknowledged=True)
            if self.view.master_broker_id is None and not await self.broker_elect():
                return False
            self.state = State.RUNNING
            self._set_fenced(False)
            self.running.set()
        return True

    async def _first_leader_lookup(self) -> bool:
        """Find the controller leader, looking again for as long as upstream's three lookups 1 s
        apart take, but soon at first (see :data:`LEADER_LOOKUP_FIRST_PAUSE`)."""
        budget = (LEADER_TRIES - 1) * min(1.0, self.retry_interval)
        deadline = trio.current_time() + budget
        pause = min(LEADER_LOOKUP_FIRST_PAUSE, budget)
        while True:
            if await self.api.refresh_leader() is not None:
                return True
            left = deadline - trio.current_time()
            if left <= 0:
                break
            await trio.sleep(min(pause, left))
            pause = min(2 * pause, LEADER_LOOKUP_MAX_PAUSE)
        self.log.error("no controller leader known to %s", ";".join(self.api.addresses))
        return False

    def _set_fenced(self, fenced: bool) -> None:
        """Isolation (upstream ``setFenced``): no name-server registration while fenced; sends are
        refused by the replication gate until a role is set."""
        b = self.broker
        if getattr(b, "isolated", fenced) != fenced:
            b.isolated = fenced
            self.log.info(
                "%s", "isolated" if fenced else "isolation ended: registering with the name servers"
            )
        if not fenced:
            b.request_register()

    # ------------------------------------------------------------------ identity and registration

    async def register(self) -> bool:
        """Obtain the persistent id and register it with the controller (upstream ``register``)."""
        b = self.broker
        bc = b.broker_config
        try:
            metadata, temp = await trio.to_thread.run_sync(self._read_identity)
            if metadata is not None:
                self.register_state = RegisterState.CREATE_METADATA_FILE_DONE
                self._set_controller_id(metadata.brokerId)
            elif temp is not None:
                self.register_state = RegisterState.CREATE_TEMP_METADATA_FILE_DONE
            else:
                self.register_state = RegisterState.INITIAL
            stored = metadata or temp
            if stored is not None and (why := mismatch(stored, bc.brokerClusterName, bc.brokerName)):
                self.log.error("%s; fix the config or remove %s", why, self.files.path)
                return False
            if self.register_state == RegisterState.INITIAL:
                next_id = await self.api.get_next_broker_id(bc.brokerClusterName, bc.brokerName)
                temp = TempBrokerMetadata(
                    clusterName=bc.brokerClusterName,
                    brokerName=bc.brokerName,
                    brokerId=next_id,
                    registerCheckCode=register_check_code(b.addr, b.now_ms()),
                )
                await trio.to_thread.run_sync(self.files.write_temp, temp)
                self.register_state = RegisterState.CREATE_TEMP_METADATA_FILE_DONE
                self.log.info("asking for broker id %d (check code %s)", next_id, temp.registerCheckCode)
            if self.register_state == RegisterState.CREATE_TEMP_METADATA_FILE_DONE:
                assert temp is not None
                try:
                    await self.api.apply_broker_id(
                        bc.brokerClusterName, bc.brokerName, temp.brokerId, temp.registerCheckCode
                    )
                except ControllerError as e:
                    # BROKER_ID_INVALID is the normal race of replicas starting together (another
                    # one applied for the same next id first); anything else is worth a warning
                    level = (
                        logging.INFO
                        if e.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
                        else logging.WARNING
                    )
                    self.log.log(level, "broker id %d refused (%s); starting over", temp.brokerId, e)
                    await trio.to_thread.run_sync(self.files.delete_temp)
                    self.register_state = RegisterState.INITIAL
                    self._id_taken = e.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
                    return False
                metadata = await trio.to_thread.run_sync(self.files.confirm, temp)
                self._set_controller_id(metadata.brokerId)
                self.register_state = RegisterState.CREATE_METADATA_FILE_DONE
                self.log.info("broker id %d assigned and persisted in %s", metadata.brokerId, self.files.path)
            if self.register_state == RegisterState.CREATE_METADATA_FILE_DONE:
                if not await self.register_to_controller():
                    return False
                self.register_state = RegisterState.REGISTERED
            return True
        except (ControllerError, ControllerUnavailable) as e:
            self.log.warning("registering to the controller failed: %s", e)
            return False

    def _read_identity(self) -> tuple[BrokerMetadata | None, TempBrokerMetadata | None]:
        metadata = self.files.read_metadata()
        return metadata, (None if metadata is not None else self.files.read_temp())

    def _set_controller_id(self, broker_id: int) -> None:
        if self.view.broker_controller_id != broker_id:
            self.view = ReplicaView(broker_controller_id=broker_id)
        replication = self.broker.replication
        replication.replica_id = broker_id
        if replication.ha is not None:
            replication.ha.broker_id = broker_id

    async def register_to_controller(self) -> bool:
        """CONTROLLER_REGISTER_BROKER; a live master in the answer sets the role."""
        b = self.broker
        bc = b.broker_config
        broker_id = self.view.broker_controller_id
        assert broker_id is not None
        try:
            header, sss = await self.api.register_broker(
                bc.brokerClusterName, bc.brokerName, broker_id, b.addr, b.now_ms()
            )
        except ControllerError as e:
            if e.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
                # another live broker holds this id (a controller that lost its data handed it out
                # again): acting on it would make two brokers one identity
                self.log.warning(
                    "broker id %d is in use by another broker (%s): obtaining a new id", broker_id, e
                )
                await self._drop_identity()
                return False
            if (
                e.code != ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
                or not await self._reclaim_identity(broker_id)
            ):
                raise
            header, sss = await self.api.register_broker(
                bc.brokerClusterName, bc.brokerName, broker_id, b.addr, b.now_ms()
            )
        self.log.info(
            "registered to the controller as id %d: %s, SyncStateSet %s epoch %d",
            broker_id,
            "no live master"
            if header.masterBrokerId is None
            else f"master {header.masterBrokerId} ({header.masterAddress}) epoch {header.masterEpoch}",
            sorted(sss.syncStateSet),
            sss.syncStateSetEpoch,
        )
        if header.masterBrokerId is not None:
            await self.change_broker_role(
                header.masterBrokerId,
                header.masterAddress,
                header.masterEpoch,
                header.syncStateSetEpoch or sss.syncStateSetEpoch,
                sss.syncStateSet,
            )
        return True

    async def _reclaim_identity(self, broker_id: int) -> bool:
        """The controller does not know our persisted id (it lost its state): claim it again (True).
        While the broker-set is unknown to it (no id handed out yet: only id 1 may found it), keep
        the id and let the caller retry, for :data:`RECLAIM_GRACE` at least; then, or when the id is
        refused otherwise, drop the identity so that the next attempt obtains a new one (False)."""
        b = self.broker
        bc = b.broker_config
        code = register_check_code(b.addr, b.now_ms())
        try:
            await self.api.apply_broker_id(bc.brokerClusterName, bc.brokerName, broker_id, code)
        except ControllerError as e:
            now = trio.current_time()
            since = self._reclaim_since = self._reclaim_since if self._reclaim_since is not None else now
            grace = max(RECLAIM_GRACE, bc.controllerHeartBeatTimeoutMills / 1000)
            if (
                broker_id != FIRST_BROKER_CONTROLLER_ID
                and now - since < grace
                and await self.api.get_next_broker_id(bc.brokerClusterName, bc.brokerName)
                == FIRST_BROKER_CONTROLLER_ID
            ):
                self.log.info(
                    "the controller does not know broker-set %s yet; keeping broker id %d until a replica "
                    "with id %d registers it (at most %.0f s more)",
                    bc.brokerName,
                    broker_id,
                    FIRST_BROKER_CONTROLLER_ID,
                    grace - (now - since),
                )
                return False
            self.log.warning(
                "the controller does not know broker id %d and refuses it (%s): obtaining a new id",
                broker_id,
                e,
            )
            await self._drop_identity()
            return False
        self._reclaim_since = None
        self.log.warning("the controller did not know broker id %d; claimed it again", broker_id)
        return True

    async def _drop_identity(self) -> None:
        """Forget the persisted id: the next registration attempt obtains a new one."""
        self._reclaim_since = None
        await trio.to_thread.run_sync(self.files.delete_metadata)
        self.register_state = RegisterState.INITIAL

    # ------------------------------------------------------------------ election and heartbeats

    async def broker_elect(self) -> bool:
        """Broker-triggered CONTROLLER_ELECT_MASTER (own id); True when the answer names a master
        (then the role is set)."""
        b = self.broker
        bc = b.broker_config
        broker_id = self.view.broker_controller_id
        assert broker_id is not None
        try:
            header, members = await self.api.elect_master(
                bc.brokerClusterName, bc.brokerName, broker_id, b.now_ms()
            )
        except (ControllerError, ControllerUnavailable) as e:
            code = e.code if isinstance(e, ControllerError) else None
            if (
                code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
                and self.state == State.REGISTER_TO_CONTROLLER_DONE
            ):
                # the broker-set was cleaned from the controller (cleanBrokerMetadata) after this
                # broker registered: register again (its id is re-applied or a new one obtained;
                # a running broker's poll does the same in sync_broker_metadata)
                self.log.warning(
                    "the controller no longer knows broker-set %s (%s): registering again", bc.brokerName, e
                )
                self.state = State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE
                return False
            waiting = code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED and (e.remark or "").startswith(
                ELECT_WAIT_REMARK
            )
            # the controller gives a recorded master time to report after a restart: expected
            self._waited_for_master = waiting
            self._repeats.log(
                "elect",
                logging.INFO if waiting else logging.WARNING,
                f"no master elected for {bc.brokerName}: {e}",
            )
            return False
        self._repeats.forget("elect")
        if header.masterBrokerId is None or not header.masterAddress:
            self.log.warning("no master in broker set %s", bc.brokerName)
            return False
        await self.change_broker_role(
            header.masterBrokerId,
            header.masterAddress,
            header.masterEpoch,
            header.syncStateSetEpoch or 0,
            members,
        )
        return True

    def heartbeat_header(self) -> BrokerHeartbeatRequestHeader:
        b = self.broker
        bc = b.broker_config
        return BrokerHeartbeatRequestHeader(
            clusterName=bc.brokerClusterName,
            brokerAddr=b.addr,
            brokerName=bc.brokerName,
            brokerId=self.view.broker_controller_id,
            epoch=b.store.epoch_file.last_epoch(),
            maxOffset=b.store.max_phy_offset,
            confirmOffset=b.replication.confirm_offset,
            heartbeatTimeoutMills=bc.controllerHeartBeatTimeoutMills,
            electionPriority=bc.brokerElectionPriority,
        )

    async def send_heartbeat(self, *, acknowledged: bool = False) -> int:
        """BROKER_HEARTBEAT to every controller; returns how many got it."""
        if self.view.broker_controller_id is None:
            return 0
        timeout = self.broker.broker_config.sendHeartbeatTimeoutMillis / 1000
        return await self.api.heartbeat_all(self.heartbeat_header(), timeout, oneway=not acknowledged)

    async def _heartbeat_loop(self) -> None:
        interval = self.broker.broker_config.brokerHeartbeatInterval / 1000
        while True:
            await self.send_heartbeat()
            await trio.sleep(interval)

    async def _controller_metadata_loop(self) -> None:
        period = self.broker.broker_config.syncControllerMetadataPeriod / 1000
        await trio.sleep(min(FIRST_DELAY, period))
        while True:
            await self.api.refresh_leader()
            await trio.sleep(period)

    # ------------------------------------------------------------------ replica info poll

    async def _sync_broker_metadata_loop(self) -> None:
        with trio.move_on_after(min(FIRST_DELAY, self.period)):
            await self._poll_now.wait()
        while True:
            self._poll_now = trio.Event()
            await self.sync_broker_metadata()
            with trio.move_on_after(self.period):
                await self._poll_now.wait()

    async def sync_broker_metadata(self) -> None:
        """One CONTROLLER_GET_REPLICA_INFO round (upstream ``schedulingSyncBrokerMetadata`` body);
        after a refused role change (the controller's epochs behind this broker's epoch file), a
        broker-triggered election instead, once the controller has this broker's epoch."""
        bc = self.broker.broker_config
        if self._controller_behind:
            self._controller_behind = False
            if await self.send_heartbeat(acknowledged=True):
                await self.broker_elect()
                return
        try:
            header, sss = await self.api.get_replica_info(bc.brokerName)
        except ControllerError as e:
            self.log.warning("replica info of %s: %s", bc.brokerName, e)
            if e.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                try:
                    await self.register_to_controller()
                except (ControllerError, ControllerUnavailable) as again:
                    self.log.warning("re-registering failed: %s", again)
                await trio.sleep(min(2.0, self.period))
            return
        except ControllerUnavailable as e:
            self.log.warning("replica info of %s: %s", bc.brokerName, e)
            return
        async with self._lock:
            decision = on_replica_info(
                self.view,
                header.masterBrokerId,
                header.masterAddress,
                header.masterEpoch,
                sss.syncStateSet,
                sss.syncStateSetEpoch,
            )
            if decision is None:
                return
            if not isinstance(decision, ElectSelf):
                await self._carry_out(decision)
                return
        await self.broker_elect()

    # ------------------------------------------------------------------ role changes

    async def change_broker_role(
        self,
        master_id: int | None,
        master_address: str | None,
        master_epoch: int | None,
        sync_state_set_epoch: int,
        sync_state_set: frozenset[int],
    ) -> bool:
        """Act on an answer naming a master (upstream ``changeBrokerRole``); True if the role changed."""
        async with self._lock:
            decision = on_master_info(
                self.view,
                master_id,
                master_address,
                master_epoch,
                frozenset(sync_state_set),
                sync_state_set_epoch,
            )
            if decision is None:
                return False
            return await self._carry_out(decision)

    async def _carry_out(self, decision: Decision) -> bool:
        """Execute one decision (under the lock) and record it; False when the change was refused."""
        b = self.broker
        replication = b.replication
        try:
            if isinstance(decision, ChangeToMaster):
                self._stop_master_lookup()
                self.log.info(
                    "becoming master of epoch %d, SyncStateSet %s (epoch %d)",
                    decision.epoch,
                    sorted(decision.sync_state_set),
                    decision.sync_state_set_epoch,
                )
                after = record(self.view, decision, b.addr)
                await replication.change_to_master(
                    decision.epoch,
                    set(after.sync_state_set) | {decision_id(after)},
                    after.sync_state_set_epoch,
                )
            elif isinstance(decision, ChangeToSlave):
                if decision.same_master and decision.epoch == self.view.master_epoch:
                    self.log.info(
                        "master %d of epoch %d moved from %s to %s: following it there",
                        decision.master_id,
                        decision.epoch,
                        self.view.master_address,
                        decision.master_address,
                    )
                else:
                    self.log.info(
                        "becoming slave of %d (%s) in epoch %d",
                        decision.master_id,
                        decision.master_address,
                        decision.epoch,
                    )
                await replication.change_to_slave(
                    None,
                    decision.epoch,
                    master_addr=decision.master_address,
                    broker_id=self.view.broker_controller_id,
                )
                self._start_master_lookup(decision.master_address)
            elif isinstance(decision, AdoptSyncStateSet):
                self.log.info(
                    "SyncStateSet %s (epoch %d)",
                    sorted(decision.sync_state_set),
                    decision.sync_state_set_epoch,
                )
                replication.on_sync_state_set_changed(
                    set(decision.sync_state_set), decision.sync_state_set_epoch
                )
        except OSError as e:
            # the store could not make the change durable (a full disk: the epoch file): the broker
            # stays fenced, and the next replica-info round decides (and tries) again
            role = "master" if isinstance(decision, ChangeToMaster) else "slave"
            self._repeats.log(
                "role-io",
                logging.ERROR,
                f"becoming {role} failed: the store refused to write ({e}); sends stay refused and the "
                "next replica-info round tries again",
            )
            return False
        except RoleChangeError as e:
            # The controller's epochs are behind this broker's epoch file: it lost its data or runs
            # on an older store (another controllerStorePath, a restored backup). Acting on them
            # would rewrite the replicas' shared history; the next replica-info round asks for an
            # election instead, which an rmq-container controller starts above the epoch this
            # broker reports (controller/replicas.py, handle_elect_master).
            self.log.error(
                "role change refused by the local epoch history: %s (the controller's master epochs are "
                "behind this broker's epoch file; was the controller's store replaced?); asking for an "
                "election above it",
                e,
            )
            self._controller_behind = True
            return False
        self.view = record(self.view, decision, b.addr)
        return True

    def _start_master_lookup(self, master_address: str) -> None:
        self._stop_master_lookup()
        if self._nursery is None:
            return
        scope = self._master_lookup = trio.CancelScope()
        self._nursery.start_soon(self._find_master_ha_address, master_address, scope)

    def _stop_master_lookup(self) -> None:
        if self._master_lookup is not None:
            self._master_lookup.cancel()
            self._master_lookup = None

    async def _find_master_ha_address(self, master_address: str, scope: trio.CancelScope) -> None:
        """A new slave learns its master's HA address from the name servers' registration answer:
        register until they name the master the controller chose (and its HA address)."""
        b = self.broker
        pause = MASTER_LOOKUP_INTERVAL
        with scope:
            await self.running.wait()
            while True:
                ha = b.replication.ha
                if b.master_addr == master_address and ha is not None and ha.master_address:
                    self.log.info("master %s serves HA at %s", master_address, ha.master_address)
                    return
                await b.register_to_namesrvs()
                await trio.sleep(pause)
                pause = min(pause * 2, MASTER_LOOKUP_MAX_INTERVAL)

    # ------------------------------------------------------------------ SyncStateSet (master)

    async def _alter_sync_state_set(
        self, proposal: set[int]
    ) -> tuple[set[int], int] | Literal["not answered"] | None:
        """The HA service's callback: CONTROLLER_ALTER_SYNC_STATE_SET; the accepted set, None when
        the controller refused the proposal itself (the replicas it would add are held back), or
        NOT_ANSWERED when no decision was had (no controller, a stale view, a role change)."""
        view = self.view
        bc = self.broker.broker_config
        if not view.is_master or view.broker_controller_id is None:
            return NOT_ANSWERED
        try:
            result = await self.api.alter_sync_state_set(
                bc.brokerName,
                view.broker_controller_id,
                view.master_epoch,
                frozenset(proposal),
                view.sync_state_set_epoch,
                self.broker.now_ms(),
            )
        except ControllerError as e:
            if (
                e.code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
                and e.remark == EQUAL_SYNC_STATE_SET_REMARK
            ):
                # the controller's set is the proposal already (an earlier proposal whose answer was
                # lost went through): adopt it -- its epoch comes with the next replica-info poll
                self._poll_now.set()
                self.view = record(
                    self.view, AdoptSyncStateSet(frozenset(proposal), view.sync_state_set_epoch)
                )
                return set(proposal), view.sync_state_set_epoch
            # once per proposal and 30 s: a refused replica is proposed again (held back longer each time)
            self._repeats.log(
                f"alter {sorted(proposal)}",
                logging.WARNING,
                f"SyncStateSet {sorted(proposal)} refused: {e}",
                whatever_text=True,
            )
            if e.code in (
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                ResponseCode.CONTROLLER_INVALID_MASTER,
                # a leader stopping or timing out under the request: the set may be committed
                ResponseCode.SYSTEM_ERROR,
            ):
                self._poll_now.set()  # the controller's set is unknown: look at it now
                return NOT_ANSWERED
            return None
        except ControllerUnavailable as e:
            self.log.warning("SyncStateSet %s not reported: %s", sorted(proposal), e)
            self._poll_now.set()
            return NOT_ANSWERED
        if self.view.master_epoch != view.master_epoch:
            return NOT_ANSWERED  # the role changed while the request was out
        self.log.info(
            "SyncStateSet is now %s (epoch %d)", sorted(result.syncStateSet), result.syncStateSetEpoch
        )
        self.view = record(
            self.view, AdoptSyncStateSet(frozenset(result.syncStateSet), result.syncStateSetEpoch)
        )
        return set(result.syncStateSet), result.syncStateSetEpoch

    # ------------------------------------------------------------------ requests served by the broker

    def role_changed_notified(self, header: NotifyBrokerRoleChangedRequestHeader, sss: SyncStateSet) -> bool:
        """Handle NOTIFY_BROKER_ROLE_CHANGED in the background (a role change may take a while:
        truncation, an fsync of the epoch file); False when the manager is not running."""
        if self._nursery is None:
            return False
        self._nursery.start_soon(self.on_role_changed_notification, header, sss)
        return True

    async def on_role_changed_notification(
        self, header: NotifyBrokerRoleChangedRequestHeader, sss: SyncStateSet
    ) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller leader."""
        self.log.info(
            "role change notified: master %s (%s) epoch %s, SyncStateSet %s epoch %s",
            header.masterBrokerId,
            header.masterAddress,
            header.masterEpoch,
            sorted(sss.syncStateSet),
            header.syncStateSetEpoch,
        )
        if self.view.broker_controller_id is None:
            return  # not registered yet: the registration answer will tell
        await self.change_broker_role(
            header.masterBrokerId,
            header.masterAddress,
            header.masterEpoch,
            header.syncStateSetEpoch if header.syncStateSetEpoch is not None else sss.syncStateSetEpoch,
            sss.syncStateSet,
        )


def decision_id(view: ReplicaView) -> int:
    assert view.broker_controller_id is not None
    return view.broker_controller_id
