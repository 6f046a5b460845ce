"""``rmq-admin`` probes that send messages and time them: ``checkMsgSendRT`` (a topic's queues in
turn), ``sendMsgStatus`` (one broker, through the topic named after it) and ``clusterRT`` (every
broker of every cluster, the same way, round after round).

mqadmin's names, flags and lines. They use the Python producer, so a run also shows what a client
sees: route lookups, retries on another broker for ``sendMsgStatus``, per-send round trips.
Deviation, additive: ``clusterRT --count N`` stops after N rounds (mqadmin repeats until
interrupted, as it does here by default).
"""

from __future__ import annotations

import datetime
import time

import click
import trio

from client.admin import MQAdmin
from client.admin_common import namesrv_addr, run_command
from client.message import Message, MQClientError, SendResult
from client.producer import Producer
from remoting.client import RemotingClient
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
        async with Producer(str(int(time.time() * 1000)), namesrv_addr(namesrv)) as producer:
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

    run_command("checkMsgSendRT", go)


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
        async with Producer("PID_SMSC", namesrv_addr(namesrv)) as producer:
            await producer.send(Message(name, body(16)))
            for _ in range(count):
                start = time.monotonic_ns()
                result = await producer.send(Message(name, body(size)))
                rt = (time.monotonic_ns() - start) // 1_000_000
                click.echo(f"rt={rt}ms, SendResult={send_result_str(result)}")

    run_command("sendMsgStatus", go)


#: the time zone of mqadmin's ``clusterRT -p true`` lines (fixed upstream, whatever the host's)
_TLOG_ZONE = datetime.timezone(datetime.timedelta(hours=8))


@click.command("clusterRT")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name server address(es), ;-separated")
@click.option("-a", "--amount", type=int, default=100, show_default=True, help="message amount")
@click.option("-s", "--size", type=int, default=128, show_default=True, help="message size (bytes)")
@click.option("-c", "--cluster", "cluster", default=None, help="cluster name (default: every cluster)")
@click.option("-p", "--printLog", "print_log", default="false", help="print as tlog (true / false)")
@click.option("-m", "--machineRoom", "machine_room", default="noname", show_default=True, help="machine room")
@click.option("-i", "--interval", type=int, default=10, show_default=True, help="seconds between rounds")
@click.option("--count", type=int, default=0, show_default=True, help="rounds (0 = until interrupted)")
def cluster_rt(
    namesrv: str | None,
    amount: int,
    size: int,
    cluster: str | None,
    print_log: str,
    machine_room: str,
    interval: int,
    count: int,
) -> None:
    """List All clusters Message Send RT: ``amount`` sends to every broker (through the topic
    named after it) per round; the average round trip in milliseconds leaves out each broker's
    first send, and the send failures are counted."""
    if amount < 1 or size < 1:
        raise click.UsageError("-a and -s must be positive")
    tlog = print_log.strip().lower() == "true"

    async def go() -> None:
        addr = namesrv_addr(namesrv)
        async with RemotingClient(name="rmq-admin") as rc:
            info = await MQAdmin(rc, addr).examine_broker_cluster_info()
        async with Producer(str(int(time.time() * 1000)), addr) as producer:
            names = [cluster.strip()] if cluster else sorted(info.clusterAddrTable)
            if not tlog:
                click.echo(
                    f"{'#Cluster Name':<24}  {'#Broker Name':<24}  {'#RT':<4}  {'#successCount':<8}  #failCount"
                )
            rounds = 0
            while True:
                for name in names:
                    brokers = info.clusterAddrTable.get(name)
                    if brokers is None:
                        click.echo(f"cluster [{name}] not exist")
                        break
                    for broker in sorted(brokers):
                        elapsed_ns = ok = failed = 0
                        for i in range(amount):
                            start = time.monotonic_ns()
                            try:
                                await producer.send(Message(broker, b"a" * size))
                                ok += 1
                            except (MQClientError, RemotingError):
                                failed += 1
                            if i:
                                elapsed_ns += time.monotonic_ns() - start
                        rt = elapsed_ns / (amount - 1) / 1e6 if amount > 1 else float("nan")
                        if tlog:
                            now = datetime.datetime.now(_TLOG_ZONE).strftime("%Y-%m-%d %H:%M:%S")
                            rounded = "NaN" if rt != rt else str(int(rt + 0.5))
                            click.echo(f"{now}|{machine_room}|{name}|{broker}|{rounded}")
                        else:
                            click.echo(f"{name:<24}  {broker:<24}  {rt:<8.2f}  {ok:<16}  {failed:<16}")
                rounds += 1
                if count and rounds >= count:
                    return
                await trio.sleep(interval)

    run_command("clusterRT", go)


COMMANDS = [check_msg_send_rt, send_msg_status, cluster_rt]
