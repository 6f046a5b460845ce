"""``rmq-admin``: mqadmin's command names and output shapes, against our (or any) name server.

Commands: ``clusterList``, ``topicList``, ``topicRoute`` (name server; ``wipeWritePerm``,
``addWritePerm``, ``getNamesrvConfig``, ``updateNamesrvConfig``, ``updateKvConfig``, ``deleteKvConfig``,
``updateOrderConf``, ``topicClusterList`` in :mod:`client.admin_namesrv_cli`); ``updateTopic``,
``deleteTopic``, ``topicStatus``, ``updateSubGroup``, ``consumerProgress``, ``brokerStatus`` (brokers;
more in :mod:`client.admin_broker_cli`, offsets in :mod:`client.admin_offsets_cli`); messages
(:mod:`client.admin_messages`);
``getControllerMetaData``, ``getControllerConfig``, ``updateControllerConfig``, ``getSyncStateSet``,
``electMaster``, ``cleanBrokerMetadata``, ``getBrokerEpoch`` (controllers, :mod:`client.admin_controller_cli`). The
name server comes from ``-n`` (``host:port``, several separated by ``;``), else ``$NAMESRV_ADDR``,
else ``127.0.0.1:9876``. Failures print a short message to stderr and exit with status 1.
"""

from __future__ import annotations

import logging
import signal
import sys
import time

import click
import msgspec
import trio

from client.admin import AdminError, MQAdmin
from client.admin_common import java_bool, namesrv_option, note_ignored_order_conf, require_target, run_admin
from client.admin_controller_cli import COMMANDS as CONTROLLER_COMMANDS
from client.admin_output import (
    all_groups_progress_lines,
    group_config_str,
    group_progress_lines,
    parse_attribute_modification,
    topic_config_str,
    topic_status_lines,
)
from client.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.errors import RemotingError
from remoting.fastjson import dumps_pretty
from remoting.protocol.broker import SubscriptionGroupConfig
from remoting.protocol.common import KVTable, TopicConfig
from remoting.protocol.namesrv import NAMESPACE_ORDER_TOPIC_CONFIG, ClusterInfo


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
@namesrv_option
@click.option("-c", "--clusterName", "cluster_name", default=None, help="which cluster")
def cluster_list(namesrv: str, timeout: float, cluster_name: str | None) -> None:
    """List cluster infos."""

    async def go(admin: MQAdmin) -> None:
        for line in await _cluster_list(admin, cluster_name.strip() if cluster_name else None):
            click.echo(line)

    run_admin("clusterList", go, namesrv, timeout)


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
@namesrv_option
@click.option("-c", "--clusterModel", "cluster_mode", is_flag=True, help="clusterModel")
def topic_list(namesrv: str, timeout: float, cluster_mode: bool) -> None:
    """Fetch all topic list from name server."""

    async def go(admin: MQAdmin) -> None:
        for line in await _topic_list(admin, cluster_mode):
            click.echo(line)

    run_admin("topicList", go, namesrv, timeout)


# --- topicRoute --------------------------------------------------------------------------------

ROUTE_FORMAT = "{:<45} {:<32} {:<50} {:<10} {:<11} {:<5}"


def _java_map(addrs: dict[int, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(addrs.items())) + "}"


@main.command("topicRoute")
@namesrv_option
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

    run_admin("topicRoute", go, namesrv, timeout)


# --- shared helpers of the broker commands ---------------------------------------------------------


def _one_target(broker_addr: str | None, cluster_name: str | None) -> None:
    require_target(broker_addr, cluster_name, "one of -b/--brokerAddr or -c/--clusterName is required")


def _attributes_option(text: str | None) -> dict[str, str]:
    try:
        return parse_attribute_modification(text.strip()) if text else {}
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


# --- updateTopic -------------------------------------------------------------------------------------


@main.command("updateTopic")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="create topic to which broker")
@click.option("-c", "--clusterName", "cluster_name", help="create topic to which cluster")
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-r", "--readQueueNums", "read_queues", type=int, default=8, help="set read queue nums")
@click.option("-w", "--writeQueueNums", "write_queues", type=int, default=8, help="set write queue nums")
@click.option("-p", "--perm", type=int, default=6, help="set topic's permission(2|4|6), intro[2:W 4:R; 6:RW]")
@click.option("-o", "--order", default="false", help="set topic's order(true|false)")
@click.option("-a", "--attributes", default=None, help="attribute(+a=b,+c=d,-e)")
def update_topic(
    namesrv: str,
    timeout: float,
    broker_addr: str | None,
    cluster_name: str | None,
    topic: str,
    read_queues: int,
    write_queues: int,
    perm: int,
    order: str,
    attributes: str | None,
) -> None:
    """Update or create topic."""
    _one_target(broker_addr, cluster_name)
    modification = _attributes_option(attributes)
    is_order = java_bool(order)
    config = TopicConfig(
        topicName=topic.strip(),
        readQueueNums=read_queues,
        writeQueueNums=write_queues,
        perm=perm,
        order=is_order,
    )

    async def go(admin: MQAdmin) -> None:
        if broker_addr:
            addr = broker_addr.strip()
            await admin.create_and_update_topic_config(addr, config, modification)
            if is_order:
                order_conf = f"{await admin.fetch_broker_name_by_addr(addr)}:{config.writeQueueNums}"
                await admin.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, config.topicName, order_conf)
                click.echo(f"set broker orderConf. isOrder={order}, orderConf=[{order_conf}]")
                await note_ignored_order_conf(admin)
            click.echo(f"create topic to {addr} success.")
        else:
            assert cluster_name is not None
            cluster = cluster_name.strip()
            for addr in await admin.fetch_master_addrs_by_cluster(cluster):
                await admin.create_and_update_topic_config(addr, config, modification)
                click.echo(f"create topic to {addr} success.")
            if is_order:
                names = await admin.fetch_broker_names_by_cluster(cluster)
                order_conf = ";".join(f"{n}:{config.writeQueueNums}" for n in names)
                await admin.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, config.topicName, order_conf)
                click.echo(f"set cluster orderConf. isOrder={order}, orderConf=[{order_conf}]")
                await note_ignored_order_conf(admin)
        click.echo(topic_config_str(config, modification))

    run_admin("updateTopic", go, namesrv, timeout)


