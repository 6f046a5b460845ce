"""Broker admin requests over real sockets (remoting-protocol.md §2.10, §4.4, §4.10, §4.11) and the
broker commands of ``rmq-admin`` against that broker."""

from __future__ import annotations

import os

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.headers import encode_header
from remoting.protocol.broker import (
    ConsumerData,
    ConsumerOffsetWrapper,
    ConsumeStats,
    CreateTopicRequestHeader,
    DelayOffsetWrapper,
    HeartbeatData,
    SendMessageRequestHeader,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicStatsTable,
)
from remoting.protocol.common import (
    DataVersion,
    GroupList,
    KVTable,
    MessageQueue,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicList,
)
from tests.integration.broker_env import BROKER_NAME, CLUSTER, BrokerEnv, broker_env, wait_until

TOPIC = "AdminTopic"
GROUP = "AdminGroup"


async def create_topic(env: BrokerEnv, topic: str = TOPIC, queues: int = 4, **kw: object) -> RemotingCommand:
    header = CreateTopicRequestHeader(topic=topic, readQueueNums=queues, writeQueueNums=queues, **kw)  # type: ignore[arg-type]
    return await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(encode_header(header))))


async def get_topic(env: BrokerEnv, topic: str = TOPIC) -> RemotingCommand:
    return await env.call(request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic}))


async def send(env: BrokerEnv, topic: str, queue_id: int, count: int) -> None:
    for i in range(count):
        header = SendMessageRequestHeader(
            producerGroup="PG", topic=topic, queueId=queue_id, bornTimestamp=1, properties="TAGS\x01a\x02"
        )
        cmd = request(RequestCode.SEND_MESSAGE, dict(encode_header(header)), body=f"m{i}".encode())
        response = await env.call(cmd)
        assert response.code == ResponseCode.SUCCESS, response.remark


