"""rmq-admin ``printMsg`` and ``printMsgByQueue`` against a real broker and name server: every
message once with its body, tag filtering, a store-time window, tag counts of one queue, an LMQ
read through its parent topic's route, and the failures a user can cause."""

from __future__ import annotations

import os
import re
import time

import click
import trio
from click.testing import CliRunner, Result

from client.admin_print_cli import COMMANDS, print_msg, print_msg_by_queue
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from tests.integration.broker_env import BROKER_NAME, BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import describe, send_text
from tests.integration.test_admin_more_commands import create_topic as create_routed_topic

TOPIC = "PrintMsgTopic"
SEPARATOR = "-" * 56

assert [c.name for c in COMMANDS] == ["printMsg", "printMsgByQueue"]


async def cli(command: click.Command, *args: str) -> Result:
    """Run one rmq-admin command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(command, list(args)))


async def create_topic(env: BrokerEnv, topic: str = TOPIC, *, queues: int = 2) -> None:
    await create_routed_topic(env, topic, queues=queues)


def mq(queue_id: int, topic: str = TOPIC) -> str:
    return f"MessageQueue [topic={topic}, brokerName={BROKER_NAME}, queueId={queue_id}]"


def bodies(output: str) -> list[str]:
    """The BODY part of every message line, in order."""
    return [line.rsplit(" BODY: ", 1)[1] for line in output.splitlines() if line.startswith("MSGID: ")]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def next_millisecond() -> int:
    """Wait until the wall clock has moved past the current millisecond; the new one."""
    start = now_ms()
    await wait_until(lambda: now_ms() > start, what="the clock to tick")
    return now_ms()


async def test_print_msg_prints_every_message_of_every_queue_once_with_its_body(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        for i in range(5):  # m0 m2 m4 in queue 0, m1 m3 in queue 1
            await send_text(
                env, TOPIC, f"m{i}", queue_id=i % 2, TAGS="TagA" if i % 2 else "TagB", KEYS=f"k{i}"
            )

        result = await cli(print_msg, "-n", env.namesrv_addr, "-t", f" {TOPIC} ", "-d", "true")
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == f"minOffset=0, maxOffset=3, {mq(0)}"
        assert f"minOffset=0, maxOffset=2, {mq(1)}" in lines
        assert lines.count(SEPARATOR) == 2
        assert bodies(result.output) == ["m0", "m2", "m4", "m1", "m3"]

        # the line: MSGID (the unique key the broker gave the message), Java's MessageExt.toString()
        # (the offset id as msgId, the body as signed bytes), the body
        first = next(line for line in lines if line.startswith("MSGID: "))
        shape = re.fullmatch(
            r"MSGID: (?P<id>[0-9A-F]{32}) MessageExt \[brokerName=broker-a, queueId=0, storeSize=\d+, "
            r"queueOffset=0, sysFlag=0, bornTimestamp=1, bornHost=/127\.0\.0\.1:\d+, storeTimestamp=\d+, "
            r"storeHost=/127\.0\.0\.1:\d+, msgId=(?P<offset_id>[0-9A-F]{32}), commitLogOffset=0, "
            r"bodyCRC=\d+, reconsumeTimes=0, preparedTransactionOffset=0, "
            r"toString\(\)=Message\{topic='PrintMsgTopic', flag=0, properties=\{(?P<props>[^}]*)\}, "
            r"body=\[109, 48\], transactionId='null'\}\] BODY: m0",
            first,
        )
        assert shape is not None, first
        assert shape["offset_id"].startswith("7F000001")  # 127.0.0.1, then port and offset 0
        assert shape["offset_id"].endswith("0" * 16)
        # Java's HashMap order of these keys: buckets 28 (CLUSTER, then UNIQ_KEY), 48, 62, 87, 118 of 128
        assert shape["props"] == (
            f"CLUSTER=TestCluster, UNIQ_KEY={shape['id']}, MIN_OFFSET=0, TAGS=TagB, KEYS=k0, MAX_OFFSET=3"
        )

        # -d defaults to true for printMsg; -d false hides the bodies
        default = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC)
        assert bodies(default.output) == ["m0", "m2", "m4", "m1", "m3"]
        hidden = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-d", "false")
        assert bodies(hidden.output) == ["NOT PRINT BODY"] * 5

        # -c decodes the body with that charset
        await send_text(env, TOPIC, "é", queue_id=1)
        latin = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-c", "ISO-8859-1")
        assert bodies(latin.output)[-1] == "é".encode().decode("latin-1")


async def test_print_msg_sub_expression_prints_only_the_matching_tags(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, queues=1)
        for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA", "TagB"]):
            await send_text(env, TOPIC, f"{tag}-{i}", TAGS=tag)
        await send_text(env, TOPIC, "untagged")

        only_a = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-s", "TagA")
        assert only_a.exit_code == 0, only_a.output
        assert bodies(only_a.output) == ["TagA-0", "TagA-3"]
        assert f"minOffset=0, maxOffset=6, {mq(0)}" in only_a.output.splitlines()

        a_or_c = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-s", "TagA || TagC")
        assert bodies(a_or_c.output) == ["TagA-0", "TagC-2", "TagA-3"]

        # nothing matches: the broker scans to the end and says so, mqadmin's line
        none = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-s", "TagZ")
        assert none.exit_code == 0, none.output
        assert bodies(none.output) == []
        assert f"{mq(0)} no matched msg. status=NO_MATCHED_MSG, offset=6" in none.output.splitlines()


async def test_print_msg_time_window_leaves_out_messages_stored_before_and_after(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, queues=1)
        await send_text(env, TOPIC, "before-0")
        await send_text(env, TOPIC, "before-1")
        begin = await next_millisecond()  # later than both stores
        await send_text(env, TOPIC, "inside-2")
        await send_text(env, TOPIC, "inside-3")
        end = await next_millisecond()
        await send_text(env, TOPIC, "after-4")

        # -b in mqadmin's date form (local time), -e in milliseconds
        begin_text = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(begin / 1000)) + f":{begin % 1000:03d}"
        result = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-b", begin_text, "-e", str(end))
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[0] == f"minOffset=2, maxOffset=4, {mq(0)}"
        assert bodies(result.output) == ["inside-2", "inside-3"]

        # -b alone reads to the queue's end, -e alone from its start
        from_begin = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-b", str(begin))
        assert bodies(from_begin.output) == ["inside-2", "inside-3", "after-4"]
        to_end = await cli(print_msg, "-n", env.namesrv_addr, "-t", TOPIC, "-e", str(end))
        assert bodies(to_end.output) == ["before-0", "before-1", "inside-2", "inside-3"]

        # the same window for one queue
        by_queue = await cli(
            print_msg_by_queue,
            *("-n", env.namesrv_addr, "-t", TOPIC, "-a", BROKER_NAME, "-i", "0"),
            *("-b", str(begin), "-e", str(end), "-p", "true", "-d", "true"),
        )
        assert by_queue.exit_code == 0, by_queue.output
        assert bodies(by_queue.output) == ["inside-2", "inside-3"]


async def test_print_msg_by_queue_counts_the_tags_of_one_queue(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        for i, tag in enumerate(["TagA", "TagB", "TagA", "TagC", "TagA", "TagB"]):
            await send_text(env, TOPIC, f"q0-{i}", TAGS=tag)
        await send_text(env, TOPIC, "q0-untagged")
        await send_text(env, TOPIC, "q1-0", queue_id=1, TAGS="TagQ1")
        args = ("-n", env.namesrv_addr, "-t", TOPIC, "-a", BROKER_NAME, "-i", "0")

        counted = await cli(print_msg_by_queue, *args, "-f", "true")
        assert counted.exit_code == 0, counted.output
        assert counted.output.splitlines() == [
            f"Tag: {'TagA':<30} Count: 3",
            f"Tag: {'TagB':<30} Count: 2",
            f"Tag: {'TagC':<30} Count: 1",
        ]

        # -p true prints the messages, bodies only with -d true (both default false)
        printed = await cli(print_msg_by_queue, *args, "-p", "true")
        assert bodies(printed.output) == ["NOT PRINT BODY"] * 7
        with_bodies = await cli(print_msg_by_queue, *args, "-p", "true", "-d", "true", "-s", "TagB")
        assert bodies(with_bodies.output) == ["q0-1", "q0-5"]
        assert (await cli(print_msg_by_queue, *args)).output == ""

        # counting with a filter counts only what matches
        filtered = await cli(print_msg_by_queue, *args, "-f", "true", "-s", "TagC || TagB")
        assert filtered.output.splitlines() == [f"Tag: {'TagB':<30} Count: 2", f"Tag: {'TagC':<30} Count: 1"]


async def test_print_msg_reads_an_lmq_through_its_parent_topics_route(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, "ParentTopic", queues=1)
        await create_topic(env, "ChildTopic", queues=1)
        await send_text(env, "ChildTopic", "child-0")
        await send_text(env, "ParentTopic", "parent-0")
        # the child stays on the broker, but the name server no longer routes it (as for an LMQ)
        response = await env.call(
            request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "ChildTopic"}), env.namesrv_addr
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)

        unrouted = await cli(print_msg, "-n", env.namesrv_addr, "-t", "ChildTopic")
        assert unrouted.exit_code == 1
        assert "rmq-admin printMsg command failed: " in unrouted.output

        result = await cli(print_msg, "-n", env.namesrv_addr, "-t", "ChildTopic", "-l", "ParentTopic")
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[0] == f"minOffset=0, maxOffset=1, {mq(0, 'ChildTopic')}"
        assert bodies(result.output) == ["child-0"]


async def test_unknown_topics_queues_and_bad_flags_fail_with_a_clear_line(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env)
        ns = env.namesrv_addr

        unknown = await cli(print_msg, "-n", ns, "-t", "NoSuchTopic")
        assert unknown.exit_code == 1
        assert (
            "rmq-admin printMsg command failed: can not find message queue for topic NoSuchTopic"
            in unknown.output
        )

        by_queue = ("-n", ns, "-t", TOPIC, "-a", BROKER_NAME)
        no_queue = await cli(print_msg_by_queue, *by_queue, "-i", "7", "-f", "true")
        assert no_queue.exit_code == 1
        assert (
            f"rmq-admin printMsgByQueue command failed: topic {TOPIC} has no queue 7 on broker {BROKER_NAME} "
            f"(its route: {BROKER_NAME} (2 queues))"
        ) in no_queue.output
        no_broker = await cli(print_msg_by_queue, "-n", ns, "-t", TOPIC, "-a", "broker-z", "-i", "0")
        assert no_broker.exit_code == 1
        assert "has no queue 0 on broker broker-z" in no_broker.output
        no_topic = await cli(print_msg_by_queue, "-n", ns, "-t", "NoSuchTopic", "-a", BROKER_NAME, "-i", "0")
        assert no_topic.exit_code == 1
        assert (
            "rmq-admin printMsgByQueue command failed: can not find message queue for topic"
            in no_topic.output
        )

        # usage errors before anything is read
        bad_time = await cli(print_msg, "-n", ns, "-t", TOPIC, "-b", "yesterday")
        assert bad_time.exit_code == 2
        assert "'-b'" in bad_time.output
        assert "yyyy-MM-dd#HH:mm:ss:SSS" in bad_time.output
        bad_charset = await cli(print_msg_by_queue, *by_queue, "-i", "0", "-c", "NO-SUCH-CHARSET")
        assert bad_charset.exit_code == 2
        assert "unknown charset 'NO-SUCH-CHARSET'" in bad_charset.output
        not_text = await cli(print_msg, "-n", ns, "-t", TOPIC, "-c", "base64")
        assert not_text.exit_code == 2
        assert "unknown charset 'base64'" in not_text.output
        missing = await cli(print_msg_by_queue, "-n", ns, "-t", TOPIC, "-i", "0")
        assert missing.exit_code == 2
        assert "'-a' / '--brokerName'" in missing.output
