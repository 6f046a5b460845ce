"""The broker's replication wiring (upstream: the HA parts of ``BrokerController``, ``CommitLog``'s send
gate and ``ReplicasManager``'s role switch).

One :class:`Replication` per broker, created by the ``BrokerController`` and started in its nursery
after the store (``run``). It owns the HA listener (``haListenPort``; port 0 = ephemeral, then
``broker.ha_port``/``ha_addr`` are updated before the first registration) and one of two services:

* **classic** (``enableControllerMode=false``, upstream ``DefaultHAService``): the role is the configured
  ``brokerRole``. A master serves slaves; a SLAVE follows ``haMasterAddress`` or, when that is unset,
  the master's HA address from its name-server registrations (``RegisterResult.ha_server_addr``);
  until it knows one it re-registers every second. The store dispatches everything it holds.
* **auto-switch** (``enableControllerMode=true``, upstream ``AutoSwitchHAService``): epochs, truncation
  to the common prefix, SyncStateSet. The store runs in controller mode on both sides: dispatch stops
  at the confirm offset, so a message that may still be truncated is never readable. A broker has no
  role (it is *fenced*: sends answer SERVICE_NOT_AVAILABLE) until :meth:`change_to_master` or
  :meth:`change_to_slave` is called — by the controller-mode ``ReplicasManager``, or by hand when
  ``controllerAddr`` is empty (then SyncStateSet proposals are accepted locally).

Send gate (:meth:`put_message` / :meth:`put_messages`, used by the send processor instead of the
store's): upstream ``CommitLog.asyncPutMessage`` + ``handleHA``. Only a SYNC_MASTER waits, and only
when the producer waits for the store (``WAIT`` property):

* auto-switch: before the append, fewer in-sync replicas than ``minInSyncReplicas`` →
  IN_SYNC_REPLICAS_NOT_ENOUGH; after it, ``allAckInSyncStateSet`` ? every SyncStateSet member :
  ``inSyncReplicas`` replicas must hold the message;
* classic: ``inSyncReplicas`` replicas — deviation: a classic SYNC_MASTER waits for at least one slave
  even with the RocketMQ 5 default ``inSyncReplicas=1`` (which silently makes it asynchronous
  upstream; the RocketMQ 4 meaning of SYNC_MASTER, as users configure it); no slave connected, or the
  best one more than ``haMaxGapNotInSync`` behind → SLAVE_NOT_AVAILABLE (stored, not replicated);
* classic with ``enableSlaveActingMaster`` (RIP-34): ``inSync = min(alive replicas, 1 + slaves within
  haMaxGapNotInSync)`` with alive replicas approximated by 1 + connected slaves; needing more →
  IN_SYNC_REPLICAS_NOT_ENOUGH; ``enableAutoInSyncReplicas`` degrades to ``minInSyncReplicas``.

Waiting ends after ``slaveTimeout`` with FLUSH_SLAVE_TIMEOUT (upstream 5 ``GroupCommitRequest``
deadline); the message stays stored in every outcome but IN_SYNC_REPLICAS_NOT_ENOUGH.

Role switch API (auto-switch only), for the controller issue: see :meth:`change_to_master` and
:meth:`change_to_slave`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import trio

from broker.slave_sync import SlaveSynchronize
from remoting.client import PEER_UNACKED_TIMEOUT, set_unacked_timeout
from remoting.protocol.broker import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo
from remoting.sockets import open_tcp_listeners
from store.config import BrokerRole
from store.ha.ack_waiters import AckWaiters
from store.ha.classic import ClassicHAConnection
from store.ha.classic_service import ClassicHAService
from store.ha.connection import HAConnection
from store.ha.gating import rip34_check_before_put, rip34_in_sync_replicas, rip34_need_ack_nums
from store.ha.role import RoleChangeError
from store.ha.service import NOT_ANSWERED, AlterSyncStateSet, HAService
from store.ha.store_log import DrainingStream, StoreReplicaLog
from store.ha.streams import Link
from store.results import Placed, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from broker.outer_api import RegisterResult

log = logging.getLogger("broker.replication")
_SYNC_MASTER = BrokerRole.SYNC_MASTER  # bound once: an enum member lookup costs a descriptor call

#: While a slave does not know its master's HA address it re-registers this often (seconds).
MASTER_LOOKUP_INTERVAL = 1.0
#: seconds a slave's connect to its master's HA port may take (upstream's HA clients connect with
#: ``RemotingHelper.connect``'s 5 s, then wait 5 s before the next attempt)
HA_CONNECT_TIMEOUT = 5.0


async def ha_connect(address: str, timeout: float = HA_CONNECT_TIMEOUT) -> trio.SocketStream:
    """A slave's connection to the master's HA port at ``address``. Raises OSError (TimeoutError
    after ``timeout``: a peer the network drops packets of answers no SYN, and the kernel's own
    retries back off to minutes -- a connect begun during a partition would last that long past the
    heal). The socket carries :data:`~remoting.client.PEER_UNACKED_TIMEOUT`: a connection the
    network silenced ends then, and the slave connects anew, rather than waiting for TCP's backed-off
    retransmission."""
    host, _, port = address.rpartition(":")
    try:
        with trio.fail_after(timeout):
            stream = await trio.open_tcp_stream(host, int(port))
    except trio.TooSlowError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None
    set_unacked_timeout(stream.socket, PEER_UNACKED_TIMEOUT)
    return stream


class Replication:
    """HA service, send gate, role switch and slave metadata sync of one broker."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        bc = broker.broker_config
        #: auto-switch protocol (controller mode) instead of classic master/slave
        self.auto = bc.enableControllerMode
        #: auto-switch without a controller: roles are set by calling change_to_* by hand
        self.hand_roles = self.auto and not bc.controller_addr_list
        #: the id this replica uses in HA handshakes and SyncStateSets (upstream brokerControllerId);
        #: the controller-mode code sets it before the first role change
        self.replica_id = bc.brokerId
        #: controller round trip for SyncStateSet proposals (None: accepted locally when roles are
        #: set by hand, refused otherwise)
        self.alter_sync_state_set: AlterSyncStateSet | None = None
        #: called with ``is_master`` after every role change (master-only services hook in here)
        self.role_listeners: list[Callable[[bool], Any]] = []
        self.slave_sync = SlaveSynchronize(broker)
        self.rlog: StoreReplicaLog | None = None
        self.ha: HAService | None = None
        self.classic: ClassicHAService | None = None
        #: master epoch of the last role change (auto-switch), -1 before any
        self.epoch = -1
        self.bound_port: int | None = None
        self._local_sss_epoch = 0
        self._master_known = trio.Event()
        self._waiters: AckWaiters | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def role(self) -> str | None:
        """``"master"``, ``"slave"`` or None (auto-switch broker without a role yet)."""
        if self.ha is not None:
            return self.ha.role
        if self.classic is not None:
            return self.classic.role
        return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind the HA port, start the service of the configured mode; run until cancelled.
        Start it after the store started (the store object is final then)."""
        b = self.broker
        sc = b.store_config
        rlog = self.rlog = StoreReplicaLog(b.store)
        port = 0 if sc.haListenPort == 0 else b.ha_port
        host = getattr(b.listener, "host", None) or b.broker_config.brokerIP2
        try:
            listeners = await open_tcp_listeners(port, host)
        except OSError as exc:
            raise RuntimeError(
                f"{b.name}: cannot listen on HA port {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self.bound_port = listeners[0].socket.getsockname()[1]
        if self.bound_port != b.ha_port:
            b.ha_port = self.bound_port
            b.ha_addr = f"{b.broker_config.brokerIP2}:{self.bound_port}"
        async with trio.open_nursery() as nursery:
            if self.auto:
                self.ha = HAService(
                    rlog,
                    sc,
                    broker_id=self.replica_id,
                    connect=self._connect,
                    persist=rlog.persist,
                    alter_sync_state_set=self._alter,
                    check_period=b.broker_config.checkSyncStateSetPeriod / 1000,
                )
                # Sends wait in end-offset order; whatever may move acks releases them.
                self._waiters = AckWaiters(self._auto_acked)
                self.ha.ack_listeners.append(self._waiters.notify)
                await nursery.start(self._waiters.run)
                await nursery.start(self.ha.run)
            else:
                role = "slave" if sc.brokerRole == BrokerRole.SLAVE else "master"
                self.classic = ClassicHAService(
                    rlog, sc, role=role, master_address=sc.haMasterAddress or None, connect=self._connect
                )
                await nursery.start(self.classic.run)
                if role == "slave":
                    nursery.start_soon(self._find_master)
            nursery.start_soon(functools.partial(trio.serve_listeners, self._serve, listeners))
            await nursery.start(self.slave_sync.run)
            log.info(
                "%s replication, HA port %d, %s",
                "auto-switch" if self.auto else "classic",
                self.bound_port,
                f"role {self.role}" if self.role is not None else "role from the controller",
            )
            task_status.started()
            await trio.sleep_forever()

    async def _serve(self, stream: trio.abc.Stream) -> None:
        if self.ha is not None:
            await self.ha.handle_connection(stream)
        elif self.classic is not None:
            await self.classic.handle_connection(stream)
        else:
            await trio.aclose_forcefully(stream)

    async def _connect(self, address: str) -> trio.abc.Stream:
        stream = await ha_connect(address)
        assert self.rlog is not None
        return DrainingStream(stream, self.rlog)

    async def _find_master(self) -> None:
        """A classic slave without ``haMasterAddress`` registers every second until a registration
        names its master's HA address (upstream waits for the next periodic registration)."""
        while self.classic is not None and self.classic.master_address is None:
            with trio.move_on_after(MASTER_LOOKUP_INTERVAL):
                await self._master_known.wait()
            if self.classic.master_address is None:
                await self.broker.register_to_namesrvs()

    # ------------------------------------------------------------------ name-server results

    def on_register_results(self, results: list[RegisterResult]) -> None:
        """Registration answers: a slave learns its master's broker and HA addresses from them."""
        if not self.broker.is_slave or not results:
            return
        b = self.broker
        if self.auto and not self.hand_roles:
            # Controller mode: the controller chose the master (b.master_addr). A name server may still
            # route to the previous one for a moment: only an answer naming the chosen master counts.
            results = [r for r in results if r.master_addr and r.master_addr == b.master_addr]
            if not results:
                return
        master = next((r.master_addr for r in results if r.master_addr), None)
        ha_addr = next((r.ha_server_addr for r in results if r.ha_server_addr), None)
        if master != b.master_addr:
            log.info("master broker address %s -> %s", b.master_addr, master)
            b.master_addr = master
        if master and master != self.slave_sync.synced_from:
            self.slave_sync.master_changed()
        if ha_addr and not b.store_config.haMasterAddress:
            if self.classic is not None:
                self.classic.set_master_address(ha_addr)
            elif self.ha is not None and self.ha.role == "slave":
                self.ha.set_master_address(ha_addr)
            self._master_known.set()

    # ------------------------------------------------------------------ send gate

    def notify_appended(self) -> None:
        """Every writer calls this after appending to the commit log of a master (the send path does
        it through :meth:`put_message`): streams wake, the confirm offset (hence dispatch) moves."""
        if self.ha is not None:
            self.ha.notify_appended()
        elif self.classic is not None:
            self.classic.notify_appended()

    def check_before_put(self) -> PutMessageResult | None:
        """A refusal before anything is appended, or None."""
        b = self.broker
        sc = b.store_config
        if self.auto:
            ha = self.ha
            if ha is None or ha.role != "master":
                return PutMessageResult(
                    PutMessageStatus.SERVICE_NOT_AVAILABLE,
                    remark="the broker has no master role yet (controller mode: waiting for its role)",
                )
            if sc.brokerRole == BrokerRole.SYNC_MASTER:
                status = ha.check_before_put()
                if status is not None:
                    return PutMessageResult(
                        status,
                        remark=f"SyncStateSet has {ha.group.in_sync_replicas_nums if ha.group else 0} "
                        f"replicas, minInSyncReplicas is {sc.minInSyncReplicas}",
                    )
        elif (
            b.broker_config.enableSlaveActingMaster
            and sc.brokerRole == BrokerRole.SYNC_MASTER
            and self.classic is not None
        ):
            status = rip34_check_before_put(sc, self._rip34_in_sync())
            if status is not None:
                return PutMessageResult(status, remark="not enough in-sync slaves")
        return None

    def _rip34_in_sync(self) -> int:
        assert self.classic is not None
        acks = self.classic.slave_acks
        return rip34_in_sync_replicas(
            1 + len(acks), self.broker.store.max_phy_offset, acks, self.broker.store_config.haMaxGapNotInSync
        )

    def _classic_need_ack_nums(self) -> int:
        sc = self.broker.store_config
        if self.broker.broker_config.enableSlaveActingMaster:
            return rip34_need_ack_nums(sc, self._rip34_in_sync())
        return max(sc.inSyncReplicas, 2)

    async def after_put(
        self, result: PutMessageResult, *, wait_store_msg_ok: bool = True, epoch: int | None = None
    ) -> PutMessageResult:
        """Wake replication for an appended message and, on a SYNC_MASTER, wait for its acks; the
        result's status becomes the replication outcome when that is not PUT_OK.

        ``epoch`` is the master epoch the send started under: if the broker stopped being that
        master while the store appended (a role change during a file roll or flush wait), the message
        is not acknowledged — it may be on no master of the group.
        """
        if result.wrote_offset < 0:
            return result
        if self.auto and epoch is not None and (self.epoch != epoch or self.role != "master"):
            result.status = PutMessageStatus.SERVICE_NOT_AVAILABLE
            result.remark = f"the broker stopped being master of epoch {epoch} while storing the message"
            return result
        self.notify_appended()
        sc = self.broker.store_config
        if not wait_store_msg_ok or sc.brokerRole != BrokerRole.SYNC_MASTER:
            return result
        timeout = sc.slaveTimeout / 1000
        end = result.end_offset
        if self.ha is not None:
            status = await self._wait_auto(end, timeout)
        elif self.classic is not None:
            status = await self.classic.wait_for_replication(end, self._classic_need_ack_nums(), timeout)
        else:
            return result
        if status is not PutMessageStatus.PUT_OK:
            result.status = status
        return result

    def _auto_acked(self, end_offset: int, need: int) -> bool:
        group = self.ha.group if self.ha is not None else None
        return group is None or group.is_acked(end_offset, need)

    async def _wait_auto(self, end_offset: int, timeout: float) -> PutMessageStatus:
        ha, waiters = self.ha, self._waiters
        assert ha is not None
        assert waiters is not None
        group = ha.group
        if group is None:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        need = group.need_ack_nums()
        if 0 <= need <= 1:
            return PutMessageStatus.PUT_OK
        acked = await waiters.wait(end_offset, need, timeout)
        if ha.group is None:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        return PutMessageStatus.PUT_OK if acked else PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def try_put_message(
        self,
        encoded: bytearray,
        topic: str,
        queue_id: int,
        sys_flag: int,
        tags_code: int | None,
        keys: str | None,
        uniq_key: str | None,
        wait_store_msg_ok: bool,
    ) -> Placed | PutMessageResult | None:
        """:meth:`put_message` without awaiting when nothing needs waiting for -- classic
        replication with no acks to wait for and the store's plain case (``store.try_put_message``,
        whose :data:`~store.results.Placed` this returns) -- else None with nothing appended (the
        caller then awaits :meth:`put_message`). A refusal of the gate is returned as it is."""
        if self.auto or (wait_store_msg_ok and self.broker.store_config.brokerRole is _SYNC_MASTER):
            return None
        refused = self.check_before_put()
        if refused is not None:
            return refused
        placed = self.broker.store.try_put_message(
            encoded, topic, queue_id, sys_flag, tags_code, keys, uniq_key
        )
        if placed is not None:
            self.notify_appended()
        return placed

    async def put_message(
        self,
        encoded: bytearray,
        topic: str,
        queue_id: int,
        *,
        sys_flag: int,
        tags_code: int | None = None,
        keys: str | None = None,
        uniq_key: str | None = None,
        wait_store_msg_ok: bool = True,
    ) -> PutMessageResult:
        """``store.put_message`` behind the replication gate (same arguments)."""
        refused = self.check_before_put()
        if refused is not None:
            return refused
        epoch = self.epoch
        result = await self.broker.store.put_message(
            encoded,
            topic,
            queue_id,
            sys_flag=sys_flag,
            tags_code=tags_code,
            keys=keys,
            uniq_key=uniq_key,
            wait_store_msg_ok=wait_store_msg_ok,
        )
        if (
            not self.auto
            and result.wrote_offset >= 0
            and (not wait_store_msg_ok or self.broker.store_config.brokerRole is not _SYNC_MASTER)
        ):
            # classic replication without acks to wait for: what after_put does, without its call
            self.notify_appended()
            return result
        return await self.after_put(result, wait_store_msg_ok=wait_store_msg_ok, epoch=epoch)

    async def put_messages(
        self, encoded: bytearray, topic: str, queue_id: int, **kwargs: Any
    ) -> PutMessageResult:
        """``store.put_messages`` (a batch) behind the replication gate."""
        refused = self.check_before_put()
        if refused is not None:
            return refused
        epoch = self.epoch
        result = await self.broker.store.put_messages(encoded, topic, queue_id, **kwargs)
        return await self.after_put(
            result, wait_store_msg_ok=kwargs.get("wait_store_msg_ok", True), epoch=epoch
        )

    # ------------------------------------------------------------------ SyncStateSet

    @property
    def sync_state_set(self) -> set[int]:
        """The SyncStateSet a master last had confirmed (empty when not an auto-switch master)."""
        group = self.ha.group if self.ha is not None else None
        return set(group.sync_state_set) if group is not None else set()

    @property
    def confirm_offset(self) -> int:
        if self.ha is not None:
            return self.ha.confirm_offset()
        return self.broker.store.confirm_offset

    def slave_ack_offsets(self) -> dict[int, int]:
        """Master side: the latest ack of every connected slave (auto-switch: by replica id; classic:
        numbered in connection order)."""
        if self.ha is not None and self.ha.group is not None:
            return {sid: c.ack_offset for sid, c in self.ha.group.connections.items()}
        if self.classic is not None:
            return dict(enumerate(self.classic.slave_acks))
        return {}

    def ha_runtime_info(self) -> HARuntimeInfo | None:
        """GET_BROKER_HA_STATUS (mqadmin ``haStatus``), upstream ``HAService.getRuntimeInfo``: a
        master lists its slave connections against its commit-log end, in sync meaning in the
        SyncStateSet (auto-switch) or reported and within ``haMaxGapNotInSync`` (classic;
        upstream also counts a slave that has not reported yet); a slave describes its link to
        the master. None for an auto-switch broker without a role yet (nothing to describe until
        the controller gives it one)."""
        store = self.broker.store
        now = trio.current_time()
        role = self.role
        if role == "slave":
            service = self.ha if self.ha is not None else self.classic
            link = service.client_link if service is not None else None
            now_ms = self.broker.now_ms()

            def wall_ms(t: float) -> int:
                return now_ms - round((now - t) * 1000) if link is not None and t > -math.inf else 0

            return HARuntimeInfo(
                master=False,
                haClientRuntimeInfo=HAClientRuntimeInfo(
                    masterAddr=service.master_address if service is not None else None,
                    transferredByteInSecond=link.meter.per_second(now) if link is not None else 0,
                    maxOffset=store.max_phy_offset,
                    lastReadTimestamp=wall_ms(link.last_read) if link is not None else 0,
                    lastWriteTimestamp=wall_ms(link.last_write) if link is not None else 0,
                    masterFlushOffset=store.checkpoint.data.masterFlushedOffset,
                ),
            )
        if role != "master":
            return None
        put_where = store.max_phy_offset
        rows: list[HAConnectionRuntimeInfo] = []
        if self.ha is not None and self.ha.group is not None:
            in_sync_set = self.ha.group.sync_state_set
            for conn, link in self.ha.links.items():
                rows.append(_connection_info(conn, link, put_where, now, conn.slave_id in in_sync_set))
            in_sync = len(in_sync_set) - 1
        elif self.classic is not None:
            gap = self.broker.store_config.haMaxGapNotInSync
            for cconn, link in self.classic.links.items():
                ok = cconn.ack_offset >= 0 and put_where - cconn.ack_offset < gap
                rows.append(_connection_info(cconn, link, put_where, now, ok))
            in_sync = sum(row.inSync for row in rows)
        else:
            return None
        return HARuntimeInfo(
            master=True, masterCommitLogMaxOffset=put_where, inSyncSlaveNums=in_sync, haConnectionInfo=rows
        )

    async def _alter(self, proposal: set[int]) -> tuple[set[int], int] | Literal["not answered"] | None:
        if self.alter_sync_state_set is not None:
            return await self.alter_sync_state_set(proposal)
        if self.hand_roles:
            self._local_sss_epoch += 1
            return set(proposal), self._local_sss_epoch
        return NOT_ANSWERED

    def on_sync_state_set_changed(self, sync_state_set: set[int], sync_state_set_epoch: int) -> None:
        """The controller pushed (or confirmed) a SyncStateSet for this master."""
        if self.ha is not None and self.ha.group is not None:
            self.ha.group.on_sync_state_set_accepted(sync_state_set, sync_state_set_epoch)

    # ------------------------------------------------------------------ role switch (auto-switch)

    def _require_auto(self, epoch: int) -> HAService:
        if self.ha is None:
            raise RuntimeError(
                f"{self.broker.name}: role changes need enableControllerMode=true (auto-switch replication)"
                if not self.auto
                else f"{self.broker.name}: replication is not running"
            )
        last = self.broker.store.epoch_file.last_epoch()
        if epoch < last:
            # refused before anything changes: the current role goes on
            raise RoleChangeError(
                f"{self.broker.name}: epoch {epoch} is older than the local last epoch {last}"
            )
        return self.ha

    async def change_to_master(
        self, epoch: int, sync_state_set: set[int] | None = None, sync_state_set_epoch: int = 0
    ) -> None:
        """Become the master of ``epoch`` (upstream ``ReplicasManager.changeToMaster``).

        Ends the slave session, truncates a partial tail, appends ``(epoch, max offset)`` to the epoch
        file and persists it (raises ``store.ha.role.RoleChangeError`` for an epoch older than the
        file's last one), accepts slaves; then ``brokerRole=SYNC_MASTER``, ``brokerId=0``, the topic
        DataVersion moves to ``stateVersion=epoch``, role listeners run, and the broker re-registers.
        """
        ha = self._require_auto(epoch)
        b = self.broker
        assert self.rlog is not None
        ha.stop_role()
        await self.rlog.drain()
        await ha.change_to_master(epoch, sync_state_set or {self.replica_id})
        if ha.group is not None and sync_state_set_epoch:
            ha.group.sync_state_set_epoch = sync_state_set_epoch
        self.epoch = epoch
        b.store_config.brokerRole = BrokerRole.SYNC_MASTER
        b.broker_config.brokerId = 0
        b.master_addr = None
        self._after_role_change(True)

    async def change_to_slave(
        self,
        master_ha_address: str | None,
        epoch: int,
        *,
        master_addr: str | None = None,
        broker_id: int | None = None,
    ) -> None:
        """Follow the master of ``epoch`` (upstream ``ReplicasManager.changeToSlave``).

        ``master_ha_address`` may be None: it is then learned from the name-server registration
        (``haServerAddr``). ``master_addr`` is the master's broker address (slave metadata sync;
        also learned from registrations). ``broker_id`` (default :attr:`replica_id`) is the id the
        slave registers with and must be > 0. Truncates a partial tail, then handshakes (truncating to
        the common prefix with the master); ``brokerRole=SLAVE``; DataVersion bump; re-register.
        """
        ha = self._require_auto(epoch)
        b = self.broker
        slave_id = self.replica_id if broker_id is None else broker_id
        if slave_id <= 0:
            raise ValueError(f"{b.name}: a slave needs a broker id > 0 (got {slave_id})")
        assert self.rlog is not None
        b.store_config.brokerRole = BrokerRole.SLAVE
        ha.stop_role()
        await self.rlog.drain()
        await ha.change_to_slave(master_ha_address or b.store_config.haMasterAddress or None, epoch)
        self.epoch = epoch
        b.broker_config.brokerId = slave_id
        if master_addr is not None:
            b.master_addr = master_addr
        self.slave_sync.master_changed()
        self._after_role_change(False)

    def _after_role_change(self, is_master: bool) -> None:
        b = self.broker
        b.topics.data_version = b.topics.data_version.next_version(b.now_ms(), state_version=self.epoch)
        for listener in list(self.role_listeners):
            listener(is_master)
        log.info(
            "now %s of epoch %d (brokerId %d)",
            "master" if is_master else "slave",
            self.epoch,
            b.broker_config.brokerId,
        )
        b.request_register()


def _connection_info(
    conn: HAConnection | ClassicHAConnection, link: Link, put_where: int, now: float, in_sync: bool
) -> HAConnectionRuntimeInfo:
    return HAConnectionRuntimeInfo(
        addr=link.address,
        slaveAckOffset=conn.ack_offset,
        diff=put_where - conn.ack_offset,
        inSync=in_sync,
        transferredByteInSecond=link.meter.per_second(now),
        transferFromWhere=conn.next_offset,
    )
