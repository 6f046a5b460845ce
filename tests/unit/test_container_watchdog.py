"""The loop watchdog names a blocking call while the loop is stuck in it, says how long the stall
lasted once the loop runs again, and stays quiet while the loop runs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
import trio

from container.watchdog import LoopWatchdog


def _block_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # a blocking call on the event loop: what the watchdog is for


async def _watch_a_stall(
    caplog: pytest.LogCaptureFixture, block: Callable[[], None]
) -> tuple[LoopWatchdog, list[str], list[str]]:
    """Run ``block()`` on a watched loop; (the watchdog, its "blocked" and "ran again" lines)."""
    caplog.set_level(logging.WARNING, logger="container.watchdog")
    dog = LoopWatchdog(threshold=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(dog.run)
        await trio.sleep(0.3)
        assert dog.stalls == 0
        block()
        await trio.sleep(0.2)  # the watcher notices the loop ran again
        nursery.cancel_scope.cancel()
    messages = [r.getMessage() for r in caplog.records]
    blocked = [m for m in messages if "blocked for" in m]
    resumed = [m for m in messages if "ran again after a stall of" in m]
    return dog, blocked, resumed


async def test_a_blocked_loop_is_reported_with_its_stack(caplog: pytest.LogCaptureFixture) -> None:
    dog, blocked, resumed = await _watch_a_stall(caplog, lambda: _block_the_loop_for(0.6))
    assert dog.stalls == 1
    assert len(blocked) == 1
    assert "_block_the_loop_for" in blocked[0]
    assert "time.sleep(seconds)" in blocked[0]
    # what the kernel had the thread doing: asleep (in the nanosleep, where the stack is readable)
    assert "its thread in the kernel: S (sleeping)" in blocked[0]
    if "kernel stack:" in blocked[0]:
        assert "nanosleep" in blocked[0].split("kernel stack:", 1)[1]
    assert len(resumed) == 1
    stall_ms = float(resumed[0].split("stall of ", 1)[1].split(" ms")[0])
    assert 500 <= stall_ms < 2000
    on_cpu, waiting = _spent(resumed[0])
    assert on_cpu < 100  # asleep, not on a CPU
    assert waiting < 100


def _spent(resumed: str) -> tuple[float, float]:
    """(ms on a CPU, ms waiting for one) from a "ran again" line."""
    tail = resumed.split("its thread spent ", 1)[1]
    on_cpu = float(tail.split(" ms on a CPU", 1)[0])
    waiting = float(tail.split(" and ", 1)[1].split(" ms waiting", 1)[0])
    return on_cpu, waiting


def _spin_the_loop_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:  # a long computation on the event loop
        pass


async def test_a_busy_loop_is_reported_on_a_cpu(caplog: pytest.LogCaptureFixture) -> None:
    _, blocked, resumed = await _watch_a_stall(caplog, lambda: _spin_the_loop_for(1.0))
    assert len(blocked) == 1
    assert "_spin_the_loop_for" in blocked[0]
    assert "its thread in the kernel: R (running or waiting for a CPU)" in blocked[0]
    on_cpu, waiting = _spent(resumed[0])
    # from the report (after ~0.25 s) to the end of the spin: ~0.75 s, spent on a CPU or waiting
    # for one (the watcher itself takes a CPU now and then)
    assert on_cpu + waiting > 500
    assert on_cpu > 250


def _a_worker_waiting(event: threading.Event) -> None:
    event.wait()


async def test_a_stall_report_names_where_the_other_threads_are(caplog: pytest.LogCaptureFixture) -> None:
    # a loop waiting for the GIL shows in a call that releases it; the thread holding the GIL is
    # one of the others, so the report lists them
    caplog.set_level(logging.WARNING, logger="container.watchdog")
    release = threading.Event()
    worker = threading.Thread(target=_a_worker_waiting, args=(release,), name="store-flush-worker")
    worker.start()
    try:
        dog = LoopWatchdog(threshold=0.1)
        async with trio.open_nursery() as nursery:
            await nursery.start(dog.run)
            _block_the_loop_for(0.4)
            await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    finally:
        release.set()
        worker.join()
    blocked = [r.getMessage() for r in caplog.records if "blocked for" in r.getMessage()]
    assert len(blocked) == 1
    others = blocked[0].split("the other threads:\n", 1)[1]
    line = next(ln for ln in others.splitlines() if "store-flush-worker" in ln)
    assert "wait (threading.py" in line
    assert "_a_worker_waiting (test_container_watchdog.py" in line
    assert "loop-watchdog" not in others  # the watcher itself is left out


async def test_a_running_loop_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="container.watchdog")
    dog = LoopWatchdog(threshold=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(dog.run)
        for _ in range(10):
            _block_the_loop_for(0.05)  # short blocking calls, each well under the threshold
            await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    assert dog.stalls == 0
    assert not [r for r in caplog.records if r.name == "container.watchdog"]


def test_the_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_LOOP_STALL_MS", "120")
    assert LoopWatchdog().threshold == pytest.approx(0.12)
    monkeypatch.setenv("RMQ_LOOP_STALL_MS", "soon")
    assert LoopWatchdog().threshold == pytest.approx(0.5)
    monkeypatch.delenv("RMQ_LOOP_STALL_MS")
    assert LoopWatchdog().threshold == pytest.approx(0.5)
    assert LoopWatchdog(threshold=0.3).threshold == pytest.approx(0.3)
    # it looks every fifth of the threshold: 100 ms for the default, at least every 5 ms
    assert (LoopWatchdog().tick, LoopWatchdog(threshold=0.001).tick) == pytest.approx((0.1, 0.005))
