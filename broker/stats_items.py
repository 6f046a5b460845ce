"""Per-key broker statistics (upstream ``StatsItem`` / ``StatsItemSet`` and the part of
``BrokerStatsManager`` that keeps them) and VIEW_BROKER_STATS_DATA (315), what mqadmin
``statsAll`` reads.

The statistics kept, by upstream's names and keys:

- ``TOPIC_PUT_NUMS`` / ``TOPIC_PUT_SIZE``, key the topic: messages and record bytes stored by a
  send (a batch of 32 is one increment of 32, ``times`` + 1);
- ``GROUP_GET_NUMS`` / ``GROUP_GET_SIZE``, key ``topic@group``: messages and bytes a pull found;
- ``BROKER_PUT_NUMS`` / ``BROKER_GET_NUMS``, key the cluster name: messages stored and pulled
  (upstream adds to the value only, so their ``times`` stay 0 and ``avgpt`` is 0);
- ``SNDBCK_PUT_NUMS``, key ``topic@group`` (the message's original topic): messages a consumer
  sent back.

An item exists from its first increment; asking for any other name or key is upstream's
SYSTEM_ERROR ``The stats <name> <key> not exist``.

Each item has a ``value`` and a ``times`` counter and three lists of snapshots (timestamp ms,
times, value): every 10 s into the minute list (at most 7), every 10 min into the hour list (at
most 7), every hour into the day list (at most 25). A list's first snapshot is preceded by a
zero one a period earlier, so the first window counts everything since the item was created.
A window's ``sum`` is the last value minus the first, ``tps`` that sum per second between the
two snapshots, ``avgpt`` the sum per counted call (0 when no call was counted).

Choices of ours, each deliberate:

- Increments read no clock (upstream stamps ``lastUpdateTimestamp`` on each): the 10-s sampler
  notes when an item's counters moved. Items of the topic and group statistics idle for more
  than :data:`IDLE_EXPIRY_MS` (25 h: every window of theirs shows zeros by then) are dropped by
  the 10-min sampler and answer "not exist" afterwards, as an item never written. Upstream keeps
  them unless ``maxStatsIdleTimeInMinutes`` is set (default -1, never); the cap keeps a broker
  that saw many short-lived topics or groups from holding them forever.
  :meth:`BrokerStatsItems.on_topic_deleted` / :meth:`~BrokerStatsItems.on_group_deleted` are
  upstream's ``onTopicDeleted`` / ``onGroupDeleted``.
- A snapshot not later than its list's last one is dropped: a window needs increasing
  timestamps (upstream would record a wall clock stepped back and report a negative or infinite
  tps for that window). After such a step the windows resume once the clock passes the last
  snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import decode_header
from remoting.protocol.broker import BrokerStatsData, BrokerStatsItem, ViewBrokerStatsDataRequestHeader

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from remoting.processor import RequestContext

__all__ = [
    "BROKER_GET_NUMS",
    "BROKER_PUT_NUMS",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "IDLE_EXPIRY_MS",
    "SNDBCK_PUT_NUMS",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "BrokerStatsItems",
    "StatsItem",
    "StatsItemSet",
    "view_broker_stats_data",
    "window",
]

log = logging.getLogger("broker.stats")

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"

#: sampling periods (ms) and list lengths of the minute, hour and day windows (upstream's)
SECONDS_PERIOD_MS = 10_000
MINUTES_PERIOD_MS = 600_000
HOUR_PERIOD_MS = 3_600_000
MINUTE_SNAPSHOTS = 7
HOUR_SNAPSHOTS = 7
DAY_SNAPSHOTS = 25

#: a topic or group item whose counters did not move for this long is dropped (module docstring)
IDLE_EXPIRY_MS = DAY_SNAPSHOTS * HOUR_PERIOD_MS

#: items the sampling task samples between two checkpoints: a broker with 10,000 topics, each
#: with a consuming group, holds 40,000 items, and sampling them in one go held its event loop
#: for ~70 ms every 10 s
SAMPLE_CHUNK = 2000

#: (timestamp ms, times, value): upstream ``CallSnapshot``
Snapshot = tuple[int, int, int]


def _snapshot(
    snapshots: list[Snapshot], keep: int, now_ms: int, period_ms: int, times: int, value: int
) -> None:
    """Append the counters at ``now_ms`` (a zero seed one period earlier first when the list is
    empty), keeping the last ``keep``; a timestamp not after the last snapshot's is ignored.
    (Lists, not ``deque(maxlen=…)``: an empty deque takes ~600 bytes, and a broker keeps three per
    item, two items per consuming group -- a test suite making a group per test made them a
    quarter of the memory a group costs.)"""
    if snapshots:
        if now_ms <= snapshots[-1][0]:
            return
    else:
        snapshots.append((now_ms - period_ms, 0, 0))
    snapshots.append((now_ms, times, value))
    if len(snapshots) > keep:
        del snapshots[0]


def window(snapshots: list[Snapshot]) -> BrokerStatsItem:
    """Upstream ``StatsItem.computeStatsData`` of one list: sum, tps and avgpt between its first
    and last snapshot (all zero for an empty list)."""
    if not snapshots:
        return BrokerStatsItem()
    (t0, n0, v0), (t1, n1, v1) = snapshots[0], snapshots[-1]
    total = v1 - v0
    calls = n1 - n0
    return BrokerStatsItem(
        sum=total,
        tps=total * 1000.0 / (t1 - t0) if t1 > t0 else 0.0,
        avgpt=total / calls if calls > 0 else 0.0,
    )


class StatsItem:
    """The counters of one key of one statistic and their snapshots (upstream ``StatsItem``).

    Callers add to :attr:`value` and :attr:`times` directly; that is the whole hot path.
    """

    __slots__ = (
        "_seen_times",
        "_seen_value",
        "day",
        "hour",
        "key",
        "last_update_ms",
        "minute",
        "times",
        "value",
    )

    def __init__(self, key: str) -> None:
        self.key = key
        self.value = 0
        self.times = 0
        self.minute: list[Snapshot] = []
        self.hour: list[Snapshot] = []
        self.day: list[Snapshot] = []
        #: when the 10-s sampler last saw the counters move; -1 until its first look
        self.last_update_ms = -1
        self._seen_value = 0
        self._seen_times = 0

    def add(self, value: int, times: int = 1) -> None:
        self.value += value
        self.times += times

    def sample_seconds(self, now_ms: int) -> None:
        """Upstream ``samplingInSeconds`` (every 10 s); also notes whether the counters moved."""
        value, times = self.value, self.times
        if self.last_update_ms < 0 or value != self._seen_value or times != self._seen_times:
            self.last_update_ms = now_ms
            self._seen_value, self._seen_times = value, times
        _snapshot(self.minute, MINUTE_SNAPSHOTS, now_ms, SECONDS_PERIOD_MS, times, value)

    def sample_minutes(self, now_ms: int) -> None:
        """Upstream ``samplingInMinutes`` (every 10 min)."""
        _snapshot(self.hour, HOUR_SNAPSHOTS, now_ms, MINUTES_PERIOD_MS, self.times, self.value)

    def sample_hour(self, now_ms: int) -> None:
        """Upstream ``samplingInHour`` (every hour)."""
        _snapshot(self.day, DAY_SNAPSHOTS, now_ms, HOUR_PERIOD_MS, self.times, self.value)

    def idle(self, now_ms: int) -> bool:
        """Whether the counters have not moved for more than :data:`IDLE_EXPIRY_MS`."""
        return self.last_update_ms >= 0 and now_ms - self.last_update_ms > IDLE_EXPIRY_MS

    def stats_data(self) -> BrokerStatsData:
        return BrokerStatsData(
            statsMinute=window(self.minute), statsHour=window(self.hour), statsDay=window(self.day)
        )


class StatsItemSet:
    """The items of one statistic by key (upstream ``StatsItemSet``)."""

    __slots__ = ("items", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: dict[str, StatsItem] = {}

    def get_and_create(self, key: str) -> StatsItem:
        item = self.items.get(key)
        if item is None:
            item = self.items[key] = StatsItem(key)
        return item

    def sample_seconds(self, now_ms: int) -> None:
        for item in self.items.values():
            item.sample_seconds(now_ms)

    def sample_minutes(self, now_ms: int) -> None:
        for item in self.items.values():
            item.sample_minutes(now_ms)

    def sample_hour(self, now_ms: int) -> None:
        for item in self.items.values():
            item.sample_hour(now_ms)


#: entries looked at by the idle expiry: (topic, (nums, sizes)), (topic, group, (nums, sizes)),
#: (topic@group key, item)
_PutEntry = tuple[str, tuple[StatsItem, StatsItem]]
_GetEntry = tuple[str, str, tuple[StatsItem, StatsItem]]
_BackEntry = tuple[str, StatsItem]


class BrokerStatsItems:
    """The broker's statistics items (the ``StatsItemSet`` part of upstream ``BrokerStatsManager``).

    :meth:`on_put` and :meth:`on_get` are on the send and pull paths: one or two dict look-ups
    and a few additions; the items of a key are made (and indexed) on its first increment only.
    """

    __slots__ = ("_broker_get", "_broker_put", "_gets", "_puts", "cluster", "sets")

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.sets: dict[str, StatsItemSet] = {
            name: StatsItemSet(name)
            for name in (
                TOPIC_PUT_NUMS,
                TOPIC_PUT_SIZE,
                GROUP_GET_NUMS,
                GROUP_GET_SIZE,
                BROKER_PUT_NUMS,
                BROKER_GET_NUMS,
                SNDBCK_PUT_NUMS,
            )
        }
        #: topic -> its (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE) items: the send path's index
        self._puts: dict[str, tuple[StatsItem, StatsItem]] = {}
        #: topic -> group -> its (GROUP_GET_NUMS, GROUP_GET_SIZE) items: the pull path's index
        #: (no ``topic@group`` string built per pull)
        self._gets: dict[str, dict[str, tuple[StatsItem, StatsItem]]] = {}
        # made now, listed in their sets on the first put / get (upstream creates them then)
        self._broker_put = StatsItem(cluster)
        self._broker_get = StatsItem(cluster)

    # --- increments (hot) ---------------------------------------------------------------------

    def on_put(self, topic: str, count: int, size: int) -> None:
        """A send stored ``count`` messages of ``size`` record bytes in ``topic`` (upstream
        ``incTopicPutNums(topic, num, 1)``, ``incTopicPutSize``, ``incBrokerPutNums``)."""
        pair = self._puts.get(topic)
        if pair is None:
            pair = self._new_put(topic)
        nums, sizes = pair
        nums.value += count
        nums.times += 1
        sizes.value += size
        sizes.times += 1
        self._broker_put.value += count

    def on_get(self, group: str, topic: str, count: int, size: int) -> None:
        """A pull of ``group`` found ``count`` messages of ``size`` bytes in ``topic`` (upstream
        ``incGroupGetNums``, ``incGroupGetSize``, ``incBrokerGetNums``)."""
        by_group = self._gets.get(topic)
        pair = None if by_group is None else by_group.get(group)
        if pair is None:
            pair = self._new_get(topic, group)
        nums, sizes = pair
        nums.value += count
        nums.times += 1
        sizes.value += size
        sizes.times += 1
        self._broker_get.value += count

    def on_send_back(self, group: str, topic: str) -> None:
        """A consumer of ``group`` sent a message of ``topic`` back (upstream ``incSendBackNums``)."""
        self.sets[SNDBCK_PUT_NUMS].get_and_create(f"{topic}@{group}").add(1)

    def _new_put(self, topic: str) -> tuple[StatsItem, StatsItem]:
        pair = self._puts[topic] = (
            self.sets[TOPIC_PUT_NUMS].get_and_create(topic),
            self.sets[TOPIC_PUT_SIZE].get_and_create(topic),
        )
        self.sets[BROKER_PUT_NUMS].items.setdefault(self.cluster, self._broker_put)
        return pair

    def _new_get(self, topic: str, group: str) -> tuple[StatsItem, StatsItem]:
        key = f"{topic}@{group}"
        pair = self._gets.setdefault(topic, {})[group] = (
            self.sets[GROUP_GET_NUMS].get_and_create(key),
            self.sets[GROUP_GET_SIZE].get_and_create(key),
        )
        self.sets[BROKER_GET_NUMS].items.setdefault(self.cluster, self._broker_get)
        return pair

    # --- look-up --------------------------------------------------------------------------------

    def stats_data(self, name: str, key: str) -> BrokerStatsData | None:
        """The minute, hour and day windows of item ``key`` of statistic ``name``; None when
        there is no such item (upstream ``BrokerStatsManager.getStatsItem`` null)."""
        stats = self.sets.get(name)
        item = None if stats is None else stats.items.get(key)
        return None if item is None else item.stats_data()

    # --- sampling -------------------------------------------------------------------------------

    def sample_seconds(self, now_ms: int) -> None:
        """The 10-s sampler of every item (upstream ``StatsItemSet.samplingInSeconds``)."""
        for stats in self.sets.values():
            stats.sample_seconds(now_ms)

    def sample_minutes(self, now_ms: int) -> None:
        """The 10-min sampler of every item; then drops idle items (module docstring)."""
        for stats in self.sets.values():
            stats.sample_minutes(now_ms)
        self.expire_idle(now_ms)

    def sample_hour(self, now_ms: int) -> None:
        """The hourly sampler of every item."""
        for stats in self.sets.values():
            stats.sample_hour(now_ms)

    async def run_sampling(self, now_ms: Callable[[], int]) -> None:
        """Run the three samplers at their fixed rates from now on, the first runs at once (as
        upstream schedules them), stamping snapshots with ``now_ms()``; forever."""
        start = trio.current_time()
        periods = (SECONDS_PERIOD_MS / 1000, MINUTES_PERIOD_MS / 1000, HOUR_PERIOD_MS / 1000)
        samplers = (StatsItem.sample_seconds, StatsItem.sample_minutes, StatsItem.sample_hour)
        due = [0.0, 0.0, 0.0]  # next run of each sampler, seconds after start
        while True:
            elapsed = trio.current_time() - start
            now = now_ms()
            for i, sampler in enumerate(samplers):
                if elapsed >= due[i]:
                    await self._sample_in_chunks(sampler, now)
                    if sampler is StatsItem.sample_minutes:
                        await self._expire_idle_in_chunks(now)
                    while due[i] <= elapsed:  # a run missed while the loop was busy is skipped
                        due[i] += periods[i]
            await trio.sleep_until(start + min(due))

    async def _sample_in_chunks(self, sample: Callable[[StatsItem, int], None], now_ms: int) -> None:
        """``sample(item, now_ms)`` for every item, letting other tasks run every
        :data:`SAMPLE_CHUNK` items (items made meanwhile wait for the next round)."""
        for stats in list(self.sets.values()):
            items = list(stats.items.values())
            for i in range(0, len(items), SAMPLE_CHUNK):
                for item in items[i : i + SAMPLE_CHUNK]:
                    sample(item, now_ms)
                await trio.lowlevel.checkpoint()

    # --- removal --------------------------------------------------------------------------------

    def expire_idle(self, now_ms: int) -> None:
        """Drop the topic and group items idle for more than :data:`IDLE_EXPIRY_MS`."""
        puts, gets, backs = self._idle_entries()
        self._drop_idle(
            self._idle_puts(puts, now_ms),
            self._idle_gets(gets, now_ms),
            self._idle_backs(backs, now_ms),
            now_ms,
        )

    async def _expire_idle_in_chunks(self, now_ms: int) -> None:
        """:meth:`expire_idle`, letting other tasks run every :data:`SAMPLE_CHUNK` items looked at
        (a broker with 10,000 topics and a group on each holds 20,000 topic and pull entries)."""
        puts, gets, backs = self._idle_entries()
        chunk = SAMPLE_CHUNK
        idle_puts: list[str] = []
        for i in range(0, len(puts), chunk):
            idle_puts += self._idle_puts(puts[i : i + chunk], now_ms)
            await trio.lowlevel.checkpoint()
        idle_gets: list[tuple[str, str]] = []
        for i in range(0, len(gets), chunk):
            idle_gets += self._idle_gets(gets[i : i + chunk], now_ms)
            await trio.lowlevel.checkpoint()
        idle_backs: list[str] = []
        for i in range(0, len(backs), chunk):
            idle_backs += self._idle_backs(backs[i : i + chunk], now_ms)
            await trio.lowlevel.checkpoint()
        self._drop_idle(idle_puts, idle_gets, idle_backs, now_ms)

    def _idle_entries(self) -> tuple[list[_PutEntry], list[_GetEntry], list[_BackEntry]]:
        """Snapshots of the entries :meth:`expire_idle` looks at: topic puts, topic@group pulls,
        send-backs."""
        gets = [(t, g, pair) for t, by_group in self._gets.items() for g, pair in by_group.items()]
        return list(self._puts.items()), gets, list(self.sets[SNDBCK_PUT_NUMS].items.items())

    @staticmethod
    def _idle_puts(entries: list[_PutEntry], now_ms: int) -> list[str]:
        return [t for t, (nums, sizes) in entries if nums.idle(now_ms) and sizes.idle(now_ms)]

    @staticmethod
    def _idle_gets(entries: list[_GetEntry], now_ms: int) -> list[tuple[str, str]]:
        return [(t, g) for t, g, (nums, sizes) in entries if nums.idle(now_ms) and sizes.idle(now_ms)]

    @staticmethod
    def _idle_backs(entries: list[_BackEntry], now_ms: int) -> list[str]:
        return [k for k, item in entries if item.idle(now_ms)]

    def _drop_idle(self, puts: list[str], gets: list[tuple[str, str]], backs: list[str], now_ms: int) -> None:
        """Drop the entries found idle, each only if it still is (found while other tasks ran, it
        may have counted again since)."""
        dropped = [0, 0, 0]
        for topic in puts:
            pair = self._puts.get(topic)
            if pair is not None and pair[0].idle(now_ms) and pair[1].idle(now_ms):
                self._drop_put(topic)
                dropped[0] += 1
        for topic, group in gets:
            pair = self._gets.get(topic, {}).get(group)
            if pair is not None and pair[0].idle(now_ms) and pair[1].idle(now_ms):
                self._drop_get(topic, group)
                dropped[1] += 1
        send_backs = self.sets[SNDBCK_PUT_NUMS].items
        for key in backs:
            item = send_backs.get(key)
            if item is not None and item.idle(now_ms):
                del send_backs[key]
                dropped[2] += 1
        if any(dropped):
            log.info(
                "dropped the statistics of %d topics, %d topic@group pulls and %d send-backs idle for %d h",
                *dropped,
                IDLE_EXPIRY_MS // HOUR_PERIOD_MS,
            )

    def on_topic_deleted(self, topic: str) -> None:
        """Forget every item of ``topic`` (upstream ``onTopicDeleted``)."""
        if topic in self._puts:
            self._drop_put(topic)
        for group in list(self._gets.get(topic, ())):
            self._drop_get(topic, group)
        prefix = topic + "@"
        send_backs = self.sets[SNDBCK_PUT_NUMS].items
        for key in [k for k in send_backs if k.startswith(prefix)]:
            del send_backs[key]

    def on_group_deleted(self, group: str) -> None:
        """Forget every item of ``group`` (upstream ``onGroupDeleted``)."""
        for topic in [t for t, by_group in self._gets.items() if group in by_group]:
            self._drop_get(topic, group)
        suffix = "@" + group
        send_backs = self.sets[SNDBCK_PUT_NUMS].items
        for key in [k for k in send_backs if k.endswith(suffix)]:
            del send_backs[key]

    def _drop_put(self, topic: str) -> None:
        del self._puts[topic]
        self.sets[TOPIC_PUT_NUMS].items.pop(topic, None)
        self.sets[TOPIC_PUT_SIZE].items.pop(topic, None)

    def _drop_get(self, topic: str, group: str) -> None:
        by_group = self._gets[topic]
        del by_group[group]
        if not by_group:
            del self._gets[topic]
        key = f"{topic}@{group}"
        self.sets[GROUP_GET_NUMS].items.pop(key, None)
        self.sets[GROUP_GET_SIZE].items.pop(key, None)


async def view_broker_stats_data(
    broker: BrokerController, ctx: RequestContext, request: RemotingCommand
) -> RemotingCommand:
    """VIEW_BROKER_STATS_DATA (315) for ``broker``: the :class:`BrokerStatsData` of the item the
    header names, or upstream's SYSTEM_ERROR when there is none (upstream:
    ``AdminBrokerProcessor.ViewBrokerStatsData``)."""
    h = decode_header(request, ViewBrokerStatsDataRequestHeader)
    data = broker.stats.items.stats_data(h.statsName, h.statsKey)
    if data is None:
        return request.response(
            ResponseCode.SYSTEM_ERROR, f"The stats <{h.statsName}> <{h.statsKey}> not exist"
        )
    response = request.response(ResponseCode.SUCCESS)
    response.body = data.encode()
    return response
