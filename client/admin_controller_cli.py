"""The controller commands of ``rmq-admin`` (mqadmin's names, flags and output shapes).

``getControllerMetaData``, ``getControllerConfig``, ``updateControllerConfig``, ``getSyncStateSet``,
``electMaster``, ``cleanBrokerMetadata`` talk to a controller group given with ``-a`` (one or more
peer addresses, ``;``-separated); leader-only requests follow the leader
(:mod:`client.admin_controller`); the config commands ask every listed peer.
``getBrokerEpoch`` asks brokers (found through the name server, ``-n``) for their epoch entries,
``haStatus`` for their replication status (a master's slaves, a slave's link to its master).

Deviations from mqadmin, all additive: ``-a`` may list several peers for every command (mqadmin
uses the first one only for some); ``getBrokerEpoch -b`` also accepts a broker address; with ``-i``
(``getSyncStateSet``, ``getBrokerEpoch``, ``haStatus``)
the repetition stops after ``--count`` rounds (default 10, 0 = until interrupted; mqadmin repeats
forever).

:data:`COMMANDS` is added to the ``rmq-admin`` group by :mod:`client.admin_cli`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

import click
import trio

from client.admin import MQAdmin
from client.admin_common import echo_lines, namesrv_option, run_client
from client.admin_controller import ControllerAdmin, EpochEntry, EpochEntryCache, get_broker_epoch_cache
from remoting.client import RemotingClient
from remoting.protocol.broker import HARuntimeInfo
from remoting.protocol.controller import BrokerReplicasInfo, ReplicaIdentity

__all__ = [
    "COMMANDS",
    "broker_epoch_lines",
    "controller_config_lines",
    "elect_master_lines",
    "ha_status_lines",
    "metadata_lines",
    "sync_state_set_lines",
    "update_controller_config_lines",
]

P = ParamSpec("P")

DEFAULT_ROUNDS = 10
_ADDRESS = re.compile(r"^[^\s:]+:\d+$")


def _java(value: object) -> str:
    """Java's ``String.valueOf``: null for None, lower-case booleans."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --- output (pure) --------------------------------------------------------------------------------


def metadata_lines(
    group: str | None, leader_id: str | None, leader_addr: str | None, peers: str | None
) -> list[str]:
    """``getControllerMetaData`` output."""
    lines = [
        "",
        f"#ControllerGroup\t{_java(group)}",
        f"#ControllerLeaderId\t{_java(leader_id)}",
        f"#ControllerLeaderAddress\t{_java(leader_addr)}",
    ]
    lines += [f"#Peer:\t{peer}" for peer in (peers or "").split(";") if peer]
    return lines


def controller_config_lines(configs: dict[str, dict[str, str]]) -> list[str]:
    """``getControllerConfig`` output: a block per controller."""
    lines: list[str] = []
    for address, config in configs.items():
        lines.append(f"============{address}============")
        lines += [f"{key:<50}=  {value}" for key, value in config.items()]
    return lines


def update_controller_config_lines(controllers: list[str], key: str, value: str) -> list[str]:
    """``updateControllerConfig`` output (the controller list as Java's ``List.toString``)."""
    return [f"update controller config success![{', '.join(controllers)}]", f"{key} : {value}"]


def _replica_str(r: ReplicaIdentity) -> str:
    return (
        f"ReplicaIdentity{{brokerName='{_java(r.brokerName)}', brokerId={_java(r.brokerId)}, "
        f"brokerAddress='{_java(r.brokerAddress)}', alive={_java(r.alive)}}}"
    )


def sync_state_set_lines(info: BrokerReplicasInfo) -> list[str]:
    """``getSyncStateSet`` output: a block per broker set."""
    lines: list[str] = []
    for name, replicas in info.replicasInfoTable.items():
        lines += [
            "",
            f"#brokerName\t{name}",
            f"#MasterBrokerId\t{_java(replicas.masterBrokerId)}",
            f"#MasterAddr\t{_java(replicas.masterAddress)}",
            f"#MasterEpoch\t{_java(replicas.masterEpoch)}",
            f"#SyncStateSetEpoch\t{_java(replicas.syncStateSetEpoch)}",
            f"#SyncStateSetNums\t{len(replicas.inSyncReplicas)}",
        ]
        for member in replicas.inSyncReplicas:
            lines += ["", f"InSyncReplica:\t{_replica_str(member)}"]
        for member in replicas.notInSyncReplicas:
            lines += ["", f"NotInSyncReplica:\t{_replica_str(member)}"]
    return lines


