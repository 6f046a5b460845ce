"""``rmq-admin resetOffsetByTime``, ``skipAccumulatedMessage`` and ``cloneGroupOffset``: mqadmin's
names, flag letters and output lines.

The brokers reset the offsets themselves (upstream 5.x's server-side reset,
``useServerSideResetOffset``): each master of the topic commits the offsets and answers the group's
next pull of every queue with PULL_OFFSET_MOVED to it, so running consumers -- any client -- move
there, and offline ones start there.

``cloneGroupOffset`` copies one group's committed offsets of a topic to another group, at the
master of every broker group of the topic's route.
"""

from __future__ import annotations

import time
from datetime import datetime

import click

from client.admin import NO_CONSUME_STATS, AdminError, MQAdmin
from client.admin_common import namesrv_option, run_admin
from remoting.codes import ResponseCode
from remoting.protocol.common import MessageQueue
from remoting.protocol.namesrv import MASTER_ID

__all__ = ["COMMANDS", "parse_timestamp"]

#: upstream ``UtilAll.YYYY_MM_DD_HH_MM_SS_SSS``, "yyyy-MM-dd#HH:mm:ss:SSS", local time
_DATE_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"


def parse_timestamp(text: str) -> int:
    """mqadmin's -s: ``now``, milliseconds since the epoch, or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local)."""
    text = text.strip()
    if text == "now":
        return int(time.time() * 1000)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return int(datetime.strptime(text, _DATE_FORMAT).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither 'now', milliseconds nor yyyy-MM-dd#HH:mm:ss:SSS", param_hint="'-s'"
        ) from None


@click.command("resetOffsetByTime")
@namesrv_option
@click.option("-g", "--group", required=True, help="set the consumer group")
@click.option("-t", "--topic", required=True, help="set the topic")
@click.option(
    "-s",
    "--timestamp",
    "timestamp_text",
    required=True,
    help="set the timestamp[now|currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]",
)
@click.option(
    "-f", "--force", default=None, help="set the force rollback by timestamp switch[true|false]. Deprecated."
)
@click.option(
    "-b", "--broker", "broker_addr", default=None, help="broker addr (with -q: reset one queue there)"
)
@click.option("-q", "--queue", "queue_id", type=int, default=None, help="queue id")
@click.option("-o", "--offset", type=int, default=None, help="Expect queue offset (with -b and -q)")
def reset_offset_by_time(
    namesrv: str,
    timeout: float,
    group: str,
    topic: str,
    timestamp_text: str,
    force: str | None,
    broker_addr: str | None,
    queue_id: int | None,
    offset: int | None,
) -> None:
    """Reset consumer offset by timestamp(without client restart)."""
    group, topic = group.strip(), topic.strip()
    timestamp = parse_timestamp(timestamp_text)
    forced = force is None or force.strip().lower() == "true"

    async def go(admin: MQAdmin) -> None:
        if broker_addr is not None and queue_id is not None and queue_id >= 0:
            click.echo(
                f"start reset consumer offset by specified, group[{group}], topic[{topic}], queueId[{queue_id}], "
                f"broker[{broker_addr}], timestamp(string)[{timestamp_text}], timestamp(long)[{timestamp}]"
            )
            target = (
                offset
                if offset is not None
                else await admin.search_offset(broker_addr, topic, queue_id, timestamp)
            )
            click.echo(f"reset consumer offset to {target}")
            await admin.reset_offset(
                broker_addr, group, topic, timestamp, queue_id=queue_id, offset=target, force=forced
            )
            return
        table = await admin.reset_offset_by_timestamp(topic, group, timestamp, forced)
        click.echo(
            f"start reset consumer offset by specified, group[{group}], topic[{topic}], force[{str(forced).lower()}], "
            f"timestamp(string)[{timestamp_text}], timestamp(long)[{timestamp}]"
        )
        _print_offsets(table)

    run_admin("resetOffsetByTime", go, namesrv, timeout)


def _print_offsets(table: dict[MessageQueue, int]) -> None:
    click.echo(f"{'#brokerName':<40}  {'#queueId':<40}  {'#offset':<40}")
    for mq, at in sorted(table.items(), key=lambda e: (e[0].brokerName, e[0].queueId)):
        click.echo(f"{mq.brokerName:<40}  {mq.queueId:<40}  {at:<40}")


@click.command("skipAccumulatedMessage")
@namesrv_option
@click.option("-g", "--group", required=True, help="set the consumer group")
@click.option("-t", "--topic", required=True, help="set the topic")
@click.option("-f", "--force", default=None, help="set the force rollback by timestamp switch[true|false]")
def skip_accumulated_message(namesrv: str, timeout: float, group: str, topic: str, force: str | None) -> None:
    """Skip all messages that are accumulated (not consumed) currently."""
    forced = force is None or force.strip().lower() == "true"

    async def go(admin: MQAdmin) -> None:
        _print_offsets(await admin.reset_offset_by_timestamp(topic.strip(), group.strip(), -1, forced))

    run_admin("skipAccumulatedMessage", go, namesrv, timeout)


@click.command("cloneGroupOffset")
@namesrv_option
@click.option("-s", "--srcGroup", "src_group", required=True, help="set source consumer group")
@click.option("-d", "--destGroup", "dest_group", required=True, help="set destination consumer group")
@click.option("-t", "--topic", required=True, help="set the topic")
@click.option(
    "-o", "--offline", default=None, help="the group or the topic is offline (ignored, as by mqadmin)"
)
def clone_group_offset(
    namesrv: str, timeout: float, src_group: str, dest_group: str, topic: str, offline: str | None
) -> None:
    """Clone offset from other group."""
    src, dest, topic = src_group.strip(), dest_group.strip(), topic.strip()

    async def go(admin: MQAdmin) -> None:
        route = await admin.examine_topic_route_info(topic)
        found = False
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr is None:
                continue
            stats = await admin.examine_consume_stats_of(addr, src, topic)
            found = found or bool(stats.offsetTable)
            for mq, wrapper in sorted(stats.offsetTable.items(), key=lambda e: e[0].queueId):
                if wrapper.consumerOffset >= 0:
                    await admin.update_consumer_offset(addr, dest, mq, wrapper.consumerOffset)
        if not found:  # as mqadmin, whose examineConsumeStats refuses an empty table
            raise AdminError(ResponseCode.SYSTEM_ERROR, NO_CONSUME_STATS, "")
        click.echo(f"clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{topic}]")

    run_admin("cloneGroupOffset", go, namesrv, timeout)


COMMANDS = [reset_offset_by_time, skip_accumulated_message, clone_group_offset]
