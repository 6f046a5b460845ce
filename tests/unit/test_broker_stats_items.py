"""The per-key broker statistics (``broker.stats_items``): upstream ``StatsItem``'s snapshot lists
and window math with explicit timestamps, the broker's stat names and keys, removal, and
statsAll's number format."""

from __future__ import annotations

import trio
import trio.testing

from broker.stats_items import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    IDLE_EXPIRY_MS,
    SAMPLE_CHUNK,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStatsItems,
    StatsItem,
)
from client.admin_stats_cli import java_fixed2
from remoting.protocol.broker import BrokerStatsData, BrokerStatsItem

T0 = 1_700_000_000_000
S10, MIN10, HOUR = 10_000, 600_000, 3_600_000


def data(items: BrokerStatsItems, name: str, key: str) -> BrokerStatsData:
    found = items.stats_data(name, key)
    assert found is not None, f"{name} {key} missing"
    return found


def test_the_first_sample_counts_everything_since_creation_over_one_period() -> None:
    item = StatsItem("T")
    item.add(5)
    item.sample_seconds(T0)
    item.sample_minutes(T0)
    item.sample_hour(T0)
    got = item.stats_data()
    # a zero snapshot one period back is the window's start
    assert got.statsMinute == BrokerStatsItem(sum=5, tps=0.5, avgpt=5.0)
    assert got.statsHour == BrokerStatsItem(sum=5, tps=5 * 1000 / MIN10, avgpt=5.0)
    assert got.statsDay == BrokerStatsItem(sum=5, tps=5 * 1000 / HOUR, avgpt=5.0)


def test_an_item_never_sampled_reports_zeros() -> None:
    item = StatsItem("T")
    item.add(7)
    assert item.stats_data() == BrokerStatsData()


def test_the_minute_window_spans_the_last_seven_snapshots() -> None:
    item = StatsItem("T")
    for i in range(10):  # snapshots at T0 .. T0 + 90 s; 3 messages in 1 call before each
        item.add(3)
        item.sample_seconds(T0 + i * S10)
    minute = item.stats_data().statsMinute
    # the window is T0 + 30 s (value 12) .. T0 + 90 s (value 30)
    assert minute.sum == 18
    assert minute.tps == 18 * 1000 / 60_000
    assert minute.avgpt == 3.0


def test_the_hour_and_day_windows_keep_seven_and_twentyfive_snapshots() -> None:
    item = StatsItem("T")
    for i in range(30):
        item.add(2)
        item.sample_minutes(T0 + i * MIN10)
        item.sample_hour(T0 + i * HOUR)
    got = item.stats_data()
    assert got.statsHour == BrokerStatsItem(sum=12, tps=12 * 1000 / (6 * MIN10), avgpt=2.0)
    assert got.statsDay == BrokerStatsItem(sum=48, tps=48 * 1000 / (24 * HOUR), avgpt=2.0)


def test_avgpt_is_the_sum_per_counted_call_and_zero_without_calls() -> None:
    item = StatsItem("T")
    item.add(32)  # one batch of 32
    item.add(1)
    item.add(1)
    item.sample_seconds(T0)
    assert item.stats_data().statsMinute.avgpt == 34 / 3

    value_only = StatsItem("cluster")
    value_only.add(10, times=0)  # upstream's BROKER_*_NUMS add to the value only
    value_only.sample_seconds(T0)
    assert value_only.stats_data().statsMinute == BrokerStatsItem(sum=10, tps=1.0, avgpt=0.0)


def test_a_sample_not_later_than_the_last_is_dropped() -> None:
    item = StatsItem("T")
    item.add(4)
    item.sample_seconds(T0)
    item.add(6)
    item.sample_seconds(T0)  # same instant: dropped
    item.sample_seconds(T0 - 5_000)  # clock stepped back: dropped
    assert item.stats_data().statsMinute == BrokerStatsItem(sum=4, tps=0.4, avgpt=4.0)
    item.sample_seconds(T0 + S10)
    assert item.stats_data().statsMinute == BrokerStatsItem(sum=10, tps=0.5, avgpt=5.0)


