"""rmq-admin ``queryCq`` (and the broker's QUERY_CONSUME_QUEUE), ``getConsumerConfig`` and
``allocateMQ`` against a real broker and name server."""

from __future__ import annotations

import json
import os

import click
import trio
from click.testing import CliRunner, Result

from client.admin_queue_cli import COMMANDS, SEPARATOR
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.protocol.broker import (
    ConsumerData,
    HeartbeatData,
    QueryConsumeQueueResponseBody,
    SubscriptionData,
    SubscriptionGroupConfig,
)
from remoting.protocol.message import StoredMessage
from tests.integration.broker_env import BROKER_NAME, CLUSTER, BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import describe, pull_all, send_text

TOPIC = "QueueCmdTopic"
GROUP = "QueueCmdGroup"
COMMAND = {c.name: c for c in COMMANDS}
#: Java ``String.hashCode()`` of the tags, what upstream stores as a unit's tags code
TAG_A_HASH, TAG_B_HASH = 2598919, 2598920


async def cli(name: str, *args: str) -> Result:
    """Run one of the commands in a worker thread (it starts its own trio loop)."""
    command: click.Command = COMMAND[name]
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(command, list(args)))


async def create_topic(env: BrokerEnv, topic: str = TOPIC, *, queues: int = 2) -> None:
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
    response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    await wait_until(lambda: topic in env.namesrv.routes.topicQueueTable, what=f"route of {topic}")


async def send_tagged(env: BrokerEnv) -> list[StoredMessage]:
    """Five messages in queue 0 (tags A, B, none, A, B), one in queue 1; queue 0's records."""
    for i, tag in enumerate(["TagA", "TagB", None, "TagA", "TagB"]):
        await send_text(env, TOPIC, f"m{i}", queue_id=0, **({"TAGS": tag} if tag else {}))
    await send_text(env, TOPIC, "other queue", queue_id=1, TAGS="TagA")
    stored = await pull_all(env, "QueueCmdReader", TOPIC, 0)
    assert [m.queue_offset for m in stored] == [0, 1, 2, 3, 4]
    return stored


def unit_line(m: StoredMessage, tags_code: int) -> str:
    return (
        f"ConsumeQueueData{{physicOffset={m.physical_offset}, physicSize={m.total_size}, "
        f"tagsCode={tags_code}, extendDataJson='null', bitMap='null', eval=false, msg='null'}}"
    )


def query(topic: str, queue_id: int, index: int, count: int, group: str | None = None) -> RemotingCommand:
    fields = {"topic": topic, "queueId": str(queue_id), "index": str(index), "count": str(count)}
    if group is not None:
        fields["consumerGroup"] = group
    return request(RequestCode.QUERY_CONSUME_QUEUE, fields)


