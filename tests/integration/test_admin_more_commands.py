"""rmq-admin ``cloneGroupOffset``, ``updateTopicPerm``, ``brokerConsumeStats``, ``topicClusterList``
(a real broker and name server), ``updateKvConfig``, ``deleteKvConfig`` and ``updateOrderConf`` (two real name servers, plus
an address where nothing listens)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import trio
from click.testing import CliRunner, Result

from client.admin import CLUSTER_NOT_FOUND, NO_CONSUME_STATS
from client.admin_broker_cli import BROKER_COMMANDS, NOT_A_MASTER_OF_TOPIC
from client.admin_cli import main
from client.admin_namesrv_cli import NAMESRV_COMMANDS
from client.admin_offsets_cli import COMMANDS as OFFSET_COMMANDS
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.headers import encode_header
from remoting.protocol.broker import ConsumeStatsList
from remoting.protocol.common import DataVersion, PermName, TopicConfig, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.namesrv import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicRouteData,
)
from remoting.server import RemotingServer
from tests.integration.broker_env import BROKER_NAME, CLUSTER, BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import describe, ext, send_text

TOPIC = "MoreCmdTopic"
SRC, DEST = "MoreCmdSrc", "MoreCmdDest"

# the commands as rmq-admin offers them
assert all(
    main.commands.get(c.name or "") is c for c in (*NAMESRV_COMMANDS, *BROKER_COMMANDS, *OFFSET_COMMANDS)
)


async def cli(*args: str) -> Result:
    """Run rmq-admin in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


# --- broker side ----------------------------------------------------------------------------------


async def create_topic(env: BrokerEnv, topic: str = TOPIC, *, queues: int = 2, order: bool = False) -> None:
    """The topic on the broker, then wait until the name server routes it."""
    fields = {
        "topic": topic,
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": "6",
        "defaultTopic": "TBW102",
        "order": str(order).lower(),
    }
    response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    await wait_until(lambda: topic in env.namesrv.routes.topicQueueTable, what=f"route of {topic}")


async def create_group(env: BrokerEnv, group: str) -> None:
    result = await cli("updateSubGroup", "-n", env.namesrv_addr, "-b", env.addr, "-g", group)
    assert result.exit_code == 0, result.output


async def commit(env: BrokerEnv, group: str, queue_id: int, offset: int) -> None:
    fields = {"consumerGroup": group, "topic": TOPIC, "queueId": str(queue_id), "commitOffset": str(offset)}
    response = await env.call(request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)


async def committed(env: BrokerEnv, group: str, queue_id: int) -> int | None:
    """The group's committed offset of the queue; None when it never committed there."""
    fields = {"consumerGroup": group, "topic": TOPIC, "queueId": str(queue_id), "setZeroIfNotFound": "false"}
    response = await env.call(request(RequestCode.QUERY_CONSUMER_OFFSET, fields))
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return int(ext(response)["offset"])


async def route_perm(env: BrokerEnv, topic: str = TOPIC) -> int:
    """The perm of the topic's queues in the name server's route (what clients see)."""
    response = await env.call(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), env.namesrv_addr)
    assert response.code == ResponseCode.SUCCESS, describe(response)
    (queues,) = TopicRouteData.decode(response.body_bytes).queueDatas
    return queues.perm


async def broker_topic_config(env: BrokerEnv, topic: str = TOPIC) -> TopicConfig:
    response = await env.call(request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic}))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return TopicConfig.decode(response.body_bytes)


