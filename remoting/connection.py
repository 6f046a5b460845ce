"""One remoting connection, shared by the server and the client side.

A :class:`Connection` owns a connected socket, a :class:`~remoting.codec.FrameDecoder`, the
table of requests it sent and is waiting on (matched by opaque), and the dispatch of the
requests it receives to a :class:`ProcessorTable`. Both directions are symmetric: a server
connection can send requests to the client (``request``/``oneway``) and a client connection
serves requests from the server through the client's processors.

Dispatch. Each received request runs its handler concurrently with the others, at most
``max_in_flight`` at a time per connection. To avoid a task per request, the reader first runs
the handler inline: a handler that finishes without blocking costs no task at all; a handler
that blocks keeps the current task and a new task takes over reading (the reader "hands
off"); the rest of its read batch gets a task per request, each of which starts the oldest of them
(trio runs a batch of new tasks in either order), so a connection's requests start -- run up to
their first wait -- in arrival order, as a broker must append pipelined sends to a queue. Requests
that arrive while every slot is busy, or while older ones still wait for their tasks, wait in a
backlog, served in order: by whichever handler task finishes first, and, while slots are free,
by a task each once a request ahead of them blocked (so blocking handlers -- sends waiting for a
replica's ack or their flush -- run as many at a time as there are slots); when the backlog is
as long as ``max_in_flight`` the reader stops reading (backpressure) — except while this side
waits for responses from the peer, which only the reader can deliver. Every request gets exactly
one outcome: the handler's response, none (oneway, or the handler returned None), SYSTEM_ERROR
when the handler raised, or GO_AWAY while the server shuts down.

Writes. Frames are queued and written with ``send``/``sendmsg`` (gather write: header and body
parts go out without being joined) as far as the socket takes them; only when the socket is full
does a task wait for writability, and frames queued meanwhile are left to that task. When more
than ``HIGH_WATER`` bytes are queued, writers wait for the queue to drain and the reader stops
reading. Requests (``request``/``oneway``/``respond``) are written at once. Responses of handlers
run by the connection are written by the run's flusher (:mod:`remoting.flusher`) once the tasks
runnable at that moment have run, or once the first of them has waited ``FLUSH_DELAY_LIMIT``:
the responses of one read batch go out in one system call, and the responses to requests that
arrived on many connections at once go out back to back, which wakes a peer process waiting for
them once rather than once per response (a wake-up of a process on another CPU is the dearest
part of a small request on a virtual machine). The price is latency: a response waits for the
rest of its batch.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import socket
import threading
import types
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import Any

import outcome
import trio

from remoting.codec import Buffer, FrameDecoder, FrameError, buffer_len, encode
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingClosedError, RemotingSendError, RemotingTimeoutError
from remoting.flusher import flusher
from remoting.headers import HeaderError
from remoting.processor import ConnectionCallback, Handler, ProcessorTable, RequestContext
from remoting.sockets import peer_text

__all__ = [
    "Connection",
    "ConnectionCallback",
    "Handler",
    "ProcessorTable",
    "RequestContext",
]

#: Bytes queued for writing above which writers wait for the queue to drain.
HIGH_WATER = 4 * 1024 * 1024
#: Bytes one read takes from a socket (into the thread's shared buffer) and the most one reader's
#: turn handles before other tasks run. 256 KiB: a SEND_BATCH_MESSAGE of 32 x 1 KiB is ~35 KB,
#: and with 64 KiB reads almost every such frame arrived split over two reads (the broker's main
#: thread then spent ~7 % more per batched message; 2026-12-08).
RECEIVE_SIZE = 256 * 1024
GO_AWAY_MIN_VERSION = 475  # upstream answers GO_AWAY only to peers newer than V5_3_1


class _Call:
    """A request we sent and are waiting on."""

    __slots__ = ("done", "error", "response", "task")

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.done = False
        self.response: RemotingCommand | None = None
        self.error: BaseException | None = None


@types.coroutine
def _resume(coro: Any, trap: Any) -> Generator[Any, Any, Any]:
    """Continue driving ``coro`` (which already yielded ``trap``) in the current task."""
    while True:
        try:
            value = yield trap
        except BaseException as exc:  # trio throws Cancelled etc. into the task: pass it on
            try:
                trap = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                trap = coro.send(value)
            except StopIteration as stop:
                return stop.value


_connection_ids: Iterator[int] = itertools.count(1)

#: One receive buffer per thread, shared by every connection that thread runs: a read is
#: decoded (and anything left over copied into the connection's decoder) before the task
#: yields, so sharing is safe within a trio run; per thread, because a process may run several.
_recv_buffers = threading.local()


def _receive_buffer() -> tuple[bytearray, memoryview]:
    pair: tuple[bytearray, memoryview] | None = getattr(_recv_buffers, "pair", None)
    if pair is None:
        buf = bytearray(RECEIVE_SIZE)
        pair = _recv_buffers.pair = (buf, memoryview(buf))
    return pair


_IOV_MAX = 512


def detach_stream(stream: trio.SocketStream) -> socket.socket:
    """The stream's socket as a non-blocking stdlib socket (the stream must not be used after)."""
    sock = socket.socket(fileno=stream.socket.detach())
    sock.setblocking(False)
    return sock


