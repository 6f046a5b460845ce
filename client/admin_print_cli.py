"""``rmq-admin printMsg`` and ``printMsgByQueue``: read a time window of a topic's queues (or of one
queue) with a pull consumer and print every message, or count them by tag.

mqadmin's names, flag letters and lines (upstream ``PrintMessageSubCommand`` and
``PrintMessageByQueueCommand``). Each queue is read from its min offset (or, with ``-b``, the first
offset stored at or after that time) up to its max offset (or, with ``-e``, the first offset stored
at or after that time, which is left out), 32 messages a pull, as the tools consumer group
``TOOLS_CONSUMER``; nothing is committed. A message prints as
``MSGID: <id> <MessageExt.toString()> BODY: <body>``, the properties map in the order Java's
``HashMap`` iterates it.

Deviations, each to make the window or the exit status mean what it says:

* messages a pull returns beyond the window's end are not printed (mqadmin prints the whole last
  batch of 32, so ``-e`` may let later messages through);
* ``printMsgByQueue`` goes on past a NO_MATCHED_MSG answer as ``printMsg`` does (mqadmin stops
  the queue there, leaving out matching messages further on);
* ``printMsgByQueue`` checks that the queue is in the topic's route (mqadmin prints nothing for a
  queue that does not exist);
* a pull that fails ends that queue with a line on stderr, the other queues are still read, and the
  command then fails (mqadmin prints the stack trace and exits as if all went well);
* the long option names have no trailing blank (mqadmin's ``"charsetName "`` etc. cannot be
  typed), and ``-p`` is ``--printMsg`` (mqadmin's ``"print msg"``);
* a charset Python does not know, or a timestamp neither milliseconds nor
  ``yyyy-MM-dd#HH:mm:ss:SSS`` (``now`` is accepted too), is a usage error before anything is read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, ParamSpec

import click

from client.admin_common import java_bool, namesrv_option, run_command
from client.admin_offsets_cli import parse_timestamp
from client.instance import ClientInstance
from client.message import MessageExt, MQClientError, PullStatus
from client.pull_consumer import PullConsumer
from remoting.errors import RemotingError
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_KEY, java_string_hash

__all__ = [
    "COMMANDS",
    "java_hash_order",
    "message_ext_str",
    "message_line",
    "mq_str",
    "tag_count_lines",
]

#: upstream ``MixAll.TOOLS_CONSUMER_GROUP``
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: messages asked for per pull, as mqadmin
PULL_BATCH = 32
#: the initial capacity of the properties map upstream's ``MessageDecoder`` builds
_PROPERTIES_CAPACITY = 128
#: a pull that does not move the offset this many times in a row ends the queue (a lagging slave
#: answers "retry" without moving it; mqadmin would spin)
_MAX_STALLED_PULLS = 3

P = ParamSpec("P")

SEPARATOR = "--------------------------------------------------------"


# --- Java's toString forms ---------------------------------------------------------------------


def java_hash_order(keys: list[str], initial_capacity: int = 16) -> list[str]:
    """``keys`` (in insertion order) in the order a Java ``HashMap<String, ?>`` of that initial
    capacity iterates them: by bucket of the spread ``String.hashCode()``, insertion order within a
    bucket (a resize keeps it)."""
    capacity = 1
    while capacity < initial_capacity:
        capacity <<= 1
    while len(keys) > capacity * 3 // 4:  # Java resizes once size exceeds 0.75 * capacity
        capacity <<= 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


def mq_str(mq: MessageQueue) -> str:
    """Upstream ``MessageQueue.toString``."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.brokerName}, queueId={mq.queueId}]"


def _socket_str(host: str) -> str:
    # Java's InetSocketAddress of a bare address: "/" + address + ":" + port
    return f"/{host}" if host else "null"


def message_ext_str(msg: MessageExt) -> str:
    """Upstream ``MessageExt.toString`` of a pulled message (``msgId`` there is the offset id;
    the transaction id is the unique key of a prepared transaction message, as the pull sets it)."""
    props = msg.properties
    properties = ", ".join(f"{k}={props[k]}" for k in java_hash_order(list(props), _PROPERTIES_CAPACITY))
    body = ", ".join(str(b - 256 if b > 127 else b) for b in msg.body)
    tid = props.get(PROPERTY_UNIQ_KEY) if java_bool(props.get(PROPERTY_TRANSACTION_PREPARED)) else None
    message = (
        f"Message{{topic='{msg.topic}', flag={msg.flag}, properties={{{properties}}}, body=[{body}], "
        f"transactionId='{tid if tid is not None else 'null'}'}}"
    )
    return (
        f"MessageExt [brokerName={msg.broker_name}, queueId={msg.queue_id}, storeSize={msg.store_size}, "
        f"queueOffset={msg.queue_offset}, sysFlag={msg.sys_flag}, bornTimestamp={msg.born_timestamp}, "
        f"bornHost={_socket_str(msg.born_host)}, storeTimestamp={msg.store_timestamp}, "
        f"storeHost={_socket_str(msg.store_host)}, msgId={msg.offset_msg_id}, "
        f"commitLogOffset={msg.commit_log_offset}, bodyCRC={msg.body_crc}, "
        f"reconsumeTimes={msg.reconsume_times}, preparedTransactionOffset={msg.prepared_transaction_offset}, "
        f"toString()={message}]"
    )


