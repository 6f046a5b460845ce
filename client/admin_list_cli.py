"""``rmq-admin updateTopicList`` and ``updateSubGroupList``: mqadmin's batch creation of topics and
subscription groups from a JSON file, with its names, flags (``-b`` broker or ``-c`` cluster, one
of them; ``-f`` the file) and output lines.

The file holds a JSON array of upstream ``TopicConfig`` / ``SubscriptionGroupConfig`` objects
(their field names; fields left out take upstream's defaults; a topic's ``attributes`` is a
modification such as ``{"+message.type": "FIFO"}``). The whole array goes to each broker in one
request, which takes all of it or, naming the first bad entry, none.

Deviations from mqadmin, each deliberate: a file that does not exist ends the command with
mqadmin's line (``the file path F does not exists``) as its failure reason and exit status 1
(mqadmin prints the line and exits 0); one that is not such an array names the file and the
parse error (mqadmin: a stack trace); with ``-c`` the command does not print its help after the
success lines. As with mqadmin's option group, ``-b`` and ``-c`` together are a usage error.
"""

from __future__ import annotations

import os
from typing import TypeVar

import click

from client.admin import MQAdmin
from client.admin_common import namesrv_option, require_target, run_admin
from remoting import fastjson
from remoting.protocol.broker import SubscriptionGroupConfig
from remoting.protocol.common import TopicConfig

__all__ = ["COMMANDS", "read_config_list"]

T = TypeVar("T")


def _one_target(broker_addr: str | None, cluster_name: str | None) -> None:
    """mqadmin's required option group: exactly one of -b and -c."""
    require_target(
        broker_addr,
        cluster_name,
        "exactly one of -b/--brokerAddr or -c/--clusterName is required",
        exactly_one=True,
    )


def read_config_list(file_name: str, kind: type[T]) -> list[T]:
    """The configs the JSON file ``file_name`` lists (none for an empty file or ``null``); raises
    ValueError saying what is wrong with a missing, unreadable or malformed file."""
    if not os.path.exists(file_name):
        raise ValueError(f"the file path {file_name} does not exists")
    try:
        with open(file_name, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {file_name}: {e.strerror or e}") from None
    if not data.strip():
        return []
    try:
        configs = fastjson.decode(data, list[kind] | None)  # type: ignore[valid-type]
    except ValueError as e:  # msgspec's ValidationError is one
        raise ValueError(f"{file_name} is not a JSON array of {kind.__name__}: {e}") from None
    return configs or []


@click.command("updateTopicList")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="create topic to which broker")
@click.option("-c", "--clusterName", "cluster_name", help="create topic to which cluster")
@click.option(
    "-f",
    "--filename",
    "file_name",
    required=True,
    help="Path to a file with list of org.apache.rocketmq.common.TopicConfig in json format",
)
def update_topic_list(
    namesrv: str, timeout: float, broker_addr: str | None, cluster_name: str | None, file_name: str
) -> None:
    """create or update topic in batch"""
    _one_target(broker_addr, cluster_name)

    async def go(admin: MQAdmin) -> None:
        configs = read_config_list(file_name.strip(), TopicConfig)
        if not configs:
            return
        addrs = (
            [broker_addr.strip()]
            if broker_addr
            else await admin.fetch_master_addrs_by_cluster((cluster_name or "").strip())
        )
        for addr in addrs:
            await admin.create_and_update_topic_config_list(addr, configs)
            click.echo(f"submit batch of topic config to {addr} success, please check the result later.")

    run_admin("updateTopicList", go, namesrv, timeout)


@click.command("updateSubGroupList")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", help="create groups to which broker")
@click.option("-c", "--clusterName", "cluster_name", help="create groups to which cluster")
@click.option(
    "-f",
    "--filename",
    "file_name",
    required=True,
    help="Path to a file with a list of "
    "org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig in json format",
)
def update_sub_group_list(
    namesrv: str, timeout: float, broker_addr: str | None, cluster_name: str | None, file_name: str
) -> None:
    """Update or create subscription group in batch"""
    _one_target(broker_addr, cluster_name)

    async def go(admin: MQAdmin) -> None:
        configs = read_config_list(file_name.strip(), SubscriptionGroupConfig)
        if not configs:
            return
        if broker_addr:
            addr = broker_addr.strip()
            await admin.create_and_update_subscription_group_config_list(addr, configs)
            click.echo(f"submit batch of group config to {addr} success, please check the result later.")
            return
        for addr in await admin.fetch_master_addrs_by_cluster((cluster_name or "").strip()):
            await admin.create_and_update_subscription_group_config_list(addr, configs)
            click.echo(
                f"submit batch of subscription group config to {addr} success, please check the result later."
            )

    run_admin("updateSubGroupList", go, namesrv, timeout)


#: added to the ``rmq-admin`` group by :mod:`client.admin_cli`
COMMANDS: list[click.Command] = [update_topic_list, update_sub_group_list]
