"""Batch creation of topics and subscription groups against a real broker and name server:
UPDATE_AND_CREATE_TOPIC_LIST (18) and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225), and the
``rmq-admin updateTopicList`` / ``updateSubGroupList`` commands that send them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import trio
from click.testing import CliRunner, Result

from client.admin_list_cli import COMMANDS, update_sub_group_list, update_topic_list
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.processor import RequestContext
from remoting.protocol.broker import SubscriptionGroupConfig, SubscriptionGroupWrapper
from remoting.protocol.common import PermName, TopicConfig, TopicConfigSerializeWrapper
from tests.integration.broker_env import BROKER_NAME, CLUSTER, BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import describe

assert [c.name for c in COMMANDS] == ["updateTopicList", "updateSubGroupList"]


async def cli(command: click.Command, *args: str) -> Result:
    """Run the command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(command, list(args)))


def write_json(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value))
    return str(path)


async def topic_list_request(env: BrokerEnv, configs: list[dict[str, Any]]) -> RemotingCommand:
    body = json.dumps({"topicConfigList": configs}).encode()
    return await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body))


async def group_list_request(env: BrokerEnv, configs: list[dict[str, Any]]) -> RemotingCommand:
    body = json.dumps({"groupConfigList": configs}).encode()
    return await env.call(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=body))


async def topic_config(env: BrokerEnv, topic: str) -> TopicConfig | None:
    """The broker's config of ``topic`` (GET_TOPIC_CONFIG), None when it has none."""
    response = await env.call(request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic}))
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return TopicConfig.decode(response.body_bytes)


async def all_groups(env: BrokerEnv) -> dict[str, SubscriptionGroupConfig]:
    """Every group of the broker (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, which creates none)."""
    response = await env.call(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return SubscriptionGroupWrapper.decode(response.body_bytes).subscriptionGroupTable


def routed_queues(env: BrokerEnv, topic: str) -> tuple[int, int] | None:
    """(read, write) queue numbers the name server routes for ``topic`` on the broker."""
    queue_data = env.namesrv.routes.topicQueueTable.get(topic, {}).get(BROKER_NAME)
    return None if queue_data is None else (queue_data.readQueueNums, queue_data.writeQueueNums)


def count_registrations(env: BrokerEnv) -> list[int]:
    """From now on, the name server notes each REGISTER_BROKER it gets in the returned list."""
    table = env.namesrv.processor_table
    inner = table.get(RequestCode.REGISTER_BROKER)
    seen: list[int] = []

    async def counting(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append(cmd.code)
        return await inner(ctx, cmd)

    table.register(RequestCode.REGISTER_BROKER, counting)
    return seen


async def test_update_topic_list_creates_every_topic_with_one_registration(tmp_path: Path) -> None:
    topics = [
        {"topicName": "ListTopicA", "readQueueNums": 2, "writeQueueNums": 2},
        {"topicName": "ListTopicB", "readQueueNums": 3, "writeQueueNums": 3, "perm": 4, "order": True},
        {"topicName": "ListTopicC", "attributes": {"+message.type": "FIFO"}},  # upstream default queues
    ]
    path = write_json(tmp_path / "topics-list.json", topics)
    async with broker_env(tmp_path) as env:
        registrations = count_registrations(env)
        result = await cli(update_topic_list, "-n", env.namesrv_addr, "-b", env.addr, "-f", path)
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"submit batch of topic config to {env.addr} success, please check the result later.\n"
        )

        a, b, c = [await topic_config(env, t["topicName"]) for t in topics]
        assert a == TopicConfig(topicName="ListTopicA", readQueueNums=2, writeQueueNums=2)
        assert b == TopicConfig(
            topicName="ListTopicB", readQueueNums=3, writeQueueNums=3, perm=PermName.PERM_READ, order=True
        )
        assert c == TopicConfig(topicName="ListTopicC", attributes={"message.type": "FIFO"})

        await wait_until(lambda: routed_queues(env, "ListTopicC") is not None, what="routes of the list")
        assert [routed_queues(env, t["topicName"]) for t in topics] == [(2, 2), (3, 3), (16, 16)]
        assert env.namesrv.routes.topicQueueTable["ListTopicB"][BROKER_NAME].perm == PermName.PERM_READ
        assert len(registrations) == 1  # the whole list in one registration

        # persisted before that registration
        stored = TopicConfigSerializeWrapper.decode(await trio.Path(env.broker.topics.path).read_bytes())
        assert stored.topicConfigTable["ListTopicA"] == a
        assert stored.topicConfigTable["ListTopicB"] == b
        assert stored.topicConfigTable["ListTopicC"] == c

        # -c sends the list to every master of the cluster
        more = write_json(tmp_path / "more.json", [{"topicName": "ListTopicD", "writeQueueNums": 1}])
        result = await cli(update_topic_list, "-n", env.namesrv_addr, "-c", CLUSTER, "-f", more)
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"submit batch of topic config to {env.addr} success, please check the result later.\n"
        )
        assert await topic_config(env, "ListTopicD") == TopicConfig(
            topicName="ListTopicD", readQueueNums=16, writeQueueNums=1
        )
        result = await cli(update_topic_list, "-n", env.namesrv_addr, "-c", "NoSuchCluster", "-f", more)
        assert result.exit_code == 1
        assert result.stderr.startswith("rmq-admin updateTopicList command failed: ")