# --- deleteTopic -------------------------------------------------------------------------------------


@main.command("deleteTopic")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-c", "--clusterName", "cluster_name", required=True, help="delete topic from which cluster")
def delete_topic(namesrv: str, timeout: float, topic: str, cluster_name: str) -> None:
    """Delete topic from broker and NameServer."""
    topic = topic.strip()
    cluster = cluster_name.strip()

    async def go(admin: MQAdmin) -> None:
        await admin.delete_topic_in_broker(await admin.fetch_master_addrs_by_cluster(cluster), topic)
        click.echo(f"delete topic [{topic}] from cluster [{cluster}] success.")
        await admin.delete_topic_in_namesrvs(topic, cluster)
        click.echo(f"delete topic [{topic}] from NameServer success.")

    run_admin("deleteTopic", go, namesrv, timeout)


# --- topicStatus -------------------------------------------------------------------------------------


@main.command("topicStatus")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-c", "--cluster", "cluster_name", default=None, help="cluster name, used to find the route")
def topic_status(namesrv: str, timeout: float, topic: str, cluster_name: str | None) -> None:
    """Examine topic Status info."""
    topic = topic.strip()

    async def go(admin: MQAdmin) -> None:
        stats = await admin.examine_topic_stats(topic, cluster_name.strip() if cluster_name else None)
        for line in topic_status_lines(stats):
            click.echo(line)

    run_admin("topicStatus", go, namesrv, timeout)


# --- updateSubGroup ----------------------------------------------------------------------------------


@main.command("updateSubGroup")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="create subscription group to which broker")
@click.option("-c", "--clusterName", "cluster_name", help="create subscription group to which cluster")
@click.option("-g", "--groupName", "group", required=True, help="consumer group name")
@click.option("-s", "--consumeEnable", "consume_enable", default=None, help="consume enable")
@click.option("-m", "--consumeFromMinEnable", "from_min", default=None, help="from min offset")
@click.option("-d", "--consumeBroadcastEnable", "broadcast", default=None, help="broadcast")
@click.option("-o", "--consumeMessageOrderly", "orderly", default=None, help="consume message orderly")
@click.option("-q", "--retryQueueNums", "retry_queues", type=int, default=None, help="retry queue nums")
@click.option("-r", "--retryMaxTimes", "retry_max", type=int, default=None, help="retry max times")
@click.option("-i", "--brokerId", "broker_id", type=int, default=None, help="consumer from which broker id")
@click.option(
    "-w",
    "--whichBrokerWhenConsumeSlowly",
    "slow_broker",
    type=int,
    default=None,
    help="which broker id when consume slowly",
)
@click.option("-a", "--notifyConsumerIdsChanged", "notify", default=None, help="notify consumerId changed")
@click.option("--attributes", default=None, help="attribute(+a=b,+c=d,-e)")
def update_sub_group(
    namesrv: str,
    timeout: float,
    broker_addr: str | None,
    cluster_name: str | None,
    group: str,
    consume_enable: str | None,
    from_min: str | None,
    broadcast: str | None,
    orderly: str | None,
    retry_queues: int | None,
    retry_max: int | None,
    broker_id: int | None,
    slow_broker: int | None,
    notify: str | None,
    attributes: str | None,
) -> None:
    """Update or create subscription group."""
    _one_target(broker_addr, cluster_name)
    # like mqadmin: broadcast and from-min default to false here (the struct defaults are true)
    config = SubscriptionGroupConfig(
        groupName=group.strip(), consumeBroadcastEnable=False, consumeFromMinEnable=False
    )
    changes: dict[str, object] = {}
    for name, value in (
        ("consumeEnable", consume_enable),
        ("consumeFromMinEnable", from_min),
        ("consumeBroadcastEnable", broadcast),
        ("consumeMessageOrderly", orderly),
        ("notifyConsumerIdsChangedEnable", notify),
    ):
        if value is not None:
            changes[name] = java_bool(value)
    for name, number in (
        ("retryQueueNums", retry_queues),
        ("retryMaxTimes", retry_max),
        ("brokerId", broker_id),
        ("whichBrokerWhenConsumeSlowly", slow_broker),
    ):
        if number is not None:
            changes[name] = number
    if attributes:
        changes["attributes"] = _attributes_option(attributes)
    config = msgspec.structs.replace(config, **changes)

    async def go(admin: MQAdmin) -> None:
        if broker_addr:
            await admin.create_and_update_subscription_group_config(broker_addr.strip(), config)
            click.echo(f"create subscription group to {broker_addr.strip()} success.")
        else:
            assert cluster_name is not None
            for addr in await admin.fetch_master_addrs_by_cluster(cluster_name.strip()):
                await admin.create_and_update_subscription_group_config(addr, config)
                click.echo(f"create subscription group to {addr} success.")
        click.echo(group_config_str(config))

    run_admin("updateSubGroup", go, namesrv, timeout)


