"""``rmq-admin`` name server commands: ``wipeWritePerm``, ``addWritePerm``, ``getNamesrvConfig``,
``updateNamesrvConfig``, ``updateKvConfig``, ``deleteKvConfig``, ``updateOrderConf``,
``topicClusterList``.

Same names, flag letters and output lines as mqadmin. Each command goes to every name server of
``-n`` in turn (a name server holds its own routes and config; reads -- ``updateOrderConf -m get``,
``topicClusterList`` -- go to the first that answers). ``wipeWritePerm``/``addWritePerm``
print a line per name server and go on past one that fails, then exit with status 1 (mqadmin prints
a stack trace and exits 0). ``getNamesrvConfig`` prints its keys sorted (mqadmin: hash order).
KV writes ask every name server even after one refuses, then fail with the last refusal; one that
cannot be reached fails the command at once (as mqadmin).

:data:`NAMESRV_COMMANDS` is added to the ``rmq-admin`` group by :mod:`client.admin_cli`.
"""

from __future__ import annotations

import click

from client.admin import AdminError, MQAdmin
from client.admin_common import echo_lines, namesrv_option, note_ignored_order_conf, run_admin
from remoting.codes import ResponseCode
from remoting.errors import RemotingError
from remoting.protocol.namesrv import NAMESPACE_ORDER_TOPIC_CONFIG

__all__ = [
    "NAMESRV_COMMANDS",
    "namesrv_config_lines",
    "update_namesrv_config_lines",
    "write_perm_line",
]


# --- output (pure) --------------------------------------------------------------------------------


def write_perm_line(action: str, broker_name: str, namesrv: str, topic_count: int | None) -> str:
    """One name server's line of ``wipeWritePerm`` (``action`` "wipe") or ``addWritePerm`` ("add");
    ``topic_count`` None when that name server failed."""
    head = f"{action} write perm of broker[{broker_name}] in name server[{namesrv}]"
    return f"{head} Failed" if topic_count is None else f"{head} OK, {topic_count}"


def namesrv_config_lines(configs: dict[str, dict[str, str]]) -> list[str]:
    """``getNamesrvConfig`` output: a block per name server, keys sorted."""
    lines: list[str] = []
    for namesrv, config in configs.items():
        lines.append(f"============{namesrv}============")
        lines += [f"{key:<50}=  {config[key]}" for key in sorted(config)]
    return lines


def update_namesrv_config_lines(namesrvs: list[str], key: str, value: str) -> list[str]:
    """``updateNamesrvConfig`` output (the name server list as Java's ``List.toString``)."""
    return [f"update name server config success![{', '.join(namesrvs)}]", f"{key} : {value}"]


# --- wipeWritePerm / addWritePerm -------------------------------------------------------------------


async def _operate_write_perm(admin: MQAdmin, broker_name: str, *, wipe: bool) -> None:
    """Every name server of ``admin`` in turn; a failing one gets its Failed line and the command
    goes on, then raises with every failure's reason."""
    action = "wipe" if wipe else "add"
    reasons: list[str] = []
    for addr in admin.namesrv_addrs:
        try:
            if wipe:
                count = await admin.wipe_write_perm_of_broker(broker_name, addr)
            else:
                count = await admin.add_write_perm_of_broker(broker_name, addr)
        except (AdminError, RemotingError, ValueError) as e:
            click.echo(write_perm_line(action, broker_name, addr, None))
            reasons.append(str(e))
            continue
        click.echo(write_perm_line(action, broker_name, addr, count))
    if reasons:
        raise ValueError("; ".join(reasons))


@click.command("wipeWritePerm")
@namesrv_option
@click.option("-b", "--brokerName", "broker_name", required=True, help="broker name")
def wipe_write_perm(namesrv: str, timeout: float, broker_name: str) -> None:
    """Wipe write perm of broker in all name server you defined in the -n param."""
    name = broker_name.strip()

    async def go(admin: MQAdmin) -> None:
        await _operate_write_perm(admin, name, wipe=True)

    run_admin("wipeWritePerm", go, namesrv, timeout)


@click.command("addWritePerm")
@namesrv_option
@click.option("-b", "--brokerName", "broker_name", required=True, help="broker name")
def add_write_perm(namesrv: str, timeout: float, broker_name: str) -> None:
    """Add write perm of broker in all name server you defined in the -n param."""
    name = broker_name.strip()

    async def go(admin: MQAdmin) -> None:
        await _operate_write_perm(admin, name, wipe=False)

    run_admin("addWritePerm", go, namesrv, timeout)


# --- getNamesrvConfig / updateNamesrvConfig ---------------------------------------------------------


