"""``rmq-admin`` name server commands: ``wipeWritePerm``, ``addWritePerm``, ``getNamesrvConfig``,
``updateNamesrvConfig``.

Same names, flag letters and output lines as mqadmin. Each command goes to every name server of
``-n`` in turn (a name server holds its own routes and config). ``wipeWritePerm``/``addWritePerm``
print a line per name server and go on past one that fails, then exit with status 1 (mqadmin prints
a stack trace and exits 0). ``getNamesrvConfig`` prints its keys sorted (mqadmin: hash order).

:data:`NAMESRV_COMMANDS` is added to the ``rmq-admin`` group by :mod:`client.admin_cli`.
"""

from __future__ import annotations

import click

from client.admin import AdminError, MQAdmin
from client.admin_common import echo_lines, namesrv_option, run_admin
from remoting.errors import RemotingError

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


NAMESRV_COMMANDS: list[click.Command] = [
    wipe_write_perm,
    add_write_perm,
    get_namesrv_config,
    update_namesrv_config,
]