# --- consumerProgress --------------------------------------------------------------------------------


@main.command("consumerProgress")
@namesrv_option
@click.option("-g", "--groupName", "group", default=None, help="consumer group name")
@click.option("-t", "--topicName", "topic", default=None, help="topic name")
@click.option("-c", "--cluster", "cluster_name", default=None, help="Cluster name, used to find the route.")
def consumer_progress(
    namesrv: str, timeout: float, group: str | None, topic: str | None, cluster_name: str | None
) -> None:
    """Query consumer's progress, speed."""

    async def go(admin: MQAdmin) -> None:
        if group:
            lines = await group_progress_lines(
                admin,
                group.strip(),
                topic.strip() if topic else None,
                cluster_name.strip() if cluster_name else None,
            )
        else:
            lines = await all_groups_progress_lines(admin)
        for line in lines:
            click.echo(line)

    run_admin("consumerProgress", go, namesrv, timeout)


# --- brokerStatus ------------------------------------------------------------------------------------


@main.command("brokerStatus")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="Broker address")
@click.option("-c", "--clusterName", "cluster_name", help="which cluster")
def broker_status(namesrv: str, timeout: float, broker_addr: str | None, cluster_name: str | None) -> None:
    """Fetch broker runtime status data."""
    _one_target(broker_addr, cluster_name)

    async def go(admin: MQAdmin) -> None:
        if broker_addr:
            stats = await admin.fetch_broker_runtime_stats(broker_addr.strip())
            for key in sorted(stats.table):
                click.echo(f"{key:<32}: {stats.table[key]}")
            return
        assert cluster_name is not None
        for addr in await admin.fetch_master_and_slave_addrs_by_cluster(cluster_name.strip()):
            try:
                stats = await admin.fetch_broker_runtime_stats(addr)
            except (AdminError, RemotingError) as e:
                click.echo(f"broker {addr}: {e}", err=True)
                continue
            for key in sorted(stats.table):
                click.echo(f"{addr:<24} {key:<32}: {stats.table[key]}")

    run_admin("brokerStatus", go, namesrv, timeout)


for _command in CONTROLLER_COMMANDS:
    main.add_command(_command)


def _add_commands() -> None:
    from client.admin_broker_cli import BROKER_COMMANDS
    from client.admin_export_cli import COMMANDS as EXPORT_COMMANDS
    from client.admin_list_cli import COMMANDS as LIST_COMMANDS
    from client.admin_messages import COMMANDS as MESSAGE_COMMANDS
    from client.admin_metrics_cli import COMMANDS as METRICS_COMMANDS
    from client.admin_namesrv_cli import NAMESRV_COMMANDS
    from client.admin_offsets_cli import COMMANDS as OFFSET_COMMANDS
    from client.admin_print_cli import COMMANDS as PRINT_COMMANDS
    from client.admin_queue_cli import COMMANDS as QUEUE_COMMANDS
    from client.admin_send_cli import COMMANDS as SEND_COMMANDS
    from client.admin_stats_cli import COMMANDS as STATS_COMMANDS
    from client.admin_store_cli import COMMANDS as STORE_COMMANDS
    from client.admin_trace_cli import COMMANDS as TRACE_COMMANDS

    for command in (
        *NAMESRV_COMMANDS,
        *BROKER_COMMANDS,
        *MESSAGE_COMMANDS,
        *OFFSET_COMMANDS,
        *SEND_COMMANDS,
        *PRINT_COMMANDS,
        *QUEUE_COMMANDS,
        *LIST_COMMANDS,
        *STORE_COMMANDS,
        *STATS_COMMANDS,
        *EXPORT_COMMANDS,
        *METRICS_COMMANDS,
        *TRACE_COMMANDS,
    ):
        main.add_command(command)


_add_commands()


def run() -> None:
    """The ``rmq-admin`` entry point: output piped into a reader that stops early (``| head``) ends
    the command quietly, as for other Unix tools, instead of a BrokenPipeError traceback."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main(prog_name="rmq-admin")


if __name__ == "__main__":
    run()
