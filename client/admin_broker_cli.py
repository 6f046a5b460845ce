"""``rmq-admin`` broker commands: ``getBrokerConfig``, ``updateBrokerConfig``, ``consumerConnection``,
``producerConnection``, ``producer``, ``deleteSubGroup``, ``updateTopicPerm``, ``brokerConsumeStats``,
``consumerStatus``.

Same names, flag letters and output lines as mqadmin. Where mqadmin walks a cluster (``-c``) and one
broker fails, it prints the failure and goes on; so do these commands, then exit with status 1.
``updateTopicPerm`` changes only the perm of each broker's own topic config (mqadmin rebuilds the
config from the route's first queue data, losing the order flag and attributes, and with ``-c``
creates the topic on masters that lack it; here those masters are left alone).
"""

from __future__ import annotations

import os
import tempfile
import time

import click
import msgspec
import trio

from client.admin import NO_MASTER_PLACEHOLDER, AdminError, MQAdmin
from client.admin_common import echo_lines, java_bool, namesrv_option, require_target, run_admin
from client.admin_output import (
    analyze_process_queues,
    java_date,
    mq_key,
    rebalance_ok,
    running_info_str,
    same_subscription,
    topic_config_str,
    version_desc,
)
from client.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.errors import RemotingError
from remoting.protocol.broker import ConsumerRunningInfo
from remoting.protocol.namesrv import MASTER_ID

__all__ = ["BROKER_COMMANDS", "NOT_A_MASTER_OF_TOPIC"]


def _one_of(broker_addr: str | None, cluster_name: str | None) -> None:
    require_target(broker_addr, cluster_name, "give -b (broker address) or -c (cluster name)")


class _Failures:
    """Per-broker failures of a cluster-wide command: reported as they happen, raised at the end."""

    def __init__(self) -> None:
        self.count = 0
        self.first: Exception | None = None

    def add(self, what: str, error: Exception) -> None:
        self.count += 1
        self.first = self.first or error
        click.echo(f"{what}: {error}", err=True)

    def raise_if_any(self) -> None:
        if self.first is not None:
            more = f" (and {self.count - 1} more)" if self.count > 1 else ""
            raise ValueError(f"{self.first}{more}")


# --- getBrokerConfig ----------------------------------------------------------------------------------


async def _print_config(admin: MQAdmin, title: str, addr: str) -> None:
    click.echo(title)
    if addr == NO_MASTER_PLACEHOLDER:
        return
    config = await admin.get_broker_config(addr)
    if not config:
        click.echo(f"Broker[{addr}] has no config property!")
        return
    for key, value in config.items():
        click.echo(f"{key:<50}=  {value}")
    click.echo("")


@click.command("getBrokerConfig")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="get which broker")
@click.option("-c", "--clusterName", "cluster_name", default=None, help="get which cluster")
def get_broker_config(
    namesrv: str, timeout: float, broker_addr: str | None, cluster_name: str | None
) -> None:
    """Get broker config by cluster or special broker."""
    _one_of(broker_addr, cluster_name)

    async def go(admin: MQAdmin) -> None:
        if broker_addr:
            addr = broker_addr.strip()
            await _print_config(admin, f"============{addr}============", addr)
            return
        assert cluster_name is not None
        failures = _Failures()
        for master, slaves in (await admin.fetch_master_and_slave_distinguish(cluster_name.strip())).items():
            targets = [(f"============Master: {master}============", master)]
            targets += [(f"============My Master: {master}=====Slave: {s}============", s) for s in slaves]
            for title, addr in targets:
                try:
                    await _print_config(admin, title, addr)
                except (AdminError, RemotingError) as e:
                    failures.add(f"broker {addr}", e)
        failures.raise_if_any()

    run_admin("getBrokerConfig", go, namesrv, timeout)


# --- updateBrokerConfig -------------------------------------------------------------------------------


