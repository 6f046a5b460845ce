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

from collections import deque
from collections.abc import Callable
from decimal import Decimal

import trio

from broker.stats_items import BrokerStatsItems
from store.results import PutMessageStatus

DAY_MS = 86_400_000
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


def java_double(value: float) -> str:
    """Java's ``Double.toString`` of a finite double: ``12.0``, ``0.5``, ``1.0E7``, ``2.5E-4``."""
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = f"{digits[0]}.{''.join(map(str, digits[1:])) or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{exponent + len(digits) - 1}"


class BrokerStats:
    """Message put/get totals with today/yesterday rollover, and their rates (module docstring)."""

    def __init__(self, now_ms: Callable[[], int], cluster: str = "") -> None:
        self.now_ms = now_ms
        #: the per-key statistics (VIEW_BROKER_STATS_DATA), keyed by ``cluster`` for the broker-wide ones
        self.items = BrokerStatsItems(cluster)
        self.put_total = 0
        self.get_total = 0
        self.put_by_topic: dict[str, int] = {}
        self.put_size_total = 0
        self.put_failed = 0
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
        self.put_by_topic[topic] = self.put_by_topic.get(topic, 0) + count
        self.items.on_put(topic, count, size)

    def on_put_failed(self, status: PutMessageStatus) -> None:
        """A send's store put ended with ``status`` (not PUT_OK): counted when the commit log
        refused or failed the append (upstream ``putMessageFailedTimes``), not for a flush or
        replication timeout (the message is stored) nor a store that takes no writes."""
        if status in APPEND_FAILURES:
            self.put_failed += 1

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
        """Sample the counters every :data:`SAMPLE_INTERVAL_S`, forever."""
        while True:
            self.sample()
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
        }
