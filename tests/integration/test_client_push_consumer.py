"""The Python push consumer against a scripted fake name server and brokers (real sockets).

Intervals are shortened through the constructors so every periodic behaviour shows up within
a second; every wait polls with a deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from client.consumer import ConsumerBrokerCalls
from client.instance import ClientInstance
from client.message import ConsumeStatus, Message, MessageExt
from client.offset_store import OffsetSerializeWrapper, RemoteOffsetStore
from client.producer import Producer
from client.push_consumer import PushConsumer
from remoting.codes import RequestCode
from remoting.protocol.broker import (
    ConsumeFromWhere,
    HeartbeatData,
    LockBatchRequestBody,
    MessageModel,
    PullSysFlag,
)
from remoting.protocol.common import MessageQueue
from tests.integration.client_fake_cluster import FakeCluster, fake_cluster, wait_until

TOPIC = "TopicTest"
GROUP = "CG"
RETRY = "%RETRY%CG"

FAST = {
    "rebalance_interval": 0.2,
    "persist_offset_interval": 0.1,
    "lock_interval": 0.2,
    "broker_suspend_max_time": 1.0,
    "consumer_timeout_when_suspend": 3.0,
    "pull_delay_on_exception": 0.1,
    "send_back_retry_delay": 0.1,
    "suspend_current_queue_time": 0.05,
}


@asynccontextmanager
async def running_consumer(
    cluster: FakeCluster,
    listener: Callable[[list[MessageExt]], Any],
    expression: str = "*",
    *,
    instance_name: str | None = None,
    **kwargs: Any,
) -> AsyncIterator[PushConsumer]:
    async with ClientInstance(
        cluster.namesrv_addr,
        heartbeat_interval=0.2,
        poll_name_server_interval=0.2,
        instance_name=instance_name,
    ) as instance:
        consumer = PushConsumer(GROUP, instance=instance, **{**FAST, **kwargs})
        consumer.subscribe(TOPIC, expression)
        consumer.register_listener(listener)
        async with consumer:
            yield consumer


class Collector:
    def __init__(self, status: ConsumeStatus = ConsumeStatus.CONSUME_SUCCESS) -> None:
        self.msgs: list[MessageExt] = []
        self.status = status

    async def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        self.msgs.extend(msgs)
        return self.status

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]


async def send_all(cluster: FakeCluster, bodies: list[bytes], **msg_kwargs: Any) -> None:
    async with Producer("PG", cluster.namesrv_addr) as producer:
        for b in bodies:
            await producer.send(Message(TOPIC, b, **msg_kwargs))


@pytest.mark.parametrize("request_kind", ["commit at stop", "periodic commit", "unlock"])
async def test_a_request_to_the_master_right_after_a_failover_reaches_the_new_master(
    request_kind: str,
) -> None:
    # broker-a fails over -- its old master's port refuses connections, the name server routes the
    # new master -- and the consumer calls the master before its route poll noticed: its offset
    # commits went to the old address and were lost, so the group consumed those messages again
    # (found by the consumer-group model's failover variant, a member stopping right after a
    # failover), and an orderly one's unlocks never reached the new master. A request that cannot
    # connect now reads the route again and goes to the new master.
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        async with ClientInstance(cluster.namesrv_addr, poll_name_server_interval=3600) as instance:
            await instance.update_route(TOPIC)
            store = RemoteOffsetStore(instance, GROUP)
            calls = ConsumerBrokerCalls(instance, GROUP)
            mqs = [MessageQueue(topic=TOPIC, brokerName="broker-a", queueId=q) for q in range(4)]
            for q, mq in enumerate(mqs):
                store.update(mq, 10 + q)
            assert await calls.lock("broker-a", mqs) == set(mqs)
            old = cluster.brokers["broker-a"]
            await cluster.server.remove_listener(old.listener)
            new = await cluster.add_broker("broker-a")
            cluster.add_topic(TOPIC)
            new.locks = dict(old.locks)  # as if the consumer had locked them there too
            if request_kind == "unlock":
                await calls.unlock("broker-a", mqs)
                assert not new.locks
            else:
                await store.persist_all(mqs, oneway=request_kind == "periodic commit")
                await wait_until(lambda: len(new.offsets) == 4)
                assert new.offsets == {(GROUP, TOPIC, q): 10 + q for q in range(4)}


async def test_an_offset_moved_while_the_route_lists_no_master_does_not_stop_the_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # found by the consumer-group model's failover variant: a pull answered PULL_OFFSET_MOVED while
    # the route listed no master of the queue's group (a failover going on); committing the moved
    # offset raised "the broker broker-a does not exist or has no master" out of the pull task, and
    # the consumer died. It is logged, and the consumer goes on once the group has a master again.
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        a = cluster.brokers["broker-a"]
        for q in range(4):
            a.offsets[(GROUP, TOPIC, q)] = 100  # beyond the empty queues' ends: the pulls move it
        a.gates[RequestCode.PULL_MESSAGE] = gate = trio.Event()
        got = Collector()
        async with running_consumer(cluster, got) as consumer:
            await wait_until(lambda: a.gated.get(RequestCode.PULL_MESSAGE, 0) >= 4)
            addrs = cluster.routes[TOPIC].brokerDatas[0].brokerAddrs
            master = addrs.pop(0)
            await consumer.instance.update_route(TOPIC)
            gate.set()
            await wait_until(lambda: "persisting offset 0 of" in caplog.text)
            addrs[0] = master
            await consumer.instance.update_route(TOPIC)
            async with Producer("PG", cluster.namesrv_addr) as producer:
                await producer.send(Message(TOPIC, b"after"))
            await wait_until(lambda: got.bodies() == [b"after"])


async def test_round_trip_delivers_matching_tags_with_properties() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        got = Collector()
        async with running_consumer(cluster, got, "TagA || TagC") as consumer:
            await wait_until(lambda: len(consumer.assignment()) == 5)  # 4 queues + the retry queue
            async with Producer("PG", cluster.namesrv_addr) as producer:
                for i in range(12):
                    tag = ("TagA", "TagB", "TagC")[i % 3]
                    await producer.send(
                        Message(TOPIC, b"%d" % i, tags=tag, keys=f"k{i}", properties={"p": str(i)})
                    )
            await wait_until(lambda: len(got.msgs) == 8)
            await trio.sleep(0.1)
        assert sorted(int(b) for b in got.bodies()) == [i for i in range(12) if i % 3 != 1]
        for m in got.msgs:
            i = int(m.body)
            assert m.topic == TOPIC
            assert m.tags in ("TagA", "TagC")
            assert m.keys == f"k{i}"
            assert m.properties["p"] == str(i)
            assert m.msg_id == m.properties["UNIQ_KEY"]
        hb = HeartbeatData.decode(next(body for c, _, body in broker.requests if c == RequestCode.HEART_BEAT))
        (cd,) = hb.consumerDataSet
        assert cd.groupName == GROUP
        assert cd.consumeType == "CONSUME_PASSIVELY"
        assert cd.messageModel == "CLUSTERING"
        subs = {s.topic: s for s in cd.subscriptionDataSet}
        assert subs[TOPIC].subString == "TagA || TagC"
        assert subs[TOPIC].tagsSet == ["TagA", "TagC"]
        assert subs[RETRY].subString == "*"
        assert RETRY in cluster.route_requests
        # shutdown: offsets committed for every queue, then unregister
        assert sum(broker.offsets[(GROUP, TOPIC, q)] for q in range(4)) == 12
        assert broker.codes()[-1] == RequestCode.UNREGISTER_CLIENT


async def test_long_poll_is_held_and_a_new_message_is_delivered_without_waiting_out_the_hold() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        got = Collector()
        async with running_consumer(
            cluster, got, broker_suspend_max_time=0.5, message_model=MessageModel.BROADCASTING
        ):
            await wait_until(lambda: broker.requests_with(RequestCode.PULL_MESSAGE))
            await trio.sleep(1.2)
            pulls = broker.requests_with(RequestCode.PULL_MESSAGE)
            # one pull held per 0.5 s, re-issued right after each answer: about 3, never a busy loop
            assert 2 <= len(pulls) <= 5
            for ext in pulls:
                assert int(ext["sysFlag"]) & (PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION) == 6
                assert ext["suspendTimeoutMillis"] == "500"
            sent_at = trio.current_time()
            broker.put(TOPIC, 0, b"late", {})
            await wait_until(lambda: got.bodies() == [b"late"])
            assert trio.current_time() - sent_at < 0.4


async def test_consume_from_where_and_committed_offsets() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=2)
        broker = cluster.brokers["broker-a"]
        for i in range(3):
            broker.put(TOPIC, 0, b"old%d" % i, {})
            broker.put(TOPIC, 1, b"old%d" % i, {})
        broker.offsets[(GROUP, TOPIC, 1)] = 2  # committed earlier: resume there
        got = Collector()
        async with running_consumer(cluster, got) as consumer:
            await wait_until(lambda: len(consumer.assignment()) == 2)
            broker.put(TOPIC, 0, b"new", {})
            await wait_until(lambda: len(got.msgs) == 2)
        # queue 0 had no committed offset: LAST_OFFSET skips what was there; queue 1 resumes at 2
        assert sorted(got.bodies()) == [b"new", b"old2"]
        assert [e["queueId"] for e in broker.requests_with(RequestCode.GET_MAX_OFFSET)] == ["0"]

    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        for i in range(3):
            broker.put(TOPIC, 0, b"old%d" % i, {})
        got = Collector()
        async with running_consumer(
            cluster, got, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        ):
            await wait_until(lambda: len(got.msgs) == 3)
        assert sorted(got.bodies()) == [b"old0", b"old1", b"old2"]


async def test_offsets_are_committed_every_interval() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        got = Collector()
        async with running_consumer(cluster, got, persist_offset_interval=0.1) as consumer:
            await wait_until(lambda: consumer.assignment())
            for i in range(5):
                broker.put(TOPIC, 0, b"%d" % i, {})
            await wait_until(lambda: len(got.msgs) == 5)
            updates_before = len(broker.requests_with(RequestCode.UPDATE_CONSUMER_OFFSET))
            await wait_until(
                lambda: any(
                    e["commitOffset"] == "5" and e["topic"] == TOPIC
                    for e in broker.requests_with(RequestCode.UPDATE_CONSUMER_OFFSET)
                )
            )
            # the periodic commit repeats for every assigned queue, changed or not
            await wait_until(
                lambda: len(broker.requests_with(RequestCode.UPDATE_CONSUMER_OFFSET)) >= updates_before + 3
            )
            # pulls after consumption carry the commit flag and the local offset
            await wait_until(
                lambda: any(
                    int(e["sysFlag"]) & PullSysFlag.COMMIT_OFFSET and e["commitOffset"] == "5"
                    for e in broker.requests_with(RequestCode.PULL_MESSAGE)
                )
            )
        assert broker.offsets[(GROUP, TOPIC, 0)] == 5


async def test_reconsume_later_sends_back_and_the_retry_copy_comes_back_with_its_topic() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        seen: list[MessageExt] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            seen.extend(msgs)
            return (
                ConsumeStatus.RECONSUME_LATER
                if msgs[0].reconsume_times == 0
                else ConsumeStatus.CONSUME_SUCCESS
            )

        async with running_consumer(cluster, listener) as consumer:
            await wait_until(lambda: len(consumer.assignment()) == 2)
            async with Producer("PG", cluster.namesrv_addr) as producer:
                result = await producer.send(Message(TOPIC, b"payload", tags="T"))
            await wait_until(lambda: len(seen) == 2)
            await wait_until(lambda: broker.offsets.get((GROUP, TOPIC, 0)) == 1)
        first, second = seen
        (back,) = broker.requests_with(RequestCode.CONSUMER_SEND_MSG_BACK)
        assert back["offset"] == str(first.commit_log_offset)
        assert back["delayLevel"] == "0"
        assert back["group"] == GROUP
        assert second.topic == TOPIC
        assert second.reconsume_times == 1
        assert second.msg_id == result.msg_id
        assert second.body == b"payload"
        assert broker.offsets[(GROUP, RETRY, 0)] == 1


async def test_failed_send_back_falls_back_to_sending_to_the_retry_topic() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        broker.fail_send_back = True
        seen: list[MessageExt] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            seen.extend(msgs)
            return ConsumeStatus.RECONSUME_LATER if len(seen) == 1 else ConsumeStatus.CONSUME_SUCCESS

        async with running_consumer(cluster, listener) as consumer:
            await wait_until(lambda: len(consumer.assignment()) == 2)
            broker.put(TOPIC, 0, b"payload", {"UNIQ_KEY": "U1"})
            await wait_until(lambda: len(seen) == 2)
        retried = broker.messages(RETRY)
        assert len(retried) == 1
        props = retried[0]["properties"]
        assert props["RETRY_TOPIC"] == TOPIC
        assert props["UNIQ_KEY"] == "U1"
        assert props["DELAY"] == "3"
        assert retried[0]["m"].reconsume_times == 1
        assert seen[1].topic == TOPIC
        assert seen[1].reconsume_times == 1
        assert seen[1].msg_id == "U1"


async def test_orderly_locks_each_queue_before_pulling_and_consumes_in_order() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=2)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        suspended = []
        seen: list[MessageExt] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            m = msgs[0]
            if m.body == b"q0-2" and not suspended:
                suspended.append(m.queue_offset)
                return ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            seen.extend(msgs)
            return ConsumeStatus.SUCCESS

        async with running_consumer(cluster, listener, orderly=True) as consumer:
            await wait_until(lambda: len(consumer.assignment()) == 3)
            for i in range(5):
                broker.put(TOPIC, 0, b"q0-%d" % i, {})
                broker.put(TOPIC, 1, b"q1-%d" % i, {})
            await wait_until(lambda: len(seen) == 10)
            client_id = consumer.instance.client_id
            await wait_until(lambda: len(broker.requests_with(RequestCode.LOCK_BATCH_MQ)) >= 4)  # renewals
        for q in (0, 1):
            assert [m.body for m in seen if m.queue_id == q] == [b"q%d-%d" % (q, i) for i in range(5)]
        assert suspended == [2]
        assert not broker.requests_with(RequestCode.CONSUMER_SEND_MSG_BACK)
        # every queue was locked (by this client) before its first pull
        locked: set[MessageQueue] = set()
        for code, ext, body in broker.requests:
            if code == RequestCode.LOCK_BATCH_MQ:
                req = LockBatchRequestBody.decode(body)
                assert req.clientId == client_id
                assert req.consumerGroup == GROUP
                locked.update(req.mqSet)
            elif code == RequestCode.PULL_MESSAGE:
                assert (
                    MessageQueue(topic=ext["topic"], brokerName="broker-a", queueId=int(ext["queueId"]))
                    in locked
                )
        assert RequestCode.UNLOCK_BATCH_MQ in broker.codes()
        assert broker.locks == {}
        assert broker.offsets[(GROUP, TOPIC, 0)] == 5
        assert broker.offsets[(GROUP, TOPIC, 1)] == 5


async def test_a_queue_taken_away_as_the_consumer_stops_is_still_committed_and_unlocked() -> None:
    """Orderly: a second consumer joins, the first one's rebalance takes two queues away and
    commits their offsets -- and the first one stops while that commit is in flight (the stop
    cancels the rebalance). The queues are still committed and unlocked: a lock left behind
    kept them from the rest of the group for the broker's 60 s (here: for good)."""
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=4)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        seen = Collector()
        slow = {"persist_offset_interval": 30.0, "rebalance_interval": 30.0}
        stop_a = trio.Event()
        a_gone = trio.Event()
        consumers: dict[str, PushConsumer] = {}

        async def first() -> None:
            async with running_consumer(cluster, seen, orderly=True, instance_name="A", **slow) as a:
                consumers["A"] = a
                await stop_a.wait()
            a_gone.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await wait_until(lambda: "A" in consumers and len(consumers["A"].assignment()) == 5)
            a = consumers["A"]
            for q in range(4):
                broker.put(TOPIC, q, b"q%d" % q, {})
            await wait_until(lambda: len(seen.msgs) == 4)
            await wait_until(
                lambda: all(a.offset_store.read_memory(mq) == 1 for mq in a.assignment() if mq.topic == TOPIC)
            )
            gate = broker.gates[RequestCode.UPDATE_CONSUMER_OFFSET] = trio.Event()
            async with running_consumer(cluster, Collector(), orderly=True, instance_name="B", **slow) as b:
                # A's rebalance has taken a queue away and is committing its offset
                await wait_until(lambda: broker.gated.get(RequestCode.UPDATE_CONSUMER_OFFSET, 0) >= 1)
                stop_a.set()
                await trio.sleep(0.2)  # A's stop cancels its rebalance meanwhile
                gate.set()
                with trio.fail_after(10):
                    await a_gone.wait()
                assert not [mq for mq, owner in broker.locks.items() if owner == a.instance.client_id]
                await wait_until(lambda: len([mq for mq in b.assignment() if mq.topic == TOPIC]) == 4)
        assert all(broker.offsets[(GROUP, TOPIC, q)] == 1 for q in range(4)), broker.offsets


