"""rmq-admin against a real name server (and a fake broker answering GET_BROKER_RUNTIME_INFO)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator

import pytest
import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from client.admin_common import default_namesrv
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import encode_header
from remoting.protocol.common import DataVersion, KVTable, TopicConfig, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.namesrv import RegisterBrokerBody, RegisterBrokerRequestHeader
from remoting.server import RemotingServer

CLUSTER = "DefaultCluster"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def register(
    client: RemotingClient, namesrv: str, name: str, addr: str, broker_id: int, *topics: str
) -> None:
    table = {t: TopicConfig(topicName=t, readQueueNums=4, writeQueueNums=4) for t in (name, *topics)}
    body = RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
            topicConfigTable=table, dataVersion=DataVersion(counter=1)
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        brokerName=name, brokerAddr=addr, clusterName=CLUSTER, haServerAddr=addr, brokerId=broker_id
    )
    reply = await client.invoke(
        namesrv, request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body), 5
    )
    assert reply.code == ResponseCode.SUCCESS


@pytest.fixture
async def cluster(nursery: trio.Nursery, tmp_path: os.PathLike[str]) -> AsyncIterator[str]:
    """A name server with broker-a (master answering runtime stats) and an unreachable slave."""
    controller = NamesrvController(NamesrvConfig(kvConfigPath=os.path.join(tmp_path, "kv.json")))
    await nursery.start(controller.run)
    server = RemotingServer(name="admin-test")
    ns_listener = await server.add_listener("127.0.0.1", 0, controller.processor_table, name="namesrv")

    broker_table = ProcessorTable()

    async def runtime_info(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        stats = KVTable(
            table={
                "brokerVersionDesc": "V5_3_3",
                "putTps": "12.5 10.0 9.0",
                "getTransferredTps": "3.25 1 1",
                "sendThreadPoolQueueSize": "0",
                "sendThreadPoolQueueHeadWaitTimeMills": "0",
                "pullThreadPoolQueueSize": "0",
                "pullThreadPoolQueueHeadWaitTimeMills": "0",
                "pageCacheLockTimeMills": "0",
                "commitLogDiskRatio": "0.25",
                "brokerActive": "true",
            }
        )
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = stats.encode()
        return response

    async def consume_by_who(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = b'{"groupList":["G1"]}'
        return response

    broker_table.register(RequestCode.GET_BROKER_RUNTIME_INFO, runtime_info)
    broker_table.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, consume_by_who)
    broker_listener = await server.add_listener("127.0.0.1", 0, broker_table, name="broker")
    await nursery.start(server.run)
    namesrv = f"127.0.0.1:{ns_listener.port}"
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    dead_addr = f"127.0.0.1:{dead.getsockname()[1]}"  # bound, never listening: connection refused
    async with RemotingClient() as client:
        await register(
            client, namesrv, "broker-a", f"127.0.0.1:{broker_listener.port}", 0, "TopicTest", "%RETRY%G1"
        )
        await register(client, namesrv, "broker-a", dead_addr, 1, "TopicTest")
        yield namesrv
    dead.close()


async def cli(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """Run the click command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner(env=env).invoke(main, list(args)))


async def test_cluster_list_prints_mqadmin_table(cluster: str) -> None:
    result = await cli("clusterList", "-n", cluster)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "#Cluster",
        "Name",
        "#Broker",
        "Name",
        "#BID",
        "#Addr",
        "#Version",
        "#InTPS(LOAD)",
        "#OutTPS(LOAD)",
        "#Timer(Progress)",
        "#PCWait(ms)",
        "#Hour",
        "#SPACE",
        "#ACTIVATED",
    ]
    master, slave = lines[1].split(), lines[2].split()
    assert master[:3] == [CLUSTER, "broker-a", "0"]
    assert master[4] == "V5_3_3"
    assert master[5] == "12.50(0,0ms)"
    assert master[-2:] == ["0.2500", "true"]
    assert slave[:3] == [CLUSTER, "broker-a", "1"]  # stats unreachable: known columns only
    assert slave[-1] == "false"
    assert len(lines) == 3


async def test_topic_list_plain_and_cluster_mode(cluster: str) -> None:
    result = await cli("topicList", "-n", cluster)
    assert result.exit_code == 0, result.output
    assert sorted(result.output.split()) == ["%RETRY%G1", "TopicTest", "broker-a"]
    result = await cli("topicList", "-n", cluster, "-c")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()[1:]]
    assert sorted(rows) == [[CLUSTER, "TopicTest", "G1"], [CLUSTER, "broker-a", "G1"]]