async def test_clone_group_offset_copies_the_source_groups_offsets(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        await create_topic(env)
        for group in (SRC, DEST):
            await create_group(env, group)
        for i in range(5):
            await send_text(env, TOPIC, f"m{i}", queue_id=i % 2)  # 3 in queue 0, 2 in queue 1
        await commit(env, SRC, 0, 3)
        await commit(env, SRC, 1, 1)
        assert [await committed(env, DEST, q) for q in (0, 1)] == [None, None]

        # -o is mqadmin's deprecated "offline" switch: taken and ignored
        result = await cli(
            "cloneGroupOffset", "-n", ns, "-s", f" {SRC} ", "-d", DEST, "-t", TOPIC, "-o", "true"
        )
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"clone group offset success. srcGroup[{SRC}], destGroup=[{DEST}], topic[{TOPIC}]\n"
        )
        assert [await committed(env, DEST, q) for q in (0, 1)] == [3, 1]
        assert [await committed(env, SRC, q) for q in (0, 1)] == [3, 1]

        # a later clone overwrites the destination's own progress
        await commit(env, DEST, 0, 2)
        await commit(env, SRC, 1, 2)
        result = await cli("cloneGroupOffset", "-n", ns, "-s", SRC, "-d", DEST, "-t", TOPIC)
        assert result.exit_code == 0, result.output
        assert [await committed(env, DEST, q) for q in (0, 1)] == [3, 2]


async def test_clone_group_offset_refusals(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, autoCreateSubscriptionGroup=False) as env:
        ns = env.namesrv_addr
        await create_topic(env)
        await create_group(env, SRC)
        await commit(env, SRC, 0, 4)

        # the broker refuses offsets of a group it does not know
        result = await cli("cloneGroupOffset", "-n", ns, "-s", SRC, "-d", "NoSuchGroup", "-t", TOPIC)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr.startswith(
            "rmq-admin cloneGroupOffset command failed: SUBSCRIPTION_GROUP_NOT_EXIST"
        )
        assert "Group NoSuchGroup not exist!" in result.stderr

        # a topic the name server does not route
        result = await cli("cloneGroupOffset", "-n", ns, "-s", SRC, "-d", DEST, "-t", "NoSuchTopic")
        assert result.exit_code == 1
        assert result.stderr.startswith("rmq-admin cloneGroupOffset command failed: TOPIC_NOT_EXIST")

        # routed to the broker by the name server, but not on it: no consume stats to clone
        queues = QueueData(brokerName=BROKER_NAME, readQueueNums=2, writeQueueNums=2, perm=6)
        body = TopicRouteData(queueDatas=[queues]).encode()
        reply = await env.call(
            request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "OnlyRouted"}, body), env.namesrv_addr
        )
        assert reply.code == ResponseCode.SUCCESS, describe(reply)
        result = await cli("cloneGroupOffset", "-n", ns, "-s", SRC, "-d", SRC, "-t", "OnlyRouted")
        assert result.exit_code == 1
        assert (
            result.stderr
            == f"rmq-admin cloneGroupOffset command failed: SYSTEM_ERROR (1): {NO_CONSUME_STATS}\n"
        )

        result = await cli("cloneGroupOffset", "-n", ns, "-s", SRC, "-t", TOPIC)
        assert result.exit_code == 2
        assert "Missing option '-d'" in result.output


async def test_update_topic_perm_by_broker_and_by_cluster(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        await create_topic(env, queues=3, order=True)
        assert (await broker_topic_config(env)).perm == 6

        result = await cli("updateTopicPerm", "-n", ns, "-b", env.addr, "-t", f" {TOPIC} ", "-p", "4")
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"update topic perm from 6 to 4 in {env.addr} success.\n"
            f"TopicConfig [topicName={TOPIC}, readQueueNums=3, writeQueueNums=3, perm=R--, "
            "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=true, attributes={}].\n"
        )
        config = await broker_topic_config(env)
        # only the perm changed: queue numbers and the order flag are the broker's own
        assert (config.perm, config.readQueueNums, config.writeQueueNums, config.order) == (4, 3, 3, True)
        # the broker re-registered: clients see the topic read-only
        await wait_until(
            lambda: env.namesrv.routes.topicQueueTable[TOPIC][BROKER_NAME].perm == PermName.PERM_READ,
            what="read-only route",
        )
        assert await route_perm(env) == 4

        same = await cli("updateTopicPerm", "-n", ns, "-b", env.addr, "-t", TOPIC, "-p", "4")
        assert same.exit_code == 0, same.output
        assert same.stdout == "new perm equals to the old one!\n"

        by_cluster = await cli("updateTopicPerm", "-n", ns, "-c", CLUSTER, "-t", TOPIC, "-p", "6")
        assert by_cluster.exit_code == 0, by_cluster.output
        assert by_cluster.stdout == f"update topic perm from 4 to 6 in {env.addr} success.\n"
        config = await broker_topic_config(env)
        assert (config.perm, config.readQueueNums, config.order) == (6, 3, True)
        await wait_until(
            lambda: env.namesrv.routes.topicQueueTable[TOPIC][BROKER_NAME].perm == 6, what="route"
        )