def message_line(msg: MessageExt, charset: str, print_body: bool) -> str:
    """mqadmin's ``printMessage`` line of one message."""
    body = msg.body.decode(charset, "replace") if print_body else "NOT PRINT BODY"
    return f"MSGID: {msg.msg_id} {message_ext_str(msg)} BODY: {body}"


def tag_count_lines(counts: dict[str, int]) -> list[str]:
    """``printMsgByQueue -f``: the tags (first-seen order in ``counts``) by count, largest first;
    ties in Java ``HashMap`` order, as mqadmin's stable sort leaves them."""
    ordered = sorted(java_hash_order(list(counts)), key=lambda tag: -counts[tag])
    return [f"Tag: {tag:<30} Count: {counts[tag]}" for tag in ordered]


# --- options ---------------------------------------------------------------------------------


def _charset(name: str | None) -> str:
    charset = name.strip() if name is not None else "UTF-8"
    try:
        # LookupError for unknown names and for codecs that are not text (an empty input is not
        # looked up at all)
        b"x".decode(charset, "replace")
    except (LookupError, ValueError):
        raise click.BadParameter(f"unknown charset {charset!r}", param_hint="'-c'") from None
    return charset


def _timestamp(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_timestamp(text)
    except click.BadParameter as e:
        raise click.BadParameter(e.message, param_hint=f"'{flag}'") from None


def _expression(text: str | None) -> str:
    return text.strip() if text is not None else "*"


# --- reading ---------------------------------------------------------------------------------


@asynccontextmanager
async def _tools_consumer(namesrv: str, timeout: float) -> AsyncIterator[PullConsumer]:
    """A pull consumer of the tools group on its own client instance (every call ``timeout``)."""
    instance = ClientInstance(namesrv, call_timeout=timeout)
    await instance.start()
    try:
        async with PullConsumer(TOOLS_CONSUMER_GROUP, instance=instance) as consumer:
            yield consumer
    finally:
        # not under a shielded scope: the instance's nursery was opened before it
        await instance.shutdown()


async def _window(
    consumer: PullConsumer, mq: MessageQueue, begin: int | None, end: int | None
) -> tuple[int, int]:
    """The queue's [min, max) offsets, each replaced by the offset searched for its timestamp."""
    low = await consumer.min_offset(mq)
    high = await consumer.max_offset(mq)
    if begin is not None:
        low = await consumer.search_offset(mq, begin)
    if end is not None:
        high = await consumer.search_offset(mq, end)
    return low, high


OnPull = Callable[[PullStatus, list[MessageExt], int], None]


async def _read_queue(
    consumer: PullConsumer,
    mq: MessageQueue,
    expression: str,
    window: tuple[int, int],
    timeout: float,
    on_pull: OnPull,
) -> bool:
    """Pull ``mq`` from the window's start until its end, NO_NEW_MSG or OFFSET_ILLEGAL, calling
    ``on_pull(status, messages inside the window, next offset)`` after each pull. False when a pull
    failed (said on stderr)."""
    offset, high = window
    stalled = 0
    while offset < high:
        try:
            result = await consumer.pull(mq, expression, offset, PULL_BATCH, timeout=timeout)
        except (MQClientError, RemotingError) as e:
            click.echo(f"{mq_str(mq)} pull from offset {offset} failed: {e}", err=True)
            return False
        stalled = stalled + 1 if result.next_begin_offset == offset else 0
        offset = result.next_begin_offset
        on_pull(result.status, [m for m in result.messages if m.queue_offset < high], offset)
        if (
            result.status in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL)
            or stalled >= _MAX_STALLED_PULLS
        ):
            break
    return True


def _unread(failed: int) -> ValueError:
    return ValueError(f"{failed} queue(s) could not be read to the end (see above)")


# --- commands --------------------------------------------------------------------------------


def _read_options(f: Callable[P, Any]) -> Callable[P, Any]:
    """The options both commands share: -c charset, -s subscription expression, -b / -e window."""
    for option in reversed(
        (
            click.option(
                "-c", "--charsetName", "charset_name", default=None, help="CharsetName(eg: UTF-8,GBK)"
            ),
            click.option(
                "-s",
                "--subExpression",
                "sub_expression",
                default=None,
                help="Subscribe Expression(eg: TagA || TagB)",
            ),
            click.option(
                "-b",
                "--beginTimestamp",
                "begin_text",
                default=None,
                help="Begin timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]",
            ),
            click.option(
                "-e",
                "--endTimestamp",
                "end_text",
                default=None,
                help="End timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]",
            ),
        )
    ):
        f = option(f)
    return f


