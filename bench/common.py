"""Helpers shared by the benchmarks.

Contract of a benchmark module ``bench/<name>.py`` (run with ``bin/bench NAME``):

* it defines ``def run() -> list[dict]`` — a plain synchronous function (call ``trio.run``
  inside it when the benchmark is async); the runner imports the module and calls it;
* every row comes from :func:`row`: ``{"case", "value", "unit", "baseline", "ratio", "target"}``
  where ``ratio = value / baseline`` and ``target`` is the ratio the issue asks for (None when
  the row is informational);
* the case and its baseline are measured in the same run (interleave them to share the noise);
* a full run stays within a couple of minutes on the 2-core dev machine.

Servers under test run in a subprocess (:func:`server_process`) so that load generator and
server each get a core.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "REPO_ROOT",
    "Stopwatch",
    "ThreadShares",
    "ThreadTimes",
    "markdown_table",
    "page_touch_costs",
    "percentile",
    "process_cpu_seconds",
    "row",
    "server_process",
    "summary",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


def row(
    case: str,
    value: float,
    unit: str,
    baseline: float | None = None,
    target: float | None = None,
) -> dict[str, Any]:
    """One result row; ``ratio`` is value / baseline (None without a baseline)."""
    ratio = value / baseline if baseline else None
    return {
        "case": case,
        "value": round(value, 3),
        "unit": unit,
        "baseline": None if baseline is None else round(baseline, 3),
        "ratio": None if ratio is None else round(ratio, 3),
        "target": target,
    }


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    """min / median / max of repeated measurements (for logging the spread)."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc; 10 ms resolution).

    Divided into the requests served, it gives a server's cost per request, which is far less
    disturbed by other load on a shared machine than throughput is.
    """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ThreadShares(NamedTuple):
    """What a process's threads did over a stretch of wall time, as fractions of it."""

    #: its main thread (the event loop of a container) on a CPU
    main_on_cpu: float
    #: its main thread runnable but waiting for a CPU (another thread or process had it)
    main_waiting: float
    #: its other threads on a CPU, summed (1.0 = one CPU all the time)
    others_on_cpu: float


