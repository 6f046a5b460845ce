"""RemotingServer and RemotingClient over real loopback sockets."""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.lowlevel

from remoting import flusher as flusher_module
from remoting.client import RemotingClient
from remoting.codec import FrameDecoder, encode
from remoting.codes import RequestCode, ResponseCode
from remoting.command import FLAG_ONEWAY, RemotingCommand, SerializeType, request
from remoting.connection import Connection, RequestContext
from remoting.errors import RemotingClosedError, RemotingConnectError, RemotingTimeoutError
from remoting.server import Listener, ProcessorTable, RemotingServer
from tests.cluster.harness import silent_peer


@asynccontextmanager
async def serving(*tables: ProcessorTable, **kw: Any) -> AsyncIterator[tuple[RemotingServer, list[Listener]]]:
    server = RemotingServer(**kw)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        listeners = [await server.add_listener("127.0.0.1", 0, t, name=f"l{i}") for i, t in enumerate(tables)]
        yield server, listeners
        nursery.cancel_scope.cancel()


async def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.005)


class RawPeer:
    """A hand-driven connection: write frames/bytes, read decoded frames."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: list[RemotingCommand] = []

    async def send(self, cmd: RemotingCommand) -> None:
        await self.stream.send_all(b"".join(bytes(p) for p in encode(cmd)))

    async def read(self, timeout: float = 5.0) -> RemotingCommand | None:
        """Next frame, or None at EOF."""
        with trio.fail_after(timeout):
            while not self.frames:
                data = await self.stream.receive_some(65536)
                if not data:
                    return None
                self.frames += self.decoder.feed(data)
        return self.frames.pop(0)


@asynccontextmanager
async def raw_peer(listener: Listener) -> AsyncIterator[RawPeer]:
    stream = await trio.open_tcp_stream("127.0.0.1", listener.port)
    async with stream:
        yield RawPeer(stream)


async def echo(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
    return req.response(ResponseCode.SUCCESS, remark=ctx.listener, **(req.ext_fields or {}))


async def test_concurrent_invokes_share_one_connection_and_complete_out_of_order() -> None:
    finished: list[int] = []

    async def sleepy(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        n = int((req.ext_fields or {})["n"])
        await trio.sleep((20 - n) * 0.005)  # later requests finish first
        finished.append(n)
        return req.response(ResponseCode.SUCCESS, n=n)

    table = ProcessorTable()
    table.register(10, sleepy)
    async with serving(table) as (server, [lst]), RemotingClient() as client:
        results: dict[int, str] = {}

        async def call(n: int) -> None:
            resp = await client.invoke(lst.address, request(10, {"n": n}), timeout=5)
            results[n] = (resp.ext_fields or {})["n"]

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(call, n)
        assert results == {n: str(n) for n in range(20)}
        assert finished != sorted(finished)  # answered out of order
        assert len(server.connections) == 1


async def test_two_listeners_have_their_own_tables() -> None:
    a, b = ProcessorTable(), ProcessorTable()
    a.register(1, echo)
    b.register(1, echo)
    b.register(2, echo)
    async with serving(a, b) as (_, [la, lb]), RemotingClient() as client:
        assert (await client.invoke(la.address, request(1), 2)).remark == "l0"
        assert (await client.invoke(lb.address, request(1), 2)).remark == "l1"
        assert (await client.invoke(lb.address, request(2), 2)).code == ResponseCode.SUCCESS
        resp = await client.invoke(la.address, request(2), 2)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_unknown_code_gets_upstream_remark(caplog: pytest.LogCaptureFixture) -> None:
    async with serving(ProcessorTable()) as (_, [lst]), RemotingClient() as client:
        resp = await client.invoke(lst.address, request(999), 2)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
        assert resp.remark == " request type 999 not supported"
        assert resp.is_response
        # a route query (a client given this server as its name server) is logged with that guess,
        # once for repeats
        for _ in range(3):
            resp = await client.invoke(lst.address, request(RequestCode.GET_ROUTEINFO_BY_TOPIC), 2)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("request code 999 (unknown)" in m and "is not handled here" in m for m in said), said
    route = [m for m in said if "request code 105 (GET_ROUTEINFO_BY_TOPIC)" in m]
    assert len(route) == 1, said
    assert "a client given this address as its name server's?" in route[0]


async def test_oneway_gets_no_reply() -> None:
    seen: list[int] = []

    async def record(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        seen.append(req.opaque)
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(15, record)
    async with serving(table) as (_, [lst]), raw_peer(lst) as peer:
        await peer.send(RemotingCommand(code=15, opaque=1, flag=FLAG_ONEWAY))
        await peer.send(RemotingCommand(code=15, opaque=2))
        first = await peer.read()
        assert first is not None
        assert first.opaque == 2
        assert seen == [1, 2]
    # and through the client API
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        await client.invoke_oneway(lst.address, request(15))
        await wait_until(lambda: len(seen) == 3)


async def test_handler_exception_is_system_error_and_connection_stays() -> None:
    async def boom(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        await trio.lowlevel.checkpoint()
        raise ValueError("boom")

    table = ProcessorTable()
    table.register(1, boom)
    table.register(2, echo)
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        resp = await client.invoke(lst.address, request(1), 2)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "ValueError: boom"
        conn = client.connection(lst.address)
        assert (await client.invoke(lst.address, request(2), 2)).code == ResponseCode.SUCCESS
        assert client.connection(lst.address) is conn


async def test_server_to_client_request_and_oneway_answered_by_client_processors() -> None:
    notified: list[str] = []

    async def running_info(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        resp = req.response(ResponseCode.SUCCESS)
        resp.body = b"client says hi to " + (req.ext_fields or {})["who"].encode()
        return resp

    async def ids_changed(ctx: RequestContext, req: RemotingCommand) -> None:
        notified.append((req.ext_fields or {})["consumerGroup"])

    processors = ProcessorTable()
    processors.register(307, running_info)
    processors.register(40, ids_changed)

    async def ask_back(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        await ctx.connection.oneway(request(40, {"consumerGroup": "CG"}))
        answer = await ctx.connection.request(request(307, {"who": "broker"}), timeout=2)
        resp = req.response(answer.code)
        resp.body = answer.body
        return resp

    table = ProcessorTable()
    table.register(34, ask_back)
    async with serving(table) as (_, [lst]), RemotingClient(processors=processors) as client:
        resp = await client.invoke(lst.address, request(34), 3)
        assert resp.code == ResponseCode.SUCCESS
        assert resp.body == b"client says hi to broker"
        await wait_until(lambda: notified == ["CG"])


async def test_server_request_to_client_without_processor_gets_not_supported() -> None:
    async def ask_back(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        answer = await ctx.connection.request(request(307), timeout=2)
        return req.response(ResponseCode.SUCCESS, got=answer.code)

    table = ProcessorTable()
    table.register(34, ask_back)
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        resp = await client.invoke(lst.address, request(34), 3)
        assert resp.ext_fields == {"got": "3"}


async def test_on_connect_and_on_close_fire() -> None:
    events: list[tuple[str, int]] = []

    async def closed(conn: Connection) -> None:
        await trio.lowlevel.checkpoint()
        events.append(("close", conn.id))

    table = ProcessorTable(on_connect=lambda c: events.append(("open", c.id)), on_close=closed)
    table.register(1, echo)
    async with serving(table) as (server, [lst]):
        async with RemotingClient() as client:
            await client.invoke(lst.address, request(1), 2)
            [conn] = server.connections
            assert conn.remote_address.startswith("127.0.0.1:")
            assert conn.local_port == lst.port
            assert events == [("open", conn.id)]
        await wait_until(lambda: len(events) == 2)
        assert events[1] == ("close", conn.id)
        assert conn.closed
        assert server.connections == []


async def test_client_reconnects_after_server_closes_connection() -> None:
    opened: list[int] = []
    table = ProcessorTable(on_connect=lambda c: opened.append(c.id))
    table.register(1, echo)
    async with serving(table) as (server, [lst]), RemotingClient() as client:
        await client.invoke(lst.address, request(1), 2)
        [conn] = server.connections
        await conn.aclose()
        await wait_until(lambda: client.connection(lst.address) is None)
        resp = await client.invoke(lst.address, request(1), 2)
        assert resp.code == ResponseCode.SUCCESS
        assert len(opened) == 2


async def test_pending_call_fails_when_connection_closes() -> None:
    async def close_me(ctx: RequestContext, req: RemotingCommand) -> None:
        await ctx.connection.aclose()

    table = ProcessorTable()
    table.register(1, close_me)
    table.register(2, echo)
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        with pytest.raises(RemotingClosedError, match=lst.address):
            await client.invoke(lst.address, request(1), 5)
        assert (await client.invoke(lst.address, request(2), 2)).code == ResponseCode.SUCCESS


async def test_timeout_names_address_and_connection_keeps_working() -> None:
    async def never(ctx: RequestContext, req: RemotingCommand) -> None:
        await trio.sleep_forever()

    table = ProcessorTable()
    table.register(1, never)
    table.register(2, echo)
    async with serving(table, shutdown_grace=0.1) as (_, [lst]), RemotingClient() as client:
        with trio.fail_after(3):
            with pytest.raises(RemotingTimeoutError, match=lst.address):
                await client.invoke(lst.address, request(1), 0.2)
        assert (await client.invoke(lst.address, request(2), 2)).code == ResponseCode.SUCCESS


async def test_connect_error_names_address() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    for lst in listeners:
        await lst.aclose()
    async with RemotingClient() as client:
        # the address and the reason (trio itself says only "all attempts to connect ... failed")
        with pytest.raises(
            RemotingConnectError, match=f"^connect to 127.0.0.1:{port} failed: Connection refused$"
        ):
            await client.invoke(f"127.0.0.1:{port}", request(1), 2)
        with pytest.raises(RemotingConnectError, match="bad address"):
            await client.invoke("nonsense", request(1), 2)


async def test_a_refused_connection_is_reported_to_the_hook_and_still_raises() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    for lst in listeners:
        await lst.aclose()
    seen: list[str] = []

    def broken_hook(addr: str) -> None:
        seen.append(addr)
        raise RuntimeError("a bug in the hook")

    table = ProcessorTable()
    table.register(1, echo)
    async with serving(table) as (_, [lst]), RemotingClient(on_connect_failure=broken_hook) as client:
        assert (await client.invoke(lst.address, request(1), 2)).code == ResponseCode.SUCCESS
        assert seen == []  # a connection made is not reported
        with pytest.raises(RemotingConnectError, match="Connection refused"):  # the hook's error is logged
            await client.invoke(f"127.0.0.1:{port}", request(1), 2)
        assert seen == [f"127.0.0.1:{port}"]


async def test_in_flight_bound_per_connection() -> None:
    running = 0
    peak = 0
    release = trio.Event()

    async def blocked(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(1, blocked)
    async with serving(table, max_in_flight_per_connection=2) as (_, [lst]), RemotingClient() as client:
        done = 0

        async def call() -> None:
            nonlocal done
            await client.invoke(lst.address, request(1), 5)
            done += 1

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(call)
            await wait_until(lambda: running == 2)
            await trio.sleep(0.05)  # give the server a chance to (wrongly) start more
            assert running == 2
            release.set()
        assert done == 6
        assert peak == 2


async def test_late_response_via_ctx_respond() -> None:
    parked: list[tuple[RequestContext, RemotingCommand]] = []

    async def long_poll(ctx: RequestContext, req: RemotingCommand) -> None:
        parked.append((ctx, req))

    async def wake(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        pctx, preq = parked.pop()
        await pctx.respond(preq.response(ResponseCode.SUCCESS, remark="woken"))
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(11, long_poll)
    table.register(12, wake)
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        got: list[RemotingCommand] = []

        async def pull() -> None:
            got.append(await client.invoke(lst.address, request(11), 5))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pull)
            await wait_until(lambda: parked)
            await client.invoke(lst.address, request(12), 2)
        assert got[0].remark == "woken"


async def test_binary_request_gets_binary_response() -> None:
    table = ProcessorTable()
    table.register(1, echo)
    async with serving(table) as (_, [lst]), raw_peer(lst) as peer:
        await peer.send(
            RemotingCommand(code=1, opaque=77, ext_fields={"k": "v"}, serialize_type=SerializeType.ROCKETMQ)
        )
        head = await peer.stream.receive_some(8)
        assert head[4] == SerializeType.ROCKETMQ  # serialize type byte of the response
        [resp] = FrameDecoder().feed(head + await peer.stream.receive_some(65536))
        assert resp.opaque == 77
        assert resp.ext_fields == {"k": "v"}


async def test_large_body_parts_arrive_intact() -> None:
    blob = bytes(range(256)) * 16384  # 4 MiB

    async def big(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        resp = req.response(ResponseCode.SUCCESS)
        view = memoryview(blob)
        resp.body = [view[: 1 << 20], view[1 << 20 : 3 << 20], view[3 << 20 :]]
        return resp

    table = ProcessorTable()
    table.register(11, big)
    table.register(10, echo)
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(client.invoke, lst.address, request(11), 10)
        resp = await client.invoke(lst.address, request(11), 10)
        assert resp.body == blob
        # a request with a large body the other way
        cmd = request(10, {"x": "1"}, body=blob)
        assert (await client.invoke(lst.address, cmd, 10)).code == ResponseCode.SUCCESS


async def test_remove_listener_closes_its_connections_only() -> None:
    a, b = ProcessorTable(), ProcessorTable()
    a.register(1, echo)
    b.register(1, echo)
    async with serving(a, b) as (server, [la, lb]), RemotingClient() as client:
        await client.invoke(la.address, request(1), 2)
        await client.invoke(lb.address, request(1), 2)
        await server.remove_listener(la)
        await wait_until(lambda: client.connection(la.address) is None)
        with pytest.raises(RemotingConnectError):
            await client.invoke(la.address, request(1), 2)
        assert (await client.invoke(lb.address, request(1), 2)).remark == "l1"
        # a listener added while running serves at once
        lc = await server.add_listener("127.0.0.1", 0, a, name="late")
        assert (await client.invoke(lc.address, request(1), 2)).remark == "late"


async def test_graceful_shutdown_lets_in_flight_handler_finish() -> None:
    started = trio.Event()

    async def slow(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        started.set()
        await trio.sleep(0.1)
        return req.response(ResponseCode.SUCCESS, remark="finished")

    table = ProcessorTable()
    table.register(1, slow)
    server = RemotingServer(shutdown_grace=2.0)
    lst = await server.add_listener("127.0.0.1", 0, table)
    async with trio.open_nursery() as outer:
        stop_scope = trio.CancelScope()

        async def run_server() -> None:
            with stop_scope:
                await server.run()

        outer.start_soon(run_server)
        await wait_until(lambda: server._nursery is not None)
        async with raw_peer(lst) as peer:
            await peer.send(RemotingCommand(code=1, opaque=5))
            await started.wait()
            stop_scope.cancel()
            resp = await peer.read()
            assert resp is not None
            assert resp.remark == "finished"
            assert await peer.read() is None  # then the server closes the connection


async def test_go_away_for_new_requests_during_shutdown() -> None:
    release = trio.Event()

    async def hold(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        await release.wait()
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(1, hold)
    server = RemotingServer(shutdown_grace=5.0)
    lst = await server.add_listener("127.0.0.1", 0, table)
    async with trio.open_nursery() as outer:
        stop_scope = trio.CancelScope()

        async def run_server() -> None:
            with stop_scope:
                await server.run()

        outer.start_soon(run_server)
        await wait_until(lambda: server._nursery is not None)
        async with raw_peer(lst) as peer:
            await peer.send(RemotingCommand(code=1, opaque=1))
            await wait_until(lambda: any(c.in_flight for c in server.connections))
            stop_scope.cancel()
            await wait_until(lambda: server._shutting_down)
            await peer.send(RemotingCommand(code=1, opaque=2, version=479))
            resp = await peer.read()
            assert resp is not None
            assert (resp.opaque, resp.code) == (2, ResponseCode.GO_AWAY)
            release.set()
            resp = await peer.read()
            assert resp is not None
            assert (resp.opaque, resp.code) == (1, ResponseCode.SUCCESS)


async def test_response_with_unknown_opaque_is_dropped() -> None:
    table = ProcessorTable()
    table.register(1, echo)
    async with serving(table) as (server, [lst]), RemotingClient() as client:
        await client.invoke(lst.address, request(1), 2)
        [conn] = server.connections
        stray = RemotingCommand(code=0, opaque=123456)
        await conn.respond(stray)
        assert (await client.invoke(lst.address, request(1), 2)).code == ResponseCode.SUCCESS


async def test_frame_with_length_prefix_split_across_writes() -> None:
    table = ProcessorTable()
    table.register(1, echo)
    async with serving(table) as (_, [lst]), raw_peer(lst) as peer:
        data = b"".join(bytes(p) for p in encode(RemotingCommand(code=1, opaque=9, body=b"abc")))
        for i in range(len(data)):
            await peer.stream.send_all(data[i : i + 1])
        resp = await peer.read()
        assert resp is not None
        assert resp.opaque == 9
        assert struct.unpack(">i", data[:4])[0] == len(data) - 4


async def test_blocked_handler_does_not_hold_up_later_requests_of_the_same_batch() -> None:
    release = trio.Event()

    async def hold(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        await release.wait()
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(1, hold)
    table.register(2, echo)
    async with serving(table) as (_, [lst]), raw_peer(lst) as peer:
        frames = [
            RemotingCommand(code=1, opaque=1),
            RemotingCommand(code=2, opaque=2),
            RemotingCommand(code=2, opaque=3),
        ]
        await peer.stream.send_all(b"".join(b"".join(bytes(p) for p in encode(f)) for f in frames))
        first, second = await peer.read(), await peer.read()
        assert first is not None
        assert second is not None
        assert {first.opaque, second.opaque} == {2, 3}
        release.set()
        last = await peer.read()
        assert last is not None
        assert last.opaque == 1


async def test_requests_read_behind_blocked_ones_all_start_while_slots_are_free() -> None:
    """A read that arrives while the rest of the previous read waits for its tasks goes to the
    backlog; every request of it must still start (in arrival order) while slots are free, not
    one per completion -- with handlers that all block (sends waiting for replica acks or for
    their flush), that backlog would otherwise never move. Whether the second read lands before or
    after the first read's tasks run is trio's coin flip per batch, so each round is a fresh
    connection (the code before this test left 3 of the 8 unstarted in its first round)."""
    started: list[int] = []
    release = trio.Event()
    peer: RawPeer | None = None

    def frames(opaques: range) -> bytes:
        return b"".join(
            b"".join(bytes(p) for p in encode(RemotingCommand(code=1, opaque=o))) for o in opaques
        )

    async def hold(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        started.append(req.opaque)
        if req.opaque == 1:
            assert peer is not None
            # the second read, in the socket before this task yields (a plain write: 4 small frames)
            os.write(peer.stream.socket.fileno(), frames(range(5, 9)))
        await release.wait()
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(1, hold)
    async with serving(table) as (_, [lst]):
        for _ in range(24):
            started.clear()
            async with raw_peer(lst) as peer:
                await peer.stream.send_all(frames(range(1, 5)))
                with trio.fail_after(5):
                    while len(started) < 8:
                        await trio.sleep(0.002)
                assert started == list(range(1, 9))
                release.set()
                release = trio.Event()
                answers = [await peer.read() for _ in range(8)]  # all eight answered
                assert sorted(a.opaque for a in answers if a is not None) == list(range(1, 9))


async def test_full_connection_still_reads_responses_to_its_own_requests() -> None:
    """Handlers that call back to the client must not deadlock when every slot is busy."""

    async def ask_back(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        answer = await ctx.connection.request(request(307), timeout=3)
        return req.response(ResponseCode.SUCCESS, got=answer.code)

    async def client_side(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        await trio.sleep(0.01)
        return req.response(ResponseCode.SUCCESS)

    processors = ProcessorTable()
    processors.register(307, client_side)
    table = ProcessorTable()
    table.register(34, ask_back)
    async with (
        serving(table, max_in_flight_per_connection=1) as (_, [lst]),
        RemotingClient(processors=processors) as client,
    ):
        codes: list[str] = []

        async def call() -> None:
            resp = await client.invoke(lst.address, request(34), 5)
            codes.append((resp.ext_fields or {})["got"])

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(call)
        assert codes == ["0"] * 4


async def test_peer_that_does_not_read_stops_the_server_reading_its_requests() -> None:
    handled = 0
    blob = b"z" * (2 << 20)

    async def big(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        nonlocal handled
        handled += 1
        resp = req.response(ResponseCode.SUCCESS)
        resp.body = blob
        return resp

    table = ProcessorTable()
    table.register(1, big)
    total = 40
    async with serving(table) as (_, [lst]), raw_peer(lst) as peer:
        await peer.stream.send_all(
            b"".join(
                b"".join(bytes(p) for p in encode(RemotingCommand(code=1, opaque=i))) for i in range(total)
            )
        )
        # wait until the server stops making progress (its writes are blocked)
        with trio.fail_after(10):
            last = -1
            while handled != last:
                last = handled
                await trio.sleep(0.1)
        assert handled < total  # it stopped reading requests while responses could not go out
        got = []
        while len(got) < total:
            resp = await peer.read(timeout=10)
            assert resp is not None
            assert resp.body == blob
            got.append(resp.opaque)
        assert got == list(range(total))
        assert handled == total


async def test_server_and_client_in_two_threads_with_their_own_trio_runs() -> None:
    """Each thread runs its own trio loop; connections in both must not share receive state."""
    import queue
    import random

    ready: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def body_echo(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        resp = req.response(ResponseCode.SUCCESS)
        resp.body = req.body
        return resp

    async def server_main() -> None:
        table = ProcessorTable()
        table.register(1, body_echo)
        with trio.CancelScope() as scope:
            async with serving(table) as (_, [lst]):
                ready.put((lst.address, trio.lowlevel.current_trio_token(), scope))
                await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, trio.run, server_main)
        addr, token, scope = await trio.to_thread.run_sync(lambda: ready.get(timeout=10))
        rnd = random.Random(7)
        try:
            with trio.fail_after(20):
                async with RemotingClient() as client:

                    async def call(i: int) -> None:
                        body = rnd.randbytes(rnd.choice([10, 1000, 70_000, 300_000]))
                        resp = await client.invoke(addr, request(1, {"i": i}, body=body), 10)
                        assert resp.body == body

                    async with trio.open_nursery() as calls:
                        for i in range(60):
                            calls.start_soon(call, i)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(
                    lambda: trio.from_thread.run_sync(scope.cancel, trio_token=token)
                )


async def test_large_requests_and_responses_both_ways_do_not_deadlock() -> None:
    """Both sides have more than HIGH_WATER queued: each must keep reading the other's responses."""

    async def body_echo(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        resp = req.response(ResponseCode.SUCCESS)
        resp.body = req.body
        return resp

    table = ProcessorTable()
    table.register(1, body_echo)
    body = b"q" * 400_000
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(40):  # 16 MB each way
                    nursery.start_soon(client.invoke, lst.address, request(1, {"i": i}, body=body), 15)


async def test_close_connection_then_next_call_reconnects_and_opaques_keep_counting() -> None:
    opened: list[int] = []
    seen_opaques: list[int] = []

    async def record(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        seen_opaques.append(req.opaque)
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable(on_connect=lambda c: opened.append(c.id))
    table.register(1, record)
    async with serving(table) as (_, [lst]), RemotingClient() as client:
        await client.invoke(lst.address, request(1), 2)
        first = client.connection(lst.address)
        await client.close_connection(lst.address)
        assert client.connection(lst.address) is None
        await client.invoke(lst.address, request(1), 2)
        assert client.connection(lst.address) is not first
        assert len(opened) == 2
        assert seen_opaques == [0, 1]  # one counter per client, across connections


@pytest.mark.parametrize("delay_limit", [0.0, 10.0])
async def test_many_connections_one_request_each_all_answered_every_round(
    delay_limit: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Responses of handlers are written after the scheduler batch that produced them (one flusher
    per run), or at once when the first waiting one waited FLUSH_DELAY_LIMIT: either way, with
    many connections each waiting for one response, none is left unwritten."""
    monkeypatch.setattr(flusher_module, "FLUSH_DELAY_LIMIT", delay_limit)

    async def echo_remark(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, req.remark)

    table = ProcessorTable()
    table.register(7, echo_remark)
    async with serving(table) as (_, (lst,)):
        streams = [await trio.open_tcp_stream("127.0.0.1", lst.port) for _ in range(16)]
        peers = [RawPeer(s) for s in streams]
        for rnd in range(50):
            async with trio.open_nursery() as nursery:
                for i, peer in enumerate(peers):
                    nursery.start_soon(
                        peer.send, RemotingCommand(code=7, opaque=rnd * 100 + i, remark=f"{rnd}/{i}")
                    )
            for i, peer in enumerate(peers):
                got = await peer.read()
                assert got is not None
                assert (got.opaque, got.remark) == (rnd * 100 + i, f"{rnd}/{i}")
        for s in streams:
            await s.aclose()


async def test_idle_connections_are_closed_and_busy_ones_kept(caplog: pytest.LogCaptureFixture) -> None:
    # upstream serverChannelMaxIdleTimeSeconds: a peer that vanished without closing must not hold
    # its connection forever; one that talks, or waits for a held request, is not idle
    caplog.set_level(logging.INFO, logger="remoting")
    released = trio.Event()

    async def held(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
        await released.wait()  # a long poll
        return req.response(ResponseCode.SUCCESS)

    table = ProcessorTable()
    table.register(10, echo)
    table.register(11, held)
    async with (
        serving(table, idle_timeout=0.4) as (server, (listener,)),
        raw_peer(listener) as silent,
        raw_peer(listener) as talker,
        raw_peer(listener) as waiter,
    ):
        await waiter.send(request(11))
        t0 = trio.current_time()
        while trio.current_time() - t0 < 1.2:  # three times the limit
            await talker.send(request(10))
            assert (await talker.read()) is not None
            await trio.sleep(0.1)
        assert await silent.read(timeout=1.0) is None  # closed by the server: EOF
        assert len(server.connections) == 2
        released.set()
        response = await waiter.read()
        assert response is not None
        assert response.code == ResponseCode.SUCCESS
        await talker.send(request(10))
        assert (await talker.read()) is not None
    assert "idle for" in caplog.text


@pytest.mark.parametrize("close_on_timeout", [True, False])
async def test_a_call_that_times_out_closes_the_connection_when_asked(close_on_timeout: bool) -> None:
    """Upstream's ``clientCloseSocketIfTimeout``: the next call connects anew instead of queueing
    behind a silent peer; the timeout hook hears of it either way."""
    timed_out: list[str] = []
    async with (
        silent_peer() as (addr, accepted),
        RemotingClient(close_on_timeout=close_on_timeout, on_call_timeout=timed_out.append) as client,
    ):
        first = client.connection(addr)
        assert first is None
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 0.3)
        assert timed_out == [addr]
        assert (client.connection(addr) is None) is close_on_timeout
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 0.3)
        await wait_until(lambda: len(accepted) == (2 if close_on_timeout else 1))
        assert timed_out == [addr, addr]


@pytest.mark.parametrize("unacked_timeout", [2.5, None])
async def test_the_unacked_timeout_is_the_connections_tcp_user_timeout_and_keepalive(
    unacked_timeout: float | None,
) -> None:
    """What lets the kernel end a connection whose peer the network lost, when nothing waits for
    a response on it (oneway heartbeats, Raft messages) or a call waits long (a long poll):
    sent bytes unacknowledged for the timeout, or keepalive probes from a third of it idle on;
    left at the system's defaults without it."""
    if not hasattr(socket, "TCP_USER_TIMEOUT"):
        pytest.skip("no TCP_USER_TIMEOUT on this system")
    async with silent_peer() as (addr, _), RemotingClient(unacked_timeout=unacked_timeout) as client:
        conn = await client.get_connection(addr)
        got = {
            "user_timeout": conn.socket_option(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
            "keepalive": conn.socket_option(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        }
        if unacked_timeout is not None:
            got["idle"] = conn.socket_option(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            got["interval"] = conn.socket_option(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
            got["probes"] = conn.socket_option(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
    if unacked_timeout is None:
        assert got == {"user_timeout": 0, "keepalive": 0}
    else:
        assert got == {"user_timeout": 2500, "keepalive": 1, "idle": 1, "interval": 1, "probes": 3}