def elect_master_lines(
    cluster: str,
    broker_name: str,
    master_addr: str | None,
    master_epoch: int | None,
    sync_state_set_epoch: int | None,
    members: dict[int, str],
) -> list[str]:
    """``electMaster`` output."""
    lines = [
        "",
        f"#ClusterName\t{cluster}",
        f"#BrokerName\t{broker_name}",
        f"#BrokerMasterAddr\t{_java(master_addr)}",
        f"#MasterEpoch\t{_java(master_epoch)}",
        f"#SyncStateSetEpoch\t{_java(sync_state_set_epoch)}",
    ]
    lines += [f"\t#Broker\t{broker_id}\t{addr}" for broker_id, addr in sorted(members.items())]
    return lines


def broker_epoch_lines(broker_addr: str, cache: EpochEntryCache) -> list[str]:
    """``getBrokerEpoch`` output for one broker (the last epoch ends at the broker's max offset)."""
    lines = [
        "",
        f"#clusterName\t{_java(cache.clusterName)}",
        f"#brokerName\t{_java(cache.brokerName)}",
        f"#brokerAddr\t{broker_addr}",
        f"#brokerId\t{cache.brokerId}",
    ]
    for i, entry in enumerate(cache.epochList):
        if i == len(cache.epochList) - 1:
            entry = EpochEntry(epoch=entry.epoch, startOffset=entry.startOffset, endOffset=cache.maxOffset)
        lines.append(f"#Epoch: {entry}")
    return lines


def _human_ms(ms: int) -> str:
    """Upstream ``UtilAll.timeMillisToHumanString2``: local ``yyyy-MM-dd HH:mm:ss,SSS``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


def ha_status_lines(broker_addr: str, info: HARuntimeInfo) -> list[str]:
    """``haStatus`` output for one broker: a master's slave table, or a slave's link."""
    if not info.master:
        c = info.haClientRuntimeInfo
        return [
            "",
            f"#MasterAddr\t{_java(c.masterAddr)}",
            f"#CommitLogMaxOffset\t{c.maxOffset}",
            f"#TransferSpeed(KB/s)\t{c.transferredByteInSecond / 1024:.2f}",
            f"#LastReadTime\t{_human_ms(c.lastReadTimestamp)}",
            f"#LastWriteTime\t{_human_ms(c.lastWriteTimestamp)}",
            f"#MasterFlushOffset\t{c.masterFlushOffset}",
        ]
    lines = [
        "",
        f"#MasterAddr\t{broker_addr}",
        f"#MasterCommitLogMaxOffset\t{info.masterCommitLogMaxOffset}",
        f"#SlaveNum\t{len(info.haConnectionInfo)}",
        f"#InSyncSlaveNum\t{info.inSyncSlaveNums}",
        f"{'#SlaveAddr':<32}  {'#SlaveAckOffset':<16} {'#Diff':>16} {'#TransferSpeed(KB/s)':>16} "
        f"{'#Status':>16} {'#TransferFromWhere':>16}",
    ]
    for c in info.haConnectionInfo:
        status = "OK" if c.inSync else "Fall Behind"
        lines.append(
            f"{c.addr:<32}  {c.slaveAckOffset:<16} {c.diff:>16} {c.transferredByteInSecond / 1024:>16.2f} "
            f"{status:>16} {c.transferFromWhere:>16}"
        )
    return lines


# --- running ----------------------------------------------------------------------------------------


async def _rounds(interval: int | None, count: int, once: Callable[[], Awaitable[None]]) -> None:
    """Run ``once``; with an interval repeat it every ``interval`` s, ``count`` times (0: forever)."""
    done = 0
    while True:
        await once()
        done += 1
        if interval is None or (count > 0 and done >= count):
            return
        await trio.sleep(interval)


def _controller_option(help_text: str) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
    return click.option("-a", "--controllerAddress", "controller", required=True, help=help_text)


def _interval_options(f: Callable[P, Any]) -> Callable[P, Any]:
    f = click.option(
        "-i", "--interval", "interval", type=int, default=None, help="the interval(second) of get info"
    )(f)
    return click.option(
        "--count",
        type=int,
        default=DEFAULT_ROUNDS,
        show_default=True,
        help="with -i: how many rounds (0 = until interrupted)",
    )(f)


# --- commands ---------------------------------------------------------------------------------------


@click.command("getControllerMetaData")
@namesrv_option
@_controller_option("the address of controller (several: ';'-separated, the first that answers)")
def get_controller_metadata(namesrv: str, timeout: float, controller: str) -> None:
    """Get controller cluster's metadata."""

    async def go(rc: RemotingClient) -> None:
        meta = await ControllerAdmin(rc, controller.strip(), timeout=timeout).get_metadata()
        echo_lines(
            metadata_lines(meta.group, meta.controllerLeaderId, meta.controllerLeaderAddress, meta.peers)
        )

    run_client("getControllerMetaData", go, timeout)


