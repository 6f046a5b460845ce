"""The Python producer against a scripted fake name server and brokers (real sockets)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from client.instance import ClientInstance
from client.message import Message, MQBrokerError, MQClientError, SendStatus
from client.producer import Producer
from remoting.codes import RequestCode, ResponseCode
from remoting.protocol.broker import HeartbeatData
from remoting.protocol.common import MessageQueue
from tests.cluster.harness import silent_peer
from tests.integration.client_fake_cluster import FakeBroker, FakeCluster, fake_cluster, wait_until

TOPIC = "TopicTest"


async def test_send_stores_message_with_properties_and_reports_ids() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            msg = Message(TOPIC, b"hello", tags="TagA", keys=["k1", "k2"], properties={"color": "red"})
            result = await producer.send(msg)
        assert result.send_status is SendStatus.SEND_OK
        stored = broker.messages(TOPIC)
        assert len(stored) == 1
        props = stored[0]["properties"]
        assert stored[0]["body"] == b"hello"
        assert props["TAGS"] == "TagA"
        assert props["KEYS"] == "k1 k2"
        assert props["color"] == "red"
        assert props["WAIT"] == "true"
        assert result.msg_id == props["UNIQ_KEY"] == msg.uniq_key
        assert len(result.msg_id) == 32
        assert result.offset_msg_id == stored[0]["m"].offset_msg_id
        assert result.message_queue == MessageQueue(
            topic=TOPIC, brokerName="broker-a", queueId=stored[0]["queue_id"]
        )
        assert result.queue_offset == 0
        # V2 header by default, with the TBW102 default topic
        (ext,) = broker.requests_with(RequestCode.SEND_MESSAGE_V2)
        assert ext["a"] == "PG"
        assert ext["b"] == TOPIC
        assert ext["c"] == "TBW102"


async def test_v1_header_when_configured() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        async with Producer("PG", cluster.namesrv_addr, use_v2_header=False) as producer:
            await producer.send(Message(TOPIC, b"x"))
        (ext,) = broker.requests_with(RequestCode.SEND_MESSAGE)
        assert ext["producerGroup"] == "PG"
        assert ext["topic"] == TOPIC
        assert ext["defaultTopic"] == "TBW102"


async def test_round_robin_covers_every_writable_queue_of_both_brokers() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC, queues=4)
        async with Producer("PG", cluster.namesrv_addr) as producer:
            results = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
        used = {r.message_queue for r in results}
        assert used == {
            MessageQueue(topic=TOPIC, brokerName=b, queueId=q)
            for b in ("broker-a", "broker-b")
            for q in range(4)
        }


async def test_retryable_code_is_retried_on_the_other_broker() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC)
        a, b = cluster.brokers["broker-a"], cluster.brokers["broker-b"]
        a.fail_sends = [ResponseCode.SYSTEM_BUSY] * 100
        async with Producer("PG", cluster.namesrv_addr) as producer:
            results = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
        assert all(r.message_queue.brokerName == "broker-b" for r in results)
        failed_ids = {
            ext["i"].split("UNIQ_KEY\x01")[1].split("\x02")[0]
            for ext in a.requests_with(RequestCode.SEND_MESSAGE_V2)
        }
        assert failed_ids, "round robin never chose broker-a"
        stored_ids = {m["properties"]["UNIQ_KEY"] for m in b.messages(TOPIC)}
        # the retried message kept its id (Java semantics) and was stored once, on broker-b
        assert failed_ids <= stored_ids
        assert len(stored_ids) == 8


async def test_non_retryable_code_raises_after_one_attempt() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC)
        for br in cluster.brokers.values():
            br.fail_sends = [ResponseCode.MESSAGE_ILLEGAL]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            with pytest.raises(MQBrokerError) as info:
                await producer.send(Message(TOPIC, b"x"))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert len(cluster.all_requests(RequestCode.SEND_MESSAGE_V2)) == 1


async def test_all_attempts_failing_raises_with_the_last_code() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        cluster.brokers["broker-a"].fail_sends = [ResponseCode.SYSTEM_ERROR] * 3
        async with Producer("PG", cluster.namesrv_addr, retry_times_when_send_failed=2) as producer:
            with pytest.raises(MQClientError) as info:
                await producer.send(Message(TOPIC, b"x"))
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        assert len(cluster.brokers["broker-a"].requests_with(RequestCode.SEND_MESSAGE_V2)) == 3


async def test_connection_refused_broker_is_skipped() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC)
        a = cluster.brokers["broker-a"]
        assert a.listener is not None
        await cluster.server.remove_listener(a.listener)
        async with Producer("PG", cluster.namesrv_addr) as producer:
            results = [await producer.send(Message(TOPIC, b"x")) for _ in range(6)]
        assert {r.message_queue.brokerName for r in results} == {"broker-b"}
        assert len(cluster.brokers["broker-b"].messages(TOPIC)) == 6


async def test_a_retry_after_the_route_lost_its_master_keeps_the_queues_it_had() -> None:
    # a failover in progress: the first attempt fails, and the route the client refreshed meanwhile
    # lists no master of the topic's only group, so no queue to write to; the retry went to the
    # empty list and the send died of a ZeroDivisionError (found by the consumer-group model, in a
    # consumer's send-back) -- now it tries the queues it had, and says their group has no master
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        a = cluster.brokers["broker-a"]
        a.fail_sends = [ResponseCode.SYSTEM_BUSY]
        a.gates[RequestCode.SEND_MESSAGE_V2] = gate = trio.Event()
        instance = ClientInstance(cluster.namesrv_addr, poll_name_server_interval=3600)
        async with instance, Producer("PG", instance=instance) as producer, trio.open_nursery() as nursery:
            outcome: list[BaseException] = []

            async def send() -> None:
                try:
                    await producer.send(Message(TOPIC, b"x"))
                except Exception as e:
                    outcome.append(e)

            nursery.start_soon(send)
            await wait_until(lambda: a.gated.get(RequestCode.SEND_MESSAGE_V2) == 1)
            route = cluster.routes[TOPIC]
            route.brokerDatas[0].brokerAddrs.pop(0)  # the master gone from the route
            await instance.update_route(TOPIC)
            assert not instance.publish[TOPIC].ok
            gate.set()
        assert len(outcome) == 1
        assert isinstance(outcome[0], MQClientError), repr(outcome[0])
        assert "broker-a does not exist or has no master" in str(outcome[0])
        assert len(a.requests_with(RequestCode.SEND_MESSAGE_V2)) == 1  # the retries found no master


async def test_unknown_topic_is_sent_through_the_tbw102_route() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("TBW102", queues=8, perm=7)
        broker = cluster.brokers["broker-a"]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            result = await producer.send(Message("BrandNewTopic", b"x"))
            queues = await producer.fetch_publish_message_queues("BrandNewTopic")
        assert result.send_status is SendStatus.SEND_OK
        assert broker.auto_created == ["BrandNewTopic"]
        assert cluster.route_requests[:2] == ["BrandNewTopic", "TBW102"]
        # producer's defaultTopicQueueNums (4) caps the TBW102 queue count
        assert [q.queueId for q in queues] == [0, 1, 2, 3]
        (ext,) = broker.requests_with(RequestCode.SEND_MESSAGE_V2)
        assert ext["b"] == "BrandNewTopic"
        assert ext["c"] == "TBW102"
        assert ext["d"] == "4"


async def test_no_route_at_all_raises_topic_not_exist() -> None:
    async with fake_cluster() as cluster:
        async with Producer("PG", cluster.namesrv_addr) as producer:
            with pytest.raises(MQClientError) as info:
                await producer.send(Message("Nowhere", b"x"))
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_batch_uses_code_320_and_keeps_each_message_id() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        msgs = [Message(TOPIC, f"m{i}".encode(), tags="T", keys=f"k{i}") for i in range(3)]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            result = await producer.send_batch(msgs)
        assert broker.codes().count(RequestCode.SEND_BATCH_MESSAGE) == 1
        stored = broker.messages(TOPIC)
        assert [m["body"] for m in stored] == [b"m0", b"m1", b"m2"]
        assert [m["properties"]["KEYS"] for m in stored] == ["k0", "k1", "k2"]
        assert result.msg_id.split(",") == [m["properties"]["UNIQ_KEY"] for m in stored]
        assert result.queue_offset == 0


async def test_batch_rejects_mixed_topics_and_delay() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        async with Producer("PG", cluster.namesrv_addr) as producer:
            with pytest.raises(MQClientError):
                await producer.send_batch([Message(TOPIC, b"a"), Message("Other", b"b")])
            with pytest.raises(MQClientError):
                await producer.send_batch([Message(TOPIC, b"a", delay_time_level=3)])
        assert not cluster.all_requests(RequestCode.SEND_BATCH_MESSAGE)


async def test_selector_pins_the_queue_and_does_not_retry() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC, queues=4)

        def by_arg(mqs: list[MessageQueue], msg: Message, arg: int) -> MessageQueue:
            return mqs[arg % len(mqs)]

        async with Producer("PG", cluster.namesrv_addr) as producer:
            results = [await producer.send(Message(TOPIC, b"x"), selector=by_arg, arg=5) for _ in range(3)]
            assert {r.message_queue for r in results} == {
                MessageQueue(topic=TOPIC, brokerName="broker-b", queueId=1)
            }
            cluster.brokers["broker-b"].fail_sends = [ResponseCode.SYSTEM_BUSY]
            with pytest.raises(MQBrokerError):
                await producer.send(Message(TOPIC, b"x"), selector=by_arg, arg=5)
        assert len(cluster.brokers["broker-b"].requests_with(RequestCode.SEND_MESSAGE_V2)) == 4
        assert not cluster.brokers["broker-a"].requests_with(RequestCode.SEND_MESSAGE_V2)


async def test_oneway_and_explicit_queue() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        mq = MessageQueue(topic=TOPIC, brokerName="broker-a", queueId=2)
        async with Producer("PG", cluster.namesrv_addr) as producer:
            await producer.send_oneway(Message(TOPIC, b"one"), queue=mq)
            result = await producer.send(Message(TOPIC, b"two"), queue=mq)
            await wait_until(lambda: len(broker.messages(TOPIC)) == 2)
        assert result.message_queue == mq
        assert [m["body"] for m in broker.messages(TOPIC, 2)] == [b"one", b"two"]


async def test_large_body_is_zlib_compressed_and_oversized_is_refused() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        body = bytes(range(256)) * 40  # 10 KiB
        async with Producer("PG", cluster.namesrv_addr, max_message_size=64 * 1024) as producer:
            await producer.send(Message(TOPIC, body))
            with pytest.raises(MQClientError) as info:
                await producer.send(Message(TOPIC, b"x" * (64 * 1024 + 1)))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
        (stored,) = broker.messages(TOPIC)
        assert stored["sys_flag"] & 0x1
        assert zlib.decompress(stored["body"]) == body
        assert len(broker.requests_with(RequestCode.SEND_MESSAGE_V2)) == 1


async def test_heartbeat_announces_group_and_shutdown_unregisters() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        async with Producer("PG", cluster.namesrv_addr) as producer:
            await producer.send(Message(TOPIC, b"x"))
            await wait_until(lambda: RequestCode.HEART_BEAT in broker.codes())
            client_id = producer.instance.client_id
        hb = HeartbeatData.decode(next(body for c, _, body in broker.requests if c == RequestCode.HEART_BEAT))
        assert hb.clientID == client_id
        assert [p.groupName for p in hb.producerDataSet] == ["PG"]
        (unreg,) = broker.requests_with(RequestCode.UNREGISTER_CLIENT)
        assert unreg["clientID"] == client_id
        assert unreg["producerGroup"] == "PG"


async def test_route_refresh_picks_up_a_new_broker() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC, ["broker-a"])
        instance = ClientInstance(cluster.namesrv_addr, poll_name_server_interval=0.05)
        async with instance, Producer("PG", instance=instance) as producer:
            await producer.send(Message(TOPIC, b"x"))
            cluster.add_topic(TOPIC, ["broker-a", "broker-b"])
            await wait_until(lambda: len(instance.publish[TOPIC].message_queues) == 8)
            results = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
        assert {r.message_queue.brokerName for r in results} == {"broker-a", "broker-b"}


async def test_64_concurrent_sends_share_one_connection_per_broker() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        broker = cluster.brokers["broker-a"]
        results = []
        async with Producer("PG", cluster.namesrv_addr) as producer:

            async def one(i: int) -> None:
                results.append(await producer.send(Message(TOPIC, b"%d" % i)))

            async with trio.open_nursery() as n:
                for i in range(64):
                    n.start_soon(one, i)
        assert len(results) == 64
        assert len({r.msg_id for r in results}) == 64
        assert len(broker.messages(TOPIC)) == 64
        assert cluster.route_requests.count(TOPIC) == 1


@asynccontextmanager
async def _sent_to_broker_a() -> AsyncIterator[tuple[FakeCluster, ClientInstance, Producer]]:
    """A fake cluster routing TOPIC to broker-a, and a producer (its client instance polling the
    routes hourly) that has sent there once: connected to broker-a's master."""
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        instance = ClientInstance(cluster.namesrv_addr, poll_name_server_interval=3600)
        async with instance, Producer("PG", instance=instance) as producer:
            await producer.send(Message(TOPIC, b"before"))
            yield cluster, instance, producer


