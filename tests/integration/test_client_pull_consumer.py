"""The Python pull consumer against a scripted fake name server and brokers (real sockets)."""

from __future__ import annotations

import zlib

import pytest

from client.message import MQClientError, PullStatus
from client.pull_consumer import PullConsumer
from remoting.codes import RequestCode, ResponseCode
from remoting.protocol.broker import PullSysFlag
from remoting.protocol.common import MessageQueue
from tests.integration.client_fake_cluster import fake_cluster

TOPIC = "TopicTest"


def mq(q: int = 0, broker: str = "broker-a") -> MessageQueue:
    return MessageQueue(topic=TOPIC, brokerName=broker, queueId=q)


async def test_fetch_subscribe_queues_lists_readable_queues_sorted() -> None:
    async with fake_cluster("broker-a", "broker-b") as cluster:
        cluster.add_topic(TOPIC, ["broker-b", "broker-a"], queues=2)
        async with PullConsumer("CG", cluster.namesrv_addr) as consumer:
            mqs = await consumer.fetch_subscribe_message_queues(TOPIC)
            with pytest.raises(MQClientError) as info:
                await consumer.fetch_subscribe_message_queues("Unknown")
        assert mqs == [mq(0), mq(1), mq(0, "broker-b"), mq(1, "broker-b")]
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_pull_refilters_tags_and_reports_offsets() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        broker.put(TOPIC, 0, b"a1", {"TAGS": "TagA", "UNIQ_KEY": "ID1"})
        broker.put(TOPIC, 0, b"b1", {"TAGS": "TagB"})
        broker.put(TOPIC, 0, b"none", {})
        broker.put(TOPIC, 0, b"a2", {"TAGS": "TagA", "KEYS": "k"})
        async with PullConsumer("CG", cluster.namesrv_addr) as consumer:
            result = await consumer.pull(mq(), "TagA", 0, 32)
            everything = await consumer.pull(mq(), "*", 0, 32)
            none_left = await consumer.pull(mq(), "*", 4, 32)
            illegal = await consumer.pull(mq(), "*", 9, 32)
        assert result.status is PullStatus.FOUND
        assert [m.body for m in result.messages] == [b"a1", b"a2"]
        assert [m.queue_offset for m in result.messages] == [0, 3]
        assert result.next_begin_offset == 4
        assert result.min_offset == 0
        assert result.max_offset == 4
        first = result.messages[0]
        assert first.msg_id == "ID1"
        assert first.topic == TOPIC
        assert first.broker_name == "broker-a"
        assert first.properties["MAX_OFFSET"] == "4"
        assert result.messages[1].msg_id == result.messages[1].offset_msg_id
        assert len(everything.messages) == 4
        assert none_left.status is PullStatus.NO_NEW_MSG
        assert none_left.messages == []
        assert illegal.status is PullStatus.OFFSET_ILLEGAL
        assert illegal.next_begin_offset == 4
        (ext, *_) = broker.requests_with(RequestCode.PULL_MESSAGE)
        assert int(ext["sysFlag"]) == PullSysFlag.SUBSCRIPTION
        assert ext["subscription"] == "TagA"
        assert ext["consumerGroup"] == "CG"


async def test_pull_inflates_compressed_bodies() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        body = b"0123456789" * 1000
        cluster.brokers["broker-a"].put(TOPIC, 0, zlib.compress(body), {}, sys_flag=0x1 | 0x300)
        async with PullConsumer("CG", cluster.namesrv_addr) as consumer:
            result = await consumer.pull(mq(), "*", 0, 1)
        assert result.messages[0].body == body


async def test_suggested_broker_id_routes_the_next_pull_to_the_slave() -> None:
    async with fake_cluster(with_slave=True) as cluster:
        cluster.add_topic(TOPIC, queues=1)
        master, slave = cluster.brokers["broker-a"], cluster.slaves["broker-a"]
        master.put(TOPIC, 0, b"x", {})
        master.suggest_broker_id = 1
        slave.suggest_broker_id = 0
        async with PullConsumer("CG", cluster.namesrv_addr) as consumer:
            first = await consumer.pull(mq(), "*", 0, 1)
            second = await consumer.pull(mq(), "*", 0, 1)
            third = await consumer.pull(mq(), "*", 0, 1)
        assert first.suggest_which_broker_id == 1
        assert second.messages[0].body == b"x"
        assert len(master.requests_with(RequestCode.PULL_MESSAGE)) == 2  # first and third
        assert len(slave.requests_with(RequestCode.PULL_MESSAGE)) == 1
        assert third.status is PullStatus.FOUND


async def test_offset_queries_and_committed_offsets() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic(TOPIC, queues=1)
        broker = cluster.brokers["broker-a"]
        for i in range(3):
            broker.put(TOPIC, 0, b"%d" % i, {})
        async with PullConsumer("CG", cluster.namesrv_addr) as consumer:
            await consumer.fetch_subscribe_message_queues(TOPIC)
            assert await consumer.max_offset(mq()) == 3
            assert await consumer.min_offset(mq()) == 0
            assert await consumer.search_offset(mq(), 0) == 0
            assert await consumer.query_consumer_offset(mq()) == -1
            await consumer.update_consumer_offset(mq(), 2)
            assert await consumer.query_consumer_offset(mq()) == 2
        assert broker.offsets[("CG", TOPIC, 0)] == 2
        (unreg,) = broker.requests_with(RequestCode.UNREGISTER_CLIENT)
        assert unreg["consumerGroup"] == "CG"