async def test_update_topic_perm_refusals(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        await create_topic(env)

        # -b must be the master of a broker group of the topic's route
        result = await cli("updateTopicPerm", "-n", ns, "-b", "127.0.0.1:1", "-t", TOPIC, "-p", "4")
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr == f"rmq-admin updateTopicPerm command failed: {NOT_A_MASTER_OF_TOPIC}\n"

        # the broker checks the perm
        result = await cli("updateTopicPerm", "-n", ns, "-b", env.addr, "-t", TOPIC, "-p", "9")
        assert result.exit_code == 1
        assert result.stderr.startswith("rmq-admin updateTopicPerm command failed: INVALID_PARAMETER")
        assert f"The perm[9] of topic[{TOPIC}] is not in [0, 7]." in result.stderr
        # with -c the failure is reported per broker, then the command fails
        result = await cli("updateTopicPerm", "-n", ns, "-c", CLUSTER, "-t", TOPIC, "-p", "9")
        assert result.exit_code == 1
        assert result.stdout == ""
        assert f"update topic perm failed, {env.addr}: INVALID_PARAMETER" in result.stderr
        assert (await broker_topic_config(env)).perm == 6

        result = await cli("updateTopicPerm", "-n", ns, "-b", env.addr, "-t", "NoSuchTopic", "-p", "4")
        assert result.exit_code == 1
        assert result.stderr.startswith("rmq-admin updateTopicPerm command failed: TOPIC_NOT_EXIST")
        result = await cli("updateTopicPerm", "-n", ns, "-c", "NoSuchCluster", "-t", TOPIC, "-p", "4")
        assert result.exit_code == 1
        assert result.stderr == f"rmq-admin updateTopicPerm command failed: {CLUSTER_NOT_FOUND}\n"
        # a topic only a broker group of another cluster serves: nothing to change in this one
        await register(env.client, ns, "127.0.0.1:1", "AnotherCluster", "broker-z", ["OnlyThere"])
        result = await cli("updateTopicPerm", "-n", ns, "-c", CLUSTER, "-t", "OnlyThere", "-p", "4")
        assert result.exit_code == 1
        assert result.stderr == (
            f"rmq-admin updateTopicPerm command failed: no master of cluster [{CLUSTER}] holds topic [OnlyThere]\n"
        )
        result = await cli("updateTopicPerm", "-n", ns, "-t", TOPIC, "-p", "4")
        assert result.exit_code == 2
        assert "give -b (broker address) or -c (cluster name)" in result.output
        result = await cli("updateTopicPerm", "-n", ns, "-b", env.addr, "-t", TOPIC)
        assert result.exit_code == 2
        assert "Missing option '-p'" in result.output
        assert (await broker_topic_config(env)).perm == 6


async def test_broker_consume_stats_lists_every_groups_consumed_queues(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        await create_topic(env, "MoreCmdOrdered", queues=1, order=True)
        for i in range(5):
            await send_text(env, TOPIC, f"m{i}")
        await send_text(env, "MoreCmdOrdered", "o0")
        for group in (SRC, DEST):
            await create_group(env, group)
        await commit(env, SRC, 0, 3)  # DEST commits nothing: listed with no topic
        fields = {"consumerGroup": SRC, "topic": "MoreCmdOrdered", "queueId": "0", "commitOffset": "1"}
        assert (
            await env.call(request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
        ).code == ResponseCode.SUCCESS

        raw = await env.call(request(RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))
        assert raw.code == ResponseCode.SUCCESS, describe(raw)
        stats = ConsumeStatsList.decode(raw.body_bytes)
        assert (stats.brokerAddr, stats.totalDiff) == (env.addr, 2)
        by_group = {g: per_topic for m in stats.consumeStatsList for g, per_topic in m.items()}
        assert by_group[DEST] == []
        assert sorted(mq.topic for st in by_group[SRC] for mq in st.offsetTable) == [
            "MoreCmdOrdered",
            TOPIC,
            TOPIC,
        ]

        result = await cli("brokerConsumeStats", "-n", env.namesrv_addr, "-b", env.addr)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0].split() == [
            "#Topic", "#Group", "#Broker", "Name", "#QID", "#Broker", "Offset", "#Consumer", "Offset", "#Diff", "#LastTime"
        ]  # fmt: skip
        # queues the group consumed from (queue 1 of the topic: nothing consumed, not printed)
        rows = [line.split()[:7] for line in lines[1:-2]]
        assert rows == [
            ["MoreCmdOrdered", SRC, BROKER_NAME, "0", "1", "1", "0"],
            [TOPIC, SRC, BROKER_NAME, "0", "5", "3", "2"],
        ]
        assert lines[-2:] == ["", "Diff Total: 2"]

        result = await cli("brokerConsumeStats", "-n", env.namesrv_addr, "-b", env.addr, "-l", "1")
        assert [line.split()[0] for line in result.stdout.splitlines()[1:-2]] == [TOPIC]  # diff >= 1 only
        result = await cli("brokerConsumeStats", "-n", env.namesrv_addr, "-b", env.addr, "-o", "true")
        assert [line.split()[0] for line in result.stdout.splitlines()[1:-2]] == ["MoreCmdOrdered"]
        assert result.stdout.splitlines()[-1] == "Diff Total: 0"

        result = await cli("brokerConsumeStats", "-n", env.namesrv_addr, "-b", "127.0.0.1:1", "-t", "1000")
        assert result.exit_code == 1
        assert result.stderr.startswith("rmq-admin brokerConsumeStats command failed: ")


async def register(
    client: RemotingClient, namesrv: str, broker_addr: str, cluster: str, broker_name: str, topics: list[str]
) -> None:
    """REGISTER_BROKER of a master (nothing need listen at ``broker_addr``) with ``topics`` of 4 queues."""
    # the broker group's own topic too: a name server refuses a first registration of one topic
    table = {t: TopicConfig(topicName=t, readQueueNums=4, writeQueueNums=4) for t in [broker_name, *topics]}
    body = RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
            topicConfigTable=table, dataVersion=DataVersion(counter=1)
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        brokerName=broker_name,
        brokerAddr=broker_addr,
        clusterName=cluster,
        haServerAddr=broker_addr,
        brokerId=0,
    )
    reply = await client.invoke(
        namesrv, request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body), 5
    )
    assert reply.code == ResponseCode.SUCCESS, describe(reply)


