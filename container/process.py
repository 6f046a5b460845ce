"""The ``rmq-container`` process: runs what a :class:`~container.config.ProcessConfig` describes.

Lifecycle (:class:`ContainerProcess`):

1. Open the shared transport: one :class:`~remoting.server.RemotingServer` (every component gets its
   own listener and processor table on it) and one :class:`~remoting.client.RemotingClient` for
   outgoing requests.
2. Run the component factories in order (name server, controller, container admin port, brokers). A factory builds its
   components from the config, binds their listeners through :meth:`ProcessContext.listen` and
   returns them as :class:`HostedComponent` values with their banner lines. Nothing is served yet;
   a bind failure is a :class:`StartupError` naming the component and address.
3. Start serving, then every component in order (``await nursery.start(component.run)``); a
   component's listeners accept once it has started (the name server and the controller answer
   while the brokers load their stores).
4. Report the banner (``task_status.started(lines)``; each line is also logged).
5. On :meth:`ContainerProcess.stop`: tell the components that asked (``HostedComponent.on_stop``;
   a controller peer stops electing, so the process's own brokers going away are not taken for
   failures), let them finish what needs the transport (``before_stop``: brokers unregister from
   the name servers), stop the transport (no new requests), then cancel the components, whose
   ``finally`` blocks flush and close their files.

:func:`run_process` adds signal handling: the first SIGINT/SIGTERM/SIGHUP (not an ignored SIGHUP:
``nohup``) stops gracefully, a second one cancels at once; and, once everything serves, the loop
watchdog (:mod:`container.watchdog`), which logs a warning with the loop thread's stack whenever the
event loop is blocked for more than half a second.

Seam for later components: append a :data:`ComponentFactory` to :data:`DEFAULT_FACTORIES` (or pass
``factories=``). A factory returns ``[]`` when the config does not describe its component.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from container.config import ProcessConfig
from container.logs import PROCESS_LOGGER, REMOTING_LOGGER
from container.port_offset import port_taken_hint
from container.watchdog import LoopWatchdog
from namesrv.controller import NamesrvController
from remoting.client import PEER_UNACKED_TIMEOUT, RemotingClient
from remoting.clock import AwakeClock, monotonic_ms
from remoting.connection import ProcessorTable
from remoting.server import Listener, RemotingServer
from remoting.sockets import ip_of
from store.errors import StoreOpenError

log = logging.getLogger(PROCESS_LOGGER)

#: seconds a graceful stop gives the components' ``before_stop`` calls
BEFORE_STOP_TIMEOUT = 5.0


class StartupError(Exception):
    """A component could not start (typically: its port is taken); the message says which."""


class Runnable(Protocol):
    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None: ...


@dataclass
class HostedComponent:
    """A component the process runs: canonical name, the object with ``run``, banner lines, and
    what to tell it when a graceful stop begins (before the transport closes; see
    :meth:`ContainerProcess.stop`)."""

    name: str
    component: Runnable
    banner: list[str] = field(default_factory=list)
    on_stop: Callable[[], None] | None = None
    #: awaited (all at once, at most :data:`BEFORE_STOP_TIMEOUT` s) when a graceful stop begins,
    #: while the transport still serves (a broker unregisters from the name servers)
    before_stop: Callable[[], Awaitable[None]] | None = None
    #: upstream's start line for this kind of server ("The Name Server boot success. ..."), logged
    #: once the process serves (scripts and test fixtures wait for it)
    boot_line: str | None = None
    #: its listeners (bound by :meth:`ProcessContext.listen`): they accept once it has started
    listeners: list[Listener] = field(default_factory=list)


@dataclass
class ProcessContext:
    """What factories get: the config, the shared transport, the host listeners bind."""

    config: ProcessConfig
    server: RemotingServer
    client: RemotingClient
    bind_host: str
    #: the process's liveness clock (its brokers' clients and locks, its controller's broker
    #: heartbeats): one for all of them, read by one task of the process (see :meth:`_serve`)
    awake: AwakeClock = field(default_factory=lambda: AwakeClock(monotonic_ms, _process_paused))
    #: set once every component has started: the brokers join their replica groups then (see
    #: ``BrokerController.join_after``)
    components_started: trio.Event = field(default_factory=trio.Event)

    async def listen(self, port: int, table: ProcessorTable, *, name: str) -> Listener:
        """Bind ``bind_host:port`` (0 = ephemeral) for ``name``; raises :class:`StartupError`. The
        listener accepts once its component has started (list it in the component's
        :attr:`HostedComponent.listeners`)."""
        try:
            return await self.server.add_listener(self.bind_host, port, table, name=name, held=True)
        except OSError as e:
            raise StartupError(
                f"{name}: cannot listen on {self.bind_host}:{port}: {e.strerror or e}{port_taken_hint(e)}"
            ) from e


ComponentFactory = Callable[[ProcessContext], Awaitable[list[HostedComponent]]]


def _process_paused(ms: float) -> None:
    log.warning(
        "this process did not run for %.1f s (stopped, its event loop blocked, or its machine paused): "
        "that time does not count against the brokers' and clients' heartbeats it could not hear",
        ms / 1000,
    )


# --- factories ------------------------------------------------------------------------------------


async def start_namesrv(ctx: ProcessContext) -> list[HostedComponent]:
    """The name server, when the config has one."""
    cfg = ctx.config.namesrv
    if cfg is None:
        return []
    namesrv = NamesrvController(cfg)
    listener = await ctx.listen(cfg.listenPort, namesrv.processor_table, name="namesrv")
    boot = f"The Name Server boot success. serializeType=JSON, address {listener.address}"
    return [
        HostedComponent(
            "namesrv", namesrv, [f"namesrv {listener.address}"], boot_line=boot, listeners=[listener]
        )
    ]


async def start_controller(ctx: ProcessContext) -> list[HostedComponent]:
    """The controller peer, when the config has one (a controller file, a ``[controller]`` table, or a
    name server with ``enableControllerInNamesrv=true``).

    It serves brokers, admin tools and the other peers on its own address in
    ``controllerDLegerPeers`` (never on the name server's port, also when embedded); its Raft log
    lives under ``controllerStorePath``. Outgoing traffic (Raft messages, role-change notifications)
    goes through the process's shared client.
    """
    cfg = ctx.config.controller
    if cfg is None:
        return []
    from controller.service import ControllerPeer

    self_id = cfg.controllerDLegerSelfId or ""
    address = cfg.self_address
    peer = ControllerPeer(cfg, ctx.client, clock_ms=ctx.awake)
    listener = await ctx.listen(_port_of(address), peer.processor_table(), name=f"controller.{self_id}")
    log.info("controller %s: raft log under %s", self_id, cfg.store_path)
    banner = f"controller {self_id} {address} group {cfg.controllerDLegerGroup} peers {len(cfg.peers)}"
    boot = "The ControllerManager boot success. serializeType=JSON"
    return [
        HostedComponent(
            f"controller.{self_id}", peer, [banner], on_stop=peer.close, boot_line=boot, listeners=[listener]
        )
    ]


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


async def start_container_admin(ctx: ProcessContext) -> list[HostedComponent]:
    """The container's own port (ADD_BROKER/REMOVE_BROKER/...; a later issue fills this in)."""
    cfg = ctx.config.container
    if cfg is not None:
        log.warning("container admin port %d is configured but not served yet: not opened", cfg.listenPort)
    return []


async def start_brokers(ctx: ProcessContext) -> list[HostedComponent]:
    """The hosted brokers: one :class:`~broker.controller.BrokerController` per broker spec.

    Each broker binds its own ``listenPort`` on the shared transport; all share the process's
    remoting client (name-server registration, later HA and escape).
    """
    if not ctx.config.brokers:
        return []
    from broker.controller import BrokerController

    hosted: list[HostedComponent] = []
    for spec in ctx.config.brokers:
        try:
            # a host name's lookup may take a while: not on the loop the name server already serves
            store_ip = await trio.to_thread.run_sync(ip_of, spec.broker.brokerIP1)
            broker = BrokerController(
                spec.broker,
                spec.store,
                client=ctx.client,
                liveness_ms=ctx.awake,
                transport_configs=(ctx.config.nettyServer, ctx.config.nettyClient),
                store_ip=store_ip,
                join_after=ctx.components_started,
            )
        except ValueError as exc:  # a value the config checks let through: one line, not a traceback
            raise StartupError(f"broker {spec.broker.broker_display_name} ({spec.source}): {exc}") from exc
        listener = await ctx.listen(spec.broker.listenPort, broker.processor_table, name=broker.name)
        broker.attach(ctx.server, listener)
        # In controller mode the controller decides the role after start; say so instead.
        role = "role from the controller" if spec.broker.enableControllerMode else broker.role.value
        banner = (
            f"broker {broker.name} {broker.addr} ({role}) ha {broker.ha_addr} "
            f"store {spec.store.storePathRootDir}"
        )
        hosted.append(
            HostedComponent(
                broker.name, broker, [banner], before_stop=broker.prepare_stop, listeners=[listener]
            )
        )
    return hosted


DEFAULT_FACTORIES: tuple[ComponentFactory, ...] = (
    start_namesrv,
    start_controller,
    start_container_admin,
    start_brokers,
)


# --- the process ----------------------------------------------------------------------------------


#: an open-file limit below this is worth a warning (see :func:`raise_open_file_limit`)
FEW_OPEN_FILES = 8192


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit, as the JVM does for an
    upstream broker (``-XX:+MaxFDLimit``, on by default), and return (before, after).

    Every connection holds a descriptor (clients, replicas, the name server's brokers), as do the
    index files; mapped store files do not (:func:`store.mapped_file.map_file`). Logs the change,
    and warns when the limit stays below :data:`FEW_OPEN_FILES`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    after = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            after = target
            log.info("open-file limit raised from %d to %d (its hard limit)", soft, target)
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    if after != resource.RLIM_INFINITY and after < FEW_OPEN_FILES:
        log.warning(
            "open-file limit %d is low: every client and replica connection holds a descriptor, so a "
            "process serving many clients runs out; raise the hard limit (ulimit -Hn, systemd LimitNOFILE)",
            after,
        )
    return soft, after


#: seconds a thread waiting for the GIL lets the running one keep it (``sys.setswitchinterval``)
GIL_SWITCH_INTERVAL = 0.0005


def shorten_gil_switch_interval() -> float:
    """Make a thread that waits for the GIL get it within :data:`GIL_SWITCH_INTERVAL` (0.5 ms)
    instead of CPython's 5 ms; returns the interval before.

    The event loop keeps the GIL while it is busy, and every blocking call runs in a worker thread
    (fsync, file creation, page population), which needs the GIL back after each system call:
    under load it waited up to a whole interval each time. A 4 MiB commit-log file, 0.2 ms of
    creation alone, took 4.3 ms to create and 13 ms to hand over, so the file allocator fell
    behind a writer rolling a file every 10 ms (``bin/bench store``'s 4 MiB rolls: 0.69-0.71 of
    the no-roll rate; 0.77-0.78 at 0.5 ms; 0.76-0.82 once a roll also takes a file still being
    populated). Switching costs the loop microseconds, and only when a thread waits; the 16 KiB
    append case measured 4-7 % slower."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    return before


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


async def _release_listeners(server: RemotingServer) -> None:
    """Close every listener bound so far (a start that failed must give its ports back)."""
    with trio.CancelScope(shield=True):
        for listener in list(server.listeners):
            await server.remove_listener(listener)


def _bind_host(config: ProcessConfig) -> str:
    return config.nettyServer.bindAddress or "0.0.0.0"


class ContainerProcess:
    """Runs the components of one config in one nursery (see the module docstring)."""

    def __init__(self, config: ProcessConfig, factories: Sequence[ComponentFactory] | None = None) -> None:
        self.config = config
        self.factories = tuple(DEFAULT_FACTORIES if factories is None else factories)
        self.components: list[HostedComponent] = []
        self.server: RemotingServer | None = None
        self._stop = trio.Event()
        self._cancel_all: trio.CancelScope | None = None

    def stop(self) -> None:
        """Ask for a graceful stop (idempotent; also fine before ``run`` started)."""
        self._stop.set()

    def cancel(self) -> None:
        """Stop at once: cancel everything (components still run their ``finally`` blocks)."""
        self._stop.set()
        if self._cancel_all is not None:
            self._cancel_all.cancel()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def banner(self) -> list[str]:
        lines = [f"rmq-container started (pid {os.getpid()}, config {self.config.source})"]
        for hosted in self.components:
            lines.extend(hosted.banner)
        if self.config.dataDir:
            lines.append(f"data {self.config.dataDir}")
        return lines

    async def _serve(self, ctx: ProcessContext, task_status: trio.TaskStatus[list[str]]) -> None:
        server = ctx.server
        try:
            for factory in self.factories:
                self.components.extend(await factory(ctx))
        except BaseException:
            await _release_listeners(server)
            raise
        async with trio.open_nursery() as components:
            components.start_soon(ctx.awake.run)
            async with trio.open_nursery() as transport:
                # The transport runs from the start, and each component's listeners accept once it
                # has started: the name server and the controller answer while the brokers still
                # load their stores (with 36,000 queues a broker took a minute, and the process's
                # controller answered no broker of it -- nor of other processes -- meanwhile).
                await transport.start(server.run)
                for hosted in self.components:
                    log.debug("starting %s", hosted.name)
                    try:
                        await components.start(hosted.component.run)
                    except* (StoreOpenError, OSError) as group:
                        # a store refused as configured (file sizes that do not match the store on
                        # disk, a data directory another process uses), or a data directory that
                        # cannot be made or written (read-only file system, no permission) --
                        # possibly raised inside the component's own nurseries: one line, not a
                        # traceback
                        refusal = _leaves(group)[0]
                        await _release_listeners(server)
                        raise StartupError(f"{hosted.name}: {_describe_refusal(refusal)}") from refusal
                    for listener in hosted.listeners:
                        await server.serve(listener)
                for listener in list(server.listeners):  # any a component did not list
                    await server.serve(listener)
                ctx.components_started.set()
                lines = self.banner()
                for line in lines:
                    log.info("%s", line)
                for hosted in self.components:
                    if hosted.boot_line:
                        logging.getLogger(hosted.name).info("%s", hosted.boot_line)
                task_status.started(lines)
                await self._stop.wait()
                for hosted in self.components:
                    if hosted.on_stop is not None:
                        hosted.on_stop()
                with trio.move_on_after(BEFORE_STOP_TIMEOUT):
                    async with trio.open_nursery() as before:
                        for hosted in self.components:
                            if hosted.before_stop is not None:
                                before.start_soon(hosted.before_stop)
                log.info("stopping: transport first")
                transport.cancel_scope.cancel()
            log.info("stopping: %d component(s)", len(self.components))
            components.cancel_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        """Start everything, report the banner lines, serve until :meth:`stop`, then shut down."""
        cfg = self.config
        server = RemotingServer(
            name=REMOTING_LOGGER, idle_timeout=cfg.nettyServer.serverChannelMaxIdleTimeSeconds
        )
        self.server = server
        with trio.CancelScope() as cancel_all:
            self._cancel_all = cancel_all
            try:
                async with RemotingClient(
                    connect_timeout=cfg.nettyClient.connectTimeoutMillis / 1000,
                    close_on_timeout=cfg.nettyClient.clientCloseSocketIfTimeout,
                    unacked_timeout=PEER_UNACKED_TIMEOUT,
                    name=f"{REMOTING_LOGGER}.client",
                ) as client:
                    await self._serve(ProcessContext(cfg, server, client, _bind_host(cfg)), task_status)
            except* StartupError as group:
                # Factories run one at a time, so there is exactly one; callers get it unwrapped.
                err = _leaves(group)[0]
                raise err from err.__cause__
        log.info("rmq-container stopped")


def _describe_refusal(error: BaseException) -> str:
    """A store's refusal as it says it; an OSError as "cannot start: <reason>: <path>"."""
    if isinstance(error, OSError):
        where = f": {error.filename}" if error.filename is not None else ""
        return f"cannot start: {error.strerror or error}{where}"
    return str(error)


def stop_signals() -> list[signal.Signals]:
    """The signals that stop the process gracefully: SIGINT, SIGTERM and SIGHUP (a closed terminal;
    the JVM runs an upstream broker's shutdown hooks on it too) -- but not SIGHUP when it is ignored
    (``nohup``): a handler would undo what the user asked for."""
    out = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        out.append(signal.SIGHUP)
    return out


async def run_process(
    config: ProcessConfig,
    *,
    factories: Sequence[ComponentFactory] | None = None,
    on_started: Callable[[list[str]], None] | None = None,
) -> int:
    """Run ``config`` until SIGINT/SIGTERM/SIGHUP (:func:`stop_signals`); return the exit code (0 after
    a graceful stop).

    ``on_started`` gets the banner lines once everything listens (the CLI prints them).
    """
    process = ContainerProcess(config, factories)
    with trio.open_signal_receiver(*stop_signals()) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if not process.stopping:
                        log.info("%s received: stopping (send it again to stop at once)", name)
                        process.stop()
                    else:
                        log.warning("%s received again: cancelling everything", name)
                        process.cancel()

            async def run_then_stop_watching(*, task_status: trio.TaskStatus[list[str]]) -> None:
                try:
                    await process.run(task_status=task_status)
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch_signals)
            lines = await nursery.start(run_then_stop_watching)
            # from here on every stall delays requests (startup imports and loads are expected)
            await nursery.start(LoopWatchdog().run)
            if on_started is not None:
                on_started(lines)
    return 0
