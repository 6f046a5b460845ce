"""One controller peer in a trio process: the thin layer around :class:`~controller.manager.ControllerManager`.

It wires the manager to the remoting server (handlers and the connection-closed callback), runs
the manager's request queue (:meth:`ControllerManager.run`) and the periodic work on its
schedule, and sends role-change notifications:

* every peer scans its heartbeat table every ``scanNotActiveBrokerInterval`` (first scan after
  at most 2 s) — expired brokers and brokers whose connection closed become "broker inactive"
  events, which the leader turns into elections when the broker was its set's master;
* the leader scans for sets whose master is dead but which still have a live replica every
  ``scanInactiveMasterInterval`` (first scan one interval after start, so that brokers have
  heartbeated to a freshly started peer before it judges their masters);
* NOTIFY_BROKER_ROLE_CHANGED goes out oneway through :class:`RoleChangeNotifier` (upstream
  ``NotifyService``: at most 3 sends at once, one pending notification per broker address, a
  newer master epoch replaces or cancels an older one).

The Raft driver is started by whoever owns it (``run_driver=True`` makes this service start it).
:class:`ControllerPeer` builds the whole peer (state machine, file-backed Raft driver, remoting
Raft transport, service) for a process that has a remoting server and client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from controller.config import ControllerConfig
from controller.heartbeat import BrokerIdentityInfo
from controller.manager import ControllerManager, RaftHandle
from controller.raft.driver import RaftDriver
from controller.raft_transport import RAFT_MESSAGE, RemotingRaftTransport, raft_message_handler
from controller.replicas import ReplicasInfoManager
from remoting.client import RemotingClient
from remoting.clock import AwakeClock
from remoting.command import RemotingCommand
from remoting.connection import ProcessorTable
from remoting.errors import RemotingError

log = logging.getLogger("controller.service")

#: Upstream ``DefaultBrokerHeartbeatManager.start``: first scan after 2 s.
HEARTBEAT_SCAN_INITIAL_DELAY = 2.0
#: Upstream ``NotifyService``: 3 threads, oneway with a 3 s timeout.
NOTIFY_CONCURRENCY = 3
NOTIFY_TIMEOUT = 3.0

SendOneway = Callable[[str, RemotingCommand, float], Awaitable[None]]


class Driver(RaftHandle, Protocol):
    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


def _epoch_of(cmd: RemotingCommand) -> int:
    try:
        return int((cmd.ext_fields or {}).get("masterEpoch", "-1"))
    except ValueError:
        return -1


class RoleChangeNotifier:
    """Sends role-change notifications oneway, coalescing per broker address."""

    def __init__(self, send_oneway: SendOneway, *, timeout: float = NOTIFY_TIMEOUT) -> None:
        self._send = send_oneway
        self._timeout = timeout
        self._pending: dict[str, RemotingCommand] = {}
        self._in_flight: dict[str, tuple[int, trio.CancelScope]] = {}
        self._wakeup = trio.Event()
        self._limiter = trio.CapacityLimiter(NOTIFY_CONCURRENCY)
        #: (address, masterEpoch) of every notification sent (for tests and admin inspection)
        self.sent: list[tuple[str, int]] = []

    def submit(self, address: str, cmd: RemotingCommand) -> None:
        """Queue ``cmd`` for ``address``; replaces a queued one, cancels an older one being sent."""
        epoch = _epoch_of(cmd)
        queued = self._pending.get(address)
        if queued is not None and _epoch_of(queued) > epoch:
            return
        running = self._in_flight.get(address)
        if running is not None and running[0] < epoch:
            running[1].cancel()
        self._pending[address] = cmd
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                pending, self._pending = self._pending, {}
                for address, cmd in pending.items():
                    nursery.start_soon(self._deliver, address, cmd)

    async def _deliver(self, address: str, cmd: RemotingCommand) -> None:
        epoch = _epoch_of(cmd)
        async with self._limiter:
            with trio.CancelScope() as scope:
                self._in_flight[address] = (epoch, scope)
                try:
                    log.info("notify broker %s that role changed (masterEpoch %d)", address, epoch)
                    await self._send(address, cmd, self._timeout)
                    self.sent.append((address, epoch))
                except (RemotingError, OSError) as exc:
                    # Brokers also poll their replica info, so a lost notification only delays them.
                    log.warning("Failed to notify broker %s that role changed: %s", address, exc)
                finally:
                    if self._in_flight.get(address, (None, None))[1] is scope:
                        del self._in_flight[address]


class ControllerService:
    """A controller peer: manager + schedules + notifier (see the module docstring)."""

    def __init__(
        self,
        config: ControllerConfig,
        driver: Driver,
        *,
        replicas: ReplicasInfoManager,
        send_oneway: SendOneway,
        clock_ms: Callable[[], float] | None = None,
        run_driver: bool = False,
    ) -> None:
        self.config = config
        self.driver = driver
        self.run_driver = run_driver
        self.notifier = RoleChangeNotifier(send_oneway)
        #: the manager's clock when none is given: trio's, less the spells this process did not
        #: run (see :class:`~remoting.clock.AwakeClock`; :meth:`run` keeps it read)
        self.awake: AwakeClock | None = None
        if clock_ms is None:
            self.awake = clock_ms = AwakeClock(lambda: trio.current_time() * 1000.0, self._paused)
        self.manager = ControllerManager(
            config, driver, replicas=replicas, clock_ms=clock_ms, notify=self.notifier.submit
        )
        self._inactive_send, self._inactive_recv = trio.open_memory_channel[BrokerIdentityInfo](1024)
        #: set by :meth:`close`: the hosting process is stopping, brokers going away are no failure
        self.closing = False

    # -- remoting wiring -------------------------------------------------------------------

    def register(self, table: ProcessorTable) -> None:
        """Register the controller's request codes on ``table`` (wire :meth:`connection_closed` too)."""
        for code in self.manager.codes():
            table.register(code, self.manager.handle)

    def processor_table(self) -> ProcessorTable:
        """A table serving only the controller API, with the connection-closed callback wired."""
        table = ProcessorTable(on_close=self.connection_closed)
        self.register(table)
        return table

    def connection_closed(self, conn: Any) -> None:
        """Remoting ``on_close`` callback: brokers heard on ``conn`` become inactive."""
        for info in self.manager.on_connection_closed(conn.id):
            self._broker_inactive(info.identity)

    def close(self) -> None:
        """The process hosting this peer is stopping gracefully, and with it (typically) brokers
        connected to it: from now on a broker going inactive triggers no election here, nor does
        the inactive-master scan. Otherwise closing the process's connections would look like the
        failure of every local master while this peer still runs, and an election among replicas
        that are going down too could move a master on a plain restart. Peers in other
        processes stay as they are and act on what they see."""
        if not self.closing:
            self.closing = True
            log.info("controller peer stopping: brokers going inactive from now on trigger no election")

    @staticmethod
    def _paused(ms: float) -> None:
        log.warning(
            "this controller did not run for %.1f s (its process stopped, its event loop blocked or its "
            "machine paused): that time does not count against the brokers' heartbeats",
            ms / 1000,
        )

    def _broker_inactive(self, identity: BrokerIdentityInfo) -> None:
        if self.closing:
            return
        try:
            self._inactive_send.send_nowait(identity)
        except trio.WouldBlock:
            log.warning(
                "inactive-broker queue full, dropping %s (the inactive-master scan will catch it)", identity
            )

    # -- schedules -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if self.run_driver:
                await nursery.start(self.driver.run)
            if self.awake is not None:
                nursery.start_soon(self.awake.run)
            await nursery.start(self.notifier.run)
            await nursery.start(self.manager.run)
            nursery.start_soon(self._heartbeat_scan_loop)
            nursery.start_soon(self._inactive_master_loop)
            nursery.start_soon(self._inactive_worker)
            wait_role_change = getattr(self.driver, "wait_role_change", None)
            if wait_role_change is not None:
                nursery.start_soon(self._role_watch, wait_role_change)
            task_status.started()

    async def _role_watch(self, wait_role_change: Callable[[], Awaitable[None]]) -> None:
        """Tell the manager about every Raft role change (it restarts what it heard as leader)."""
        while True:
            await wait_role_change()
            self.manager.on_role_change()

    async def _heartbeat_scan_loop(self) -> None:
        interval = self.config.scanNotActiveBrokerInterval / 1000.0
        await trio.sleep(min(HEARTBEAT_SCAN_INITIAL_DELAY, interval))
        while True:
            for info in self.manager.scan_not_active_brokers():
                self._broker_inactive(info.identity)
            await trio.sleep(self.config.scanNotActiveBrokerInterval / 1000.0)

    async def _inactive_master_loop(self) -> None:
        while True:
            await trio.sleep(self.config.scanInactiveMasterInterval / 1000.0)
            if self.driver.is_leader and not self.closing:
                names = await self.manager.scan_inactive_masters()
                if names:
                    log.info("re-elected masters for broker sets with a dead master: %s", names)

    async def _inactive_worker(self) -> None:
        async for identity in self._inactive_recv:
            if self.closing:
                continue  # queued before the stop began
            await self.manager.on_broker_inactive(
                identity.clusterName, identity.brokerName, identity.brokerId
            )


