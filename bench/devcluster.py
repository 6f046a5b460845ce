"""The default dev cluster: start-up time and idle memory (issue 3, "Benchmark").

Starts ``python -m container.cli`` with no config (``conf/dev-cluster.toml``: name server on
127.0.0.1:9876, broker-a and broker-b) and ``RMQ_DATA_DIR`` in a fresh temporary directory, and
measures the time from launching the interpreter to both brokers being listed by the name server
(GET_BROKER_CLUSTER_INFO polled every 10 ms) — best and median of a few starts, each on a new data
directory — and the resident set size of the process after 5 s of idling. The default ports must
be free: when one is taken the benchmark reports that and measures nothing.

There is no same-run baseline: the targets are absolute (≤ 2 s, ≤ 150 MB), given in the
``baseline`` column with ratio = value / target (≤ 1 meets the target).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import row
from bench.container_proc import ContainerProcess, port_taken, rss_bytes

NAMESRV = "127.0.0.1:9876"
CLUSTER = "DefaultCluster"
BROKERS = {"broker-a", "broker-b"}
#: every port the dev cluster binds (name server, masters and slaves, their HA ports)
PORTS = (9876, 9878, 10911, 10912, 10921, 10922, 10915, 10916, 10925, 10926)
STARTS = 3
IDLE_SECONDS = 5.0
TARGET_START_S = 2.0
TARGET_RSS_MB = 150.0


def _start_once(work: Path, *, idle: float) -> tuple[float, float | None]:
    """(seconds to both brokers registered, RSS in MB after ``idle`` seconds or None)."""
    with ContainerProcess(work, None, data_dir=work / "data") as container:
        elapsed = container.wait_registered(NAMESRV, CLUSTER, BROKERS)
        rss = None
        if idle > 0:
            time.sleep(idle)
            rss = rss_bytes(container.pid) / 1e6
    return elapsed, rss


def measure() -> list[dict[str, Any]]:
    busy = [p for p in PORTS if port_taken(p)]
    if busy:
        print(f"  devcluster: skipped, default port(s) {busy} already in use", file=sys.stderr)
        return [row(f"skipped: default port(s) {busy} in use", float("nan"), "-")]
    times: list[float] = []
    rss: float | None = None
    with tempfile.TemporaryDirectory(prefix="bench-devcluster-") as tmp:
        for i in range(STARTS):
            work = Path(tmp) / f"start-{i}"
            work.mkdir()
            last = i == STARTS - 1
            elapsed, r = _start_once(work, idle=IDLE_SECONDS if last else 0.0)
            times.append(elapsed)
            if r is not None:
                rss = r
            # the next start needs the ports back
            deadline = time.monotonic() + 10
            while any(port_taken(p) for p in PORTS) and time.monotonic() < deadline:
                time.sleep(0.05)
    print(f"  start to both brokers registered (s): {[round(t, 3) for t in times]}", file=sys.stderr)
    assert rss is not None
    return [
        row("start to both brokers registered, best of 3 (s)", min(times), "s", TARGET_START_S, 1.0),
        row(
            "start to both brokers registered, median of 3 (s)",
            statistics.median(times),
            "s",
            TARGET_START_S,
            1.0,
        ),
        row(f"idle RSS {IDLE_SECONDS:.0f} s after start", rss, "MB", TARGET_RSS_MB, 1.0),
    ]


def run() -> list[dict[str, Any]]:
    return measure()
