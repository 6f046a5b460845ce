"""A connection's reader handles at most one full read (``RECEIVE_SIZE`` bytes of requests) before
it lets other connections run: a peer pipelining a long stream of requests does not hold up a
request on another connection until its stream is done."""

from __future__ import annotations

import socket
import threading
import time

import trio

from remoting.codec import FrameDecoder, encode
from remoting.command import RemotingCommand
from remoting.connection import RequestContext
from remoting.server import ProcessorTable
from tests.integration.test_remoting_server_client import serving

STREAM = 20_000


def _frame(opaque: int) -> bytes:
    return b"".join(bytes(p) for p in encode(RemotingCommand(code=1, opaque=opaque)))


async def test_pipelining_peer_does_not_starve_another_connection() -> None:
    table = ProcessorTable()

    async def echo(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(0)

    table.register(1, echo)
    answered = [0]
    stream = b"".join(_frame(i + 1) for i in range(STREAM))

    def pipelining_peer(addr: tuple[str, int]) -> None:
        with socket.create_connection(addr) as s:
            writer = threading.Thread(target=s.sendall, args=(stream,))
            writer.start()
            decoder = FrameDecoder()
            while answered[0] < STREAM:
                data = s.recv(65536)
                if not data:
                    break
                answered[0] += len(decoder.feed(data))
            writer.join()

    def single_request_peer(addr: tuple[str, int]) -> int:
        deadline = time.monotonic() + 10
        while answered[0] < 100:  # the stream is being served
            assert time.monotonic() < deadline, "the pipelining peer got no answers"
            time.sleep(0.0005)
        with socket.create_connection(addr) as s:
            s.sendall(_frame(7))
            decoder = FrameDecoder()
            while not decoder.feed(s.recv(65536)):
                pass
        return answered[0]

    async with serving(table) as (_server, listeners):
        addr = ("127.0.0.1", listeners[0].port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, pipelining_peer, addr)
            answered_before = await trio.to_thread.run_sync(single_request_peer, addr)
    assert answered[0] == STREAM
    assert answered_before < STREAM // 2, f"answered only after {answered_before} of the stream's requests"


async def test_pipelined_requests_start_in_arrival_order_when_one_blocks() -> None:
    """Requests of one connection start (run their handler up to its first wait) in the order they
    arrived, also the rest of a read batch behind a handler that blocks: a broker appends pipelined
    sends (oneway orderly, async) to a queue in the order the client sent them. (The rest of a
    batch used to get a task each, and trio runs a batch of new tasks in either order.)"""
    table = ProcessorTable()
    started: list[int] = []

    async def handler(ctx: RequestContext, cmd: RemotingCommand) -> None:
        started.append(cmd.opaque)
        if cmd.opaque % 10 == 0:
            await trio.sleep(0.01)  # this one blocks; those behind it must not overtake each other
        return None

    table.register(1, handler)
    rounds, per_round = 30, 10
    stream = b"".join(
        b"".join(bytes(p) for p in encode(RemotingCommand(code=1, opaque=r * per_round + i, flag=2)))
        for r in range(rounds)
        for i in range(per_round)
    )
    async with serving(table) as (_server, listeners):
        client = await trio.open_tcp_stream("127.0.0.1", listeners[0].port)
        for r in range(rounds):  # one write per round: each round arrives as one read batch
            await client.send_all(stream[len(stream) * r // rounds : len(stream) * (r + 1) // rounds])
            await trio.sleep(0.002)
        with trio.fail_after(10):
            while len(started) < rounds * per_round:
                await trio.sleep(0.01)
        await client.aclose()
    assert started == sorted(started)
