"""``rmq-admin exportMetrics``: mqadmin's export of a cluster's load figures as a fastjson
pretty-printed JSON file (the other export commands: :mod:`client.admin_export_cli`, whose
directory, file and user topic / group rules this one shares).

- ``exportMetrics -c CLUSTER`` writes ``<dir>/metrics.json``: ``evaluateReport``, broker name ->
  what its master reports (GET_BROKER_RUNTIME_INFO, GET_BROKER_CONFIG, its user topics and groups,
  VIEW_BROKER_STATS_DATA): ``runtimeEnv`` (``cpuNum``: the config's
  ``clientCallbackExecutorThreads``; ``totalMemKBytes``), ``runtimeQuota`` (``diskRatio``; ``tps``:
  the first window of ``putTps`` / ``getTransferredTps`` and the minute tps of TOPIC_PUT_NUMS of
  ``RMQ_SYS_TRANS_HALF_TOPIC`` / ``SCHEDULE_TOPIC_XXXX``; ``oneDayNum``: the put and get totals at
  this morning minus yesterday morning's, and those two items' ``compute24HourSum``;
  ``messageAverageSize``; ``topicSize`` / ``groupSize``: its user topics without retry and DLQ
  topics, its user groups) and ``runtimeVersion`` (this tool's ``rocketmqVersion``; ``clientInfo``:
  ``<language>%<version>`` of the consumers online in its user groups); and ``totalData``, the
  ``tps`` (as ``totalNormalInTps`` ...) and ``oneDayNum`` figures added over the masters. A
  statistics item the broker does not have counts 0; a runtime info or config key it does not
  report is left out of the file (fastjson leaves out null map values). On success it prints
  ``export <path> success`` without a newline, as mqadmin does.

Deviations, each deliberate:

- Map keys are written sorted and ``clientInfo`` sorted (mqadmin: Java hash order).
- An unknown cluster fails with exit status 1 and writes nothing (mqadmin fails too); a broker
  group without a master is left out of the report (mqadmin asks a null address and fails).
- A ``putTps`` / ``getTransferredTps`` whose first window is empty, or which the broker does not
  report, counts 0 (mqadmin fails on an empty string or a missing key; it reads the broker's
  ``"  "`` of its first ten seconds as 0 too).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import click

from client.admin import CLUSTER_NOT_FOUND, AdminError, MQAdmin
from client.admin_export_cli import (
    cluster_export_options,
    export_cluster_document,
    get_user_subscription_group,
    get_user_topic_config,
)
from client.admin_stats_cli import TOPIC_PUT_NUMS, compute_24_hour_sum, view_broker_stats_data
from remoting.command import CURRENT_VERSION, version_desc
from remoting.errors import RemotingError
from remoting.protocol.broker import BrokerStatsData
from remoting.protocol.namesrv import MASTER_ID
from remoting.protocol.topics import SCHEDULE_TOPIC, TRANS_HALF_TOPIC

__all__ = [
    "COMMANDS",
    "METRICS_FILE",
    "cluster_metrics",
    "first_rate",
    "runtime_env",
    "runtime_quota",
    "runtime_version",
    "total_data",
]

log = logging.getLogger("client.admin.export")

METRICS_FILE = "metrics.json"

#: the per-second rates of a runtime info exportMetrics reads, and the names it writes them under
NORMAL_RATE_KEYS = (("putTps", "normalInTps"), ("getTransferredTps", "normalOutTps"))
#: ``tps`` key -> its ``totalTps`` key
TOTAL_TPS_KEYS = (
    ("normalInTps", "totalNormalInTps"),
    ("normalOutTps", "totalNormalOutTps"),
    ("transInTps", "totalTransInTps"),
    ("scheduleInTps", "totalScheduleInTps"),
)
#: the ``oneDayNum`` keys, which ``totalOneDayNum`` sums under the same names
ONE_DAY_KEYS = ("normalOneDayInNum", "normalOneDayOutNum", "transOneDayInNum", "scheduleOneDayInNum")


def first_rate(runtime: dict[str, str], key: str) -> float:
    """The first (10-second) window of a runtime info rate (``"12.5 10.0 9.0"``); an empty window
    (fewer than 11 samples yet) or a missing key counts 0. Anything else not a number is a
    ValueError."""
    first = (runtime.get(key) or "").split(" ")[0]
    if not first:
        return 0.0
    try:
        return float(first)
    except ValueError:
        raise ValueError(f"runtime info {key} is not a rate: {runtime[key]!r}") from None


def _runtime_long(runtime: dict[str, str], key: str) -> int:
    try:
        return int(runtime[key])
    except KeyError:
        raise ValueError(f"runtime info lacks {key}") from None
    except ValueError:
        raise ValueError(f"runtime info {key} is not a number: {runtime[key]!r}") from None


def runtime_env(runtime: dict[str, str], properties: dict[str, str]) -> dict[str, str | None]:
    """Upstream ``getRuntimeEnv``: ``cpuNum`` (the broker config's
    ``clientCallbackExecutorThreads``) and ``totalMemKBytes`` (runtime info); None where the broker
    does not report the key (the file then leaves it out)."""
    return {
        "cpuNum": properties.get("clientCallbackExecutorThreads"),
        "totalMemKBytes": runtime.get("totalMemKBytes"),
    }


def runtime_quota(
    runtime: dict[str, str],
    trans: BrokerStatsData | None,
    schedule: BrokerStatsData | None,
    topic_size: int,
    group_size: int,
) -> dict[str, Any]:
    """Upstream ``getRuntimeQuota`` of one broker: its disk ratios, the current tps (normal puts and
    transferred gets from ``runtime``, transactional and scheduled puts from their TOPIC_PUT_NUMS
    items ``trans`` / ``schedule``, None when the broker has none), the day's counts (normal: the
    totals at this morning minus yesterday morning's; transactional and scheduled: upstream
    ``compute24HourSum``), the average message size and its user topic and group counts."""
    tps = {name: first_rate(runtime, key) for key, name in NORMAL_RATE_KEYS}
    tps["transInTps"] = trans.statsMinute.tps if trans is not None else 0.0
    tps["scheduleInTps"] = schedule.statsMinute.tps if schedule is not None else 0.0
    one_day = {
        "normalOneDayInNum": _runtime_long(runtime, "msgPutTotalTodayMorning")
        - _runtime_long(runtime, "msgPutTotalYesterdayMorning"),
        "normalOneDayOutNum": _runtime_long(runtime, "msgGetTotalTodayMorning")
        - _runtime_long(runtime, "msgGetTotalYesterdayMorning"),
        "transOneDayInNum": compute_24_hour_sum(trans) if trans is not None else 0,
        "scheduleOneDayInNum": compute_24_hour_sum(schedule) if schedule is not None else 0,
    }
    return {
        "diskRatio": {
            "commitLogDiskRatio": runtime.get("commitLogDiskRatio"),
            "consumeQueueDiskRatio": runtime.get("consumeQueueDiskRatio"),
        },
        "groupSize": group_size,
        "messageAverageSize": runtime.get("putMessageAverageSize"),
        "oneDayNum": one_day,
        "topicSize": topic_size,
        "tps": tps,
    }


def runtime_version(client_info: Iterable[str]) -> dict[str, Any]:
    """Upstream ``getRuntimeVersion``: this tool's version and the ``<language>%<version>`` of the
    consumers online in the broker's user groups (sorted, each once)."""
    return {"clientInfo": sorted(set(client_info)), "rocketmqVersion": version_desc(CURRENT_VERSION)}


