"""Random requests to a live broker (hypothesis): every request code the broker serves, plus unknown
ones, with header fields drawn from every request header's field names and values chosen to hit
edges (negative and overflowing numbers, booleans, empty strings, invalid and system topic names,
control characters) and bodies that are random bytes, JSON or a well-formed batch.

What must hold after any such sequence (the "Bad input" standard): each request is answered with a
response code (a held pull may instead stay unanswered until its timeout), the broker keeps serving,
a message stored before the sequence is still there, and the broker starts again from the files the
sequence left behind with that message intact -- no request can corrupt the store or write a config
file that a restart cannot read.

Requests are mostly plausible (the header the handler reads, every field of the right type except
up to two; shaped JSON bodies for heartbeats, locks, subscription groups and the topic and group
lists), so that they get past the header checks into the handlers. ``BROKER_FUZZ_EXAMPLES=3000``
runs a longer search (40 examples by default); ``FUZZ_REMARKS=1`` with
``--hypothesis-show-statistics`` lists which responses the requests got."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Container
from pathlib import Path

import msgspec
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import CommandHeader
from remoting.protocol import broker as broker_headers
from remoting.protocol import controller as controller_headers
from remoting.protocol.message import BatchItem, encode_batch_body
from tests.integration.broker_env import BrokerEnv, broker_env, wait_until
from tests.integration.broker_requests import pull_all, send_text
from tests.integration.fuzzkit import (
    RequestPool,
    any_value,
    check_answer,
    field_names,
    header_classes,
    json_values,
    typed_value,
)
from tests.integration.replication_kit import commit_log_bytes
from tests.integration.test_controller_mode import FILE_SIZE as CTL_FILE_SIZE
from tests.integration.test_controller_mode import controller_mode, master_and_slave, send_all

MARKER_TOPIC = "FuzzMarkerTopic"
MARKER_GROUP = "FuzzMarkerGroup"
MARKER_TEXT = "stored before the fuzzing"

#: a valid value here legitimately changes what the broker serves (brokerPermission=0,
#: maxMessageSize=1, ...), so the "still serving" check could not tell a bug from a setting
EXCLUDED = {RequestCode.UPDATE_BROKER_CONFIG}
#: every request code upstream defines (the ones the broker does not serve must be refused as such)
CODES = sorted({int(c) for c in RequestCode} | {0, 9999, -7})
#: codes whose request may be held (long polling) rather than answered within the timeout
MAY_HOLD = {RequestCode.PULL_MESSAGE}
ANSWER_TIMEOUT = 5.0  # generous: a loaded CI machine must not turn a slow answer into a failure
#: refusals that must say why (a remark naming the field, topic or group at fault)
MUST_EXPLAIN = {
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
    ResponseCode.MESSAGE_ILLEGAL,
    ResponseCode.NO_PERMISSION,
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    ResponseCode.SUBSCRIPTION_NOT_EXIST,
    ResponseCode.SUBSCRIPTION_NOT_LATEST,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    ResponseCode.INVALID_PARAMETER,
}


HEADERS = header_classes(broker_headers, controller_headers)
FIELDS = field_names(HEADERS)
#: the header each handler reads, so that most requests get past the header check into the handler
HEADER_OF: dict[int, type[CommandHeader]] = {
    RequestCode.SEND_MESSAGE: broker_headers.SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: broker_headers.SendMessageRequestHeaderV2,
    RequestCode.SEND_BATCH_MESSAGE: broker_headers.SendMessageRequestHeaderV2,
    RequestCode.PULL_MESSAGE: broker_headers.PullMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: broker_headers.QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: broker_headers.UpdateConsumerOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: broker_headers.TopicQueueRequestHeader,
    RequestCode.GET_MIN_OFFSET: broker_headers.TopicQueueRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: broker_headers.TopicQueueRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: broker_headers.SearchOffsetRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: broker_headers.ViewMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: broker_headers.QueryMessageRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: broker_headers.ConsumerSendMsgBackRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: broker_headers.CreateTopicRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: broker_headers.DeleteTopicRequestHeader,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: broker_headers.DeleteSubscriptionGroupRequestHeader,
    RequestCode.GET_CONSUME_STATS: broker_headers.GetConsumeStatsRequestHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: broker_headers.GetConsumerConnectionListRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: broker_headers.GetConsumerListByGroupRequestHeader,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: broker_headers.GetProducerConnectionListRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: broker_headers.GetTopicStatsInfoRequestHeader,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: broker_headers.QueryTopicConsumeByWhoRequestHeader,
    RequestCode.QUERY_CONSUME_QUEUE: broker_headers.QueryConsumeQueueRequestHeader,
    RequestCode.UNREGISTER_CLIENT: broker_headers.UnregisterClientRequestHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: broker_headers.ResetOffsetRequestHeader,
    RequestCode.GET_CONSUMER_RUNNING_INFO: broker_headers.GetConsumerRunningInfoRequestHeader,
    RequestCode.NOTIFY_BROKER_ROLE_CHANGED: controller_headers.NotifyBrokerRoleChangedRequestHeader,
}
NAMES = [
    "FuzzTopic",
    "FuzzGroup",
    "%RETRY%FuzzGroup",
    "%DLQ%FuzzGroup",
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "TestCluster",
    "broker-a",
    "127.0.0.1:1",
]
ANY_VALUE = any_value(NAMES)
STR_VALUE = st.sampled_from(NAMES)
#: fields whose valid values are not names
SPECIAL_VALUES: dict[str, st.SearchStrategy[str]] = {
    name: strategy
    for names, strategy in (
        (
            ("properties", "i"),
            st.sampled_from(
                [
                    "TAGS\x01TagA\x02",
                    "TAGS\x01TagB\x02KEYS\x01k1 k2\x02UNIQ_KEY\x010A0B0C\x02",
                    "DELAY\x013\x02",
                    "TRAN_MSG\x01true\x02",
                    "",
                ]
            ),
        ),
        (("subscription",), st.sampled_from(["*", "TagA", "TagA || TagB", "a = 1"])),
        (("expressionType",), st.sampled_from(["TAG", "SQL92"])),
        (
            ("msgId", "offsetMsgId", "originMsgId"),
            st.sampled_from(["7F0000010000271100000000000000AA", "00"]),
        ),
        (("perm",), st.sampled_from(["2", "4", "6", "7"])),
        (("bornTimestamp", "g", "timestamp", "beginTimestamp", "endTimestamp"), st.just("1700000000000")),
    )
    for name in names
}
JSON_KEYS = [
    *FIELDS,
    "groupName",
    "clientID",
    "mqSet",
    "brokerName",
    "consumerDataSet",
    "producerDataSet",
    "subscriptionDataSet",
    "retryQueueNums",
    "retryMaxTimes",
    "consumeEnable",
    "brokerId",
    "offsetTable",
    "topicConfigTable",
]
JSON = json_values(JSON_KEYS, NAMES)
BATCH = st.lists(
    st.builds(
        BatchItem,
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=64),
        st.sampled_from(
            ["", "TAGS\x01TagA\x02", "KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02", "bad", "\x01\x02\x01"]
        ),
    ),
    min_size=1,
    max_size=4,
).map(encode_batch_body)
SMALL = st.integers(-1, 20)
NAME = st.sampled_from(NAMES)
SUBSCRIPTION = st.fixed_dictionaries(
    {
        "topic": NAME,
        "subString": st.sampled_from(["*", "TagA", "TagA || TagB"]),
        "tagsSet": st.lists(st.sampled_from(["TagA", "TagB"]), max_size=2),
        "codeSet": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=2),
        "subVersion": st.integers(0, 2**62),
        "expressionType": st.sampled_from(["TAG", "SQL92"]),
    }
)
QUEUE = st.fixed_dictionaries(
    {"topic": NAME, "brokerName": st.sampled_from(["broker-a", "broker-x"]), "queueId": SMALL}
)
#: LOCK_BATCH_MQ and UNLOCK_BATCH_MQ bodies have the same shape
LOCK_BODY = st.fixed_dictionaries(
    {"consumerGroup": NAME, "clientId": st.sampled_from(["c1", "c2"]), "mqSet": st.lists(QUEUE, max_size=3)}
)
GROUP_BODY = st.fixed_dictionaries(
    {
        "groupName": NAME,
        "consumeEnable": st.booleans(),
        "consumeBroadcastEnable": st.booleans(),
        "retryQueueNums": SMALL,
        "retryMaxTimes": SMALL,
        "brokerId": SMALL,
        "whichBrokerWhenConsumeSlowly": SMALL,
    }
)
#: bodies of the requests that carry one, shaped as the clients send them (field values still vary)
BODY_OF: dict[int, st.SearchStrategy[object]] = {
    RequestCode.HEART_BEAT: st.fixed_dictionaries(
        {
            "clientID": st.sampled_from(["127.0.0.1@1", "127.0.0.1@2", ""]),
            "producerDataSet": st.lists(st.fixed_dictionaries({"groupName": NAME}), max_size=2),
            "consumerDataSet": st.lists(
                st.fixed_dictionaries(
                    {
                        "groupName": NAME,
                        "consumeType": st.sampled_from(["CONSUME_PASSIVELY", "CONSUME_ACTIVELY", "X"]),
                        "messageModel": st.sampled_from(["CLUSTERING", "BROADCASTING"]),
                        "consumeFromWhere": st.sampled_from(
                            ["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_TIMESTAMP"]
                        ),
                        "subscriptionDataSet": st.lists(SUBSCRIPTION, max_size=2),
                        "unitMode": st.booleans(),
                    }
                ),
                max_size=2,
            ),
        }
    ),
    RequestCode.LOCK_BATCH_MQ: LOCK_BODY,
    RequestCode.UNLOCK_BATCH_MQ: LOCK_BODY,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: GROUP_BODY,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: st.fixed_dictionaries(
        {"groupConfigList": st.lists(GROUP_BODY, max_size=3)}
    ),
    RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: st.fixed_dictionaries(
        {
            "topicConfigList": st.lists(
                st.fixed_dictionaries(
                    {"topicName": NAME},
                    optional={
                        "readQueueNums": SMALL,
                        "writeQueueNums": SMALL,
                        "perm": st.sampled_from([2, 4, 6, 7, 9]),
                        "topicFilterType": st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "X"]),
                        "order": st.booleans(),
                        "attributes": st.dictionaries(
                            st.sampled_from(["+message.type", "-message.type", "+queue.type", "x"]),
                            st.sampled_from(["NORMAL", "FIFO", "MIXED", "BatchCQ", ""]),
                            max_size=2,
                        ),
                    },
                ),
                max_size=3,
            )
        }
    ),
}
BODIES = st.one_of(st.none(), st.binary(max_size=256), JSON.map(msgspec.json.encode), BATCH)


def _valid(cls: type[CommandHeader], name: str, wire_name: str) -> st.SearchStrategy[str]:
    return typed_value(cls, name, wire_name, SPECIAL_VALUES, STR_VALUE)


POOL = RequestPool(
    codes=st.sampled_from(sorted(HEADER_OF.keys() | BODY_OF.keys())) | st.sampled_from(CODES),
    header_of=HEADER_OF,
    headers=HEADERS,
    body_of=BODY_OF,
    bodies=BODIES,
    valid=_valid,
    anything=ANY_VALUE,
    fields=FIELDS,
)


@st.composite
def requests(draw: st.DrawFn) -> RemotingCommand:
    """A request of any code (see :meth:`tests.integration.fuzzkit.RequestPool.draw`)."""
    return POOL.draw(draw)


async def _marker(env: BrokerEnv) -> list[str]:
    return [m.body.decode() for m in await pull_all(env, MARKER_GROUP, MARKER_TOPIC, 0)]


async def _fuzz(
    client: RemotingClient,
    addr: str,
    handlers: Container[int],
    sequence: list[RemotingCommand],
    skip: set[int],
) -> None:
    """Send the sequence (but the ``skip`` codes) to the broker at ``addr``; check each answer."""
    for cmd in sequence:
        if cmd.code in skip:
            continue
        try:
            response = await client.invoke(addr, cmd, ANSWER_TIMEOUT)
        except RemotingTimeoutError:
            assert cmd.code in MAY_HOLD, f"no answer to {cmd}"
            continue
        except RemotingError as e:
            raise AssertionError(f"{cmd} -> {type(e).__name__}: {e}") from None
        check_answer(cmd, response, served=cmd.code in handlers, must_explain=MUST_EXPLAIN)


async def _run(root: str, sequence: list[RemotingCommand]) -> None:
    async with broker_env(root) as env:
        await send_text(env, MARKER_TOPIC, MARKER_TEXT)
        await _fuzz(env.client, env.addr, env.broker.processor_table.handlers, sequence, EXCLUDED)
        # still serving: the stored message reads back, a new one is stored and read back
        assert await _marker(env) == [MARKER_TEXT]
        await send_text(env, MARKER_TOPIC, "stored after the fuzzing")
    async with broker_env(root) as env:
        assert await _marker(env) == [MARKER_TEXT, "stored after the fuzzing"]


@settings(
    max_examples=int(os.environ.get("BROKER_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sequence=st.lists(requests(), min_size=1, max_size=25))
def test_random_requests_never_stop_the_broker_or_damage_what_it_stored(
    sequence: list[RemotingCommand],
) -> None:
    root = tempfile.mkdtemp(prefix="broker-fuzz-")
    try:
        trio.run(_run, root, sequence)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _run_on_a_slave(root: str, sequence: list[RemotingCommand]) -> None:
    async with controller_mode(Path(root)) as env:
        master, slave = await master_and_slave(env)
        before = [f"before {i}".encode() for i in range(8)]
        await send_all(env, master, before)
        await _fuzz(
            env.client,
            slave.addr,
            slave.broker.processor_table.handlers,
            sequence,
            # a valid role notification legitimately makes the slave something else
            EXCLUDED | {RequestCode.NOTIFY_BROKER_ROLE_CHANGED},
        )
        # still a slave in sync: sends acknowledged by both go on, and the slave's commit log is the
        # master's byte for byte (nothing the requests did wrote to it)
        assert slave.is_slave
        after = [f"after {i}".encode() for i in range(8)]
        await send_all(env, master, after)
        end = master.broker.store.max_phy_offset
        await wait_until(lambda: slave.broker.store.max_phy_offset == end, 10, "slave caught up")
        root_path = Path(root)
        assert commit_log_bytes(root_path / "b" / "store", 0, end, CTL_FILE_SIZE) == commit_log_bytes(
            root_path / "a" / "store", 0, end, CTL_FILE_SIZE
        )
        assert sorted(await env.pull_bodies(master)) == sorted(before + after)
        assert master.broker.replication.sync_state_set == {1, 2}


@settings(
    max_examples=int(os.environ.get("BROKER_FUZZ_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sequence=st.lists(requests(), min_size=1, max_size=25))
def test_random_requests_to_a_slave_leave_its_commit_log_the_masters(sequence: list[RemotingCommand]) -> None:
    """The same requests to the slave of a controller-mode pair: whatever they ask of it, it writes
    nothing of its own to its commit log and keeps replicating."""
    root = tempfile.mkdtemp(prefix="slave-fuzz-")
    try:
        trio.run(_run_on_a_slave, root, sequence)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_fuzz_header_fields_cover_the_send_and_pull_headers() -> None:
    """The field pool really holds the header names the handlers read (guards the introspection)."""
    for name in ("topic", "queueId", "consumerGroup", "queueOffset", "maxMsgNums", "sysFlag", "a", "b", "e"):
        assert name in FIELDS, name
