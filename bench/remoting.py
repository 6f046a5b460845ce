"""Remoting server request/response throughput and latency against a minimal baseline server.

Case: :class:`remoting.server.RemotingServer` with a handler that answers a SEND-like request
(12 header fields, 1 KiB body) with a SEND-like response (5 header fields, no body).
Baseline, measured in the same run: a minimal trio server that decodes the same frames with
the same :class:`~remoting.codec.FrameDecoder` and answers each with a fixed pre-encoded
response (one ``send_all`` per received chunk).

Each server runs in its own subprocess; the load generator runs in this process (2 cores:
one each). Throughput: N connections, each with one request in flight (closed loop), plus a
pipelined case (1 connection, 32 in flight, informational); baseline and case alternate for
a few rounds. Reported per case: the best round's throughput (interference from other
processes only ever lowers it) and the median server efficiency, requests per CPU-second of
the server process, which a shared machine disturbs much less. Latency: open loop over 8
connections at half the best measured throughput, p50/p99 of the time from writing a request
to reading its response (median of 3 alternating rounds).

Child mode (used by the benchmarks themselves): ``python -m bench.remoting serve framework|baseline``;
``serve baseline-echo [NAMESRV]`` is the same baseline with each response's opaque set to its
request's, so that real clients can use it (``bench/broker.py`` loads it with the C++ and Python
clients), registered with ``NAMESRV`` as broker ``broker-baseline`` serving ``BaselineTopic``.
"""

from __future__ import annotations

import math
import select
import socket
import statistics
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from bench.common import percentile, process_cpu_seconds, row, server_process
from remoting.client import RemotingClient
from remoting.codec import FrameDecoder, encode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.connection import RequestContext
from remoting.server import ProcessorTable, RemotingServer

CONNECTIONS = (1, 8, 64)
PIPELINE_DEPTH = 32
ROUNDS = 5
ROUND_SECONDS = 1.0
WARMUP_SECONDS = 0.3
LATENCY_SECONDS = 1.5
LATENCY_ROUNDS = 3
LATENCY_CONNECTIONS = 8
TARGET = 0.8

REQUEST_EXT = {
    "producerGroup": "BenchProducerGroup",
    "topic": "BenchTopic",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "0",
    "sysFlag": "0",
    "bornTimestamp": "1700000000000",
    "flag": "0",
    "properties": "UNIQ_KEY\x01C0A8010100002A9F0000000000000000\x02WAIT\x01true\x02",
    "reconsumeTimes": "0",
    "unitMode": "false",
    "batch": "false",
}
BODY = b"x" * 1024
RESPONSE_EXT = {
    "msgId": "7F00000100002A9F0000000000000000",
    "queueId": "0",
    "queueOffset": "123456",
    "MSG_REGION": "DefaultRegion",
    "TRACE_ON": "true",
}


def _request(opaque: int) -> bytes:
    cmd = RemotingCommand(code=10, opaque=opaque, ext_fields=REQUEST_EXT, body=BODY)
    return b"".join(bytes(p) for p in encode(cmd))


# ---------------------------------------------------------------------------- servers (child)


