"""The broker's per-key statistics (VIEW_BROKER_STATS_DATA, 315) after real sends and pulls, and
rmq-admin ``statsAll`` against a real broker and name server.

The samplers are driven here with explicit timestamps an hour ahead of the broker's clock: its
own sampling task (real time) then never lands between them (a snapshot not later than a list's
last is dropped), and seven explicit 10-s snapshots make up the whole minute window whatever
that task recorded before.
"""

from __future__ import annotations

import json
import os

import click
import trio
from click.testing import CliRunner, Result

from client.admin_stats_cli import COMMANDS
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.protocol.broker import BrokerStatsData, BrokerStatsItem
from remoting.protocol.message import StoredMessage
from tests.integration.broker_env import CLUSTER, BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import (
    batch_body,
    describe,
    messages,
    pull_all,
    pull_request,
    send_ok,
    send_request,
    send_text,
)

TOPIC = "StatsTopic"
GROUP = "StatsGroup"
COMMAND = {c.name: c for c in COMMANDS}
AHEAD_MS = 3_600_000
S10, MIN10, HOUR = 10_000, 600_000, 3_600_000
#: one statsAll row: 64 + 2 + 64 + 1 + 12 + 1 + 11 + 1 + 11 + 1 + 14 + 1 + 14 characters
ROW_WIDTH = 197
HEADER = (
    "#Topic" + " " * 58 + "  #Consumer Group" + " " * 49 + " #Accumulation      #InTPS     #OutTPS"
    "   #InMsg24Hour  #OutMsg24Hour"
)


async def cli(*args: str) -> Result:
    """Run ``statsAll`` in a worker thread (it starts its own trio loop)."""
    command: click.Command = COMMAND["statsAll"]
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(command, list(args)))


async def create_topic(env: BrokerEnv, topic: str, *, queues: int = 1) -> None:
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
    response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    await wait_until(lambda: topic in env.namesrv.routes.topicQueueTable, what=f"route of {topic}")


def view(name: str, key: str) -> RemotingCommand:
    return request(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})


async def stats(env: BrokerEnv, name: str, key: str) -> BrokerStatsData:
    response = await env.call(view(name, key))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return BrokerStatsData.decode(response.body_bytes)


async def pull_some(env: BrokerEnv, topic: str, offset: int, count: int) -> list[StoredMessage]:
    """One pull of ``GROUP`` of up to ``count`` messages of queue 0 from ``offset``."""
    response = await env.call(pull_request(GROUP, topic, 0, offset, max_nums=count))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return messages(response)


async def commit(env: BrokerEnv, topic: str, offset: int) -> None:
    fields = {"consumerGroup": GROUP, "topic": topic, "queueId": "0", "commitOffset": str(offset)}
    response = await env.call(request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)


class Sampler:
    """The broker's samplers driven by hand, from an hour ahead of its clock."""

    def __init__(self, env: BrokerEnv) -> None:
        self.items = env.broker.stats.items
        self.base = env.broker.now_ms() + AHEAD_MS

    def first_six(self) -> None:
        """Six 10-s snapshots from the base, and the base's 10-min and hourly snapshots."""
        for i in range(6):
            self.items.sample_seconds(self.base + i * S10)
        self.items.sample_minutes(self.base)
        self.items.sample_hour(self.base)

    def seventh(self) -> None:
        """The 10-s snapshot that closes a minute window starting at the base."""
        self.items.sample_seconds(self.base + 6 * S10)


