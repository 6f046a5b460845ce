"""``rmq-admin``: mqadmin's command names and output shapes, against our (or any) name server.

Commands: ``clusterList``, ``topicList``, ``topicRoute``. The name server comes from ``-n``
(``host:port``, several separated by ``;``), else ``$NAMESRV_ADDR``, else ``127.0.0.1:9876``.
Failures print a short message to stderr and exit with status 1.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

import click
import trio

from client.admin import AdminError, MQAdmin
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from remoting.fastjson import dumps_pretty
from remoting.protocol.common import KVTable
from remoting.protocol.namesrv import ClusterInfo

P = ParamSpec("P")

DEFAULT_NAMESRV = "127.0.0.1:9876"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def _run(command: str, fn: Callable[[MQAdmin], Awaitable[None]], namesrv: str, timeout: float) -> None:
    failures: list[Exception] = []

    async def main() -> None:
        async with RemotingClient(connect_timeout=min(timeout, 3.0), name="rmq-admin") as rc:
            try:
                await fn(MQAdmin(rc, namesrv, timeout=timeout))
            except (AdminError, RemotingError, ValueError) as e:
                failures.append(e)  # caught inside the client's nursery: no ExceptionGroup

    trio.run(main)
    if failures:
        click.echo(f"rmq-admin {command} command failed: {failures[0]}", err=True)
        sys.exit(1)


def _namesrv_option(f: Callable[P, Any]) -> Callable[P, Any]:
    f = click.option(
        "-n",
        "--namesrvAddr",
        "namesrv",
        envvar="NAMESRV_ADDR",
        default=DEFAULT_NAMESRV,
        show_default=True,
        help="Name server address list, eg: '192.168.0.1:9876;192.168.0.2:9876'",
    )(f)
    return click.option(
        "--timeout", type=float, default=5.0, show_default=True, help="Per-request timeout in seconds."
    )(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log to stderr (debug level).")
def main(verbose: bool) -> None:
    """Admin tool for rmq-container and Apache RocketMQ clusters (mqadmin command names)."""
    if verbose:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)


# --- clusterList -------------------------------------------------------------------------------


def _fmt_cluster_row(cols: list[str], header: bool) -> str:
    pcwait = f"{cols[8]:<11}" if header else f"{cols[8]:>11}"
    activated = f"{cols[11]:<10}" if header else f"{cols[11]:>10}"
    return (
        f"{cols[0]:<22}  {cols[1]:<22}  {cols[2]:<4}  {cols[3]:<22} {cols[4]:<16}  {cols[5]:>16}  "
        f"{cols[6]:>30}  {cols[7]:<22}  {pcwait}  {cols[9]:<12}  {cols[10]:<8}  {activated}"
    )


CLUSTER_HEADER = [
    "#Cluster Name",
    "#Broker Name",
    "#BID",
    "#Addr",
    "#Version",
    "#InTPS(LOAD)",
    "#OutTPS(LOAD)",
    "#Timer(Progress)",
    "#PCWait(ms)",
    "#Hour",
    "#SPACE",
    "#ACTIVATED",
]


def _java_str(table: dict[str, str], key: str, default: str | None = None) -> str:
    value = table.get(key, default)
    return "null" if value is None else value


def _first_float(text: str | None) -> float:
    if not text or not text.strip():
        return 0.0
    try:
        return float(text.split(" ")[0])
    except ValueError:
        return 0.0


def cluster_row(
    cluster: str, broker: str, bid: int, addr: str, stats: KVTable | None, now_ms: int
) -> list[str]:
    """One clusterList line's columns, filled from GET_BROKER_RUNTIME_INFO when available."""
    t: dict[str, str] = stats.table if stats is not None else {}

    def s(key: str, default: str | None = None) -> str:
        # Like mqadmin: "" when the stats call failed, "null" for a key the broker did not send.
        return _java_str(t, key, default) if stats is not None else ""

    timer: list[float] = []
    for key in (
        "timerReadBehind",
        "timerOffsetBehind",
        "timerCongestNum",
        "timerEnqueueTps",
        "timerDequeueTps",
    ):
        try:
            timer.append(float(t[key]))
        except (KeyError, ValueError):
            timer = [0, 0, 0, 0, 0]
            break
    hour = 0.0
    earliest = t.get("earliestMessageTimeStamp")
    if earliest:
        try:
            hour = (now_ms - int(earliest)) / 1000.0 / 60.0 / 60.0
        except ValueError:
            hour = 0.0
    space = _first_float(t.get("commitLogDiskRatio"))
    return [
        cluster,
        broker,
        str(bid),
        addr,
        t.get("brokerVersionDesc", "") if stats is not None else "",
        f"{_first_float(t.get('putTps')):9.2f}({s('sendThreadPoolQueueSize')},{s('sendThreadPoolQueueHeadWaitTimeMills')}ms)",
        f"{_first_float(t.get('getTransferredTps')):9.2f}({s('pullThreadPoolQueueSize')},"
        f"{s('pullThreadPoolQueueHeadWaitTimeMills')}ms|{s('ackThreadPoolQueueSize', 'N')},"
        f"{s('ackThreadPoolQueueHeadWaitTimeMills', 'N')}ms)",
        f"{int(timer[0])}-{int(timer[1])}({timer[2] / 10000.0:.1f}w, {timer[3]:.1f}, {timer[4]:.1f})",
        s("pageCacheLockTimeMills"),
        f"{hour:2.2f}",
        f"{space:.4f}",
        "true" if t.get("brokerActive", "").lower() == "true" else "false",
    ]


