"""rmq-admin controller commands against a real controller peer and name server in one process
(``ContainerProcess``), plus fake brokers for ``getBrokerEpoch`` (one serving GET_BROKER_EPOCH_CACHE,
one that does not)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from container.config import ProcessConfig
from container.process import ContainerProcess
from controller.config import ControllerConfig
from namesrv.config import NamesrvConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import encode_header
from remoting.protocol.common import DataVersion, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.controller import EpochEntry, EpochEntryCache
from remoting.protocol.namesrv import RegisterBrokerBody, RegisterBrokerRequestHeader
from remoting.server import RemotingServer
from tests.cluster.harness import free_ports

C, B = "AdminCluster", "broker-x"


@dataclass
class Env:
    namesrv: str
    controller: str
    epoch_broker: str
    plain_broker: str
    client: RemotingClient


async def cli(*args: str) -> Result:
    """Run the click command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def ok(client: RemotingClient, address: str, code: int, ext: dict[str, object]) -> RemotingCommand:
    r = await client.invoke(address, request(code, ext), 3.0)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


@pytest.fixture
async def env(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Env]:
    (port,) = free_ports(1)
    config = ProcessConfig(
        source="test",
        namesrv=NamesrvConfig(listenPort=0, kvConfigPath=str(tmp_path / "kv.json")),
        controller=ControllerConfig(
            controllerDLegerGroup="admin",
            controllerDLegerPeers=f"n0-127.0.0.1:{port}",
            controllerDLegerSelfId="n0",
            controllerStorePath=str(tmp_path / "controller"),
            rmqRaftHeartbeatIntervalMillis=50,
            rmqRaftElectionTimeoutMillis=300,
        ),
    )
    config.nettyServer.bindAddress = "127.0.0.1"
    process = ContainerProcess(config)
    banner = await nursery.start(process.run)
    namesrv = next(line.split()[1] for line in banner if line.startswith("namesrv "))

    async def epoch_cache(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        body = EpochEntryCache(
            clusterName=C,
            brokerName=B,
            brokerId=1,
            epochList=[
                EpochEntry(epoch=1, startOffset=0, endOffset=100),
                EpochEntry(epoch=2, startOffset=100),
            ],
            maxOffset=250,
        )
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = body.encode()
        return response

    epoch_table = ProcessorTable()
    epoch_table.register(RequestCode.GET_BROKER_EPOCH_CACHE, epoch_cache)
    brokers = RemotingServer(name="fake-brokers")
    with_epochs = await brokers.add_listener("127.0.0.1", 0, epoch_table, name="epochs")
    without = await brokers.add_listener("127.0.0.1", 0, ProcessorTable(), name="plain")
    await nursery.start(brokers.run)
    async with RemotingClient() as client:
        e = Env(namesrv, f"127.0.0.1:{port}", with_epochs.address, without.address, client)
        header = RegisterBrokerRequestHeader(
            brokerName=B, brokerAddr=e.epoch_broker, clusterName=C, haServerAddr=e.epoch_broker, brokerId=0
        )
        body = RegisterBrokerBody(
            topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
                dataVersion=DataVersion(counter=1)
            )
        ).encode()
        r = await client.invoke(
            namesrv, request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body), 5
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        with trio.fail_after(10):  # the single peer elects itself
            while True:
                r = await client.invoke(e.controller, request(RequestCode.CONTROLLER_GET_METADATA_INFO), 3)
                if (r.ext_fields or {}).get("isLeader") == "true":
                    break
                await trio.sleep(0.02)
        yield e
    process.stop()


async def register_set(e: Env) -> None:
    names = {"clusterName": C, "brokerName": B}
    await ok(
        e.client,
        e.controller,
        RequestCode.CONTROLLER_APPLY_BROKER_ID,
        {**names, "appliedBrokerId": 1, "registerCheckCode": f"{e.epoch_broker};1"},
    )
    await ok(
        e.client,
        e.controller,
        RequestCode.BROKER_HEARTBEAT,
        {**names, "brokerAddr": e.epoch_broker, "brokerId": 1, "heartbeatTimeoutMills": 60_000},
    )
    await ok(
        e.client,
        e.controller,
        RequestCode.CONTROLLER_REGISTER_BROKER,
        {**names, "brokerId": 1, "brokerAddress": e.epoch_broker, "invokeTime": 1},
    )


async def test_get_controller_metadata_and_config(env: Env) -> None:
    result = await cli("getControllerMetaData", "-a", env.controller)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"\n#ControllerGroup\tadmin\n#ControllerLeaderId\tn0\n#ControllerLeaderAddress\t{env.controller}\n"
        f"#Peer:\tn0:{env.controller}\n"
    )
    result = await cli("getControllerConfig", "-a", env.controller)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"============{env.controller}============"
    assert f"{'controllerDLegerGroup':<50}=  admin" in lines


