"""rmq-admin name server commands (``wipeWritePerm``, ``addWritePerm``, ``getNamesrvConfig``,
``updateNamesrvConfig``) against two real name servers with a registered broker group, plus an
address where nothing listens."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import trio
from click.testing import CliRunner, Result

from client.admin import AdminError, MQAdmin
from client.admin_cli import main
from client.admin_namesrv_cli import NAMESRV_COMMANDS
from client.hedge import NAMESRV_HEDGE_S
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.headers import encode_header
from remoting.protocol.common import DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.namesrv import RegisterBrokerBody, RegisterBrokerRequestHeader, TopicRouteData
from remoting.server import RemotingServer
from tests.cluster.harness import silent_peer

CLUSTER, BROKER, TOPIC = "DefaultCluster", "broker-a", "TopicTest"

# the commands as rmq-admin offers them (its group registers NAMESRV_COMMANDS)
assert all(main.commands.get(c.name or "") is c for c in NAMESRV_COMMANDS)
rmq_admin = main


@dataclass
class Env:
    ns1: str
    ns2: str
    dead: str
    client: RemotingClient


async def cli(*args: str) -> Result:
    """Run the click command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(rmq_admin, list(args)))


async def register(client: RemotingClient, namesrv: str, broker_addr: str) -> None:
    table = {t: TopicConfig(topicName=t, readQueueNums=4, writeQueueNums=4) for t in (BROKER, TOPIC)}
    body = RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
            topicConfigTable=table, dataVersion=DataVersion(counter=1)
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        brokerName=BROKER, brokerAddr=broker_addr, clusterName=CLUSTER, haServerAddr=broker_addr, brokerId=0
    )
    reply = await client.invoke(
        namesrv, request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body), 5
    )
    assert reply.code == ResponseCode.SUCCESS, reply.remark


async def route_perm(client: RemotingClient, namesrv: str) -> int:
    """The perm of broker-a's queues of TopicTest in ``namesrv``'s route (what producers see)."""
    reply = await client.invoke(namesrv, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 5)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    (queues,) = TopicRouteData.decode(reply.body_bytes).queueDatas
    assert queues.brokerName == BROKER
    return queues.perm


@pytest.fixture
async def env(nursery: trio.Nursery, tmp_path: os.PathLike[str]) -> AsyncIterator[Env]:
    server = RemotingServer(name="admin-namesrv-test")
    addresses = []
    for i in (1, 2):
        namesrv = NamesrvController(NamesrvConfig(kvConfigPath=os.path.join(tmp_path, f"kv{i}.json")))
        await nursery.start(namesrv.run)
        listener = await server.add_listener("127.0.0.1", 0, namesrv.processor_table, name=f"namesrv{i}")
        addresses.append(listener.address)
    await nursery.start(server.run)
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    dead_addr = f"127.0.0.1:{dead.getsockname()[1]}"  # bound, never listening: connection refused
    async with RemotingClient() as client:
        for namesrv in addresses:
            await register(client, namesrv, "127.0.0.1:10911")
        yield Env(addresses[0], addresses[1], dead_addr, client)
    dead.close()


async def test_wipe_and_add_write_perm_on_every_name_server(env: Env) -> None:
    both = f"{env.ns1};{env.ns2}"
    result = await cli("wipeWritePerm", "-n", both, "-b", BROKER)
    assert result.exit_code == 0, result.output
    # two topics on broker-a: TopicTest and the broker's own topic
    assert result.stdout == (
        f"wipe write perm of broker[{BROKER}] in name server[{env.ns1}] OK, 2\n"
        f"wipe write perm of broker[{BROKER}] in name server[{env.ns2}] OK, 2\n"
    )
    assert [await route_perm(env.client, ns) for ns in (env.ns1, env.ns2)] == [4, 4]

    result = await cli("addWritePerm", "-n", both, "-b", f" {BROKER} ")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"add write perm of broker[{BROKER}] in name server[{env.ns1}] OK, 2\n"
        f"add write perm of broker[{BROKER}] in name server[{env.ns2}] OK, 2\n"
    )
    assert [await route_perm(env.client, ns) for ns in (env.ns1, env.ns2)] == [6, 6]

    # a broker group no name server knows: nothing to change, still OK
    result = await cli("wipeWritePerm", "-n", env.ns1, "-b", "broker-z")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wipe write perm of broker[broker-z] in name server[{env.ns1}] OK, 0\n"


