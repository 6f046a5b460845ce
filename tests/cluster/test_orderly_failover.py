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
from client.admin import MQAdmin
from client.admin_controller import ControllerAdmin
from client.instance import ClientInstance
from client.message import ConsumeStatus, Message, MessageExt, MQClientError, SendStatus
from client.producer import Producer
from client.push_consumer import PushConsumer
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from remoting.protocol.common import MessageQueue
from remoting.protocol.namesrv import NAMESPACE_ORDER_TOPIC_CONFIG
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


def pinned_queues(topic: str, queues_per_group: int) -> list[MessageQueue]:
    """Every queue of ``topic`` on :data:`GROUPS`, in a fixed order: key ``k`` goes to the ``k``-th
    (modulo), whatever the route lists at the moment. A selector that indexes the queues it is given
    (``queues[k % len(queues)]``) moves keys to other queues while a group has no master -- the
    producer lists only queues of brokers with a master, as upstream's do -- and a key then has
    messages in two queues, consumed side by side (seen: key 4 on broker-a's queue 0 for the 0.4 s
    both groups failed over, interleaved with its later messages on broker-b's)."""
    return [
        MessageQueue(topic=topic, brokerName=b, queueId=q)
        for b in sorted(GROUPS)
        for q in range(queues_per_group)
    ]


Selector = Callable[[list[MessageQueue], Message, object], MessageQueue]


def pin(pinned: list[MessageQueue]) -> Selector:
    """A selector sending key ``k`` to ``pinned[k % len(pinned)]``; a send to a queue whose broker has
    no master fails (not acknowledged) instead of going elsewhere."""

    def select(_queues: list[MessageQueue], _msg: Message, key: object) -> MessageQueue:
        assert isinstance(key, int)
        return pinned[key % len(pinned)]

    return select


def by_index(queues: list[MessageQueue], _msg: Message, key: object) -> MessageQueue:
    """The usual selector of upstream's examples: an index into the queues the producer lists. It
    keeps a key's queue across a failover only when the topic has an order conf (the name server's
    ORDER_TOPIC_CONFIG, ``updateTopic -o true``): the list is then every queue of it, master or not."""
    assert isinstance(key, int)
    return queues[key % len(queues)]


async def send_pinned_and_kill(
    producer: Producer,
    topic: str,
    queues_per_group: int,
    keys: int,
    seconds: float,
    kill: Callable[[], None],
    kill_after: float,
    selector: Selector | None = None,
) -> tuple[dict[int, list[int]], int]:
    """Send ``<key>-<n>`` bodies, each key pinned to its queue (:func:`pinned_queues`), round after
    round for ``seconds``; call ``kill`` ``kill_after`` seconds in. Returns each key's acknowledged
    ``n`` and the round at the kill. ``selector`` defaults to :func:`pin` on :func:`pinned_queues`."""
    if selector is None:
        selector = pin(pinned_queues(topic, queues_per_group))
    acked: dict[int, list[int]] = {k: [] for k in range(keys)}
    t0 = time.monotonic()
    n = killed_at = 0
    while time.monotonic() - t0 < seconds:
        for key in acked:
            try:
                r = await producer.send(Message(topic, f"{key}-{n}".encode()), selector=selector, arg=key)
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


@pytest.mark.parametrize("selection", ["pinned-queues", "order-conf"])
async def test_ordered_messages_keep_their_order_across_a_master_failover(
    cluster: FailoverCluster, selection: str
) -> None:
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
            selector = None
            if selection == "order-conf":
                # as on a running cluster: the name servers put order confs into routes from now on
                mq_admin = MQAdmin(rc, cluster.namesrvs)
                await mq_admin.update_namesrv_config({"orderMessageEnable": "true"})
                conf = ";".join(f"{g}:4" for g in GROUPS)
                await mq_admin.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, TOPIC, conf)
                selector = by_index
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
                if selection == "order-conf":
                    info = await instance.find_publish_info(TOPIC, 4)
                    assert info.order_topic, "the route carries no order conf"
                acked, killed_at = await send_pinned_and_kill(
                    producer,
                    TOPIC,
                    4,
                    KEYS,
                    SEND_SECONDS,
                    cluster.procs[cluster.process_of(before.masterAddress)].kill_now,
                    KILL_AFTER,
                    selector,
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
