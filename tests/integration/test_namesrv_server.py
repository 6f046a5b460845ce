"""The name server over real sockets: a RemotingServer hosting NamesrvController, driven by
RemotingClient the way brokers and clients talk to it."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import trio

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import ProcessorTable
from remoting.headers import encode_header
from remoting.protocol.common import (
    DataVersion,
    KVTable,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicConfigSerializeWrapper,
    TopicList,
)
from remoting.protocol.namesrv import (
    ClusterInfo,
    GetBrokerMemberGroupResponseBody,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicRouteData,
    crc32,
)
from remoting.server import RemotingServer

CLUSTER = "DefaultCluster"
MASTER = "127.0.0.1:10911"
SLAVE = "127.0.0.1:10921"
TIMEOUT = 5.0


class Clock:
    """Injected wall clock (ms) so liveness can be driven without sleeping."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class Namesrv:
    controller: NamesrvController
    addr: str
    clock: Clock
    client: RemotingClient
    config: NamesrvConfig

    async def call(self, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(self.addr, cmd, TIMEOUT)


async def start_namesrv(nursery: trio.Nursery, config: NamesrvConfig) -> tuple[NamesrvController, str, Clock]:
    clock = Clock()
    controller = NamesrvController(config, now_ms=clock)
    await nursery.start(controller.run)
    server = RemotingServer(name="namesrv-test")
    listener = await server.add_listener("127.0.0.1", 0, controller.processor_table, name="namesrv")
    await nursery.start(server.run)
    return controller, f"127.0.0.1:{listener.port}", clock


@pytest.fixture
async def ns(nursery: trio.Nursery, tmp_path: os.PathLike[str]) -> AsyncIterator[Namesrv]:
    config = NamesrvConfig(
        kvConfigPath=os.path.join(tmp_path, "kvConfig.json"), scanNotActiveBrokerInterval=3_600_000
    )
    controller, addr, clock = await start_namesrv(nursery, config)
    async with RemotingClient() as client:
        yield Namesrv(controller, addr, clock, client, config)


def topics(*names: str, counter: int = 1) -> TopicConfigAndMappingSerializeWrapper:
    table = {n: TopicConfig(topicName=n, readQueueNums=4, writeQueueNums=4) for n in ("broker-a", *names)}
    return TopicConfigAndMappingSerializeWrapper(
        topicConfigTable=table, dataVersion=DataVersion(stateVersion=0, timestamp=1000, counter=counter)
    )


def register_cmd(
    addr: str = MASTER,
    broker_id: int = 0,
    *names: str,
    counter: int = 1,
    compressed: bool = False,
    crc: bool = True,
    version: int | None = None,
) -> RemotingCommand:
    body_obj = RegisterBrokerBody(
        topicConfigSerializeWrapper=topics(*names, counter=counter), filterServerList=[]
    )
    body = body_obj.encode_compressed() if compressed else body_obj.encode()
    header = RegisterBrokerRequestHeader(
        brokerName="broker-a",
        brokerAddr=addr,
        clusterName=CLUSTER,
        haServerAddr=addr.replace(":109", ":209"),
        brokerId=broker_id,
        compressed=compressed,
        bodyCrc32=crc32(body) if crc else 0,
    )
    cmd = request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body)
    if version is not None:
        cmd.version = version
    return cmd


def route_cmd(topic: str, *, version: int, standard_only: bool | None = None) -> RemotingCommand:
    cmd = request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": standard_only}
    )
    cmd.version = version
    return cmd


