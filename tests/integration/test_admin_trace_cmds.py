"""``rmq-admin queryMsgTraceById`` against a real broker and name server.

Trace messages are sent as a Java client's trace dispatcher sends them: to the trace topic, the body
records in upstream's text format (fields joined by 0x01, records ended by 0x02), KEYS the ids of the
messages traced (and their own keys), space-separated. The command finds them by key (QUERY_MESSAGE)
and prints mqadmin's tables.
"""

from __future__ import annotations

import os
import socket
import time

import trio
from click.testing import CliRunner, Result

from client.admin import MQAdmin
from client.admin_trace_cli import COMMANDS, query_msg_trace_by_id
from remoting.protocol.common import TopicConfig
from remoting.protocol.topics import TRACE_TOPIC
from tests.integration.broker_env import BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import props, send_ok, send_request

assert [c.name for c in COMMANDS] == ["queryMsgTraceById"]

MSG_ID = "7F0000010BB818B4AAC2000000000001"
OTHER_ID = "7F0000010BB818B4AAC2000000000002"
T0 = 1700000000000  # 2023-11-14 22:13:20 UTC
TRACE_GROUP = "_INNER_TRACE_PRODUCER-DEFAULT"

PUB_HEADER = "#Type      #ProducerGroup       #ClientHost          #SendTime            #CostTimes #Status   "
SUB_HEADER = "#Type      #ConsumerGroup       #ClientHost          #ConsumerTime        #CostTimes #Status   "


def pub(msg_id: str, group: str, ts: int, cost: int, success: str = "true") -> str:
    return (
        f"Pub\x01{ts}\x01DefaultRegion\x01{group}\x01OrderTopic\x01{msg_id}\x01TagA\x01order-1\x01"
        f"127.0.0.1:10911\x0113\x01{cost}\x010\x01C0A8000700002A9F0000000000000010\x01{success}\x02"
    )


def sub_before(msg_id: str, group: str, ts: int) -> str:
    return f"SubBefore\x01{ts}\x01DefaultRegion\x01{group}\x01REQ-{group}\x01{msg_id}\x010\x01order-1\x02"


def sub_after(msg_id: str, group: str, ts: int, cost: int, success: str = "true") -> str:
    return (
        f"SubAfter\x01REQ-{group}\x01{msg_id}\x01{cost}\x01{success}\x01order-1\x010\x01{ts}\x01{group}\x02"
    )


