"""rmq-admin ``checkMsgSendRT`` and ``sendMsgStatus`` against a real broker and name server."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from client.admin_send_cli import COMMANDS
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from tests.integration.broker_env import BROKER_NAME, CLUSTER, broker_env
from tests.integration.broker_requests import describe, messages, pull_request
from tests.integration.test_admin_more_commands import create_topic

TOPIC = "SendRtTopic"

assert all(main.commands.get(c.name or "") is c for c in COMMANDS)


async def cli(*args: str) -> Result:
    """Run rmq-admin in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def test_check_msg_send_rt_cycles_the_queues_and_averages(tmp_path: Path) -> None:
    async with broker_env(tmp_path, autoCreateTopicEnable=False) as env:
        await create_topic(env, TOPIC, queues=3)
        result = await cli("checkMsgSendRT", "-n", env.namesrv_addr, "-t", TOPIC, "-a", "7", "-s", "64")
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #RT"
        rows = [line.split() for line in lines[1:8]]
        assert [(r[0], r[1], r[2]) for r in rows] == [(BROKER_NAME, str(i % 3), "true") for i in range(7)]
        assert all(r[3].isdigit() for r in rows), rows
        assert re.fullmatch(r"Avg RT: \d+\.\d\d", lines[8]), lines[8]
        assert len(lines) == 9
        # seven messages of 64 bytes "a", in queues 0, 1, 2, 0, 1, 2, 0
        counts = []
        for q in range(3):
            fields = {"topic": TOPIC, "queueId": str(q)}
            r = await env.call(request(RequestCode.GET_MAX_OFFSET, fields))
            assert r.code == ResponseCode.SUCCESS, describe(r)
            counts.append(int((r.ext_fields or {})["offset"]))
        assert counts == [3, 2, 2]

        # a topic nobody serves (no auto-creation here): every send fails, the lines say so
        result = await cli("checkMsgSendRT", "-n", env.namesrv_addr, "-t", "NoSuchTopic", "-a", "2")
        assert result.exit_code == 0, result.output
        assert [line.split()[:3] for line in result.output.splitlines()[1:3]] == [["null", "0", "false"]] * 2

        result = await cli("checkMsgSendRT", "-n", env.namesrv_addr, "-t", TOPIC, "-a", "0")
        assert result.exit_code == 2, result.output


async def test_send_msg_status_sends_to_the_brokers_own_topic(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        result = await cli("sendMsgStatus", "-n", env.namesrv_addr, "-b", BROKER_NAME, "-c", "3", "-s", "50")
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert len(lines) == 3, result.output
        shape = re.compile(
            r"rt=\d+ms, SendResult=SendResult \[sendStatus=SEND_OK, msgId=[0-9A-F]{32}, "
            r"offsetMsgId=[0-9A-F]{32}, messageQueue=MessageQueue \[topic=(\S+), brokerName=(\S+), "
            r"queueId=(\d+)\], queueOffset=(\d+), recallHandle=null\]"
        )
        matches = [shape.fullmatch(line) for line in lines]
        assert all(matches), lines
        assert {(m.group(1), m.group(2)) for m in matches if m} == {(BROKER_NAME, BROKER_NAME)}
        # the warm-up message (16 bytes asked: 2 x "hello jodie") and three of 50 (5 x)
        offsets = {(int(m.group(3)), int(m.group(4))) for m in matches if m}
        assert len(offsets) == 3
        queue_id = next(iter(offsets))[0]
        r = await env.call(pull_request("CG_SMS", BROKER_NAME, queue_id, 0, max_nums=32))
        assert r.code == ResponseCode.SUCCESS, describe(r)
        bodies = {m.body for m in messages(r)}
        assert b"hello jodie" * 5 in bodies, bodies


async def test_cluster_rt_one_line_per_broker(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        result = await cli("clusterRT", "-n", env.namesrv_addr, "-a", "4", "--count", "1")
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].split() == [
            "#Cluster",
            "Name",
            "#Broker",
            "Name",
            "#RT",
            "#successCount",
            "#failCount",
        ]
        (row,) = [line.split() for line in lines[1:]]
        assert (row[0], row[1], row[3], row[4]) == (CLUSTER, BROKER_NAME, "4", "0"), lines
        assert re.fullmatch(r"\d+\.\d\d", row[2]), row

        result = await cli(
            "clusterRT", "-n", env.namesrv_addr, "-a", "2", "-p", "true", "-m", "room1", "--count", "1"
        )
        assert result.exit_code == 0, result.output
        assert re.fullmatch(
            rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\|room1\|{CLUSTER}\|{BROKER_NAME}\|\d+", result.output.strip()
        ), result.output

        result = await cli("clusterRT", "-n", env.namesrv_addr, "-c", "NoCluster", "--count", "1")
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[1:] == ["cluster [NoCluster] not exist"]
