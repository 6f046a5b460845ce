"""The blocking facade, driven from plain (non-async) test code against the fake cluster.

The fake cluster itself runs in its own :class:`BlockingLoop`, so these tests are ordinary
synchronous functions, exactly like the code the facade is for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from client.blocking import BlockingLoop, BlockingProducer, BlockingPullConsumer, BlockingPushConsumer
from client.message import ConsumeStatus, Message, MessageExt, MQClientError, PullStatus, SendStatus
from remoting.protocol.broker import ConsumeFromWhere
from tests.integration.client_fake_cluster import FakeCluster, fake_cluster

TOPIC = "TopicTest"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    infra = BlockingLoop(name="fake-cluster")
    hosted = infra.enter(fake_cluster())
    fake: FakeCluster = hosted.value

    async def setup() -> None:
        fake.add_topic(TOPIC, queues=2)
        fake.add_topic("%RETRY%CG", queues=1)

    infra.run(setup)
    try:
        yield fake
    finally:
        infra.exit(hosted)
        infra.close()


def poll(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.01)


def test_blocking_producer_and_pull_consumer(cluster: FakeCluster) -> None:
    with BlockingProducer("PG", cluster.namesrv_addr) as producer:
        result = producer.send(Message(TOPIC, b"one", tags="A"))
        batch = producer.send_batch([Message(TOPIC, b"two"), Message(TOPIC, b"three")])
        producer.send_oneway(Message(TOPIC, b"four"), queue=result.message_queue)
        queues = producer.fetch_publish_message_queues(TOPIC)
    assert result.send_status is SendStatus.SEND_OK
    assert len(batch.msg_id.split(",")) == 2
    assert len(queues) == 2
    with pytest.raises(MQClientError):
        producer.send(Message(TOPIC, b"after shutdown"))

    with BlockingPullConsumer("CG", cluster.namesrv_addr) as consumer:
        bodies: list[bytes] = []
        poll(lambda: sum(len(b.messages(TOPIC)) for b in cluster.brokers.values()) == 4)
        for mq in consumer.fetch_subscribe_message_queues(TOPIC):
            res = consumer.pull(mq, "*", 0, 32)
            assert res.status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG)
            bodies.extend(m.body for m in res.messages)
            consumer.update_consumer_offset(mq, res.next_begin_offset)
            assert consumer.query_consumer_offset(mq) == res.next_begin_offset
            assert consumer.max_offset(mq) == res.next_begin_offset
    assert sorted(bodies) == [b"four", b"one", b"three", b"two"]


def test_blocking_push_consumer_runs_the_listener_in_a_worker_thread(cluster: FakeCluster) -> None:
    got: list[MessageExt] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        time.sleep(0.01)  # blocking work is fine here
        with lock:
            got.extend(msgs)
            threads.add(threading.current_thread().name)
        return ConsumeStatus.CONSUME_SUCCESS

    loop = BlockingLoop()
    try:
        consumer = BlockingPushConsumer(
            "CG",
            cluster.namesrv_addr,
            loop=loop,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        consumer.subscribe(TOPIC, "A || B")
        consumer.register_listener(listener)
        with consumer, BlockingProducer("PG", cluster.namesrv_addr, loop=loop) as producer:
            for i in range(10):
                producer.send(Message(TOPIC, b"%d" % i, tags="AB"[i % 2] if i < 8 else "C"))
            poll(lambda: len(got) == 8)
            assert len(consumer.assignment()) == 3
        assert loop.alive  # a shared loop outlives the clients
    finally:
        loop.close()
    assert sorted(int(m.body) for m in got) == list(range(8))
    assert threading.main_thread().name not in threads
    assert not any(t == "rmq-client-loop" for t in threads)


def test_calls_from_the_loop_thread_are_refused() -> None:
    loop = BlockingLoop()
    try:
        result: list[Any] = []

        async def inside() -> None:
            try:
                loop.run(inside)
            except MQClientError as e:
                result.append(e)

        loop.run(inside)
        assert len(result) == 1
    finally:
        loop.close()
    assert not loop.alive