async def test_update_topic_list_updates_the_queue_numbers_of_existing_topics(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        first = [
            {"topicName": "GrowTopic", "readQueueNums": 2, "writeQueueNums": 2},
            {"topicName": "SameTopic", "readQueueNums": 1, "writeQueueNums": 1},
        ]
        assert (await topic_list_request(env, first)).code == ResponseCode.SUCCESS
        await wait_until(lambda: routed_queues(env, "GrowTopic") == (2, 2), what="GrowTopic routed")

        # SameTopic is unchanged: the other entries still apply (upstream would skip them all)
        second = [
            first[1],
            {"topicName": "GrowTopic", "readQueueNums": 6, "writeQueueNums": 4},
            {"topicName": "NewTopic", "readQueueNums": 1, "writeQueueNums": 1},
        ]
        response = await topic_list_request(env, second)
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert await topic_config(env, "GrowTopic") == TopicConfig(
            topicName="GrowTopic", readQueueNums=6, writeQueueNums=4
        )
        assert await topic_config(env, "SameTopic") == TopicConfig(
            topicName="SameTopic", readQueueNums=1, writeQueueNums=1
        )
        await wait_until(lambda: routed_queues(env, "GrowTopic") == (6, 4), what="GrowTopic's new queues")
        await wait_until(lambda: routed_queues(env, "NewTopic") == (1, 1), what="NewTopic routed")

        # a topic listed twice: the later entry modifies what the earlier one made
        twice = [
            {"topicName": "TwiceTopic", "readQueueNums": 1, "writeQueueNums": 1},
            {
                "topicName": "TwiceTopic",
                "readQueueNums": 2,
                "writeQueueNums": 2,
                "attributes": {"+message.type": "NORMAL"},
            },
        ]
        assert (await topic_list_request(env, twice)).code == ResponseCode.SUCCESS
        assert await topic_config(env, "TwiceTopic") == TopicConfig(
            topicName="TwiceTopic", readQueueNums=2, writeQueueNums=2, attributes={"message.type": "NORMAL"}
        )


async def test_a_topic_list_with_a_bad_entry_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        existing = {"topicName": "KeptTopic", "readQueueNums": 4, "writeQueueNums": 4}
        assert (await topic_list_request(env, [existing])).code == ResponseCode.SUCCESS
        kept = await topic_config(env, "KeptTopic")
        await wait_until(lambda: routed_queues(env, "KeptTopic") == (4, 4), what="KeptTopic routed")
        grow = {"topicName": "KeptTopic", "readQueueNums": 8, "writeQueueNums": 8}
        new = {"topicName": "NotCreatedTopic", "readQueueNums": 1, "writeQueueNums": 1}

        cases: list[tuple[dict[str, Any], int, str]] = [
            (
                {"topicName": "bad topic!"},
                ResponseCode.INVALID_PARAMETER,
                "The specified topic[bad topic!] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            ),
            ({"topicName": " "}, ResponseCode.INVALID_PARAMETER, "The specified topic is blank."),
            (
                {"topicName": "TBW102"},
                ResponseCode.INVALID_PARAMETER,
                "The topic[TBW102] is conflict with system topic.",
            ),
            (
                {"topicName": "rmq_sys_MINE"},
                ResponseCode.INVALID_PARAMETER,
                "The topic[rmq_sys_MINE] is conflict with system topic.",
            ),
            (
                {"topicName": "MixedTopic", "attributes": {"+message.type": "MIXED"}},
                ResponseCode.INVALID_PARAMETER,
                "MIXED message type is not supported.",
            ),
            (
                {"topicName": "PermTopic", "perm": 9},
                ResponseCode.INVALID_PARAMETER,
                "The perm[9] of topic[PermTopic] is not in [0, 7].",
            ),
            (
                {"topicName": "AttrTopic", "attributes": {"+no.such.key": "1"}},
                ResponseCode.SYSTEM_ERROR,
                "unsupported key: no.such.key",
            ),
        ]
        for bad, code, remark in cases:
            # the bad entry last: the good ones before it must not have been applied
            before = await topic_config(env, bad["topicName"])  # TBW102 is there from the start
            response = await topic_list_request(env, [grow, new, bad])
            assert (response.code, response.remark) == (code, remark), bad
            assert await topic_config(env, "KeptTopic") == kept
            assert await topic_config(env, "NotCreatedTopic") is None
            assert await topic_config(env, bad["topicName"]) == before
        assert routed_queues(env, "KeptTopic") == (4, 4)
        assert routed_queues(env, "NotCreatedTopic") is None

        # through rmq-admin: the broker's answer as the failure line
        path = write_json(tmp_path / "bad.json", [grow, new, {"topicName": "TBW102"}])
        result = await cli(update_topic_list, "-n", env.namesrv_addr, "-b", env.addr, "-f", path)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr == (
            f"rmq-admin updateTopicList command failed: INVALID_PARAMETER (29) from {env.addr}: "
            "The topic[TBW102] is conflict with system topic.\n"
        )
        assert await topic_config(env, "KeptTopic") == kept


async def test_update_sub_group_list_creates_every_group(tmp_path: Path) -> None:
    groups = [
        {"groupName": "ListGroupA"},
        {"groupName": "ListGroupB", "retryMaxTimes": 3, "consumeMessageOrderly": True, "retryQueueNums": 2},
        {"groupName": "ListGroupC", "consumeEnable": False, "groupRetryPolicy": {"type": "CUSTOMIZED"}},
    ]
    path = write_json(tmp_path / "groups.json", groups)
    async with broker_env(tmp_path) as env:
        result = await cli(update_sub_group_list, "-n", env.namesrv_addr, "-b", env.addr, "-f", path)
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"submit batch of group config to {env.addr} success, please check the result later.\n"
        )
        expected = [
            SubscriptionGroupConfig(groupName="ListGroupA"),
            SubscriptionGroupConfig(
                groupName="ListGroupB", retryMaxTimes=3, consumeMessageOrderly=True, retryQueueNums=2
            ),
            SubscriptionGroupConfig(groupName="ListGroupC", consumeEnable=False),
        ]
        for config in expected:
            response = await env.call(
                request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": config.groupName})
            )
            assert response.code == ResponseCode.SUCCESS, describe(response)
            assert SubscriptionGroupConfig.decode(response.body_bytes) == config

        # -c: every master of the cluster, with mqadmin's other line
        more = write_json(tmp_path / "more.json", [{"groupName": "ListGroupD", "retryMaxTimes": 5}])
        result = await cli(update_sub_group_list, "-n", env.namesrv_addr, "-c", CLUSTER, "-f", more)
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            f"submit batch of subscription group config to {env.addr} success, please check the result later.\n"
        )
        assert (await all_groups(env))["ListGroupD"].retryMaxTimes == 5

        # one bad name refuses the whole list: the good groups before it are not created
        response = await group_list_request(
            env, [{"groupName": "NotCreatedGroup"}, {"groupName": "bad group"}]
        )
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert response.remark == (
            "the specified group[bad group] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
        response = await group_list_request(env, [{"groupName": "ListGroupA", "retryQueueNums": -1}])
        assert (response.code, response.remark) == (
            ResponseCode.INVALID_PARAMETER,
            "retryQueueNums -1 is negative",
        )
        groups_now = await all_groups(env)
        assert "NotCreatedGroup" not in groups_now
        assert groups_now["ListGroupA"] == SubscriptionGroupConfig(groupName="ListGroupA")

        # an empty list changes nothing and succeeds (upstream)
        assert (await group_list_request(env, [])).code == ResponseCode.SUCCESS
        assert (await topic_list_request(env, [])).code == ResponseCode.SUCCESS


async def test_a_bad_file_ends_the_command_with_status_1(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    not_json = tmp_path / "not.json"
    not_json.write_text("[{topicName: ")
    not_a_list = write_json(tmp_path / "object.json", {"topicName": "T"})
    wrong_type = write_json(tmp_path / "wrong.json", [{"topicName": "T", "readQueueNums": "many"}])
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    async with broker_env(tmp_path) as env:
        for command in COMMANDS:
            name = command.name
            base = ["-n", env.namesrv_addr, "-b", env.addr, "-f"]
            result = await cli(command, *base, missing)
            assert result.exit_code == 1
            assert (
                result.stderr == f"rmq-admin {name} command failed: the file path {missing} does not exists\n"
            )

            for bad in (str(not_json), not_a_list):
                result = await cli(command, *base, bad)
                assert result.exit_code == 1
                assert result.stdout == ""
                assert result.stderr.startswith(
                    f"rmq-admin {name} command failed: {bad} is not a JSON array of "
                )

            # an empty file: nothing to do, as mqadmin
            result = await cli(command, *base, str(empty))
            assert (result.exit_code, result.output) == (0, "")

            # -b and -c together, or neither: a usage error
            result = await cli(command, *base, str(empty), "-c", CLUSTER)
            assert result.exit_code == 2
            result = await cli(command, "-n", env.namesrv_addr, "-f", str(empty))
            assert result.exit_code == 2

        result = await cli(update_topic_list, "-n", env.namesrv_addr, "-b", env.addr, "-f", wrong_type)
        assert result.exit_code == 1
        assert "is not a JSON array of TopicConfig" in result.stderr
        assert await topic_config(env, "T") is None


async def test_malformed_list_bodies_are_refused_and_the_broker_keeps_serving(tmp_path: Path) -> None:
    bodies: list[bytes | None] = [
        None,
        b"",
        b"not json",
        b"[]",
        b"{}",
        b'{"topicConfigList": null, "groupConfigList": null}',
        b'{"topicConfigList": [{"readQueueNums": 1}], "groupConfigList": [{"retryMaxTimes": 1}]}',
        b'{"topicConfigList": [{"topicName": "T", "topicFilterType": "NO_SUCH"}], "groupConfigList": [5]}',
        b'{"topicConfigList": {"topicName": "T"}, "groupConfigList": "G"}',
        b"\xff\xfe",
    ]
    async with broker_env(tmp_path) as env:
        for code, name in (
            (RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, "CreateTopicListRequestBody"),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, "SubscriptionGroupList"),
        ):
            for body in bodies:
                response = await env.call(request(code, body=body))
                assert response.code == ResponseCode.SYSTEM_ERROR, (body, describe(response))
                assert (response.remark or "").startswith(f"bad {name} body: "), (body, describe(response))
        assert await topic_config(env, "T") is None

        # still serving, lists included
        response = await topic_list_request(env, [{"topicName": "AfterTopic", "writeQueueNums": 2}])
        assert response.code == ResponseCode.SUCCESS, describe(response)
        response = await group_list_request(env, [{"groupName": "AfterGroup"}])
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert "AfterGroup" in await all_groups(env)
        await wait_until(lambda: routed_queues(env, "AfterTopic") == (16, 2), what="AfterTopic routed")