async def _new_master_of_broker_a(cluster: FakeCluster) -> tuple[FakeBroker, int]:
    """Another broker-a master, routed; and how often TOPIC's route was asked for until then."""
    new = await cluster.add_broker("broker-a")
    cluster.add_topic(TOPIC)
    return new, cluster.route_requests.count(TOPIC)


async def test_a_broker_that_cannot_be_reached_has_the_routes_refreshed_at_once() -> None:
    # a controller-mode failover in small: broker-a's master process is gone (its port refuses
    # connections) and the name server routes broker-a to the new master in another process. The
    # client learns of it from the refused connection, not at its next poll (an hour away here;
    # upstream's clients wait up to 30 s, failing every send meanwhile)
    async with _sent_to_broker_a() as (cluster, instance, producer):
        old = cluster.brokers["broker-a"]
        # the client's own close: no connection of it ends under it (that alone has the routes
        # read again, see the next test), the next send finds the port refusing
        assert instance.remoting is not None
        await instance.remoting.close_connection(old.addr)
        await cluster.server.remove_listener(old.listener)
        new, requests_before = await _new_master_of_broker_a(cluster)
        with pytest.raises(MQClientError, match=r"Connection refused"):
            await producer.send(Message(TOPIC, b"lost"))  # every attempt to the old address
        with trio.fail_after(20):
            while True:
                try:
                    result = await producer.send(Message(TOPIC, b"after"))
                    break
                except MQClientError:
                    await trio.sleep(0.05)
        assert result.send_status is SendStatus.SEND_OK
        assert [m["body"] for m in new.messages(TOPIC)] == [b"after"]
        assert cluster.route_requests.count(TOPIC) > requests_before


