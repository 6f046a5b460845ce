"""``rmq-admin exportMetadata`` and ``exportConfigs``: mqadmin's export commands, which write a
cluster's user metadata or its main broker settings as a fastjson pretty-printed JSON file
(``exportMetrics``, the load figures, is :mod:`client.admin_metrics_cli`).

- ``exportMetadata -c CLUSTER`` asks the master of each broker group of the cluster for its topics
  (GET_ALL_TOPIC_CONFIG) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and writes
  ``<dir>/metadata.json``: ``topicConfigTable`` (topic -> TopicConfig), ``subscriptionGroupTable``
  (group -> SubscriptionGroupConfig) and ``exportTime`` (ms). A topic several groups hold is
  written once with its read and write queue numbers summed over them, a group once with its
  ``retryQueueNums`` summed. ``-t`` writes only the topics (``topic.json``), ``-g`` only the
  groups (``subscriptionGroup.json``); ``-t`` wins over ``-g``.
- ``exportMetadata -b ADDR -t`` writes that broker's user topics as upstream's
  ``TopicConfigSerializeWrapper`` (``topicConfigTable``, ``dataVersion``) to ``topic.json``;
  ``-b ADDR -g`` its user groups as ``SubscriptionGroupWrapper`` (``subscriptionGroupTable``,
  ``forbiddenTable``, ``dataVersion``) to ``subscriptionGroup.json``. ``-b`` wins over ``-c``.
- User topics are those that are neither in the broker's system topic list
  (GET_SYSTEM_TOPIC_LIST_FROM_BROKER) nor system topics by upstream's ``TopicValidator``, nor retry
  (``%RETRY%``) or dead-letter (``%DLQ%``) topics unless ``-s``, and whose perm is valid (0..7);
  user groups are neither ``CID_RMQ_SYS_*`` nor one of upstream's predefined groups
  (``MixAll.PREDEFINE_GROUP_SET``).
- ``exportConfigs -c CLUSTER`` writes ``<dir>/configs.json``: ``brokerConfigs`` (broker name ->
  the master's values of a fixed list of keys, :data:`EXPORTED_BROKER_KEYS`, those it reports, as
  strings) and ``clusterScale`` (``namesrvSize``: the name servers given with ``-n``;
  ``masterBrokerSize``, ``slaveBrokerSize``: the cluster's masters and slaves).
The directory (``-f``, default ``/tmp/rocketmq/export``) is created when missing and the file is
replaced atomically. On success the command prints ``export <path> success`` -- without a newline
after ``-b`` and after ``exportConfigs``, as mqadmin does.

Deviations, each deliberate:

- Map keys are written sorted (mqadmin: Java hash order); a topic or group several broker groups
  hold takes its other fields from the last broker group in name order (mqadmin: hash order).
- An unknown ``-c`` cluster fails with exit status 1 (mqadmin's exportMetadata and exportConfigs
  print ``[error] ...`` and write a file without brokers); with
  neither ``-b`` nor ``-c`` the command is a usage error (mqadmin prints its help).
- ``exportMetadata -b`` without ``-t`` or ``-g`` writes ``metadata.json`` of that one broker in
  the ``-c`` form (mqadmin writes nothing and prints nothing).
- ``exportConfigs`` leaves out a broker group without a master but counts its slaves (mqadmin
  asks the address ``NO_MASTER`` for its config and fails).
- Subscription groups are read as upstream's ``SubscriptionGroupConfig`` (with
  ``groupRetryPolicy`` and ``subscriptionDataSet``, which rmq-container's broker does not keep: its
  groups show the default policy, as an upstream broker would send it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, ParamSpec

import click
import msgspec

from client.admin import NO_MASTER_PLACEHOLDER, AdminError, MQAdmin
from client.admin_common import fail, namesrv_option, require_target, run_admin
from client.admin_queue_cli import SubscriptionGroupConfigView
from client.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.fastjson import dumps_pretty
from remoting.protocol.common import (
    Body,
    DataVersion,
    PermName,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
)
from remoting.protocol.topics import is_system_topic

__all__ = [
    "COMMANDS",
    "DEFAULT_EXPORT_DIR",
    "EXPORTED_BROKER_KEYS",
    "ExportSubscriptionGroupWrapper",
    "cluster_configs",
    "cluster_export_options",
    "export_cluster_document",
    "export_dir",
    "exported_broker_properties",
    "get_user_subscription_group",
    "get_user_topic_config",
    "is_predefined_group",
    "is_sys_consumer_group",
    "merge_groups",
    "merge_topics",
    "user_groups",
    "user_topics",
    "write_export",
    "write_or_fail",
]

log = logging.getLogger("client.admin.export")

P = ParamSpec("P")

#: where mqadmin's export commands write when ``-f`` is not given
DEFAULT_EXPORT_DIR = "/tmp/rocketmq/export"

#: upstream ``MixAll.CID_RMQ_SYS_PREFIX``
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"
#: upstream ``MixAll.PREDEFINE_GROUP_SET``
PREDEFINED_GROUPS = frozenset(
    {
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        "TOOLS_CONSUMER",
        "SCHEDULE_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
    }
)

#: the broker config keys ``exportConfigs`` writes (upstream ``needBrokerProprties``)
EXPORTED_BROKER_KEYS = (
    "brokerClusterName",
    "brokerId",
    "brokerName",
    "brokerRole",
    "fileReservedTime",
    "filterServerNums",
    "flushDiskType",
    "maxMessageSize",
    "messageDelayLevel",
    "msgTraceTopicName",
    "slaveReadEnable",
    "traceOn",
    "traceTopicEnable",
    "useTLS",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
)

METADATA_FILE = "metadata.json"
TOPIC_FILE = "topic.json"
GROUP_FILE = "subscriptionGroup.json"
CONFIGS_FILE = "configs.json"


class ExportSubscriptionGroupWrapper(Body, kw_only=True):
    """Upstream ``SubscriptionGroupWrapper`` with upstream's ``SubscriptionGroupConfig`` values
    (what ``exportMetadata -b -g`` writes)."""

    subscriptionGroupTable: dict[str, SubscriptionGroupConfigView] = {}
    forbiddenTable: dict[str, dict[str, int]] = {}
    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)


# --- which topics and groups are the users' ---------------------------------------------------------


def is_sys_consumer_group(group: str) -> bool:
    """Upstream ``MixAll.isSysConsumerGroup``."""
    return group.startswith(SYS_CONSUMER_GROUP_PREFIX)


def is_predefined_group(group: str) -> bool:
    """Upstream ``MixAll.isPredefinedGroup``."""
    return group in PREDEFINED_GROUPS


def _valid_perm(perm: int) -> bool:
    """Upstream ``PermName.isValid``: no bit above read, write and inherit."""
    return 0 <= perm < PermName.PERM_PRIORITY


def user_topics(
    table: dict[str, TopicConfig], broker_system_topics: Collection[str], special_topic: bool
) -> dict[str, TopicConfig]:
    """The entries of ``table`` upstream's ``getUserTopicConfig`` keeps, sorted by topic: no system
    topic (``broker_system_topics`` or :func:`is_system_topic`), no retry or DLQ topic unless
    ``special_topic``, no invalid perm."""
    kept: dict[str, TopicConfig] = {}
    for key in sorted(table):
        config = table[key]
        name = config.topicName
        if name in broker_system_topics or is_system_topic(name):
            continue
        if not special_topic and name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        if not _valid_perm(config.perm):
            continue
        kept[key] = config
    return kept


def user_groups(table: dict[str, SubscriptionGroupConfigView]) -> dict[str, SubscriptionGroupConfigView]:
    """The entries of ``table`` upstream's ``getUserSubscriptionGroup`` keeps, sorted by group."""
    return {
        group: table[group]
        for group in sorted(table)
        if not is_sys_consumer_group(group) and not is_predefined_group(group)
    }


