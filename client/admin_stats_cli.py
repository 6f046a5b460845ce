"""``rmq-admin statsAll``: mqadmin's topic and consumer tps table, from the brokers' per-key
statistics (VIEW_BROKER_STATS_DATA, see :mod:`broker.stats_items`).

One header line, then for every topic of the name server (``%RETRY%`` and ``%DLQ%`` topics
skipped; ``-t`` keeps one topic) a row per consumer group of the topic (QUERY_TOPIC_CONSUME_BY_WHO):

- ``#Accumulation``: the group's messages behind in the topic (GET_CONSUME_STATS, the sum of
  broker offset minus consumer offset; negative counts 0);
- ``#InTPS`` / ``#InMsg24Hour``: ``TOPIC_PUT_NUMS`` of the topic on every master of its route,
  the minute window's tps and the messages of the last day (the day window's sum, else the
  hour's, else the minute's: upstream ``compute24HourSum``), added up;
- ``#OutTPS`` / ``#OutMsg24Hour``: the same of ``GROUP_GET_NUMS`` of ``topic@group``.

A topic without a consumer group gets one row with an empty group, accumulation 0, no out
figures and ``NO_CONSUMER``. With ``-a`` only rows that moved messages in the last day print.
A topic whose route or groups cannot be read prints nothing; a broker or group figure that
cannot be read counts 0 -- as mqadmin.

Deviations, each deliberate:

- Topics print in name order and groups in the order the broker lists them (sorted); mqadmin
  prints both in Java hash-set order.
- Accumulation is read through the topic's route (mqadmin: through the group's retry topic's
  route first); the two differ only for a group that consumes on brokers not serving the topic.
"""

from __future__ import annotations

import logging
from decimal import ROUND_HALF_UP, Decimal

import click

from client.admin import AdminError, MQAdmin
from client.admin_common import namesrv_option, run_admin
from client.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.codes import RequestCode
from remoting.command import request
from remoting.errors import RemotingError
from remoting.headers import encode_header
from remoting.protocol.broker import BrokerStatsData, ViewBrokerStatsDataRequestHeader
from remoting.protocol.namesrv import MASTER_ID, TopicRouteData

__all__ = [
    "COMMANDS",
    "HEADER",
    "compute_24_hour_sum",
    "consumer_row",
    "java_fixed2",
    "no_consumer_row",
    "topic_rows",
    "view_broker_stats_data",
]

log = logging.getLogger("client.admin.statsAll")

#: errors that make mqadmin skip a topic or count a figure as 0
_SKIPPED = (AdminError, RemotingError, ValueError)

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"

#: the header line (mqadmin's ``%-64s  %-64s %12s %11s %11s %14s %14s``)
HEADER = (
    f"{'#Topic':<64}  {'#Consumer Group':<64} {'#Accumulation':>12} {'#InTPS':>11} {'#OutTPS':>11} "
    f"{'#InMsg24Hour':>14} {'#OutMsg24Hour':>14}"
)