class Connection:
    """A remoting connection (what handlers see as ``ctx.connection``).

    Owns a connected non-blocking stdlib socket; all waiting goes through
    ``trio.lowlevel.wait_readable``/``wait_writable``, so reads and writes that can complete at
    once cost no scheduler round trip.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        table: ProcessorTable,
        nursery: trio.Nursery,
        next_opaque: Callable[[], int],
        logger: logging.Logger,
        listener: str = "client",
        max_in_flight: int = 256,
        max_frame_size: int = 16 * 1024 * 1024,
        on_finish: Callable[[Connection], None] | None = None,
    ) -> None:
        self.id = next(_connection_ids)
        #: free-form per-connection state for processors (client id, broker address, ...)
        self.attributes: dict[str, Any] = {}
        self.listener = listener
        self.close_reason: str | None = None
        self._sock = sock
        self._table = table
        self._nursery = nursery
        self._next_opaque = next_opaque
        self._log = logger
        self._max_in_flight = max_in_flight
        self._decoder = FrameDecoder(max_frame_size)
        self._handlers = table.handlers  # the table's dict itself: later registrations count
        #: set by the server while it shuts down: new requests get GO_AWAY (peers newer than V5_3_1)
        self.going_away = False
        self._on_finish = on_finish
        self._pending: dict[int, _Call] = {}
        self._in_flight = 0
        self._backlog: deque[tuple[RemotingCommand, float]] = deque()
        #: the rest of a read batch behind a handler that blocked, each with its slot taken and a
        #: task spawned: each task starts the oldest one, so they start in arrival order whatever
        #: order trio runs the new tasks in (it runs a batch of them in either order)
        self._unstarted: deque[tuple[RemotingCommand, float]] = deque()
        #: tasks spawned to start backlogged requests that have not run yet (:meth:`_serve_backlog_soon`)
        self._backlog_servers = 0
        self._slot_lot = trio.lowlevel.ParkingLot()
        self._out: list[Buffer] = []
        self._out_bytes = 0
        self._writing = False
        self._write_queued_soon = False  # handed to the flusher, not written yet
        self._drain_lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self._finished = False
        #: reads and write attempts so far (the server's idle scan looks whether it moved)
        self.activity = 0
        #: "ip:port" of the peer
        self.remote_address = "?"
        #: the local port the connection arrived at (or left from)
        self.local_port = 0
        try:
            peer, local = sock.getpeername(), sock.getsockname()
        except OSError:
            pass
        else:
            if isinstance(peer, tuple):
                self.remote_address = peer_text(peer)
                self.local_port = local[1]
            else:  # AF_UNIX (tests)
                self.remote_address = str(peer) or "unix"

    def __repr__(self) -> str:
        return f"<Connection #{self.id} {self.remote_address} on {self.listener}>"

    @property
    def closed(self) -> bool:
        return self._closed

    def socket_option(self, level: int, option: int) -> int:
        """An integer option of the connection's socket (``getsockopt``)."""
        return self._sock.getsockopt(level, option)

    @property
    def in_flight(self) -> int:
        """Requests received on this connection not answered yet (running or waiting for a slot)."""
        return self._in_flight + len(self._backlog)

    # ------------------------------------------------------------------ outgoing

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` as a request on this connection and wait for its response.

        Assigns ``cmd.opaque``. Raises RemotingTimeoutError, RemotingSendError or
        RemotingClosedError (all carry the peer address).
        """
        cmd.opaque = opaque = self._next_opaque()
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        if self._closed:
            raise RemotingSendError(f"connection to {self.remote_address} is closed")
        call = _Call()
        self._pending[opaque] = call
        if self._slot_lot:
            self._slot_lot.unpark()  # a reader parked for backpressure must read the response
        try:
            with trio.move_on_after(timeout):
                self._queue(encode(cmd))
                await self._flush()
                if not call.done:
                    call.task = trio.lowlevel.current_task()

                    def abort(_: object) -> trio.lowlevel.Abort:
                        call.task = None
                        return trio.lowlevel.Abort.SUCCEEDED

                    await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            self._pending.pop(opaque, None)
        if call.response is not None:
            return call.response
        if call.error is not None:
            raise call.error
        raise RemotingTimeoutError(
            f"no response from {self.remote_address} within {timeout:.3f}s (code {cmd.code}, opaque {opaque})"
        )

    async def oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request (flag bit 1): the peer does not answer."""
        cmd.opaque = self._next_opaque()
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        if self._closed:
            raise RemotingSendError(f"connection to {self.remote_address} is closed")
        self._queue(encode(cmd))
        await self._flush()
        await trio.lowlevel.cancel_shielded_checkpoint()  # yield even when the write was immediate

    async def respond(self, response: RemotingCommand) -> None:
        """Send a response (its opaque must be the request's; ``request.response()`` does that).

        A response for a connection that has closed meanwhile is dropped (logged at debug).
        """
        response.flag |= FLAG_RESPONSE
        if self._closed:
            self._log.debug("dropping response (opaque %d): %r closed", response.opaque, self)
            await trio.lowlevel.checkpoint()
            return
        self._queue(encode(response))
        try:
            await self._flush()
        except RemotingSendError as e:
            self._log.debug("dropping response (opaque %d): %s", response.opaque, e)
        await trio.lowlevel.cancel_shielded_checkpoint()  # yield even when the write was immediate

    @property
    def awaiting_responses(self) -> bool:
        """Whether requests sent on this connection wait for the peer's responses."""
        return bool(self._pending)

    async def aclose(self, reason: str = "closed locally") -> None:
        """Close the connection; the reader notices, fails pending requests and fires on_close."""
        self._close_now(reason)
        await trio.lowlevel.checkpoint()

    def _close_now(self, reason: str) -> None:
        if self._write_queued_soon and not self._closed:
            # Responses handed to the flusher go out first, as they would have before the close
            # had they been written at once (as far as the socket takes them without waiting).
            self._write_queued_soon = False
            if self._out and not self._writing:
                try:
                    self._write_now()
                except RemotingSendError as e:
                    self._log.debug("connection %s: %s", self.remote_address, e)
        if not self._closed:
            self._closed = True
            self.close_reason = reason
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()
        self._out.clear()
        self._out_bytes = 0
        self._backlog.clear()
        self._drain_lot.unpark_all()
        self._slot_lot.unpark_all()

    def _queue(self, parts: list[Buffer]) -> None:
        for p in parts:
            n = buffer_len(p)
            if n:
                self._out.append(p)
                self._out_bytes += n

    def _write_now(self) -> bool:
        """Write as much of the queue as the socket takes without blocking; True when all went.

        Raises RemotingSendError (after closing) when the socket fails.
        """
        out = self._out
        sock = self._sock
        self.activity += 1
        try:
            while out:
                sent = sock.send(out[0]) if len(out) == 1 else sock.sendmsg(out[:_IOV_MAX])
                if sent == self._out_bytes:
                    out.clear()
                    self._out_bytes = 0
                    break
                self._out_bytes -= sent
                # drop what went out; keep the unsent tail of a partly written buffer
                i = 0
                while sent:
                    n = buffer_len(out[i])
                    if sent < n:
                        out[i] = memoryview(out[i]).cast("B")[sent:]
                        break
                    sent -= n
                    i += 1
                del out[:i]
        except BlockingIOError:
            return False
        except OSError as e:
            self._close_now(f"write failed: {e}")
            raise RemotingSendError(f"sending to {self.remote_address} failed: {e}") from None
        return True

    async def _flush(self) -> None:
        """Write everything queued; waits while the socket is full (backpressure).

        When another task is already waiting to write, the frames are left to it, unless more
        than HIGH_WATER bytes are queued (then this waits for the queue to drain).
        """
        if self._closed:
            raise RemotingSendError(f"connection to {self.remote_address} is closed")
        if self._writing:
            if self._out_bytes > HIGH_WATER:
                await self._drain_lot.park()
                if self._closed:
                    raise RemotingSendError(f"connection to {self.remote_address} closed while sending")
            return
        if self._write_now():
            return
        self._writing = True
        try:
            while True:
                await trio.lowlevel.wait_writable(self._sock)
                if self._write_now():
                    break
        except trio.ClosedResourceError:
            raise RemotingSendError(f"connection to {self.remote_address} closed while sending") from None
        except BaseException:
            # Cancelled while waiting for the socket: the queue (possibly half a frame) stays
            # consistent; let another task finish writing it.
            if self._out and not self._closed:
                self._spawn_flusher()
            raise
        finally:
            self._writing = False
            self._drain_lot.unpark_all()

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except RemotingSendError as e:
            self._log.debug("connection %s: %s", self.remote_address, e)

    # ------------------------------------------------------------------ incoming

    async def serve(self) -> None:
        """Read and dispatch until the connection ends; then fail pending calls and fire on_close.

        Returns when this task's reading role ends (the connection may still be served by a
        task that took over reading; see the module docstring).
        """
        cb = self._table.on_connect
        if cb is not None:
            await self._callback(cb, "on_connect")
        await self._read_loop(None)

    async def _callback(self, cb: ConnectionCallback, what: str) -> None:
        try:
            r = cb(self)
            if inspect.isawaitable(r):
                await r
        except Exception:
            self._log.exception("%s callback failed for %r", what, self)

    async def _read_loop(self, backlog: list[RemotingCommand] | None) -> None:
        """Read frames and dispatch them; returns early (without finishing) after a handoff."""
        try:
            if backlog and await self._dispatch(backlog):
                return
            sock = self._sock
            decoder = self._decoder
            recv_buf, recv_view = _receive_buffer()
            while decoder.error is None:
                if len(self._backlog) >= self._max_in_flight and not self._pending:
                    # Every slot busy and as many requests waiting: stop reading (backpressure).
                    # Not while we wait for responses from this peer: handlers may be waiting
                    # for exactly those, and only this task can read them.
                    await self._slot_lot.park()
                    continue
                if self._out_bytes > HIGH_WATER and not self._pending:
                    # The peer is not reading what we send: stop reading its requests. Not while
                    # we wait for its responses (the peer may be blocked writing exactly those).
                    await self._flush_quietly()
                    continue
                try:
                    n = sock.recv_into(recv_buf)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(sock)
                    continue
                except OSError as e:
                    if not self._closed:
                        self._log.info("connection %s: read failed: %s", self.remote_address, e)
                        self.close_reason = f"read failed: {e}"
                    break
                self.activity += 1
                if not n:
                    if decoder.buffered:
                        self._log.warning(
                            "connection %s closed in the middle of a frame (%d bytes of it received)",
                            self.remote_address,
                            decoder.buffered,
                        )
                        self.close_reason = "EOF inside a frame"
                    break
                try:
                    cmds = decoder.feed(recv_view[:n])
                except FrameError:
                    cmds = []
                if cmds and await self._dispatch(cmds):
                    return
                # A read that did not fill the buffer took what there was: wait for more (our
                # responses go out once this task yields, and the peer answers those first).
                # After a full buffer, let the other tasks run first (fairness: one turn reads
                # at most RECEIVE_SIZE bytes of requests), then read again.
                if n < RECEIVE_SIZE and decoder.error is None and not self._closed:
                    await trio.lowlevel.wait_readable(sock)
                else:
                    await trio.lowlevel.checkpoint()
            else:  # the decoder failed (possibly after frames that were handled first)
                self._log.warning("closing connection %s: %s", self.remote_address, decoder.error)
                self.close_reason = str(decoder.error)
        except trio.ClosedResourceError:
            pass  # closed locally while waiting to read
        except BaseException:
            await self._finish()
            raise
        await self._finish()

    async def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._close_now(self.close_reason or "peer closed")
        why = f" ({self.close_reason})" if self.close_reason else ""
        err = RemotingClosedError(
            f"connection to {self.remote_address} closed before the response arrived{why}"
        )
        pending = self._pending
        self._pending = {}
        for call in pending.values():
            call.error = err
            call.done = True
            if call.task is not None:
                trio.lowlevel.reschedule(call.task, outcome.Error(err))
                call.task = None
        if self._on_finish is not None:
            self._on_finish(self)
        cb = self._table.on_close
        if cb is not None:
            with trio.CancelScope(shield=True):
                await self._callback(cb, "on_close")

    def _complete(self, response: RemotingCommand) -> None:
        call = self._pending.get(response.opaque)
        if call is None or call.done:
            self._log.info(
                "dropping response with unknown opaque %d (code %d) from %s",
                response.opaque,
                response.code,
                self.remote_address,
            )
            return
        call.response = response
        call.done = True
        if call.task is not None:
            trio.lowlevel.reschedule(call.task, outcome.Value(response))
            call.task = None

    async def _dispatch(self, cmds: list[RemotingCommand]) -> bool:
        """Handle one read batch (reader only). Returns True if this task handed reading off."""
        now = trio.current_time()
        backlog = self._backlog
        for i, cmd in enumerate(cmds):
            if cmd.flag & FLAG_RESPONSE:
                self._complete(cmd)
                continue
            if backlog or self._unstarted or self._in_flight >= self._max_in_flight:
                backlog.append((cmd, now))
                continue
            if self._out_bytes > HIGH_WATER and not self._pending:
                await self._flush_quietly()  # the peer is slow to read: answer no faster than it reads
            started = self._start(cmd, now)
            if started is not None:
                # The handler blocks: this task keeps driving it. The rest of the chunk is started at
                # once, each request in its own task (a blocked handler stays with the task that
                # started it), so N blocking requests cost one scheduler pass, not N; a new task reads on.
                self._start_rest(cmds[i + 1 :], now)
                self._nursery.start_soon(self._read_loop, None)
                await self._drive(cmd, *started)
                return True
        self._serve_backlog_soon()
        self._send_soon()
        return False

    def _start_rest(self, cmds: list[RemotingCommand], now: float) -> None:
        """Hand the remaining frames of a read chunk to tasks of their own, to be started in
        arrival order (:attr:`_unstarted`; reader only)."""
        backlog = self._backlog
        unstarted = self._unstarted
        for cmd in cmds:
            if cmd.flag & FLAG_RESPONSE:
                self._complete(cmd)
            elif backlog or self._in_flight >= self._max_in_flight:
                backlog.append((cmd, now))
            else:
                # Take the slot now, so the reader cannot start more before this task runs.
                self._in_flight += 1
                unstarted.append((cmd, now))
                self._nursery.start_soon(self._run_one)

    async def _run_one(self) -> None:
        cmd, received_at = self._unstarted.popleft()  # the oldest, not necessarily this task's own
        started = self._start(cmd, received_at, reserved=True)
        if started is None:
            # Done without blocking: its slot is free, so this task serves the backlog.
            nxt = await self._take_backlog()
            if nxt is None:
                return
            cmd, *started = nxt
        else:
            # requests that arrived behind the unstarted ones waited for them; this task now
            # drives a blocked handler, so other ones serve them
            self._serve_backlog_soon()
        await self._drive(cmd, *started)

    def _serve_backlog_soon(self) -> None:
        """Spawn a task for every backlogged request that a free slot could start now, minus those
        spawned already and not run yet: each starts the oldest (:meth:`_take_backlog`), so they
        start in arrival order. Not while unstarted requests (older) wait for their tasks: the last
        of those calls this again. A request that blocks keeps the task that started it; without a
        task each, the backlog would start one request per completion, and a peer's requests queued
        behind blocked ones -- sends waiting for replica acks or for their flush -- would wait for
        other requests to finish although slots are free (a held pull does not block: its handler
        returns and the long-polling service answers it later)."""
        if self._unstarted or self._closed:
            return
        want = min(len(self._backlog), self._max_in_flight - self._in_flight) - self._backlog_servers
        for _ in range(want):
            self._backlog_servers += 1
            self._nursery.start_soon(self._serve_backlog)

    async def _serve_backlog(self) -> None:
        self._backlog_servers -= 1
        nxt = await self._take_backlog()
        if nxt is not None:
            await self._drive(*nxt)

    def _start(
        self, cmd: RemotingCommand, received_at: float, *, reserved: bool = False
    ) -> tuple[Any, Any] | None:
        """Run the handler of ``cmd`` until it completes (None) or blocks (its coroutine and trap).

        ``reserved``: its in-flight slot was taken when its task was spawned (see :meth:`_start_rest`).
        """
        if self._closed or (self.going_away and cmd.version > GO_AWAY_MIN_VERSION):
            if reserved:
                self._in_flight -= 1
            if not self._closed:
                self._queue_response(
                    cmd, cmd.response(ResponseCode.GO_AWAY, "server is shutting down, reconnect elsewhere")
                )
            return None
        if not reserved:
            self._in_flight += 1
        try:
            handler = self._handlers.get(cmd.code) or self._table.default
            coro = handler(RequestContext(self, self.listener, received_at), cmd)
            trap = coro.send(None)
        except StopIteration as stop:
            self._in_flight -= 1
            if stop.value is not None:
                self._queue_response(cmd, stop.value)
            return None
        except Exception as exc:
            self._handler_done(cmd, self._error_response(cmd, exc))
            return None
        return coro, trap

    async def _drive(self, cmd: RemotingCommand, coro: Any, trap: Any) -> None:
        """Drive a blocked handler to completion in this task, then take over waiting requests.

        Nothing may be awaited between ``_start`` and handing its trap back to trio, so queued
        responses are written synchronously (``_send_soon``).
        """
        self._send_soon()
        while True:
            try:
                result = await _resume(coro, trap)
            except Exception as exc:
                result = self._error_response(cmd, exc)
            self._handler_done(cmd, result)
            nxt = await self._take_backlog()
            if nxt is None:
                return
            cmd, coro, trap = nxt

    async def _take_backlog(self) -> tuple[RemotingCommand, Any, Any] | None:
        """A slot is free: serve the requests that arrived while every slot was busy, until one blocks
        (returned, to be driven by the caller's task at once) or none is left."""
        started = None
        backlog = self._backlog
        # not before the unstarted requests (older; their tasks start them): see _start_rest
        while backlog and started is None and not self._unstarted and self._in_flight < self._max_in_flight:
            if self._out_bytes > HIGH_WATER:
                await self._flush_quietly()
                continue
            cmd, received_at = backlog.popleft()
            started = self._start(cmd, received_at)
            if self._slot_lot:
                self._slot_lot.unpark()  # the reader may read again
        self._send_soon()
        if started is None:
            return None
        self._serve_backlog_soon()  # this task drives the blocked one: others start the rest
        return cmd, started[0], started[1]

    def _handler_done(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        self._in_flight -= 1
        if response is not None:
            self._queue_response(request, response)

    def _send_soon(self) -> None:
        """Have the queued frames written without awaiting: by the flusher, after the tasks
        runnable now (see the module docstring), or at once when the run has no flusher left."""
        if not self._out or self._writing or self._closed or self._write_queued_soon:
            return
        if flusher().add(self):
            self._write_queued_soon = True
        else:
            self.write_queued()

    def write_queued(self) -> None:
        """Write queued frames without awaiting; a helper task waits for the socket if it is full
        (also called by the flusher for frames handed to it)."""
        self._write_queued_soon = False
        if not self._out or self._writing or self._closed:
            return
        try:
            if self._write_now():
                return
        except RemotingSendError as e:
            self._log.debug("connection %s: %s", self.remote_address, e)
            return
        self._spawn_flusher()

    def _spawn_flusher(self) -> None:
        try:
            self._nursery.start_soon(self._flush_quietly)
        except RuntimeError:  # the owner's nursery is gone: nobody can write any more
            self._close_now("no task left to write")

    def _queue_response(self, request: RemotingCommand, response: RemotingCommand) -> None:
        if request.flag & FLAG_ONEWAY or self._closed:
            return
        # like upstream: the dispatcher stamps opaque, response flag and the request's serialize type
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        response.serialize_type = request.serialize_type
        try:
            parts = encode(response)
        except Exception as exc:  # our bug (e.g. a code that does not fit the binary header)
            self._log.exception(
                "cannot encode response to code %d from %s", request.code, self.remote_address
            )
            parts = encode(request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"))
        if len(parts) == 1:  # header only: the common case
            head = parts[0]
            self._out.append(head)
            self._out_bytes += len(head)
        else:
            self._queue(parts)

    def _error_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, HeaderError):
            self._log.warning(
                "bad header in request code %d from %s: %s", request.code, self.remote_address, exc
            )
            remark = str(exc)
        else:
            self._log.error(
                "handler for code %d from %s failed", request.code, self.remote_address, exc_info=exc
            )
            remark = f"{type(exc).__name__}: {exc}"
        return request.response(ResponseCode.SYSTEM_ERROR, remark)
