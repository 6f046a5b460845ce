"""``rmq-admin queryCq``, ``getConsumerConfig`` and ``allocateMQ``: mqadmin's names, flags and lines.

- ``queryCq`` prints the raw units of one consume queue (QUERY_CONSUME_QUEUE): the queue's index
  range, then each unit as Java's ``ConsumeQueueData.toString()``; with ``-g`` first the group's
  subscription (fastjson pretty JSON) and filter data.
- ``getConsumerConfig`` prints a group's subscription group config as each broker group holds it
  (GET_SUBSCRIPTIONGROUP_CONFIG to its master), one ``name = value`` line per field of upstream's
  ``SubscriptionGroupConfig`` in declaration order.
- ``allocateMQ`` prints, as fastjson JSON, which of the topic's readable queues each given client
  id gets under the averaging strategy.

Deviations, each deliberate:

- ``queryCq`` without ``-b`` asks the first broker group of the route through its master, else
  through another replica (mqadmin insists on the master); an index outside the queue, which the
  broker answers with a body-less success, is reported as a failure with the broker's remark
  (mqadmin dies on a NullPointerException).
- ``getConsumerConfig`` visits the broker groups in name order (mqadmin: Java hash order), asks
  a group without a master through its lowest-id replica (mqadmin: a random one), skips broker
  groups that answer SUBSCRIPTION_GROUP_NOT_EXIST and fails with a message when none knows the
  group (mqadmin fails on the first refusal, and prints nothing when no broker answers). A
  broker that auto-creates groups (``autoCreateSubscriptionGroup``, upstream's default) creates
  and reports an unknown group, as upstream's does.
- ``allocateMQ`` allocates as consumers do (:func:`client.rebalance.allocate_averagely`: queues
  and client ids sorted, ids once each); mqadmin feeds the strategy Java hash-set order and the
  ids in the given order, so its split can differ from what the consumers would get. The ids
  appear in the JSON in the given order (mqadmin: Java hash order).
"""

from __future__ import annotations

import click
import msgspec

from client.admin import AdminError, MQAdmin, route_addrs
from client.admin_common import fail, namesrv_option, run_admin
from client.admin_output import java_map_str
from client.rebalance import allocate_averagely
from client.route import subscribe_queues_from_route
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.fastjson import dumps, dumps_pretty
from remoting.protocol.broker import (
    ConsumeQueueData,
    QueryConsumeQueueResponseBody,
    SubscriptionGroupConfig,
)
from remoting.protocol.common import Body, MessageQueue
from remoting.protocol.namesrv import MASTER_ID, BrokerData, ClusterInfo

__all__ = [
    "COMMANDS",
    "SEPARATOR",
    "SubscriptionGroupConfigView",
    "consume_queue_data_str",
    "group_config_lines",
    "query_cq_text",
    "rebalance_json",
]

#: the rule mqadmin's queryCq prints between sections
SEPARATOR = "=" * 38


# --- queryCq ---------------------------------------------------------------------------------------


