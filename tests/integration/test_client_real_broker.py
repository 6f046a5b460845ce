"""The Python client against the project's real broker and name server (in process, real sockets).

Auto-created topics (TBW102 route), batch, compression, tag filtering, committed offsets,
orderly locks and broadcasting, end to end. Registration of a new topic or retry topic with
the name server is not awaited: the client finds routes on its own schedule, shortened here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from client.admin import MQAdmin
from client.instance import ClientInstance
from client.message import (
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    MQClientError,
    PullStatus,
    SendStatus,
)
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.protocol.broker import ConsumeFromWhere, MessageModel, ResetOffsetBody
from tests.integration.broker_env import broker_env, wait_until

TOPIC = "ClientTopic"


async def routed_queues(consumer: PullConsumer, topic: str, timeout: float = 10.0) -> list[MessageQueue]:
    """The topic's queues once the name server routes it: the broker registers an auto-created
    topic in the background, so right after the first send the route may not be there yet."""
    with trio.move_on_after(timeout):
        while True:
            try:
                return await consumer.fetch_subscribe_message_queues(topic)
            except MQClientError:
                await trio.sleep(0.05)
    raise AssertionError(f"no route for {topic} after {timeout}s")


def fast_instance(namesrv: str) -> ClientInstance:
    return ClientInstance(namesrv, heartbeat_interval=0.5, poll_name_server_interval=0.3)


def fast_push_consumer(
    group: str, instance: ClientInstance, listener: Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]
) -> PushConsumer:
    """A push consumer of every message of TOPIC from the first offset, with short intervals."""
    consumer = PushConsumer(
        group,
        instance=instance,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        rebalance_interval=0.3,
        persist_offset_interval=0.2,
        broker_suspend_max_time=1.0,
    )
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listener)
    return consumer


async def send_bodies(namesrv: str, bodies: list[bytes]) -> None:
    """Send each body to TOPIC with one producer."""
    async with Producer("PG", namesrv) as producer:
        for body in bodies:
            await producer.send(Message(TOPIC, body))


def collecting_listener() -> tuple[list[bytes], Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]]:
    """A listener that records the bodies it is given and reports success, with its record."""
    got: list[bytes] = []

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    return got, listener


async def test_produce_then_pull_and_push_on_the_real_broker(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        async with Producer("PG", env.namesrv_addr) as producer:
            first = await producer.send(Message(TOPIC, b"hello", tags="A", keys="k1", properties={"u": "1"}))
            batch = await producer.send_batch([Message(TOPIC, b"b%d" % i, tags="B") for i in range(3)])
            big = await producer.send(Message(TOPIC, bytes(range(256)) * 40, tags="A"))
        assert first.send_status is SendStatus.SEND_OK
        assert len(first.offset_msg_id) == 32
        assert len(batch.msg_id.split(",")) == 3
        assert big.send_status is SendStatus.SEND_OK

        async with PullConsumer("PullG", env.namesrv_addr) as puller:
            queues = await routed_queues(puller, TOPIC)
            pulled: list[MessageExt] = []
            for mq in queues:
                result = await puller.pull(mq, "A", 0, 32)
                assert result.status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG)
                pulled.extend(result.messages)
        assert sorted(m.body[:5] for m in pulled) == [b"\x00\x01\x02\x03\x04", b"hello"]
        hello = next(m for m in pulled if m.body == b"hello")
        assert hello.msg_id == first.msg_id
        assert hello.keys == "k1"
        assert hello.properties["u"] == "1"
        assert next(m for m in pulled if m is not hello).body == bytes(range(256)) * 40

        got: list[MessageExt] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            got.extend(msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        instance = fast_instance(env.namesrv_addr)
        async with instance:
            consumer = fast_push_consumer("CG", instance, listener)
            async with consumer:
                await wait_until(lambda: len(got) == 5, timeout=20, what="the five stored messages")
                async with Producer("PG2", instance=instance) as producer:
                    await producer.send(Message(TOPIC, b"live"))
                await wait_until(lambda: len(got) == 6, timeout=20, what="a message sent while consuming")
        assert sorted(m.body for m in got)[-2:] == [b"hello", b"live"]
        # the committed offsets cover everything consumed
        async with PullConsumer("CG", env.namesrv_addr) as reader:
            committed = 0
            for mq in await reader.fetch_subscribe_message_queues(TOPIC):
                committed += max(await reader.query_consumer_offset(mq), 0)
        assert committed == 6


async def test_orderly_and_broadcasting_on_the_real_broker(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        async with Producer("PG", env.namesrv_addr) as producer:

            def first_queue(mqs: list, msg: Message, arg: object) -> object:
                return mqs[0]

            for i in range(6):
                await producer.send(Message(TOPIC, b"%d" % i), selector=first_queue)  # type: ignore[arg-type]

        seen: list[bytes] = []

        async def orderly(msgs: list[MessageExt]) -> ConsumeStatus:
            seen.extend(m.body for m in msgs)
            return ConsumeStatus.SUCCESS

        instance = fast_instance(env.namesrv_addr)
        async with instance:
            consumer = PushConsumer(
                "OG",
                instance=instance,
                orderly=True,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                broker_suspend_max_time=1.0,
            )
            consumer.subscribe(TOPIC)
            consumer.register_listener(orderly)
            async with consumer:
                await wait_until(lambda: len(seen) == 6, timeout=20, what="orderly consumption")
        assert seen == [b"%d" % i for i in range(6)]

        a: list[bytes] = []
        b: list[bytes] = []

        def collect(into: list[bytes]):  # type: ignore[no-untyped-def]
            async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
                into.extend(m.body for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            return listener

        ia, ib = fast_instance(env.namesrv_addr), fast_instance(env.namesrv_addr)
        async with ia, ib:
            ca = PushConsumer(
                "BG", instance=ia, message_model=MessageModel.BROADCASTING, broker_suspend_max_time=1.0
            )
            cb = PushConsumer(
                "BG", instance=ib, message_model=MessageModel.BROADCASTING, broker_suspend_max_time=1.0
            )
            for c, into in ((ca, a), (cb, b)):
                c.subscribe(TOPIC)
                c.register_listener(collect(into))
            async with ca, cb:
                await wait_until(
                    lambda: bool(ca.assignment()) and bool(cb.assignment()), timeout=20, what="assignment"
                )
                async with Producer("PG3", instance=ia) as producer:
                    for i in range(4):
                        await producer.send(Message(TOPIC, b"bc%d" % i))
                await wait_until(
                    lambda: len(a) == 4 and len(b) == 4, timeout=20, what="both broadcast consumers"
                )
        # broadcasting starts at the max offset: the six earlier messages are not redelivered
        assert sorted(a) == sorted(b) == [b"bc0", b"bc1", b"bc2", b"bc3"]


async def test_the_push_consumer_follows_an_admin_reset_without_a_restart(tmp_path: Path) -> None:
    """rmq-admin resetOffsetByTime's request while the consumer runs: it consumes again from the
    reset point (PULL_OFFSET_MOVED on its next pull of each queue) and commits from there."""
    async with broker_env(tmp_path) as env:
        await send_bodies(env.namesrv_addr, [b"m%d" % i for i in range(6)])
        got, listener = collecting_listener()

        async with fast_instance(env.namesrv_addr) as instance:
            consumer = fast_push_consumer("ResetCG", instance, listener)
            async with consumer:
                await wait_until(lambda: len(got) == 6, timeout=20, what="the six messages")
                async with RemotingClient(name="reset-admin") as rc:
                    table = await MQAdmin(rc, env.namesrv_addr).reset_offset_by_timestamp(TOPIC, "ResetCG", 0)
                assert sum(table.values()) == 0
                await wait_until(lambda: len(got) == 12, timeout=20, what="the six messages again")
                await trio.sleep(0.5)  # nothing more comes
        assert sorted(got) == sorted([b"m%d" % i for i in range(6)] * 2)
        async with PullConsumer("ResetCG", env.namesrv_addr) as reader:
            committed = 0
            for mq in await reader.fetch_subscribe_message_queues(TOPIC):
                committed += max(await reader.query_consumer_offset(mq), 0)
        assert committed == 6


async def test_messages_in_flight_at_a_reset_do_not_move_the_offset_past_it(tmp_path: Path) -> None:
    """A reset to an earlier point while the listener still works on messages after it: when
    those calls end, the consumer's offset must stay at the reset (it moved back past it, so a
    restart would have skipped the messages being consumed again)."""
    async with broker_env(tmp_path) as env:
        async with Producer("PG", env.namesrv_addr) as producer:
            for i in range(6):
                await producer.send(Message(TOPIC, b"m%d" % i))
        first_pass, second_pass = trio.Event(), trio.Event()
        calls: list[bytes] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            again = any(m.body in calls for m in msgs)
            calls.extend(m.body for m in msgs)
            await (second_pass if again else first_pass).wait()
            return ConsumeStatus.CONSUME_SUCCESS

        async with fast_instance(env.namesrv_addr) as instance:
            consumer = fast_push_consumer("InFlightCG", instance, listener)
            async with consumer:
                await wait_until(lambda: len(calls) == 6, timeout=20, what="six calls in flight")
                async with RemotingClient(name="reset-admin") as rc:
                    reset = await MQAdmin(rc, env.namesrv_addr).reset_offset_by_timestamp(
                        TOPIC, "InFlightCG", 0
                    )
                await wait_until(lambda: len(calls) == 12, timeout=20, what="the six again, in flight too")
                first_pass.set()  # the calls from before the reset end
                await trio.sleep(0.5)
                mine = [mq for mq in reset if consumer.offset_store.read_memory(mq) >= 0]
                assert mine, "no queue of the reset is the consumer's"
                assert {mq: consumer.offset_store.read_memory(mq) for mq in mine} == {mq: 0 for mq in mine}
                second_pass.set()
                await wait_until(
                    lambda: sum(max(consumer.offset_store.read_memory(mq), 0) for mq in reset) == 6,
                    timeout=20,
                    what="offsets after the second pass",
                )
        assert sorted(calls) == sorted([b"m%d" % i for i in range(6)] * 2)


async def test_the_push_consumer_applies_a_reset_its_broker_leaves_to_the_clients(tmp_path: Path) -> None:
    """RESET_CONSUMER_CLIENT_OFFSET, what a broker with useServerSideResetOffset=false (every
    RocketMQ 4.x broker) sends to the group's clients for mqadmin resetOffsetByTime; sent here
    over the broker's real connection to the client."""
    async with broker_env(tmp_path) as env:
        await send_bodies(env.namesrv_addr, [b"m%d" % i for i in range(6)])
        got, listener = collecting_listener()

        async with (
            fast_instance(env.namesrv_addr) as instance,
            fast_push_consumer("ClientSideResetCG", instance, listener) as consumer,
        ):
            await wait_until(lambda: len(got) == 6, timeout=20, what="the six messages")
            queues = [mq for mq in consumer.running_info().mqTable if mq.topic == TOPIC]
            assert queues
            body = ResetOffsetBody(offsetTable=dict.fromkeys(queues, 0)).encode()
            fields = {"topic": TOPIC, "group": "ClientSideResetCG", "timestamp": "0", "isForce": "true"}
            info = env.broker.consumers.get("ClientSideResetCG")
            assert info is not None
            for channel in info.channels.values():
                await channel.connection.oneway(
                    RemotingCommand(
                        code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=fields, body=body
                    )
                )
            await wait_until(lambda: len(got) == 12, timeout=20, what="the six messages again")
        assert sorted(got) == sorted([b"m%d" % i for i in range(6)] * 2)