async def test_topic_route_pretty_and_list(cluster: str) -> None:
    result = await cli("topicRoute", "-n", cluster, "-t", "TopicTest")
    assert result.exit_code == 0, result.output
    assert result.output.startswith('{\n\t"brokerDatas":[{\n\t\t"brokerAddrs":{0:"127.0.0.1:')
    assert '"queueDatas":[{' in result.output
    assert '\t\t"readQueueNums":4,' in result.output
    result = await cli("topicRoute", "-n", cluster, "-t", "TopicTest", "-l")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "#ClusterName",
        "#BrokerName",
        "#BrokerAddrs",
        "#ReadQueue",
        "#WriteQueue",
        "#Perm",
    ]
    assert lines[1].split()[:2] == [CLUSTER, "broker-a"]
    assert lines[-1].split() == ["Total:", "1", "4", "4"]


async def test_errors_exit_1_with_a_clear_message(cluster: str) -> None:
    result = await cli("topicRoute", "-n", cluster, "-t", "NoSuchTopic")
    assert result.exit_code == 1
    assert "TOPIC_NOT_EXIST (17)" in result.output
    assert "No topic route info in name server for the topic: NoSuchTopic" in result.output
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    result = await cli("clusterList", "-n", f"127.0.0.1:{port}")
    dead.close()
    assert result.exit_code == 1
    assert "clusterList command failed" in result.output
    assert f"127.0.0.1:{port}" in result.output
    assert "nothing listens there: is rmq-container running, on these ports?" in result.output
    result = await cli("topicList", "-n", "not-an-address")
    assert result.exit_code == 1
    assert "bad address" in result.output


async def test_without_n_the_dev_name_server_moves_with_the_port_offset(cluster: str) -> None:
    """No -n and no $NAMESRV_ADDR: 127.0.0.1:9876 moved by $RMQ_PORT_OFFSET, as rmq-container
    moves it -- a shell that started a second copy with the variable reaches that copy."""
    port = int(cluster.rsplit(":", 1)[1])
    moved = {"NAMESRV_ADDR": None, "RMQ_PORT_OFFSET": str(port - 9876)}
    result = await cli("topicList", env=moved)
    assert result.exit_code == 0, result.output
    assert "TopicTest" in result.output.split()
    # $NAMESRV_ADDR still comes first
    result = await cli("topicList", env={**moved, "NAMESRV_ADDR": cluster, "RMQ_PORT_OFFSET": "1"})
    assert result.exit_code == 0, result.output
    # nothing there: the failure says where the address came from
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    free = dead.getsockname()[1]
    result = await cli("clusterList", env={**moved, "RMQ_PORT_OFFSET": str(free - 9876)})
    dead.close()
    assert result.exit_code == 1
    assert (
        f"connect to 127.0.0.1:{free} failed: Connection refused -- nothing listens there: is "
        "rmq-container running, on these ports? Without -n the name server is $NAMESRV_ADDR, else "
        f"127.0.0.1:9876 moved by $RMQ_PORT_OFFSET to 127.0.0.1:{free}"
    ) in result.output


@pytest.mark.parametrize(
    ("offset", "addr"),
    [
        (None, "127.0.0.1:9876"),
        ("", "127.0.0.1:9876"),
        (" 100 ", "127.0.0.1:9976"),
        ("-76", "127.0.0.1:9800"),
        # offsets the container refuses to start with are not followed
        ("ten", "127.0.0.1:9876"),
        ("60000", "127.0.0.1:9876"),
        ("-9876", "127.0.0.1:9876"),
    ],
)
def test_the_default_name_server_of_an_offset(
    monkeypatch: pytest.MonkeyPatch, offset: str | None, addr: str
) -> None:
    if offset is None:
        monkeypatch.delenv("RMQ_PORT_OFFSET", raising=False)
    else:
        monkeypatch.setenv("RMQ_PORT_OFFSET", offset)
    assert default_namesrv() == addr


async def test_python_dash_m_entry_point(cluster: str) -> None:
    proc = await trio.run_process(
        [sys.executable, "-m", "client.admin_cli", "topicList", "-n", cluster],
        capture_stdout=True,
        capture_stderr=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "TopicTest" in proc.stdout.decode().split()
