"""``rmq-admin`` probes that send messages and time them: ``checkMsgSendRT`` (a topic's queues in
turn) and ``sendMsgStatus`` (one broker, through the topic named after it).

mqadmin's names, flags and lines. They use the Python producer, so a run also shows what a client
sees: route lookups, retries on another broker for ``sendMsgStatus``, per-send round trips.
"""

from __future__ import annotations

import time

import click

from client.admin_messages import _namesrv, _run
from client.message import Message, MQClientError, SendResult
from client.producer import Producer
from remoting.errors import RemotingError
from remoting.protocol.common import MessageQueue

__all__ = ["COMMANDS", "send_result_str"]


def send_result_str(result: SendResult) -> str:
    """Java's ``SendResult.toString()`` (``recallHandle``: null, no recall here)."""
    mq = result.message_queue
    queue = f"MessageQueue [topic={mq.topic}, brokerName={mq.brokerName}, queueId={mq.queueId}]"
    return (
        f"SendResult [sendStatus={result.send_status.name}, msgId={result.msg_id}, "
        f"offsetMsgId={result.offset_msg_id}, messageQueue={queue}, queueOffset={result.queue_offset}, "
        "recallHandle=null]"
    )


@click.command("checkMsgSendRT")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-a", "--amount", type=int, default=100, show_default=True, help="message amount")
@click.option("-s", "--size", type=int, default=128, show_default=True, help="message size (bytes)")
def check_msg_send_rt(namesrv: str | None, topic: str, amount: int, size: int) -> None:
    """Check message send response time: ``amount`` sends of ``size`` bytes, message i to queue
    i mod the topic's writable queues; one line per send (whole milliseconds), then the average in
    milliseconds leaving out the first send (which also pays for the route lookup and the
    connection)."""
    if amount < 1 or size < 1:
        raise click.UsageError("-a and -s must be positive")

    async def go() -> None:
        async with Producer(str(int(time.time() * 1000)), _namesrv(namesrv)) as producer:
            chosen: list[MessageQueue] = []

            def by_index(queues: list[MessageQueue], _msg: Message, arg: int) -> MessageQueue:
                chosen.append(queues[arg % len(queues)])
                return chosen[-1]

            click.echo(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #RT")
            elapsed_ns = 0
            for i in range(amount):
                start = time.monotonic_ns()
                try:
                    await producer.send(Message(topic, b"a" * size), selector=by_index, arg=i)
                    ok = True
                except (MQClientError, RemotingError):
                    ok = False
                took = time.monotonic_ns() - start
                rt = took // 1_000_000  # whole milliseconds, as mqadmin's clock gives them
                if i:
                    elapsed_ns += took
                where = chosen[-1] if chosen else None
                broker = where.brokerName if where is not None else "null"
                qid = str(where.queueId) if where is not None else "0"
                click.echo(f"{broker:<32}  {qid:<4}  {str(ok).lower():<20}    {rt}")
            # the average from the exact times (mqadmin averages whole milliseconds: 0.00 for a
            # broker that answers within a millisecond, as on loopback)
            avg = f"{elapsed_ns / (amount - 1) / 1e6:.2f}" if amount > 1 else "NaN"
            click.echo(f"Avg RT: {avg}")

    _run("checkMsgSendRT", go)


@click.command("sendMsgStatus")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option(
    "-b",
    "--brokerName",
    "broker_name",
    required=True,
    help="Broker Name (every broker serves a topic of its own name, brokerTopicEnable)",
)
@click.option("-s", "--messageSize", "size", type=int, default=128, show_default=True, help="Message Size")
@click.option("-c", "--count", type=int, default=50, show_default=True, help="send message count")
def send_msg_status(namesrv: str | None, broker_name: str, size: int, count: int) -> None:
    """Send msg to broker: ``count`` messages of about ``size`` bytes to the topic named after the
    broker (after one small warm-up send), printing each round trip and result."""
    name = broker_name.strip()

    def body(nbytes: int) -> bytes:
        # mqadmin's body: "hello jodie" repeated, ceil(size / 11) times
        return b"hello jodie" * -(-nbytes // 11)

    async def go() -> None:
        async with Producer("PID_SMSC", _namesrv(namesrv)) as producer:
            await producer.send(Message(name, body(16)))
            for _ in range(count):
                start = time.monotonic_ns()
                result = await producer.send(Message(name, body(size)))
                rt = (time.monotonic_ns() - start) // 1_000_000
                click.echo(f"rt={rt}ms, SendResult={send_result_str(result)}")

    _run("sendMsgStatus", go)


COMMANDS = [check_msg_send_rt, send_msg_status]
