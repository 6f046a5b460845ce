"""trio remoting server: one dispatcher, many listening ports, each with its own processor table.

Upstream: ``NettyRemotingServer``. A broker container shares one server among its brokers by
giving each broker its own listener (port) and :class:`ProcessorTable`::

    server = RemotingServer(name="container")
    table = ProcessorTable(on_close=forget_broker)
    table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, get_route)
    listener = await server.add_listener("127.0.0.1", 9876, table, name="namesrv")
    nursery.start(server.run)            # serves until cancelled

Listeners may be added and removed before and while the server runs. Cancelling ``run``
shuts down gracefully: listeners close, requests still being handled get up to
``shutdown_grace`` seconds to finish (new requests from peers newer than V5_3_1 get GO_AWAY
meanwhile), then connections close. Per-connection behaviour (concurrency bound, oneway,
errors, ordering of writes) is described in :mod:`remoting.connection`.
"""

from __future__ import annotations

import errno
import itertools
import logging
from collections.abc import Iterator

import trio

from remoting.codec import DEFAULT_MAX_FRAME_SIZE
from remoting.connection import (
    Connection,
    ConnectionCallback,
    Handler,
    ProcessorTable,
    RequestContext,
    detach_stream,
)
from remoting.log_owner import set_log_owner
from remoting.repeats import RepeatedLog
from remoting.sockets import open_tcp_listeners

__all__ = [
    "Connection",
    "ConnectionCallback",
    "Handler",
    "Listener",
    "ProcessorTable",
    "RemotingServer",
    "RequestContext",
]

_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


class Listener:
    """One listening address with its processor table (returned by ``add_listener``)."""

    def __init__(
        self, name: str, host: str, table: ProcessorTable, sockets: list[trio.SocketListener]
    ) -> None:
        self.host = host
        self.table = table
        self.connections: set[Connection] = set()
        self._sockets = sockets
        self._scope: trio.CancelScope | None = None
        self.closed = False
        #: bound but not accepting (connections wait in the kernel's backlog) until
        #: :meth:`RemotingServer.serve` -- its component is still starting
        self.held = False
        #: the bound port (the ephemeral one when 0 was asked for)
        self.port: int = sockets[0].socket.getsockname()[1]
        self.name = name or self.address

    @property
    def address(self) -> str:
        """``host:port`` as logs and banners show it (an IPv6 host in brackets: ``[::]:9876``)."""
        host = self.host or "0.0.0.0"
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def __repr__(self) -> str:
        return f"<Listener {self.name} {self.address}>"