@click.command("printMsg")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@_read_options
@click.option("-d", "--printBody", "print_body_text", default=None, help="print body (default true)")
@click.option(
    "-l",
    "--lmqParentTopic",
    "lmq_parent",
    default=None,
    help="Lmq parent topic, lmq is used to find the route.",
)
def print_msg(
    namesrv: str,
    timeout: float,
    topic: str,
    charset_name: str | None,
    sub_expression: str | None,
    begin_text: str | None,
    end_text: str | None,
    print_body_text: str | None,
    lmq_parent: str | None,
) -> None:
    """Print Message Detail."""
    topic = topic.strip()
    charset = _charset(charset_name)
    expression = _expression(sub_expression)
    begin, end = _timestamp(begin_text, "-b"), _timestamp(end_text, "-e")
    print_body = print_body_text is None or java_bool(print_body_text)
    parent = lmq_parent.strip() if lmq_parent is not None else None

    async def go() -> None:
        async with _tools_consumer(namesrv, timeout) as consumer:
            if parent is not None:
                # an LMQ has no route of its own: read its queues on the parent topic's brokers
                queues = [
                    MessageQueue(topic=topic, brokerName=q.brokerName, queueId=q.queueId)
                    for q in await consumer.fetch_subscribe_message_queues(parent)
                ]
            else:
                queues = await consumer.fetch_subscribe_message_queues(topic)
            failed = 0
            for mq in queues:
                window = await _window(consumer, mq, begin, end)
                click.echo(f"minOffset={window[0]}, maxOffset={window[1]}, {mq_str(mq)}")

                def on_pull(
                    status: PullStatus, msgs: list[MessageExt], offset: int, mq: MessageQueue = mq
                ) -> None:
                    if status is PullStatus.FOUND:
                        for msg in msgs:
                            click.echo(message_line(msg, charset, print_body))
                    elif status is PullStatus.NO_MATCHED_MSG:
                        click.echo(f"{mq_str(mq)} no matched msg. status={status.name}, offset={offset}")
                    else:
                        click.echo(f"{mq_str(mq)} print msg finished. status={status.name}, offset={offset}")

                if not await _read_queue(consumer, mq, expression, window, timeout, on_pull):
                    failed += 1
                click.echo(SEPARATOR)
            if failed:
                raise _unread(failed)

    run_command("printMsg", go)


@click.command("printMsgByQueue")
@namesrv_option
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-a", "--brokerName", "broker_name", required=True, help="broker name")
@click.option("-i", "--queueId", "queue_id", type=int, required=True, help="queue id")
@_read_options
@click.option("-p", "--printMsg", "print_msg_text", default=None, help="print msg. eg: true | false(default)")
@click.option(
    "-d", "--printBody", "print_body_text", default=None, help="print body. eg: true | false(default)"
)
@click.option(
    "-f", "--calculate", "calculate_text", default=None, help="calculate by tag. eg: true | false(default)"
)
def print_msg_by_queue(
    namesrv: str,
    timeout: float,
    topic: str,
    broker_name: str,
    queue_id: int,
    charset_name: str | None,
    sub_expression: str | None,
    begin_text: str | None,
    end_text: str | None,
    print_msg_text: str | None,
    print_body_text: str | None,
    calculate_text: str | None,
) -> None:
    """Print Message Detail by queueId."""
    topic, broker_name = topic.strip(), broker_name.strip()
    charset = _charset(charset_name)
    expression = _expression(sub_expression)
    begin, end = _timestamp(begin_text, "-b"), _timestamp(end_text, "-e")
    print_msgs, print_body = java_bool(print_msg_text), java_bool(print_body_text)
    by_tag = java_bool(calculate_text)

    async def go() -> None:
        async with _tools_consumer(namesrv, timeout) as consumer:
            queues = await consumer.fetch_subscribe_message_queues(topic)
            mq = MessageQueue(topic=topic, brokerName=broker_name, queueId=queue_id)
            if mq not in queues:
                brokers = sorted({q.brokerName for q in queues})
                route = ", ".join(f"{b} ({sum(q.brokerName == b for q in queues)} queues)" for b in brokers)
                raise ValueError(
                    f"topic {topic} has no queue {queue_id} on broker {broker_name} (its route: {route})"
                )
            window = await _window(consumer, mq, begin, end)
            counts: dict[str, int] = {}

            def on_pull(status: PullStatus, msgs: list[MessageExt], offset: int) -> None:
                for msg in msgs:
                    if by_tag and msg.tags is not None and msg.tags.strip():
                        counts[msg.tags] = counts.get(msg.tags, 0) + 1
                    if print_msgs:
                        click.echo(message_line(msg, charset, print_body))

            ok = await _read_queue(consumer, mq, expression, window, timeout, on_pull)
            if by_tag:
                for line in tag_count_lines(counts):
                    click.echo(line)
            if not ok:
                raise _unread(1)

    run_command("printMsgByQueue", go)


COMMANDS = [print_msg, print_msg_by_queue]
