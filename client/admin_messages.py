"""``rmq-admin`` message commands: ``queryMsgById``, ``queryMsgByUniqueKey``, ``queryMsgByKey``,
``queryMsgByOffset``, ``sendMessage``, ``consumeMessage``, ``DecodeMessageId``.

Same names and flag letters as mqadmin. They are click commands added to the ``rmq-admin`` group by
:mod:`client.admin_cli`; each runs one trio loop with a remoting client or the Python client.
"""

from __future__ import annotations

import codecs
import time

import click

from client.admin import AdminError, MQAdmin, route_addrs
from client.admin_common import fail, namesrv_addr, run_command
from client.message import Message, MessageExt, PullStatus
from client.producer import Producer
from client.pull_consumer import PullConsumer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import StoredMessage, decode_offset_msg_id, decode_uniq_id, iter_messages

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def _fmt_ts(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


def print_message(msg: StoredMessage | MessageExt, *, show_body: bool = True) -> None:
    """mqadmin's message view (``queryMsgById``): one ``Key: value`` line per field; ``msg`` as read
    from the store (VIEW_MESSAGE_BY_ID, QUERY_MESSAGE) or as a pull returned it."""
    commit_log_offset = msg.physical_offset if isinstance(msg, StoredMessage) else msg.commit_log_offset
    rows = [
        ("OffsetID", msg.offset_msg_id),
        ("Topic", msg.topic),
        ("Tags", f"[{msg.tags}]" if msg.tags is not None else "[null]"),
        ("Keys", f"[{msg.keys}]" if msg.keys is not None else "[null]"),
        ("Queue ID", str(msg.queue_id)),
        ("Queue Offset", str(msg.queue_offset)),
        ("CommitLog Offset", str(commit_log_offset)),
        ("Reconsume Times", str(msg.reconsume_times)),
        ("Born Timestamp", _fmt_ts(msg.born_timestamp)),
        ("Store Timestamp", _fmt_ts(msg.store_timestamp)),
        ("Born Host", msg.born_host),
        ("Store Host", msg.store_host),
        ("System Flag", str(msg.sys_flag)),
        ("Properties", "{" + ", ".join(f"{k}={v}" for k, v in sorted(msg.properties.items())) + "}"),
    ]
    for key, value in rows:
        click.echo(f"{key + ':':<20}{value}")
    if show_body:
        click.echo(f"{'Message Body:':<20}{msg.body.decode('utf-8', 'replace')}")


async def view_by_offset_id(client: RemotingClient, msg_id: str, timeout: float) -> StoredMessage:
    """Fetch a message by its offset message id from the broker encoded in the id."""
    host, port, offset = decode_offset_msg_id(msg_id)
    cmd = request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    resp = await client.invoke(f"{host}:{port}", cmd, timeout)
    if resp.code != ResponseCode.SUCCESS:
        raise AdminError(resp.code, resp.remark, f"{host}:{port}")
    return next(iter_messages(resp.body_bytes))


async def query_by_key(
    admin: MQAdmin,
    topic: str,
    key: str,
    begin: int,
    end: int,
    max_num: int = 64,
    *,
    unique: bool = False,
    route_topic: str | None = None,
) -> list[StoredMessage]:
    """QUERY_MESSAGE on every master hosting ``topic`` (or hosting ``route_topic``: a cluster name
    routes all of its brokers); keys re-checked exactly as clients do."""
    route = await admin.examine_topic_route_info(route_topic or topic)
    found: list[StoredMessage] = []
    for addr in route_addrs(route):
        ext: dict[str, object] = {
            "topic": topic,
            "key": key,
            "maxNum": max_num,
            "beginTimestamp": begin,
            "endTimestamp": end,
        }
        cmd: RemotingCommand = request(RequestCode.QUERY_MESSAGE, ext)
        if unique:
            assert cmd.ext_fields is not None
            cmd.ext_fields[UNIQUE_KEY_QUERY] = "true"
        resp = await admin.client.invoke(addr, cmd, admin.timeout)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            continue
        if resp.code != ResponseCode.SUCCESS:
            raise AdminError(resp.code, resp.remark, addr)
        for msg in iter_messages(resp.body_bytes):
            keys = (msg.keys or "").split()
            if (unique and msg.uniq_key == key) or (not unique and key in keys):
                found.append(msg)
    return found


@click.command("queryMsgById")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-i", "--msgId", "msg_id", required=True, help="offset message id, or a unique key (with -t)")
@click.option("-t", "--topic", default=None, help="topic, to look up a unique key (client message id)")
@click.option("--timeout", default=5.0, show_default=True, help="seconds per request")
def query_msg_by_id(namesrv: str | None, msg_id: str, topic: str | None, timeout: float) -> None:
    """Show a message by its offset message id (or unique key with -t)."""

    async def go() -> None:
        async with RemotingClient(connect_timeout=min(timeout, 3.0), name="rmq-admin") as rc:
            # A unique key and an offset id are both 32 hex digits: with a topic, look the id up
            # as a unique key first (no connection to a made-up address), then as an offset id.
            if topic is not None:
                admin = MQAdmin(rc, namesrv_addr(namesrv), timeout=timeout)
                hits = await query_by_key(admin, topic, msg_id, 0, 2**63 - 1, unique=True)
                if hits:
                    print_message(hits[0])
                    return
            try:
                msg = await view_by_offset_id(rc, msg_id, timeout)
            except ValueError:
                raise ValueError(
                    f"{msg_id} is not an offset message id"
                    + ("" if topic else "; give -t TOPIC to look it up as a unique key")
                ) from None
            except RemotingError as e:
                if topic is not None:
                    raise
                # the id names a broker nobody runs (nothing listens, or something that is not a
                # broker: seen, a proxy answering HTTP): most likely it is a client's unique key
                # (what producers print as msgId), whose first bytes only look like an address
                host, port, _ = decode_offset_msg_id(msg_id)
                raise ValueError(
                    f"{msg_id} read as an offset message id names the broker {host}:{port}, which "
                    f"cannot be reached or did not answer ({e}); if it is a client message id (the "
                    "msgId producers print), give -t TOPIC to look it up as a unique key"
                ) from None
            print_message(msg)

    run_command("queryMsgById", go)


@click.command("queryMsgByUniqueKey")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-i", "--msgId", "msg_id", required=True, help="Message Id (the client's unique key)")
@click.option("-t", "--topic", required=True, help="The topic of msg")
@click.option("-a", "--showAll", "show_all", is_flag=True, help="Print all message, the limit is 32")
@click.option("-c", "--cluster", "cluster_name", default=None, help="Cluster name, used to find the route.")
@click.option("--timeout", default=5.0, show_default=True, help="seconds per request")
def query_msg_by_unique_key(
    namesrv: str | None, msg_id: str, topic: str, show_all: bool, cluster_name: str | None, timeout: float
) -> None:
    """Query Message by Unique key."""
    msg_id, topic = msg_id.strip(), topic.strip()

    async def go() -> None:
        async with RemotingClient(connect_timeout=min(timeout, 3.0), name="rmq-admin") as rc:
            admin = MQAdmin(rc, namesrv_addr(namesrv), timeout=timeout)
            route_topic = cluster_name.strip() if cluster_name else None
            hits = await query_by_key(
                admin, topic, msg_id, 0, 2**63 - 1, 32, unique=True, route_topic=route_topic
            )
            if not hits:
                raise ValueError(f"no message of topic {topic} has the unique key {msg_id}")
            hits.sort(key=lambda m: m.store_timestamp)
            for i, msg in enumerate(hits if show_all else hits[:1]):
                if i:
                    click.echo("")
                print_message(msg)

    run_command("queryMsgByUniqueKey", go)


@click.command("queryMsgByKey")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True)
@click.option("-b", "--beginTimestamp", "begin", type=int, default=0, help="ms")
@click.option("-e", "--endTimestamp", "end", type=int, default=2**63 - 1, help="ms")
@click.option("--timeout", default=5.0, show_default=True)
def query_msg_by_key(namesrv: str | None, topic: str, key: str, begin: int, end: int, timeout: float) -> None:
    """List messages whose KEYS contain the key."""

    async def go() -> None:
        async with RemotingClient(connect_timeout=min(timeout, 3.0), name="rmq-admin") as rc:
            hits = await query_by_key(
                MQAdmin(rc, namesrv_addr(namesrv), timeout=timeout), topic, key, begin, end
            )
            click.echo(f"{'#Message ID':<50}{'#QID':<6}#Offset")
            for msg in hits:
                click.echo(f"{msg.msg_id:<50}{msg.queue_id:<6}{msg.queue_offset}")

    run_command("queryMsgByKey", go)


@click.command("queryMsgByOffset")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker Name")
@click.option("-i", "--queueId", "queue_id", type=int, required=True, help="Queue Id")
@click.option("-o", "--offset", type=int, required=True, help="Queue Offset")
@click.option(
    "-f", "--bodyFormat", "body_format", default=None, help="print message body by the specified format"
)
def query_msg_by_offset(
    namesrv: str | None, topic: str, broker_name: str, queue_id: int, offset: int, body_format: str | None
) -> None:
    """Query Message by offset."""
    topic, broker_name = topic.strip(), broker_name.strip()
    if body_format is not None:
        try:
            codecs.lookup(body_format.strip())
        except LookupError:
            raise click.BadParameter(f"unknown charset {body_format!r}", param_hint="-f") from None

    async def go() -> None:
        async with PullConsumer("TOOLS_CONSUMER", namesrv_addr(namesrv)) as consumer:
            queues = await consumer.fetch_subscribe_message_queues(topic)
            mq = MessageQueue(topic=topic, brokerName=broker_name, queueId=queue_id)
            if mq not in queues:
                brokers = sorted({q.brokerName for q in queues})
                raise ValueError(
                    f"topic {topic} has no queue {queue_id} on broker {broker_name} "
                    f"(its route: {', '.join(f'{b} ({sum(q.brokerName == b for q in queues)} queues)' for b in brokers)})"
                )
            result = await consumer.pull(mq, "*", offset, 1)
            if result.status is not PullStatus.FOUND or not result.messages:
                raise ValueError(
                    f"no message at offset {offset} of {topic} queue {queue_id} on {broker_name}: "
                    f"{result.status.name} (queue min offset {result.min_offset}, max offset {result.max_offset})"
                )
            msg = result.messages[0]
            print_message(msg, show_body=body_format is None)
            if body_format is not None:
                click.echo(f"{'Message Body:':<20}{msg.body.decode(body_format.strip(), 'replace')}")

    run_command("queryMsgByOffset", go)


@click.command("sendMessage")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True, help="UTF-8 message body")
@click.option("-k", "--key", default=None, help="message keys")
@click.option("-c", "--tags", default=None, help="message tag")
@click.option("-b", "--broker", "broker_name", default=None, help="send to this broker name")
@click.option("-i", "--qid", "queue_id", type=int, default=None, help="send to this queue id (with -b)")
def send_message(
    namesrv: str | None,
    topic: str,
    body: str,
    key: str | None,
    tags: str | None,
    broker_name: str | None,
    queue_id: int | None,
) -> None:
    """Send one message and print the result like mqadmin."""

    async def go() -> None:
        async with Producer("TOOLS_PRODUCER", namesrv_addr(namesrv)) as producer:
            msg = Message(topic, body, tags=tags, keys=key)
            queue = None
            if broker_name is not None:
                queues = await producer.fetch_publish_message_queues(topic)
                candidates = [
                    q
                    for q in queues
                    if q.brokerName == broker_name and (queue_id is None or q.queueId == queue_id)
                ]
                if not candidates:
                    raise ValueError(
                        f"no writable queue of {topic} on broker {broker_name}"
                        + (f" with id {queue_id}" if queue_id is not None else "")
                    )
                queue = candidates[0]
            result = await producer.send(msg, queue=queue)
            click.echo(f"{'#Broker Name':<32}{'#QID':<6}{'#Send Result':<16}#MsgId")
            mq = result.message_queue
            click.echo(f"{mq.brokerName:<32}{mq.queueId:<6}{result.send_status.name:<16}{result.msg_id}")

    run_command("sendMessage", go)