async def test_a_lock_renewal_does_not_lock_again_a_queue_the_rebalance_took_away() -> None:
    """Orderly: a renewal of every lock is on its way when a second consumer joins and the
    rebalance hands two queues over (unlocking them). The renewal must not reach the broker after
    the unlock and lock them again for the consumer that no longer pulls them."""
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=4)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        async with running_consumer(
            cluster, Collector(), orderly=True, instance_name="A", rebalance_interval=30.0, lock_interval=0.1
        ) as a:
            await wait_until(lambda: len(a.assignment()) == 5)
            gate = broker.gates[RequestCode.LOCK_BATCH_MQ] = trio.Event()
            await wait_until(lambda: broker.gated.get(RequestCode.LOCK_BATCH_MQ, 0) >= 1)  # a renewal
            async with running_consumer(
                cluster, Collector(), orderly=True, instance_name="B", rebalance_interval=30.0
            ):
                await trio.sleep(0.3)  # B's heartbeat, A's rebalance
                gate.set()
                del broker.gates[RequestCode.LOCK_BATCH_MQ]
                await wait_until(lambda: len([mq for mq in a.assignment() if mq.topic == TOPIC]) == 2)
                await trio.sleep(0.3)  # more renewals
                stale = [
                    mq
                    for mq, owner in broker.locks.items()
                    if owner == a.instance.client_id and mq not in a.assignment()
                ]
                assert not stale, f"A holds locks of queues it gave away: {stale}"