async def test_query_cq_prints_the_units_of_the_sent_messages(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        stored = await send_tagged(env)
        codes = [TAG_A_HASH, TAG_B_HASH, 0, TAG_A_HASH, TAG_B_HASH]

        result = await cli("queryCq", "-n", env.namesrv_addr, "-t", TOPIC, "-q", "0", "-i", "1", "-c", "3")
        assert result.exit_code == 0, result.output
        expected = f"Queue data: \nmax: 5, min: 0\n{SEPARATOR}\n" + "".join(
            f"idx: {i}\n{unit_line(stored[i], codes[i])}\n{SEPARATOR}\n" for i in (1, 2, 3)
        )
        assert result.stdout == expected

        # -c defaults to 10: the queue's five units; -b names the broker
        result = await cli(
            "queryCq", "-n", env.namesrv_addr, "-b", env.addr, "-t", TOPIC, "-q", "0", "-i", "0"
        )
        assert result.exit_code == 0, result.output
        assert [line for line in result.stdout.splitlines() if line.startswith("idx: ")] == [
            f"idx: {i}" for i in range(5)
        ]
        assert unit_line(stored[4], TAG_B_HASH) in result.stdout.splitlines()

        # the body on the wire: upstream's field names
        response = await env.call(query(TOPIC, 1, 0, 10))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        raw = json.loads(response.body_bytes)
        assert raw["maxQueueIndex"] == 1
        assert raw["minQueueIndex"] == 0
        (unit,) = raw["queueData"]
        assert set(unit) == {"physicOffset", "physicSize", "tagsCode", "eval"}
        assert unit["tagsCode"] == TAG_A_HASH


async def test_query_cq_with_a_group_shows_its_subscription(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        await send_tagged(env)
        ns = env.namesrv_addr

        result = await cli("queryCq", "-n", ns, "-t", TOPIC, "-q", "0", "-i", "4", "-g", GROUP)
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"Filter data: \n{GROUP}@{TOPIC} is not online!\n{SEPARATOR}\n")

        sub = SubscriptionData(
            topic=TOPIC, subString="TagA", tagsSet=["TagA"], codeSet=[TAG_A_HASH], subVersion=7
        )
        data = HeartbeatData(
            clientID="127.0.0.1@queue-cmds",
            consumerDataSet=[ConsumerData(groupName=GROUP, subscriptionDataSet=[sub])],
        )
        response = await env.call(request(RequestCode.HEART_BEAT, body=data.encode()))
        assert response.code == ResponseCode.SUCCESS, describe(response)

        result = await cli("queryCq", "-n", ns, "-t", TOPIC, "-q", "0", "-i", "4", "-g", GROUP)
        assert result.exit_code == 0, result.output
        head, _, rest = result.stdout.partition(f"\n{SEPARATOR}\nFilter data: \nnull\n{SEPARATOR}\n")
        assert head.startswith("Subscription data: \n{\n\t")  # fastjson's pretty format
        assert '\t"subString":"TagA",' in head
        assert '\t"subVersion":7,' in head
        assert rest.startswith(f"Queue data: \nmax: 5, min: 0\n{SEPARATOR}\nidx: 4\n")

        body = QueryConsumeQueueResponseBody.decode((await env.call(query(TOPIC, 0, 0, 2, GROUP))).body_bytes)
        assert body.subscriptionData is not None
        assert body.subscriptionData.subString == "TagA"
        assert [u.tagsCode for u in body.queueData or []] == [TAG_A_HASH, TAG_B_HASH]


async def test_query_cq_refusals(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        await send_tagged(env)
        ns = env.namesrv_addr

        # an index past the queue's end: the broker's remark, exit status 1
        result = await cli("queryCq", "-n", ns, "-t", TOPIC, "-q", "0", "-i", "5")
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr.startswith("rmq-admin queryCq command failed: ")
        assert f"Index 5 of 0@{TOPIC} is not exist!" in result.stderr

        # a topic the name server does not know
        result = await cli("queryCq", "-n", ns, "-t", "NoSuchTopic", "-q", "0", "-i", "0")
        assert result.exit_code == 1
        assert "TOPIC_NOT_EXIST" in result.stderr
        assert "NoSuchTopic" in result.stderr

        # a topic the broker does not hold, asked of the broker directly
        result = await cli("queryCq", "-n", ns, "-b", env.addr, "-t", "NoSuchTopic", "-q", "0", "-i", "0")
        assert result.exit_code == 1
        assert "0@NoSuchTopic is not exist!" in result.stderr

        # the broker request itself: upstream's codes and remarks
        response = await env.call(query(TOPIC, 7, 0, 10))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == f"7@{TOPIC} is not exist!"
        response = await env.call(query(TOPIC, -1, 0, 10))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == f"-1@{TOPIC} is not exist!"
        for index in (5, -1):
            response = await env.call(query(TOPIC, 0, index, 10))
            assert response.code == ResponseCode.SUCCESS
            assert response.remark == f"Index {index} of 0@{TOPIC} is not exist!"
            assert not response.body
        response = await env.call(request(RequestCode.QUERY_CONSUME_QUEUE, {"topic": TOPIC, "queueId": "0"}))
        assert response.code != ResponseCode.SUCCESS
        assert "index" in (response.remark or "")
        # a count of zero: the range, no units
        response = await env.call(query(TOPIC, 0, 0, 0))
        body = QueryConsumeQueueResponseBody.decode(response.body_bytes)
        assert (body.maxQueueIndex, body.queueData) == (5, [])


def config_block(group: str, **values: str) -> list[str]:
    defaults = {
        "groupName": group,
        "consumeEnable": "true",
        "consumeFromMinEnable": "true",
        "consumeBroadcastEnable": "true",
        "consumeMessageOrderly": "false",
        "retryQueueNums": "1",
        "retryMaxTimes": "16",
        "groupRetryPolicy": "GroupRetryPolicy{type=CUSTOMIZED, exponentialRetryPolicy=null, customizedRetryPolicy=null}",
        "brokerId": "0",
        "whichBrokerWhenConsumeSlowly": "1",
        "notifyConsumerIdsChangedEnable": "true",
        "groupSysFlag": "0",
        "consumeTimeoutMinute": "15",
        "subscriptionDataSet": "",
        "attributes": "{}",
    }
    rule = "=" * 29
    return [f"{rule}{CLUSTER}:{BROKER_NAME}{rule}"] + [
        f"{k:<40}=  {values.get(k, v)}" for k, v in defaults.items()
    ]


async def test_get_consumer_config_prints_the_group_of_every_broker(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, autoCreateSubscriptionGroup=False) as env:
        config = SubscriptionGroupConfig(
            groupName=GROUP, consumeMessageOrderly=True, retryMaxTimes=5, consumeTimeoutMinute=3
        )
        response = await env.call(
            request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)

        result = await cli("getConsumerConfig", "-n", env.namesrv_addr, "-g", f" {GROUP} ")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == config_block(
            GROUP, consumeMessageOrderly="true", retryMaxTimes="5", consumeTimeoutMinute="3"
        )

        result = await cli("getConsumerConfig", "-n", env.namesrv_addr, "-g", "NoSuchGroup")
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr.startswith("rmq-admin getConsumerConfig command failed: ")
        assert "subscription group [NoSuchGroup] does not exist on any broker" in result.stderr


async def test_get_consumer_config_of_an_auto_created_group(tmp_path: os.PathLike[str]) -> None:
    # upstream's default: a broker creates a group it is asked about, with the default config
    async with broker_env(tmp_path) as env:
        result = await cli("getConsumerConfig", "-n", env.namesrv_addr, "-g", "NewGroup")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == config_block("NewGroup")


def mq_json(topic: str, *queue_ids: int) -> str:
    return ",".join(f'{{"brokerName":"{BROKER_NAME}","queueId":{q},"topic":"{topic}"}}' for q in queue_ids)


async def test_allocate_mq_splits_the_queues_as_the_averaging_strategy(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, "AllocTopic", queues=8)
        ns = env.namesrv_addr

        result = await cli("allocateMQ", "-n", ns, "-t", "AllocTopic", "-i", "c1,c2,c3")
        assert result.exit_code == 0, result.output
        t = "AllocTopic"
        assert result.stdout == (
            f'{{"result":{{"c1":[{mq_json(t, 0, 1, 2)}],"c2":[{mq_json(t, 3, 4, 5)}],"c3":[{mq_json(t, 6, 7)}]}}}}\n'
        )

        # consumers sort their ids: the allocation does not depend on the order given
        result = await cli("allocateMQ", "-n", ns, "-t", "AllocTopic", "-i", "c3,c1,c2")
        assert result.exit_code == 0, result.output
        shares = json.loads(result.stdout)["result"]
        assert list(shares) == ["c3", "c1", "c2"]
        assert [[q["queueId"] for q in shares[c]] for c in ("c1", "c2", "c3")] == [
            [0, 1, 2],
            [3, 4, 5],
            [6, 7],
        ]

        result = await cli("allocateMQ", "-n", ns, "-t", "NoSuchTopic", "-i", "c1")
        assert result.exit_code == 1
        assert result.stderr.startswith("rmq-admin allocateMQ command failed: ")
        assert "NoSuchTopic" in result.stderr