class ThreadTimes:
    """Samples the scheduler's per-thread times of process ``pid`` (``/proc/PID/task/*/schedstat``:
    nanoseconds on a CPU and waiting on a run queue) every ``interval`` seconds in a thread of
    this process, while used as a context manager; :meth:`shares` then says what the threads did
    between two ``time.perf_counter()`` instants -- of any process of this machine: on Linux it
    reads ``CLOCK_MONOTONIC``, so a load generator's measurement window can be passed as it is.

    A throughput ratio between two loads of one server says little about why it is what it is:
    with the server's main thread busy all the time in both, it is the ratio of that thread's cost
    per message; with it waiting for a CPU, or idle, something else set the pace."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        #: (perf_counter, {thread id: (ns on a CPU, ns waiting)}), in time order
        self.samples: list[tuple[float, dict[int, tuple[int, int]]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> dict[int, tuple[int, int]]:
        times: dict[int, tuple[int, int]] = {}
        task_dir = f"/proc/{self.pid}/task"
        try:
            tids = os.listdir(task_dir)
        except FileNotFoundError:  # the process is gone
            return times
        for tid in tids:
            try:
                with open(f"{task_dir}/{tid}/schedstat") as f:
                    on_cpu, waiting, _slices = f.read().split()
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue  # a thread that ended meanwhile
            times[int(tid)] = (int(on_cpu), int(waiting))
        return times

    def _run(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), self._read()))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> ThreadTimes:
        self._thread = threading.Thread(target=self._run, name=f"thread-times-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append((time.perf_counter(), self._read()))

    def shares(self, start: float, stop: float) -> ThreadShares | None:
        """The threads' shares of wall time between the first sample at or after ``start`` and
        the last at or before ``stop`` (None when fewer than two samples fall in between, or the
        process was gone).
        Threads that started or ended in between count from their first or to their last
        sample; the main thread is the one whose id is the process id."""
        inside = [s for s in self.samples if start <= s[0] <= stop]
        if len(inside) < 2:
            return None
        t0, t1 = inside[0][0], inside[-1][0]
        wall = (t1 - t0) * 1e9
        if wall <= 0:
            return None
        seen: dict[int, tuple[int, int]] = {}
        for _, times in inside:  # each thread's earliest times in the stretch
            for tid, v in times.items():
                seen.setdefault(tid, v)
        ended: dict[int, tuple[int, int]] = {}
        for _, times in inside:  # ... and its latest
            ended.update(times)
        if self.pid not in ended:
            return None  # the process was gone
        main_cpu = main_wait = others = 0
        for tid, (cpu1, wait1) in ended.items():
            cpu0, wait0 = seen[tid]
            if tid == self.pid:
                main_cpu, main_wait = cpu1 - cpu0, wait1 - wait0
            else:
                others += max(0, cpu1 - cpu0)  # (a thread id taken again by a new thread: its times restart)
        return ThreadShares(main_cpu / wall, main_wait / wall, others / wall)


#: bytes of each file :func:`page_touch_costs` brings in
PAGE_PROBE_BYTES = 64 * 1024 * 1024


def _touch_new_file(path: str, size: int) -> float:
    """Seconds to bring every page of a new ``size``-byte file into a writable map, the way the
    store's allocator prepares a commit-log file (``MappedFile.open_sync`` creates it and reserves
    its blocks; ``populate_write_sync`` maps it writable: the timed part); the file is left on
    disk, unmapped."""
    from store.mapped_file import MappedFile

    mf = MappedFile.open_sync(path, 0, size, create=True, prefault=True, sync_dir=False)
    try:
        t0 = time.perf_counter()
        done = mf.populate_write_sync(0, size)
        for pos in range(done, size, mmap.PAGESIZE):  # a kernel without the advice: a store a page
            mf.mm[pos] = 0
        return time.perf_counter() - t0
    finally:
        mf.close()


def page_touch_costs(directory: str | os.PathLike[str], size: int = PAGE_PROBE_BYTES) -> tuple[float, float]:
    """Microseconds a page to bring a new file's pages into memory (zero-filled page cache,
    mapped writable): (``next``, ``reused``). ``next``: the pages the kernel hands out now, as a
    growing commit log gets them; ``reused``: a second file created right after the first was
    deleted, whose pages are the memory just freed.

    On a VM the two can differ by ten times: memory the guest has not touched since it booted,
    or has handed back to the host (free page reporting), costs a host fault at its first touch
    (measured on the development VM: 8-9 us a page against 0.8 reused). A store that writes at
    hundreds of MB/s pays that for every page its page cache grows by; the benchmarks print it
    so that a drop in a late round can be told from one in the code."""
    pages = size // mmap.PAGESIZE
    paths = [os.path.join(directory, f"page-probe-{i}-{os.getpid()}") for i in (0, 1)]
    try:
        first = _touch_new_file(paths[0], size)
        os.unlink(paths[0])  # its pages go back to the kernel's free lists ...
        reused = _touch_new_file(paths[1], size)  # ... and are handed out again at once
    finally:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return first / pages * 1e6, reused / pages * 1e6


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.elapsed`` (seconds, perf_counter)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.elapsed = 0.0

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start


@contextlib.contextmanager
def server_process(
    module: str, *args: str, ready_timeout: float = 20.0
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run ``python -m <module> <args>`` and yield (process, first stdout line).

    The child must print one line when it is ready (typically its ``host:port``) and must exit
    when its stdin closes. The child is stopped (stdin closed, then terminate/kill) on exit.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=env,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + ready_timeout
        line = ""
        while not line:
            if proc.poll() is not None:
                raise RuntimeError(f"{module} exited with {proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{module} not ready after {ready_timeout}s")
            line = proc.stdout.readline().strip()
        yield proc, line
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as a GitHub markdown table."""
    cols = ["case", "value", "unit", "baseline", "ratio", "target"]

    def fmt(v: object) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
