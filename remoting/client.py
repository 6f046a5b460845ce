"""trio remoting client: one connection per address, shared by every caller.

Upstream: ``NettyRemotingClient``. Use it as an async context manager (it owns the nursery
in which connection readers and server→client request handlers run)::

    async with RemotingClient() as client:
        response = await client.invoke("127.0.0.1:9876", request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                  {"topic": "T"}), timeout=3.0)

Opaques come from one counter per client. A connection that failed or closed is replaced on
the next call. Requests the server sends on a connection (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE, ...) are dispatched to ``processors`` exactly as the server
dispatches requests; without processors they are answered REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Self

import trio

from remoting.codec import DEFAULT_MAX_FRAME_SIZE
from remoting.command import RemotingCommand
from remoting.connection import Connection, ProcessorTable, detach_stream
from remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingSendError,
    RemotingTimeoutError,
)
from remoting.log_owner import set_log_owner

__all__ = [
    "RemotingClient",
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendError",
    "RemotingTimeoutError",
    "parse_address",
]


def parse_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` -> (host, port); raises RemotingConnectError for anything else."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {addr!r} (expected host:port)")
    return host.strip("[]"), int(port)


def bad_addresses(addrs: str | None) -> list[str]:
    """The entries of a ``;``-separated address list (``namesrvAddr``, ``controllerAddr``) that are
    not ``host:port`` with a port in 1..65535."""
    bad = []
    for addr in (a.strip() for a in (addrs or "").split(";")):
        if not addr:
            continue
        try:
            host, port = parse_address(addr)
        except RemotingConnectError:
            bad.append(addr)
            continue
        if not host or not 0 < port < 65536:
            bad.append(addr)
    return bad


def _connect_failure(exc: OSError) -> str:
    """Why a connect failed, in a word: trio's ``open_tcp_stream`` says only "all attempts to
    connect to host:port failed" and keeps each attempt's error in ``__cause__``."""
    attempts = getattr(exc.__cause__, "exceptions", None) or [exc]
    reasons = []
    for attempt in attempts:
        errno = attempt.errno if isinstance(attempt, OSError) else None
        reason = os.strerror(errno) if errno else str(attempt)
        if reason not in reasons:
            reasons.append(reason)
    return "; ".join(reasons)


#: a call that waited less than this (and less than a quarter of its timeout) for its response
#: does not close the connection when it times out (upstream ``MIN_CLOSE_TIMEOUT_MILLIS``)
MIN_CLOSE_TIMEOUT = 0.1
#: the ``unacked_timeout`` of this project's clients -- the processes' own (broker to name server and
#: controller, controller peer to peer, name server to broker), a slave's HA connection, the Python
#: client's: seconds the peer's kernel may acknowledge nothing before the connection counts as lost
PEER_UNACKED_TIMEOUT = 3.0


def set_unacked_timeout(sock: socket.socket, seconds: float) -> None:
    """Have the kernel end ``sock``'s connection once the peer has acknowledged nothing for about
    ``seconds``: bytes sent (``TCP_USER_TIMEOUT``) or, on a connection with nothing to send (a long
    poll waiting for its answer), keepalive probes -- the first after a third of ``seconds`` idle,
    then one every third. Options the system lacks are left out."""
    ms = max(1, round(seconds * 1000))
    probe = max(1, round(seconds / 3))  # whole seconds: the keepalive options' unit
    options = (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", ms),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", probe),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", probe),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", 3),
    )
    for level, name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(level, option, value)


