"""Broker counters for GET_BROKER_RUNTIME_INFO and topic stats (upstream ``BrokerStatsManager`` subset)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

DAY_MS = 86_400_000


class BrokerStats:
    """Message put/get totals and rates over the last minute, with today/yesterday rollover."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self.now_ms = now_ms
        self.put_total = 0
        self.get_total = 0
        self.put_by_topic: dict[str, int] = {}
        self.get_found = 0
        self.get_miss = 0
        self._put_today_morning = 0
        self._put_yesterday_morning = 0
        self._get_today_morning = 0
        self._get_yesterday_morning = 0
        self._day = now_ms() // DAY_MS
        self._samples: deque[tuple[int, int, int, int, int]] = deque(maxlen=64)

    def _roll(self) -> None:
        day = self.now_ms() // DAY_MS
        if day != self._day:
            self._day = day
            self._put_yesterday_morning, self._put_today_morning = self._put_today_morning, self.put_total
            self._get_yesterday_morning, self._get_today_morning = self._get_today_morning, self.get_total

    def on_put(self, topic: str, count: int) -> None:
        self.put_total += count
        self.put_by_topic[topic] = self.put_by_topic.get(topic, 0) + count

    def on_get(self, found: int) -> None:
        if found:
            self.get_total += found
            self.get_found += 1
        else:
            self.get_miss += 1

    def sample(self) -> None:
        """Record a point for the rates (called every few seconds)."""
        self._roll()
        self._samples.append((self.now_ms(), self.put_total, self.get_total, self.get_found, self.get_miss))

    def _rate(self, idx: int) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, *a), (t1, *b) = self._samples[0], self._samples[-1]
        dt = (t1 - t0) / 1000
        return (b[idx - 1] - a[idx - 1]) / dt if dt > 0 else 0.0

    def runtime_table(self) -> dict[str, str]:
        self._roll()
        return {
            "msgPutTotalTodayNow": str(self.put_total),
            "msgGetTotalTodayNow": str(self.get_total),
            "msgPutTotalTodayMorning": str(self._put_today_morning),
            "msgPutTotalYesterdayMorning": str(self._put_yesterday_morning),
            "msgGetTotalTodayMorning": str(self._get_today_morning),
            "msgGetTotalYesterdayMorning": str(self._get_yesterday_morning),
            "putTps": f"{self._rate(1):.2f}",
            "getTransferredTps": f"{self._rate(2):.2f}",
            "getFoundTps": f"{self._rate(3):.2f}",
            "getMissTps": f"{self._rate(4):.2f}",
            "getTotalTps": f"{self._rate(3) + self._rate(4):.2f}",
        }
