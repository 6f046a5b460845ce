"""A push consumer's pull and consume figures per topic, for its running info (upstream
``ConsumerStatsManager``, what ``mqadmin consumerStatus`` shows under "Consumer RT&TPS"): pull RT and
messages pulled per second, consume RT per listener call, messages consumed OK / failed per second,
over the last minute, and failed messages over the last hour.

Figures are summed into one bucket per second (per minute for the hour of failures), so recording
costs the same at any rate and memory stays bounded.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from remoting.protocol.broker import ConsumeStatusBody

__all__ = ["ConsumerStats"]

MINUTE = 60
HOUR = 3600


class _Window:
    """(bucket start, sum, count) buckets of ``width`` seconds covering the last ``span`` seconds."""

    __slots__ = ("buckets", "span", "width")

    def __init__(self, span: int, width: int = 1) -> None:
        self.span = span
        self.width = width
        self.buckets: deque[list[float]] = deque()

    def add(self, now: float, value: float, count: int = 1) -> None:
        start = now - now % self.width
        buckets = self.buckets
        if buckets and buckets[-1][0] == start:
            last = buckets[-1]
            last[1] += value
            last[2] += count
        else:
            buckets.append([start, value, count])
            while buckets[0][0] <= now - self.span:
                buckets.popleft()

    def totals(self, now: float) -> tuple[float, int]:
        """(sum, count) of the buckets within the span."""
        total, count = 0.0, 0
        for start, value, n in self.buckets:
            if start > now - self.span:
                total += value
                count += int(n)
        return total, count


class _TopicStats:
    __slots__ = ("consume_rt", "failed", "failed_hour", "ok", "pull_rt", "pulled")

    def __init__(self) -> None:
        self.pull_rt = _Window(MINUTE)
        self.pulled = _Window(MINUTE)
        self.consume_rt = _Window(MINUTE)
        self.ok = _Window(MINUTE)
        self.failed = _Window(MINUTE)
        self.failed_hour = _Window(HOUR, 60)


class ConsumerStats:
    """The figures of one consumer, by topic."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._topics: dict[str, _TopicStats] = {}

    def _of(self, topic: str) -> _TopicStats:
        stats = self._topics.get(topic)
        if stats is None:
            stats = self._topics[topic] = _TopicStats()
        return stats

    def on_pull(self, topic: str, rt_ms: float, messages: int) -> None:
        now, s = self.clock(), self._of(topic)
        s.pull_rt.add(now, rt_ms)
        if messages:
            s.pulled.add(now, messages)

    def on_consume(self, topic: str, rt_ms: float, ok: int, failed: int) -> None:
        now, s = self.clock(), self._of(topic)
        s.consume_rt.add(now, rt_ms)
        if ok:
            s.ok.add(now, ok)
        if failed:
            s.failed.add(now, failed)
            s.failed_hour.add(now, failed)

    def status_table(self) -> dict[str, ConsumeStatusBody]:
        now = self.clock()
        table: dict[str, ConsumeStatusBody] = {}
        for topic, s in sorted(self._topics.items()):
            pull_rt, pulls = s.pull_rt.totals(now)
            consume_rt, calls = s.consume_rt.totals(now)
            table[topic] = ConsumeStatusBody(
                pullRT=pull_rt / pulls if pulls else 0.0,
                pullTPS=s.pulled.totals(now)[0] / MINUTE,
                consumeRT=consume_rt / calls if calls else 0.0,
                consumeOKTPS=s.ok.totals(now)[0] / MINUTE,
                consumeFailedTPS=s.failed.totals(now)[0] / MINUTE,
                consumeFailedMsgs=int(s.failed_hour.totals(now)[0]),
            )
        return table
