"""Load generators for ``bench/broker.py``, each run as its own process (own GIL, own core).

    python -m bench.broker_load MODE '<json spec>'

prints one line ``RESULT <json>`` on stdout and exits with ``os._exit`` (the native client's threads
are never joined). Modes:

- ``cpp-send``: the C++ client (PyPI ``rocketmq`` 0.4.4) ``Producer``, ``threads`` threads each in a
  ``send_sync`` loop of ``body_size``-byte messages to ``topic``; counts sends completed in the
  measured window (after ``warmup`` s, for ``seconds`` s) and their latencies.
- ``cpp-push``: a C++ ``PushConsumer`` (clustering, ``threads`` consume threads) on ``topic``
  counting message callbacks until ``expect`` arrived; seconds from ``start()`` and from the first
  message to the last.
- ``py-send``: :class:`remoting.client.RemotingClient` with ``concurrency`` tasks each in a send loop:
  SEND_MESSAGE_V2 of one ``body_size`` message, or SEND_BATCH_MESSAGE of ``batch`` such messages;
  queue ids round-robin over ``queues``; optional ``rate`` (requests/s, open loop) for latency.
- ``py-preload``: ``total`` messages in SEND_BATCH_MESSAGE requests of ``batch``, spread evenly
  over ``queues``, ``concurrency`` requests in flight.
- ``py-pull``: drain ``expect`` messages from every queue of ``topic`` with one long-polling
  PULL_MESSAGE loop (``max_nums`` per pull) per queue; records are counted by walking their size
  fields (the client's own cost stays small).
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import sys
import threading
import time
from typing import Any

RESULT_PREFIX = "RESULT "


def emit(result: dict[str, Any]) -> None:
    result["cpu_seconds"] = time.process_time()  # this load generator's own CPU (all threads)
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _window(spec: dict[str, Any]) -> tuple[float, float]:
    start = time.perf_counter() + float(spec.get("warmup", 0.5))
    return start, start + float(spec["seconds"])


# --------------------------------------------------------------------------- C++ client


def cpp_send(spec: dict[str, Any]) -> dict[str, Any]:
    from rocketmq.client import Message, Producer

    producer = Producer(f"BenchCppProducer{os.getpid()}", timeout=10_000)
    producer.set_namesrv_addr(spec["namesrv"])
    producer.start()
    topic = spec["topic"]
    body = b"c" * int(spec["body_size"])
    # one send outside the window: route lookup, connection, topic auto-creation
    first = Message(topic)
    first.set_body(body)
    producer.send_sync(first)
    start, stop = _window(spec)
    counts = [0] * int(spec["threads"])
    totals = [0] * len(counts)
    errors: list[str] = []
    latencies: list[list[float]] = [[] for _ in counts]

    def loop(i: int) -> None:
        lat = latencies[i]
        n = 0
        while True:
            msg = Message(topic)
            msg.set_body(body)
            t0 = time.perf_counter()
            if t0 >= stop:
                break
            try:
                producer.send_sync(msg)
            except Exception as e:  # reported, not hidden: the bench fails on errors
                errors.append(f"{type(e).__name__}: {e}")
                if len(errors) > 100:
                    return
                continue
            t1 = time.perf_counter()
            totals[i] += 1
            if t0 >= start and t1 <= stop:
                n += 1
                lat.append(t1 - t0)
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(len(counts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "count": sum(counts),
        "total": sum(totals) + 1,
        "seconds": stop - start,
        "errors": errors[:5],
        "error_count": len(errors),
        "latencies": sorted(x for lat in latencies for x in lat)[:: max(1, sum(counts) // 20_000)],
    }


def cpp_push(spec: dict[str, Any]) -> dict[str, Any]:
    from rocketmq.client import PushConsumer

    expect = int(spec["expect"])
    counter = itertools.count(1)
    done = threading.Event()
    marks: dict[str, float] = {}

    def on_message(msg: object) -> None:
        n = next(counter)
        if n == 1:
            marks["first"] = time.perf_counter()
        if n == expect:
            marks["last"] = time.perf_counter()
            done.set()

    consumer = PushConsumer(spec["group"])
    consumer.set_namesrv_addr(spec["namesrv"])
    consumer.set_thread_count(int(spec.get("threads", 4)))
    consumer.subscribe(spec["topic"], on_message)
    started = time.perf_counter()
    consumer.start()
    finished = done.wait(float(spec.get("deadline", 120)))
    received = next(counter) - 1
    result: dict[str, Any] = {"received": received, "finished": finished}
    if finished:
        result["from_start"] = marks["last"] - started
        result["first_to_last"] = marks["last"] - marks["first"]
    return result


# --------------------------------------------------------------------------- Python remoting client


def _send_fields(topic: str, queue_id: int, producer_group: str) -> dict[str, str]:
    """SEND_MESSAGE_V2 compact header fields (upstream ``SendMessageRequestHeaderV2``)."""
    return {
        "a": producer_group,
        "b": topic,
        "c": "TBW102",
        "d": "8",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "j": "0",
        "k": "false",
        "m": "false",
    }


class _UniqKeys:
    """Client-style unique keys (every real client sets UNIQ_KEY): a fixed prefix plus a counter."""

    def __init__(self) -> None:
        self.prefix = (os.getpid() & 0xFFFF).to_bytes(2, "big").hex().upper() + os.urandom(10).hex().upper()
        self.counter = itertools.count()

    def props(self) -> str:
        return f"UNIQ_KEY\x01{self.prefix}{next(self.counter) & 0xFFFFFFFF:08X}\x02WAIT\x01true\x02"


def _batch_body(count: int, body: bytes, keys: _UniqKeys) -> bytes:
    from remoting.protocol.message import BatchItem, encode_batch_body

    return encode_batch_body(BatchItem(0, body, keys.props()) for _ in range(count))


async def _py_send(spec: dict[str, Any]) -> dict[str, Any]:
    import trio

    from remoting.client import RemotingClient
    from remoting.codes import RequestCode, ResponseCode
    from remoting.command import RemotingCommand

    addr, topic = spec["broker"], spec["topic"]
    body = b"p" * int(spec["body_size"])
    batch = int(spec.get("batch", 1))
    queues = int(spec.get("queues", 4))
    concurrency = int(spec["concurrency"])
    rate = spec.get("rate")
    keys = _UniqKeys()
    fields = [_send_fields(topic, q, "BenchPyProducer") for q in range(queues)]
    code = RequestCode.SEND_BATCH_MESSAGE if batch > 1 else RequestCode.SEND_MESSAGE_V2
    queue_rr = itertools.cycle(range(queues))
    count = 0
    total = 1
    errors: list[str] = []
    latencies: list[float] = []

    def make() -> RemotingCommand:
        q = next(queue_rr)
        if batch > 1:
            return RemotingCommand(code=code, ext_fields=fields[q], body=_batch_body(batch, body, keys))
        ext = dict(fields[q])
        ext["i"] = keys.props()
        return RemotingCommand(code=code, ext_fields=ext, body=body)

    async with RemotingClient(
        name="bench.load", max_in_flight_per_connection=max(256, concurrency)
    ) as client:
        warm = await client.invoke(addr, make(), 10)
        if warm.code != ResponseCode.SUCCESS:
            return {"count": 0, "seconds": 0, "errors": [f"warm-up send: {warm.code} {warm.remark}"]}
        start, stop = _window(spec)

        async def one() -> None:
            nonlocal count, total
            t0 = time.perf_counter()
            try:
                r = await client.invoke(addr, make(), 10)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                return
            t1 = time.perf_counter()
            if r.code != ResponseCode.SUCCESS:
                errors.append(f"{r.code} {r.remark}")
                return
            total += 1
            if t0 >= start and t1 <= stop:
                count += 1
                latencies.append(t1 - t0)

        async def closed_loop() -> None:
            while time.perf_counter() < stop and len(errors) < 100:
                await one()

        async with trio.open_nursery() as nursery:
            if rate:
                # open loop: release requests on a fixed schedule, each in its own task
                interval = 1.0 / float(rate)
                t = time.perf_counter()
                while t < stop:
                    nursery.start_soon(one)
                    t += interval
                    delay = t - time.perf_counter()
                    if delay > 0:
                        await trio.sleep(delay)
            else:
                for _ in range(concurrency):
                    nursery.start_soon(closed_loop)
    latencies.sort()
    return {
        "count": count,
        "messages": count * batch,
        "total": total,
        "seconds": stop - start,
        # perf_counter() instants (CLOCK_MONOTONIC: comparable with other processes' readings)
        "window": [start, stop],
        "errors": errors[:5],
        "error_count": len(errors),
        "latencies": latencies[:: max(1, len(latencies) // 20_000)],
    }


async def _py_preload(spec: dict[str, Any]) -> dict[str, Any]:
    import trio

    from remoting.client import RemotingClient
    from remoting.codes import RequestCode, ResponseCode
    from remoting.command import RemotingCommand

    addr, topic = spec["broker"], spec["topic"]
    body = b"l" * int(spec["body_size"])
    batch, queues, total = int(spec["batch"]), int(spec["queues"]), int(spec["total"])
    keys = _UniqKeys()
    per_queue = total // queues
    jobs = [(q, min(batch, per_queue - i)) for q in range(queues) for i in range(0, per_queue, batch)]
    jobs_iter = iter(jobs)
    fields = [_send_fields(topic, q, "BenchPreload") for q in range(queues)]
    sent = 0
    started = time.perf_counter()
    async with RemotingClient(name="bench.preload") as client:

        async def worker() -> None:
            nonlocal sent
            for q, n in jobs_iter:
                cmd = RemotingCommand(
                    code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=fields[q], body=_batch_body(n, body, keys)
                )
                r = await client.invoke(addr, cmd, 30)
                if r.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"preload batch to queue {q}: {r.code} {r.remark}")
                sent += n

        async with trio.open_nursery() as nursery:
            for _ in range(int(spec.get("concurrency", 8))):
                nursery.start_soon(worker)
    return {"sent": sent, "seconds": time.perf_counter() - started}


_SIZE = struct.Struct(">i")


def _count_records(body: bytes) -> int:
    n = pos = 0
    end = len(body)
    while pos + 4 <= end:
        size = _SIZE.unpack_from(body, pos)[0]
        if size <= 0:
            break
        pos += size
        n += 1
    return n


async def _py_pull(spec: dict[str, Any]) -> dict[str, Any]:
    import trio

    from remoting.client import RemotingClient
    from remoting.codes import RequestCode, ResponseCode
    from remoting.command import RemotingCommand

    addr, topic, group = spec["broker"], spec["topic"], spec["group"]
    queues, expect = int(spec["queues"]), int(spec["expect"])
    max_nums = int(spec.get("max_nums", 32))
    received = 0
    pulls = 0
    done = trio.Event()
    started = time.perf_counter()
    finished_at = 0.0

    async with RemotingClient(name="bench.pull") as client:

        async def queue_loop(queue_id: int) -> None:
            nonlocal received, pulls, finished_at
            offset = 0
            while not done.is_set():
                ext = {
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": str(queue_id),
                    "queueOffset": str(offset),
                    "maxMsgNums": str(max_nums),
                    "sysFlag": str(0x2 | 0x4),  # suspend + subscription
                    "commitOffset": "0",
                    "suspendTimeoutMillis": "1000",
                    "subscription": "*",
                    "subVersion": "0",
                    "expressionType": "TAG",
                }
                r = await client.invoke(
                    addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext), 10
                )
                pulls += 1
                if r.code == ResponseCode.SUCCESS:
                    received += _count_records(r.body_bytes)
                    if received >= expect and not done.is_set():
                        finished_at = time.perf_counter()
                        done.set()
                elif r.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                    raise RuntimeError(f"pull {topic}/{queue_id}@{offset}: {r.code} {r.remark}")
                offset = int((r.ext_fields or {})["nextBeginOffset"])

        async with trio.open_nursery() as nursery:
            for q in range(queues):
                nursery.start_soon(queue_loop, q)
            with trio.move_on_after(float(spec.get("deadline", 120))):
                await done.wait()
            nursery.cancel_scope.cancel()
    return {
        "received": received,
        "pulls": pulls,
        "finished": done.is_set(),
        "seconds": (finished_at or time.perf_counter()) - started,
    }


def main(argv: list[str]) -> None:
    mode, spec = argv[0], json.loads(argv[1])
    if mode == "cpp-send":
        emit(cpp_send(spec))
    elif mode == "cpp-push":
        emit(cpp_push(spec))
    else:
        import trio

        fn = {"py-send": _py_send, "py-preload": _py_preload, "py-pull": _py_pull}[mode]
        emit(trio.run(fn, spec))


if __name__ == "__main__":
    main(sys.argv[1:])