class RemotingServer:
    """Serves remoting connections on any number of listeners (see the module docstring)."""

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_in_flight_per_connection: int = 256,
        name: str = "remoting",
        shutdown_grace: float = 2.0,
        idle_timeout: float = 0.0,
    ) -> None:
        self.name = name
        #: seconds without a read or a write (and with no request open either way) after which
        #: a connection is closed (upstream ``serverChannelMaxIdleTimeSeconds``); 0: never
        self.idle_timeout = idle_timeout
        self.max_frame_size = max_frame_size
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self.shutdown_grace = shutdown_grace
        self.listeners: list[Listener] = []
        self._log = logging.getLogger(name)
        #: accept failing (out of descriptors): said once per listener and reason
        self._accept_failures = RepeatedLog(self._log)
        self._nursery: trio.Nursery | None = None
        self._work_scope: trio.CancelScope | None = None
        self._shutting_down = False
        self._opaque: Iterator[int] = itertools.count(1)

    def _next_opaque(self) -> int:
        o = next(self._opaque)
        if o >= 0x7FFFFFFF:
            self._opaque = itertools.count(1)
        return o

    async def add_listener(
        self, host: str, port: int, table: ProcessorTable, *, name: str = "", held: bool = False
    ) -> Listener:
        """Bind ``host:port`` (0 = ephemeral) and serve it with ``table`` (now, or once ``run``
        starts; with ``held``, once :meth:`serve` is called for it)."""
        if self._shutting_down:
            raise RuntimeError(f"server {self.name} is shutting down")
        sockets = await open_tcp_listeners(port, host)
        listener = Listener(name, host, table, sockets)
        listener.held = held
        self.listeners.append(listener)
        if self._nursery is not None and not held:
            await self._nursery.start(self._accept_loop, listener)
        self._log.info("listening on %s (%s)", listener.address, listener.name)
        return listener

    async def serve(self, listener: Listener) -> None:
        """Start accepting on a listener added ``held`` (now, or once ``run`` starts)."""
        if not listener.held:
            return
        listener.held = False
        if self._nursery is not None and not listener.closed:
            await self._nursery.start(self._accept_loop, listener)

    async def remove_listener(self, listener: Listener) -> None:
        """Stop accepting on ``listener`` and close its connections."""
        if listener in self.listeners:
            self.listeners.remove(listener)
        await self._close_listener(listener)
        for conn in list(listener.connections):
            await conn.aclose()

    async def _close_listener(self, listener: Listener) -> None:
        if listener.closed:
            return
        listener.closed = True
        if listener._scope is not None:
            listener._scope.cancel()
        for s in listener._sockets:
            await s.aclose()
        self._log.info("stopped listening on %s (%s)", listener.address, listener.name)

    @property
    def connections(self) -> list[Connection]:
        return [c for lst in self.listeners for c in lst.connections]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve every listener until cancelled, then shut down gracefully (a server runs once).

        Connections and handlers run in a nursery shielded from the caller's cancellation, so
        that in-flight handlers get the grace period; the server cancels it itself afterwards.
        """
        if self._work_scope is not None:
            raise RuntimeError(f"server {self.name} is already running")
        async with trio.open_nursery() as guard:
            await guard.start(self._work)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    try:
                        await self._shutdown()
                    finally:
                        assert self._work_scope is not None
                        self._work_scope.cancel()

    async def _work(self, *, task_status: trio.TaskStatus[None]) -> None:
        try:
            with trio.CancelScope(shield=True) as scope:
                self._work_scope = scope
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    for listener in self.listeners:
                        if not listener.held:
                            await nursery.start(self._accept_loop, listener)
                    if self.idle_timeout > 0:
                        nursery.start_soon(self._close_idle_connections)
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            self._nursery = None
            self._work_scope = None

    async def _shutdown(self) -> None:
        self._shutting_down = True
        for listener in self.listeners:
            await self._close_listener(listener)
        for conn in self.connections:
            conn.going_away = True
        with trio.move_on_after(self.shutdown_grace):
            while any(c.in_flight for c in self.connections):
                await trio.sleep(0.01)
        for conn in self.connections:
            await conn.aclose()
        self._log.info("server %s stopped", self.name)

    async def _close_idle_connections(self) -> None:
        """Close connections idle for ``idle_timeout``: a peer that vanished without closing (a
        machine gone, a network cut, a process frozen for good) would otherwise hold its
        connection and its client-table entries forever. Live clients are never idle this long
        (they heartbeat every 30 s); a connection with a request open either way is not idle."""
        limit = self.idle_timeout
        period = min(max(limit / 4, 0.05), 10.0)
        #: connection -> (its activity count, when that count was first seen)
        seen: dict[Connection, tuple[int, float]] = {}
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            kept: dict[Connection, tuple[int, float]] = {}
            for conn in self.connections:
                if conn.closed:
                    continue
                prev = seen.get(conn)
                if prev is None or prev[0] != conn.activity or conn.in_flight or conn.awaiting_responses:
                    kept[conn] = (conn.activity, now)
                elif now - prev[1] >= limit:
                    self._log.info(
                        "closing connection %s (%s): idle for %.0f s (serverChannelMaxIdleTimeSeconds)",
                        conn.remote_address,
                        conn.listener,
                        now - prev[1],
                    )
                    await conn.aclose("idle")
                else:
                    kept[conn] = prev
            seen = kept

    async def _accept_loop(self, listener: Listener, *, task_status: trio.TaskStatus[None]) -> None:
        assert self._nursery is not None
        nursery = self._nursery
        with trio.CancelScope() as scope:
            listener._scope = scope
            task_status.started()
            if listener.closed:
                return
            async with trio.open_nursery() as accepting:
                for sock in listener._sockets:
                    accepting.start_soon(self._accept, listener, sock, nursery)

    async def _accept(self, listener: Listener, sock: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await sock.accept()
            except OSError as e:
                if e.errno in _ACCEPT_RETRY_ERRNOS:
                    self._accept_failures.log(
                        listener.address,
                        logging.ERROR,
                        f"accept on {listener.address} failed ({e}); retrying every 100 ms",
                    )
                    await trio.sleep(0.1)
                    continue
                raise
            except trio.ClosedResourceError:
                return
            self._accept_failures.resolved(listener.address, f"accept on {listener.address} works again")
            conn = Connection(
                detach_stream(stream),
                table=listener.table,
                nursery=nursery,
                next_opaque=self._next_opaque,
                logger=self._log,
                listener=listener.name,
                max_in_flight=self.max_in_flight_per_connection,
                max_frame_size=self.max_frame_size,
                on_finish=listener.connections.discard,
            )
            listener.connections.add(conn)
            nursery.start_soon(self._serve_connection, listener, conn)

    async def _serve_connection(self, listener: Listener, conn: Connection) -> None:
        if listener.name:
            set_log_owner(listener.name)  # its requests' records name the broker they are for
        self._log.debug("accepted %r", conn)
        await conn.serve()
