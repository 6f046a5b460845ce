"""Replication (issue 4, "Benchmark"): sync vs async replication throughput, lag, catch-up.

Processes (``bench/replication_node.py``), each with its own GIL: an auto-switch master with its name
server, its slave (roles set by hand, SyncStateSet {master, slave}), and a load generator
(``bench.broker_load py-send``: 64 concurrent SEND_MESSAGE_V2 of 1 KiB over 4 queues). The dev
machine has 2 cores for the three.

1. **sync send with one slave and allAckInSyncStateSet**: msgs/s while every send waits until the
   slave acked it, against the same master and slave with ``allAckInSyncStateSet`` off (the slave
   replicates asynchronously) — the baseline. Modes alternate over a few rounds on the same pair;
   the best round of each counts. Target ≥ 0.6. With three busy processes on two cores the async
   slave falls behind during the window; an extra row counts the async messages over the time until
   the slave acked them all (what replication sustains).
2. **replication lag** at that load: sampled every 2 ms on the master during each round (bytes the
   slave has not acked; how long ago the master's end passed the slave's ack), p99 of the median
   round; informational, for both modes.
   CPU per message of the master and of the slave process (``/proc`` user+system time from the mode
   switch until the slave acked everything, over the messages sent): sync against async,
   informational — far less disturbed by other load on a shared machine than the rates.
3. **catch-up of an empty slave from a 1 GiB master**: a master process preloaded with 1 GiB of
   4 KiB messages, an empty slave process started against it; MB/s until the slave's log ends where
   the master's does. Baseline, same run: the same bytes of the master's commit-log files copied over
   a loopback socket by two plain processes (1 MiB reads + ``sendall``; ``recv_into`` + ``write``).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from bench.common import REPO_ROOT, process_cpu_seconds, row

ROUNDS = 3
LOAD_SECONDS = 3.0
WARMUP = 0.5
CONCURRENCY = 64
BODY = 1024
SYNC_TARGET = 0.6
CATCH_UP_BYTES = 1024 * 1024 * 1024
CATCH_UP_FILE = 256 * 1024 * 1024
TOPIC = "BenchReplTopic"
RESULT_PREFIX = "RESULT "


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class _Node:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            raise RuntimeError(f"replication node exited with {self.proc.wait()} without answering")
        return json.loads(text)

    def command(self, text: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.line()


@contextlib.contextmanager
def _node(mode: str, spec: dict[str, Any]) -> Iterator[tuple[_Node, dict[str, Any]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.replication_node", mode, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=_env(),
    )
    node = _Node(proc)
    try:
        yield node, node.line()
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _send_load(master: str) -> dict[str, Any]:
    spec = {
        "broker": master,
        "topic": TOPIC,
        "body_size": BODY,
        "concurrency": CONCURRENCY,
        "queues": 4,
        "seconds": LOAD_SECONDS,
        "warmup": WARMUP,
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.broker_load", "py-send", json.dumps(spec)],
        cwd=REPO_ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    for text in done.stdout.splitlines():
        if text.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(text[len(RESULT_PREFIX) :])
            if result.get("error_count"):
                raise RuntimeError(f"send errors: {result['errors']}")
            return result
    raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr[-2000:]}")


def _sync_vs_async() -> list[dict[str, Any]]:
    rate: dict[str, list[float]] = {"sync": [], "async": []}
    lags: dict[str, list[dict[str, Any]]] = {"sync": [], "async": []}
    sustained: list[float] = []
    #: CPU µs per message from the mode switch until the slave caught up, per mode: (master, slave)
    cpu: dict[str, list[tuple[float, float]]] = {"sync": [], "async": []}
    with _node("sync-master", {}) as (master, ready), _node("follower", {"ha": ready["ha"]}) as (slave, _):
        master.command("wait-slave")
        for _ in range(ROUNDS):
            for mode in ("async", "sync"):
                master.command(f"mode {mode}")
                cpu0 = process_cpu_seconds(master.proc.pid), process_cpu_seconds(slave.proc.pid)
                result = _send_load(ready["master"])
                rate[mode].append(result["count"] / result["seconds"])
                lags[mode].append(master.command("stats"))
                # no backlog into the next round; for async, how long the slave still needed
                started = time.perf_counter()
                master.command("wait-caught-up")
                cpu1 = process_cpu_seconds(master.proc.pid), process_cpu_seconds(slave.proc.pid)
                sent = max(1, result["total"])
                cpu[mode].append(((cpu1[0] - cpu0[0]) / sent * 1e6, (cpu1[1] - cpu0[1]) / sent * 1e6))
                if mode == "async":
                    behind = time.perf_counter() - started
                    sustained.append(result["total"] / (WARMUP + result["seconds"] + behind))
    print(
        f"  msgs/s async {[round(r) for r in rate['async']]}, sync {[round(r) for r in rate['sync']]}",
        file=sys.stderr,
    )
    for mode in ("async", "sync"):
        pairs = ", ".join(f"{m:.0f}/{s:.0f}" for m, s in cpu[mode])
        print(f"  CPU µs/msg master/slave, {mode}: {pairs}", file=sys.stderr)

    def cpu_us(mode: str, side: int) -> float:
        return statistics.median(c[side] for c in cpu[mode])

    def lag(mode: str, key: str) -> float:
        return statistics.median(s[key] for s in lags[mode])

    best_sync, best_async = max(rate["sync"]), max(rate["async"])
    return [
        row(
            "sync send 1 KiB, allAckInSyncStateSet, 1 slave (msgs/s)",
            best_sync,
            "msg/s",
            best_async,
            SYNC_TARGET,
        ),
        row("async replication, same master and slave, same load (msgs/s)", best_async, "msg/s"),
        row("async replication counted until the slave caught up (msgs/s)", max(sustained), "msg/s"),
        row("replication lag at sync load, p99 (bytes)", lag("sync", "bytes_p99"), "B"),
        row("replication lag at sync load, p99 (ms)", lag("sync", "ms_p99"), "ms"),
        row("replication lag at async load, p99 (bytes)", lag("async", "bytes_p99"), "B"),
        row("replication lag at async load, p99 (ms)", lag("async", "ms_p99"), "ms"),
        row("master CPU per message, sync (µs)", cpu_us("sync", 0), "µs", cpu_us("async", 0)),
        row("slave CPU per message, sync (µs)", cpu_us("sync", 1), "µs", cpu_us("async", 1)),
    ]


def _catch_up() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as tmp:
        spec = {"bytes": CATCH_UP_BYTES, "file_size": CATCH_UP_FILE, "tmp": tmp}
        with _node("master", spec) as (master_node, master):
            follow = {**spec, "ha": master["ha"], "max": master["max"], "index": False}
            master_cpu = process_cpu_seconds(master_node.proc.pid)
            with _node("follower", follow) as (_, caught):
                pass
            master_cpu = process_cpu_seconds(master_node.proc.pid) - master_cpu
            copy_dir = os.path.join(tmp, "copy")
            with _node("copy-recv", {"dir": copy_dir, "file_size": CATCH_UP_FILE}) as (recv, port):
                copy = {"dir": master["dir"], "port": port["port"], "bytes": master["max"]}
                with _node("copy-send", copy) as (_, sender):
                    pass
                copied = recv.line()
        mb = master["max"] / 1e6
        assert caught["bytes"] == master["max"] == copied["bytes"]
        ha_rate, copy_rate = mb / caught["seconds"], mb / copied["seconds"]
        print(
            f"  catch-up {caught['seconds']:.2f} s (CPU: master {master_cpu:.2f} s, slave "
            f"{caught['cpu']:.2f} s), copy {copied['seconds']:.2f} s (CPU: sender {sender['cpu']:.2f} s, "
            f"receiver {copied['cpu']:.2f} s) for {mb:.0f} MB",
            file=sys.stderr,
        )
        return [row("catch-up of an empty slave from a 1 GiB master (MB/s)", ha_rate, "MB/s", copy_rate)]


def run() -> list[dict[str, Any]]:
    return _sync_vs_async() + _catch_up()