async def test_a_relock_before_consuming_does_not_outlive_a_hand_over() -> None:
    """Orderly: a queue whose lock lapsed is locked again before its messages are consumed; that
    lock waits at the broker while a second consumer joins and the queue is handed over to it
    (and unlocked). The late lock must not stay with the consumer that gave the queue away."""
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        slow = {"rebalance_interval": 30.0, "lock_interval": 30.0}
        # "Z" sorts after "B": with two members, B gets the topic's only queue
        async with running_consumer(cluster, Collector(), orderly=True, instance_name="Z", **slow) as z:
            await wait_until(lambda: {mq.topic for mq in z.assignment()} == {TOPIC, RETRY})
            (qs,) = [qs for mq, qs in z._queues.items() if mq.topic == TOPIC]
            qs.pq.locked = False  # as if the lock had lapsed
            gate = broker.gates[RequestCode.LOCK_BATCH_MQ] = trio.Event()
            broker.put(TOPIC, 0, b"m0", {})
            await wait_until(lambda: broker.gated.get(RequestCode.LOCK_BATCH_MQ, 0) >= 1)  # Z's relock
            async with running_consumer(cluster, Collector(), orderly=True, instance_name="B", **slow):
                await wait_until(lambda: TOPIC not in [mq.topic for mq in z.assignment()])
                gate.set()
                del broker.gates[RequestCode.LOCK_BATCH_MQ]
                await trio.sleep(0.3)
                stale = [
                    mq
                    for mq, owner in broker.locks.items()
                    if owner == z.instance.client_id and mq.topic == TOPIC
                ]
                assert not stale, f"Z holds the lock of a queue it handed over: {stale}"