async def commit_offset(env: BrokerEnv, topic: str, queue_id: int, offset: int, group: str = GROUP) -> None:
    fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}
    response = await env.call(request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    assert response.code == ResponseCode.SUCCESS, response.remark


async def heartbeat(env: BrokerEnv, group: str = GROUP, topic: str = TOPIC) -> None:
    data = HeartbeatData(
        clientID="127.0.0.1@admin-test",
        consumerDataSet=[
            ConsumerData(
                groupName=group,
                consumeType="CONSUME_PASSIVELY",
                messageModel="CLUSTERING",
                subscriptionDataSet=[SubscriptionData(topic=topic)],
            )
        ],
    )
    response = await env.call(request(RequestCode.HEART_BEAT, body=data.encode()))
    assert response.code == ResponseCode.SUCCESS, response.remark


def routed(env: BrokerEnv, topic: str) -> bool:
    return topic in env.namesrv.routes.topicQueueTable


# --- topics ----------------------------------------------------------------------------------------


async def test_create_get_update_topic_and_register_it(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        response = await create_topic(env, queues=4, order=True, attributes="+message.type=FIFO")
        assert response.code == ResponseCode.SUCCESS, response.remark
        got = await get_topic(env)
        assert got.code == ResponseCode.SUCCESS
        config = TopicConfig.decode(got.body_bytes)
        assert (config.readQueueNums, config.writeQueueNums, config.perm, config.order) == (4, 4, 6, True)
        assert config.attributes == {"message.type": "FIFO"}
        await wait_until(lambda: routed(env, TOPIC), what="route of the new topic")

        # an update keeps attributes not mentioned, changes the rest
        response = await create_topic(env, queues=8, perm=4)
        assert response.code == ResponseCode.SUCCESS, response.remark
        config = TopicConfig.decode((await get_topic(env)).body_bytes)
        assert (config.readQueueNums, config.perm, config.attributes) == (8, 4, {"message.type": "FIFO"})
        await wait_until(
            lambda: env.namesrv.routes.topicQueueTable[TOPIC][BROKER_NAME].readQueueNums == 8,
            what="re-registration",
        )

        everything = await env.call(request(RequestCode.GET_ALL_TOPIC_CONFIG))
        assert everything.code == ResponseCode.SUCCESS
        wrapper = TopicConfigAndMappingSerializeWrapper.decode(everything.body_bytes)
        assert wrapper.topicConfigTable[TOPIC].readQueueNums == 8
        assert "TBW102" in wrapper.topicConfigTable
        assert everything.ext_fields == {"totalTopicNum": str(len(wrapper.topicConfigTable))}


async def test_create_topic_refuses_bad_input_with_readable_remarks(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        bad = await create_topic(env, "bad topic!")
        assert bad.code == ResponseCode.INVALID_PARAMETER
        assert bad.remark == (
            "The specified topic[bad topic!] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
        long = await create_topic(env, "T" * 128)
        assert long.code == ResponseCode.INVALID_PARAMETER
        assert "longer than topic max length 127" in (long.remark or "")
        system = await create_topic(env, "SCHEDULE_TOPIC_XXXX")
        assert system.code == ResponseCode.INVALID_PARAMETER
        assert system.remark == "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic."
        perm = await create_topic(env, perm=9)
        assert perm.code == ResponseCode.INVALID_PARAMETER
        assert "perm[9]" in (perm.remark or "")
        negative = await create_topic(env, queues=-1)
        assert negative.code == ResponseCode.INVALID_PARAMETER
        mixed = await create_topic(env, attributes="+message.type=MIXED")
        assert (mixed.code, mixed.remark) == (
            ResponseCode.INVALID_PARAMETER,
            "MIXED message type is not supported.",
        )
        unknown = await create_topic(env, attributes="+colour=blue")
        assert (unknown.code, unknown.remark) == (ResponseCode.SYSTEM_ERROR, "unsupported key: colour")
        missing = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"readQueueNums": "1"}))
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert "topic" in (missing.remark or "")
        # none of them exists now
        assert (await get_topic(env)).code == ResponseCode.TOPIC_NOT_EXIST
        # an attribute fixed at creation cannot be changed later
        assert (await create_topic(env, attributes="+queue.type=SimpleCQ")).code == ResponseCode.SUCCESS
        fixed = await create_topic(env, attributes="+queue.type=BatchCQ")
        assert fixed.code == ResponseCode.SYSTEM_ERROR
        assert fixed.remark == "attempt to update an unchangeable attribute. key: queue.type"


async def test_unknown_topic_is_topic_not_exist(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        got = await get_topic(env, "Nope")
        assert (got.code, got.remark) == (
            ResponseCode.TOPIC_NOT_EXIST,
            "No topic in this broker. topic: Nope",
        )
        stats = await env.call(request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"}))
        assert (stats.code, stats.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")


async def test_topic_stats_after_sends_are_object_keyed(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        assert (await create_topic(env, queues=2)).code == ResponseCode.SUCCESS
        await send(env, TOPIC, 1, 3)
        response = await env.call(request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}))
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.body_bytes.startswith(b'{"offsetTable":{{"brokerName":"broker-a"')
        table = TopicStatsTable.decode(response.body_bytes).offsetTable
        q0 = table[MessageQueue(topic=TOPIC, brokerName=BROKER_NAME, queueId=0)]
        q1 = table[MessageQueue(topic=TOPIC, brokerName=BROKER_NAME, queueId=1)]
        assert (q0.minOffset, q0.maxOffset, q0.lastUpdateTimestamp) == (0, 0, 0)
        assert (q1.minOffset, q1.maxOffset) == (0, 3)
        assert abs(q1.lastUpdateTimestamp - env.broker.now_ms()) < 60_000
        assert len(table) == 2


async def test_delete_topic_drops_config_queues_and_offsets(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        assert (await create_topic(env, queues=2)).code == ResponseCode.SUCCESS
        await send(env, TOPIC, 0, 2)
        await commit_offset(env, TOPIC, 0, 1)
        cq_dir = trio.Path(tmp_path, "store", "consumequeue", TOPIC)
        assert await cq_dir.is_dir()

        refused = await env.call(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}))
        assert refused.code == ResponseCode.INVALID_PARAMETER
        response = await env.call(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC}))
        assert response.code == ResponseCode.SUCCESS, response.remark

        assert (await get_topic(env)).code == ResponseCode.TOPIC_NOT_EXIST
        assert not await cq_dir.exists()
        offsets = await env.call(request(RequestCode.GET_ALL_CONSUMER_OFFSET))
        assert f"{TOPIC}@{GROUP}" not in ConsumerOffsetWrapper.decode(offsets.body_bytes).offsetTable
        # re-created, the topic starts empty
        assert (await create_topic(env, queues=2)).code == ResponseCode.SUCCESS
        max_offset = await env.call(request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0}))
        assert max_offset.ext_fields == {"offset": "0"}


