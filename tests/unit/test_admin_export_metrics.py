"""The pieces of rmq-admin ``exportMetrics`` that need no broker: reading the runtime info's rates
and day totals, the statistics items of transactional and scheduled puts, the totals, and what the
file leaves out (upstream ``ExportMetricsCommand``)."""

from __future__ import annotations

import json
import re

import pytest

from client.admin_metrics_cli import first_rate, runtime_env, runtime_quota, runtime_version, total_data
from remoting.fastjson import dumps_pretty
from remoting.protocol.broker import BrokerStatsData, BrokerStatsItem

RUNTIME = {
    "putTps": "12.5 10.0 9.0",
    "getTransferredTps": "3.25  ",
    "msgPutTotalTodayMorning": "1500",
    "msgPutTotalYesterdayMorning": "500",
    "msgGetTotalTodayMorning": "900",
    "msgGetTotalYesterdayMorning": "100",
    "commitLogDiskRatio": "0.42",
    "consumeQueueDiskRatio": "0.42",
    "putMessageAverageSize": "225.0",
}


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("12.5 10.0 9.0", 12.5),
        ("4.5  ", 4.5),  # only the 10-s window has samples enough
        ("  ", 0.0),  # a broker up for less than 11 s: every window empty
        ("", 0.0),
        (None, 0.0),  # not reported
        ("1.0E-4 0.0 0.0", 1e-4),  # Java's Double.toString
    ],
)
def test_first_rate_reads_the_ten_second_window(text: str | None, rate: float) -> None:
    runtime = {} if text is None else {"putTps": text}
    assert first_rate(runtime, "putTps") == rate


def test_first_rate_refuses_what_is_not_a_number() -> None:
    with pytest.raises(ValueError, match=re.escape("putTps is not a rate: 'fast 1.0'")):
        first_rate({"putTps": "fast 1.0"}, "putTps")


def test_runtime_quota_without_transactional_or_scheduled_items_counts_them_zero() -> None:
    quota = runtime_quota(RUNTIME, None, None, topic_size=3, group_size=2)
    assert quota == {
        "diskRatio": {"commitLogDiskRatio": "0.42", "consumeQueueDiskRatio": "0.42"},
        "groupSize": 2,
        "messageAverageSize": "225.0",
        "oneDayNum": {
            "normalOneDayInNum": 1000,  # this morning's total minus yesterday morning's
            "normalOneDayOutNum": 800,
            "transOneDayInNum": 0,
            "scheduleOneDayInNum": 0,
        },
        "topicSize": 3,
        "tps": {"normalInTps": 12.5, "normalOutTps": 3.25, "transInTps": 0.0, "scheduleInTps": 0.0},
    }


def test_runtime_quota_reads_the_minute_tps_and_the_day_of_the_items() -> None:
    trans = BrokerStatsData(
        statsMinute=BrokerStatsItem(sum=6, tps=0.1),
        statsHour=BrokerStatsItem(sum=60, tps=0.1),
        statsDay=BrokerStatsItem(sum=600, tps=0.1),
    )
    # no day sum yet: upstream compute24HourSum takes the hour's
    schedule = BrokerStatsData(
        statsMinute=BrokerStatsItem(sum=3, tps=0.05), statsHour=BrokerStatsItem(sum=30)
    )
    quota = runtime_quota(RUNTIME, trans, schedule, topic_size=0, group_size=0)
    assert (quota["tps"]["transInTps"], quota["tps"]["scheduleInTps"]) == (0.1, 0.05)
    assert (quota["oneDayNum"]["transOneDayInNum"], quota["oneDayNum"]["scheduleOneDayInNum"]) == (600, 30)


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        (
            {k: v for k, v in RUNTIME.items() if k != "msgGetTotalTodayMorning"},
            "lacks msgGetTotalTodayMorning",
        ),
        ({**RUNTIME, "msgPutTotalTodayMorning": "many"}, "msgPutTotalTodayMorning is not a number"),
    ],
)
def test_runtime_quota_needs_the_day_totals(runtime: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        runtime_quota(runtime, None, None, topic_size=0, group_size=0)


def test_keys_the_broker_does_not_report_are_left_out_of_the_file() -> None:
    """fastjson leaves out null map values: a broker without ``totalMemKBytes`` (upstream's never
    reports it) or ``putMessageAverageSize`` gets no such key, not ``null``."""
    env = runtime_env({}, {"clientCallbackExecutorThreads": "8"})
    assert env == {"cpuNum": "8", "totalMemKBytes": None}
    sparse = {k: v for k, v in RUNTIME.items() if not k.endswith(("DiskRatio", "AverageSize"))}
    quota = runtime_quota(sparse, None, None, topic_size=0, group_size=0)
    text = dumps_pretty({"runtimeEnv": env, "runtimeQuota": quota})
    assert "null" not in text
    document = json.loads(text)
    assert document["runtimeEnv"] == {"cpuNum": "8"}
    assert document["runtimeQuota"]["diskRatio"] == {}
    assert "messageAverageSize" not in document["runtimeQuota"]
    assert '"runtimeEnv":{\n\t\t"cpuNum":"8"\n\t}' in text  # fastjson's pretty format


def test_runtime_version_lists_each_client_kind_once() -> None:
    version = runtime_version(["PYTHON%V5_3_3", "JAVA%V4_9_4", "PYTHON%V5_3_3"])
    assert version == {"clientInfo": ["JAVA%V4_9_4", "PYTHON%V5_3_3"], "rocketmqVersion": "V5_3_3"}


def test_total_data_adds_up_the_brokers() -> None:
    one = runtime_quota(RUNTIME, None, None, topic_size=0, group_size=0)
    other = runtime_quota(
        {**RUNTIME, "putTps": "0.5 0.5 0.5", "msgPutTotalTodayMorning": "510"},
        BrokerStatsData(statsMinute=BrokerStatsItem(sum=1, tps=0.25)),
        None,
        topic_size=0,
        group_size=0,
    )
    assert total_data([one, other]) == {
        "totalOneDayNum": {
            "normalOneDayInNum": 1010,
            "normalOneDayOutNum": 1600,
            "transOneDayInNum": 1,
            "scheduleOneDayInNum": 0,
        },
        "totalTps": {
            "totalNormalInTps": 13.0,
            "totalNormalOutTps": 6.5,
            "totalTransInTps": 0.25,
            "totalScheduleInTps": 0.0,
        },
    }
    assert total_data([]) == {
        "totalOneDayNum": dict.fromkeys(
            ("normalOneDayInNum", "normalOneDayOutNum", "transOneDayInNum", "scheduleOneDayInNum"), 0
        ),
        "totalTps": dict.fromkeys(
            ("totalNormalInTps", "totalNormalOutTps", "totalTransInTps", "totalScheduleInTps"), 0.0
        ),
    }
