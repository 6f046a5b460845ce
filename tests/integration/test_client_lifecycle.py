"""The client instance's background work lives in a task of its own: a client that is never shut
down does not break the trio run, and start/shutdown may be called from different tasks (real
sockets, the scripted fake name server and broker)."""

from __future__ import annotations

import pytest
import trio

from client.message import Message, SendStatus
from client.producer import Producer
from client.pull_consumer import PullConsumer
from remoting.codes import RequestCode
from tests.integration.client_fake_cluster import fake_cluster, wait_until

TOPIC = "TopicTest"


def test_an_error_before_shutdown_is_the_error_the_run_ends_with() -> None:
    """A test that fails between a client's start() and its shutdown(): the run ends with the
    test's own error (it ended with trio's 'Nursery stack corrupted' / 'internal error in Trio',
    the test's error lost)."""

    async def main() -> None:
        async with fake_cluster() as cluster:
            cluster.add_topic(TOPIC)
            producer = Producer("PG", cluster.namesrv_addr)
            await producer.start()
            consumer = PullConsumer("CG", cluster.namesrv_addr)
            await consumer.start()
            assert (await producer.send(Message(TOPIC, b"x"))).send_status is SendStatus.SEND_OK
        raise LookupError("the test's own failure")  # the clients still run

    with pytest.raises(LookupError, match="the test's own failure"):
        trio.run(main)


def test_a_run_that_ends_without_shutdown_stops_the_client() -> None:
    async def main() -> tuple[str, bool]:
        async with fake_cluster() as cluster:
            cluster.add_topic(TOPIC)
            producer = Producer("PG", cluster.namesrv_addr)
            await producer.start()
            await producer.send(Message(TOPIC, b"x"))
        return "done", producer.instance.running

    assert trio.run(main) == ("done", True)


async def test_start_and_shutdown_may_be_called_from_different_tasks() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        producer = Producer("PG", cluster.namesrv_addr)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer.start)  # a task that ends right after
        assert producer.instance.running
        assert (await producer.send(Message(TOPIC, b"y"))).send_status is SendStatus.SEND_OK

        async def stop() -> None:
            await producer.shutdown()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop)
        assert not producer.instance.running
        assert producer.instance.remoting is None
        await wait_until(lambda: broker.requests_with(RequestCode.UNREGISTER_CLIENT))
        assert broker.requests_with(RequestCode.UNREGISTER_CLIENT)[0]["producerGroup"] == "PG"


async def test_a_cancelled_start_leaves_nothing_running() -> None:
    async with fake_cluster() as cluster:
        producer = Producer("PG", cluster.namesrv_addr)
        with trio.CancelScope() as scope:
            scope.cancel()
            await producer.start()
        assert not producer.instance.running
        await producer.start()  # and it can start again
        assert producer.instance.running
        await producer.shutdown()
        assert not producer.instance.running
