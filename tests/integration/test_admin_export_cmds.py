"""rmq-admin ``exportMetadata`` and ``exportConfigs`` against real brokers and a name server: the
files they write (name, shape, content), the -t/-g/-s filters, and their refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import pytest
import trio
from click.testing import CliRunner, Result

from broker.controller import BrokerController
from broker.stats import BrokerStats
from client.admin_export_cli import COMMANDS, EXPORTED_BROKER_KEYS
from client.admin_metrics_cli import COMMANDS as METRICS_COMMANDS
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import CURRENT_VERSION, LanguageCode, request
from remoting.protocol.broker import (
    ConsumerData,
    HeartbeatData,
    SubscriptionData,
    SubscriptionGroupConfig,
)
from remoting.protocol.common import KVTable
from store.config import BrokerRole
from tests.integration.broker_env import BROKER_NAME, CLUSTER, broker_env, wait_until
from tests.integration.broker_requests import describe, messages, pull_request, send_request
from tests.integration.replication_kit import Group, replication_group

COMMAND = {c.name: c for c in [*COMMANDS, *METRICS_COMMANDS]}
GROUP = "ExportGroup"
TOPIC_A = "ExportTopicA"
TOPIC_B = "ExportTopicB"
RETRY_TOPIC = f"%RETRY%{GROUP}"
DLQ_TOPIC = f"%DLQ%{GROUP}"
#: topics a broker makes for itself, which it lists as system topics (GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
BROKER_OWN_TOPICS = {CLUSTER, BROKER_NAME, "broker-b", f"{CLUSTER}_REPLY_TOPIC"}
TOPIC_FIELDS = {
    "attributes",
    "order",
    "perm",
    "readQueueNums",
    "topicFilterType",
    "topicName",
    "topicSysFlag",
    "writeQueueNums",
}


async def cli(name: str, *args: str) -> Result:
    """Run one of the commands in a worker thread (it starts its own trio loop)."""
    command: click.Command = COMMAND[name]
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(command, list(args)))


async def create_topic(client: RemotingClient, addr: str, topic: str, queues: int) -> None:
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
    response = await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields), 5)
    assert response.code == ResponseCode.SUCCESS, describe(response)


async def create_group(client: RemotingClient, addr: str, group: str, retry_queues: int = 1) -> None:
    config = SubscriptionGroupConfig(groupName=group, retryQueueNums=retry_queues, retryMaxTimes=3)
    cmd = request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
    response = await client.invoke(addr, cmd, 5)
    assert response.code == ResponseCode.SUCCESS, describe(response)


async def populate(client: RemotingClient, addr: str) -> None:
    """Two user topics, a retry and a DLQ topic; two user groups and a system one."""
    await create_topic(client, addr, TOPIC_A, 4)
    await create_topic(client, addr, TOPIC_B, 2)
    await create_topic(client, addr, RETRY_TOPIC, 1)
    await create_topic(client, addr, DLQ_TOPIC, 1)
    await create_group(client, addr, GROUP)
    await create_group(client, addr, "ExportGroup2", retry_queues=2)
    await create_group(client, addr, "CID_RMQ_SYS_ExportSys")


def read_export(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("{\n\t"), text[:40]  # fastjson's pretty format: tabs, no trailing newline
    assert not text.endswith("\n")
    document: dict[str, Any] = json.loads(text)
    return document


def user_topics(table: dict[str, Any]) -> set[str]:
    """The exported topics, which must include none of a broker's own system topics."""
    assert not set(table) & BROKER_OWN_TOPICS
    return set(table)


