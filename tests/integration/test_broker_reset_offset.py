"""Offset reset (INVOKE_BROKER_TO_RESET_OFFSET, upstream 5.x's server-side reset) and
``rmq-admin resetOffsetByTime`` against a real broker and name server."""

from __future__ import annotations

import time

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.protocol.broker import ResetOffsetBody, SubscriptionGroupConfig
from tests.integration.broker_env import BROKER_NAME, BrokerEnv, broker_env
from tests.integration.broker_requests import (
    describe,
    ext,
    messages,
    pull_header,
    pull_request,
    send_text,
)

TOPIC = "ResetTopic"
GROUP = "ResetGroup"


async def cli(*args: str) -> Result:
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def reset_cli(env: BrokerEnv, *args: str) -> Result:
    """``rmq-admin resetOffsetByTime`` of GROUP and TOPIC with ``args``."""
    return await cli("resetOffsetByTime", "-n", env.namesrv_addr, "-g", GROUP, "-t", TOPIC, *args)


async def setup(env: BrokerEnv) -> int:
    """Topic of 2 queues, the group, 5 messages in queue 0, a moment, 5 more; the group has
    committed 10 there. Returns a store time between the two fives (ms)."""
    group = SubscriptionGroupConfig(groupName=GROUP)
    response = await env.call(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode()))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    create = {
        "topic": TOPIC,
        "readQueueNums": "2",
        "writeQueueNums": "2",
        "perm": "6",
        "defaultTopic": "TBW102",
    }
    response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    for i in range(5):
        await send_text(env, TOPIC, f"m{i}")
    await trio.sleep(0.02)
    between = int(time.time() * 1000)
    await trio.sleep(0.02)
    for i in range(5, 10):
        await send_text(env, TOPIC, f"m{i}")
    await commit(env, 10)
    return between