async def test_system_topic_list(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        response = await env.call(request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))
        topics = TopicList.decode(response.body_bytes).topicList
        assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "SELF_TEST_TOPIC"} <= set(topics)
        assert {"RMQ_SYS_TRACE_TOPIC", "CHECKPOINT_TOPIC"} <= set(topics)  # upstream's fixed set
        # and the ones the broker made for itself, as upstream's TopicConfigManager adds them
        assert {CLUSTER, BROKER_NAME, f"{CLUSTER}_REPLY_TOPIC", f"rmq_sys_REVIVE_LOG_{CLUSTER}"} <= set(
            topics
        )
        assert TOPIC not in topics
        # they are system topics for the admin requests too
        response = await env.call(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": BROKER_NAME}))
        assert response.code == ResponseCode.INVALID_PARAMETER, response.remark
        assert response.remark == f"The topic[{BROKER_NAME}] is conflict with system topic."


# --- subscription groups, offsets, stats -------------------------------------------------------------


async def test_subscription_group_crud(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        config = SubscriptionGroupConfig(groupName=GROUP, retryQueueNums=3, consumeBroadcastEnable=False)
        response = await env.call(
            request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
        got = await env.call(request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": GROUP}))
        assert SubscriptionGroupConfig.decode(got.body_bytes) == config

        everything = await env.call(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        wrapper = SubscriptionGroupWrapper.decode(everything.body_bytes)
        assert wrapper.subscriptionGroupTable[GROUP] == config
        assert "TOOLS_CONSUMER" in wrapper.subscriptionGroupTable
        assert everything.ext_fields == {"totalGroupNum": str(len(wrapper.subscriptionGroupTable))}

        # the retry topic a consumer heartbeat creates follows the group's retryQueueNums
        await heartbeat(env)
        retry = TopicConfig.decode((await get_topic(env, f"%RETRY%{GROUP}")).body_bytes)
        assert retry.readQueueNums == 3

        await commit_offset(env, f"%RETRY%{GROUP}", 0, 0)
        delete = request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": GROUP, "cleanOffset": True})
        assert (await env.call(delete)).code == ResponseCode.SUCCESS
        everything = await env.call(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        assert GROUP not in SubscriptionGroupWrapper.decode(everything.body_bytes).subscriptionGroupTable
        offsets = await env.call(request(RequestCode.GET_ALL_CONSUMER_OFFSET))
        assert not any(
            k.endswith("@" + GROUP) for k in ConsumerOffsetWrapper.decode(offsets.body_bytes).offsetTable
        )

        bad = SubscriptionGroupConfig(groupName="bad group")
        response = await env.call(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=bad.encode()))
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert "illegal characters" in (response.remark or "")


async def test_unknown_group_config_without_auto_create(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, autoCreateSubscriptionGroup=False) as env:
        got = await env.call(request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "G404"}))
        assert (got.code, got.remark) == (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            "No group in this broker",
        )


async def test_consume_stats_and_who_consumes(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        assert (await create_topic(env, queues=2)).code == ResponseCode.SUCCESS
        await send(env, TOPIC, 0, 3)
        await heartbeat(env)
        await commit_offset(env, TOPIC, 0, 2)
        await commit_offset(env, TOPIC, 1, 0, group="OffsetOnlyGroup")

        response = await env.call(request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP}))
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.body_bytes.startswith(b'{"consumeTps":0.0,"offsetTable":{{"brokerName"')
        table = ConsumeStats.decode(response.body_bytes).offsetTable
        q0 = table[MessageQueue(topic=TOPIC, brokerName=BROKER_NAME, queueId=0)]
        assert (q0.brokerOffset, q0.consumerOffset, q0.pullOffset) == (3, 2, 2)
        assert q0.lastTimestamp > 0
        q1 = table[MessageQueue(topic=TOPIC, brokerName=BROKER_NAME, queueId=1)]
        assert (q1.brokerOffset, q1.consumerOffset, q1.lastTimestamp) == (0, 0, 0)
        assert {mq.topic for mq in table} == {TOPIC}

        # an explicit topic list needs no subscription
        fields = {"consumerGroup": "OffsetOnlyGroup", "topicList": f"{TOPIC};"}
        listed = await env.call(request(RequestCode.GET_CONSUME_STATS, fields))
        assert len(ConsumeStats.decode(listed.body_bytes).offsetTable) == 2

        who = await env.call(request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}))
        assert GroupList.decode(who.body_bytes).groupList == [GROUP, "OffsetOnlyGroup"]

        offsets = await env.call(request(RequestCode.GET_ALL_CONSUMER_OFFSET))
        assert ConsumerOffsetWrapper.decode(offsets.body_bytes).offsetTable[f"{TOPIC}@{GROUP}"] == {0: 2}
        delay = await env.call(request(RequestCode.GET_ALL_DELAY_OFFSET))
        assert delay.code == ResponseCode.SUCCESS
        assert DelayOffsetWrapper.decode(delay.body_bytes).offsetTable == {}