@click.command("consumeMessage")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", default=None)
@click.option("-i", "--queueId", "queue_id", type=int, default=None)
@click.option("-o", "--offset", type=int, default=None, help="start offset (default: each queue's min)")
@click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER")
@click.option("-c", "--MessageNumber", "count", type=int, default=128, show_default=True)
def consume_message(
    namesrv: str | None,
    topic: str,
    broker_name: str | None,
    queue_id: int | None,
    offset: int | None,
    group: str,
    count: int,
) -> None:
    """Pull and print up to -c messages of a topic (or one queue) without committing offsets."""

    async def go() -> None:
        async with PullConsumer(group, namesrv_addr(namesrv)) as consumer:
            queues: list[MessageQueue] = await consumer.fetch_subscribe_message_queues(topic)
            queues = [
                q
                for q in queues
                if (broker_name is None or q.brokerName == broker_name)
                and (queue_id is None or q.queueId == queue_id)
            ]
            left = count
            for mq in queues:
                pos = offset if offset is not None else await consumer.min_offset(mq)
                end = await consumer.max_offset(mq)
                while left > 0 and pos < end:
                    result = await consumer.pull(mq, "*", pos, min(32, left))
                    if not result.messages:
                        break
                    for m in result.messages:
                        click.echo(
                            f"MSGID: {m.msg_id} {mq.brokerName} QID {mq.queueId} OFFSET {m.queue_offset} "
                            f"TAGS {m.tags} KEYS {m.keys} BODY {m.body.decode('utf-8', 'replace')}"
                        )
                    left -= len(result.messages)
                    pos = result.next_begin_offset
            click.echo(f"Consumed {count - left} message(s) from {len(queues)} queue(s)")

    run_command("consumeMessage", go)


@click.command("DecodeMessageId")
@click.option("-i", "--messageId", "message_id", required=True, help="unique message ID")
def decode_message_id(message_id: str) -> None:
    """decode unique message ID: the client's address and (nearly) when the id was made.
    mqadmin prints ``ip=...date=...`` on one line without a line break; here two lines."""
    try:
        host, when = decode_uniq_id(message_id, time.time_ns() // 1_000_000)
    except ValueError as e:
        fail("DecodeMessageId", e)
        return
    stamp = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(when / 1000)) + f":{when % 1000:03d}"
    click.echo(f"ip={host}")
    click.echo(f"date={stamp}")


COMMANDS = (
    query_msg_by_id,
    query_msg_by_unique_key,
    query_msg_by_key,
    query_msg_by_offset,
    send_message,
    consume_message,
    decode_message_id,
)