def merge_topics(tables: Iterable[dict[str, TopicConfig]]) -> dict[str, TopicConfig]:
    """One topic table of several broker groups': a topic's later config with the read and write
    queue numbers summed over the groups; sorted by topic."""
    merged: dict[str, TopicConfig] = {}
    for table in tables:
        for key, config in table.items():
            seen = merged.get(key)
            if seen is not None:
                config = msgspec.structs.replace(
                    config,
                    writeQueueNums=seen.writeQueueNums + config.writeQueueNums,
                    readQueueNums=seen.readQueueNums + config.readQueueNums,
                )
            merged[key] = config
    return dict(sorted(merged.items()))


def merge_groups(
    tables: Iterable[dict[str, SubscriptionGroupConfigView]],
) -> dict[str, SubscriptionGroupConfigView]:
    """One group table of several broker groups': a group's later config with ``retryQueueNums``
    summed over the groups; sorted by group."""
    merged: dict[str, SubscriptionGroupConfigView] = {}
    for table in tables:
        for key, config in table.items():
            seen = merged.get(key)
            if seen is not None:
                config = msgspec.structs.replace(
                    config, retryQueueNums=seen.retryQueueNums + config.retryQueueNums
                )
            merged[key] = config
    return dict(sorted(merged.items()))


def exported_broker_properties(properties: dict[str, str]) -> dict[str, str]:
    """The :data:`EXPORTED_BROKER_KEYS` a broker reported, sorted by key."""
    return {key: properties[key] for key in sorted(EXPORTED_BROKER_KEYS) if key in properties}