@click.command("getNamesrvConfig")
@namesrv_option
def get_namesrv_config(namesrv: str, timeout: float) -> None:
    """Get configs of name server."""

    async def go(admin: MQAdmin) -> None:
        # all first, as mqadmin: a name server that fails fails the command with nothing printed
        configs = {addr: await admin.get_namesrv_config(addr) for addr in admin.namesrv_addrs}
        echo_lines(namesrv_config_lines(configs))

    run_admin("getNamesrvConfig", go, namesrv, timeout)


@click.command("updateNamesrvConfig")
@namesrv_option
@click.option("-k", "--key", required=True, help="config key")
@click.option("-v", "--value", required=True, help="config value")
def update_namesrv_config(namesrv: str, timeout: float, key: str, value: str) -> None:
    """Update configs of name server."""
    key, value = key.strip(), value.strip()

    async def go(admin: MQAdmin) -> None:
        await admin.update_namesrv_config({key: value})
        echo_lines(update_namesrv_config_lines(admin.namesrv_addrs, key, value))

    run_admin("updateNamesrvConfig", go, namesrv, timeout)


# --- updateKvConfig / deleteKvConfig ------------------------------------------------------------


@click.command("updateKvConfig")
@namesrv_option
@click.option("-s", "--namespace", required=True, help="set the namespace")
@click.option("-k", "--key", required=True, help="set the key name")
@click.option("-v", "--value", required=True, help="set the key value")
def update_kv_config(namesrv: str, timeout: float, namespace: str, key: str, value: str) -> None:
    """Create or update KV config."""
    namespace, key, value = namespace.strip(), key.strip(), value.strip()

    async def go(admin: MQAdmin) -> None:
        await admin.put_kv_config(namespace, key, value)
        click.echo("create or update kv config to namespace success.")

    run_admin("updateKvConfig", go, namesrv, timeout)


@click.command("deleteKvConfig")
@namesrv_option
@click.option("-s", "--namespace", required=True, help="set the namespace")
@click.option("-k", "--key", required=True, help="set the key name")
def delete_kv_config(namesrv: str, timeout: float, namespace: str, key: str) -> None:
    """Delete KV config."""
    namespace, key = namespace.strip(), key.strip()

    async def go(admin: MQAdmin) -> None:
        await admin.delete_kv_config(namespace, key)
        click.echo("delete kv config from namespace success.")

    run_admin("deleteKvConfig", go, namesrv, timeout)


# --- updateOrderConf ----------------------------------------------------------------------------

ORDER_CONF_METHODS = ("get", "put", "delete")


@click.command("updateOrderConf")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option(
    "-v",
    "--orderConf",
    "order_conf",
    default=None,
    help="set order conf [eg. brokerName1:num;brokerName2:num]",
)
@click.option("-m", "--method", required=True, help="option type [eg. put|get|delete]")
def update_order_conf(namesrv: str, timeout: float, topic: str, order_conf: str | None, method: str) -> None:
    """Create or update or delete order conf."""
    topic, method = topic.strip(), method.strip()
    if method not in ORDER_CONF_METHODS:
        raise click.BadParameter(f"{method!r} is not one of put, get, delete", param_hint="'-m'")
    conf = (order_conf or "").strip()

    async def go(admin: MQAdmin) -> None:
        if method == "get":
            value = await admin.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            if value is None:  # mqadmin fails with the name server's QUERY_NOT_FOUND
                raise AdminError(
                    ResponseCode.QUERY_NOT_FOUND,
                    f"No config item, Namespace: {NAMESPACE_ORDER_TOPIC_CONFIG} Key: {topic}",
                    "",
                )
            click.echo(f"get orderConf success. topic=[{topic}], orderConf=[{value}] ")
        elif method == "put":
            if not conf:
                raise ValueError("please set orderConf with option -v.")
            await admin.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic, conf)
            click.echo(f"update orderConf success. topic=[{topic}], orderConf=[{conf}]")
            await note_ignored_order_conf(admin)
        else:
            await admin.delete_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            click.echo(f"delete orderConf success. topic=[{topic}]")

    run_admin("updateOrderConf", go, namesrv, timeout)


# --- topicClusterList ---------------------------------------------------------------------------


@click.command("topicClusterList")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
def topic_cluster_list(namesrv: str, timeout: float, topic: str) -> None:
    """Get cluster info for topic."""
    name = topic.strip()

    async def go(admin: MQAdmin) -> None:
        echo_lines(await admin.get_topic_cluster_list(name))

    run_admin("topicClusterList", go, namesrv, timeout)


NAMESRV_COMMANDS: list[click.Command] = [
    wipe_write_perm,
    add_write_perm,
    get_namesrv_config,
    update_namesrv_config,
    update_kv_config,
    delete_kv_config,
    update_order_conf,
    topic_cluster_list,
]
