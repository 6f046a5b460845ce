"""rmq-admin broker commands (getBrokerConfig, updateBrokerConfig, consumerConnection,
producerConnection, deleteSubGroup) against a real broker and name server."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.protocol.broker import ConsumerData, HeartbeatData, ProducerData, SubscriptionData
from tests.integration.broker_env import CLUSTER, BrokerEnv, broker_env, wait_until

TOPIC = "CliConnTopic"
GROUP = "CliConnGroup"
PRODUCER_GROUP = "CliProducerGroup"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: fcntl.F_SETPIPE_SZ (Linux; in the fcntl module from Python 3.10 on)
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


async def cli(*args: str) -> Result:
    """Run rmq-admin in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def heartbeat(env: BrokerEnv, *, consumer: str | None = GROUP, producer: str | None = None) -> None:
    data = HeartbeatData(
        clientID="127.0.0.1@cli-test",
        producerDataSet=[ProducerData(groupName=producer)] if producer else [],
        consumerDataSet=[
            ConsumerData(
                groupName=consumer,
                consumeType="CONSUME_PASSIVELY",
                messageModel="BROADCASTING",
                consumeFromWhere="CONSUME_FROM_FIRST_OFFSET",
                subscriptionDataSet=[SubscriptionData(topic=TOPIC, subString="TagA || TagB")],
            )
        ]
        if consumer
        else [],
    )
    response = await env.call(request(RequestCode.HEART_BEAT, body=data.encode()))
    assert response.code == ResponseCode.SUCCESS, response.remark


def config_lines(output: str) -> dict[str, str]:
    """``key = value`` lines of getBrokerConfig (mqadmin's ``%-50s=  %s``)."""
    table = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=  ")
        if sep and not line.startswith("="):
            assert len(key) == 50, line
            table[key.strip()] = value
    return table