async def test_view_broker_stats_data_counts_sends_and_pulls(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, TOPIC)
        for i in range(3):
            await send_text(env, TOPIC, f"single {i}")
        batch = batch_body([f"batch {i}".encode() for i in range(4)])
        await send_ok(env, send_request(TOPIC, batch, code=RequestCode.SEND_BATCH_MESSAGE))
        first = await pull_all(env, GROUP, TOPIC, 0)  # one pull finds all 7, the next none
        assert len(first) == 7
        sampler = Sampler(env)
        sampler.first_six()

        for i in range(2):
            await send_text(env, TOPIC, f"later {i}")
        later = await pull_some(env, TOPIC, 7, 32)
        assert len(later) == 2
        sampler.seventh()

        first_bytes = sum(m.total_size for m in first)
        later_bytes = sum(m.total_size for m in later)
        put = await stats(env, "TOPIC_PUT_NUMS", TOPIC)
        # the minute: the two later sends; hour and day: the first 3 sends and the batch of 4
        assert put.statsMinute == BrokerStatsItem(sum=2, tps=2 * 1000 / 60_000, avgpt=1.0)
        assert put.statsHour == BrokerStatsItem(sum=7, tps=7 * 1000 / MIN10, avgpt=7 / 4)
        assert put.statsDay == BrokerStatsItem(sum=7, tps=7 * 1000 / HOUR, avgpt=7 / 4)
        put_size = await stats(env, "TOPIC_PUT_SIZE", TOPIC)
        assert (put_size.statsMinute.sum, put_size.statsHour.sum) == (later_bytes, first_bytes)

        got = await stats(env, "GROUP_GET_NUMS", f"{TOPIC}@{GROUP}")
        assert got.statsMinute == BrokerStatsItem(sum=2, tps=2 * 1000 / 60_000, avgpt=2.0)
        assert got.statsHour == BrokerStatsItem(sum=7, tps=7 * 1000 / MIN10, avgpt=7.0)
        got_size = await stats(env, "GROUP_GET_SIZE", f"{TOPIC}@{GROUP}")
        assert (got_size.statsMinute.sum, got_size.statsHour.sum) == (later_bytes, first_bytes)

        # broker-wide, keyed by the cluster: the value only, so no avgpt
        broker_put = await stats(env, "BROKER_PUT_NUMS", CLUSTER)
        assert broker_put.statsMinute == BrokerStatsItem(sum=2, tps=2 * 1000 / 60_000, avgpt=0.0)
        assert broker_put.statsDay.sum == 7
        broker_get = await stats(env, "BROKER_GET_NUMS", CLUSTER)
        assert (broker_get.statsMinute.sum, broker_get.statsHour.sum, broker_get.statsHour.avgpt) == (
            2,
            7,
            0.0,
        )

        # upstream's field names on the wire
        raw = json.loads((await env.call(view("TOPIC_PUT_NUMS", TOPIC))).body_bytes)
        assert set(raw) == {"statsMinute", "statsHour", "statsDay"}
        assert raw["statsHour"] == {"sum": 7, "tps": 7 * 1000 / MIN10, "avgpt": 1.75}


async def test_view_broker_stats_data_of_a_missing_item_is_a_system_error(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, TOPIC)
        await send_text(env, TOPIC, "one")
        for name, key in [
            ("TOPIC_PUT_NUMS", "NoSuchTopic"),
            ("GROUP_GET_NUMS", f"{TOPIC}@{GROUP}"),  # never pulled
            ("NO_SUCH_STATS", TOPIC),
        ]:
            response = await env.call(view(name, key))
            assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)
            assert response.remark == f"The stats <{name}> <{key}> not exist"
            assert not response.body_bytes


async def test_a_delayed_message_counts_under_the_schedule_topic(tmp_path: os.PathLike[str]) -> None:
    # as upstream: it is stored in SCHEDULE_TOPIC_XXXX until its delay is over
    async with broker_env(tmp_path) as env:
        await create_topic(env, TOPIC)
        await send_text(env, TOPIC, "later", DELAY="3")
        await stats(env, "TOPIC_PUT_NUMS", "SCHEDULE_TOPIC_XXXX")  # exists
        response = await env.call(view("TOPIC_PUT_NUMS", TOPIC))
        assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)


