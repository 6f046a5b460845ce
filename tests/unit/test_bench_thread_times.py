"""bench.common.ThreadTimes: the per-thread CPU shares the broker benchmark prints for its rounds,
read from the scheduler's real counters of this very process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from bench.common import ThreadTimes


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1


def test_a_busy_other_thread_and_an_idle_main_thread() -> None:
    with ThreadTimes(os.getpid(), interval=0.02) as times:
        busy = threading.Thread(target=_spin, args=(0.6,))
        start = time.perf_counter()
        busy.start()
        time.sleep(0.5)  # the main thread sleeps meanwhile
        stop = time.perf_counter()
        busy.join()
    shares = times.shares(start, stop)
    assert shares is not None
    # the spinning thread had a CPU most of the time (the machine may be busy with other work);
    # the sleeping main thread next to none of it
    assert shares.others_on_cpu > 0.3
    assert shares.main_on_cpu < 0.1
    assert 0 <= shares.main_waiting < 0.1


def test_a_busy_main_thread() -> None:
    with ThreadTimes(os.getpid(), interval=0.02) as times:
        start = time.perf_counter()
        _spin(0.4)
        stop = time.perf_counter()
    shares = times.shares(start, stop)
    assert shares is not None
    assert shares.main_on_cpu > 0.3
    assert shares.main_on_cpu + shares.main_waiting <= 1.05  # shares of wall time
    assert shares.others_on_cpu < 0.2  # only the sampler itself, reading a few small files


def test_no_shares_outside_the_sampled_time() -> None:
    with ThreadTimes(os.getpid(), interval=0.02) as times:
        time.sleep(0.1)
    first = times.samples[0][0]
    assert times.shares(first - 10.0, first - 5.0) is None
    assert len(times.samples) >= 3
    # every sample read the main thread (the process id is its thread id)
    assert all(os.getpid() in sample for _, sample in times.samples)


def test_a_process_that_is_gone_gives_no_shares() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its /proc entry is gone
    with ThreadTimes(child.pid, interval=0.01) as times:
        time.sleep(0.05)
    assert len(times.samples) >= 3
    assert all(sample == {} for _, sample in times.samples)
    assert times.shares(times.samples[0][0], times.samples[-1][0]) is None