def total_data(quotas: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``totalData``: the brokers' ``tps`` and ``oneDayNum`` figures added up."""
    total_tps = dict.fromkeys((total for _, total in TOTAL_TPS_KEYS), 0.0)
    total_day = dict.fromkeys(ONE_DAY_KEYS, 0)
    for quota in quotas:
        for key, total in TOTAL_TPS_KEYS:
            total_tps[total] += quota["tps"][key]
        for key in ONE_DAY_KEYS:
            total_day[key] += quota["oneDayNum"][key]
    return {"totalOneDayNum": total_day, "totalTps": total_tps}


def _sorted_maps(value: Any) -> Any:
    """``value`` with the keys of every map in it sorted (the written order)."""
    if isinstance(value, dict):
        return {key: _sorted_maps(value[key]) for key in sorted(value)}
    return value


async def _put_stats(admin: MQAdmin, addr: str, topic: str) -> BrokerStatsData | None:
    """TOPIC_PUT_NUMS of ``topic`` on the broker; None when the broker has no such item (it answers
    with an error, which mqadmin counts as 0)."""
    try:
        return await view_broker_stats_data(admin, addr, TOPIC_PUT_NUMS, topic)
    except AdminError as e:
        log.debug("%s %s on %s: %s", TOPIC_PUT_NUMS, topic, addr, e)
        return None


async def consumer_client_info(admin: MQAdmin, groups: Iterable[str]) -> set[str]:
    """``<language>%<version name>`` of every consumer online in ``groups``; a group whose
    connections cannot be read (none online, no retry topic route) is skipped, as mqadmin does."""
    info: set[str] = set()
    for group in groups:
        try:
            connection = await admin.examine_consumer_connection_info(group)
        except (AdminError, RemotingError, ValueError) as e:
            log.debug("consumers of %s: %s", group, e)
            continue
        info.update(f"{c.language}%{version_desc(c.version)}" for c in connection.connectionSet)
    return info


async def broker_metrics(admin: MQAdmin, addr: str) -> dict[str, Any]:
    """One master's ``evaluateReport`` entry: ``runtimeEnv``, ``runtimeQuota``, ``runtimeVersion``."""
    runtime = (await admin.fetch_broker_runtime_stats(addr)).table
    properties = await admin.get_broker_config(addr)
    groups = (await get_user_subscription_group(admin, addr)).subscriptionGroupTable
    topics = (await get_user_topic_config(admin, addr, False)).topicConfigTable
    trans = await _put_stats(admin, addr, TRANS_HALF_TOPIC)
    schedule = await _put_stats(admin, addr, SCHEDULE_TOPIC)
    quota = runtime_quota(runtime, trans, schedule, len(topics), len(groups))
    clients = await consumer_client_info(admin, [config.groupName for config in groups.values()])
    return {
        "runtimeEnv": runtime_env(runtime, properties),
        "runtimeQuota": quota,
        "runtimeVersion": runtime_version(clients),
    }


async def cluster_metrics(admin: MQAdmin, cluster: str) -> dict[str, Any]:
    """The metrics.json document of ``cluster``: ``evaluateReport`` (broker name -> its master's
    :func:`broker_metrics`) and ``totalData``; ValueError if the cluster is unknown."""
    info = await admin.examine_broker_cluster_info()
    names = info.clusterAddrTable.get(cluster)
    if names is None:
        raise ValueError(CLUSTER_NOT_FOUND)
    report: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        data = info.brokerAddrTable.get(name)
        if data is None:
            continue
        master = data.brokerAddrs.get(MASTER_ID)
        if master is None:
            log.warning("broker group %s of cluster %s has no master: left out", name, cluster)
            continue
        report[name] = await broker_metrics(admin, master)
    totals = total_data(metrics["runtimeQuota"] for metrics in report.values())
    return _sorted_maps({"evaluateReport": report, "totalData": totals})


@click.command("exportMetrics")
@cluster_export_options(METRICS_FILE)
def export_metrics(namesrv: str, timeout: float, cluster_name: str, file_path: str | None) -> None:
    """Export metrics."""
    cluster = cluster_name.strip()
    export_cluster_document(
        "exportMetrics",
        METRICS_FILE,
        namesrv,
        timeout,
        file_path,
        lambda admin: cluster_metrics(admin, cluster),
    )


COMMANDS = [export_metrics]
