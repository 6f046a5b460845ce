"""The Python client and a broker that restarts on its address (real broker, name server, sockets).

A restarted broker knows no client until one heartbeats. The client heartbeats every 30 s by
default; upstream's Java client also heartbeats to a broker at once whenever it connects to it
(``onChannelActive``) and then rebalances, and so does ours (``ClientInstance.broker_connected``).
Here the periodic heartbeat is an hour away, so only that can make the broker hear the clients.

A restarted broker also holds no queue lock. An orderly member's own locks (30 s to live) would
let it go on consuming queues that another member, heard first, locked on the restarted broker;
its locks now end with its connection to the master (``PushConsumer.master_connection_lost``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from client.instance import ClientInstance
from client.message import ConsumeStatus, Message, MessageExt, SendStatus
from client.producer import Producer
from client.push_consumer import PushConsumer
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.protocol.broker import (
    ConsumeFromWhere,
    GetConsumerListByGroupResponseBody,
    ProducerConnection,
    SubscriptionGroupConfig,
)
from tests.integration.broker_env import wait_until
from tests.integration.replication_kit import Group, Running, replication_group
from tests.integration.test_consumer_group_model import by_key

TOPIC = "RestartTopic"
GROUP = "RestartGroup"
PRODUCER_GROUP = "RestartProducers"
NEVER = 3600.0  # the periodic heartbeat, out of the test's reach


async def consumer_ids(servers: Group, addr: str) -> list[str]:
    response = await servers.call(
        addr, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP})
    )
    if response.code != ResponseCode.SUCCESS:
        return []  # the broker knows no such group (yet)
    return GetConsumerListByGroupResponseBody.decode(response.body_bytes).consumerIdList


async def producer_ids(servers: Group, addr: str) -> list[str]:
    response = await servers.call(
        addr, request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": PRODUCER_GROUP})
    )
    if response.code != ResponseCode.SUCCESS:
        return []
    return sorted(c.clientId for c in ProducerConnection.decode(response.body_bytes).connectionSet)


Lister = Callable[[Group, str], Awaitable[list[str]]]


async def wait_listed(lister: Lister, servers: Group, addr: str, client_id: str, what: str) -> None:
    with trio.move_on_after(10):
        while True:
            if client_id in await lister(servers, addr):
                return
            await trio.sleep(0.02)
    raise AssertionError(f"the broker at {addr} never listed {what} {client_id}")


async def restart(servers: Group, running: Running, crash: bool) -> Running:
    port = int(running.addr.rsplit(":", 1)[1])
    await servers.stop(running, crash=crash)
    return await servers.start("broker", listenPort=port)


@pytest.mark.parametrize("crash", [False, True], ids=["stopped", "crashed"])
async def test_a_restarted_broker_hears_its_clients_when_they_reconnect(tmp_path: Path, crash: bool) -> None:
    got: list[bytes] = []

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async with replication_group(tmp_path) as servers:
        running = await servers.start("broker")
        await servers.create_topic(running.addr, TOPIC, 4)
        await wait_until(lambda: TOPIC in servers.namesrv.routes.topicQueueTable, what=f"a route of {TOPIC}")
        consuming = ClientInstance(
            servers.namesrv_addr, heartbeat_interval=NEVER, poll_name_server_interval=0.3
        )
        producing = ClientInstance(
            servers.namesrv_addr, heartbeat_interval=NEVER, poll_name_server_interval=0.3
        )
        consumer = PushConsumer(
            GROUP,
            instance=consuming,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            rebalance_interval=NEVER,
            broker_suspend_max_time=1.0,
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(listener)
        async with consuming, producing, consumer, Producer(PRODUCER_GROUP, instance=producing) as producer:
            assert (await producer.send(Message(TOPIC, b"before"))).send_status is SendStatus.SEND_OK
            await wait_until(lambda: got == [b"before"], timeout=10, what="the message sent before")
            await wait_listed(producer_ids, servers, running.addr, producing.client_id, "the producer")

            running = await restart(servers, running, crash)
            # the consumer's next pull (or offset commit) reconnects; its heartbeat follows at once
            await wait_listed(consumer_ids, servers, running.addr, consuming.client_id, "the consumer")
            # and the rebalance asked for then (no periodic one within the test) keeps it pulling
            assert (await producer.send(Message(TOPIC, b"after"))).send_status is SendStatus.SEND_OK
            await wait_listed(producer_ids, servers, running.addr, producing.client_id, "the producer")
            await wait_until(lambda: b"after" in got, timeout=10, what="the message sent after the restart")


def queues_of(consumer: PushConsumer) -> list[int]:
    """The ids of the queues of TOPIC that ``consumer`` pulls."""
    return sorted(mq.queueId for mq in consumer.assignment() if mq.topic == TOPIC)


@dataclass
class Consumption:
    """When each member consumed which queue: (member, queue id, start, end) of each listener call."""

    calls: list[tuple[str, int, float, float]] = field(default_factory=list)
    bodies: dict[str, set[bytes]] = field(default_factory=dict)

    def listener(self, member: str) -> Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]:
        self.bodies[member] = set()

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            start = trio.current_time()
            await trio.sleep(0.005)
            self.calls.append((member, msgs[0].queue_id, start, trio.current_time()))
            self.bodies[member].update(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        return listener

    def shared(self) -> list[str]:
        """Each time two members consumed one queue at once."""
        out = []
        for a in self.calls:
            for b in self.calls:
                if a[0] < b[0] and a[1] == b[1] and a[2] < b[3] and b[2] < a[3]:
                    out.append(
                        f"queue {a[1]}: {a[0]} at {a[2]:.3f}-{a[3]:.3f}, {b[0]} at {b[2]:.3f}-{b[3]:.3f}"
                    )
        return out


async def test_an_orderly_member_does_not_consume_a_queue_the_restarted_broker_locked_for_another(
    tmp_path: Path,
) -> None:
    """Two orderly members split four queues; the broker restarts (its lock table empty). Member a
    is back first: the broker lists only it, so it takes and locks all four queues. Member b comes
    back two seconds later still holding client-side locks on two of them (30 s to live), and with
    them it pulled and consumed those queues alongside a -- upstream's client does the same. The
    group's NOTIFY_CONSUMER_IDS_CHANGED is off and neither member rebalances by itself, so nothing
    else hands the queues back. b's locks now end with its connection to the master: it consumes
    those queues only once it has locked them again, here after a stops."""
    consumption = Consumption()
    async with replication_group(tmp_path) as servers:
        running = await servers.start("broker")
        await servers.create_topic(running.addr, TOPIC, 4)
        await wait_until(lambda: TOPIC in servers.namesrv.routes.topicQueueTable, what=f"a route of {TOPIC}")
        instances = {
            name: ClientInstance(
                servers.namesrv_addr, heartbeat_interval=NEVER, poll_name_server_interval=0.3
            )
            for name in ("a", "b", "producer")
        }
        consumers = {
            name: PushConsumer(
                GROUP,
                instance=instances[name],
                orderly=True,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                rebalance_interval=NEVER if name == "a" else 0.3,
                pull_delay_on_exception=0.1 if name == "a" else 2.0,
                # nothing else of b's reaches the broker before a is back (its pulls commit)
                persist_offset_interval=NEVER if name == "b" else 5.0,
                broker_suspend_max_time=0.5,
            )
            for name in ("a", "b")
        }
        for name, consumer in consumers.items():
            consumer.subscribe(TOPIC, "*")
            consumer.register_listener(consumption.listener(name))
        serial = 0

        async def send(n: int) -> None:
            nonlocal serial
            for _ in range(n):
                serial += 1
                result = await producer.send(Message(TOPIC, b"m%d" % serial), selector=by_key, arg=serial)
                assert result.send_status is SendStatus.SEND_OK

        def consumed() -> set[bytes]:
            return set().union(*consumption.bodies.values())

        a, b = consumers["a"], consumers["b"]
        async with (
            instances["producer"],
            instances["a"],
            instances["b"],
            Producer(PRODUCER_GROUP, instance=instances["producer"]) as producer,
        ):
            await a.start()
            try:
                await wait_until(lambda: queues_of(a) == [0, 1, 2, 3], timeout=10, what="a's four queues")
                async with b:
                    # b joins: the broker tells a, which hands two queues over; b takes them
                    await wait_until(lambda: len(queues_of(b)) == 2, timeout=10, what="b's two queues")
                    b.rebalance_interval = NEVER  # from its next round on
                    await send(8)
                    await wait_until(lambda: len(consumed()) == 8, timeout=10, what="the first messages")
                    assert {c[0] for c in consumption.calls} == {"a", "b"}
                    config = SubscriptionGroupConfig(groupName=GROUP, notifyConsumerIdsChangedEnable=False)
                    response = await servers.call(
                        running.addr,
                        request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode()),
                    )
                    assert response.code == ResponseCode.SUCCESS, response.remark

                    running = await restart(servers, running, crash=False)
                    restarted_at = serial
                    await instances["a"].send_heartbeat_to_all()  # a is heard first, b 2 s later
                    await wait_until(
                        lambda: queues_of(a) == [0, 1, 2, 3], timeout=10, what="a taking every queue"
                    )
                    with trio.fail_after(10):  # until b is back in the group: a second or so
                        while instances["b"].client_id not in await consumer_ids(servers, running.addr):
                            await send(4)
                            await trio.sleep(0.05)
                    # both members running for b's next pull retry (2 s after its last) and more
                    with trio.move_on_after(2.5):
                        while True:
                            await send(4)
                            await trio.sleep(0.05)
                    await wait_until(lambda: len(consumed()) == serial, timeout=10, what="everything sent")
                    assert consumption.shared() == [], "two members consumed one queue at once"
                    after = {b"m%d" % i for i in range(restarted_at + 1, serial + 1)}
                    assert not after & consumption.bodies["b"], "b consumed queues a had locked"
                    # a leaves, unlocking its queues: b locks its two again and goes on with them
                    await a.shutdown()
                    sent = serial
                    await send(8)
                    theirs = {b"m%d" % i for i in range(sent + 1, serial + 1) if i % 4 in queues_of(b)}
                    await wait_until(
                        lambda: theirs <= consumption.bodies["b"],
                        timeout=10,
                        what="b consuming its queues again",
                    )
            finally:
                await a.shutdown()