def raft_timing(config: ControllerConfig) -> dict[str, float | int]:
    """RaftDriver timer arguments from ``rmqRaftHeartbeatIntervalMillis`` / ``rmqRaftElectionTimeoutMillis``.

    The tick is at most 100 ms (and at most a quarter of the heartbeat interval), so timeouts
    are honoured to within a tick; the election timeout stays above the heartbeat interval.
    """
    heartbeat = max(1, config.rmqRaftHeartbeatIntervalMillis) / 1000.0
    election = max(1, config.rmqRaftElectionTimeoutMillis) / 1000.0
    tick = max(0.005, min(0.1, heartbeat / 4))
    heartbeat_tick = max(1, round(heartbeat / tick))
    election_tick = max(heartbeat_tick + 1, round(election / tick))
    return {"tick_interval": tick, "heartbeat_tick": heartbeat_tick, "election_tick": election_tick}


class ControllerPeer:
    """Everything one controller peer needs in a process that already has a remoting server and
    client: the state machine, a Raft driver on ``controllerStorePath`` talking to the other peers
    through :class:`~controller.raft_transport.RemotingRaftTransport`, and the
    :class:`ControllerService`.

    Usage (the container does this)::

        peer = ControllerPeer(config, client)
        await server.add_listener(host, port_of(config.self_address), peer.processor_table())
        await nursery.start(peer.run)
    """

    def __init__(
        self,
        config: ControllerConfig,
        client: RemotingClient,
        *,
        storage: Any | None = None,
        clock_ms: Callable[[], float] | None = None,
    ) -> None:
        if config.controllerType != "DLedger":
            raise ValueError(f"controllerType={config.controllerType} is not supported (only DLedger)")
        self_id = config.controllerDLegerSelfId or ""
        peers = config.peers
        self.config = config
        self.replicas = ReplicasInfoManager(enable_elect_unclean_master=config.enableElectUncleanMaster)
        group = config.controllerDLegerGroup or ""
        self.transport = RemotingRaftTransport(client, self_id, peers, group)
        self.driver = RaftDriver(
            self_id,
            peers,
            None if storage is not None else config.store_path,
            self.transport,
            self.replicas,
            storage=storage,
            **raft_timing(config),  # type: ignore[arg-type]
        )

        async def send_oneway(address: str, cmd: RemotingCommand, timeout: float) -> None:
            await client.invoke_oneway(address, cmd, timeout)

        self.service = ControllerService(
            config,
            self.driver,
            replicas=self.replicas,
            send_oneway=send_oneway,
            clock_ms=clock_ms,
            run_driver=True,
        )
        self.manager = self.service.manager

    def register(self, table: ProcessorTable) -> None:
        """Add the controller API and the Raft message code to ``table`` (a shared listener)."""
        self.service.register(table)
        table.register(
            RAFT_MESSAGE, raft_message_handler(self.driver, self.config.controllerDLegerGroup or "")
        )

    def processor_table(self) -> ProcessorTable:
        """A table for a listener serving only this controller peer."""
        table = ProcessorTable(on_close=self.service.connection_closed)
        self.register(table)
        return table

    def close(self) -> None:
        """The hosting process is stopping gracefully (see :meth:`ControllerService.close`)."""
        self.service.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.transport.run)
            await nursery.start(self.service.run)
            task_status.started()