async def test_a_lock_granted_behind_a_stop_is_released() -> None:
    """Orderly: the consumer stops while its first lock request waits at the broker; the broker
    grants it afterwards. The lock is released before the consumer is gone (else the queue
    stays locked for the broker's 60 s)."""
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        gate = broker.gates[RequestCode.LOCK_BATCH_MQ] = trio.Event()
        stop = trio.Event()
        gone = trio.Event()
        client_ids: list[str] = []

        async def consumer() -> None:
            async with running_consumer(cluster, Collector(), orderly=True, instance_name="A") as a:
                client_ids.append(a.instance.client_id)
                await stop.wait()
            gone.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await wait_until(lambda: broker.gated.get(RequestCode.LOCK_BATCH_MQ, 0) >= 1)
            stop.set()
            await trio.sleep(0.2)  # the stop cancels the rebalance meanwhile
            gate.set()
            with trio.fail_after(10):
                await gone.wait()
        assert [o for o in broker.locks.values() if o in client_ids] == [], broker.locks


async def test_orderly_queue_locked_by_another_client_is_not_pulled() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        broker.locks[MessageQueue(topic=TOPIC, brokerName="broker-a", queueId=0)] = "someone-else"
        async with running_consumer(cluster, Collector(), orderly=True) as consumer:
            await wait_until(lambda: len(broker.requests_with(RequestCode.LOCK_BATCH_MQ)) >= 3)
            assert consumer.assignment() == []
        assert not broker.requests_with(RequestCode.PULL_MESSAGE)