# --- broker runtime info and config -------------------------------------------------------------------

RUNTIME_KEYS = {
    "brokerVersionDesc",
    "brokerVersion",
    "msgPutTotalTodayNow",
    "msgGetTotalTodayNow",
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
    "putTps",
    "getFoundTps",
    "getMissTps",
    "getTotalTps",
    "getTransferredTps",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "commitLogDiskRatio",
    "consumeQueueDiskRatio",
    "bootTimestamp",
    "runtime",
    "earliestMessageTimeStamp",
    "dispatchBehindBytes",
    "pageCacheLockTimeMills",
    "sendThreadPoolQueueSize",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueSize",
    "pullThreadPoolQueueCapacity",
    "brokerActive",
    "putMessageSizeTotal",
    "putMessageAverageSize",
    "putMessageFailedTimes",
    "putMessageEntireTimeMax",
    "getMessageEntireTimeMax",
    "putMessageDistributeTime",
    "putLatency99",
    "putLatency999",
    "remainHowManyDataToCommit",
    "dispatchMaxBuffer",
}


async def test_runtime_info_has_upstream_keys_and_counts_puts(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        assert (await create_topic(env, queues=1)).code == ResponseCode.SUCCESS
        await send(env, TOPIC, 0, 3)
        response = await env.call(request(RequestCode.GET_BROKER_RUNTIME_INFO))
        assert response.code == ResponseCode.SUCCESS
        table = KVTable.decode(response.body_bytes).table
        assert set(table) >= RUNTIME_KEYS
        assert table["brokerVersionDesc"] == "V5_3_3"
        assert table["msgPutTotalTodayNow"] == "3"
        # the three records are all the commit log holds
        assert table["putMessageSizeTotal"] == table["commitLogMaxOffset"]
        assert float(table["putMessageAverageSize"]) == int(table["commitLogMaxOffset"]) / 3
        assert table["putMessageFailedTimes"] == "0"
        assert int(table["putMessageEntireTimeMax"]) >= 0  # three sends timed (in whole ms)
        assert table["putMessageDistributeTime"].startswith("[<=0ms]:0 ")  # the minute is not over
        assert int(table["commitLogMaxOffset"]) > 0
        assert table["commitLogMinOffset"] == "0"
        assert 0 < float(table["commitLogDiskRatio"]) < 1
        assert abs(int(table["earliestMessageTimeStamp"]) - env.broker.now_ms()) < 60_000
        assert table["runtime"].startswith("[ 0 days, 0 hours, ")
        # the rates: the broker samples its counters once a second (upstream's three windows of
        # 10, 60 and 600 samples need that long to fill; tests/unit/test_broker_runtime_rates.py)
        await wait_until(lambda: env.broker.stats.sample_count >= 2, timeout=5, what="two rate samples")
        table = KVTable.decode(
            (await env.call(request(RequestCode.GET_BROKER_RUNTIME_INFO))).body_bytes
        ).table
        assert table["putTps"] == "  "  # not yet 11 samples: every window empty, as upstream
        assert table["getTotalTps"] == "0.0 0.0 0.0"


async def test_broker_config_get_and_update(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        got = await env.call(request(RequestCode.GET_BROKER_CONFIG))
        assert got.code == ResponseCode.SUCCESS
        props = dict(line.split("=", 1) for line in got.body_bytes.decode().splitlines())
        assert props["brokerName"] == BROKER_NAME
        assert props["autoCreateSubscriptionGroup"] == "true"
        assert props["mappedFileSizeCommitLog"] == str(1024 * 1024)
        assert props["brokerRole"] == "ASYNC_MASTER"
        version = DataVersion.decode(got.ext_fields["version"])

        body = b"# from a test\nautoCreateSubscriptionGroup = false\nflushConsumerOffsetInterval:2000\n"
        response = await env.call(request(RequestCode.UPDATE_BROKER_CONFIG, body=body))
        assert response.code == ResponseCode.SUCCESS, response.remark
        got = await env.call(request(RequestCode.GET_BROKER_CONFIG))
        props = dict(line.split("=", 1) for line in got.body_bytes.decode().splitlines())
        assert props["autoCreateSubscriptionGroup"] == "false"
        assert props["flushConsumerOffsetInterval"] == "2000"
        assert DataVersion.decode(got.ext_fields["version"]).counter == version.counter + 1
        # the change is live: an unknown group is no longer auto-created
        missing = await env.call(request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "NewGroup"}))
        assert missing.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