def assert_no_system_entries(document: dict[str, Any]) -> None:
    for topic in document.get("topicConfigTable", {}):
        assert not topic.startswith("rmq_sys_"), topic
        assert topic not in {"TBW102", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"}
    for group in document.get("subscriptionGroupTable", {}):
        assert not group.startswith("CID_RMQ_SYS_"), group
        assert group not in {"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONSAPI_PULL"}


async def test_export_metadata_of_a_cluster_writes_its_user_topics_and_groups(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        await populate(env.client, env.addr)
        out = tmp_path / "out" / "nested"  # created by the command
        ns = env.namesrv_addr

        result = await cli("exportMetadata", "-n", ns, "-c", CLUSTER, "-f", str(out))
        assert result.exit_code == 0, result.output
        path = out / "metadata.json"
        assert result.stdout == f"export {path} success\n"
        document = read_export(path)
        assert set(document) == {"exportTime", "subscriptionGroupTable", "topicConfigTable"}
        assert isinstance(document["exportTime"], int)
        topics = document["topicConfigTable"]
        assert user_topics(topics) == {TOPIC_A, TOPIC_B}  # no retry or DLQ topic without -s
        assert_no_system_entries(document)
        assert topics[TOPIC_A] == {
            "attributes": {},
            "order": False,
            "perm": 6,
            "readQueueNums": 4,
            "topicFilterType": "SINGLE_TAG",
            "topicName": TOPIC_A,
            "topicSysFlag": 0,
            "writeQueueNums": 4,
        }
        groups = document["subscriptionGroupTable"]
        assert set(groups) == {GROUP, "ExportGroup2"}
        group = groups[GROUP]
        assert group["groupName"] == GROUP
        assert group["retryMaxTimes"] == 3
        assert group["retryQueueNums"] == 1
        assert group["groupRetryPolicy"] == {"type": "CUSTOMIZED"}  # upstream's default, as it sends it
        assert groups["ExportGroup2"]["retryQueueNums"] == 2

        # -s: retry and DLQ topics too
        result = await cli("exportMetadata", "-n", ns, "-c", CLUSTER, "-f", str(out), "-s")
        assert result.exit_code == 0, result.output
        document = read_export(path)
        assert user_topics(document["topicConfigTable"]) == {TOPIC_A, TOPIC_B, RETRY_TOPIC, DLQ_TOPIC}
        assert_no_system_entries(document)

        # -t: topics only, into topic.json
        result = await cli("exportMetadata", "-n", ns, "-c", f" {CLUSTER} ", "-f", str(out), "-t")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"export {out / 'topic.json'} success\n"
        document = read_export(out / "topic.json")
        assert set(document) == {"exportTime", "topicConfigTable"}
        assert user_topics(document["topicConfigTable"]) == {TOPIC_A, TOPIC_B}

        # -g: groups only, into subscriptionGroup.json
        result = await cli("exportMetadata", "-n", ns, "-c", CLUSTER, "-f", str(out), "-g")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"export {out / 'subscriptionGroup.json'} success\n"
        document = read_export(out / "subscriptionGroup.json")
        assert set(document) == {"exportTime", "subscriptionGroupTable"}
        assert set(document["subscriptionGroupTable"]) == {GROUP, "ExportGroup2"}

        # no temporary file is left behind
        assert sorted(p.name for p in out.iterdir()) == [
            "metadata.json",
            "subscriptionGroup.json",
            "topic.json",
        ]


async def test_export_metadata_of_one_broker_writes_its_wrappers(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        await populate(env.client, env.addr)
        out = tmp_path / "b"
        ns = env.namesrv_addr

        # -b -t: the broker's TopicConfigSerializeWrapper; no newline after the line, as mqadmin
        result = await cli("exportMetadata", "-n", ns, "-b", env.addr, "-f", str(out), "-t", "-s")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"export {out / 'topic.json'} success"
        document = read_export(out / "topic.json")
        assert set(document) == {"dataVersion", "topicConfigTable"}
        assert set(document["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
        assert document["dataVersion"]["counter"] > 0  # the topics created above bumped it
        assert user_topics(document["topicConfigTable"]) == {TOPIC_A, TOPIC_B, RETRY_TOPIC, DLQ_TOPIC}
        assert set(document["topicConfigTable"][TOPIC_B]) == TOPIC_FIELDS
        assert_no_system_entries(document)

        # -b -g: its SubscriptionGroupWrapper
        result = await cli("exportMetadata", "-n", ns, "-b", env.addr, "-f", str(out), "-g")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"export {out / 'subscriptionGroup.json'} success"
        document = read_export(out / "subscriptionGroup.json")
        assert set(document) == {"dataVersion", "forbiddenTable", "subscriptionGroupTable"}
        assert set(document["subscriptionGroupTable"]) == {GROUP, "ExportGroup2"}
        assert_no_system_entries(document)

        # -b alone: that broker's metadata.json in the -c form (mqadmin writes nothing)
        result = await cli("exportMetadata", "-n", ns, "-b", f" {env.addr} ", "-f", str(out))
        assert result.exit_code == 0, result.output
        assert result.stdout == f"export {out / 'metadata.json'} success\n"
        document = read_export(out / "metadata.json")
        assert set(document) == {"exportTime", "subscriptionGroupTable", "topicConfigTable"}
        assert user_topics(document["topicConfigTable"]) == {TOPIC_A, TOPIC_B}


async def wait_registered(g: Group, brokers: dict[str, int]) -> None:
    """Until the name server knows ``brokers`` (name -> number of replicas)."""

    def registered() -> bool:
        table = g.namesrv.routes.brokerAddrTable
        return all(name in table and len(table[name].brokerAddrs) == n for name, n in brokers.items())

    await wait_until(registered, what=f"registration of {brokers}")


async def test_export_of_a_cluster_merges_its_masters_and_counts_its_slaves(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        master_a = await g.start("a", brokerRole=BrokerRole.ASYNC_MASTER)
        await g.start("a-slave", brokerRole=BrokerRole.SLAVE, brokerId=1)
        master_b = await g.start("b", brokerName="broker-b", brokerRole=BrokerRole.SYNC_MASTER)
        await wait_registered(g, {BROKER_NAME: 2, "broker-b": 1})
        await populate(g.client, master_a.addr)
        # broker-b holds topic A with 2 queues, its own topic, and the group with 3 retry queues
        await create_topic(g.client, master_b.addr, TOPIC_A, 2)
        await create_topic(g.client, master_b.addr, "OnlyOnB", 8)
        await create_group(g.client, master_b.addr, GROUP, retry_queues=3)
        out = tmp_path / "export"

        result = await cli("exportMetadata", "-n", g.namesrv_addr, "-c", CLUSTER, "-f", str(out))
        assert result.exit_code == 0, result.output
        document = read_export(out / "metadata.json")
        topics = document["topicConfigTable"]
        assert user_topics(topics) == {TOPIC_A, TOPIC_B, "OnlyOnB"}
        assert (topics[TOPIC_A]["readQueueNums"], topics[TOPIC_A]["writeQueueNums"]) == (6, 6)
        assert topics[TOPIC_B]["writeQueueNums"] == 2
        assert topics["OnlyOnB"]["writeQueueNums"] == 8
        groups = document["subscriptionGroupTable"]
        assert groups[GROUP]["retryQueueNums"] == 4
        assert groups["ExportGroup2"]["retryQueueNums"] == 2

        # exportConfigs: each master's exported keys, and the cluster's scale; -n lists 2 name servers
        namesrvs = f"{g.namesrv_addr};127.0.0.1:1"
        result = await cli("exportConfigs", "-n", namesrvs, "-c", CLUSTER, "-f", str(out))
        assert result.exit_code == 0, result.output
        path = out / "configs.json"
        assert result.stdout == f"export {path} success"
        document = read_export(path)
        assert set(document) == {"brokerConfigs", "clusterScale"}
        assert document["clusterScale"] == {"masterBrokerSize": 2, "namesrvSize": 2, "slaveBrokerSize": 1}
        configs = document["brokerConfigs"]
        assert set(configs) == {BROKER_NAME, "broker-b"}
        for name, role in ((BROKER_NAME, "ASYNC_MASTER"), ("broker-b", "SYNC_MASTER")):
            config = configs[name]
            assert set(config) <= set(EXPORTED_BROKER_KEYS)
            assert all(isinstance(v, str) for v in config.values())  # as Java Properties
            assert config["brokerName"] == name
            assert config["brokerRole"] == role
            assert config["brokerId"] == "0"
            assert config["brokerClusterName"] == CLUSTER
        assert {"flushDiskType", "maxMessageSize", "autoCreateTopicEnable"} <= set(configs["broker-b"])


async def test_export_refusals(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        out = Path(tmp_path) / "refused"

        # an unknown cluster: a failure naming the cause, exit status 1, no file
        for name in ("exportMetadata", "exportConfigs", "exportMetrics"):
            result = await cli(name, "-n", ns, "-c", "NoSuchCluster", "-f", str(out))
            assert result.exit_code == 1, result.output
            assert result.stdout == ""
            assert result.stderr.startswith(f"rmq-admin {name} command failed: Make sure the specified")
        assert not out.exists()

        # a broker nobody listens at
        result = await cli("exportMetadata", "-n", ns, "-b", "127.0.0.1:1", "-f", str(out), "-t")
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith("rmq-admin exportMetadata command failed: ")
        assert not out.exists()

        # neither -b nor -c; exportConfigs without -c
        result = await cli("exportMetadata", "-n", ns, "-f", str(out))
        assert result.exit_code == 2
        assert "give -b (broker address) or -c (cluster name)" in result.output
        result = await cli("exportConfigs", "-n", ns, "-f", str(out))
        assert result.exit_code == 2
        result = await cli("exportMetrics", "-n", ns, "-f", str(out))
        assert result.exit_code == 2
        assert "Missing option '-c' / '--clusterName'" in result.output

        # a directory that cannot be made: a regular file stands in its way
        blocker = Path(tmp_path) / "blocker"
        blocker.write_text("not a directory")
        result = await cli("exportConfigs", "-n", ns, "-c", CLUSTER, "-f", str(blocker / "sub"))
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(f"rmq-admin exportConfigs command failed: cannot write {blocker}")


# --- exportMetrics -----------------------------------------------------------------------------------

DAY_MS = 86_400_000


class RateClock:
    """Takes over a broker's counter sampling (the rates of GET_BROKER_RUNTIME_INFO: ``putTps``,
    ``getTransferredTps``): its once-a-second sampler stops and its statistics clock stands at an
    hour into the next day, so the totals so far become the day before's (``msgPutTotalTodayMorning``
    minus ``msgPutTotalYesterdayMorning``); the test takes the samples, a second apart."""

    def __init__(self, broker: BrokerController, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stats = broker.stats
        self.now = (broker.now_ms() // DAY_MS + 1) * DAY_MS + 3_600_000
        monkeypatch.setattr(self.stats, "now_ms", lambda: self.now)
        monkeypatch.setattr(self.stats, "sample", lambda: None)

    def sample(self, count: int = 1) -> None:
        for _ in range(count):
            self.now += 1000
            BrokerStats.sample(self.stats)


async def send_some(client: RemotingClient, addr: str, topic: str, count: int) -> None:
    for i in range(count):
        cmd = send_request(topic, f"metrics {i}".encode())
        response = await client.invoke(addr, cmd, 5)
        assert response.code == ResponseCode.SUCCESS, describe(response)


async def pull_some(client: RemotingClient, addr: str, topic: str, offset: int, count: int) -> None:
    """One pull of ``GROUP`` finding ``count`` messages of queue 0 from ``offset``."""
    response = await client.invoke(addr, pull_request(GROUP, topic, 0, offset, max_nums=count), 5)
    assert response.code == ResponseCode.SUCCESS, describe(response)
    assert len(messages(response)) == count


async def consumer_heartbeat(
    client: RemotingClient,
    addr: str,
    group: str,
    client_id: str,
    language: LanguageCode = LanguageCode.PYTHON,
    version: int = CURRENT_VERSION,
) -> None:
    data = HeartbeatData(
        clientID=client_id,
        consumerDataSet=[
            ConsumerData(
                groupName=group, subscriptionDataSet=[SubscriptionData(topic=TOPIC_A, subString="*")]
            )
        ],
    )
    cmd = request(RequestCode.HEART_BEAT, body=data.encode())
    cmd.language, cmd.version = language, version
    response = await client.invoke(addr, cmd, 5)
    assert response.code == ResponseCode.SUCCESS, describe(response)


async def runtime_table(client: RemotingClient, addr: str) -> dict[str, str]:
    response = await client.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return KVTable.decode(response.body_bytes).table


async def broker_properties(client: RemotingClient, addr: str) -> dict[str, str]:
    response = await client.invoke(addr, request(RequestCode.GET_BROKER_CONFIG), 5)
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return dict(line.split("=", 1) for line in response.body_bytes.decode().splitlines())


async def expected_runtime_env(client: RemotingClient, addr: str) -> dict[str, str]:
    """What ``runtimeEnv`` holds: the keys the broker reports (rmq-container's reports neither)."""
    properties = await broker_properties(client, addr)
    runtime = await runtime_table(client, addr)
    env = {
        "cpuNum": properties.get("clientCallbackExecutorThreads"),
        "totalMemKBytes": runtime.get("totalMemKBytes"),
    }
    return {key: value for key, value in env.items() if value is not None}


def assert_sorted_maps(value: Any) -> None:
    if isinstance(value, dict):
        assert list(value) == sorted(value)
        for item in value.values():
            assert_sorted_maps(item)


async def test_export_metrics_reports_a_brokers_load_clients_and_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with broker_env(tmp_path) as env:
        client, addr = env.client, env.addr
        await populate(client, addr)
        # yesterday: 5 sends, all pulled
        await send_some(client, addr, TOPIC_A, 5)
        await pull_some(client, addr, TOPIC_A, 0, 5)
        clock = RateClock(env.broker, monkeypatch)
        clock.sample(10)
        # the last 10 seconds: 3 sends, 2 of them pulled
        await send_some(client, addr, TOPIC_A, 3)
        await pull_some(client, addr, TOPIC_A, 5, 2)
        clock.sample()
        # consumers online: a Python and a Java client in the user groups, a Go one in a system group
        await consumer_heartbeat(client, addr, GROUP, "127.0.0.1@py")
        await consumer_heartbeat(client, addr, "ExportGroup2", "127.0.0.1@java", LanguageCode.JAVA, 401)
        await consumer_heartbeat(client, addr, "CID_RMQ_SYS_ExportSys", "127.0.0.1@go", LanguageCode.GO)
        await wait_until(
            lambda: (
                {f"%RETRY%{g}" for g in (GROUP, "ExportGroup2")} <= set(env.namesrv.routes.topicQueueTable)
            ),
            what="retry topic routes",
        )
        out = tmp_path / "metrics" / "nested"  # created by the command

        result = await cli("exportMetrics", "-n", env.namesrv_addr, "-c", f" {CLUSTER} ", "-f", str(out))
        assert result.exit_code == 0, result.output
        path = out / "metrics.json"
        assert result.stdout == f"export {path} success"  # no newline, as mqadmin
        document = read_export(path)
        assert_sorted_maps(document)
        assert set(document) == {"evaluateReport", "totalData"}
        assert set(document["evaluateReport"]) == {BROKER_NAME}
        report = document["evaluateReport"][BROKER_NAME]
        assert set(report) == {"runtimeEnv", "runtimeQuota", "runtimeVersion"}
        assert report["runtimeEnv"] == await expected_runtime_env(client, addr)

        quota = report["runtimeQuota"]
        assert quota["tps"] == {
            "normalInTps": 0.3,  # 3 puts over the last 10 samples
            "normalOutTps": 0.2,
            "transInTps": 0.0,  # no such statistics item on this broker: 0
            "scheduleInTps": 0.0,
        }
        assert quota["oneDayNum"] == {
            "normalOneDayInNum": 5,
            "normalOneDayOutNum": 5,
            "transOneDayInNum": 0,
            "scheduleOneDayInNum": 0,
        }
        assert quota["topicSize"] == 2  # TOPIC_A, TOPIC_B: no retry, DLQ or system topic
        assert quota["groupSize"] == 2  # no CID_RMQ_SYS_ group
        runtime = await runtime_table(client, addr)
        assert quota["messageAverageSize"] == runtime["putMessageAverageSize"]
        assert float(quota["messageAverageSize"]) > 0
        assert set(quota["diskRatio"]) == {"commitLogDiskRatio", "consumeQueueDiskRatio"}
        assert all(0 < float(ratio) < 1 for ratio in quota["diskRatio"].values())

        assert report["runtimeVersion"] == {
            "clientInfo": ["JAVA%V4_9_4", "PYTHON%V5_3_3"],
            "rocketmqVersion": "V5_3_3",
        }
        assert document["totalData"] == {
            "totalOneDayNum": quota["oneDayNum"],
            "totalTps": {
                "totalNormalInTps": 0.3,
                "totalNormalOutTps": 0.2,
                "totalScheduleInTps": 0.0,
                "totalTransInTps": 0.0,
            },
        }
        assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]


async def test_export_metrics_adds_up_the_masters_of_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with replication_group(tmp_path) as g:
        master_a = await g.start("a", brokerRole=BrokerRole.ASYNC_MASTER)
        await g.start("a-slave", brokerRole=BrokerRole.SLAVE, brokerId=1)
        master_b = await g.start("b", brokerName="broker-b", brokerRole=BrokerRole.ASYNC_MASTER)
        await wait_registered(g, {BROKER_NAME: 2, "broker-b": 1})
        client = g.client
        await populate(client, master_a.addr)
        await create_topic(client, master_b.addr, TOPIC_A, 2)
        await create_group(client, master_b.addr, GROUP)
        for master, before, recent in ((master_a, 4, 2), (master_b, 6, 1)):
            await send_some(client, master.addr, TOPIC_A, before)
            clock = RateClock(master.broker, monkeypatch)
            clock.sample(10)
            await send_some(client, master.addr, TOPIC_A, recent)
            await pull_some(client, master.addr, TOPIC_A, 0, before + recent)
            clock.sample()
        await consumer_heartbeat(client, master_a.addr, GROUP, "127.0.0.1@py")
        await wait_until(lambda: f"%RETRY%{GROUP}" in g.namesrv.routes.topicQueueTable, what="retry route")
        out = tmp_path / "export"

        result = await cli("exportMetrics", "-n", g.namesrv_addr, "-c", CLUSTER, "-f", str(out))
        assert result.exit_code == 0, result.output
        document = read_export(out / "metrics.json")
        report = document["evaluateReport"]
        assert set(report) == {BROKER_NAME, "broker-b"}  # one entry per broker group: its master's
        a, b = report[BROKER_NAME]["runtimeQuota"], report["broker-b"]["runtimeQuota"]
        assert (a["topicSize"], a["groupSize"], b["topicSize"], b["groupSize"]) == (2, 2, 1, 1)
        assert a["oneDayNum"]["normalOneDayInNum"] == 4
        assert b["oneDayNum"]["normalOneDayInNum"] == 6
        assert (
            a["oneDayNum"]["normalOneDayOutNum"] == b["oneDayNum"]["normalOneDayOutNum"] == 0
        )  # pulled today
        assert (a["tps"]["normalInTps"], a["tps"]["normalOutTps"]) == (0.2, 0.6)
        assert (b["tps"]["normalInTps"], b["tps"]["normalOutTps"]) == (0.1, 0.7)
        # as mqadmin, a group's consumers are found through its retry topic's route: broker-b's
        # report names the client that broker-a knows
        for name in (BROKER_NAME, "broker-b"):
            assert report[name]["runtimeVersion"]["clientInfo"] == ["PYTHON%V5_3_3"]
        totals = document["totalData"]
        assert totals["totalOneDayNum"] == {
            "normalOneDayInNum": 10,
            "normalOneDayOutNum": 0,
            "scheduleOneDayInNum": 0,
            "transOneDayInNum": 0,
        }
        assert totals["totalTps"] == {
            "totalNormalInTps": pytest.approx(0.3),
            "totalNormalOutTps": pytest.approx(1.3),
            "totalScheduleInTps": 0.0,
            "totalTransInTps": 0.0,
        }