async def commit(env: BrokerEnv, offset: int, queue_id: int = 0) -> str | None:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "commitOffset": str(offset)}
    response = await env.call(request(RequestCode.UPDATE_CONSUMER_OFFSET, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return response.remark


async def committed(env: BrokerEnv, queue_id: int = 0) -> int:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id)}
    response = await env.call(request(RequestCode.QUERY_CONSUMER_OFFSET, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return int(ext(response)["offset"])


def reset_request(timestamp: int, **fields: str) -> RemotingCommand:
    return request(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"group": GROUP, "topic": TOPIC, "timestamp": str(timestamp), "isForce": "true", **fields},
    )


async def test_a_reset_moves_the_groups_next_pull_and_wins_over_older_commits(tmp_path: object) -> None:
    async with broker_env(tmp_path) as env:
        between = await setup(env)
        response = await env.call(reset_request(between))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        table = {
            mq.queueId: offset
            for mq, offset in ResetOffsetBody.decode(response.body_bytes).offsetTable.items()
        }
        assert table == {0: 5, 1: 0}
        assert {mq.brokerName for mq in ResetOffsetBody.decode(response.body_bytes).offsetTable} == {
            BROKER_NAME
        }
        # what a consumer starting now reads, and what consumerProgress shows
        assert await committed(env) == 5
        # a running consumer's commit of its old position does not undo it...
        assert await commit(env, 10) == "Offset has been previously reset"
        assert await committed(env) == 5
        # ...and its next pull, from where it was, is moved (once)
        moved = await env.call(pull_request(GROUP, TOPIC, 0, 10, commit_offset=10))
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED, describe(moved)
        assert pull_header(moved).nextBeginOffset == 5
        assert await committed(env) == 5  # the pull's commit of 10 was not taken
        found = await env.call(pull_request(GROUP, TOPIC, 0, 5))
        assert found.code == ResponseCode.SUCCESS, describe(found)
        assert [m.body for m in messages(found)] == [f"m{i}".encode() for i in range(5, 10)]
        # the reset is done: commits count again
        assert await commit(env, 7) is None
        assert await committed(env) == 7


async def test_reset_to_the_end_to_one_offset_and_the_refusals(tmp_path: object) -> None:
    async with broker_env(tmp_path) as env:
        await setup(env)
        response = await env.call(reset_request(-1))  # negative: every queue's end
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert await committed(env) == 10
        response = await env.call(reset_request(-1, queueId="0", offset="3"))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert await committed(env) == 3
        refusals = [
            (
                reset_request(-1, queueId="0", offset="12"),
                ResponseCode.SYSTEM_ERROR,
                "Target offset 12 not in consume queue range [0-10]",
            ),
            (
                reset_request(-1, queueId="5"),
                ResponseCode.INVALID_PARAMETER,
                "queueId 5 is not a queue of topic ResetTopic",
            ),
            (
                reset_request(-1, topic="NoSuchTopic"),
                ResponseCode.TOPIC_NOT_EXIST,
                "Topic NoSuchTopic does not exist",
            ),
            (
                reset_request(-1, group="NoSuchGroup"),
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                "Group NoSuchGroup does not exist",
            ),
        ]
        for cmd, code, remark in refusals:
            response = await env.call(cmd)
            assert (response.code, (response.remark or "")[: len(remark)]) == (code, remark), describe(
                response
            )
        assert await committed(env) == 3


async def test_rmq_admin_reset_offset_by_time(tmp_path: object) -> None:
    async with broker_env(tmp_path) as env:
        between = await setup(env)
        result = await reset_cli(env, "-s", str(between))
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0] == (
            f"start reset consumer offset by specified, group[{GROUP}], topic[{TOPIC}], force[true], "
            f"timestamp(string)[{between}], timestamp(long)[{between}]"
        )
        assert lines[1].split() == ["#brokerName", "#queueId", "#offset"]
        assert [line.split() for line in lines[2:]] == [[BROKER_NAME, "0", "5"], [BROKER_NAME, "1", "0"]]
        assert await committed(env) == 5

        result = await reset_cli(env, "-s", "now", "-b", env.addr, "-q", "0", "-o", "8")
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[1] == "reset consumer offset to 8"
        assert await committed(env) == 8

        # a date in mqadmin's format, before every message: the start
        result = await reset_cli(env, "-s", "2020-01-01#00:00:00:000")
        assert result.exit_code == 0, result.output
        assert await committed(env) == 0

        result = await cli("skipAccumulatedMessage", "-n", env.namesrv_addr, "-g", GROUP, "-t", TOPIC)
        assert result.exit_code == 0, result.output
        assert [line.split() for line in result.output.splitlines()] == [
            ["#brokerName", "#queueId", "#offset"],
            [BROKER_NAME, "0", "10"],
            [BROKER_NAME, "1", "0"],
        ]
        assert await committed(env) == 10

        result = await cli(
            "resetOffsetByTime", "-n", env.namesrv_addr, "-g", "NoSuchGroup", "-t", TOPIC, "-s", "now"
        )
        assert result.exit_code == 1
        assert "Group NoSuchGroup does not exist" in result.output
        result = await reset_cli(env, "-s", "yesterday")
        assert result.exit_code == 2
        assert "neither 'now', milliseconds nor yyyy-MM-dd#HH:mm:ss:SSS" in result.output


async def test_a_held_pull_of_the_group_is_answered_at_the_reset(tmp_path: object) -> None:
    """A consumer's long poll at the queue's end would wait up to its suspend time (20 s here)."""
    async with broker_env(tmp_path) as env:
        between = await setup(env)
        answers: list[RemotingCommand] = []

        async def long_poll() -> None:
            answers.append(await env.call(pull_request(GROUP, TOPIC, 0, 10, suspend_ms=20_000)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            with trio.fail_after(5):
                while env.broker.hold.held_count() == 0:
                    await trio.sleep(0.01)
            response = await env.call(reset_request(between))
            assert response.code == ResponseCode.SUCCESS, describe(response)
            with trio.fail_after(2):
                while not answers:
                    await trio.sleep(0.01)
        moved = answers[0]
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED, describe(moved)
        assert pull_header(moved).nextBeginOffset == 5