def test_a_batch_send_is_one_increment_and_keys_are_upstreams() -> None:
    items = BrokerStatsItems("DefaultCluster")
    items.on_put("T", 32, 32 * 300)
    items.on_put("T", 1, 310)
    items.on_get("G", "T", 20, 6000)
    items.on_get("G", "T", 13, 3910)
    items.on_get("H", "T", 1, 300)
    items.on_send_back("G", "T")
    items.sample_seconds(T0)

    assert data(items, TOPIC_PUT_NUMS, "T").statsMinute == BrokerStatsItem(sum=33, tps=3.3, avgpt=16.5)
    assert data(items, TOPIC_PUT_SIZE, "T").statsMinute.sum == 32 * 300 + 310
    assert data(items, GROUP_GET_NUMS, "T@G").statsMinute == BrokerStatsItem(sum=33, tps=3.3, avgpt=16.5)
    assert data(items, GROUP_GET_SIZE, "T@G").statsMinute.sum == 9910
    assert data(items, GROUP_GET_NUMS, "T@H").statsMinute.sum == 1
    assert data(items, SNDBCK_PUT_NUMS, "T@G").statsMinute.sum == 1
    # broker-wide, keyed by the cluster, value only
    assert data(items, BROKER_PUT_NUMS, "DefaultCluster").statsMinute == BrokerStatsItem(sum=33, tps=3.3)
    assert data(items, BROKER_GET_NUMS, "DefaultCluster").statsMinute == BrokerStatsItem(sum=34, tps=3.4)

    assert items.stats_data(TOPIC_PUT_NUMS, "Other") is None
    assert items.stats_data(GROUP_GET_NUMS, "T") is None
    assert items.stats_data("QUEUE_PUT_NUMS", "T@0") is None


def test_broker_wide_items_exist_from_the_first_put_or_get() -> None:
    items = BrokerStatsItems("C")
    assert items.stats_data(BROKER_PUT_NUMS, "C") is None
    items.on_put("T", 1, 100)
    assert items.stats_data(BROKER_PUT_NUMS, "C") is not None
    assert items.stats_data(BROKER_GET_NUMS, "C") is None
    items.on_get("G", "T", 1, 100)
    assert items.stats_data(BROKER_GET_NUMS, "C") is not None


def test_deleting_a_topic_or_a_group_forgets_its_items() -> None:
    items = BrokerStatsItems("C")
    for topic in ("T", "U"):
        items.on_put(topic, 1, 100)
        for group in ("G", "H"):
            items.on_get(group, topic, 1, 100)
            items.on_send_back(group, topic)

    items.on_topic_deleted("T")
    assert items.stats_data(TOPIC_PUT_NUMS, "T") is None
    assert items.stats_data(TOPIC_PUT_SIZE, "T") is None
    for group in ("G", "H"):
        assert items.stats_data(GROUP_GET_NUMS, f"T@{group}") is None
        assert items.stats_data(SNDBCK_PUT_NUMS, f"T@{group}") is None
        assert items.stats_data(GROUP_GET_NUMS, f"U@{group}") is not None
    assert items.stats_data(TOPIC_PUT_NUMS, "U") is not None

    items.on_group_deleted("G")
    assert items.stats_data(GROUP_GET_NUMS, "U@G") is None
    assert items.stats_data(GROUP_GET_SIZE, "U@G") is None
    assert items.stats_data(SNDBCK_PUT_NUMS, "U@G") is None
    assert items.stats_data(GROUP_GET_NUMS, "U@H") is not None
    assert items.stats_data(BROKER_GET_NUMS, "C") is not None

    # a later increment starts the item afresh
    items.on_put("T", 2, 200)
    items.sample_seconds(T0)
    assert data(items, TOPIC_PUT_NUMS, "T").statsMinute.sum == 2


def test_items_idle_for_longer_than_a_day_expire_and_busy_ones_stay() -> None:
    items = BrokerStatsItems("C")
    items.on_put("Idle", 1, 100)
    items.on_put("Busy", 1, 100)
    items.on_get("G", "Idle", 1, 100)
    items.on_send_back("G", "Idle")
    now = T0
    items.sample_seconds(now)
    end = T0 + IDLE_EXPIRY_MS + MIN10
    while now < end:
        now += MIN10
        items.on_put("Busy", 1, 100)
        items.sample_seconds(now)
        items.sample_minutes(now)  # expires what has been idle too long
        if now - T0 <= IDLE_EXPIRY_MS:
            assert items.stats_data(TOPIC_PUT_NUMS, "Idle") is not None, now - T0
    assert items.stats_data(TOPIC_PUT_NUMS, "Idle") is None
    assert items.stats_data(GROUP_GET_NUMS, "Idle@G") is None
    assert items.stats_data(SNDBCK_PUT_NUMS, "Idle@G") is None
    assert items.stats_data(TOPIC_PUT_NUMS, "Busy") is not None
    # the broker-wide items are never dropped
    assert items.stats_data(BROKER_PUT_NUMS, "C") is not None
    assert items.stats_data(BROKER_GET_NUMS, "C") is not None


