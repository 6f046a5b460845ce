"""The runtime rates of GET_BROKER_RUNTIME_INFO (``broker.stats.BrokerStats``): upstream
``StoreStatsService``'s three windows of 10, 60 and 600 one-second samples, as Java doubles."""

from __future__ import annotations

from time import monotonic_ns

import pytest
import trio
import trio.testing

from broker.stats import BrokerStats
from remoting.fastjson import java_double
from store.results import PutMessageResult, PutMessageStatus


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def sampled(stats: BrokerStats, clock: Clock, seconds: int, *, puts: int = 0, found: int = 0) -> None:
    """``seconds`` one-second samples, with ``puts`` puts and ``found`` successful pulls of one
    message each happening in every second before its sample."""
    for _ in range(seconds):
        clock.ms += 1000
        for _ in range(puts):
            stats.on_put("T", 1)
        for _ in range(found):
            stats.on_get(1)
        stats.sample()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (12.0, "12.0"),
        (12.5, "12.5"),
        (1 / 3, "0.3333333333333333"),
        (0.001, "0.001"),
        (2.5e-4, "2.5E-4"),
        (9_999_999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12_345_678.9, "1.23456789E7"),
        (-3.0, "-3.0"),
    ],
)
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text


def test_a_window_without_enough_samples_is_empty_and_fills_as_samples_come() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    table = stats.runtime_table()
    assert table["putTps"] == "  "  # no sample at all
    assert table["getTotalTps"] == "0.0 0.0 0.0"  # upstream counts missing windows as 0 there
    stats.sample()
    sampled(stats, clock, 10, puts=5)
    assert stats.runtime_table()["putTps"] == "5.0  "  # 11 samples: only the 10 s window
    sampled(stats, clock, 50, puts=5)
    assert stats.runtime_table()["putTps"] == "5.0 5.0 "


def test_each_window_averages_its_own_span() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    stats.sample()
    sampled(stats, clock, 590, puts=1)  # 1/s for almost ten minutes
    sampled(stats, clock, 50, puts=2)  # then 2/s
    sampled(stats, clock, 10, puts=10, found=4)  # then 10 puts and 4 found pulls a second
    table = stats.runtime_table()
    ten_min = (540 * 1 + 50 * 2 + 10 * 10) / 600
    assert table["putTps"] == f"10.0 {java_double((50 * 2 + 10 * 10) / 60)} {java_double(ten_min)}"
    assert table["getFoundTps"] == f"4.0 {java_double(40 / 60)} {java_double(40 / 600)}"
    assert table["getTransferredTps"] == table["getFoundTps"]  # one message per found pull
    assert table["getMissTps"] == "0.0 0.0 0.0"
    assert table["getTotalTps"] == table["getFoundTps"]
    # the totals are not touched by the windows
    assert table["msgPutTotalTodayNow"] == str(590 + 100 + 100)


def test_misses_count_in_the_total_and_the_miss_rate() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    stats.sample()
    for _ in range(10):
        clock.ms += 1000
        stats.on_get(3)
        stats.on_get(0)
        stats.on_get(0)
        stats.sample()
    table = stats.runtime_table()
    assert table["getMissTps"] == "2.0  "
    assert table["getFoundTps"] == "1.0  "
    assert table["getTransferredTps"] == "3.0  "
    assert table["getTotalTps"] == "3.0 0.0 0.0"


def test_only_the_last_601_samples_are_kept() -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    stats.sample()
    sampled(stats, clock, 600, puts=100)
    sampled(stats, clock, 600, puts=1)  # the busy ten minutes have left every window
    assert stats.sample_count == 601
    assert stats.runtime_table()["putTps"] == "1.0 1.0 1.0"


async def test_run_sampling_samples_once_a_second(autojump_clock: trio.testing.MockClock) -> None:
    clock = Clock()
    stats = BrokerStats(clock)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stats.run_sampling)
        for _ in range(10):
            await trio.sleep(1)
            clock.ms += 1000
            stats.on_put("T", 7)
        await trio.sleep(0.5)  # the sample of the 10th second
        nursery.cancel_scope.cancel()
    assert stats.sample_count == 11  # at 0, 1, ..., 10 s
    assert stats.runtime_table()["putTps"] == "7.0  "


def test_put_sizes_and_failures() -> None:
    stats = BrokerStats(Clock())
    table = stats.runtime_table()
    assert (table["putMessageSizeTotal"], table["putMessageAverageSize"], table["putMessageFailedTimes"]) == (
        "0",
        "0.0",
        "0",
    )
    began = monotonic_ns()
    stats.on_put_result("T", 1, PutMessageResult(PutMessageStatus.PUT_OK, 0, 200), began)
    stats.on_put_result("T", 3, PutMessageResult(PutMessageStatus.PUT_OK, 200, 700), began)  # a batch
    for status in (
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,  # stored, only not flushed in time
        PutMessageStatus.SERVICE_NOT_AVAILABLE,  # a slave: nothing was tried
    ):
        stats.on_put_result("T", 1, PutMessageResult(status), began)
    table = stats.runtime_table()
    assert table["msgPutTotalTodayNow"] == "4"
    assert table["putMessageSizeTotal"] == "900"
    assert table["putMessageAverageSize"] == "225.0"  # per message, as upstream divides
    assert table["putMessageFailedTimes"] == "2"


def test_put_times_are_reported_for_the_last_whole_minute() -> None:
    stats = BrokerStats(Clock())
    for ms in [0] * 90 + [3, 3, 7, 12, 12, 60, 250, 1500, 12_000] + [0]:
        stats.on_put_time(ms)
    stats.on_get_time(4)
    stats.on_get_time(2)
    table = stats.runtime_table()
    # maxima at once; the distribution and percentiles only once the minute is over
    assert table["putMessageEntireTimeMax"] == "12000"
    assert table["getMessageEntireTimeMax"] == "4"
    assert table["putMessageDistributeTime"].startswith("[<=0ms]:0 [0~10ms]:0 ")
    assert table["putLatency99"] == "0.00"
    stats.rotate_put_times()
    table = stats.runtime_table()
    assert table["putMessageDistributeTime"] == (
        "[<=0ms]:91 [0~10ms]:3 [10~50ms]:2 [50~100ms]:1 [100~200ms]:0 [200~500ms]:1 [500ms~1s]:0 "
        "[1~2s]:1 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:1 "
    )
    # upstream's quantile of 100 puts at 0.99: index 99, counted from 1 through the buckets --
    # the 99th put, 1500 ms, interpolated in its bucket (1000, 2000] as the 1st of 1
    assert table["putLatency99"] == "2000.00"
    assert table["putLatency999"] == "2000.00"
    assert stats.put_latency(0.90) == 90 / 91  # within (0, 1]: 90 of its 91 puts
    assert stats.put_latency(0.95) == 11.5  # the 95th: the first of the two in (11, 12]
    stats.rotate_put_times()  # a quiet minute
    assert stats.runtime_table()["putLatency99"] == "0.00"
    assert stats.runtime_table()["putMessageEntireTimeMax"] == "12000"  # since start, as upstream