async def test_elect_get_sync_state_set_and_clean(env: Env) -> None:
    await register_set(env)
    result = await cli("electMaster", "-a", env.controller, "-c", C, "-bn", B, "-b", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"\n#ClusterName\t{C}\n#BrokerName\t{B}\n#BrokerMasterAddr\t{env.epoch_broker}\n"
        f"#MasterEpoch\t1\n#SyncStateSetEpoch\t1\n\t#Broker\t1\t{env.epoch_broker}\n"
    )
    # the designated master is master already: the controller says so and the command fails
    result = await cli("electMaster", "-a", env.controller, "-c", C, "-bn", B, "-b", "1")
    assert result.exit_code == 1
    assert "CONTROLLER_MASTER_STILL_EXIST (2011)" in result.stderr

    # by cluster (broker names from the name server), twice with -i
    result = await cli(
        "getSyncStateSet", "-n", env.namesrv, "-a", env.controller, "-c", C, "-i", "1", "--count", "2"
    )
    assert result.exit_code == 0, result.output
    block = (
        f"\n#brokerName\t{B}\n#MasterBrokerId\t1\n#MasterAddr\t{env.epoch_broker}\n#MasterEpoch\t1\n"
        f"#SyncStateSetEpoch\t1\n#SyncStateSetNums\t1\n\nInSyncReplica:\tReplicaIdentity{{brokerName='{B}', "
        f"brokerId=1, brokerAddress='{env.epoch_broker}', alive=true}}\n"
    )
    assert result.stdout == block * 2

    # a living broker is only cleaned with -l
    result = await cli("cleanBrokerMetadata", "-a", env.controller, "-c", C, "-bn", B, "-b", "1")
    assert result.exit_code == 1
    assert "CONTROLLER_INVALID_CLEAN_BROKER_METADATA" in result.stderr
    result = await cli("cleanBrokerMetadata", "-a", env.controller, "-bn", B)
    assert result.exit_code == 2
    assert "clusterName option can not be empty" in result.output
    result = await cli("cleanBrokerMetadata", "-a", env.controller, "-bn", B, "-b", "1;x", "-l")
    assert result.exit_code == 2
    result = await cli("cleanBrokerMetadata", "-a", env.controller, "-c", C, "-bn", B, "-l")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"clear broker {B} metadata from controller success! \n"
    result = await cli("getSyncStateSet", "-a", env.controller, "-b", B)
    assert result.exit_code == 0, result.output
    assert "#brokerName" not in result.stdout


async def test_an_address_of_the_wrong_kind_of_server_is_named_as_such(env: Env) -> None:
    """The name server's address given for the controllers' (and the other way round): the command
    says which request the address does not handle and which option wants which server -- at once,
    not after looking for a controller leader until the timeout (30 s here)."""
    with trio.fail_after(15):
        result = await cli("getSyncStateSet", "-a", env.namesrv, "-b", B, "--timeout", "30")
    assert result.exit_code == 1
    assert "not a controller" in result.stderr, result.stderr
    assert f"{env.namesrv} does not handle CONTROLLER_GET_METADATA_INFO" in result.stderr
    result = await cli("topicRoute", "-n", env.controller, "-t", "AnyTopic")
    assert result.exit_code == 1
    assert f"{env.controller} does not handle GET_ROUTEINFO_BY_TOPIC" in result.stderr, result.stderr
    assert "a name server with -n, a broker with -b, a controller with -a" in result.stderr


async def test_get_broker_epoch(env: Env) -> None:
    result = await cli("getBrokerEpoch", "-n", env.namesrv, "-c", C)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"\n#clusterName\t{C}\n#brokerName\t{B}\n#brokerAddr\t{env.epoch_broker}\n#brokerId\t1\n"
        "#Epoch: EpochEntry{epoch=1, startOffset=0, endOffset=100}\n"
        "#Epoch: EpochEntry{epoch=2, startOffset=100, endOffset=250}\n"
    )
    result = await cli("getBrokerEpoch", "-n", env.namesrv, "-b", B)
    assert result.exit_code == 0, result.output
    assert f"#brokerAddr\t{env.epoch_broker}\n" in result.stdout
    # a broker that does not serve the request: a clear error, exit 1
    result = await cli("getBrokerEpoch", "-n", env.namesrv, "-b", env.plain_broker)
    assert result.exit_code == 1
    assert "REQUEST_CODE_NOT_SUPPORTED" in result.stderr
    assert "GET_BROKER_EPOCH_CACHE (1007)" in result.stderr
    result = await cli("getBrokerEpoch", "-n", env.namesrv)
    assert result.exit_code == 2


async def test_update_controller_config_changes_the_key_and_refuses_black_listed_ones(env: Env) -> None:
    result = await cli(
        "updateControllerConfig", "-a", env.controller, "-k", "electMasterMaxRetryCount", "-v", " 7 "
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"update controller config success![{env.controller}]\nelectMasterMaxRetryCount : 7\n"
    )
    result = await cli("getControllerConfig", "-a", env.controller)
    assert result.exit_code == 0, result.output
    assert f"{'electMasterMaxRetryCount':<50}=  7" in result.stdout.splitlines()

    for key in ("configStorePath", "configBlackList", "rocketmqHome"):
        result = await cli("updateControllerConfig", "-a", env.controller, "-k", key, "-v", "/tmp/elsewhere")
        assert result.exit_code == 1, key
        assert result.stdout == ""
        assert result.stderr.startswith("rmq-admin updateControllerConfig command failed: NO_PERMISSION (16)")
        assert "Can not update config in black list." in result.stderr
    result = await cli("getControllerConfig", "-a", env.controller)
    assert "/tmp/elsewhere" not in result.stdout
    result = await cli("updateControllerConfig", "-a", env.controller, "-k", "electMasterMaxRetryCount")
    assert result.exit_code == 2