@click.command("getControllerConfig")
@namesrv_option
@_controller_option("Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878")
def get_controller_config(namesrv: str, timeout: float, controller: str) -> None:
    """Get controller config."""

    async def go(rc: RemotingClient) -> None:
        echo_lines(
            controller_config_lines(
                await ControllerAdmin(rc, controller.strip(), timeout=timeout).get_controller_config()
            )
        )

    run_client("getControllerConfig", go, timeout)


@click.command("updateControllerConfig")
@namesrv_option
@_controller_option("Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878")
@click.option("-k", "--key", required=True, help="config key")
@click.option("-v", "--value", required=True, help="config value")
def update_controller_config(namesrv: str, timeout: float, controller: str, key: str, value: str) -> None:
    """Update controller config."""
    key, value = key.strip(), value.strip()

    async def go(rc: RemotingClient) -> None:
        ctl = ControllerAdmin(rc, controller.strip(), timeout=timeout)
        await ctl.update_controller_config({key: value})
        echo_lines(update_controller_config_lines(ctl.addresses, key, value))

    run_client("updateControllerConfig", go, timeout)


@click.command("getSyncStateSet")
@namesrv_option
@_controller_option("the address of controller")
@click.option("-c", "--clusterName", "cluster_name", default=None, help="which cluster")
@click.option("-b", "--brokerName", "broker_name", default=None, help="which broker to fetch")
@_interval_options
def get_sync_state_set(
    namesrv: str,
    timeout: float,
    controller: str,
    cluster_name: str | None,
    broker_name: str | None,
    interval: int | None,
    count: int,
) -> None:
    """Fetch syncStateSet for target brokers."""
    if not broker_name and not cluster_name:
        raise click.UsageError("one of -b/--brokerName or -c/--clusterName is required")

    async def go(rc: RemotingClient) -> None:
        ctl = ControllerAdmin(rc, controller.strip(), timeout=timeout)

        async def once() -> None:
            if broker_name:
                names = [broker_name.strip()]
            else:
                assert cluster_name is not None
                names = await MQAdmin(rc, namesrv, timeout=timeout).fetch_broker_names_by_cluster(
                    cluster_name.strip()
                )
            if names:
                echo_lines(sync_state_set_lines(await ctl.get_in_sync_state_data(names)))

        await _rounds(interval, count, once)

    run_client("getSyncStateSet", go, timeout)


async def _epoch_targets(admin: MQAdmin, broker: str | None, cluster: str | None) -> list[str]:
    if broker:
        if _ADDRESS.match(broker):
            return [broker]
        info = await admin.examine_broker_cluster_info()
        data = info.brokerAddrTable.get(broker)
        if data is None:
            raise ValueError(f"broker {broker} is not registered with the name server")
        return [addr for _, addr in sorted(data.brokerAddrs.items())]
    assert cluster is not None
    return await admin.fetch_master_and_slave_addrs_by_cluster(cluster)


@click.command("getBrokerEpoch")
@namesrv_option
@click.option("-c", "--clusterName", "cluster_name", default=None, help="which cluster")
@click.option(
    "-b",
    "--brokerName",
    "broker_name",
    default=None,
    help="which broker to fetch (a broker name, or an address)",
)
@_interval_options
def get_broker_epoch(
    namesrv: str,
    timeout: float,
    cluster_name: str | None,
    broker_name: str | None,
    interval: int | None,
    count: int,
) -> None:
    """Fetch broker epoch entries."""
    if not broker_name and not cluster_name:
        raise click.UsageError("one of -b/--brokerName or -c/--clusterName is required")

    async def go(rc: RemotingClient) -> None:
        admin = MQAdmin(rc, namesrv, timeout=timeout)

        async def once() -> None:
            targets = await _epoch_targets(
                admin,
                broker_name.strip() if broker_name else None,
                cluster_name.strip() if cluster_name else None,
            )
            for addr in targets:
                echo_lines(broker_epoch_lines(addr, await get_broker_epoch_cache(rc, addr, timeout)))

        await _rounds(interval, count, once)

    run_client("getBrokerEpoch", go, timeout)


