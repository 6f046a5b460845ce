"""The Python client and a broker that restarts on its address (real broker, name server, sockets).

A restarted broker knows no client until one heartbeats. The client heartbeats every 30 s by
default; upstream's Java client also heartbeats to a broker at once whenever it connects to it
(``onChannelActive``) and then rebalances, and so does ours (``ClientInstance.broker_connected``).
Here the periodic heartbeat is an hour away, so only that can make the broker hear the clients.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
)
from tests.integration.broker_env import wait_until
from tests.integration.replication_kit import Group, Running, replication_group

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
            assert await consumer_ids(servers, running.addr) == [], "a restarted broker knows no client"
            # the consumer's next pull reconnects; its heartbeat follows at once
            await wait_listed(consumer_ids, servers, running.addr, consuming.client_id, "the consumer")
            # and the rebalance asked for then (no periodic one within the test) keeps it pulling
            assert (await producer.send(Message(TOPIC, b"after"))).send_status is SendStatus.SEND_OK
            await wait_listed(producer_ids, servers, running.addr, producing.client_id, "the producer")
            await wait_until(lambda: b"after" in got, timeout=10, what="the message sent after the restart")