async def test_topic_cluster_list(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        await create_topic(env)
        result = await cli("topicClusterList", "-n", ns, "-t", f" {TOPIC} ")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"{CLUSTER}\n"

        # a broker group of another cluster serves the topic too: both clusters, sorted
        await register(env.client, ns, "127.0.0.1:1", "AnotherCluster", "broker-z", [TOPIC, "OnlyThere"])
        result = await cli("topicClusterList", "-n", ns, "-t", TOPIC)
        assert result.exit_code == 0, result.output
        assert result.stdout == f"AnotherCluster\n{CLUSTER}\n"
        result = await cli("topicClusterList", "-n", ns, "-t", "OnlyThere")
        assert result.stdout == "AnotherCluster\n"

        result = await cli("topicClusterList", "-n", ns, "-t", "NoSuchTopic")
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr.startswith("rmq-admin topicClusterList command failed: TOPIC_NOT_EXIST")


# --- name servers ---------------------------------------------------------------------------------


@dataclass
class NamesrvEnv:
    ns1: str
    ns2: str
    dead: str
    client: RemotingClient


@pytest.fixture
async def namesrvs(nursery: trio.Nursery, tmp_path: os.PathLike[str]) -> AsyncIterator[NamesrvEnv]:
    """Two name servers (the first puts order confs into routes, as with orderMessageEnable) that
    both route TOPIC on broker-a, and an address where nothing listens."""
    server = RemotingServer(name="admin-more-test")
    addresses = []
    for i in (1, 2):
        config = NamesrvConfig(kvConfigPath=os.path.join(tmp_path, f"kv{i}.json"), orderMessageEnable=i == 1)
        namesrv = NamesrvController(config)
        await nursery.start(namesrv.run)
        listener = await server.add_listener("127.0.0.1", 0, namesrv.processor_table, name=f"namesrv{i}")
        addresses.append(listener.address)
    await nursery.start(server.run)
    with trio.socket.socket() as dead:
        await dead.bind(("127.0.0.1", 0))
        dead_addr = f"127.0.0.1:{dead.getsockname()[1]}"  # bound, never listening: connection refused
        async with RemotingClient() as client:
            for namesrv_addr in addresses:
                await register(client, namesrv_addr, "127.0.0.1:10911", "DefaultCluster", "broker-a", [TOPIC])
            yield NamesrvEnv(addresses[0], addresses[1], dead_addr, client)


async def kv_value(client: RemotingClient, namesrv: str, namespace: str, key: str) -> str | None:
    """GET_KV_CONFIG of one name server; None when it has no such item."""
    reply = await client.invoke(
        namesrv, request(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}), 5
    )
    if reply.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    assert reply.code == ResponseCode.SUCCESS, describe(reply)
    return ext(reply)["value"]