@click.command("updateBrokerConfig")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="update which broker")
@click.option("-c", "--clusterName", "cluster_name", default=None, help="update which cluster")
@click.option(
    "-a",
    "--updateAllBroker",
    "all_brokers",
    default=None,
    help="update all brokers include slave (with -c; takes a value, as in mqadmin: -a true)",
)
@click.option("-k", "--key", required=True, help="config key")
@click.option("-v", "--value", required=True, help="config value")
def update_broker_config(
    namesrv: str,
    timeout: float,
    broker_addr: str | None,
    cluster_name: str | None,
    all_brokers: str | None,
    key: str,
    value: str,
) -> None:
    """Update broker's config."""
    _one_of(broker_addr, cluster_name)
    properties = {key.strip(): value.strip()}

    async def go(admin: MQAdmin) -> None:
        if broker_addr:
            addr = broker_addr.strip()
            await admin.update_broker_config(addr, properties)
            click.echo(f"update broker config success, {addr}")
            return
        assert cluster_name is not None
        cluster = cluster_name.strip()
        if all_brokers is not None:
            addrs = await admin.fetch_master_and_slave_addrs_by_cluster(cluster)
        else:
            addrs = await admin.fetch_master_addrs_by_cluster(cluster)
        failures = _Failures()
        for addr in addrs:
            try:
                await admin.update_broker_config(addr, properties)
            except (AdminError, RemotingError) as e:
                failures.add(f"update broker config failed, {addr}", e)
                continue
            click.echo(f"update broker config success, {addr}")
        failures.raise_if_any()

    run_admin("updateBrokerConfig", go, namesrv, timeout)


# --- consumerConnection / producerConnection ----------------------------------------------------------


@click.command("consumerConnection")
@namesrv_option
@click.option("-g", "--consumerGroup", "group", required=True, help="consumer group name")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="broker address")
def consumer_connection(namesrv: str, timeout: float, group: str, broker_addr: str | None) -> None:
    """Query consumer's socket connection, client version and subscription."""

    async def go(admin: MQAdmin) -> None:
        cc = await admin.examine_consumer_connection_info(
            group.strip(), broker_addr.strip() if broker_addr else None
        )
        click.echo(f"{'#ClientId':<36} {'#ClientAddr':<22} {'#Language':<10} #Version")
        for conn in cc.connectionSet:
            click.echo(
                f"{conn.clientId:<36} {conn.clientAddr:<22} {conn.language:<10} {version_desc(conn.version)}"
            )
        click.echo("\nBelow is subscription:")
        click.echo(f"{'#Topic':<20} #SubExpression")
        for sd in cc.subscriptionTable.values():
            click.echo(f"{sd.topic:<20} {sd.subString}")
        click.echo("")
        click.echo(f"ConsumeType: {cc.consumeType}")
        click.echo(f"MessageModel: {cc.messageModel}")
        click.echo(f"ConsumeFromWhere: {cc.consumeFromWhere}")

    run_admin("consumerConnection", go, namesrv, timeout)


@click.command("producerConnection")
@namesrv_option
@click.option("-g", "--producerGroup", "group", required=True, help="producer group name")
@click.option("-t", "--topic", required=True, help="topic name")
def producer_connection(namesrv: str, timeout: float, group: str, topic: str) -> None:
    """Query producer's socket connection and client version."""

    async def go(admin: MQAdmin) -> None:
        pc = await admin.examine_producer_connection_info(group.strip(), topic.strip())
        for i, conn in enumerate(pc.connectionSet, 1):
            click.echo(
                f"{i:04d}  {conn.clientId:<32} {conn.clientAddr:<22} {conn.language:<8} "
                f"{version_desc(conn.version)}"
            )

    run_admin("producerConnection", go, namesrv, timeout)


@click.command("producer")
@namesrv_option
@click.option("-b", "--broker", "broker_addr", required=True, help="broker address")
def producer(namesrv: str, timeout: float, broker_addr: str) -> None:
    """Query producer's instances, connection, status, etc."""

    async def go(admin: MQAdmin) -> None:
        table = await admin.get_all_producer_info(broker_addr.strip())
        for group, producers in table.data.items():
            if not producers:
                click.echo(f"producer group ({group}) instances are empty")
            for p in producers:
                # upstream ProducerInfo.toString(), its odd spacing included
                click.echo(
                    f"producer group ({group}) instance : clientId={p.clientId},remoteIP={p.remoteIP}, "
                    f"language={p.language}, version={p.version}, lastUpdateTimestamp={p.lastUpdateTimestamp}"
                )

    run_admin("producer", go, namesrv, timeout)


# --- deleteSubGroup -----------------------------------------------------------------------------------