@click.command("haStatus")
@namesrv_option
@click.option("-c", "--clusterName", "cluster_name", default=None, help="which cluster")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="which broker to fetch")
@_interval_options
def ha_status(
    namesrv: str,
    timeout: float,
    cluster_name: str | None,
    broker_addr: str | None,
    interval: int | None,
    count: int,
) -> None:
    """Fetch ha runtime status data."""
    if not broker_addr and not cluster_name:
        raise click.UsageError("one of -b/--brokerAddr or -c/--clusterName is required")

    async def go(rc: RemotingClient) -> None:
        admin = MQAdmin(rc, namesrv, timeout=timeout)

        async def once() -> None:
            if broker_addr:
                targets = [broker_addr.strip()]
            else:
                assert cluster_name is not None
                targets = await admin.fetch_master_addrs_by_cluster(cluster_name.strip())
            for addr in targets:
                echo_lines(ha_status_lines(addr, await admin.get_broker_ha_status(addr)))

        await _rounds(interval, count, once)

    run_client("haStatus", go, timeout)


@click.command("electMaster")
@namesrv_option
@_controller_option("The address of controller")
@click.option(
    "-b",
    "--brokerId",
    "broker_id",
    type=int,
    required=True,
    help="The id of the broker which requires to become master",
)
@click.option(
    "-bn",
    "--brokerName",
    "broker_name",
    required=True,
    help="The broker name of the replicas that require to be manipulated",
)
@click.option("-c", "--clusterName", "cluster_name", required=True, help="the clusterName of broker")
def elect_master(
    namesrv: str, timeout: float, controller: str, broker_id: int, broker_name: str, cluster_name: str
) -> None:
    """Re-elect the specified broker as master."""
    cluster, name = cluster_name.strip(), broker_name.strip()

    async def go(rc: RemotingClient) -> None:
        ctl = ControllerAdmin(rc, controller.strip(), timeout=timeout)
        header, body = await ctl.elect_master(cluster, name, broker_id)
        group = body.brokerMemberGroup if body is not None else None
        members = dict(group.brokerAddrs) if group is not None else {}
        echo_lines(
            elect_master_lines(
                cluster, name, header.masterAddress, header.masterEpoch, header.syncStateSetEpoch, members
            )
        )

    run_client("electMaster", go, timeout)


@click.command("cleanBrokerMetadata")
@namesrv_option
@_controller_option("The address of controller")
@click.option(
    "-b",
    "--brokerControllerIdsToClean",
    "broker_ids",
    default=None,
    help="The brokerController id list which requires to clean metadata. eg: 1;2;3",
)
@click.option(
    "-bn",
    "--brokerName",
    "broker_name",
    required=True,
    help="The broker name of the replicas that require to be manipulated",
)
@click.option("-c", "--clusterName", "cluster_name", default=None, help="the clusterName of broker")
@click.option(
    "-l", "--cleanLivingBroker", "clean_living", is_flag=True, help="whether clean up living brokers"
)
def clean_broker_metadata(
    namesrv: str,
    timeout: float,
    controller: str,
    broker_ids: str | None,
    broker_name: str,
    cluster_name: str | None,
    clean_living: bool,
) -> None:
    """Clean metadata of broker on controller."""
    ids = broker_ids.strip() if broker_ids else None
    if ids:
        try:
            [int(part) for part in ids.split(";") if part.strip()]
        except ValueError:
            raise click.BadParameter(
                "please set the option <brokerControllerIdsToClean> according to the format", param_hint="-b"
            ) from None
    cluster = cluster_name.strip() if cluster_name else None
    if not clean_living and not cluster:
        raise click.UsageError("cleanLivingBroker option is false, clusterName option can not be empty.")
    name = broker_name.strip()

    async def go(rc: RemotingClient) -> None:
        await ControllerAdmin(rc, controller.strip(), timeout=timeout).clean_broker_data(
            cluster, name, ids, clean_living
        )
        click.echo(f"clear broker {name} metadata from controller success! ")

    run_client("cleanBrokerMetadata", go, timeout)


COMMANDS: tuple[click.Command, ...] = (
    get_controller_metadata,
    get_controller_config,
    update_controller_config,
    get_sync_state_set,
    get_broker_epoch,
    ha_status,
    elect_master,
    clean_broker_metadata,
)