async def test_update_and_delete_kv_config_on_every_name_server(namesrvs: NamesrvEnv) -> None:
    env = namesrvs
    both = f"{env.ns1};{env.ns2}"
    result = await cli("updateKvConfig", "-n", both, "-s", " TestSpace ", "-k", " color ", "-v", " blue ")
    assert result.exit_code == 0, result.output
    assert result.stdout == "create or update kv config to namespace success.\n"
    assert [await kv_value(env.client, ns, "TestSpace", "color") for ns in (env.ns1, env.ns2)] == [
        "blue",
        "blue",
    ]

    result = await cli("updateKvConfig", "-n", both, "-s", "TestSpace", "-k", "color", "-v", "red")
    assert result.exit_code == 0, result.output
    assert [await kv_value(env.client, ns, "TestSpace", "color") for ns in (env.ns1, env.ns2)] == [
        "red",
        "red",
    ]

    result = await cli("deleteKvConfig", "-n", both, "-s", "TestSpace", "-k", "color")
    assert result.exit_code == 0, result.output
    assert result.stdout == "delete kv config from namespace success.\n"
    assert [await kv_value(env.client, ns, "TestSpace", "color") for ns in (env.ns1, env.ns2)] == [None, None]

    # deleting what is not there is no error (as upstream's name server)
    result = await cli("deleteKvConfig", "-n", both, "-s", "TestSpace", "-k", "color")
    assert result.exit_code == 0, result.output

    result = await cli("updateKvConfig", "-n", both, "-s", "TestSpace", "-k", "color")
    assert result.exit_code == 2
    assert "Missing option '-v'" in result.output