async def test_update_broker_config_refuses_black_listed_unknown_and_start_up_keys(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:

        async def update(text: str) -> RemotingCommand:
            return await env.call(request(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()))

        for black in (
            "rocketmqHome=/tmp",
            "brokerConfigPath=/tmp/x",
            "configBlackList=",
            "brokerConfigPaths=a",
        ):
            response = await update(f"defaultTopicQueueNums=3\n{black}\n")
            assert (response.code, response.remark) == (
                ResponseCode.NO_PERMISSION,
                "Can not update config in black list.",
            ), black
        unknown = await update("defaultTopicQueueNums=3\nnoSuchKey=1\nalsoMissing=2\n")
        assert unknown.code == ResponseCode.INVALID_PARAMETER
        assert unknown.remark == "unknown broker config keys: alsoMissing, noSuchKey"
        start_up = await update("listenPort=1234\n")
        assert start_up.code == ResponseCode.NO_PERMISSION
        assert "listenPort" in (start_up.remark or "")
        bad_value = await update("defaultTopicQueueNums=many\n")
        assert bad_value.code == ResponseCode.INVALID_PARAMETER
        assert "defaultTopicQueueNums" in (bad_value.remark or "")
        acl = await update("defaultTopicQueueNums=3\naclEnable=true\n")  # would serve unchecked
        assert acl.code == ResponseCode.INVALID_PARAMETER
        assert "aclEnable=true is not supported" in (acl.remark or "")
        assert (await update("aclEnable=false\n")).code == ResponseCode.SUCCESS
        # nothing of the refused updates was applied
        got = await env.call(request(RequestCode.GET_BROKER_CONFIG))
        assert "defaultTopicQueueNums=8\n" in got.body_bytes.decode()
        # keys upstream has but we ignore are accepted
        assert (await update("sendMessageThreadPoolNums=4\n")).code == ResponseCode.SUCCESS


async def test_update_broker_config_size_limits_are_live_and_store_built_keys_refused(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path, mappedFileSizeCommitLog=8 * 1024 * 1024) as env:

        async def update(text: str) -> RemotingCommand:
            return await env.call(request(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()))

        async def send_body(size: int) -> RemotingCommand:
            header = SendMessageRequestHeader(producerGroup="PG", topic=TOPIC, queueId=0, bornTimestamp=1)
            return await env.call(request(RequestCode.SEND_MESSAGE, dict(encode_header(header)), b"x" * size))

        assert (await create_topic(env, queues=1)).code == ResponseCode.SUCCESS
        big = 5 * 1024 * 1024  # over the default maxMessageSize (4 MiB)
        refused = await send_body(big)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark
        assert (await update(f"maxMessageSize={6 * 1024 * 1024}\n")).code == ResponseCode.SUCCESS
        # the store takes the new limit too (it kept a copy: the record was refused there before)
        stored = await send_body(big)
        assert stored.code == ResponseCode.SUCCESS, stored.remark
        assert (await update("maxMessageSize=1024\n")).code == ResponseCode.SUCCESS
        assert (await send_body(2048)).code == ResponseCode.MESSAGE_ILLEGAL

        # keys the store is built from: refused, not shown as changed while the broker ignores them
        for key, value in (
            ("flushDiskType", "SYNC_FLUSH"),
            ("messageIndexEnable", "false"),
            ("messageDelayLevel", "1s 2s"),
        ):
            response = await update(f"{key}={value}\n")
            assert response.code == ResponseCode.NO_PERMISSION, key
            assert f"config keys {key} take effect only at start-up" in (response.remark or "")
        got = await env.call(request(RequestCode.GET_BROKER_CONFIG))
        assert "flushDiskType=ASYNC_FLUSH\n" in got.body_bytes.decode()

        # a loop's period of 0 (a loop without a pause: a core at 100 %) or below: refused
        for key, value in (("flushConsumerOffsetInterval", 0), ("flushIntervalCommitLog", -5)):
            response = await update(f"{key}={value}\n")
            assert response.code == ResponseCode.INVALID_PARAMETER, key
            assert f"bad value {value} for config key {key}: the period of a loop" in (response.remark or "")
        assert (await update("flushConsumerOffsetInterval=2000\n")).code == ResponseCode.SUCCESS
        got = await env.call(request(RequestCode.GET_BROKER_CONFIG))
        assert "flushConsumerOffsetInterval=2000\n" in got.body_bytes.decode()
        assert "flushIntervalCommitLog=500\n" in got.body_bytes.decode()


# --- rmq-admin ------------------------------------------------------------------------------------------


async def cli(*args: str) -> Result:
    """Run rmq-admin in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def test_cli_update_topic_to_broker_and_cluster(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        result = await cli(
            "updateTopic", "-n", env.namesrv_addr, "-b", env.addr, "-t", "CliT1", "-r", "2", "-w", "2"
        )
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == [
            f"create topic to {env.addr} success.",
            "TopicConfig [topicName=CliT1, readQueueNums=2, writeQueueNums=2, perm=RW-, "
            "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={}]",
        ]
        assert TopicConfig.decode((await get_topic(env, "CliT1")).body_bytes).readQueueNums == 2

        result = await cli(
            "updateTopic", "-n", env.namesrv_addr, "-c", CLUSTER, "-t", "CliT2", "-p", "4", "-o", "true",
            "-a", "+message.type=FIFO",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0] == f"create topic to {env.addr} success."
        assert lines[1] == f"set cluster orderConf. isOrder=true, orderConf=[{BROKER_NAME}:8]"
        # the test's name server keeps upstream's orderMessageEnable=false: routes leave it out
        assert result.stderr.startswith(
            f"note: name server {env.namesrv_addr} has orderMessageEnable=false: its routes leave"
        )
        assert lines[2].endswith("perm=R--, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=true, "
                                 "attributes={+message.type=FIFO}]")  # fmt: skip
        config = TopicConfig.decode((await get_topic(env, "CliT2")).body_bytes)
        assert (config.perm, config.order, config.attributes) == (4, True, {"message.type": "FIFO"})
        kv = await env.call(
            request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "CliT2"}),
            env.namesrv_addr,
        )
        assert kv.ext_fields == {"value": f"{BROKER_NAME}:8"}


async def test_cli_update_topic_errors(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        no_target = await cli("updateTopic", "-n", env.namesrv_addr, "-t", "X")
        assert no_target.exit_code == 2
        assert "-b/--brokerAddr or -c/--clusterName" in no_target.output
        bad = await cli("updateTopic", "-n", env.namesrv_addr, "-b", env.addr, "-t", "bad/name")
        assert bad.exit_code == 1
        assert "INVALID_PARAMETER (29)" in bad.output
        assert "contains illegal characters" in bad.output
        cluster = await cli("updateTopic", "-n", env.namesrv_addr, "-c", "NoCluster", "-t", "X")
        assert cluster.exit_code == 1
        assert "Make sure the specified clusterName exists" in cluster.output


async def test_cli_topic_status_and_delete_topic(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        assert (await create_topic(env, queues=2)).code == ResponseCode.SUCCESS
        await send(env, TOPIC, 1, 2)
        await wait_until(lambda: routed(env, TOPIC), what="route")
        result = await cli("topicStatus", "-n", env.namesrv_addr, "-t", TOPIC)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].split() == [
            "#Broker",
            "Name",
            "#QID",
            "#Min",
            "Offset",
            "#Max",
            "Offset",
            "#Last",
            "Updated",
        ]
        assert lines[1].split() == [BROKER_NAME, "0", "0", "0"]
        assert lines[2].split()[:4] == [BROKER_NAME, "1", "0", "2"]
        assert len(lines[2].split()) == 6  # date and time of the last message
        assert lines[-1] == "Topic Put TPS: 0.0"

        result = await cli("deleteTopic", "-n", env.namesrv_addr, "-c", CLUSTER, "-t", TOPIC)
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == [
            f"delete topic [{TOPIC}] from cluster [{CLUSTER}] success.",
            f"delete topic [{TOPIC}] from NameServer success.",
        ]
        assert (await get_topic(env)).code == ResponseCode.TOPIC_NOT_EXIST
        assert not routed(env, TOPIC)
        gone = await cli("topicStatus", "-n", env.namesrv_addr, "-t", TOPIC)
        assert gone.exit_code == 1
        assert "TOPIC_NOT_EXIST (17)" in gone.output


async def test_cli_update_sub_group(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        result = await cli(
            "updateSubGroup", "-n", env.namesrv_addr, "-b", env.addr, "-g", "CliGroup", "-q", "2", "-r", "5",
            "-o", "true",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == f"create subscription group to {env.addr} success."
        assert lines[1].startswith("SubscriptionGroupConfig{groupName=CliGroup, consumeEnable=true, ")
        got = await env.call(request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "CliGroup"}))
        config = SubscriptionGroupConfig.decode(got.body_bytes)
        assert (config.retryQueueNums, config.retryMaxTimes, config.consumeMessageOrderly) == (2, 5, True)
        # mqadmin's defaults, not the struct's
        assert (config.consumeBroadcastEnable, config.consumeFromMinEnable) == (False, False)

        result = await cli(
            "updateSubGroup", "-n", env.namesrv_addr, "-c", CLUSTER, "-g", "CliGroup", "-d", "true"
        )
        assert result.exit_code == 0, result.output
        got = await env.call(request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "CliGroup"}))
        config = SubscriptionGroupConfig.decode(got.body_bytes)
        assert (config.consumeBroadcastEnable, config.retryQueueNums) == (True, 1)


async def test_cli_consumer_progress(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        assert (await create_topic(env, queues=1)).code == ResponseCode.SUCCESS
        await send(env, TOPIC, 0, 5)
        await heartbeat(env)
        await commit_offset(env, TOPIC, 0, 2)
        await wait_until(lambda: routed(env, f"%RETRY%{GROUP}"), what="retry topic route")

        result = await cli("consumerProgress", "-n", env.namesrv_addr, "-g", GROUP)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].split()[:3] == ["#Topic", "#Broker", "Name"]
        row = lines[1].split()
        assert row[:7] == [TOPIC, BROKER_NAME, "0", "5", "2", "3", "0"]
        assert lines[-3:] == ["Consume TPS: 0.00", "Consume Diff Total: 3", "Consume Inflight Total: 0"]

        result = await cli("consumerProgress", "-n", env.namesrv_addr)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].split() == [
            "#Group",
            "#Count",
            "#Version",
            "#Type",
            "#Model",
            "#TPS",
            "#Diff",
            "Total",
        ]
        assert lines[1].split() == [GROUP, "1", "V5_3_3", "PUSH", "CLUSTERING", "0", "3"]

        # a group with no committed offset: upstream's remark, and no empty "from" address
        await heartbeat(env, group="NoOffsetsGroup")  # creates its retry topic
        await wait_until(lambda: routed(env, "%RETRY%NoOffsetsGroup"), what="retry topic route")
        result = await cli("consumerProgress", "-n", env.namesrv_addr, "-g", "NoOffsetsGroup")
        assert result.exit_code == 1
        assert result.output.strip() == (
            "rmq-admin consumerProgress command failed: SYSTEM_ERROR (1): Not found the consumer "
            "group consume stats, because return offset table is empty, maybe the consumer not "
            "consume any message"
        )


async def test_cli_broker_status(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        result = await cli("brokerStatus", "-n", env.namesrv_addr, "-b", env.addr)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        keys = [line.split(":", 1)[0].strip() for line in lines]
        assert keys == sorted(keys)
        assert set(keys) >= RUNTIME_KEYS
        assert f"{'brokerVersionDesc':<32}: V5_3_3" in lines

        result = await cli("brokerStatus", "-n", env.namesrv_addr, "-c", CLUSTER)
        assert result.exit_code == 0, result.output
        assert f"{env.addr:<24} {'brokerVersionDesc':<32}: V5_3_3" in result.output.splitlines()


def _on_disk(path: str) -> bytes:
    """The file as a SIGKILL would leave it: read at once, without letting the broker run."""
    try:
        with open(path, "rb") as f:  # a plain function: no task may run meanwhile
            return f.read()
    except FileNotFoundError:
        return b""


async def test_metadata_changes_are_on_disk_when_answered(tmp_path: os.PathLike[str]) -> None:
    """Upstream persists a topic or group change inside the request; a crash right after the
    answer must not lose a created topic (a test writes, kills, restarts) nor bring back a
    deleted topic's consumer offsets (a consumer of the topic created again would start there)."""
    async with broker_env(tmp_path, flushConsumerOffsetInterval=100) as env:
        config_dir = env.broker.store.config.config_dir
        topics, groups = env.broker.topics.path, env.broker.groups.path
        offsets = env.broker.offsets.path
        assert os.path.dirname(topics) == config_dir

        response = await create_topic(env, "DurableTopic", 3)
        assert response.code == ResponseCode.SUCCESS
        assert b"DurableTopic" in _on_disk(topics)

        config = SubscriptionGroupConfig(groupName="DurableGroup", retryMaxTimes=3)
        response = await env.call(
            request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
        )
        assert response.code == ResponseCode.SUCCESS
        assert b"DurableGroup" in _on_disk(groups)

        response = await env.call(
            request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {
                    "consumerGroup": "DurableGroup",
                    "topic": "DurableTopic",
                    "queueId": "1",
                    "commitOffset": "7",
                },
            )
        )
        assert response.code == ResponseCode.SUCCESS
        await wait_until(lambda: b"DurableTopic@DurableGroup" in _on_disk(offsets), what="offsets persisted")

        response = await env.call(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DurableTopic"}))
        assert response.code == ResponseCode.SUCCESS
        assert b"DurableTopic" not in _on_disk(topics)
        assert b"DurableTopic@DurableGroup" not in _on_disk(offsets)

        response = await env.call(
            request(
                RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "DurableGroup", "cleanOffset": "true"}
            )
        )
        assert response.code == ResponseCode.SUCCESS
        assert b"DurableGroup" not in _on_disk(groups)