async def test_a_broker_address_given_as_the_name_server_is_named_in_the_error(tmp_path: Path) -> None:
    """The broker answers a route query REQUEST_CODE_NOT_SUPPORTED: the send fails naming the
    address and asking whether it is a name server, not only "from name server"."""
    async with broker_env(tmp_path) as env, Producer("PG", env.addr) as producer:
        try:
            await producer.send(Message(TOPIC, b"x"))
        except MQClientError as e:
            text = str(e)
        else:
            raise AssertionError("a send through a broker's address as the name server succeeded")
    assert f"from name server {env.addr}" in text, text
    assert f"is {env.addr} a name server?" in text, text


async def test_clients_take_the_name_server_from_namesrv_addr_as_upstreams_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no address given: $NAMESRV_ADDR (upstream's ClientConfig default); neither: a clear error
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    with pytest.raises(MQClientError, match=r"or \$NAMESRV_ADDR"):
        Producer("PG_ENV")
    async with broker_env(tmp_path) as env:
        monkeypatch.setenv("NAMESRV_ADDR", env.namesrv_addr)
        async with Producer("PG_ENV") as producer:
            result = await producer.send(Message("EnvAddrTopic", b"via env"))
        assert result.send_status == SendStatus.SEND_OK
        async with PullConsumer("CG_ENV") as consumer:
            (mq,) = [q for q in await routed_queues(consumer, "EnvAddrTopic") if q == result.message_queue]
            pulled = await consumer.pull(mq, "*", 0, 32)
        assert [m.body for m in pulled.messages] == [b"via env"]