async def test_get_and_update_broker_config(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        one = await cli("getBrokerConfig", "-n", ns, "-b", env.addr)
        assert one.exit_code == 0, one.output
        assert one.output.splitlines()[0] == f"============{env.addr}============"
        table = config_lines(one.output)
        assert table["brokerClusterName"] == CLUSTER
        assert table["slaveReadEnable"] == "false"

        cluster = await cli("getBrokerConfig", "-n", ns, "-c", CLUSTER)
        assert cluster.exit_code == 0, cluster.output
        assert cluster.output.splitlines()[0] == f"============Master: {env.addr}============"
        assert config_lines(cluster.output)["brokerName"] == env.broker.broker_config.brokerName

        updated = await cli(
            "updateBrokerConfig", "-n", ns, "-b", env.addr, "-k", "slaveReadEnable", "-v", "true"
        )
        assert updated.exit_code == 0, updated.output
        assert updated.output.strip() == f"update broker config success, {env.addr}"
        assert env.broker.broker_config.slaveReadEnable is True
        again = await cli("getBrokerConfig", "-n", ns, "-b", env.addr)
        assert config_lines(again.output)["slaveReadEnable"] == "true"

        # -c: the cluster's masters; -a <anything>: slaves too (here the one master either way)
        every = await cli(
            "updateBrokerConfig", "-n", ns, "-c", CLUSTER, "-a", "true", "-k", "maxMessageSize", "-v", "65536"
        )
        assert every.exit_code == 0, every.output
        assert env.broker.store_config.maxMessageSize == 65536

        # a key the broker refuses: its reason, per broker, and exit status 1
        refused = await cli("updateBrokerConfig", "-n", ns, "-c", CLUSTER, "-k", "listenPort", "-v", "1")
        assert refused.exit_code == 1
        assert f"update broker config failed, {env.addr}: NO_PERMISSION (16)" in refused.output
        assert "take effect only at start-up" in refused.output
        assert "rmq-admin updateBrokerConfig command failed: NO_PERMISSION (16)" in refused.output

        no_target = await cli("getBrokerConfig", "-n", ns)
        assert no_target.exit_code == 2
        assert "give -b (broker address) or -c (cluster name)" in no_target.output
        unknown = await cli("getBrokerConfig", "-n", ns, "-c", "NoSuchCluster")
        assert unknown.exit_code == 1
        assert "Make sure the specified clusterName exists" in unknown.output


async def test_consumer_and_producer_connection(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        await heartbeat(env, producer=PRODUCER_GROUP)
        await wait_until(lambda: f"%RETRY%{GROUP}" in env.namesrv.routes.topicQueueTable, what="retry route")

        for extra in ([], ["-b", env.addr]):
            result = await cli("consumerConnection", "-n", ns, "-g", GROUP, *extra)
            assert result.exit_code == 0, result.output
            lines = result.output.splitlines()
            assert lines[0].split() == ["#ClientId", "#ClientAddr", "#Language", "#Version"]
            assert lines[1].split()[0] == "127.0.0.1@cli-test"
            assert lines[1].split()[2:] == ["PYTHON", "V5_3_3"]
            assert "Below is subscription:" in lines
            assert f"{TOPIC:<20} TagA || TagB" in lines
            assert lines[-3:] == [
                "ConsumeType: CONSUME_PASSIVELY",
                "MessageModel: BROADCASTING",
                "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET",
            ]

        await wait_until(lambda: f"%RETRY%{GROUP}" in env.namesrv.routes.topicQueueTable, what="route")
        produced = await cli("producerConnection", "-n", ns, "-g", PRODUCER_GROUP, "-t", f"%RETRY%{GROUP}")
        assert produced.exit_code == 0, produced.output
        row = produced.output.strip().split()
        assert row[0] == "0001"
        assert row[1] == "127.0.0.1@cli-test"
        assert row[3:] == ["PYTHON", "V5_3_3"]

        nobody = await cli("producerConnection", "-n", ns, "-g", "NoSuchProducers", "-t", f"%RETRY%{GROUP}")
        assert nobody.exit_code == 1
        assert "Not found the producer group connection" in nobody.output
        assert "the producer group[NoSuchProducers] not exist" in nobody.output
        offline = await cli("consumerConnection", "-n", ns, "-g", GROUP + "X", "-b", env.addr)
        assert offline.exit_code == 1
        assert "CONSUMER_NOT_ONLINE (206)" in offline.output


async def test_delete_sub_group_by_broker_and_by_cluster(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        groups = env.broker.groups.table
        for name in ("CliDel1", "CliDel2"):
            created = await cli("updateSubGroup", "-n", ns, "-b", env.addr, "-g", name)
            assert created.exit_code == 0, created.output
        await heartbeat(env, consumer="CliDel2")  # creates %RETRY%CliDel2 on the broker and in routes
        await wait_until(lambda: "%RETRY%CliDel2" in env.namesrv.routes.topicQueueTable, what="retry route")
        topic = await cli("updateTopic", "-n", ns, "-b", env.addr, "-t", TOPIC)
        assert topic.exit_code == 0, topic.output
        fields = {"consumerGroup": "CliDel1", "topic": TOPIC, "queueId": 0, "commitOffset": 3}
        committed = await env.call(request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
        assert committed.code == ResponseCode.SUCCESS
        query = {"consumerGroup": "CliDel1", "topic": TOPIC, "queueId": 0}
        offset = await env.call(request(RequestCode.QUERY_CONSUMER_OFFSET, query))
        assert (offset.ext_fields or {}).get("offset") == "3"

        by_broker = await cli("deleteSubGroup", "-n", ns, "-b", env.addr, "-g", "CliDel1", "-r", "TRUE")
        assert by_broker.exit_code == 0, by_broker.output
        assert (
            by_broker.output.strip()
            == f"delete subscription group [CliDel1] from broker [{env.addr}] success."
        )
        assert "CliDel1" not in groups
        offset = await env.call(request(RequestCode.QUERY_CONSUMER_OFFSET, query))
        # -r TRUE removed the committed offset: the broker answers as for a new group of an empty queue
        assert (offset.code, (offset.ext_fields or {}).get("offset")) == (ResponseCode.SUCCESS, "0")

        by_cluster = await cli("deleteSubGroup", "-n", ns, "-c", CLUSTER, "-g", "CliDel2")
        assert by_cluster.exit_code == 0, by_cluster.output
        assert by_cluster.output.strip() == (
            f"delete subscription group [CliDel2] from broker [{env.addr}] in cluster [{CLUSTER}] success."
        )
        assert "CliDel2" not in groups
        # as mqadmin: the group's retry topic is gone from the broker and from the name server
        assert "%RETRY%CliDel2" not in env.broker.topics.table
        assert "%RETRY%CliDel2" not in env.namesrv.routes.topicQueueTable


def _read_one_line_then_close(args: list[str]) -> tuple[bytes, int, bytes]:
    """Run rmq-admin with its stdout in a 4 KiB pipe; read one line, close the pipe (as ``| head -1``
    does), and return that line, the exit status and stderr."""
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, bufsize=0) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        fcntl.fcntl(proc.stdout.fileno(), F_SETPIPE_SZ, 4096)
        first = proc.stdout.readline()  # unbuffered: reads this line only
        proc.stdout.close()
        err = proc.stderr.read()
        return first, proc.wait(timeout=30), err


async def test_output_into_a_closed_pipe_ends_quietly(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        # getBrokerConfig prints ~10 KiB: more than the pipe holds, so the writer meets the closed pipe
        args = [
            sys.executable,
            "-m",
            "client.admin_cli",
            "getBrokerConfig",
            "-n",
            env.namesrv_addr,
            "-b",
            env.addr,
        ]
        first, status, err = await trio.to_thread.run_sync(_read_one_line_then_close, args)
        assert first.decode().strip() == f"============{env.addr}============"
        assert b"Traceback" not in err, err.decode()
        assert b"BrokenPipeError" not in err, err.decode()
        assert status == -signal.SIGPIPE  # as a C tool's would: killed by SIGPIPE, nothing printed
