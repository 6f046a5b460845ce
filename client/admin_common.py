"""What every ``rmq-admin`` command module shares: the ``-n``/``--timeout`` options and the runner
that turns an admin failure into mqadmin's one-line message and exit status 1."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

import click
import trio

from client.admin import AdminError, MQAdmin
from client.message import MQClientError
from remoting.client import RemotingClient
from remoting.errors import RemotingError

__all__ = [
    "DEFAULT_NAMESRV",
    "echo_lines",
    "fail",
    "java_bool",
    "namesrv_addr",
    "namesrv_option",
    "require_target",
    "run_admin",
    "run_client",
    "run_command",
]

P = ParamSpec("P")

DEFAULT_NAMESRV = "127.0.0.1:9876"
#: rmq-container moves every port of its layout by this many (``--port-offset``): the default name
#: server moves with it, so a shell that starts a second copy this way can reach it with no ``-n``
PORT_OFFSET_ENV = "RMQ_PORT_OFFSET"


def default_namesrv() -> str:
    """The dev cluster's name server, 127.0.0.1:9876, moved by ``$RMQ_PORT_OFFSET`` when that is
    set (a value that is not a whole number, or that moves the port out of range, is ignored: the
    container refuses to start with it anyway)."""
    raw = os.environ.get(PORT_OFFSET_ENV, "").strip()
    try:
        port = 9876 + (int(raw) if raw else 0)
    except ValueError:
        return DEFAULT_NAMESRV
    return f"127.0.0.1:{port}" if 0 < port < 65536 else DEFAULT_NAMESRV


def _refused_hint(reason: object) -> str:
    """What to check when nothing listens at an address a command connected to."""
    if "Connection refused" in str(reason):
        default = default_namesrv()
        moved = f" moved by ${PORT_OFFSET_ENV} to {default}" if default != DEFAULT_NAMESRV else ""
        return (
            " -- nothing listens there: is rmq-container running, on these ports? Without -n the "
            f"name server is $NAMESRV_ADDR, else {DEFAULT_NAMESRV}{moved}"
        )
    return ""


def fail(command: str, reason: object) -> None:
    """mqadmin's failure line on stderr, then exit status 1."""
    click.echo(f"rmq-admin {command} command failed: {reason}", err=True)
    sys.exit(1)


def run_client(command: str, fn: Callable[[RemotingClient], Awaitable[None]], timeout: float) -> None:
    """Run ``fn`` with a fresh remoting client in one trio loop; an AdminError, RemotingError or
    ValueError ends the command with :func:`fail`, Ctrl-C with status 130."""
    failures: list[Exception] = []

    async def main() -> None:
        async with RemotingClient(connect_timeout=min(timeout, 3.0), name="rmq-admin") as rc:
            try:
                await fn(rc)
            except (AdminError, RemotingError, ValueError) as e:
                failures.append(e)  # caught inside the client's nursery: no ExceptionGroup

    try:
        trio.run(main)
    except KeyboardInterrupt:
        sys.exit(130)
    if failures:
        fail(command, f"{failures[0]}{_refused_hint(failures[0])}")


def namesrv_addr(value: str | None) -> str:
    """The name server list of a command: its ``-n``, else ``$NAMESRV_ADDR``, else the default."""
    return value or os.environ.get("NAMESRV_ADDR") or default_namesrv()


def run_command(command: str, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` in one trio loop (commands that open a producer or consumer of their own); an
    AdminError, RemotingError, MQClientError or ValueError -- also one raised inside a client's
    nursery, which arrives wrapped in exception groups -- ends the command with :func:`fail`."""
    errors: list[BaseException] = []

    def leaves(exc: BaseException) -> list[BaseException]:
        if isinstance(exc, BaseExceptionGroup):
            return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
        return [exc]

    async def main() -> None:
        try:
            await fn()
        except* (AdminError, RemotingError, MQClientError, ValueError) as group:
            errors.extend(leaves(group))

    trio.run(main)
    if errors:
        fail(command, f"{errors[0]}{_refused_hint(errors[0])}")


def run_admin(command: str, fn: Callable[[MQAdmin], Awaitable[None]], namesrv: str, timeout: float) -> None:
    """:func:`run_client` with an :class:`MQAdmin` of the name servers ``namesrv`` over the client."""

    async def with_admin(rc: RemotingClient) -> None:
        await fn(MQAdmin(rc, namesrv, timeout=timeout))

    run_client(command, with_admin, timeout)


def java_bool(text: str | None) -> bool:
    """Java's ``Boolean.parseBoolean`` of a flag value: true only for "true", any case."""
    return text is not None and text.strip().lower() == "true"


def require_target(
    broker_addr: str | None, cluster_name: str | None, message: str, *, exactly_one: bool = False
) -> None:
    """mqadmin's -b / -c option group: a usage error (``message``) unless one is given (with
    ``exactly_one``: unless exactly one is)."""
    given = bool(broker_addr) + bool(cluster_name)
    if given == 0 or (exactly_one and given == 2):
        raise click.UsageError(message)


def echo_lines(lines: list[str]) -> None:
    for line in lines:
        click.echo(line)


def namesrv_option(f: Callable[P, Any]) -> Callable[P, Any]:
    """``-n/--namesrvAddr`` (else ``$NAMESRV_ADDR``, else 127.0.0.1:9876 moved by
    ``$RMQ_PORT_OFFSET``) and ``--timeout``."""
    f = click.option(
        "-n",
        "--namesrvAddr",
        "namesrv",
        envvar="NAMESRV_ADDR",
        default=default_namesrv,
        show_default=f"$NAMESRV_ADDR, else {DEFAULT_NAMESRV} moved by ${PORT_OFFSET_ENV}",
        help="Name server address list, eg: '192.168.0.1:9876;192.168.0.2:9876'",
    )(f)
    return click.option(
        "--timeout", type=float, default=5.0, show_default=True, help="Per-request timeout in seconds."
    )(f)


async def note_ignored_order_conf(admin: MQAdmin) -> None:
    """After an order conf was put: say on stderr which name servers leave it out of routes
    (``orderMessageEnable=false``, upstream's default), so that producers would not use it. mqadmin
    says nothing, and the order conf then does nothing."""
    for addr in await admin.namesrvs_ignoring_order_conf():
        click.echo(
            f"note: name server {addr} has orderMessageEnable=false: its routes leave the order conf "
            "out, and producers pick queues as for any topic (turn it on with updateNamesrvConfig "
            "-k orderMessageEnable -v true, or in the name server's config)",
            err=True,
        )
