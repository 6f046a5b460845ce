"""Broker counters for GET_BROKER_RUNTIME_INFO and topic stats (upstream ``BrokerStatsManager`` subset).

The runtime rates (``putTps``, ``getFoundTps``, ``getMissTps``, ``getTotalTps``,
``getTransferredTps``) are upstream ``StoreStatsService``'s: the counters are sampled once a second
(:meth:`BrokerStats.run_sampling`), the last 601 samples kept, and each rate is given over the
last 10, 60 and 600 samples as three space-separated Java doubles (``"125.0 98.5 12.3"``). A
window with too few samples yet is an empty string (a broker up for 30 s shows ``"4.5 4.1 "``),
except in ``getTotalTps``, found + miss per window, where it counts 0 -- as upstream. mqadmin's
``clusterList`` reads the first number.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from time import monotonic_ns

import trio

from broker.stats_items import BrokerStatsItems
from remoting.fastjson import java_double
from store.results import PutMessageResult, PutMessageStatus

DAY_MS = 86_400_000
#: upstream ``PUT_MESSAGE_ENTIRE_TIME_MAX_DESC``: the ``putMessageDistributeTime`` buckets
PUT_TIME_LABELS = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)
#: the lower ends (ms) of the buckets after the first two: a time lands in ``1 + bisect_right``
_PUT_TIME_STEPS = (10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)


def _latency_bounds() -> tuple[int, ...]:
    """Upstream ``PUT_MESSAGE_ENTIRE_TIME_BUCKETS``: the upper ends (ms) of the finer buckets the
    put latency percentiles interpolate in -- steps of 1 ms to 20, 2 to 50, 5 to 100, 10 to 200,
    50 to 500, 100 to 1000, 1000 to 10000 -- and an open last one (Java's Long.MAX_VALUE)."""
    bounds = []
    low = 0
    for step, count in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
        for _ in range(count):
            low += step
            bounds.append(low)
    bounds.append(2**63 - 1)
    return tuple(bounds)


PUT_LATENCY_BOUNDS = _latency_bounds()
#: samples (seconds) between two rotations of the latency figures (upstream ``printTPSInterval``)
LATENCY_PERIOD_SAMPLES = 60

_PUT_OK = PutMessageStatus.PUT_OK
#: store statuses of an append the commit log refused or failed (``putMessageFailedTimes``)
APPEND_FAILURES = frozenset(
    {
        PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
        PutMessageStatus.MESSAGE_ILLEGAL,
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
        PutMessageStatus.OS_PAGE_CACHE_BUSY,
        PutMessageStatus.UNKNOWN_ERROR,
    }
)
#: upstream ``StoreStatsService.FREQUENCY_OF_SAMPLING``
SAMPLE_INTERVAL_S = 1.0
#: upstream ``MAX_RECORDS_OF_SAMPLING`` (+ 1 kept)
MAX_SAMPLES = 600 + 1
#: the windows (in samples) of every rate, as upstream prints them
RATE_WINDOWS = (10, 60, 600)


class BrokerStats:
    """Message put/get totals with today/yesterday rollover, and their rates (module docstring)."""

    def __init__(self, now_ms: Callable[[], int], cluster: str = "") -> None:
        self.now_ms = now_ms
        #: the per-key statistics (VIEW_BROKER_STATS_DATA), keyed by ``cluster`` for the broker-wide ones
        self.items = BrokerStatsItems(cluster)
        self.put_total = 0
        self.get_total = 0
        self.put_size_total = 0
        self.put_failed = 0
        #: longest put and get so far (ms; upstream ``putMessageEntireTimeMax`` and
        #: ``getMessageEntireTimeMax``)
        self.put_time_max = 0
        self.get_time_max = 0
        # puts of this minute by time: of 0 ms (the common case, counted alone), by
        # PUT_TIME_LABELS and by PUT_LATENCY_BOUNDS; the last minute's are what is reported
        self._zero_puts = 0
        self._put_times = [0] * len(PUT_TIME_LABELS)
        self._put_latency = [0] * len(PUT_LATENCY_BOUNDS)
        self._last_put_times = [0] * len(PUT_TIME_LABELS)
        self._last_put_latency = [0] * len(PUT_LATENCY_BOUNDS)
        self.get_found = 0
        self.get_miss = 0
        self._put_today_morning = 0
        self._put_yesterday_morning = 0
        self._get_today_morning = 0
        self._get_yesterday_morning = 0
        self._day = now_ms() // DAY_MS
        #: (time ms, put_total, get_total, get_found, get_miss), one a second
        self._samples: deque[tuple[int, int, int, int, int]] = deque(maxlen=MAX_SAMPLES)

    def _roll(self) -> None:
        day = self.now_ms() // DAY_MS
        if day != self._day:
            self._day = day
            self._put_yesterday_morning, self._put_today_morning = self._put_today_morning, self.put_total
            self._get_yesterday_morning, self._get_today_morning = self._get_today_morning, self.get_total

    def on_put(self, topic: str, count: int, size: int = 0) -> None:
        """A send stored ``count`` messages (``size`` record bytes) in ``topic``."""
        self.put_total += count
        self.put_size_total += size
        self.items.on_put(topic, count, size)

    def on_put_result(self, topic: str, count: int, result: PutMessageResult, began_ns: int) -> None:
        """A send's store put of ``count`` messages for ``topic``, begun at ``began_ns``
        (``time.monotonic_ns``), ended with ``result``: its time, and the messages if stored; a
        failure counts when the commit log refused or failed the append (upstream
        ``putMessageFailedTimes``), not for a flush or replication timeout (the message is
        stored) nor a store that takes no writes."""
        self.on_put_time((monotonic_ns() - began_ns) // 1_000_000)
        status = result.status
        if status is _PUT_OK:
            self.on_put(topic, count, result.wrote_bytes)
        elif status in APPEND_FAILURES:
            self.put_failed += 1

    def on_put_placed(self, topic: str, size: int, began_ns: int) -> None:
        """:meth:`on_put_result` of one message the store's plain send path stored (``size`` record
        bytes)."""
        self.on_put_time((monotonic_ns() - began_ns) // 1_000_000)
        self.on_put(topic, 1, size)

    def on_put_time(self, ms: int) -> None:
        """A send's store put (with its flush and replica waits) took ``ms`` milliseconds
        (upstream ``setPutMessageEntireTimeMax``)."""
        if ms <= 0:
            self._zero_puts += 1
            return
        self._put_times[1 + bisect_right(_PUT_TIME_STEPS, ms)] += 1
        self._put_latency[bisect_left(PUT_LATENCY_BOUNDS, ms)] += 1
        if ms > self.put_time_max:
            self.put_time_max = ms

    def on_get_time(self, ms: int) -> None:
        """A pull's store read took ``ms`` milliseconds (upstream ``setGetMessageEntireTimeMax``)."""
        if ms > self.get_time_max:
            self.get_time_max = ms

    def rotate_put_times(self) -> None:
        """Start a new minute of put times; the one ending becomes the reported one (upstream
        does this when it prints its TPS line, every minute)."""
        self._put_times[0] += self._zero_puts
        self._put_latency[0] += self._zero_puts  # 0 ms is in the first bucket, (0, 1]
        self._zero_puts = 0
        self._last_put_times, self._put_times = self._put_times, [0] * len(PUT_TIME_LABELS)
        self._last_put_latency, self._put_latency = self._put_latency, [0] * len(PUT_LATENCY_BOUNDS)

    def put_latency(self, px: float) -> float:
        """Upstream ``findPutMessageEntireTimePX`` over the last minute: the ``px`` quantile of put
        times (ms), interpolated linearly inside its bucket."""
        counts = self._last_put_latency
        index = int(sum(counts) * px)
        passed = 0
        for i, count in enumerate(counts):
            if index <= passed + count:
                relative = index - passed
                low = PUT_LATENCY_BOUNDS[i - 1] if i else 0
                return low + ((PUT_LATENCY_BOUNDS[i] - low) * relative / count if count else 0.0)
            passed += count
        return 0.0

    def on_get(self, found: int, group: str = "", topic: str = "", size: int = 0) -> None:
        """A pull found ``found`` messages (``size`` bytes; 0: a miss), for ``group`` in ``topic``
        (without a group, only the totals here count it, not :attr:`items`)."""
        if found:
            self.get_total += found
            self.get_found += 1
            if group:
                self.items.on_get(group, topic, found, size)
        else:
            self.get_miss += 1

    def sample(self) -> None:
        """Record a point for the rates (upstream: once a second, see :meth:`run_sampling`)."""
        self._roll()
        self._samples.append((self.now_ms(), self.put_total, self.get_total, self.get_found, self.get_miss))

    @property
    def sample_count(self) -> int:
        """Samples kept (at most :data:`MAX_SAMPLES`)."""
        return len(self._samples)

    async def run_sampling(self) -> None:
        """Sample the counters every :data:`SAMPLE_INTERVAL_S`, and rotate the put times every
        :data:`LATENCY_PERIOD_SAMPLES` samples, forever."""
        samples = 0
        while True:
            self.sample()
            samples += 1
            if samples % LATENCY_PERIOD_SAMPLES == 0:
                self.rotate_put_times()
            await trio.sleep(SAMPLE_INTERVAL_S)

    def _rate(self, idx: int, window: int) -> float | None:
        """Counter ``idx`` (1: puts, 2: messages transferred, 3: pulls found, 4: pulls missed) per
        second over the last ``window`` samples; None while fewer than ``window + 1`` exist."""
        samples = self._samples
        if len(samples) <= window:
            return None
        first, last = samples[-(window + 1)], samples[-1]
        dt = last[0] - first[0]
        return (last[idx] - first[idx]) * 1000 / dt if dt > 0 else 0.0

    def _rates(self, idx: int) -> str:
        """Upstream's three windows: ``"<10 s> <1 min> <10 min>"``, a missing window empty."""
        out = []
        for window in RATE_WINDOWS:
            rate = self._rate(idx, window)
            out.append("" if rate is None else java_double(rate))
        return " ".join(out)

    def _total_rates(self) -> str:
        """``getTotalTps``: found + miss per window, a missing window counting 0 (upstream)."""
        out = []
        for window in RATE_WINDOWS:
            found, miss = self._rate(3, window), self._rate(4, window)
            out.append(java_double((found or 0.0) + (miss or 0.0)))
        return " ".join(out)

    def runtime_table(self) -> dict[str, str]:
        self._roll()
        return {
            "msgPutTotalTodayNow": str(self.put_total),
            "msgGetTotalTodayNow": str(self.get_total),
            "msgPutTotalTodayMorning": str(self._put_today_morning),
            "msgPutTotalYesterdayMorning": str(self._put_yesterday_morning),
            "msgGetTotalTodayMorning": str(self._get_today_morning),
            "msgGetTotalYesterdayMorning": str(self._get_yesterday_morning),
            "putTps": self._rates(1),
            "getTransferredTps": self._rates(2),
            "getFoundTps": self._rates(3),
            "getMissTps": self._rates(4),
            "getTotalTps": self._total_rates(),
            # upstream StoreStatsService: bytes stored, their average per put (over at least 1)
            "putMessageSizeTotal": str(self.put_size_total),
            "putMessageAverageSize": java_double(self.put_size_total / max(self.put_total, 1)),
            "putMessageFailedTimes": str(self.put_failed),
            "putMessageEntireTimeMax": str(self.put_time_max),
            "getMessageEntireTimeMax": str(self.get_time_max),
            "putMessageDistributeTime": "".join(
                f"{label}:{n} " for label, n in zip(PUT_TIME_LABELS, self._last_put_times, strict=True)
            ),
            "putLatency99": f"{self.put_latency(0.99):.2f}",
            "putLatency999": f"{self.put_latency(0.999):.2f}",
        }