@click.command("deleteSubGroup")
@namesrv_option
@click.option(
    "-b", "--brokerAddr", "broker_addr", default=None, help="delete subscription group from which broker"
)
@click.option(
    "-c", "--clusterName", "cluster_name", default=None, help="delete subscription group from which cluster"
)
@click.option("-g", "--groupName", "group", required=True, help="subscription group name")
@click.option("-r", "--removeOffset", "remove_offset", default=None, help="remove offset (true|false)")
def delete_sub_group(
    namesrv: str,
    timeout: float,
    broker_addr: str | None,
    cluster_name: str | None,
    group: str,
    remove_offset: str | None,
) -> None:
    """Delete subscription group from broker."""
    _one_of(broker_addr, cluster_name)
    name = group.strip()
    clean_offset = java_bool(remove_offset)

    async def go(admin: MQAdmin) -> None:
        if broker_addr:
            addr = broker_addr.strip()
            await admin.delete_subscription_group(addr, name, clean_offset)
            click.echo(f"delete subscription group [{name}] from broker [{addr}] success.")
            return
        assert cluster_name is not None
        cluster = cluster_name.strip()
        masters = await admin.fetch_master_addrs_by_cluster(cluster)
        for addr in masters:
            await admin.delete_subscription_group(addr, name, clean_offset)
            click.echo(
                f"delete subscription group [{name}] from broker [{addr}] in cluster [{cluster}] success."
            )
        # as mqadmin: the group's retry and DLQ topics go too (brokers, then name servers)
        failures = _Failures()
        for topic in (RETRY_GROUP_TOPIC_PREFIX + name, DLQ_GROUP_TOPIC_PREFIX + name):
            try:
                await admin.delete_topic_in_broker(masters, topic)
                await admin.delete_topic_in_namesrvs(topic, cluster)
            except (AdminError, RemotingError) as e:
                failures.add(f"deleting topic {topic}", e)
        failures.raise_if_any()

    run_admin("deleteSubGroup", go, namesrv, timeout)


# --- updateTopicPerm ----------------------------------------------------------------------------------

#: mqadmin's refusal of a ``-b`` that is not the master of a broker group of the topic's route
NOT_A_MASTER_OF_TOPIC = "updateTopicPerm error broker not exit or broker is not master!"


@click.command("updateTopicPerm")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="create topic to which broker")
@click.option("-c", "--clusterName", "cluster_name", default=None, help="create topic to which cluster")
@click.option("-t", "--topic", required=True, help="topic name")
@click.option(
    "-p", "--perm", type=int, required=True, help="set topic's permission(2|4|6), intro[2:W; 4:R; 6:RW]"
)
def update_topic_perm(
    namesrv: str, timeout: float, broker_addr: str | None, cluster_name: str | None, topic: str, perm: int
) -> None:
    """Update topic perm."""
    _one_of(broker_addr, cluster_name)
    name = topic.strip()

    async def go(admin: MQAdmin) -> None:
        route = await admin.examine_topic_route_info(name)
        masters = {bd.brokerAddrs[MASTER_ID] for bd in route.brokerDatas if MASTER_ID in bd.brokerAddrs}
        if broker_addr:
            addr = broker_addr.strip()
            if addr not in masters:
                raise ValueError(NOT_A_MASTER_OF_TOPIC)
            config = await admin.get_topic_config(addr, name)
            if config.perm == perm:
                click.echo("new perm equals to the old one!")
                return
            updated = msgspec.structs.replace(config, perm=perm)
            await admin.create_and_update_topic_config(addr, updated)
            click.echo(f"update topic perm from {config.perm} to {perm} in {addr} success.")
            click.echo(f"{topic_config_str(updated, updated.attributes)}.")
            return
        assert cluster_name is not None
        cluster = cluster_name.strip()
        targets = [a for a in await admin.fetch_master_addrs_by_cluster(cluster) if a in masters]
        if not targets:
            raise ValueError(f"no master of cluster [{cluster}] holds topic [{name}]")
        failures = _Failures()
        for addr in targets:
            try:
                config = await admin.get_topic_config(addr, name)
                await admin.create_and_update_topic_config(addr, msgspec.structs.replace(config, perm=perm))
            except (AdminError, RemotingError) as e:
                failures.add(f"update topic perm failed, {addr}", e)
                continue
            click.echo(f"update topic perm from {config.perm} to {perm} in {addr} success.")
        failures.raise_if_any()

    run_admin("updateTopicPerm", go, namesrv, timeout)


# --- consumerStatus ----------------------------------------------------------------------------------


