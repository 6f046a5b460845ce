"""The controller request processor and its leader-only decisions (upstream ``ControllerManager``,
``ControllerRequestProcessor``, the ``DLedgerController`` event scheduler).

:class:`ControllerManager` turns a request command into a response:

* BROKER_HEARTBEAT, CONTROLLER_GET_METADATA_INFO, GET/UPDATE_CONTROLLER_CONFIG are answered by
  any peer from local state;
* every other controller request is leader-only: a follower answers CONTROLLER_NOT_LEADER
  (upstream remark, plus ``controllerLeaderId`` / ``controllerLeaderAddress`` extFields when the
  leader is known — an addition; upstream brokers ask GET_METADATA_INFO instead).

On the leader, leader-only requests go through :class:`~controller.request_queue.RequestQueue`
(upstream's single event thread, batched): the requests queued while the previous Raft entry
was committing are computed in arrival order against the committed state plus the events of
the requests before them, their events are committed as one Raft entry, and a response goes out
only once the entry it depends on is applied. :meth:`ControllerManager.run` drives the queue.
Elections start the new master epoch above every epoch a live replica reports (an rmq-container
safety rule for a controller that lost its data; see ``ReplicasInfoManager.handle_elect_master``).
A broker-triggered election waits a little for a recorded master that has not reported yet to a
newly leading peer (another rmq-container rule, :meth:`ControllerManager.election_wait_ms`): a
whole container restarting must not hand its masters to whichever replica registers first.

The Raft side is any object with the :class:`RaftHandle` shape (the trio driver in
``controller/raft``). Time comes from an injectable ``clock_ms``. Outgoing notifications go to an
injectable ``notify(address, command)`` callback; the trio layer (:mod:`controller.service`) sends
them oneway. Periodic work (heartbeat scan, inactive-master scan) is exposed as methods that the
trio layer calls on its schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from controller.config import ControllerConfig
from controller.elect_policy import DefaultElectPolicy
from controller.heartbeat import BrokerHeartbeatManager, BrokerLiveInfo
from controller.raft.errors import RaftError, RaftTimeoutError
from controller.replicas import ControllerResult, ReplicasInfoManager
from controller.request_queue import Compute, NotLeading, RaftHandle, RequestQueue
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.fastjson import FastjsonError
from remoting.headers import HeaderError, decode_header, encode_header
from remoting.processor import not_supported
from remoting.protocol.controller import (
    ELECT_WAIT_REMARK,
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
    decode_broker_names,
)
from remoting.repeats import RepeatedLog

log = logging.getLogger("controller")

#: Upstream ``ControllerManager.triggerElectMaster``: each controller-triggered attempt waits this long.
ELECT_ATTEMPT_TIMEOUT = 3.0
NOT_LEADER_REMARK = "The controller is not in leader state"
#: A GET_SYNC_STATE_DATA naming no broker: upstream answers with ``createResponseCommand(null)``'s bare
#: default remark (the first part); ours says why
NO_BROKER_NAMES_REMARK = (
    "not set any response code: the request names no broker (its body must be a JSON array of broker names)"
)
#: Keys UPDATE_CONTROLLER_CONFIG may never change (upstream ``initConfigBlackList``).
ALWAYS_BLACKLISTED = ("configBlackList", "configStorePath", "rocketmqHome")

LEADER_ONLY_CODES = frozenset(
    {
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        RequestCode.CONTROLLER_GET_REPLICA_INFO,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
        RequestCode.CLEAN_BROKER_DATA,
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
    }
)
#: Every request code the controller serves.
CONTROLLER_CODES = frozenset(
    LEADER_ONLY_CODES
    | {
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.CONTROLLER_GET_METADATA_INFO,
        RequestCode.UPDATE_CONTROLLER_CONFIG,
        RequestCode.GET_CONTROLLER_CONFIG,
    }
)


Notify = Callable[[str, RemotingCommand], None]
#: Internal: the request reached a peer that is not (or stopped being) the leader.
_NotLeader = NotLeading


def role_change_notifications(
    header: ElectMasterResponseHeader,
    body: ElectMasterResponseBody,
    is_alive: Callable[[str, str, int], bool],
) -> list[tuple[str, RemotingCommand]]:
    """The NOTIFY_BROKER_ROLE_CHANGED requests a successful election sends (upstream
    ``notifyBrokerRoleChanged``): one per member of the response's member group that is alive,
    header ``{masterAddress, masterEpoch, syncStateSetEpoch, masterBrokerId}``, body the new
    SyncStateSet. Nothing without a member group or a master id."""
    group = body.brokerMemberGroup
    if group is None or header.masterBrokerId is None:
        return []
    ext = encode_header(
        NotifyBrokerRoleChangedRequestHeader(
            masterAddress=header.masterAddress,
            masterEpoch=header.masterEpoch,
            syncStateSetEpoch=header.syncStateSetEpoch,
            masterBrokerId=header.masterBrokerId,
        )
    )
    payload = SyncStateSet(
        syncStateSet=body.syncStateSet, syncStateSetEpoch=header.syncStateSetEpoch or 0
    ).encode()
    out: list[tuple[str, RemotingCommand]] = []
    for broker_id, address in sorted(group.brokerAddrs.items()):
        if address and is_alive(group.cluster or "", group.brokerName or "", broker_id):
            out.append((address, request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, dict(ext), payload)))
    return out


class ControllerManager:
    """Serves the controller API on one peer; see the module docstring."""

    def __init__(
        self,
        config: ControllerConfig,
        raft: RaftHandle,
        *,
        replicas: ReplicasInfoManager | None = None,
        heartbeats: BrokerHeartbeatManager | None = None,
        clock_ms: Callable[[], float] | None = None,
        notify: Notify | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas if replicas is not None else ReplicasInfoManager()
        self.queue = RequestQueue(raft, self.replicas)
        self.heartbeats = heartbeats if heartbeats is not None else BrokerHeartbeatManager()
        self.clock_ms: Callable[[], float] = clock_ms or (lambda: trio.current_time() * 1000.0)
        self.notify = notify
        #: per broker set: when a replica of it first reported (heartbeat or registration) to this
        #: peer in its current leadership, or since the set last had no replica in the heartbeat
        #: table; cleared when the leadership changes (see :meth:`election_wait_ms`)
        self._heard_since: dict[str, float] = {}
        #: controller-triggered elections that keep failing the same way: one warning per change
        self._trigger_failures = RepeatedLog(log)
        self._handlers: dict[int, Callable[[Any, RemotingCommand], Any]] = {
            RequestCode.BROKER_HEARTBEAT: self._heartbeat,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self._metadata,
            RequestCode.GET_CONTROLLER_CONFIG: self._get_config,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self._update_config,
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self._get_next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self._apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register_broker,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._get_sync_state_data,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter_sync_state_set,
            RequestCode.CLEAN_BROKER_DATA: self._clean_broker_data,
        }

    @property
    def raft(self) -> RaftHandle:
        return self.queue.raft

    @raft.setter
    def raft(self, raft: RaftHandle) -> None:
        self.queue.raft = raft

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the leader-only requests until cancelled (:meth:`RequestQueue.run`); must run for
        them to be answered. :class:`controller.service.ControllerService` starts it."""
        await self.queue.run(task_status=task_status)

    # -- liveness view ---------------------------------------------------------------------

    def is_alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        """Upstream ``BrokerValidPredicate``: alive per this peer's heartbeat table, now."""
        return self.heartbeats.is_alive(cluster, broker_name, broker_id, self.clock_ms())

    def live_address(self, cluster: str, broker_name: str, broker_id: int) -> str | None:
        """The address a live broker heartbeats from under this id, None if none is alive."""
        if not self.is_alive(cluster, broker_name, broker_id):
            return None
        info = self.heartbeats.live_info(cluster, broker_name, broker_id)
        return info.brokerAddr if info is not None else None

    def on_role_change(self) -> None:
        """This peer's Raft role or term changed: what it heard as leader starts over."""
        self._heard_since.clear()

    def _heard_from(self, broker_name: str) -> None:
        if self.raft.is_leader:
            self._heard_since.setdefault(broker_name, self.clock_ms())
        elif self._heard_since:
            self._heard_since.clear()

    def _wait_for_master(
        self, header: ElectMasterRequestHeader, state: ReplicasInfoManager, wait: float
    ) -> ControllerResult:
        info = state.sync_state_info(header.brokerName)
        old = info.masterBrokerId if info is not None else None
        if old is None:
            last = info.lastMasterBrokerId if info is not None else None
            why = (
                f"{ELECT_WAIT_REMARK}: broker set {header.brokerName} has no master; waiting for its "
                f"last master (broker id {last}), which has not reported since the set's replicas began "
                f"reporting again; {wait:.0f} ms more before electing another: retry"
            )
        else:
            why = (
                f"{ELECT_WAIT_REMARK}: waiting for the recorded master (broker id {old}) of broker set "
                f"{header.brokerName}: it has not reported to this controller since it took the lead; "
                f"{wait:.0f} ms more before electing another: retry"
            )
        log.info("broker %s of %s asks for an election; %s", header.brokerId, header.brokerName, why)
        return ControllerResult(header=ElectMasterResponseHeader()).fail(
            ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, why
        )

    def election_wait_ms(
        self, header: ElectMasterRequestHeader, state: ReplicasInfoManager | None = None
    ) -> float:
        """How long a broker-triggered election of ``header`` must still wait (0: go ahead).

        rmq-container rule, not upstream: when the set has a recorded master that is not alive, but
        the set's replicas began reporting to this leader less than ``scanInactiveMasterInterval``
        ago, the recorded master may just be starting too -- a container restarting all its brokers
        at once, or a controller that just took the lead. Electing the first replica that asks
        would move the master (and its epoch) on every such restart, and with asynchronous
        replication could cut acknowledged messages from the old master's log. So the broker is
        told to retry; once the window has passed, the election is decided as upstream (and the
        leader's inactive-master scan elects by itself if no broker asks again). The same holds
        for the last master of a set that has no recorded master (an earlier election found no
        live replica), which the election prefers once it is back: the window then starts when a
        replica reports after the set had none in the heartbeat table. Admin-designated and
        controller-triggered elections never wait.
        ``state``: the replica state the request is computed against (the request queue's;
        default the committed state).
        """
        if header.designateElect or header.brokerId is None or header.brokerId < 0:
            return 0.0
        state = self.replicas if state is None else state
        info = state.sync_state_info(header.brokerName)
        replicas = state.replica_info(header.brokerName)
        if info is None or replicas is None or info.is_first_time_for_elect():
            return 0.0
        # no recorded master (an election found no live replica: the whole set, or this leader's
        # network, was gone for longer than the heartbeat timeout): the last one is waited for
        # the same way, as the election prefers it once it is back
        old = info.masterBrokerId if info.masterBrokerId is not None else info.lastMasterBrokerId
        if (
            old is None
            or old == header.brokerId
            or self.is_alive(replicas.clusterName, header.brokerName, old)
        ):
            return 0.0
        since = self._heard_since.get(header.brokerName)
        if since is None:
            return 0.0
        return max(0.0, self.config.scanInactiveMasterInterval - (self.clock_ms() - since))

    def elect_policy(self) -> DefaultElectPolicy:
        return DefaultElectPolicy(self.is_alive, self.heartbeats.live_info)

    def reported_epoch(self, cluster: str, broker_name: str) -> int:
        """The highest epoch a live replica of the set reports in its heartbeats (−1: none); a new
        master's epoch is set above it (see ``ReplicasInfoManager.handle_elect_master``)."""
        now = self.clock_ms()
        return max(
            (
                info.epoch
                for info in self.heartbeats.entries()
                if info.brokerName == broker_name
                and info.clusterName == cluster
                and info.lastUpdateTimestamp + info.heartbeatTimeoutMillis >= now
            ),
            default=-1,
        )

    # -- dispatch --------------------------------------------------------------------------

    async def handle(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        """Answer one controller request (``ctx`` is the remoting RequestContext, or None).

        Matches the remoting ``Handler`` signature; the server drops the answer to a oneway request.
        """
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return not_supported(cmd)
        try:
            if cmd.code in LEADER_ONLY_CODES and not self.raft.is_leader:
                raise _NotLeader
            return await handler(ctx, cmd)
        except HeaderError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except _NotLeader:
            return self._not_leader(cmd)
        except (RaftTimeoutError, trio.TooSlowError):
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, "controller request timed out waiting for the raft log"
            )
        except RaftError as exc:  # e.g. the driver stopping under the request
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"controller raft error: {exc}")

    def codes(self) -> frozenset[int]:
        """The request codes :meth:`handle` serves (register each with the remoting server)."""
        return frozenset(self._handlers)

    def _not_leader(self, cmd: RemotingCommand) -> RemotingCommand:
        response = cmd.response(ResponseCode.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
        leader_id = self.raft.leader_id
        address = self._leader_address()
        ext = {}
        if leader_id is not None:
            ext["controllerLeaderId"] = leader_id
        if address is not None:
            ext["controllerLeaderAddress"] = address
        response.ext_fields = ext or None
        return response

    def _leader_address(self) -> str | None:
        address = self.raft.leader_address
        if address is None and self.raft.leader_id is not None:
            address = self._peers().get(self.raft.leader_id)
        return address

    def _peers(self) -> dict[str, str]:
        try:
            return self.config.peers
        except ValueError:
            return {}

    @staticmethod
    def _reply(cmd: RemotingCommand, result: ControllerResult) -> RemotingCommand:
        response = cmd.response(result.code, result.remark)
        if result.header is not None:
            response.ext_fields = encode_header(result.header) or None
        response.body = result.body
        return response

    # -- the leader's read / write path -------------------------------------------------------

    async def run_read(self, compute: Compute) -> ControllerResult:
        """Compute a read on the leader after a linearizable read barrier."""
        return await self._submit(compute, write=False)

    async def run_write(self, compute: Compute) -> ControllerResult:
        """Compute a result and commit its events; the result is valid once this returns."""
        return await self._submit(compute, write=True)

    async def _submit(self, compute: Compute, *, write: bool) -> ControllerResult:
        return await self.queue.submit(compute, write=write)

    # -- any-peer requests -----------------------------------------------------------------

    async def _heartbeat(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, BrokerHeartbeatRequestHeader)
        if h.brokerId is None:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        conn = getattr(ctx, "connection", None)
        if h.brokerName:
            self._heard_from(h.brokerName)
        self.heartbeats.on_heartbeat(
            clusterName=h.clusterName,
            brokerName=h.brokerName,
            brokerAddr=h.brokerAddr,
            brokerId=h.brokerId,
            now_ms=self.clock_ms(),
            heartbeatTimeoutMillis=h.heartbeatTimeoutMills,
            epoch=h.epoch,
            maxOffset=h.maxOffset,
            confirmOffset=h.confirmOffset,
            electionPriority=h.electionPriority,
            conn_id=getattr(conn, "id", None),
        )
        return cmd.response(ResponseCode.SUCCESS, "Heart beat success")

    async def _metadata(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        peers = "".join(f"{peer_id}:{address};" for peer_id, address in self._peers().items())
        header = GetMetaDataResponseHeader(
            group=self.config.controllerDLegerGroup,
            controllerLeaderId=self.raft.leader_id,
            controllerLeaderAddress=self._leader_address(),
            isLeader=self.raft.is_leader,
            peers=peers,
        )
        response = cmd.response(ResponseCode.SUCCESS)
        response.ext_fields = encode_header(header)
        return response

    async def _get_config(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = config_to_properties(self.config).encode()
        return response

    async def _update_config(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        if not cmd.body:
            return cmd.response(ResponseCode.SUCCESS)
        try:
            props = parse_properties_text(cmd.body_bytes.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"UnsupportedEncodingException {exc}")
        blacklist = set(ALWAYS_BLACKLISTED) | {k for k in self.config.configBlackList.split(";") if k}
        if blacklist & props.keys():
            return cmd.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        error = update_config(self.config, props)
        if error is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, error)
        log.info("controller config updated: %s", sorted(props))
        return cmd.response(ResponseCode.SUCCESS)

    # -- leader-only requests --------------------------------------------------------------

    async def _get_next_broker_id(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, GetNextBrokerIdRequestHeader)
        return self._reply(cmd, await self.run_read(lambda r: r.handle_get_next_broker_id(h)))

    async def _apply_broker_id(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, ApplyBrokerIdRequestHeader)
        return self._reply(cmd, await self.run_write(lambda r: r.handle_apply_broker_id(h)))

    async def _register_broker(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, RegisterBrokerToControllerRequestHeader)

        def compute(state: ReplicasInfoManager) -> ControllerResult:
            # heard here, in queue order: an election queued before this registration is computed
            # before it, and must not see it (batched rounds answer as one-at-a-time processing)
            if h.brokerName:
                self._heard_from(h.brokerName)
            return state.handle_register_broker(h, self.is_alive, self.live_address)

        return self._reply(cmd, await self.run_write(compute))

    async def _get_replica_info(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, GetReplicaInfoRequestHeader)
        return self._reply(cmd, await self.run_read(lambda r: r.handle_get_replica_info(h)))

    async def _get_sync_state_data(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        if not cmd.body:
            return cmd.response(ResponseCode.SYSTEM_ERROR, NO_BROKER_NAMES_REMARK)
        try:
            names = decode_broker_names(cmd.body_bytes)
        except (FastjsonError, msgspec.ValidationError) as exc:
            return cmd.response(
                ResponseCode.CONTROLLER_INVALID_REQUEST, f"body is not a JSON array of broker names: {exc}"
            )
        if not names:
            return cmd.response(ResponseCode.SYSTEM_ERROR, NO_BROKER_NAMES_REMARK)
        result = await self.run_read(lambda r: r.handle_get_sync_state_data(names, self.is_alive))
        return self._reply(cmd, result)

    async def _elect_master(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, ElectMasterRequestHeader)
        result = await self.elect_master(h)
        return self._reply(cmd, result)

    async def _alter_sync_state_set(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, AlterSyncStateSetRequestHeader)
        try:
            proposed = SyncStateSet.decode(cmd.body_bytes)
        except (FastjsonError, msgspec.ValidationError) as exc:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST, f"body is not a SyncStateSet: {exc}")
        result = await self.run_write(lambda r: r.handle_alter_sync_state_set(h, proposed, self.is_alive))
        return self._reply(cmd, result)

    async def _clean_broker_data(self, ctx: Any, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, CleanControllerBrokerDataRequestHeader)
        result = await self.run_write(lambda r: r.handle_clean_broker_data(h, self.is_alive))
        return self._reply(cmd, result)

    # -- elections and notifications -------------------------------------------------------

    async def elect_master(self, header: ElectMasterRequestHeader) -> ControllerResult:
        """Run an election through the log; on SUCCESS notify the group (``notifyBrokerRoleChanged``).

        Raises ``_NotLeader``-mapped errors like any leader-only request when not leading.
        """

        def compute(state: ReplicasInfoManager) -> ControllerResult:
            self.replicas.enable_elect_unclean_master = self.config.enableElectUncleanMaster
            state.enable_elect_unclean_master = self.config.enableElectUncleanMaster
            wait = self.election_wait_ms(header, state)
            if wait > 0:
                return self._wait_for_master(header, state, wait)
            return state.handle_elect_master(header, self.elect_policy(), self.reported_epoch)

        result = await self.run_write(compute)
        if result.code == ResponseCode.SUCCESS:
            log.info("Elect a new master in broker-set %s done: %s", header.brokerName, result.header)
            if self.config.notifyBrokerRoleChanged:
                self._notify_role_changed(result)
        return result

    def _notify_role_changed(self, result: ControllerResult) -> None:
        if not isinstance(result.header, ElectMasterResponseHeader) or not result.body:
            return
        body = ElectMasterResponseBody.decode(result.body)
        for address, notification in role_change_notifications(result.header, body, self.is_alive):
            if self.notify is None:
                log.info("would notify %s of the new role (no notifier wired)", address)
            else:
                self.notify(address, notification)

    async def trigger_elect_master(self, broker_name: str) -> bool:
        """Controller-triggered election, up to ``electMasterMaxRetryCount`` attempts of ≤ 3 s each,
        until one returns SUCCESS (upstream ``triggerElectMaster``). Returns whether one did."""
        header = ElectMasterRequestHeader.of_controller_trigger(broker_name)
        attempts = max(1, self.config.electMasterMaxRetryCount)
        failed: ControllerResult | None = None
        for attempt in range(attempts):
            try:
                with trio.fail_after(ELECT_ATTEMPT_TIMEOUT):
                    result = await self.elect_master(header)
            except _NotLeader:
                log.info("stop electing for %s: this controller is not the leader", broker_name)
                return False
            except (trio.TooSlowError, RaftTimeoutError):
                log.warning("elect-master for %s timed out (attempt %d)", broker_name, attempt + 1)
                continue
            if result.code == ResponseCode.SUCCESS:
                self._trigger_failures.forget(broker_name)
                return True
            log.debug("elect-master for %s failed (attempt %d): %s", broker_name, attempt + 1, result.remark)
            failed = result
        if failed is not None:
            # once per distinct answer (the attempts follow each other within milliseconds and
            # the scan triggers again while the set has no master)
            self._trigger_failures.log(
                broker_name,
                logging.WARNING,
                f"Failed to trigger elect-master in broker-set {broker_name} ({attempts} attempts): "
                f"{ResponseCode(failed.code).name} {failed.remark}",
            )
        return False

    # -- leader-only scheduling ------------------------------------------------------------

    def scan_not_active_brokers(self) -> list[BrokerLiveInfo]:
        """Expire heartbeats (every peer, every ``scanNotActiveBrokerInterval``); returns the removed
        entries, each of which the caller passes to :meth:`on_broker_inactive`."""
        return self._forget_lost_sets(self.heartbeats.scan_inactive(self.clock_ms()))

    def on_connection_closed(self, conn_id: object) -> list[BrokerLiveInfo]:
        """A broker connection closed: drop its entries; returns them (for :meth:`on_broker_inactive`)."""
        return self._forget_lost_sets(self.heartbeats.on_connection_closed(conn_id))

    def _forget_lost_sets(self, removed: list[BrokerLiveInfo]) -> list[BrokerLiveInfo]:
        """A set none of whose replicas is left in the heartbeat table starts its reporting window
        again when one comes back (:meth:`election_wait_ms`)."""
        if removed and self._heard_since:
            left = {(e.clusterName, e.brokerName) for e in self.heartbeats.entries()}
            for gone in removed:
                if (gone.clusterName, gone.brokerName) not in left:
                    self._heard_since.pop(gone.brokerName, None)
        return removed

    def is_master_of(self, broker_name: str, broker_id: int) -> bool:
        """Whether ``broker_id`` is the recorded master of ``broker_name`` (pure, local state)."""
        info = self.replicas.sync_state_info(broker_name)
        return info is not None and info.masterBrokerId == broker_id and self.replicas.contains(broker_name)

    def broker_sets_needing_election(self) -> list[str]:
        """Sets whose master is dead while a replica lives (upstream ``scanNeedReelectBrokerSets``)."""
        return self.replicas.scan_need_reelect_broker_sets(self.is_alive)

    async def on_broker_inactive(self, cluster: str | None, broker_name: str, broker_id: int | None) -> bool:
        """Leader only: if the inactive broker is its set's master (or ``broker_id`` is None, meaning
        "elect for this set"), trigger an election. Returns whether an election succeeded."""
        if not self.raft.is_leader:
            log.info(
                "broker %s/%s id %s inactive (not leader, nothing to do)", cluster, broker_name, broker_id
            )
            return False
        if broker_id is not None:
            try:
                await self.run_read(lambda _: ControllerResult())
            except (_NotLeader, trio.TooSlowError, RaftTimeoutError):
                return False
            if not self.is_master_of(broker_name, broker_id):
                log.info(
                    "The broker with brokerId: %s in broker-set: %s has been inactive", broker_id, broker_name
                )
                return False
        return await self.trigger_elect_master(broker_name)

    async def scan_inactive_masters(self) -> list[str]:
        """Leader only, every ``scanInactiveMasterInterval``: elect for every set whose master died
        while a replica lives. Returns the sets an election was attempted for."""
        if not self.raft.is_leader:
            return []
        names = self.broker_sets_needing_election()
        for name in names:
            await self.trigger_elect_master(name)
        return names


# ---------------------------------------------------------------------------------------------
# GET / UPDATE_CONTROLLER_CONFIG helpers
# ---------------------------------------------------------------------------------------------


def config_to_properties(config: msgspec.Struct) -> str:
    """``key=value`` lines of every non-null field (upstream ``getAllConfigsFormatString``)."""
    lines = []
    for name in config.__struct_fields__:
        value = getattr(config, name)
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        lines.append(f"{name}={text}\n")
    return "".join(lines)


def parse_properties_text(text: str) -> dict[str, str]:
    """The simple ``key=value`` / ``key: value`` lines an admin tool sends (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            out[line] = ""
        else:
            out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def update_config(config: msgspec.Struct, props: dict[str, str]) -> str | None:
    """Set known fields from strings, typed like their current value (unknown keys ignored, as
    upstream). All or nothing: returns an error message and changes nothing on a bad value.

    In memory only: upstream also rewrites the file at ``configStorePath``.
    """
    changes: dict[str, object] = {}
    fields = set(config.__struct_fields__)
    for key, text in props.items():
        if key not in fields:
            continue
        current = getattr(config, key)
        try:
            if isinstance(current, bool):
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                changes[key] = text.lower() == "true"
            elif isinstance(current, int):
                changes[key] = int(text)
            elif isinstance(current, float):
                changes[key] = float(text)
            else:
                changes[key] = text
        except ValueError:
            return f"bad value for {key}: {text!r}"
    for key, value in changes.items():
        setattr(config, key, value)
    return None
