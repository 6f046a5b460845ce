"""Ordered messages across a master failover, with the Python client (controller mode, real
processes): a producer pins each key to one queue (a selector) and sends on while the process
holding broker-a's master is SIGKILLed; an orderly push consumer of the topic gets every
acknowledged message, and each key's messages first arrive in send order (a redelivery after the
failover may repeat a tail, never jump back past what came before it)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bench.failover_kit import FailoverCluster, ProcSpec, create_topic, route_master, wait_settled
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
    specs = [
        ProcSpec("c0", namesrv=True, controller=True),
        ProcSpec("p1", groups=GROUPS),
        ProcSpec("p2", groups=GROUPS),
    ]
    c = FailoverCluster(tmp_path / "cluster", specs, cluster="OrderlyFailover")
    try:
        yield c
    finally:
        c.close()


def by_key(queues: list[MessageQueue], _msg: Message, key: object) -> MessageQueue:
    """Key ``k`` always to the same queue of the topic (both groups' queues, in a fixed order)."""
    assert isinstance(key, int)
    return sorted(queues, key=lambda q: (q.brokerName, q.queueId))[key % len(queues)]


async def test_ordered_messages_keep_their_order_across_a_master_failover(cluster: FailoverCluster) -> None:
    acked: dict[int, list[int]] = defaultdict(list)
    got: dict[int, list[int]] = defaultdict(list)

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            key, n = m.body.decode().split("-")
            got[int(key)].append(int(n))
        return ConsumeStatus.SUCCESS

    with trio.fail_after(150):
        await cluster.start()
        async with RemotingClient(name="test.orderly-failover") as rc:
            admin = ControllerAdmin(rc, cluster.controllers, timeout=5.0)
            before = await wait_settled(admin, "broker-a", 2, 30)
            await wait_settled(admin, "broker-b", 2, 30)
            assert before.masterAddress is not None
            addrs = [a for g in GROUPS for a in cluster.replica_addrs(g)]
            await create_topic(rc, addrs, TOPIC, 4)
            for g in GROUPS:

                async def routed(g: str = g) -> bool:
                    return await route_master(rc, cluster.namesrvs, TOPIC, g) is not None

                await wait_until(routed, 10, f"the route of {TOPIC} with {g}")

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
                t0 = time.monotonic()
                n = 0
                killed = False
                killed_at = -1
                while time.monotonic() - t0 < SEND_SECONDS:
                    for key in range(KEYS):
                        try:
                            r = await producer.send(
                                Message(TOPIC, f"{key}-{n}".encode()), selector=by_key, arg=key
                            )
                        except (MQClientError, RemotingError):
                            continue  # a pinned send to the dead master: not acknowledged
                        if r.send_status == SendStatus.SEND_OK:
                            acked[key].append(n)
                    n += 1
                    if not killed and time.monotonic() - t0 > KILL_AFTER:
                        cluster.procs[cluster.process_of(before.masterAddress)].kill_now()
                        killed = True
                        killed_at = n
                    await trio.sleep(0.02)

                async def all_received() -> bool:
                    return all(set(acked[k]) <= set(got[k]) for k in range(KEYS))

                await wait_until(all_received, 40, "every acknowledged message consumed")

    total = sum(map(len, acked.values()))
    assert total > KEYS * 100, f"only {total} sends acknowledged"
    # keys 0-3 go to broker-a's queues: they were acknowledged again by its new master
    after = [n for n in acked[0] if n > killed_at]
    assert len(after) > 50, f"key 0: {len(after)} sends acknowledged after the kill"
    for key in range(KEYS):
        first: list[int] = []
        seen: set[int] = set()
        for x in got[key]:
            if x not in seen:
                seen.add(x)
                first.append(x)
        assert first == sorted(first), f"key {key}: first deliveries out of send order: {first}"
        assert set(acked[key]) <= seen