async def test_register_then_route_in_both_json_styles(ns: Namesrv) -> None:
    reply = await ns.call(register_cmd(MASTER, 0, "T1", "%RETRY%G1"))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert "masterAddr" not in (reply.ext_fields or {})

    old = await ns.call(route_cmd("T1", version=333))  # the C++ client's version
    assert old.code == ResponseCode.SUCCESS
    assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body_bytes
    with pytest.raises(json.JSONDecodeError):
        json.loads(old.body_bytes)

    new = await ns.call(route_cmd("T1", version=479))
    assert json.loads(new.body_bytes)["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER}
    opted = await ns.call(route_cmd("T1", version=333, standard_only=True))
    assert opted.body_bytes == new.body_bytes
    route = TopicRouteData.decode(old.body_bytes)
    assert route == TopicRouteData.decode(new.body_bytes)
    assert route.queueDatas == [QueueData(brokerName="broker-a", readQueueNums=4, writeQueueNums=4, perm=6)]

    retry = await ns.call(route_cmd("%RETRY%G1", version=333))
    assert retry.code == ResponseCode.SUCCESS
    missing = await ns.call(route_cmd("NOPE", version=333))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark is not None
    assert missing.remark.startswith("No topic route info in name server for the topic: NOPE")


async def test_slave_learns_master_and_ha_address(ns: Namesrv) -> None:
    await ns.call(register_cmd(MASTER, 0, "T1"))
    reply = await ns.call(register_cmd(SLAVE, 1, "T1"))
    assert reply.code == ResponseCode.SUCCESS
    assert reply.ext_fields == {"masterAddr": MASTER, "haServerAddr": "127.0.0.1:20911"}
    member = await ns.call(
        request(RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": CLUSTER, "brokerName": "broker-a"})
    )
    group = GetBrokerMemberGroupResponseBody.decode(member.body_bytes).brokerMemberGroup
    assert group is not None
    assert group.brokerAddrs == {0: MASTER, 1: SLAVE}
    assert b'"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}' in member.body_bytes


async def test_cluster_info_and_topic_lists(ns: Namesrv) -> None:
    await ns.call(register_cmd(MASTER, 0, "T1", "T2"))
    info = ClusterInfo.decode((await ns.call(request(RequestCode.GET_BROKER_CLUSTER_INFO))).body_bytes)
    assert info.clusterAddrTable == {CLUSTER: ["broker-a"]}
    assert info.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER}
    listing = await ns.call(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert sorted(TopicList.decode(listing.body_bytes).topicList) == ["T1", "T2", "broker-a"]
    by_cluster = await ns.call(request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}))
    assert sorted(TopicList.decode(by_cluster.body_bytes).topicList) == ["T1", "T2", "broker-a"]
    ns.config.enableAllTopicList = False
    disabled = await ns.call(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert (disabled.code, disabled.remark) == (ResponseCode.SYSTEM_ERROR, "disable")


async def test_query_data_version_and_heartbeat_keep_broker_alive(ns: Namesrv) -> None:
    async with RemotingClient(name="test.broker") as broker:  # the broker's own connection

        async def from_broker(cmd: RemotingCommand) -> RemotingCommand:
            return await broker.invoke(ns.addr, cmd, TIMEOUT)

        await from_broker(register_cmd(MASTER, 0, "T1", counter=7))
        query = {"brokerName": "broker-a", "brokerAddr": MASTER, "clusterName": CLUSTER, "brokerId": 0}
        same = DataVersion(stateVersion=0, timestamp=1000, counter=7)
        reply = await from_broker(request(RequestCode.QUERY_DATA_VERSION, query, same.encode()))
        assert reply.ext_fields == {"changed": "false"}
        assert DataVersion.decode(reply.body_bytes) == same
        newer = DataVersion(stateVersion=0, timestamp=2000, counter=8)
        reply = await from_broker(request(RequestCode.QUERY_DATA_VERSION, query, newer.encode()))
        assert reply.ext_fields == {"changed": "true"}

        # Liveness: 100 s later a heartbeat arrives; at 200 s (120 s timeout) the broker still lives.
        ns.clock.now += 100_000
        hb = {"clusterName": CLUSTER, "brokerAddr": MASTER, "brokerName": "broker-a"}
        assert (await from_broker(request(RequestCode.BROKER_HEARTBEAT, hb))).code == ResponseCode.SUCCESS
        ns.clock.now += 100_000
        ns.controller.scan_not_active_brokers()
        assert (await ns.call(route_cmd("T1", version=479))).code == ResponseCode.SUCCESS
        ns.clock.now += 30_000
        ns.controller.scan_not_active_brokers()
        assert (await ns.call(route_cmd("T1", version=479))).code == ResponseCode.TOPIC_NOT_EXIST
        # and, as upstream closes an expired broker's channel, its connection is closed
        with trio.fail_after(TIMEOUT):
            while broker.connection(ns.addr) is not None:
                await trio.sleep(0.01)


async def test_unregister_and_delete_topic(ns: Namesrv) -> None:
    await ns.call(register_cmd(MASTER, 0, "T1", "T2"))
    deleted = await ns.call(request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T2"}))
    assert deleted.code == ResponseCode.SUCCESS
    assert (await ns.call(route_cmd("T2", version=479))).code == ResponseCode.TOPIC_NOT_EXIST
    assert (await ns.call(route_cmd("T1", version=479))).code == ResponseCode.SUCCESS
    unreg = {"brokerName": "broker-a", "brokerAddr": MASTER, "clusterName": CLUSTER, "brokerId": 0}
    assert (await ns.call(request(RequestCode.UNREGISTER_BROKER, unreg))).code == ResponseCode.SUCCESS
    assert (await ns.call(route_cmd("T1", version=479))).code == ResponseCode.TOPIC_NOT_EXIST
    info = ClusterInfo.decode((await ns.call(request(RequestCode.GET_BROKER_CLUSTER_INFO))).body_bytes)
    assert info.clusterAddrTable == {}


async def test_write_perm_wipe_and_add(ns: Namesrv) -> None:
    await ns.call(register_cmd(MASTER, 0, "T1"))
    wiped = await ns.call(request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert wiped.ext_fields == {"wipeTopicCount": "2"}
    route = TopicRouteData.decode((await ns.call(route_cmd("T1", version=479))).body_bytes)
    assert route.queueDatas[0].perm == 4
    added = await ns.call(request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert added.ext_fields == {"addTopicCount": "2"}


async def test_kv_config_round_trip_and_persistence(ns: Namesrv, nursery: trio.Nursery) -> None:
    put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1", "value": "broker-a:4"}
    assert (await ns.call(request(RequestCode.PUT_KV_CONFIG, put))).code == ResponseCode.SUCCESS
    got = await ns.call(request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"}))
    assert got.ext_fields == {"value": "broker-a:4"}
    listing = await ns.call(request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}))
    assert KVTable.decode(listing.body_bytes).table == {"T1": "broker-a:4"}
    # The order-topic KV comes back to registering brokers.
    reg = await ns.call(register_cmd(MASTER, 0, "T1"))
    assert KVTable.decode(reg.body_bytes).table == {"T1": "broker-a:4"}

    image = await trio.Path(ns.config.kvConfigPath).read_bytes()
    assert json.loads(image) == {"configTable": {"ORDER_TOPIC_CONFIG": {"T1": "broker-a:4"}}}
    _, addr, _ = await start_namesrv(nursery, ns.config)
    again = await ns.client.invoke(
        addr, request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"}), TIMEOUT
    )
    assert again.ext_fields == {"value": "broker-a:4"}

    rm = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"}
    assert (await ns.call(request(RequestCode.DELETE_KV_CONFIG, rm))).code == ResponseCode.SUCCESS
    gone = await ns.call(request(RequestCode.GET_KV_CONFIG, rm))
    assert gone.code == ResponseCode.QUERY_NOT_FOUND
    empty = await ns.call(request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "nope"}))
    assert empty.code == ResponseCode.QUERY_NOT_FOUND


async def test_closed_broker_connection_removes_it_at_once(ns: Namesrv) -> None:
    async with RemotingClient() as broker_side:
        reply = await broker_side.invoke(ns.addr, register_cmd(MASTER, 0, "T1"), TIMEOUT)
        assert reply.code == ResponseCode.SUCCESS
        assert (await ns.call(route_cmd("T1", version=479))).code == ResponseCode.SUCCESS
    with trio.fail_after(5):
        while (await ns.call(route_cmd("T1", version=479))).code != ResponseCode.TOPIC_NOT_EXIST:
            await trio.sleep(0.01)


async def test_compressed_and_pre_v3_0_11_registrations(ns: Namesrv) -> None:
    reply = await ns.call(register_cmd(MASTER, 0, "Z1", compressed=True))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert (await ns.call(route_cmd("Z1", version=479))).code == ResponseCode.SUCCESS
    bare = TopicConfigSerializeWrapper(
        topicConfigTable={n: TopicConfig(topicName=n) for n in ("old-a", "OLD1")},
        dataVersion=DataVersion(counter=1),
    )
    header = {
        "brokerName": "old-a",
        "brokerAddr": "127.0.0.1:10811",
        "clusterName": CLUSTER,
        "haServerAddr": "x",
        "brokerId": 0,
    }
    cmd = request(RequestCode.REGISTER_BROKER, header, bare.encode())
    cmd.version = 36
    assert (await ns.call(cmd)).code == ResponseCode.SUCCESS
    route = TopicRouteData.decode((await ns.call(route_cmd("OLD1", version=479))).body_bytes)
    assert route.brokerDatas[0].brokerAddrs == {0: "127.0.0.1:10811"}


async def test_bad_requests_get_error_responses(ns: Namesrv) -> None:
    missing = await ns.call(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {}))
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert "topic" in (missing.remark or "")
    partial = await ns.call(request(RequestCode.REGISTER_BROKER, {"brokerName": "b", "brokerAddr": MASTER}))
    assert partial.code == ResponseCode.SYSTEM_ERROR
    assert "clusterName" in (partial.remark or "") or "haServerAddr" in (partial.remark or "")
    bad_crc = register_cmd(MASTER, 0, "T1")
    assert bad_crc.ext_fields is not None
    bad_crc.ext_fields["bodyCrc32"] = str((crc32(bad_crc.body_bytes) + 1) & 0x7FFFFFFF)
    reply = await ns.call(bad_crc)
    assert (reply.code, reply.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    garbage = register_cmd(MASTER, 0, "T1", crc=False)
    garbage.body = b"{not json"
    reply = await ns.call(garbage)
    assert reply.code == ResponseCode.SYSTEM_ERROR
    assert (reply.remark or "").startswith("Failed to decode RegisterBrokerBody")
    unknown = await ns.call(request(RequestCode.SEND_MESSAGE, {}))
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # The server still works after all that.
    assert (await ns.call(register_cmd(MASTER, 0, "T1"))).code == ResponseCode.SUCCESS


async def test_namesrv_config_get_and_update(ns: Namesrv) -> None:
    got = await ns.call(request(RequestCode.GET_NAMESRV_CONFIG))
    assert "scanNotActiveBrokerInterval=3600000" in got.body_bytes.decode().splitlines()
    upd = request(RequestCode.UPDATE_NAMESRV_CONFIG, None, b"enableAllTopicList=false\n")
    assert (await ns.call(upd)).code == ResponseCode.SUCCESS
    assert ns.config.enableAllTopicList is False
    black = request(RequestCode.UPDATE_NAMESRV_CONFIG, None, b"kvConfigPath=/tmp/x\n")
    assert (await ns.call(black)).code == ResponseCode.NO_PERMISSION
    # an upstream key without meaning here is accepted (as in a config file), with the others applied
    ignored = request(
        RequestCode.UPDATE_NAMESRV_CONFIG, None, b"clientRequestThreadPoolNums=16\nenableAllTopicList=true\n"
    )
    assert (await ns.call(ignored)).code == ResponseCode.SUCCESS
    assert ns.config.enableAllTopicList is True
    typo = await ns.call(request(RequestCode.UPDATE_NAMESRV_CONFIG, None, b"enableAllTopicLsit=false\n"))
    assert (typo.code, typo.remark) == (ResponseCode.SYSTEM_ERROR, "unknown config keys: enableAllTopicLsit")
    assert ns.config.enableAllTopicList is True


async def test_min_broker_id_notification_reaches_brokers(
    nursery: trio.Nursery, tmp_path: os.PathLike[str]
) -> None:
    config = NamesrvConfig(
        kvConfigPath=os.path.join(tmp_path, "kv.json"),
        notifyMinBrokerIdChanged=True,
        supportActingMaster=True,
    )
    controller, addr, _ = await start_namesrv(nursery, config)
    # A fake slave broker that records NOTIFY_MIN_BROKER_ID_CHANGE.
    received: list[dict[str, str]] = []
    table = ProcessorTable()

    async def on_notify(ctx: object, cmd: RemotingCommand) -> None:
        received.append(dict(cmd.ext_fields or {}))

    table.register(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, on_notify)
    slave_server = RemotingServer(name="fake-slave")
    slave_listener = await slave_server.add_listener("127.0.0.1", 0, table)
    await nursery.start(slave_server.run)
    slave_addr = f"127.0.0.1:{slave_listener.port}"

    async with RemotingClient() as client:
        for broker_addr, broker_id in ((slave_addr, 1), (MASTER, 0)):
            cmd = register_cmd(broker_addr, broker_id, "T1")
            assert cmd.ext_fields is not None
            cmd.ext_fields["enableActingMaster"] = "true"
            assert (await client.invoke(addr, cmd, TIMEOUT)).code == ResponseCode.SUCCESS
        assert controller.routes.min_broker_id("broker-a") == 0
        with trio.fail_after(5):
            while not received:
                await trio.sleep(0.01)
    assert received[0]["minBrokerId"] == "0"
    assert received[0]["minBrokerAddr"] == MASTER
    assert received[0]["haBrokerAddr"] == "127.0.0.1:20911"
