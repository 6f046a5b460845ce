"""``rmq-admin cleanExpiredCQ``, ``deleteExpiredCommitLog``, ``cleanUnusedTopic`` and
``resetMasterFlushOffset``: mqadmin's store maintenance commands (see
:mod:`broker.store_maintenance` for what a broker does).

``resetMasterFlushOffset -b ADDR -o OFFSET`` sets the master flushed offset a slave records and
prints ``reset master flush offset to <offset> success``, as mqadmin (a master ignores it).

Each asks one broker (``-b``), or every broker -- masters and slaves -- of a cluster (``-c``), or
of every cluster when neither is given, and prints ``success`` or ``false`` without a newline, as
mqadmin does. Deviations, each deliberate: the result is ``success`` only when every broker asked
succeeded (mqadmin prints the last broker's result), and each broker that failed is named on
stderr with its error (exit status 1); ``-c`` with an unknown cluster is an error (mqadmin asks
no broker and prints ``false``).
"""

from __future__ import annotations

import sys

import click

from client.admin import AdminError, MQAdmin, cluster_addrs
from client.admin_common import namesrv_option, run_admin
from remoting.codes import RequestCode
from remoting.command import request
from remoting.errors import RemotingError
from remoting.headers import encode_header
from remoting.protocol.broker import ResetMasterFlushOffsetHeader

__all__ = ["COMMANDS"]


async def _targets(admin: MQAdmin, broker_addr: str | None, cluster_name: str | None) -> list[str]:
    """``-b``'s broker, else every broker of ``-c``'s cluster, else of every cluster."""
    if broker_addr:
        return [broker_addr.strip()]
    if cluster_name and cluster_name.strip():
        return await admin.fetch_master_and_slave_addrs_by_cluster(cluster_name.strip())
    info = await admin.examine_broker_cluster_info()  # once for all the clusters
    return [addr for cluster in sorted(info.clusterAddrTable) for addr in cluster_addrs(info, cluster)]


def _maintenance_command(name: str, code: RequestCode, summary: str, cluster_help: str) -> click.Command:
    @click.command(name, help=summary)
    @namesrv_option
    @click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address")
    @click.option("-c", "--cluster", "cluster_name", default=None, help=cluster_help)
    def command(namesrv: str, timeout: float, broker_addr: str | None, cluster_name: str | None) -> None:
        failed: list[str] = []

        async def go(admin: MQAdmin) -> None:
            addrs = await _targets(admin, broker_addr, cluster_name)  # ValueError: unknown cluster
            for addr in addrs:
                try:
                    await admin.call_broker(addr, request(code))
                except (AdminError, RemotingError) as e:
                    failed.append(addr)
                    click.echo(f"{name}: broker {addr}: {e}", err=True)
            click.echo("false" if failed or not addrs else "success", nl=False)

        run_admin(name, go, namesrv, timeout)
        if failed:
            sys.exit(1)

    return command


clean_expired_cq = _maintenance_command(
    "cleanExpiredCQ",
    RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
    "Clean expired ConsumeQueue on broker.",
    "clustername",
)
delete_expired_commit_log = _maintenance_command(
    "deleteExpiredCommitLog",
    RequestCode.DELETE_EXPIRED_COMMITLOG,
    "Delete expired CommitLog files.",
    "clustername",
)
clean_unused_topic = _maintenance_command(
    "cleanUnusedTopic",
    RequestCode.CLEAN_UNUSED_TOPIC,
    "Clean unused topic on broker.",
    "cluster name",
)


@click.command("resetMasterFlushOffset", help="Reset master flush offset in slave.")
@namesrv_option
@click.option("-b", "--brokerAddr", "broker_addr", required=True, help="which broker to reset")
@click.option("-o", "--offset", "offset", type=int, required=True, help="the offset to reset at")
def reset_master_flush_offset(namesrv: str, timeout: float, broker_addr: str, offset: int) -> None:
    async def go(admin: MQAdmin) -> None:
        fields = dict(encode_header(ResetMasterFlushOffsetHeader(masterFlushOffset=offset)))
        await admin.call_broker(broker_addr.strip(), request(RequestCode.RESET_MASTER_FLUSH_OFFSET, fields))
        click.echo(f"reset master flush offset to {offset} success")

    run_admin("resetMasterFlushOffset", go, namesrv, timeout)


COMMANDS: list[click.Command] = [
    clean_expired_cq,
    delete_expired_commit_log,
    clean_unused_topic,
    reset_master_flush_offset,
]