async def test_broadcasting_keeps_offsets_locally_and_every_consumer_gets_everything(tmp_path: Any) -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=2)
        broker = cluster.brokers["broker-a"]
        broker.put(TOPIC, 0, b"before", {})
        a, b = Collector(), Collector()
        async with (
            running_consumer(
                cluster,
                a,
                message_model=MessageModel.BROADCASTING,
                offset_store_dir=str(tmp_path),
                instance_name="A",
            ) as ca,
            running_consumer(cluster, b, message_model=MessageModel.BROADCASTING, instance_name="B") as cb,
        ):
            await wait_until(lambda: len(ca.assignment()) == 2 and len(cb.assignment()) == 2)
            for i in range(4):
                broker.put(TOPIC, i % 2, b"m%d" % i, {})
            await wait_until(lambda: len(a.msgs) == 4 and len(b.msgs) == 4)
            path = ca.offset_store.path  # type: ignore[attr-defined]
        assert sorted(a.bodies()) == sorted(b.bodies()) == [b"m0", b"m1", b"m2", b"m3"]
        for code in (
            RequestCode.QUERY_CONSUMER_OFFSET,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        ):
            assert code not in broker.codes()
        assert path is not None
        stored = OffsetSerializeWrapper.decode(await trio.Path(path).read_bytes()).offsetTable
        assert stored == {
            MessageQueue(topic=TOPIC, brokerName="broker-a", queueId=q): 3 if q == 0 else 2 for q in (0, 1)
        }
        # restart A: it resumes from its file (nothing old redelivered) and gets new messages
        broker.put(TOPIC, 0, b"while-down", {})
        again = Collector()
        async with running_consumer(
            cluster,
            again,
            message_model=MessageModel.BROADCASTING,
            offset_store_dir=str(tmp_path),
            instance_name="A",
        ):
            await wait_until(lambda: len(again.msgs) == 1)
            broker.put(TOPIC, 1, b"after", {})
            await wait_until(lambda: len(again.msgs) == 2)
        assert again.bodies() == [b"while-down", b"after"]


async def test_second_consumer_joining_splits_the_queues() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=4)
        cluster.add_topic(RETRY, queues=1)
        broker = cluster.brokers["broker-a"]
        a, b = Collector(), Collector()
        async with running_consumer(cluster, a, rebalance_interval=30.0) as ca:
            await wait_until(lambda: len([q for q in ca.assignment() if q.topic == TOPIC]) == 4)
            async with running_consumer(cluster, b, rebalance_interval=30.0) as cb:
                # no periodic rebalance within the test: NOTIFY_CONSUMER_IDS_CHANGED drives it
                await wait_until(
                    lambda: (
                        len([q for q in ca.assignment() if q.topic == TOPIC]) == 2
                        and len([q for q in cb.assignment() if q.topic == TOPIC]) == 2
                    )
                )
                assert not set(ca.assignment()) & set(cb.assignment())
                for i in range(8):
                    broker.put(TOPIC, i % 4, b"%d" % i, {})
                await wait_until(lambda: len(a.msgs) + len(b.msgs) == 8)
                assert a.msgs
                assert b.msgs
            await wait_until(lambda: len([q for q in ca.assignment() if q.topic == TOPIC]) == 4)
        assert sorted(int(x) for x in a.bodies() + b.bodies()) == list(range(8))