async def test_deleting_a_topic_or_group_forgets_its_items(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, TOPIC)
        await send_text(env, TOPIC, "one")
        await pull_all(env, GROUP, TOPIC, 0)
        await stats(env, "GROUP_GET_NUMS", f"{TOPIC}@{GROUP}")  # exists
        fields = {"groupName": GROUP, "cleanOffset": "true"}
        response = await env.call(request(RequestCode.DELETE_SUBSCRIPTIONGROUP, fields))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        response = await env.call(view("GROUP_GET_NUMS", f"{TOPIC}@{GROUP}"))
        assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)

        await stats(env, "TOPIC_PUT_NUMS", TOPIC)  # exists
        response = await env.call(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC}))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        response = await env.call(view("TOPIC_PUT_NUMS", TOPIC))
        assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)
        # the broker-wide item stays
        assert (await stats(env, "BROKER_PUT_NUMS", CLUSTER)).statsMinute is not None


async def test_send_backs_count_under_the_original_topic_and_group(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await create_topic(env, TOPIC)
        await send_text(env, TOPIC, "fails")
        (stored,) = await pull_all(env, GROUP, TOPIC, 0)
        for _ in range(2):
            fields = {"offset": str(stored.physical_offset), "group": GROUP, "delayLevel": "0"}
            response = await env.call(request(RequestCode.CONSUMER_SEND_MSG_BACK, fields))
            assert response.code == ResponseCode.SUCCESS, describe(response)
        Sampler(env).first_six()
        back = await stats(env, "SNDBCK_PUT_NUMS", f"{TOPIC}@{GROUP}")
        assert back.statsHour == BrokerStatsItem(sum=2, tps=2 * 1000 / MIN10, avgpt=1.0)


def row_fields(result: Result, topic: str) -> list[list[str]]:
    """The whitespace-split rows of ``topic`` (each checked for mqadmin's width)."""
    rows = [line for line in result.stdout.splitlines() if line.split()[:1] == [topic]]
    assert all(len(line) == ROW_WIDTH for line in rows), rows
    return [line.split() for line in rows]


async def test_stats_all_prints_a_row_per_topic_and_group(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for topic in (TOPIC, "SentTopic", "IdleTopic", f"%RETRY%{GROUP}"):
            await create_topic(env, topic)
        for i in range(5):
            await send_text(env, TOPIC, f"m{i}")
        for i in range(4):
            await send_text(env, "SentTopic", f"s{i}")
        assert len(await pull_some(env, TOPIC, 0, 3)) == 3
        sampler = Sampler(env)
        sampler.first_six()

        for i in range(3):
            await send_text(env, TOPIC, f"later {i}")
        assert len(await pull_some(env, TOPIC, 3, 3)) == 3
        await commit(env, TOPIC, 6)  # 8 messages, 6 consumed: 2 accumulated
        sampler.seventh()

        ns = env.namesrv_addr
        result = await cli("-n", ns)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0] == HEADER
        # in and out tps: 3 messages in the last minute; 24 hours: the day window's sum, which
        # the hourly snapshot took before the later messages
        assert row_fields(result, TOPIC) == [[TOPIC, GROUP, "2", "0.05", "0.05", "5", "3"]]
        # no consumer: an empty group column, no out figures
        assert row_fields(result, "SentTopic") == [["SentTopic", "0", "0.00", "4", "NO_CONSUMER"]]
        assert row_fields(result, "IdleTopic") == [["IdleTopic", "0", "0.00", "0", "NO_CONSUMER"]]
        sent_row = next(line for line in lines if line.startswith("SentTopic "))
        assert sent_row[66:130] == " " * 64
        assert not any(line.startswith("%RETRY%") for line in lines)

        # -t: that topic only
        result = await cli("-n", ns, "-t", "SentTopic")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [HEADER, sent_row]

        # -a: only what moved messages in the last day
        result = await cli("-n", ns, "-a")
        assert result.exit_code == 0, result.output
        assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == ["SentTopic", TOPIC]


async def test_stats_all_fails_without_a_name_server() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()  # nothing listens there any more
    result = await cli("-n", f"127.0.0.1:{port}", "--timeout", "2")
    assert result.exit_code == 1
    assert result.stderr.startswith("rmq-admin statsAll command failed: ")
    assert HEADER not in result.stdout