# --- broker requests ---------------------------------------------------------------------------------


async def _broker_system_topics(admin: MQAdmin, addr: str) -> list[str]:
    response = await admin.call_broker(addr, request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))
    return TopicList.decode(response.body_bytes).topicList


async def get_user_topic_config(
    admin: MQAdmin, addr: str, special_topic: bool
) -> TopicConfigSerializeWrapper:
    """Upstream ``getUserTopicConfig``: the broker's topic table without system topics (and
    without retry and DLQ topics unless ``special_topic``)."""
    everything = await admin.get_all_topic_config(addr)
    system = set(await _broker_system_topics(admin, addr))
    return TopicConfigSerializeWrapper(
        topicConfigTable=user_topics(everything.topicConfigTable, system, special_topic),
        dataVersion=everything.dataVersion,
    )


async def get_user_subscription_group(admin: MQAdmin, addr: str) -> ExportSubscriptionGroupWrapper:
    """Upstream ``getUserSubscriptionGroup``: the broker's group table without system groups."""
    response = await admin.call_broker(addr, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    try:
        wrapper = ExportSubscriptionGroupWrapper.decode(response.body_bytes)
    except (ValueError, msgspec.ValidationError) as e:
        raise AdminError(ResponseCode.SYSTEM_ERROR, f"bad SubscriptionGroupWrapper body: {e}", addr) from None
    return msgspec.structs.replace(
        wrapper,
        subscriptionGroupTable=user_groups(wrapper.subscriptionGroupTable),
        forbiddenTable=dict(sorted(wrapper.forbiddenTable.items())),
    )


# --- the file ---------------------------------------------------------------------------------------


def write_export(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that a reader sees the old file or the whole new one;
    the directory is created when missing."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def write_or_fail(command: str, path: str, document: Any) -> None:
    try:
        write_export(path, dumps_pretty(document))
    except OSError as e:
        fail(command, f"cannot write {path}: {e}")


def export_dir(file_path: str | None) -> str:
    return file_path.strip() if file_path is not None and file_path.strip() else DEFAULT_EXPORT_DIR


# --- exportMetadata ---------------------------------------------------------------------------------


@click.command("exportMetadata")
@namesrv_option
@click.option("-c", "--clusterName", "cluster_name", default=None, help="choose a cluster to export")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="choose a broker to export")
@click.option(
    "-f",
    "--filePath",
    "file_path",
    default=None,
    help=f"export metadata.json path | default {DEFAULT_EXPORT_DIR}",
)
@click.option("-t", "--topic", "only_topics", is_flag=True, help="only export topic metadata")
@click.option(
    "-g", "--subscriptionGroup", "only_groups", is_flag=True, help="only export subscriptionGroup metadata"
)
@click.option("-s", "--specialTopic", "special_topic", is_flag=True, help="need retryTopic and dlqTopic")
def export_metadata(
    namesrv: str,
    timeout: float,
    cluster_name: str | None,
    broker_addr: str | None,
    file_path: str | None,
    only_topics: bool,
    only_groups: bool,
    special_topic: bool,
) -> None:
    """Export metadata."""
    addr = broker_addr.strip() if broker_addr else ""
    cluster = cluster_name.strip() if cluster_name else ""
    require_target(addr, cluster, "give -b (broker address) or -c (cluster name)")
    directory = export_dir(file_path)
    wants_topics = only_topics or not only_groups
    wants_groups = not only_topics
    # what the file holds: a wrapper of one broker (-b with -t or -g) or the merged tables
    document: list[Any] = []

    async def go(admin: MQAdmin) -> None:
        if addr and only_topics:
            document.append(await get_user_topic_config(admin, addr, special_topic))
            return
        if addr and only_groups:
            document.append(await get_user_subscription_group(admin, addr))
            return
        masters = [addr] if addr else await admin.fetch_master_addrs_by_cluster(cluster)
        topic_tables: list[dict[str, TopicConfig]] = []
        group_tables: list[dict[str, SubscriptionGroupConfigView]] = []
        for master in masters:
            if wants_topics:
                topic_tables.append(
                    (await get_user_topic_config(admin, master, special_topic)).topicConfigTable
                )
            if wants_groups:
                group_tables.append((await get_user_subscription_group(admin, master)).subscriptionGroupTable)
        result: dict[str, Any] = {"exportTime": int(time.time() * 1000)}
        if wants_groups:
            result["subscriptionGroupTable"] = merge_groups(group_tables)
        if wants_topics:
            result["topicConfigTable"] = merge_topics(topic_tables)
        document.append(result)

    run_admin("exportMetadata", go, namesrv, timeout)
    file_name = TOPIC_FILE if only_topics else GROUP_FILE if only_groups else METADATA_FILE
    path = os.path.join(directory, file_name)
    write_or_fail("exportMetadata", path, document[0])
    # mqadmin ends the line only after -c
    click.echo(f"export {path} success", nl=not (addr and (only_topics or only_groups)))


# --- exportConfigs ----------------------------------------------------------------------------------


def cluster_export_options(file_name: str) -> Callable[[Callable[P, None]], Callable[P, None]]:
    """The options of a whole-cluster export: ``-n`` (and ``--timeout``), ``-c`` and ``-f``."""

    def wrap(f: Callable[P, None]) -> Callable[P, None]:
        f = click.option(
            "-f",
            "--filePath",
            "file_path",
            default=None,
            help=f"export {file_name} path | default {DEFAULT_EXPORT_DIR}",
        )(f)
        f = click.option(
            "-c", "--clusterName", "cluster_name", required=True, help="choose a cluster to export"
        )(f)
        return namesrv_option(f)

    return wrap


def export_cluster_document(
    command: str,
    file_name: str,
    namesrv: str,
    timeout: float,
    file_path: str | None,
    build: Callable[[MQAdmin], Awaitable[dict[str, Any]]],
) -> None:
    """Build a document with the admin client, write it to ``file_name`` in the ``-f``
    directory and say so, without a newline (mqadmin's exportConfigs and exportMetrics)."""
    directory = export_dir(file_path)
    document: list[dict[str, Any]] = []

    async def go(admin: MQAdmin) -> None:
        document.append(await build(admin))

    run_admin(command, go, namesrv, timeout)
    path = os.path.join(directory, file_name)
    write_or_fail(command, path, document[0])
    click.echo(f"export {path} success", nl=False)


async def cluster_configs(admin: MQAdmin, cluster: str) -> dict[str, Any]:
    """The configs.json document of ``cluster`` (module docstring)."""
    masters_and_slaves = await admin.fetch_master_and_slave_distinguish(cluster)
    broker_configs: dict[str, dict[str, str]] = {}
    masters = slaves = 0
    for master, its_slaves in masters_and_slaves.items():
        slaves += len(its_slaves)
        if master == NO_MASTER_PLACEHOLDER:
            continue
        masters += 1
        properties = await admin.get_broker_config(master)
        broker_configs[properties.get("brokerName", "null")] = exported_broker_properties(properties)
    return {
        "brokerConfigs": dict(sorted(broker_configs.items())),
        "clusterScale": {
            "masterBrokerSize": masters,
            "namesrvSize": len(admin.namesrv_addrs),
            "slaveBrokerSize": slaves,
        },
    }


@click.command("exportConfigs")
@cluster_export_options(CONFIGS_FILE)
def export_configs(namesrv: str, timeout: float, cluster_name: str, file_path: str | None) -> None:
    """Export configs."""
    cluster = cluster_name.strip()
    export_cluster_document(
        "exportConfigs",
        CONFIGS_FILE,
        namesrv,
        timeout,
        file_path,
        lambda admin: cluster_configs(admin, cluster),
    )


COMMANDS = [export_metadata, export_configs]