@click.command("consumerStatus")
@namesrv_option
@click.option("-g", "--consumerGroup", "group", required=True, help="consumer group name")
@click.option("-i", "--clientId", "client_id", default=None, help="The consumer's client id")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="broker address")
@click.option(
    "-s",
    "--jstack",
    "jstack",
    is_flag=True,
    default=False,
    help="Run jstack command in the consumer progress",
)
def consumer_status(
    namesrv: str, timeout: float, group: str, client_id: str | None, broker_addr: str | None, jstack: bool
) -> None:
    """Query consumer's internal data structure."""
    group = group.strip()
    broker = broker_addr.strip() if broker_addr else None

    async def go(admin: MQAdmin) -> None:
        if client_id:
            info = await admin.get_consumer_running_info(group, client_id.strip(), jstack, broker)
            click.echo(running_info_str(info), nl=False)
            return
        connection = await admin.examine_consumer_connection_info(group, broker)
        now = int(time.time() * 1000)
        # mqadmin writes each client's report to <now>/<clientId> under the working directory;
        # here under the temporary directory, so that running it leaves nothing behind where it ran
        folder = os.path.join(tempfile.gettempdir(), "rmq-admin-consumerStatus", str(now))
        infos: dict[str, ConsumerRunningInfo] = {}
        failures = _Failures()
        click.echo(f"{'#Index':<10} {'#ClientId':<40} {'#Version':<20} #ConsumerRunningInfoFile")
        for conn in sorted(connection.connectionSet, key=lambda c: c.clientId):
            try:
                info = await admin.get_consumer_running_info(group, conn.clientId, jstack, broker)
            except (AdminError, RemotingError) as e:
                failures.add(f"consumer {conn.clientId}", e)
                continue
            infos[conn.clientId] = info
            path = os.path.join(folder, conn.clientId)
            await trio.Path(folder).mkdir(parents=True, exist_ok=True)
            await trio.Path(path).write_text(running_info_str(info))
            click.echo(f"{len(infos):<10} {conn.clientId:<40} {version_desc(conn.version):<20} {path}")
        if infos:
            if same_subscription(infos):
                click.echo("\n\nSame subscription in the same group of consumer", nl=False)
                click.echo(f"\n\nRebalance {'OK' if rebalance_ok(infos) else 'Failed'}")
                for cid, info in infos.items():
                    echo_lines(analyze_process_queues(cid, info, int(time.time() * 1000)))
            else:
                click.echo("\n\nWARN: Different subscription in the same group of consumer!!!", nl=False)
        failures.raise_if_any()

    run_admin("consumerStatus", go, namesrv, timeout)


# --- brokerConsumeStats ------------------------------------------------------------------------------


@click.command("brokerConsumeStats")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", required=True, help="Broker address")
@click.option(
    "-t", "--timeoutMillis", "timeout_millis", type=int, default=None, help="request timeout Millis"
)
@click.option(
    "-l", "--level", "diff_level", type=int, default=0, show_default=True, help="threshold of print diff"
)
@click.option("-o", "--order", default=None, help="order topic (true|false)")
def broker_consume_stats(
    namesrv: str,
    timeout: float,
    broker_addr: str,
    timeout_millis: int | None,
    diff_level: int,
    order: str | None,
) -> None:
    """Fetch broker consume stats data."""

    async def go(admin: MQAdmin) -> None:
        stats = await admin.fetch_consume_stats_in_broker(broker_addr.strip(), java_bool(order))
        click.echo(
            f"{'#Topic':<64}  {'#Group':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  "
            f"{'#Consumer Offset':<20}  {'#Diff':<20}  #LastTime"
        )
        for groups in stats.consumeStatsList:
            for group, per_topic in groups.items():
                for topic_stats in per_topic:
                    for mq, w in sorted(topic_stats.offsetTable.items(), key=lambda e: mq_key(e[0])):
                        diff = w.brokerOffset - w.consumerOffset
                        if diff < diff_level or w.lastTimestamp <= 0:  # mqadmin prints consumed queues only
                            continue
                        click.echo(
                            f"{mq.topic:<64}  {group:<64}  {mq.brokerName:<32}  {mq.queueId:<4}  "
                            f"{w.brokerOffset:<20}  {w.consumerOffset:<20}  {diff:<20}  {java_date(w.lastTimestamp)}"
                        )
        click.echo(f"\nDiff Total: {stats.totalDiff}")

    run_admin("brokerConsumeStats", go, namesrv, timeout_millis / 1000 if timeout_millis else timeout)


BROKER_COMMANDS: list[click.Command] = [
    get_broker_config,
    update_broker_config,
    consumer_connection,
    producer_connection,
    producer,
    delete_sub_group,
    update_topic_perm,
    broker_consume_stats,
    consumer_status,
]