async def test_kv_config_stops_at_an_unreachable_name_server(namesrvs: NamesrvEnv) -> None:
    env = namesrvs
    # in order, as mqadmin: the name servers before the unreachable one have it, the rest not
    result = await cli(
        "updateKvConfig", "-n", f"{env.ns1};{env.dead};{env.ns2}", "-s", "S", "-k", "k", "-v", "v"
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("rmq-admin updateKvConfig command failed: ")
    assert env.dead in result.stderr
    assert [await kv_value(env.client, ns, "S", "k") for ns in (env.ns1, env.ns2)] == ["v", None]

    result = await cli("deleteKvConfig", "-n", f"{env.ns1};{env.dead}", "-s", "S", "-k", "k")
    assert result.exit_code == 1
    assert result.stderr.startswith("rmq-admin deleteKvConfig command failed: ")
    assert env.dead in result.stderr
    assert await kv_value(env.client, env.ns1, "S", "k") is None


async def route_order_conf(client: RemotingClient, namesrv: str) -> str | None:
    reply = await client.invoke(namesrv, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 5)
    assert reply.code == ResponseCode.SUCCESS, describe(reply)
    return TopicRouteData.decode(reply.body_bytes).orderTopicConf


async def test_update_order_conf_put_get_delete(namesrvs: NamesrvEnv) -> None:
    env = namesrvs
    both = f"{env.ns1};{env.ns2}"
    conf = "broker-a:4;broker-b:4"
    result = await cli("updateOrderConf", "-n", both, "-t", TOPIC, "-m", "put", "-v", f" {conf} ")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"update orderConf success. topic=[{TOPIC}], orderConf=[{conf}]\n"
    # the second name server leaves it out of routes: said on stderr, the first one not named
    assert result.stderr == (
        f"note: name server {env.ns2} has orderMessageEnable=false: its routes leave the order conf out, "
        "and producers pick queues as for any topic (turn it on with updateNamesrvConfig -k "
        "orderMessageEnable -v true, or in the name server's config)\n"
    )
    values = [
        await kv_value(env.client, ns, NAMESPACE_ORDER_TOPIC_CONFIG, TOPIC) for ns in (env.ns1, env.ns2)
    ]
    assert values == [conf, conf]
    # producers of the topic get it with its route (from a name server with orderMessageEnable)
    assert await route_order_conf(env.client, env.ns1) == conf

    result = await cli("updateOrderConf", "-n", env.ns2, "-t", TOPIC, "-m", " get ")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"get orderConf success. topic=[{TOPIC}], orderConf=[{conf}] \n"

    result = await cli("updateOrderConf", "-n", both, "-t", TOPIC, "-m", "delete")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"delete orderConf success. topic=[{TOPIC}]\n"
    values = [
        await kv_value(env.client, ns, NAMESPACE_ORDER_TOPIC_CONFIG, TOPIC) for ns in (env.ns1, env.ns2)
    ]
    assert values == [None, None]
    assert await route_order_conf(env.client, env.ns1) is None

    # get of a topic without an order conf: the name server's QUERY_NOT_FOUND
    result = await cli("updateOrderConf", "-n", both, "-t", TOPIC, "-m", "get")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "rmq-admin updateOrderConf command failed: QUERY_NOT_FOUND (22): "
        f"No config item, Namespace: {NAMESPACE_ORDER_TOPIC_CONFIG} Key: {TOPIC}\n"
    )


async def test_update_order_conf_refusals(namesrvs: NamesrvEnv) -> None:
    env = namesrvs
    for extra in ([], ["-v", "  "]):
        result = await cli("updateOrderConf", "-n", env.ns1, "-t", TOPIC, "-m", "put", *extra)
        assert result.exit_code == 1
        assert (
            result.stderr
            == "rmq-admin updateOrderConf command failed: please set orderConf with option -v.\n"
        )
    assert await kv_value(env.client, env.ns1, NAMESPACE_ORDER_TOPIC_CONFIG, TOPIC) is None

    result = await cli("updateOrderConf", "-n", env.ns1, "-t", TOPIC, "-m", "post", "-v", "broker-a:4")
    assert result.exit_code == 2
    assert "'post' is not one of put, get, delete" in result.output
    assert await kv_value(env.client, env.ns1, NAMESPACE_ORDER_TOPIC_CONFIG, TOPIC) is None

    result = await cli(
        "updateOrderConf", "-n", f"{env.dead};{env.ns1}", "-t", TOPIC, "-m", "put", "-v", "a:1"
    )
    assert result.exit_code == 1
    assert env.dead in result.stderr
    assert await kv_value(env.client, env.ns1, NAMESPACE_ORDER_TOPIC_CONFIG, TOPIC) is None
