"""A watch on the process's event loop: a warning when it did not run for a while, naming where.

Everything a ``rmq-container`` process serves runs on one trio loop, so a call that blocks it -- a
slow system call, a page fault that waits for the disk, a long computation -- stalls every broker,
the name server and the controller at once, and from outside it only shows as latency. A task on
the loop stamps the time every fifth of the threshold; a daemon thread looks at the stamp and, once
it is older than the threshold, logs the stack the loop's thread is in at that moment (and, when
the loop runs again, how long the stall lasted). The thread needs the GIL to look: a stall inside
C code that holds it is reported when the code returns, with its length but a later stack.

The report also says what the kernel has the loop's thread doing (Linux ``/proc``: its state --
running or waiting for a CPU, sleeping, in uninterruptible sleep -- the kernel function it sleeps
in, and its kernel stack where this process may read it), and once the loop runs again, how much
of the stall its thread spent on a CPU and how much waiting for one: a stall spent waiting for a
CPU is contention, one spent on it is work (in the kernel, when the stack shows a system call),
and one spent in neither is sleep on a lock or the disk.

The report also names where the process's other threads are. A loop shown inside a call that
releases the GIL (``epoll``, a socket call) is most often not blocked there but waiting for the
GIL to come back from another thread -- a worker thread preempted while holding it, say, when
every core is busy -- and that thread's innermost frames say which.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from typing import NamedTuple

import trio

from container.logs import PROCESS_LOGGER

log = logging.getLogger(f"{PROCESS_LOGGER}.watchdog")

#: the loop stamps the time, and the watching thread looks, every fifth of the threshold (100 ms for
#: the default; was 50 ms whatever the threshold: 40 wakeups a second of an idle process), at least
#: this often (seconds)
MIN_TICK = 0.005
#: frames of each other thread a stall report shows (innermost first)
OTHER_FRAMES = 4
#: stamps older than this are a stall (seconds); ``RMQ_LOOP_STALL_MS`` in the environment sets it
#: for a process (the broker benchmark uses 100 ms)
DEFAULT_THRESHOLD = 0.5
STALL_ENV = "RMQ_LOOP_STALL_MS"


def threshold_from_env(default: float = DEFAULT_THRESHOLD) -> float:
    """``RMQ_LOOP_STALL_MS`` as seconds, else ``default`` (also for a value that is not a number)."""
    raw = os.environ.get(STALL_ENV, "")
    try:
        ms = float(raw)
    except ValueError:
        if raw:
            log.warning(
                "%s=%r is not a number of milliseconds: using %.0f ms", STALL_ENV, raw, default * 1000
            )
        return default
    return max(ms, 1.0) / 1000


class LoopWatchdog:
    """``await nursery.start(LoopWatchdog().run)`` on the loop to watch; stops with the task."""

    def __init__(self, threshold: float | None = None) -> None:
        self.threshold = threshold_from_env() if threshold is None else threshold
        self.tick = max(MIN_TICK, self.threshold / 5)
        #: stalls reported so far
        self.stalls = 0
        self._stamp = time.monotonic()
        self._loop_thread = threading.get_ident()
        self._loop_native = threading.get_native_id()
        self._stop = threading.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._loop_thread = threading.get_ident()
        self._loop_native = threading.get_native_id()
        self._stamp = time.monotonic()
        self._stop.clear()
        watcher = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        watcher.start()
        task_status.started()
        try:
            while True:
                self._stamp = time.monotonic()
                await trio.sleep(self.tick)
        finally:
            self._stop.set()

    def _watch(self) -> None:
        reported_at = 0.0  # the stamp of the stall already reported, 0.0 when none
        at_report: KernelSample | None = None  # the loop thread's kernel figures then
        while not self._stop.wait(self.tick):
            stamp = self._stamp
            lag = time.monotonic() - stamp
            if reported_at and stamp != reported_at:
                # the loop ran again: the stall lasted from the old stamp to the new one
                log.warning(
                    "event loop ran again after a stall of %.0f ms%s",
                    (stamp - reported_at) * 1000,
                    _since(at_report, kernel_sample(self._loop_native)),
                )
                reported_at = 0.0
            if not reported_at and lag > self.threshold + self.tick:
                reported_at = stamp
                self.stalls += 1
                at_report = kernel_sample(self._loop_native)
                log.warning(
                    "event loop blocked for %.0f ms so far; its thread is in:\n%s\n%s\nthe other threads:\n%s",
                    lag * 1000,
                    self._loop_stack(),
                    _describe(at_report, kernel_stack(self._loop_native)),
                    self._other_threads(),
                )

    def _loop_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "  (the loop's thread is gone)"
        return "".join(traceback.format_stack(frame)[-12:]).rstrip()

    def _other_threads(self) -> str:
        """One line per other thread of the process (not this one): its name and its innermost
        frames, innermost first."""
        frames = sys._current_frames()
        names = {t.ident: t.name for t in threading.enumerate()}
        me = threading.get_ident()
        lines = []
        for ident, frame in frames.items():
            if ident in (me, self._loop_thread):
                continue
            innermost = traceback.StackSummary.extract(
                traceback.walk_stack(frame), limit=OTHER_FRAMES, lookup_lines=False
            )
            where = " < ".join(f"{fs.name} ({os.path.basename(fs.filename)}:{fs.lineno})" for fs in innermost)
            lines.append(f"  {names.get(ident, ident)}: {where}")
        return "\n".join(sorted(lines)) or "  (none)"


class KernelSample(NamedTuple):
    """A thread as the kernel sees it (``/proc/self/task/TID``)."""

    #: ``stat``'s state letter: R (running, or waiting for a CPU), S (sleeping), D (uninterruptible)
    state: str
    #: the kernel function it sleeps in ("" when running)
    wchan: str
    #: ``schedstat``: nanoseconds on a CPU, and waiting on a run queue for one, since it started
    on_cpu_ns: int
    waiting_ns: int


_STATES = {"R": "running or waiting for a CPU", "S": "sleeping", "D": "in uninterruptible sleep"}


def kernel_sample(tid: int) -> KernelSample | None:
    """Thread ``tid``'s kernel figures; None where ``/proc`` does not have them."""
    base = f"/proc/self/task/{tid}"
    try:
        with open(f"{base}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"{base}/schedstat") as f:
            on_cpu, waiting = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open(f"{base}/wchan") as f:
            wchan = f.read().strip()
    except OSError:
        wchan = ""
    return KernelSample(state, "" if wchan == "0" else wchan, on_cpu, waiting)


def kernel_stack(tid: int, depth: int = 8) -> str:
    """Thread ``tid``'s kernel stack, innermost first (``/proc/self/task/TID/stack``: root only),
    "" where it cannot be read."""
    try:
        with open(f"/proc/self/task/{tid}/stack") as f:
            lines = f.read().split("\n")
    except OSError:
        return ""
    names = [ln.split("] ", 1)[-1].split("+", 1)[0] for ln in lines if ln.strip()]
    return " < ".join(names[:depth])


def _describe(sample: KernelSample | None, stack: str) -> str:
    if sample is None:
        return "its thread in the kernel: (not available here)"
    text = f"its thread in the kernel: {sample.state} ({_STATES.get(sample.state, 'state ' + sample.state)})"
    if sample.wchan:
        text += f" in {sample.wchan}"
    if stack:
        text += f"; kernel stack: {stack}"
    return text


def _since(before: KernelSample | None, now: KernelSample | None) -> str:
    """How the loop's thread spent the time from the report to now, for the "ran again" line."""
    if before is None or now is None:
        return ""
    on_cpu = (now.on_cpu_ns - before.on_cpu_ns) / 1e6
    waiting = (now.waiting_ns - before.waiting_ns) / 1e6
    return f" (from the report on, its thread spent {on_cpu:.0f} ms on a CPU and {waiting:.0f} ms waiting for one)"
