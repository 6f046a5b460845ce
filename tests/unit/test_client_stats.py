"""A push consumer's pull and consume figures (client.stats): per-second rates over the last minute,
failures over the last hour, bounded memory; and how consumerStatus reads a running info."""

from __future__ import annotations

from client.admin_output import analyze_process_queues
from client.stats import ConsumerStats
from remoting.protocol.broker import ConsumerRunningInfo, ProcessQueueInfo
from remoting.protocol.common import MessageQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_over_the_last_minute_and_failures_over_the_hour() -> None:
    clock = Clock()
    stats = ConsumerStats(clock)
    for _ in range(30):  # 30 pulls of 4 messages, 10 ms each, over 30 s
        stats.on_pull("T", 10.0, 4)
        stats.on_consume("T", 2.0, 4, 0)
        clock.now += 1
    stats.on_pull("T", 40.0, 0)  # an empty pull counts for the RT, not the TPS
    stats.on_consume("T", 8.0, 0, 3)
    s = stats.status_table()["T"]
    assert round(s.pullRT, 3) == round((30 * 10 + 40) / 31, 3)
    assert s.pullTPS == 120 / 60
    assert round(s.consumeRT, 3) == round((30 * 2 + 8) / 31, 3)
    assert (s.consumeOKTPS, s.consumeFailedTPS, s.consumeFailedMsgs) == (2.0, 3 / 60, 3)

    clock.now += 61  # the minute has passed; the hour of failures has not
    s = stats.status_table()["T"]
    assert (s.pullRT, s.pullTPS, s.consumeRT, s.consumeOKTPS, s.consumeFailedTPS) == (0, 0, 0, 0, 0)
    assert s.consumeFailedMsgs == 3
    clock.now += 3600
    assert stats.status_table()["T"].consumeFailedMsgs == 0


def test_a_busy_second_is_one_bucket() -> None:
    clock = Clock()
    stats = ConsumerStats(clock)
    for i in range(10_000):
        clock.now = 1000.0 + i / 10_000  # all within one second
        stats.on_consume("T", 1.0, 1, 0)
    assert len(stats._topics["T"].ok.buckets) == 1
    for i in range(200):  # one per second for 200 s: only the last minute is kept
        clock.now = 2000.0 + i
        stats.on_consume("T", 1.0, 1, 0)
    assert len(stats._topics["T"].ok.buckets) <= 61
    assert stats.status_table()["T"].consumeOKTPS == 1.0


def test_stuck_queues_are_named_as_mqadmin_does() -> None:
    info = ConsumerRunningInfo(
        properties={"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMEORDERLY": "false"},
        mqTable={
            MessageQueue(topic="T", brokerName="b", queueId=0): ProcessQueueInfo(
                cachedMsgCount=3, lastConsumeTimestamp=1_000
            ),
            MessageQueue(topic="T", brokerName="b", queueId=1): ProcessQueueInfo(
                cachedMsgCount=0, lastConsumeTimestamp=1_000
            ),
            MessageQueue(topic="T", brokerName="b", queueId=2): ProcessQueueInfo(
                cachedMsgCount=3, lastConsumeTimestamp=50_000
            ),
        },
    )
    assert analyze_process_queues("c1", info, 100_000) == [
        "c1 MessageQueue [topic=T, brokerName=b, queueId=0] can't consume for a while, maybe blocked, 99000ms"
    ]
    info.properties["PROP_CONSUMEORDERLY"] = True  # the C++ client sends a JSON boolean
    info.mqTable[MessageQueue(topic="T", brokerName="b", queueId=1)].locked = True
    info.mqTable[MessageQueue(topic="T", brokerName="b", queueId=2)].locked = True
    info.mqTable[MessageQueue(topic="T", brokerName="b", queueId=2)].droped = True
    info.mqTable[MessageQueue(topic="T", brokerName="b", queueId=2)].tryUnlockTimes = 2
    assert analyze_process_queues("c1", info, 100_000) == [
        "c1 MessageQueue [topic=T, brokerName=b, queueId=0] can't lock for a while, 100000ms",
        "c1 MessageQueue [topic=T, brokerName=b, queueId=2] unlock 2 times, still failed",
    ]
