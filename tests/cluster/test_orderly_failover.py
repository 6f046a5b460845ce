"""Ordered messages across a master failover, with the Python client (controller mode, real
processes): a producer pins each key to one queue (a selector) and sends on while the process
holding broker-a's master is SIGKILLed; an orderly push consumer of the topic gets every
acknowledged message, and each key's messages first arrive in send order (a redelivery after the
failover may repeat a tail, never jump back past what came before it)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
import trio

from bench.failover_kit import FailoverCluster, create_routed_topic, spread_specs, wait_settled
from client.admin_controller import ControllerAdmin
from client.instance import ClientInstance
from client.message import ConsumeStatus, Message, MessageExt, MQClientError, SendStatus
from client.producer import Producer
from client.push_consumer import PushConsumer
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from remoting.protocol.common import MessageQueue
from tests.cluster.harness import wait_until

pytestmark = pytest.mark.slow

TOPIC = "OrderlyFailoverTopic"
GROUPS = ("broker-a", "broker-b")
KEYS = 8
SEND_SECONDS = 10.0
KILL_AFTER = 3.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FailoverCluster]:
    c = FailoverCluster(tmp_path / "cluster", spread_specs(GROUPS), cluster="OrderlyFailover")
    try:
        yield c
    finally:
        c.close()


def by_key(queues: list[MessageQueue], _msg: Message, key: object) -> MessageQueue:
    """Key ``k`` always to the same queue of the topic (both groups' queues, in a fixed order)."""
    assert isinstance(key, int)
    return sorted(queues, key=lambda q: (q.brokerName, q.queueId))[key % len(queues)]


async def send_pinned_and_kill(
    producer: Producer, topic: str, keys: int, seconds: float, kill: Callable[[], None], kill_after: float
) -> tuple[dict[int, list[int]], int]:
    """Send ``<key>-<n>`` bodies, each key pinned to its queue (:func:`by_key`), round after round
    for ``seconds``; call ``kill`` ``kill_after`` seconds in. Returns each key's acknowledged
    ``n`` and the round at the kill."""
    acked: dict[int, list[int]] = {k: [] for k in range(keys)}
    t0 = time.monotonic()
    n = killed_at = 0
    while time.monotonic() - t0 < seconds:
        for key in acked:
            try:
                r = await producer.send(Message(topic, f"{key}-{n}".encode()), selector=by_key, arg=key)
            except (MQClientError, RemotingError):
                continue  # a pinned send to a dead master: not acknowledged
            if r.send_status == SendStatus.SEND_OK:
                acked[key].append(n)
        n += 1
        if not killed_at and time.monotonic() - t0 > kill_after:
            kill()
            killed_at = n
        await trio.sleep(0.02)
    return acked, killed_at


def first_deliveries(bodies: Iterable[str]) -> dict[int, list[int]]:
    """Each key's ``n`` in the order of their first delivery (a redelivered tail repeats)."""
    seen: dict[int, dict[int, None]] = defaultdict(dict)
    for body in bodies:
        key, n = body.split("-")
        seen[int(key)].setdefault(int(n))
    return {k: list(ns) for k, ns in seen.items()}


async def test_ordered_messages_keep_their_order_across_a_master_failover(cluster: FailoverCluster) -> None:
    bodies: list[str] = []

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        bodies.extend(m.body.decode() for m in msgs)
        return ConsumeStatus.SUCCESS

    with trio.fail_after(150):
        await cluster.start()
        async with RemotingClient(name="test.orderly-failover") as rc:
            admin = ControllerAdmin(rc, cluster.controllers, timeout=5.0)
            before = await wait_settled(admin, "broker-a", 2, 30)
            await wait_settled(admin, "broker-b", 2, 30)
            assert before.masterAddress is not None
            await create_routed_topic(rc, cluster, TOPIC, 4, GROUPS)
            consumer = PushConsumer(
                "CG_ORDERLY_FAILOVER",
                cluster.namesrvs,
                orderly=True,
                rebalance_interval=2,
                persist_offset_interval=1,
            )
            consumer.subscribe(TOPIC, "*")
            consumer.register_listener(listener)
            instance = ClientInstance(cluster.namesrvs, poll_name_server_interval=0.5)
            async with consumer, instance, Producer("PG_ORDERLY_FAILOVER", instance=instance) as producer:
                acked, killed_at = await send_pinned_and_kill(
                    producer,
                    TOPIC,
                    KEYS,
                    SEND_SECONDS,
                    cluster.procs[cluster.process_of(before.masterAddress)].kill_now,
                    KILL_AFTER,
                )

                async def all_received() -> bool:
                    got = first_deliveries(bodies)
                    return all(set(ns) <= set(got.get(k, ())) for k, ns in acked.items())

                await wait_until(all_received, 40, "every acknowledged message consumed")

    total = sum(map(len, acked.values()))
    assert total > KEYS * 100, f"only {total} sends acknowledged"
    # keys 0-3 go to broker-a's queues: they were acknowledged again by its new master
    after = [n for n in acked[0] if n > killed_at]
    assert len(after) > 50, f"key 0: {len(after)} sends acknowledged after the kill"
    for key, first in first_deliveries(bodies).items():
        assert first == sorted(first), f"key {key}: first deliveries out of send order: {first}"
        assert set(acked[key]) <= set(first)
