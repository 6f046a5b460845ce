"""Client management on a real broker over sockets: heartbeats, consumer lists, NOTIFY_CONSUMER_IDS_CHANGED,
rebalance locks, unregistering and the connection lists (remoting-protocol.md §2.5, cpp-client-wire.md §5)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import LanguageCode, RemotingCommand, request
from remoting.connection import ProcessorTable, RequestContext
from remoting.protocol.broker import (
    ConsumerConnection,
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProducerConnection,
    ProducerData,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from remoting.protocol.common import MessageQueue, TopicConfig
from tests.integration.broker_env import BROKER_NAME, TIMEOUT, BrokerEnv, broker_env, wait_until

GROUP = "CG_TEST"
TOPIC = "TopicTest"


class Member:
    """One client process: its own connection to the broker, recording the notifications it gets."""

    def __init__(self, client: RemotingClient, client_id: str, notified: list[str]) -> None:
        self.client = client
        self.client_id = client_id
        self.notified = notified

    async def call(self, env: BrokerEnv, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(env.addr, cmd, TIMEOUT)

    async def heartbeat(
        self, env: BrokerEnv, group: str = GROUP, topics: tuple[str, ...] = (TOPIC,), **kw: object
    ) -> RemotingCommand:
        subs = [SubscriptionData(topic=t, subString="*", subVersion=1) for t in topics]
        data = HeartbeatData(
            clientID=self.client_id,
            consumerDataSet=[
                ConsumerData(
                    groupName=group,
                    consumeType="CONSUME_PASSIVELY",
                    messageModel="CLUSTERING",
                    consumeFromWhere="CONSUME_FROM_LAST_OFFSET",
                    subscriptionDataSet=subs,
                )
            ],
            **kw,  # type: ignore[arg-type]
        )
        return await self.call(env, request(RequestCode.HEART_BEAT, body=data.encode()))

    async def lock(self, env: BrokerEnv, queue_ids: list[int], group: str = GROUP) -> list[int]:
        body = LockBatchRequestBody(consumerGroup=group, clientId=self.client_id, mqSet=_mqs(queue_ids))
        response = await self.call(env, request(RequestCode.LOCK_BATCH_MQ, body=body.encode()))
        assert response.code == ResponseCode.SUCCESS, response.remark
        return sorted(mq.queueId for mq in LockBatchResponseBody.decode(response.body_bytes).lockOKMQSet)

    async def unlock(self, env: BrokerEnv, queue_ids: list[int], group: str = GROUP) -> None:
        body = UnlockBatchRequestBody(consumerGroup=group, clientId=self.client_id, mqSet=_mqs(queue_ids))
        response = await self.call(env, request(RequestCode.UNLOCK_BATCH_MQ, body=body.encode()))
        assert response.code == ResponseCode.SUCCESS, response.remark


def _mqs(queue_ids: list[int]) -> list[MessageQueue]:
    return [MessageQueue(topic=TOPIC, brokerName=BROKER_NAME, queueId=q) for q in queue_ids]


@asynccontextmanager
async def member(client_id: str) -> AsyncIterator[Member]:
    notified: list[str] = []
    table = ProcessorTable()

    async def on_notify(ctx: RequestContext, cmd: RemotingCommand) -> None:
        assert cmd.is_oneway
        notified.append((cmd.ext_fields or {}).get("consumerGroup", ""))

    table.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    async with RemotingClient(processors=table, name=f"test.{client_id}") as client:
        yield Member(client, client_id, notified)


async def consumer_ids(env: BrokerEnv, group: str = GROUP) -> RemotingCommand:
    return await env.call(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))


async def subscriptions(env: BrokerEnv, group: str = GROUP) -> list[str]:
    response = await env.call(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}))
    assert response.code == ResponseCode.SUCCESS, response.remark
    return sorted(ConsumerConnection.decode(response.body_bytes).subscriptionTable)


async def wait_for_ids(env: BrokerEnv, expected: list[str], group: str = GROUP) -> None:
    """Poll GET_CONSUMER_LIST_BY_GROUP until it lists ``expected`` (an error counts as [])."""
    with trio.move_on_after(TIMEOUT):
        while True:
            response = await consumer_ids(env, group)
            got = ids_of(response) if response.code == ResponseCode.SUCCESS else []
            if got == expected:
                return
            await trio.sleep(0.01)
    raise AssertionError(f"consumer list of {group} never became {expected} (last: {got})")


def ids_of(response: RemotingCommand) -> list[str]:
    assert response.code == ResponseCode.SUCCESS, response.remark
    return GetConsumerListByGroupResponseBody.decode(response.body_bytes).consumerIdList


async def test_heartbeat_registers_consumer_and_creates_retry_topic(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env, member("10.0.0.1@A") as a:
        response = await a.heartbeat(env)
        assert response.code == ResponseCode.SUCCESS
        assert response.ext_fields == {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}
        assert ids_of(await consumer_ids(env)) == ["10.0.0.1@A"]
        got = await env.call(request(RequestCode.GET_TOPIC_CONFIG, {"topic": f"%RETRY%{GROUP}"}))
        assert got.code == ResponseCode.SUCCESS, got.remark
        retry = TopicConfig.decode(got.body_bytes)
        assert (retry.readQueueNums, retry.writeQueueNums, retry.perm) == (1, 1, 6)
        # the retry topic reaches the name server with the next registration
        await wait_until(
            lambda: f"%RETRY%{GROUP}" in env.namesrv.routes.topicQueueTable, what="retry topic route"
        )


async def test_cpp_heartbeat_body_is_accepted(tmp_path: os.PathLike[str]) -> None:
    """Ordinal enums, string subVersion, codeSet zeros and a trailing newline (cpp-client-wire.md §5.1)."""
    body = (
        b'{"clientID":"12516-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
        b'"groupName":"CG_TEST","messageModel":1,"subscriptionDataSet":['
        b'{"subString":"*","subVersion":"1795245500689","topic":"%RETRY%CG_TEST"},'
        b'{"codeSet":[0,0],"subString":"TagA || TagB","subVersion":"1795245500689",'
        b'"tagsSet":["TagA","TagB"],"topic":"TopicTest"}]}]}\n'
    )
    async with broker_env(tmp_path) as env:
        cmd = request(RequestCode.HEART_BEAT, body=body)
        cmd.language = LanguageCode.CPP
        cmd.version = 333
        assert (await env.call(cmd)).code == ResponseCode.SUCCESS
        assert ids_of(await consumer_ids(env)) == ["12516-127.0.0.1@DEFAULT"]
        response = await env.call(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": GROUP}))
        assert response.code == ResponseCode.SUCCESS, response.remark
        cc = ConsumerConnection.decode(response.body_bytes)
        assert (cc.consumeType, cc.messageModel, cc.consumeFromWhere) == (
            "CONSUME_PASSIVELY",
            "CLUSTERING",
            "CONSUME_FROM_LAST_OFFSET",
        )
        assert sorted(cc.subscriptionTable) == ["%RETRY%CG_TEST", "TopicTest"]
        assert cc.subscriptionTable["TopicTest"].subString == "TagA || TagB"
        [conn] = cc.connectionSet
        assert (conn.clientId, conn.language, conn.version) == ("12516-127.0.0.1@DEFAULT", "CPP", 333)
        assert conn.clientAddr.startswith("127.0.0.1:")


async def test_consumer_list_has_every_member_and_join_and_leave_notify_the_members(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env, member("10.0.0.2@B") as b, member("10.0.0.1@A") as a:
        # like upstream, a membership change is announced to every member, the newcomer included
        await a.heartbeat(env)
        await wait_until(lambda: a.notified == [GROUP], what="a's own join")
        await b.heartbeat(env)
        await wait_until(lambda: a.notified == [GROUP] * 2 and b.notified == [GROUP], what="b's join")
        # the list is sorted and includes the requester
        listed = await a.call(env, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}))
        assert ids_of(listed) == ["10.0.0.1@A", "10.0.0.2@B"]
        # repeated, unchanged heartbeats notify nobody (a notification would be written before the
        # heartbeat's handler ends, so a later round trip on each connection orders after it)
        await a.heartbeat(env)
        await b.heartbeat(env)
        for m in (a, b):
            await m.call(env, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}))
        assert (a.notified, b.notified) == ([GROUP] * 2, [GROUP])
        # a's connection closes: b is told, and the list shrinks to b
        await a.client.close_connection(env.addr)
        await wait_until(lambda: b.notified == [GROUP] * 2, what=f"b told of a's leave ({b.notified})")
        await wait_for_ids(env, ["10.0.0.2@B"])
        assert a.notified == [GROUP] * 2


async def test_no_consumer_for_group_is_system_error(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        response = await consumer_ids(env, "NOBODY")
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == "no consumer for this group, NOBODY"


async def test_unregister_client_removes_consumer_and_producer_and_notifies(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env, member("10.0.0.1@A") as a, member("10.0.0.2@B") as b:
        body = HeartbeatData(clientID=a.client_id, producerDataSet=[ProducerData(groupName="PG")])
        assert (await a.call(env, request(RequestCode.HEART_BEAT, body=body.encode()))).code == 0
        await a.heartbeat(env)
        await b.heartbeat(env)
        await wait_until(lambda: a.notified == [GROUP] * 2, what="join notifications")
        producers = await env.call(request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"}))
        assert producers.code == ResponseCode.SUCCESS, producers.remark
        [conn] = ProducerConnection.decode(producers.body_bytes).connectionSet
        assert (conn.clientId, conn.language) == (a.client_id, "PYTHON")

        # the C++ client's shape: an empty producerGroup means "none"
        unregister = request(
            RequestCode.UNREGISTER_CLIENT,
            {"clientID": b.client_id, "consumerGroup": GROUP, "producerGroup": ""},
        )
        assert (await b.call(env, unregister)).code == ResponseCode.SUCCESS
        await wait_until(lambda: a.notified == [GROUP] * 3, what="leave notification")
        assert ids_of(await consumer_ids(env)) == [a.client_id]

        unregister = request(RequestCode.UNREGISTER_CLIENT, {"clientID": a.client_id, "producerGroup": "PG"})
        assert (await a.call(env, unregister)).code == ResponseCode.SUCCESS
        producers = await env.call(request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"}))
        assert producers.code == ResponseCode.SYSTEM_ERROR
        assert producers.remark == "the producer group[PG] not exist"


async def test_lock_batch_is_exclusive_per_client_id_until_unlocked(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env, member("10.0.0.1@A") as a, member("10.0.0.2@B") as b:
        assert await a.lock(env, [0, 1]) == [0, 1]
        assert await b.lock(env, [1, 2]) == [2]
        # renewing is granted to the holder
        assert await a.lock(env, [0, 1]) == [0, 1]
        # a lock is per group
        assert await b.lock(env, [0, 1], group="OTHER") == [0, 1]
        # unlocking someone else's queue does nothing
        await b.unlock(env, [0])
        assert await b.lock(env, [0]) == []
        await a.unlock(env, [1])
        assert await b.lock(env, [1]) == [1]
        assert await a.lock(env, [1]) == []


async def test_lock_with_bad_body_is_a_readable_error(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        response = await env.call(request(RequestCode.LOCK_BATCH_MQ, body=b'{"mqSet":[}'))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert "LockBatchRequestBody" in (response.remark or "")


async def test_consumer_connection_list_of_offline_group(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        response = await env.call(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G0"}))
        assert response.code == ResponseCode.CONSUMER_NOT_ONLINE
        assert response.remark == "the consumer group[G0] not online"


async def test_heartbeat_v2_reports_subscription_changes_by_fingerprint(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env, member("10.0.0.1@A") as a:
        first = await a.heartbeat(env, heartbeatFingerprint=11)
        assert first.ext_fields == {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "false"}
        same = await a.heartbeat(env, topics=(), heartbeatFingerprint=11, withoutSub=True)
        assert same.ext_fields["IS_SUB_CHANGE"] == "false"
        # withoutSub keeps the subscriptions the broker already has
        assert await subscriptions(env) == [TOPIC]
        changed = await a.heartbeat(env, topics=(TOPIC, "Other"), heartbeatFingerprint=12)
        assert changed.ext_fields["IS_SUB_CHANGE"] == "true"
        assert await subscriptions(env) == ["Other", TOPIC]


async def test_group_without_config_is_skipped_when_auto_create_is_off(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, autoCreateSubscriptionGroup=False) as env, member("10.0.0.1@A") as a:
        response = await a.heartbeat(env, group="UNKNOWN_GROUP")
        assert response.code == ResponseCode.SUCCESS
        assert (await consumer_ids(env, "UNKNOWN_GROUP")).code == ResponseCode.SYSTEM_ERROR
        got = await env.call(request(RequestCode.GET_TOPIC_CONFIG, {"topic": "%RETRY%UNKNOWN_GROUP"}))
        assert got.code == ResponseCode.TOPIC_NOT_EXIST
        # system groups exist without auto-creation
        assert (await a.heartbeat(env, group="TOOLS_CONSUMER")).code == ResponseCode.SUCCESS
        assert ids_of(await consumer_ids(env, "TOOLS_CONSUMER")) == [a.client_id]


async def test_bad_heartbeat_body_is_a_readable_error(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        response = await env.call(request(RequestCode.HEART_BEAT, body=b"not json"))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert (response.remark or "").startswith("bad HeartbeatData body")
        odd = b'{"clientID":"c","consumerDataSet":[{"groupName":"G","messageModel":"SIDEWAYS"}]}'
        response = await env.call(request(RequestCode.HEART_BEAT, body=odd))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert "SIDEWAYS" in (response.remark or "")
        assert (await consumer_ids(env, "G")).code == ResponseCode.SYSTEM_ERROR


async def test_check_client_config_accepts_tags_and_refuses_sql_without_property_filter(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        tag = b'{"clientId":"c","group":"G","subscriptionData":{"topic":"T","subString":"*","expressionType":"TAG"}}'
        assert (
            await env.call(request(RequestCode.CHECK_CLIENT_CONFIG, body=tag))
        ).code == ResponseCode.SUCCESS
        sql = tag.replace(b'"TAG"', b'"SQL92"').replace(b'"*"', b'"a > 1"')
        response = await env.call(request(RequestCode.CHECK_CLIENT_CONFIG, body=sql))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == "The broker does not support consumer to filter message by SQL92"


async def test_closing_the_only_member_removes_the_group(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env, member("10.0.0.1@A") as a:
        await a.heartbeat(env)
        await a.client.close_connection(env.addr)
        await wait_for_ids(env, [])


async def test_a_step_of_the_wall_clock_expires_no_client_and_no_lock(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # client heartbeats and queue-lock renewals are timed on a monotonic clock: the wall clock
    # stepped forward past channelExpiredTimeout (NTP, a laptop resumed) expires no client -- it
    # expired every client, and the groups' members dropped their queues until their next
    # heartbeat -- and stepped back it keeps no lock beyond its life (a dead client's queues
    # stayed locked for as long as the step)
    wall_ns = time.time_ns
    async with broker_env(tmp_path) as env, member("c1") as c1, member("c2") as c2:
        env.broker.locks.max_live_ms = 300
        assert (await c1.heartbeat(env)).code == ResponseCode.SUCCESS
        assert await c1.lock(env, [0]) == [0]
        monkeypatch.setattr(time, "time_ns", lambda: wall_ns() + 200_000 * 1_000_000)
        await env.broker.expire_clients()
        assert ids_of(await consumer_ids(env)) == ["c1"]
        monkeypatch.setattr(time, "time_ns", lambda: wall_ns() - 3_600_000 * 1_000_000)
        assert await c2.lock(env, [0]) == []  # c1's lock lives
        await trio.sleep(0.4)  # c1 renewed nothing for longer than the lock's life
        assert await c2.lock(env, [0]) == [0]


async def test_time_the_broker_process_did_not_run_expires_no_client_and_no_lock(
    tmp_path: os.PathLike[str],
) -> None:
    # the broker's process does not run for 1.5 s (stopped, as by a shell's Ctrl-Z; here its event
    # loop is blocked) with a client heard just before: neither the client nor its queue lock,
    # both with a life of 1 s, expire for the time the broker could not hear them -- they did,
    # all at once, and the groups' members dropped their queues until their next heartbeat --
    # but both still expire when the client stays silent while the broker runs
    async with (
        broker_env(tmp_path, channelExpiredTimeout=1000) as env,
        member("c1") as c1,
        member("c2") as c2,
    ):
        env.broker.locks.max_live_ms = 1000
        assert (await c1.heartbeat(env)).code == ResponseCode.SUCCESS
        assert await c1.lock(env, [0]) == [0]
        time.sleep(1.5)  # noqa: ASYNC251 -- on purpose: the whole process stands still
        await trio.sleep(0.2)
        await env.broker.expire_clients()
        assert ids_of(await consumer_ids(env)) == ["c1"]
        assert await c2.lock(env, [0]) == []  # c1's lock lives
        await trio.sleep(1.1)  # silent while the broker runs: past both lives
        await env.broker.expire_clients()
        assert (await consumer_ids(env)).code != ResponseCode.SUCCESS  # no member left
        assert await c2.lock(env, [0]) == [0]