async def test_write_perm_goes_on_past_an_unreachable_name_server_and_exits_1(env: Env) -> None:
    result = await cli("wipeWritePerm", "-n", f"{env.dead};{env.ns1}", "-b", BROKER)
    assert result.exit_code == 1
    assert result.stdout == (
        f"wipe write perm of broker[{BROKER}] in name server[{env.dead}] Failed\n"
        f"wipe write perm of broker[{BROKER}] in name server[{env.ns1}] OK, 2\n"
    )
    assert result.stderr.startswith("rmq-admin wipeWritePerm command failed: ")
    assert env.dead in result.stderr
    assert await route_perm(env.client, env.ns1) == 4

    result = await cli("addWritePerm", "-n", f"{env.ns1};{env.dead}", "-b", BROKER)
    assert result.exit_code == 1
    assert result.stdout == (
        f"add write perm of broker[{BROKER}] in name server[{env.ns1}] OK, 2\n"
        f"add write perm of broker[{BROKER}] in name server[{env.dead}] Failed\n"
    )
    assert result.stderr.startswith("rmq-admin addWritePerm command failed: ")
    assert env.dead in result.stderr
    assert await route_perm(env.client, env.ns1) == 6

    result = await cli("wipeWritePerm", "-n", env.ns1)
    assert result.exit_code == 2
    assert "Missing option '-b'" in result.output


async def test_get_namesrv_config_prints_a_sorted_block_per_name_server(env: Env) -> None:
    result = await cli("getNamesrvConfig", "-n", f"{env.ns1};{env.ns2}")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"============{env.ns1}============"
    second = lines.index(f"============{env.ns2}============")
    first_block, second_block = lines[1:second], lines[second + 1 :]
    assert f"{'enableAllTopicList':<50}=  true" in first_block
    assert f"{'productEnvName':<50}=  center" in second_block
    assert [line.split("=")[0].rstrip() for line in first_block] == sorted(
        line.split("=")[0].rstrip() for line in first_block
    )
    assert [line.split("=")[0] for line in first_block] == [line.split("=")[0] for line in second_block]

    result = await cli("getNamesrvConfig", "-n", f"{env.ns1};{env.dead}")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("rmq-admin getNamesrvConfig command failed: ")
    assert env.dead in result.stderr


async def test_update_namesrv_config_changes_every_name_server_and_refuses_black_listed_keys(
    env: Env,
) -> None:
    both = f"{env.ns1};{env.ns2}"
    result = await cli("updateNamesrvConfig", "-n", both, "-k", "productEnvName", "-v", " test-env ")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"update name server config success![{env.ns1}, {env.ns2}]\nproductEnvName : test-env\n"
    )
    result = await cli("getNamesrvConfig", "-n", both)
    assert result.exit_code == 0, result.output
    assert result.stdout.count(f"{'productEnvName':<50}=  test-env\n") == 2

    kv_before = f"{'kvConfigPath':<50}=  "
    for key in ("kvConfigPath", "configBlackList", "rocketmqHome"):
        result = await cli("updateNamesrvConfig", "-n", both, "-k", key, "-v", "/tmp/elsewhere")
        assert result.exit_code == 1, key
        assert result.stdout == ""
        assert result.stderr.startswith("rmq-admin updateNamesrvConfig command failed: NO_PERMISSION (16)")
        assert "Can not update config in black list." in result.stderr
    result = await cli("getNamesrvConfig", "-n", both)
    assert "/tmp/elsewhere" not in result.stdout
    assert result.stdout.count(kv_before) == 2


async def test_a_name_server_that_does_not_answer_costs_a_read_the_hedge_not_the_command(env: Env) -> None:
    """The first of the name servers takes connections and never answers (its host went dark):
    reads ask the next one too after NAMESRV_HEDGE_S, and later reads of the same admin ask the
    one that answered first. Before, each read waited out the call timeout on the silent one and
    the command failed with it (only a refused connection moved on to the next name server)."""
    async with silent_peer() as (silent, accepted):
        admin = MQAdmin(env.client, f"{silent};{env.ns2}", timeout=3.0)
        with trio.fail_after(2 * NAMESRV_HEDGE_S + 0.5):
            route = await admin.examine_topic_route_info(TOPIC)
            assert [b.brokerName for b in route.brokerDatas] == [BROKER]
            assert BROKER in (await admin.examine_broker_cluster_info()).brokerAddrTable
            assert TOPIC in (await admin.fetch_all_topic_list()).topicList
        assert len(accepted) == 1  # asked once; the second read went to the live one first
        # an error answer is the answer (not a reason to ask another name server)
        with pytest.raises(AdminError) as err:
            await admin.examine_topic_route_info("NoSuchTopic")
        assert err.value.code == ResponseCode.TOPIC_NOT_EXIST

        # the command line: a command with a silent first name server answers within the hedge
        began = trio.current_time()
        result = await cli("clusterList", "-n", f"{silent};{env.ns1}")
        assert result.exit_code == 0, result.output
        assert BROKER in result.output
        assert trio.current_time() - began < 2.5  # the call timeout alone is 5 s (DEFAULT_TIMEOUT)