async def cli(*args: str) -> Result:
    """Run the command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(query_msg_trace_by_id, list(args)))


async def send_trace(env: BrokerEnv, records: str | bytes, keys: list[str], topic: str = TRACE_TOPIC) -> None:
    body = records.encode() if isinstance(records, str) else records
    await send_ok(env, send_request(topic, body, properties=props(KEYS=" ".join(keys)), group=TRACE_GROUP))


async def indexed(env: BrokerEnv, topic: str = TRACE_TOPIC) -> None:
    """Wait until the topic has a route and every message sent is in the index."""
    await wait_until(lambda: topic in env.namesrv.routes.topicQueueTable, what=f"route of {topic}")
    await wait_until(lambda: env.broker.store.dispatch_behind_bytes == 0, what="index dispatch")


async def test_traces_of_a_message_print_as_mqadmins_tables(tmp_path: os.PathLike[str], utc: None) -> None:
    async with broker_env(tmp_path, traceTopicEnable=True) as env:
        # one batch of the producer's trace dispatcher: two messages' send records
        await send_trace(
            env,
            pub(MSG_ID, "PG_ORDER", T0, 12) + pub(OTHER_ID, "PG_ORDER", T0, 3),
            [MSG_ID, OTHER_ID, "order-1"],
        )
        # the consumers': CG_A tried, failed and retried; CG_B once
        await send_trace(
            env,
            sub_before(MSG_ID, "CG_A", T0 + 1000)
            + sub_after(MSG_ID, "CG_A", T0 + 1500, 40, "false")
            + sub_before(MSG_ID, "CG_B", T0 + 1000)
            + sub_after(MSG_ID, "CG_B", T0 + 1200, 7)
            + sub_before(MSG_ID, "CG_A", T0 + 11_000)
            + sub_after(MSG_ID, "CG_A", T0 + 11_005, 5),
            [MSG_ID, "order-1"],
        )
        await send_trace(env, sub_after(OTHER_ID, "CG_A", T0 + 2000, 1), [OTHER_ID, "order-1"])
        await indexed(env)

        result = await cli("-n", env.namesrv_addr, "-i", f" {MSG_ID} ")
        assert result.exit_code == 0, result.output
        assert result.stderr == ""
        # CG_A and CG_B fall in HashMap buckets 9 and 8: Java iterates CG_B first
        assert result.stdout.split("\n") == [
            PUB_HEADER,
            "Pub        PG_ORDER             127.0.0.1            2023-11-14 22:13:20  12ms       success   ",
            "",
            SUB_HEADER,
            "Sub        CG_B                 127.0.0.1            2023-11-14 22:13:21  7ms        success   ",
            "",
            SUB_HEADER,
            "Sub        CG_A                 127.0.0.1            2023-11-14 22:13:21  40ms       failed    ",
            "Sub        CG_A                 127.0.0.1            2023-11-14 22:13:31  5ms        success   ",
            "",
            "",
        ]

        # the other message's traces: its own Pub from the shared batch, and its consumer
        other = await cli("-n", env.namesrv_addr, "-i", OTHER_ID)
        assert other.exit_code == 0, other.output
        rows = [line.split()[:2] for line in other.stdout.splitlines() if line[:4] in ("Pub ", "Sub ")]
        assert rows == [["Pub", "PG_ORDER"], ["Sub", "CG_A"]]


async def test_trace_topic_window_and_max_num_options(tmp_path: os.PathLike[str], utc: None) -> None:
    topic = "MyTraceTopic"
    async with broker_env(tmp_path) as env:
        admin = MQAdmin(env.client, env.namesrv_addr)
        await admin.create_and_update_topic_config(
            env.addr, TopicConfig(topicName=topic, readQueueNums=1, writeQueueNums=1)
        )
        await send_trace(env, pub(MSG_ID, "PG_1", T0, 1), [MSG_ID], topic)
        await send_trace(env, pub(MSG_ID, "PG_2", T0 + 1000, 2), [MSG_ID], topic)
        await indexed(env, topic)

        both = await cli("-n", env.namesrv_addr, "-i", MSG_ID, "-t", f" {topic} ")
        assert both.exit_code == 0, both.output
        assert sorted(line.split()[1] for line in both.stdout.splitlines() if line.startswith("Pub ")) == [
            "PG_1",
            "PG_2",
        ]

        one = await cli("-n", env.namesrv_addr, "-i", MSG_ID, "-t", topic, "-c", "1")
        assert one.exit_code == 0, one.output
        assert sum(line.startswith("Pub ") for line in one.stdout.splitlines()) == 1

        # -b/-e select by the trace messages' store time: a window before they were sent has none
        now = int(time.time() * 1000)
        window = await cli(
            "-n", env.namesrv_addr, "-i", MSG_ID, "-t", topic, "-b", "0", "-e", str(now - 3_600_000)
        )
        assert window.exit_code == 1
        assert "query message by key finished, but no message." in window.stderr
        inside = await cli("-n", env.namesrv_addr, "-i", MSG_ID, "-t", topic, "-b", str(now - 3_600_000))
        assert inside.exit_code == 0, inside.output
        assert inside.stdout == both.stdout

        # a topic without a route is a clear failure
        missing = await cli("-n", env.namesrv_addr, "-i", MSG_ID, "-t", "NoSuchTraceTopic")
        assert missing.exit_code == 1
        assert missing.stderr.startswith("rmq-admin queryMsgTraceById command failed: ")
        assert "NoSuchTraceTopic" in missing.stderr

        bad = await cli("-n", env.namesrv_addr, "-i", MSG_ID, "-c", "2147483648")
        assert bad.exit_code == 2


async def test_a_message_without_traces_fails_as_mqadmins_query_does(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, traceTopicEnable=True) as env:
        await send_trace(env, pub(OTHER_ID, "PG", T0, 1), [OTHER_ID])
        await indexed(env)
        result = await cli("-n", env.namesrv_addr, "-i", MSG_ID)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr == (
            "rmq-admin queryMsgTraceById command failed: query message by key finished, but no message. "
            f"(no message of trace topic {TRACE_TOPIC} has the key {MSG_ID})\n"
        )

        # trace messages of the key whose records print nothing (mqadmin prints only Pub and SubAfter):
        # no output, no failure; nor does upstream's own test body of 100 zero bytes
        await send_trace(env, sub_before(MSG_ID, "CG_A", T0), [MSG_ID])
        await send_trace(env, b"\x00" * 100, [MSG_ID])
        await indexed(env)
        quiet = await cli("-n", env.namesrv_addr, "-i", MSG_ID)
        assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")


async def test_malformed_records_are_reported_and_skipped(tmp_path: os.PathLike[str], utc: None) -> None:
    async with broker_env(tmp_path, traceTopicEnable=True) as env:
        await send_trace(
            env,
            f"Pub\x01not-a-time\x01R\x01PG\x01T\x01{MSG_ID}\x02" + sub_after(MSG_ID, "CG_A", T0, 9),
            [MSG_ID],
        )
        await indexed(env)
        result = await cli("-n", env.namesrv_addr, "-i", MSG_ID)
        assert result.exit_code == 0, result.output
        assert result.stdout.split("\n") == [
            SUB_HEADER,
            "Sub        CG_A                 127.0.0.1            2023-11-14 22:13:20  9ms        success   ",
            "",
            "",
        ]
        [report] = result.stderr.splitlines()
        assert report.startswith("rmq-admin queryMsgTraceById: skipped record 1 of trace message ")
        assert report.endswith(
            f"Pub record: timeStamp 'not-a-time' is not a Java long: 'Pub|not-a-time|R|PG|T|{MSG_ID}'"
        )


async def test_an_unreachable_name_server_fails_with_exit_status_1() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = await cli("-n", f"127.0.0.1:{port}", "-i", MSG_ID, "--timeout", "2")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("rmq-admin queryMsgTraceById command failed: ")