async def test_a_connection_to_a_broker_that_ends_has_the_routes_refreshed_at_once() -> None:
    # the same failover, the name server routing the new master before the old one's connection
    # ends: the ended connection has the routes read again (a master the network lost ends so too,
    # when it acknowledges nothing for PEER_UNACKED_TIMEOUT), and the next send goes to the new
    # master -- no send has to fail first
    async with _sent_to_broker_a() as (cluster, _, producer):
        old = cluster.brokers["broker-a"]
        new, requests_before = await _new_master_of_broker_a(cluster)
        await cluster.server.remove_listener(old.listener)  # closes the client's connection
        with trio.fail_after(5):
            while cluster.route_requests.count(TOPIC) == requests_before:
                await trio.sleep(0.01)
        result = await producer.send(Message(TOPIC, b"after"))
        assert result.send_status is SendStatus.SEND_OK
        assert [m["body"] for m in new.messages(TOPIC)] == [b"after"]


async def test_a_name_server_that_does_not_answer_costs_a_route_query_the_hedge_not_the_timeout() -> None:
    # the first of two name servers takes connections and never answers (its host went dark): a
    # route query asks the second one too after NAMESRV_HEDGE_S, so the first send -- whose route
    # is looked up within its 3 s timeout -- succeeds (waiting out the call timeout on the silent
    # one used all of it), and the second name server is asked first from then on
    async with silent_peer() as (silent, accepted), fake_cluster() as cluster:
        cluster.add_topic(TOPIC)
        instance = ClientInstance(f"{silent};{cluster.namesrv_addr}")
        async with instance, Producer("PG", instance=instance, send_timeout=3.0) as producer:
            result = await producer.send(Message(TOPIC, b"x"))
            assert result.send_status is SendStatus.SEND_OK
            assert len(accepted) == 1
            assert instance.namesrv_addrs[instance._namesrv_index] == cluster.namesrv_addr