class RemotingClient:
    """Connection pool + request/response matching (see the module docstring)."""

    def __init__(
        self,
        *,
        processors: ProcessorTable | None = None,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_in_flight_per_connection: int = 256,
        name: str = "remoting.client",
        on_connect_failure: Callable[[str], None] | None = None,
        close_on_timeout: bool = False,
        on_call_timeout: Callable[[str], None] | None = None,
        unacked_timeout: float | None = None,
    ) -> None:
        self.processors = processors or ProcessorTable()
        #: close the connection when a call on it times out (upstream's
        #: ``clientCloseSocketIfTimeout``, on by default in the Java remoting client): a peer cut
        #: off by the network leaves no error but silence, and the next call must not queue behind
        #: it on a connection TCP keeps retransmitting for minutes, but connect anew -- and fail
        #: at once if the peer is really gone (``on_connect_failure``)
        self.close_on_timeout = close_on_timeout
        #: called with the address when a call waited long enough for its response to say
        #: something about the peer (see :data:`MIN_CLOSE_TIMEOUT`) and got none
        self.on_call_timeout = on_call_timeout
        #: seconds the peer's kernel may acknowledge nothing -- sent bytes, keepalive probes -- before
        #: the kernel ends the connection (:func:`set_unacked_timeout`; None: the system's limits,
        #: ~15 minutes for sent bytes, no probes). For traffic that waits for no response (oneway
        #: heartbeats, Raft messages) and calls that wait long (long polls) this is the only early
        #: sign that the network between the two ends is gone: without it, what is sent during a
        #: partition waits in the kernel for TCP's next retransmission, which backs off
        #: exponentially, so a connection stays silent after the heal for about as long again as
        #: the partition lasted. With it, the connection ends, the next call connects anew.
        self.unacked_timeout = unacked_timeout
        #: called with the address when a connection cannot be made (refused, unreachable, timed
        #: out), before the call raises: the peer may be gone for good
        self.on_connect_failure = on_connect_failure
        self.connect_timeout = connect_timeout
        self.max_frame_size = max_frame_size
        self.max_in_flight_per_connection = max_in_flight_per_connection
        #: called with the address when a connection to it ends other than by this client's
        #: :meth:`close_connection` or shutdown -- the peer closed it, the network lost it, or a call
        #: on it timed out (``close_on_timeout``): a broker re-registers with a name server whose
        #: connection broke (it may have restarted without the routes)
        self.close_listeners: list[Callable[[str], None]] = []
        #: called with the address each time a connection to it is made (upstream's
        #: ``onChannelActive``): a client re-sends its heartbeat to a broker it reconnected to
        self.connect_listeners: list[Callable[[str], None]] = []
        self._log = logging.getLogger(name)
        self._connections: dict[str, Connection] = {}
        self._connect_locks: dict[str, trio.Lock] = {}
        self._opaque: Iterator[int] = itertools.count(0)
        self._nursery: trio.Nursery | None = None
        self._cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        cm = trio.open_nursery()
        self._cm = cm
        self._nursery = await cm.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._closing = True
        assert self._nursery is not None
        assert self._cm is not None
        with trio.CancelScope(shield=True):
            for conn in list(self._connections.values()):
                await conn.aclose()
        self._connections.clear()
        self._nursery.cancel_scope.cancel()
        cm = self._cm
        self._nursery = None
        return await cm.__aexit__(exc_type, exc, tb)

    def _next_opaque(self) -> int:
        o = next(self._opaque)
        if o >= 0x7FFFFFFF:
            self._opaque = itertools.count(0)
        return o

    # ------------------------------------------------------------------ connections

    def connection(self, addr: str) -> Connection | None:
        """The open connection to ``addr``, if there is one."""
        conn = self._connections.get(addr)
        return conn if conn is not None and not conn.closed else None

    async def get_connection(self, addr: str, timeout: float | None = None) -> Connection:
        """The open connection to ``addr``, connecting first if needed."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connect_locks.get(addr)
        if lock is None:
            lock = self._connect_locks[addr] = trio.Lock()
        async with lock:
            conn = self._connections.get(addr)
            if conn is not None and not conn.closed:
                return conn
            return await self._connect(addr, self.connect_timeout if timeout is None else timeout)

    async def _connect(self, addr: str, timeout: float) -> Connection:
        if self._nursery is None or self._closing:
            raise RemotingConnectError(f"client is not running; cannot connect to {addr}")
        host, port = parse_address(addr)
        try:
            with trio.fail_after(max(timeout, 0.0)):
                stream = await trio.open_tcp_stream(host, port)
        except trio.TooSlowError:
            self._connect_failed(addr)
            raise RemotingConnectError(f"connect to {addr} timed out after {timeout:.3f}s") from None
        except OSError as e:
            self._connect_failed(addr)
            raise RemotingConnectError(f"connect to {addr} failed: {_connect_failure(e)}") from None
        except trio.Cancelled:
            # the caller's own deadline ended the connect (a send's budget ran out while the peer
            # did not answer): the peer may be gone all the same
            self._connect_failed(addr)
            raise
        sock = detach_stream(stream)
        if self.unacked_timeout is not None:
            set_unacked_timeout(sock, self.unacked_timeout)
        conn = Connection(
            sock,
            table=self.processors,
            nursery=self._nursery,
            next_opaque=self._next_opaque,
            logger=self._log,
            listener="client",
            max_in_flight=self.max_in_flight_per_connection,
            max_frame_size=self.max_frame_size,
            on_finish=lambda c: self._forget(addr, c),
        )
        self._connections[addr] = conn
        self._nursery.start_soon(self._serve_unowned, conn)
        self._log.debug("connected to %s", addr)
        self._tell(self.connect_listeners, addr, "connect")
        return conn

    def _connect_failed(self, addr: str) -> None:
        if self.on_connect_failure is not None:
            self._tell([self.on_connect_failure], addr, "on_connect_failure")

    @staticmethod
    async def _serve_unowned(conn: Connection) -> None:
        # a client's connection may serve several brokers of the process (the container shares
        # one client): its tasks do not inherit the log owner of the task that happened to open it
        set_log_owner("")
        await conn.serve()

    def _forget(self, addr: str, conn: Connection) -> None:
        if self._connections.get(addr) is conn:
            del self._connections[addr]
        if not self._closing:
            self._tell(self.close_listeners, addr, "close")

    def _tell(self, listeners: list[Callable[[str], None]], addr: str, what: str) -> None:
        for listener in list(listeners):
            try:
                listener(addr)
            except Exception:  # a listener's bug must not fail the call or the teardown at hand,
                # nor turn into a different error
                self._log.exception("%s listener failed for %s", what, addr)

    async def close_connection(self, addr: str) -> None:
        """Close the connection to ``addr`` (the next call reconnects)."""
        conn = self._connections.pop(addr, None)
        if conn is not None:
            await conn.aclose()

    # ------------------------------------------------------------------ calls

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and return the response (``timeout`` covers connect + response).

        Raises RemotingConnectError, RemotingSendError, RemotingTimeoutError or
        RemotingClosedError (all RemotingError, all naming ``addr``).
        """
        deadline = trio.current_time() + timeout
        conn = await self.get_connection(addr, min(self.connect_timeout, timeout))
        remaining = deadline - trio.current_time()
        if remaining <= 0 or math.isnan(remaining):
            raise RemotingTimeoutError(f"connect to {addr} used up the {timeout:.3f}s timeout")
        try:
            return await conn.request(cmd, remaining)
        except RemotingTimeoutError:
            # upstream's rule: not when the wait was too short to say anything about the peer
            long_enough = remaining > MIN_CLOSE_TIMEOUT or remaining > timeout / 4
            if long_enough and self.on_call_timeout is not None:
                self._tell([self.on_call_timeout], addr, "on_call_timeout")
            if self.close_on_timeout and long_enough and self._connections.get(addr) is conn:
                self._log.warning(
                    "no response from %s within %.3fs: closing the connection (the next call connects anew)",
                    addr,
                    remaining,
                )
                del self._connections[addr]
                await conn.aclose("a call timed out")
            raise

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        """Send ``cmd`` to ``addr`` with the oneway flag; no response is expected."""
        conn = await self.get_connection(addr, min(self.connect_timeout, timeout))
        with trio.move_on_after(timeout) as scope:
            await conn.oneway(cmd)
        if scope.cancelled_caught:
            raise RemotingTimeoutError(f"sending oneway request to {addr} took longer than {timeout:.3f}s")