def java_fixed2(value: float) -> str:
    """Java's ``%.2f``: the shortest decimal form of the double rounded half up (Python's rounds
    the binary value half to even: 0.125 -> ``0.12``, Java ``0.13``)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return str(Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def compute_24_hour_sum(data: BrokerStatsData) -> int:
    """Upstream ``StatsAllSubCommand.compute24HourSum``: the first non-zero sum of the day, hour
    and minute windows."""
    for window in (data.statsDay, data.statsHour, data.statsMinute):
        if window.sum != 0:
            return window.sum
    return 0


def _front(text: str) -> str:
    """Upstream ``UtilAll.frontStringAtLeast(text, 64)``: at most the first 64 characters."""
    return text[:64]


def consumer_row(
    topic: str, group: str, accumulation: int, in_tps: float, out_tps: float, in_day: int, out_day: int
) -> str:
    """A topic-and-group row (mqadmin's ``%-64s  %-64s %12d %11.2f %11.2f %14d %14d``)."""
    return (
        f"{_front(topic):<64}  {_front(group):<64} {accumulation:>12} {java_fixed2(in_tps):>11} "
        f"{java_fixed2(out_tps):>11} {in_day:>14} {out_day:>14}"
    )


def no_consumer_row(topic: str, in_tps: float, in_day: int) -> str:
    """The row of a topic nobody consumes (mqadmin's ``%-64s  %-64s %12d %11.2f %11s %14d %14s``)."""
    return f"{_front(topic):<64}  {'':<64} {0:>12} {java_fixed2(in_tps):>11} {'':>11} {in_day:>14} {'NO_CONSUMER':>14}"


async def view_broker_stats_data(admin: MQAdmin, broker_addr: str, name: str, key: str) -> BrokerStatsData:
    """VIEW_BROKER_STATS_DATA: item ``key`` of statistic ``name`` on one broker (upstream
    ``DefaultMQAdminExt.viewBrokerStatsData``); AdminError when the broker has no such item."""
    header = ViewBrokerStatsDataRequestHeader(statsName=name, statsKey=key)
    cmd = request(RequestCode.VIEW_BROKER_STATS_DATA, dict(encode_header(header)))
    response = await admin.call_broker(broker_addr, cmd)
    return BrokerStatsData.decode(response.body_bytes)


async def _stats_sum(admin: MQAdmin, masters: list[str], name: str, key: str) -> tuple[float, int]:
    """The minute tps and the 24-hour count of one item, added over ``masters``; a broker that
    cannot answer counts 0."""
    tps, day = 0.0, 0
    for addr in masters:
        try:
            data = await view_broker_stats_data(admin, addr, name, key)
        except _SKIPPED as e:
            log.debug("%s %s on %s: %s", name, key, addr, e)
            continue
        tps += data.statsMinute.tps
        day += compute_24_hour_sum(data)
    return tps, day


async def _accumulation(admin: MQAdmin, group: str, topic: str) -> int:
    try:
        stats = await admin.examine_consume_stats(group, topic)
    except _SKIPPED as e:
        log.debug("consume stats of %s in %s: %s", group, topic, e)
        return 0
    diff = sum(w.brokerOffset - w.consumerOffset for w in stats.offsetTable.values())
    return max(diff, 0)


def _masters(route: TopicRouteData) -> list[str]:
    return [bd.brokerAddrs[MASTER_ID] for bd in route.brokerDatas if MASTER_ID in bd.brokerAddrs]


async def topic_rows(admin: MQAdmin, topic: str, active_only: bool) -> list[str]:
    """The rows of one topic (upstream ``StatsAllSubCommand.printTopicDetail``)."""
    route = await admin.examine_topic_route_info(topic)
    groups = await admin.query_topic_consume_by_who(topic)
    masters = _masters(route)
    in_tps, in_day = await _stats_sum(admin, masters, TOPIC_PUT_NUMS, topic)
    if groups is None or not groups.groupList:
        return [] if active_only and in_day <= 0 else [no_consumer_row(topic, in_tps, in_day)]
    rows: list[str] = []
    for group in groups.groupList:
        out_tps, out_day = await _stats_sum(admin, masters, GROUP_GET_NUMS, f"{topic}@{group}")
        accumulation = await _accumulation(admin, group, topic)
        if not active_only or in_day > 0 or out_day > 0:
            rows.append(consumer_row(topic, group, accumulation, in_tps, out_tps, in_day, out_day))
    return rows


@click.command("statsAll")
@namesrv_option
@click.option("-a", "--activeTopic", "active_only", is_flag=True, help="print active topic only")
@click.option("-t", "--topic", "select_topic", default=None, help="print select topic only")
def stats_all(namesrv: str, timeout: float, active_only: bool, select_topic: str | None) -> None:
    """Topic and Consumer tps stats."""

    async def go(admin: MQAdmin) -> None:
        topics = await admin.fetch_all_topic_list()
        click.echo(HEADER)
        for topic in sorted(topics.topicList):
            if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
                continue
            if select_topic and topic != select_topic:
                continue
            try:
                rows = await topic_rows(admin, topic, active_only)
            except _SKIPPED as e:
                log.debug("topic %s skipped: %s", topic, e)
                continue
            for row in rows:
                click.echo(row)

    run_admin("statsAll", go, namesrv, timeout)


COMMANDS = [stats_all]