async def test_the_sampling_task_runs_every_10_s_10_min_and_hour(
    autojump_clock: trio.testing.MockClock,
) -> None:
    items = BrokerStatsItems("C")
    items.on_put("T", 6, 600)

    def now_ms() -> int:
        return T0 + round(trio.current_time() * 1000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(items.run_sampling, now_ms)
        await trio.sleep(5)  # the first runs of all three samplers, at once, saw the 6 messages
        items.on_put("T", 4, 400)
        await trio.sleep(3600)  # the runs up to the hourly one at 1 h
        nursery.cancel_scope.cancel()
    got = data(items, TOPIC_PUT_NUMS, "T")
    # minute: the snapshots of the last 60 s, when nothing moved
    assert got.statsMinute == BrokerStatsItem(sum=0, tps=0.0, avgpt=0.0)
    # hour: the seven snapshots of 0, 10 min, ..., 1 h (the zero seed dropped): the second put
    assert got.statsHour == BrokerStatsItem(sum=4, tps=4 * 1000 / HOUR, avgpt=4.0)
    # day: the zero seed 1 h before the start, 6 messages at the start, 10 at 1 h
    assert got.statsDay == BrokerStatsItem(sum=10, tps=10 * 1000 / (2 * HOUR), avgpt=5.0)


async def test_the_sampling_task_lets_other_tasks_run_between_chunks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    items = BrokerStatsItems("C")
    for t in range(SAMPLE_CHUNK + 10):
        items.on_put(f"T{t}", 1, 10)
    nums = items.sets[TOPIC_PUT_NUMS].items

    class Steps(trio.abc.Instrument):
        """How many items were sampled whenever the sampling task gave the loop back."""

        def __init__(self) -> None:
            self.sampled: list[int] = []

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            if task.name.endswith("run_sampling"):
                self.sampled.append(sum(1 for item in nums.values() if item.minute))

    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(items.run_sampling, lambda: T0)
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(steps)
    # the first round stopped after one chunk of the TOPIC_PUT_NUMS items, then went on
    assert SAMPLE_CHUNK in steps.sampled, steps.sampled
    assert steps.sampled[-1] == len(nums)


def test_stats_all_prints_tps_as_java_percent_2f() -> None:
    # Java rounds the shortest decimal form half up; Python's format rounds the binary value
    assert [java_fixed2(v) for v in (0.125, 2.675, 0.05, 1 / 3, 0.0, 1234.5)] == [
        "0.13",
        "2.68",
        "0.05",
        "0.33",
        "0.00",
        "1234.50",
    ]


async def test_the_idle_expiry_of_the_sampling_task_yields_between_chunks_and_re_checks() -> None:
    items = BrokerStatsItems("C")
    topics = [f"T{t}" for t in range(SAMPLE_CHUNK + 10)]
    for topic in topics:
        items.on_put(topic, 1, 10)
        items.on_get("G", topic, 1, 10)
    items.sample_seconds(T0)
    now = T0 + IDLE_EXPIRY_MS + 1
    puts = items.sets[TOPIC_PUT_NUMS].items

    class Steps(trio.abc.Instrument):
        """Counts the expiry task's steps; after its first one (a chunk looked at, nothing dropped
        yet) topic T0 -- found idle already -- counts again."""

        def __init__(self) -> None:
            self.steps = 0

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            if task.name.endswith("_expire_idle_in_chunks"):
                self.steps += 1
                if self.steps == 1:
                    assert len(puts) == len(topics), "nothing dropped before the scan ends"
                    puts["T0"].last_update_ms = now

    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(items._expire_idle_in_chunks, now)
    finally:
        trio.lowlevel.remove_instrument(steps)
    # puts (2 chunks), then pulls (2 chunks): a yield after each
    assert steps.steps >= 4, steps.steps
    assert set(puts) == {"T0"}, "busy again while the scan yielded: kept"
    assert items.stats_data(GROUP_GET_NUMS, "T1@G") is None
    assert items.stats_data(GROUP_GET_NUMS, "T0@G") is None, "its pull item stayed idle"