async def _cluster_list(admin: MQAdmin, cluster_name: str | None) -> list[str]:
    info: ClusterInfo = await admin.examine_broker_cluster_info()
    clusters = [cluster_name] if cluster_name else list(info.clusterAddrTable)
    members: list[tuple[str, str, int, str]] = []
    for cluster in clusters:
        for broker in sorted(info.clusterAddrTable.get(cluster, [])):
            bd = info.brokerAddrTable.get(broker)
            if bd is None:
                continue
            members.extend((cluster, broker, bid, addr) for bid, addr in sorted(bd.brokerAddrs.items()))
    stats: dict[str, KVTable | None] = {}

    async def fetch(addr: str) -> None:
        try:
            stats[addr] = await admin.fetch_broker_runtime_stats(addr)
        except (AdminError, RemotingError, ValueError) as e:
            logging.getLogger("client.admin").debug("runtime stats of %s: %s", addr, e)
            stats[addr] = None

    async with trio.open_nursery() as nursery:
        for addr in {m[3] for m in members}:
            nursery.start_soon(fetch, addr)
    now_ms = time.time_ns() // 1_000_000
    lines = [_fmt_cluster_row(CLUSTER_HEADER, header=True)]
    for cluster, broker, bid, addr in members:
        lines.append(
            _fmt_cluster_row(cluster_row(cluster, broker, bid, addr, stats.get(addr), now_ms), header=False)
        )
    return lines


@main.command("clusterList")
@_namesrv_option
@click.option("-c", "--clusterName", "cluster_name", default=None, help="which cluster")
def cluster_list(namesrv: str, timeout: float, cluster_name: str | None) -> None:
    """List cluster infos."""

    async def go(admin: MQAdmin) -> None:
        for line in await _cluster_list(admin, cluster_name.strip() if cluster_name else None):
            click.echo(line)

    _run("clusterList", go, namesrv, timeout)


# --- topicList ---------------------------------------------------------------------------------


async def _topic_list(admin: MQAdmin, cluster_mode: bool) -> list[str]:
    topics = (await admin.fetch_all_topic_list()).topicList
    if not cluster_mode:
        return list(topics)
    info = await admin.examine_broker_cluster_info()
    lines = [f"{'#Cluster Name':<20}  {'#Topic':<48}  {'#Consumer Group':<48}"]
    for topic in topics:
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        cluster = ""
        groups: list[str] = []
        try:
            route = await admin.examine_topic_route_info(topic)
            if route.brokerDatas:
                name = route.brokerDatas[0].brokerName
                cluster = next((c for c, names in info.clusterAddrTable.items() if name in names), "")
            found = await admin.query_topic_consume_by_who(topic)
            groups = found.groupList if found is not None else []
        except (AdminError, RemotingError, ValueError) as e:
            logging.getLogger("client.admin").debug("topic %s: %s", topic, e)
        for group in groups or [""]:
            lines.append(f"{cluster[:20]:<20}  {topic[:64]:<64}  {group[:64]:<64}")
    return lines


@main.command("topicList")
@_namesrv_option
@click.option("-c", "--clusterModel", "cluster_mode", is_flag=True, help="clusterModel")
def topic_list(namesrv: str, timeout: float, cluster_mode: bool) -> None:
    """Fetch all topic list from name server."""

    async def go(admin: MQAdmin) -> None:
        for line in await _topic_list(admin, cluster_mode):
            click.echo(line)

    _run("topicList", go, namesrv, timeout)


# --- topicRoute --------------------------------------------------------------------------------

ROUTE_FORMAT = "{:<45} {:<32} {:<50} {:<10} {:<11} {:<5}"


def _java_map(addrs: dict[int, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(addrs.items())) + "}"


@main.command("topicRoute")
@_namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-l", "--list", "list_format", is_flag=True, help="Use list format to print data")
def topic_route(namesrv: str, timeout: float, topic: str, list_format: bool) -> None:
    """Examine topic route info."""

    async def go(admin: MQAdmin) -> None:
        route = await admin.examine_topic_route_info(topic.strip())
        if not list_format:
            click.echo(dumps_pretty(route))
            return
        queues = {qd.brokerName: qd for qd in route.queueDatas}
        click.echo(
            ROUTE_FORMAT.format(
                "#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"
            )
        )
        total_read = total_write = 0
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            qd = queues.get(bd.brokerName)
            if qd is None:
                continue
            total_read += qd.readQueueNums
            total_write += qd.writeQueueNums
            click.echo(
                ROUTE_FORMAT.format(
                    bd.cluster,
                    bd.brokerName,
                    _java_map(bd.brokerAddrs),
                    qd.readQueueNums,
                    qd.writeQueueNums,
                    qd.perm,
                )
            )
        click.echo("-" * 158)
        click.echo(ROUTE_FORMAT.format("Total:", len(queues), "", total_read, total_write, ""))

    _run("topicRoute", go, namesrv, timeout)


if __name__ == "__main__":
    main()
