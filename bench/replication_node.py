"""Processes of ``bench/replication.py`` (each its own process: own GIL, own core).

    python -m bench.replication_node MODE '<json spec>'

Every mode prints one JSON line on stdout when it is ready, then follows its protocol:

- ``sync-master``: a name server and an auto-switch master (replica id 1, role set by hand); ready
  line ``{"master": addr, "ha": ha addr}``. Then reads commands on stdin, one per line:
  ``wait-slave`` (until the SyncStateSet is {1, 2}), ``wait-caught-up`` (until the slave acked the
  master's current end), ``mode sync`` / ``mode async``
  (``allAckInSyncStateSet`` on / off), each answered ``{"ok": true}``; ``stats`` (replication lag
  since the previous ``stats``: p50/p99/max of bytes and milliseconds, sampled every 2 ms on the
  master); EOF stops. Lag in bytes = master max offset − slave ack; lag in ms = how long ago the
  master's max offset first reached the offset the slave has acked (0 when it acked everything).
- ``follower``: an empty auto-switch slave (id 2) following ``ha``; without ``max`` it prints
  ``{"ok": true}`` and runs until EOF; with ``max`` it exits once its log ends there, printing
  ``{"seconds": catch-up time, "cpu": CPU seconds it used meanwhile, "bytes": its max offset}``.
- ``master``: an auto-switch master preloaded with ``bytes`` of 4 KiB messages (batches written
  straight into its store); ready line ``{"ha": addr, "max": offset, "dir": commit-log dir}``; EOF
  stops.
- ``copy-recv``: listens, prints ``{"port": p}``, writes everything received into files of
  ``file_size`` bytes under ``dir`` (the baseline's receiver), prints ``{"seconds", "cpu", "bytes"}``.
- ``copy-send``: sends the first ``bytes`` of the commit-log files under ``dir`` to ``port`` (1 MiB
  reads and sendall), prints ``{"cpu"}``.

With ``BENCH_REPL_PROFILE=<dir>`` in the environment the broker modes run under cProfile and write
``<dir>/<mode>-<pid>.prof`` when they stop.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections import deque
from typing import Any

import trio

from bench.common import percentile

CHUNK = 1024 * 1024


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- brokers in this process


async def _start_broker(
    nursery: trio.Nursery, server: Any, client: Any, root: str, namesrv: str, **keys: Any
) -> Any:
    from broker.config import BrokerConfig
    from broker.controller import BrokerController
    from store.config import MessageStoreConfig

    bc = BrokerConfig(
        brokerClusterName="BenchRepl",
        brokerName="broker-r",
        brokerIP1="127.0.0.1",
        brokerIP2="127.0.0.1",
        listenPort=0,
        namesrvAddr=namesrv,
        enableControllerMode=True,
    )
    sc = MessageStoreConfig(
        storePathRootDir=root,
        haListenPort=0,
        maxHashSlotNum=100_000,
        maxIndexNum=400_000,
    )
    for key, value in keys.items():
        setattr(bc if hasattr(bc, key) else sc, key, value)
    broker = BrokerController(bc, sc, client=client)
    await nursery.start(broker.run, server)
    return broker


class _Lag:
    """Samples the master's max offset and the slave's ack every ``interval`` seconds."""

    def __init__(self, master: Any, interval: float = 0.002) -> None:
        self.master = master
        self.interval = interval
        #: (time, max offset) whenever the master's max offset moved, oldest first
        self.times: deque[float] = deque()
        self.offsets: deque[int] = deque()
        self.bytes: list[int] = []
        self.ms: list[float] = []

    async def run(self) -> None:
        rep = self.master.replication
        times, offsets = self.times, self.offsets
        while True:
            await trio.sleep(self.interval)
            now = time.perf_counter()
            top = self.master.store.max_phy_offset
            if not offsets or offsets[-1] != top:
                times.append(now)
                offsets.append(top)
            acks = rep.slave_ack_offsets()
            if not acks:
                continue
            ack = min(acks.values())
            # history the slave has passed is not needed again (acks only grow)
            while len(offsets) > 1 and offsets[1] <= ack:
                times.popleft()
                offsets.popleft()
            self.bytes.append(max(0, top - ack))
            if ack >= top:
                self.ms.append(0.0)
                continue
            # the first sample whose max offset passed the ack: when that data existed
            i = bisect.bisect_right(offsets, ack)
            since = times[i] if i < len(times) else now
            self.ms.append((now - since) * 1000)

    def take(self) -> dict[str, Any]:
        b, m = self.bytes, self.ms
        self.bytes, self.ms = [], []
        return {
            "samples": len(b),
            "bytes_p50": percentile(b, 50),
            "bytes_p99": percentile(b, 99),
            "bytes_max": max(b, default=0),
            "ms_p50": percentile(m, 50),
            "ms_p99": percentile(m, 99),
            "ms_max": max(m, default=0.0),
        }


async def _lines() -> Any:
    stream = trio.lowlevel.FdStream(os.dup(0))
    buf = b""
    while True:
        data = await stream.receive_some(4096)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode().strip()


async def sync_master(spec: dict[str, Any]) -> None:
    from namesrv.config import NamesrvConfig
    from namesrv.controller import NamesrvController
    from remoting.client import RemotingClient
    from remoting.server import RemotingServer
    from tests.integration.broker_env import wait_until

    with tempfile.TemporaryDirectory(prefix="bench-repl-master-", dir=spec.get("tmp")) as tmp:
        async with trio.open_nursery() as nursery:
            namesrv = NamesrvController(NamesrvConfig(kvConfigPath=os.path.join(tmp, "kv.json")))
            await nursery.start(namesrv.run)
            server = RemotingServer(name="bench-repl")
            ns = await server.add_listener("127.0.0.1", 0, namesrv.processor_table, name="namesrv")
            await nursery.start(server.run)
            async with RemotingClient(name="bench-repl.brokers") as client:
                m = await _start_broker(
                    nursery,
                    server,
                    client,
                    os.path.join(tmp, "m"),
                    f"127.0.0.1:{ns.port}",
                    brokerId=1,
                    mappedFileSizeCommitLog=int(spec.get("file_size", 128 * 1024 * 1024)),
                    haMaxTimeSlaveNotCatchup=60_000,
                    checkSyncStateSetPeriod=200,
                )
                await m.replication.change_to_master(1)
                lag = _Lag(m)
                nursery.start_soon(lag.run)
                out({"master": m.addr, "ha": m.ha_addr})
                async for line in _lines():
                    if line == "wait-slave":
                        await wait_until(
                            lambda: m.replication.sync_state_set == {1, 2}, 20, "SyncStateSet {1, 2}"
                        )
                        out({"ok": True})
                    elif line == "wait-caught-up":
                        top = m.store.max_phy_offset
                        await wait_until(
                            lambda top=top: (
                                min(m.replication.slave_ack_offsets().values(), default=-1) >= top
                            ),
                            60,
                            "slave caught up",
                        )
                        out({"ok": True})
                    elif line.startswith("mode "):
                        m.store_config.allAckInSyncStateSet = line.split()[1] == "sync"
                        m.replication.notify_appended()
                        lag.take()
                        out({"ok": True})
                    elif line == "stats":
                        out(lag.take())
                nursery.cancel_scope.cancel()


async def follower(spec: dict[str, Any]) -> None:
    from remoting.client import RemotingClient
    from remoting.server import RemotingServer

    with tempfile.TemporaryDirectory(prefix="bench-repl-slave-", dir=spec.get("tmp")) as tmp:
        async with trio.open_nursery() as nursery:
            server = RemotingServer(name="bench-repl-slave")
            await nursery.start(server.run)
            async with RemotingClient(name="bench-repl-slave.client") as client:
                s = await _start_broker(
                    nursery,
                    server,
                    client,
                    os.path.join(tmp, "s"),
                    "",
                    brokerId=2,
                    mappedFileSizeCommitLog=int(spec.get("file_size", 128 * 1024 * 1024)),
                    messageIndexEnable=bool(spec.get("index", True)),
                )
                started, cpu = time.perf_counter(), time.process_time()
                await s.replication.change_to_slave(spec["ha"], 1)
                target = spec.get("max")
                if target is None:
                    out({"ok": True})
                    async for _ in _lines():
                        pass
                else:
                    while s.store.max_phy_offset < int(target):
                        await trio.sleep(0.005)
                    out(
                        {
                            "seconds": time.perf_counter() - started,
                            "cpu": time.process_time() - cpu,
                            "bytes": s.store.max_phy_offset,
                        }
                    )
                nursery.cancel_scope.cancel()


async def master(spec: dict[str, Any]) -> None:
    from remoting.client import RemotingClient
    from remoting.protocol.message import encode_message
    from remoting.server import RemotingServer

    total = int(spec["bytes"])
    with tempfile.TemporaryDirectory(prefix="bench-repl-master-", dir=spec.get("tmp")) as tmp:
        async with trio.open_nursery() as nursery:
            server = RemotingServer(name="bench-repl-master")
            await nursery.start(server.run)
            async with RemotingClient(name="bench-repl-master.client") as client:
                m = await _start_broker(
                    nursery,
                    server,
                    client,
                    os.path.join(tmp, "m"),
                    "",
                    brokerId=1,
                    mappedFileSizeCommitLog=int(spec["file_size"]),
                    messageIndexEnable=False,
                )
                await m.replication.change_to_master(1)
                one = encode_message(
                    topic="CatchUpTopic",
                    queue_id=0,
                    flag=0,
                    body=b"c" * 4000,
                    properties="",
                    sys_flag=0,
                    born_timestamp=1,
                    born_host=("127.0.0.1", 1),
                    store_host=("127.0.0.1", 2),
                )
                batch = bytearray(one * 250)
                while m.store.max_phy_offset < total:
                    result = await m.store.put_messages(batch, "CatchUpTopic", 0, sys_flag=0)
                    if result.wrote_offset < 0:
                        raise RuntimeError(f"preload failed: {result.status} {result.remark}")
                    m.replication.notify_appended()
                await m.store.flush()
                out({"ha": m.ha_addr, "max": m.store.max_phy_offset, "dir": m.store_config.commitlog_dir})
                async for _ in _lines():
                    pass
                nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- baseline: plain copy


def copy_recv(spec: dict[str, Any]) -> None:
    directory, file_size = spec["dir"], int(spec["file_size"])
    os.makedirs(directory, exist_ok=True)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        out({"port": listener.getsockname()[1]})
        conn, _ = listener.accept()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        received = 0
        started, cpu = time.perf_counter(), time.process_time()
        fd = -1
        with conn:
            while True:
                n = conn.recv_into(view)
                if not n:
                    break
                pos = 0
                while pos < n:
                    if received % file_size == 0:
                        if fd >= 0:
                            os.close(fd)
                        fd = os.open(
                            os.path.join(directory, f"{received:020d}"), os.O_WRONLY | os.O_CREAT, 0o644
                        )
                    take = min(n - pos, file_size - received % file_size)
                    os.write(fd, view[pos : pos + take])
                    pos += take
                    received += take
        if fd >= 0:
            os.close(fd)
        out({"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "bytes": received})


def copy_send(spec: dict[str, Any]) -> None:
    directory, port, left = spec["dir"], int(spec["port"]), int(spec["bytes"])
    cpu = time.process_time()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name), "rb", buffering=0) as f:
                while left > 0 and (chunk := f.read(min(CHUNK, left))):
                    conn.sendall(chunk)
                    left -= len(chunk)
    out({"cpu": time.process_time() - cpu})


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    mode, spec = argv[0], json.loads(argv[1])
    if mode == "copy-recv":
        copy_recv(spec)
    elif mode == "copy-send":
        copy_send(spec)
    else:
        fn = {"sync-master": sync_master, "follower": follower, "master": master}[mode]
        profile_dir = os.environ.get("BENCH_REPL_PROFILE")
        if not profile_dir:
            trio.run(fn, spec)
            return
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            trio.run(fn, spec)
        finally:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"{mode}-{os.getpid()}.prof"))


if __name__ == "__main__":
    main(sys.argv[1:])
