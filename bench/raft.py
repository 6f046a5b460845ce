"""Raft log throughput: no-op proposals through a 3-node in-process cluster with real fsync.

Cases (each against the same-run baseline: sequential fsync'd appends of one entry to a bare
:class:`FileStorage`, i.e. what a single durable log write costs on this disk):

- ``propose 1 in flight``: one proposer awaiting each proposal (commit latency bound);
- ``propose 64 in flight``: 64 concurrent proposers (the driver batches them per Ready).

This is the baseline the controller request-throughput benchmark compares against.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import trio

from bench.common import row
from controller.raft.driver import RaftDriver
from controller.raft.messages import Entry, HardState
from controller.raft.storage import FileStorage
from controller.raft.transport import MemoryNetwork

PEERS = {f"n{i}": f"127.0.0.1:{9878 + i}" for i in range(3)}
DURATION = 3.0


class NullMachine:
    def apply(self, index: int, data: bytes) -> None:
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


def bare_fsync_appends(root: Path, duration: float) -> float:
    storage = FileStorage(root)
    storage.load()
    n = 0
    started = time.perf_counter()
    while time.perf_counter() - started < duration:
        n += 1
        storage.save(HardState(1, "n0", n), [Entry(1, n, b"x")], None)
    elapsed = time.perf_counter() - started
    storage.close()
    return n / elapsed


async def cluster_proposals(root: Path, in_flight: int, duration: float) -> float:
    net = MemoryNetwork()
    drivers = []
    async with trio.open_nursery() as nursery:
        for nid in PEERS:
            d = RaftDriver(
                nid,
                PEERS,
                root / nid,
                net.transport(nid),
                NullMachine(),
                tick_interval=0.05,
                rng=random.Random(nid),
            )
            net.attach(nid, d.receive)
            await nursery.start(d.run)
            drivers.append(d)
        with trio.fail_after(10):
            while not any(d.is_leader for d in drivers):
                await trio.sleep(0.01)
        leader = next(d for d in drivers if d.is_leader)
        await leader.propose(b"warm-up")
        done = 0
        deadline = trio.current_time() + duration

        async def proposer() -> None:
            nonlocal done
            while trio.current_time() < deadline:
                await leader.propose(b"\x00")
                done += 1

        started = time.perf_counter()
        async with trio.open_nursery() as workers:
            for _ in range(in_flight):
                workers.start_soon(proposer)
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    return done / elapsed


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-raft-") as tmp:
        root = Path(tmp)
        before = bare_fsync_appends(root / "before", DURATION / 2)
        rates = {n: trio.run(cluster_proposals, root / f"c{n}", n, DURATION) for n in (1, 64)}
        after = bare_fsync_appends(root / "after", DURATION / 2)
    baseline = (before + after) / 2
    rows = [
        row(f"propose {n} in flight (3 nodes, fsync)", rate, "proposals/s", baseline)
        for n, rate in rates.items()
    ]
    rows.append(row("bare fsync'd log append (baseline)", baseline, "appends/s"))
    return rows