async def _send_handler(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
    return RemotingCommand(code=0, flag=FLAG_RESPONSE, ext_fields=RESPONSE_EXT)


async def _serve_framework(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    table = ProcessorTable()
    table.register(10, _send_handler)
    server = RemotingServer(name="bench")
    listener = await server.add_listener("127.0.0.1", 0, table)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        task_status.started(listener.address)


FIXED_RESPONSE = b"".join(
    bytes(p) for p in encode(RemotingCommand(code=0, flag=FLAG_RESPONSE, ext_fields=RESPONSE_EXT))
)


async def _answer_frames(stream: trio.SocketStream, answer: Callable[[list[RemotingCommand]], bytes]) -> None:
    """Decode the frames of each received chunk and send ``answer(frames)`` back in one write."""
    decoder = FrameDecoder()
    try:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            out = answer(decoder.feed(data))
            if out:
                await stream.send_all(out)
    except trio.BrokenResourceError:
        return


async def _baseline_connection(stream: trio.SocketStream) -> None:
    await _answer_frames(stream, lambda frames: FIXED_RESPONSE * len(frames))


# The same fixed response, its opaque set to the request's: what a real client (which matches
# responses to requests by opaque) needs of a server, and nothing more. The JSON header is the
# template's with the digits of the opaque in place of its "0".
_HEADER_HEAD, _HEADER_TAIL = FIXED_RESPONSE[8:].split(b'"opaque":0', 1)
_HEADER_HEAD += b'"opaque":'


def _echo_response(opaque: int) -> bytes:
    header = b"%s%d%s" % (_HEADER_HEAD, opaque, _HEADER_TAIL)
    return struct.pack(">II", 4 + len(header), len(header)) + header


async def _echo_connection(stream: trio.SocketStream) -> None:
    await _answer_frames(
        stream, lambda frames: b"".join(_echo_response(c.opaque) for c in frames if not c.flag & FLAG_ONEWAY)
    )


#: what the echo baseline registers with a name server, so that clients that route through one
#: (the C++ client) send to it
ECHO_CLUSTER = "BaselineCluster"
ECHO_BROKER = "broker-baseline"
ECHO_TOPIC = "BaselineTopic"


async def _register_echo(client: RemotingClient, namesrv: str, addr: str) -> None:
    from broker.outer_api import BrokerIdentity, BrokerOuterAPI
    from remoting.protocol.common import TopicConfig, TopicConfigAndMappingSerializeWrapper

    me = BrokerIdentity(ECHO_CLUSTER, ECHO_BROKER, 0, addr, addr)
    # with a broker's own-name topic as brokers have: a first registration of a single topic is
    # refused (upstream's rule)
    topics = TopicConfigAndMappingSerializeWrapper(
        topicConfigTable={
            name: TopicConfig(topicName=name, readQueueNums=4, writeQueueNums=4)
            for name in (ECHO_TOPIC, ECHO_BROKER)
        }
    )
    outer = BrokerOuterAPI(client, timeout_ms=5000)
    if await outer.register_one(namesrv, outer.register_request(me, topics)) is None:
        raise RuntimeError(f"echo baseline: registration with {namesrv} failed")


async def _serve_baseline(
    echo: bool = False,
    namesrv: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    addr = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    async with trio.open_nursery() as nursery, RemotingClient(name="bench.baseline") as client:
        nursery.start_soon(
            trio.serve_listeners, _echo_connection if echo else _baseline_connection, listeners
        )
        if namesrv:
            # the name server forgets a broker whose registering connection closes: the client
            # (and its connection) lives as long as the server
            await _register_echo(client, namesrv, addr)
        task_status.started(addr)
        await trio.sleep_forever()


async def _child(kind: str, namesrv: str | None = None) -> None:
    async with trio.open_nursery() as nursery:
        if kind == "framework":
            addr = await nursery.start(_serve_framework)
        else:
            addr = await nursery.start(_serve_baseline, kind == "baseline-echo", namesrv)
        print(addr, flush=True)
        await trio.to_thread.run_sync(sys.stdin.buffer.read)  # returns at EOF: parent is done
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------------- load generator
# A plain epoll loop (no trio) so that the load generator costs far less per request than the
# servers under test and the figures measure the servers.


def _connect(addr: str, count: int) -> list[socket.socket]:
    host, port = addr.rsplit(":", 1)
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks.append(s)
    return socks


def _send(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            select.select([], [sock], [], 1.0)


def _frames(buf: bytearray) -> int:
    """Drop complete frames from the front of ``buf``; return how many."""
    n = 0
    pos = 0
    end = len(buf)
    while end - pos >= 4:
        length = int.from_bytes(buf[pos : pos + 4], "big")
        if end - pos - 4 < length:
            break
        pos += 4 + length
        n += 1
    if pos:
        del buf[:pos]
    return n


def _closed_loop(addr: str, connections: int, depth: int, seconds: float, pid: int) -> tuple[float, float]:
    """(requests per second, requests per server CPU-second) with ``connections`` x ``depth``
    requests always in flight; ``pid`` is the server's process."""
    request = _request(1)
    socks = _connect(addr, connections)
    by_fd = {s.fileno(): (s, bytearray()) for s in socks}
    ep = select.epoll()
    try:
        for s in socks:
            ep.register(s.fileno(), select.EPOLLIN)
            _send(s, request * depth)
        t0 = time.perf_counter()
        start = t0 + WARMUP_SECONDS
        stop = start + seconds
        done = 0
        cpu_start = -1.0
        while True:
            now = time.perf_counter()
            if now >= stop:
                break
            if cpu_start < 0 and now >= start:
                cpu_start = process_cpu_seconds(pid)
            for fd, _ in ep.poll(0.1):
                sock, buf = by_fd[fd]
                data = sock.recv(65536)
                if not data:
                    raise RuntimeError(f"{addr} closed the connection")
                buf += data
                n = _frames(buf)
                if n:
                    if now >= start:
                        done += n
                    _send(sock, request * n if n > 1 else request)
        elapsed = time.perf_counter() - start
        cpu = process_cpu_seconds(pid) - cpu_start
        return done / elapsed, done / cpu if cpu > 0 else math.nan
    finally:
        ep.close()
        for s in socks:
            s.close()


def _open_loop(addr: str, rate: float, seconds: float) -> list[float]:
    """Latencies (s) of requests released at ``rate`` per second (in 1 ms ticks) over 8 connections."""
    socks = _connect(addr, LATENCY_CONNECTIONS)
    state = {s.fileno(): (s, FrameDecoder(), {}, deque()) for s in socks}
    ep = select.epoll()
    latencies: list[float] = []
    per_conn = rate / LATENCY_CONNECTIONS
    sent_count = [0] * LATENCY_CONNECTIONS
    try:
        for s in socks:
            ep.register(s.fileno(), select.EPOLLIN)
        start = time.perf_counter() + 0.05
        stop = start + seconds
        while True:
            now = time.perf_counter()
            if now >= stop + 0.5:
                break
            if start <= now < stop:
                due = int((now - start) * per_conn) + 1
                for i, s in enumerate(socks):
                    if sent_count[i] < due:
                        _, _, sent, fifo = state[s.fileno()]
                        batch = []
                        while sent_count[i] < due:
                            opaque = (i + 1) * 10_000_000 + sent_count[i]
                            sent[opaque] = now
                            fifo.append(opaque)
                            batch.append(_request(opaque))
                            sent_count[i] += 1
                        _send(s, b"".join(batch))
            for fd, _ in ep.poll(0.0005):
                sock, decoder, sent, fifo = state[fd]
                data = sock.recv(65536)
                if not data:
                    raise RuntimeError(f"{addr} closed the connection")
                t = time.perf_counter()
                for cmd in decoder.feed(data):
                    # the baseline answers with a fixed opaque: match those in order
                    t0 = sent.pop(cmd.opaque, None)
                    if t0 is None:
                        t0 = sent.pop(fifo.popleft())
                    else:
                        fifo.remove(cmd.opaque)
                    latencies.append(t - t0)
        return latencies
    finally:
        ep.close()
        for s in socks:
            s.close()


def _measure(framework: tuple[str, int], baseline: tuple[str, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cases = [(f"{c} connection{'s' if c > 1 else ''}", c, 1, TARGET) for c in CONNECTIONS]
    cases.append((f"1 connection, {PIPELINE_DEPTH} pipelined", 1, PIPELINE_DEPTH, None))
    peak = 0.0
    for label, conns, depth, target in cases:
        ours: list[tuple[float, float]] = []
        base: list[tuple[float, float]] = []
        for _ in range(ROUNDS):
            base.append(_closed_loop(baseline[0], conns, depth, ROUND_SECONDS, baseline[1]))
            ours.append(_closed_loop(framework[0], conns, depth, ROUND_SECONDS, framework[1]))
        best, best_base = max(r for r, _ in ours), max(r for r, _ in base)
        eff = statistics.median(e for _, e in ours)
        eff_base = statistics.median(e for _, e in base)
        if depth == 1:
            peak = max(peak, best)
        print(
            f"  {label}: req/s server {[round(r) for r, _ in ours]} baseline {[round(r) for r, _ in base]};"
            f" req/CPU-s server {[round(e) for _, e in ours]} baseline {[round(e) for _, e in base]}",
            file=sys.stderr,
        )
        rows.append(row(f"throughput, {label}, 1 KiB body (best round)", best, "req/s", best_base, target))
        rows.append(row(f"server efficiency, {label} (median round)", eff, "req/CPU-s", eff_base, target))
    rate = peak / 2
    lat_ours: list[list[float]] = []
    lat_base: list[list[float]] = []
    for _ in range(LATENCY_ROUNDS):
        lat_base.append(_open_loop(baseline[0], rate, LATENCY_SECONDS))
        lat_ours.append(_open_loop(framework[0], rate, LATENCY_SECONDS))
    for p in (50, 99):
        ours_p = [percentile(x, p) * 1e6 for x in lat_ours]
        base_p = [percentile(x, p) * 1e6 for x in lat_base]
        print(
            f"  latency p{p} µs: server {[round(x) for x in ours_p]} baseline {[round(x) for x in base_p]}",
            file=sys.stderr,
        )
        rows.append(
            row(
                f"latency p{p} at {rate:,.0f} req/s (half peak), {LATENCY_CONNECTIONS} connections (median round)",
                statistics.median(ours_p),
                "µs",
                statistics.median(base_p),
            )
        )
    return rows


def run() -> list[dict[str, Any]]:
    with (
        server_process("bench.remoting", "serve", "framework") as (fw_proc, fw_addr),
        server_process("bench.remoting", "serve", "baseline") as (bl_proc, bl_addr),
    ):
        return _measure((fw_addr, fw_proc.pid), (bl_addr, bl_proc.pid))


if __name__ == "__main__":
    if (
        len(sys.argv) in (3, 4)
        and sys.argv[1] == "serve"
        and sys.argv[2] in ("framework", "baseline", "baseline-echo")
    ):
        trio.run(_child, *sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(2)