def _java_str(value: object) -> str:
    """Java's string concatenation of a value: ``null`` for null, booleans lower case."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def consume_queue_data_str(d: ConsumeQueueData) -> str:
    """Upstream ``ConsumeQueueData.toString()``."""
    return (
        f"ConsumeQueueData{{physicOffset={d.physicOffset}, physicSize={d.physicSize}, "
        f"tagsCode={d.tagsCode}, extendDataJson='{_java_str(d.extendDataJson)}', "
        f"bitMap='{_java_str(d.bitMap)}', eval={_java_str(d.eval)}, msg='{_java_str(d.msg)}'}}"
    )


def query_cq_text(body: QueryConsumeQueueResponseBody, index: int) -> str:
    """What mqadmin ``queryCq`` prints for ``body``, units numbered from ``index``."""
    out: list[str] = []
    if body.subscriptionData is not None:
        out.append(f"Subscription data: \n{dumps_pretty(body.subscriptionData)}\n{SEPARATOR}\n")
    if body.filterData is not None:
        out.append(f"Filter data: \n{body.filterData}\n{SEPARATOR}\n")
    out.append(f"Queue data: \nmax: {body.maxQueueIndex}, min: {body.minQueueIndex}\n{SEPARATOR}\n")
    for i, unit in enumerate(body.queueData or (), start=index):
        out.append(f"idx: {i}\n{consume_queue_data_str(unit)}\n{SEPARATOR}\n")
    return "".join(out)


@click.command("queryCq")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-q", "--queue", "queue_id", type=int, required=True, help="queue num, ie. 1")
@click.option("-i", "--index", type=int, required=True, help="start queue index.")
@click.option("-c", "--count", type=int, default=10, show_default=True, help="how many.")
@click.option("-b", "--broker", "broker_addr", default=None, help="broker addr.")
@click.option("-g", "--consumer", "group", default=None, help="consumer group.")
def query_cq(
    namesrv: str,
    timeout: float,
    topic: str,
    queue_id: int,
    index: int,
    count: int,
    broker_addr: str | None,
    group: str | None,
) -> None:
    """Query cq command."""
    topic = topic.strip()
    addr = broker_addr.strip() if broker_addr is not None else ""
    group = group.strip() if group is not None else None

    async def go(admin: MQAdmin) -> None:
        target = addr
        if not target:
            route = await admin.examine_topic_route_info(topic)
            first = route_addrs(route)[:1]
            if not first:
                raise ValueError("No topic route data!")
            target = first[0]
        body = await admin.query_consume_queue(target, topic, queue_id, index, count, group)
        click.echo(query_cq_text(body, index), nl=False)

    run_admin("queryCq", go, namesrv, timeout)


# --- getConsumerConfig -----------------------------------------------------------------------------


def _helper_str(name: str, fields: list[tuple[str, object]]) -> str:
    """Guava ``MoreObjects.toStringHelper``: ``Name{a=1, b=null}``, arrays as ``[1, 2]``."""

    def value(v: object) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(_java_str(x) for x in v) + "]"
        return _java_str(v)

    return name + "{" + ", ".join(f"{k}={value(v)}" for k, v in fields) + "}"


class ExponentialRetryPolicy(Body, kw_only=True):
    initial: int = 5000
    max: int = 7_200_000
    multiplier: int = 2

    def __str__(self) -> str:
        return _helper_str(
            "ExponentialRetryPolicy",
            [("initial", self.initial), ("max", self.max), ("multiplier", self.multiplier)],
        )


class CustomizedRetryPolicy(Body, kw_only=True):
    #: upstream's default steps: 1s 5s 10s 30s 1m .. 10m 20m 30m 1h 2h
    next: list[int] = msgspec.field(
        default_factory=lambda: [
            *(s * 1000 for s in (1, 5, 10, 30)),
            *(m * 60_000 for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
            3_600_000,
            7_200_000,
        ]
    )

    def __str__(self) -> str:
        return _helper_str("CustomizedRetryPolicy", [("next", self.next)])


class GroupRetryPolicy(Body, kw_only=True):
    type: str = "CUSTOMIZED"
    exponentialRetryPolicy: ExponentialRetryPolicy | None = None
    customizedRetryPolicy: CustomizedRetryPolicy | None = None

    def __str__(self) -> str:
        return _helper_str(
            "GroupRetryPolicy",
            [
                ("type", self.type),
                ("exponentialRetryPolicy", self.exponentialRetryPolicy),
                ("customizedRetryPolicy", self.customizedRetryPolicy),
            ],
        )


class SimpleSubscriptionData(Body, kw_only=True):
    topic: str | None = None
    expressionType: str | None = None
    expression: str | None = None
    version: int = 0

    def __str__(self) -> str:
        return _helper_str(
            "SimpleSubscriptionData",
            [
                ("topic", self.topic),
                ("expressionType", self.expressionType),
                ("expression", self.expression),
                ("version", self.version),
            ],
        )


class SubscriptionGroupConfigView(SubscriptionGroupConfig, kw_only=True):
    """A GET_SUBSCRIPTIONGROUP_CONFIG body with the two fields of upstream's
    ``SubscriptionGroupConfig`` that this broker does not keep (an upstream broker sends them;
    when absent they print as Java's defaults, as mqadmin would print them)."""

    groupRetryPolicy: GroupRetryPolicy = msgspec.field(default_factory=GroupRetryPolicy)
    subscriptionDataSet: list[SimpleSubscriptionData] | None = None


#: upstream ``SubscriptionGroupConfig``'s fields in declaration order (what mqadmin prints)
GROUP_CONFIG_FIELDS = (
    "groupName",
    "consumeEnable",
    "consumeFromMinEnable",
    "consumeBroadcastEnable",
    "consumeMessageOrderly",
    "retryQueueNums",
    "retryMaxTimes",
    "groupRetryPolicy",
    "brokerId",
    "whichBrokerWhenConsumeSlowly",
    "notifyConsumerIdsChangedEnable",
    "groupSysFlag",
    "consumeTimeoutMinute",
    "subscriptionDataSet",
    "attributes",
)


def _field_str(value: object) -> str:
    """Java's ``toString()`` of a field value; an absent one prints empty."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return java_map_str({str(k): _java_str(v) for k, v in value.items()})
    if isinstance(value, list):
        return "[" + ", ".join(str(x) for x in value) + "]"
    return _java_str(value)


def group_config_lines(
    cluster: str | None, broker_name: str, config: SubscriptionGroupConfigView
) -> list[str]:
    """mqadmin ``getConsumerConfig``'s block for one broker group."""
    rule = "=" * 29
    lines = [f"{rule}{_java_str(cluster)}:{broker_name}{rule}"]
    lines.extend(f"{name:<40}=  {_field_str(getattr(config, name))}" for name in GROUP_CONFIG_FIELDS)
    return lines


async def _group_config(admin: MQAdmin, addr: str, group: str) -> SubscriptionGroupConfigView | None:
    """The broker's config of ``group``; None when it answers SUBSCRIPTION_GROUP_NOT_EXIST."""
    cmd = request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
    response = await admin.client.invoke(addr, cmd, admin.timeout)
    if response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
        return None
    if response.code != ResponseCode.SUCCESS:
        raise AdminError(response.code, response.remark, addr)
    try:
        return SubscriptionGroupConfigView.decode(response.body_bytes)
    except (ValueError, msgspec.ValidationError) as e:
        raise AdminError(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupConfig body: {e}", addr) from None


def _select_addr(bd: BrokerData) -> str | None:
    """Upstream ``BrokerData.selectBrokerAddr``: the master, else (here) the lowest-id replica."""
    if MASTER_ID in bd.brokerAddrs:
        return bd.brokerAddrs[MASTER_ID]
    return next((addr for _, addr in sorted(bd.brokerAddrs.items())), None)


def _cluster_of(info: ClusterInfo, broker_name: str) -> str | None:
    return next((c for c, names in info.clusterAddrTable.items() if broker_name in names), None)


@click.command("getConsumerConfig")
@namesrv_option
@click.option("-g", "--groupName", "group", required=True, help="subscription group name")
def get_consumer_config(namesrv: str, timeout: float, group: str) -> None:
    """Get consumer config by subscription group name."""
    group = group.strip()

    async def go(admin: MQAdmin) -> None:
        info = await admin.examine_broker_cluster_info()
        lines: list[str] = []
        for name in sorted(info.brokerAddrTable):
            addr = _select_addr(info.brokerAddrTable[name])
            config = await _group_config(admin, addr, group) if addr is not None else None
            if config is not None:
                lines.extend(group_config_lines(_cluster_of(info, name), name, config))
        if not lines:
            raise AdminError(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{group}] does not exist on any broker",
                "",
            )
        for line in lines:
            click.echo(line)

    run_admin("getConsumerConfig", go, namesrv, timeout)


# --- allocateMQ ------------------------------------------------------------------------------------


class RebalanceResult(Body, kw_only=True):
    """Client id -> its queues (upstream ``RebalanceResult``, the tool's JSON)."""

    result: dict[str, list[MessageQueue]] = {}


def _java_split(text: str, sep: str) -> list[str]:
    """Java's ``String.split``: trailing empty parts dropped."""
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def rebalance_json(mqs: set[MessageQueue], cids: list[str]) -> str:
    """The averaging strategy's share of ``mqs`` for each of ``cids``, as mqadmin prints it."""
    rr = RebalanceResult(result={cid: allocate_averagely(mqs, cids, cid) for cid in cids})
    return dumps(rr).decode("utf-8")


@click.command("allocateMQ")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-i", "--ipList", "ip_list", required=True, help="ipList")
def allocate_mq(namesrv: str, timeout: float, topic: str, ip_list: str) -> None:
    """Allocate MQ."""
    topic = topic.strip()
    cids = _java_split(ip_list.strip(), ",")
    if not cids:
        fail("allocateMQ", "no client id in -i")

    async def go(admin: MQAdmin) -> None:
        route = await admin.examine_topic_route_info(topic)
        click.echo(rebalance_json(subscribe_queues_from_route(topic, route), cids))

    run_admin("allocateMQ", go, namesrv, timeout)


COMMANDS = [query_cq, get_consumer_config, allocate_mq]
