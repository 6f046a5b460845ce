"""Bad input to a real broker over real sockets: each request gets upstream's response code and a
readable remark, and the broker keeps serving good requests afterwards (issue 3, "Bad input")."""

from __future__ import annotations

import logging
import os

import pytest

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from store.config import BrokerRole
from tests.integration.broker_env import BrokerEnv, broker_env
from tests.integration.broker_requests import (
    batch_body,
    describe,
    ext,
    messages,
    pull_header,
    pull_request,
    send_request,
    send_text,
    simple_request,
)

TOPIC = "BadInputTopic"
GROUP = "BadInputGroup"
MAX_SIZE = 1024


async def assert_still_serving(env: BrokerEnv) -> None:
    """A good send on a fresh queue is stored and can be pulled back."""
    marker = f"still-serving-{os.urandom(4).hex()}"
    sent = await send_text(env, "StillServingTopic", marker, queue_id=1)
    response = await env.call(pull_request("StillServingGroup", "StillServingTopic", 1, sent.queueOffset))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    assert [m.body.decode() for m in messages(response)] == [marker]


async def expect(env: BrokerEnv, cmd: RemotingCommand, code: int, *remark_parts: str) -> RemotingCommand:
    response = await env.call(cmd)
    assert response.code == code, describe(response)
    for part in remark_parts:
        assert part in (response.remark or ""), describe(response)
    return response


# --- send ------------------------------------------------------------------------------------------


async def test_body_over_max_message_size_is_message_illegal(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, maxMessageSize=MAX_SIZE) as env:
        response = await expect(
            env,
            send_request(TOPIC, b"x" * (MAX_SIZE + 1)),
            ResponseCode.MESSAGE_ILLEGAL,
            str(MAX_SIZE + 1),
            str(MAX_SIZE),
        )
        assert "msgId" not in ext(response)
        # the same through SEND_MESSAGE_V2 and as one item of a batch
        await expect(
            env,
            send_request(TOPIC, b"x" * (MAX_SIZE + 1), code=RequestCode.SEND_MESSAGE_V2),
            ResponseCode.MESSAGE_ILLEGAL,
            "limit",
        )
        body = batch_body([b"ok", b"y" * (MAX_SIZE + 1)])
        await expect(
            env,
            send_request(TOPIC, body, code=RequestCode.SEND_BATCH_MESSAGE),
            ResponseCode.MESSAGE_ILLEGAL,
            "limit",
        )
        # exactly at the limit is fine, and nothing of the refused sends was stored
        sent = await send_text(env, TOPIC, "z" * MAX_SIZE)
        assert sent.queueOffset == 0
        await assert_still_serving(env)


async def test_a_refused_send_is_logged_once_per_reason(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    # the official C++ client reports every refused send as "No route info of this topic": the
    # broker's log says why (a topic's refusals with the same code again within the interval only
    # at DEBUG)
    caplog.set_level(logging.DEBUG, logger="broker.send")
    async with broker_env(tmp_path, maxMessageSize=MAX_SIZE) as env:
        for extra in (1, 1, 2, 3):  # other sizes, other remarks: still one warning
            await expect(env, send_request(TOPIC, b"x" * (MAX_SIZE + extra)), ResponseCode.MESSAGE_ILLEGAL)
        await expect(env, send_request("bad topic"), ResponseCode.INVALID_PARAMETER)
    warnings = [
        r.getMessage() for r in caplog.records if r.name == "broker.send" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"send to {TOPIC} refused, MESSAGE_ILLEGAL (13): ")
    assert str(MAX_SIZE + 1) in warnings[0]
    assert warnings[1].startswith("send to bad topic refused, INVALID_PARAMETER (")


async def test_properties_over_32767_bytes_are_message_illegal(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        huge = "K\x01" + "v" * 32_800 + "\x02"
        await expect(env, send_request(TOPIC, properties=huge), ResponseCode.MESSAGE_ILLEGAL, "32767")
        # a batch item's properties fit its 2-byte length field, but not once the broker adds
        # CLUSTER and UNIQ_KEY
        almost = "K\x01" + "v" * 32_750 + "\x02"
        await expect(
            env,
            send_request(TOPIC, batch_body([b"a"], [almost]), code=RequestCode.SEND_BATCH_MESSAGE),
            ResponseCode.MESSAGE_ILLEGAL,
            "32767",
        )
        await assert_still_serving(env)


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("bad topic", "illegal characters"),
        ("bad/topic", "illegal characters"),
        ("tópico", "illegal characters"),
        ("T" * 128, "max length 127"),
    ],
)
async def test_bad_topic_name_is_invalid_parameter(tmp_path: os.PathLike[str], topic: str, why: str) -> None:
    async with broker_env(tmp_path) as env:
        await expect(env, send_request(topic), ResponseCode.INVALID_PARAMETER, why)
        await expect(
            env, send_request(topic, code=RequestCode.SEND_MESSAGE_V2), ResponseCode.INVALID_PARAMETER, why
        )
        # the refused topic was not auto-created
        response = await env.call(simple_request(RequestCode.GET_TOPIC_CONFIG, topic=topic))
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, describe(response)
        await send_text(env, "T" * 127, "the longest legal name")
        await assert_still_serving(env)


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"])
async def test_send_to_forbidden_system_topic_is_no_permission(
    tmp_path: os.PathLike[str], topic: str
) -> None:
    async with broker_env(tmp_path) as env:
        await expect(env, send_request(topic), ResponseCode.NO_PERMISSION, topic, "forbidden")
        await assert_still_serving(env)


async def test_send_to_slave_is_service_not_available(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, brokerRole=BrokerRole.SLAVE, brokerId=1) as env:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            await expect(env, send_request(TOPIC, code=code), ResponseCode.SERVICE_NOT_AVAILABLE, "slave")
        await expect(
            env,
            send_request(TOPIC, batch_body([b"a", b"b"]), code=RequestCode.SEND_BATCH_MESSAGE),
            ResponseCode.SERVICE_NOT_AVAILABLE,
            "slave",
        )
        # the slave still answers reads
        response = await env.call(simple_request(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId=0))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert ext(response)["offset"] == "0"


async def test_queue_id_beyond_the_topics_queues_is_invalid_parameter(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "creates the topic with 4 queues")
        await expect(
            env,
            send_request(TOPIC, queue_id=4),
            ResponseCode.INVALID_PARAMETER,
            "queueId[4]",
            "writeQueueNums",
        )
        await expect(
            env,
            send_request(TOPIC, queue_id=1000, code=RequestCode.SEND_MESSAGE_V2),
            ResponseCode.INVALID_PARAMETER,
            "queueId[1000]",
        )
        await send_text(env, TOPIC, "the last queue is fine", queue_id=3)
        await assert_still_serving(env)


# --- pull ------------------------------------------------------------------------------------------


async def test_pull_of_unknown_group_without_auto_create_is_group_not_exist(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path, autoCreateSubscriptionGroup=False) as env:
        await send_text(env, TOPIC, "m")
        await expect(
            env,
            pull_request("NoSuchGroup", TOPIC, 0, 0),
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            "NoSuchGroup",
        )
        response = await env.call(
            simple_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )  # the group was not created by the pull
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert b"NoSuchGroup" not in response.body_bytes


async def test_pull_of_unknown_topic_is_topic_not_exist(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await expect(
            env, pull_request(GROUP, "NoSuchTopic", 0, 0), ResponseCode.TOPIC_NOT_EXIST, "NoSuchTopic"
        )
        await assert_still_serving(env)


@pytest.mark.parametrize("queue_id", [4, 99, -1])
async def test_pull_of_queue_id_out_of_range_is_invalid_parameter(
    tmp_path: os.PathLike[str], queue_id: int
) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "creates the topic with 4 queues")
        await expect(
            env,
            pull_request(GROUP, TOPIC, queue_id, 0),
            ResponseCode.INVALID_PARAMETER,
            f"queueId[{queue_id}]",
            "readQueueNums",
        )
        await assert_still_serving(env)


async def test_pull_offset_beyond_max_is_offset_moved_to_max(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for i in range(3):
            await send_text(env, TOPIC, f"m{i}")
        response = await expect(env, pull_request(GROUP, TOPIC, 0, 10), ResponseCode.PULL_OFFSET_MOVED)
        assert response.remark, describe(response)
        header = pull_header(response)
        assert (header.nextBeginOffset, header.minOffset, header.maxOffset) == (3, 0, 3)
        assert not response.body_bytes
        # exactly at max: nothing new yet (not an error)
        response = await expect(env, pull_request(GROUP, TOPIC, 0, 3), ResponseCode.PULL_NOT_FOUND)
        assert pull_header(response).nextBeginOffset == 3
        # the corrected offset works
        response = await expect(env, pull_request(GROUP, TOPIC, 0, 0), ResponseCode.SUCCESS)
        assert [m.body for m in messages(response)] == [b"m0", b"m1", b"m2"]


async def test_pull_nonzero_offset_of_empty_queue_is_offset_moved_to_zero(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "only in queue 0", queue_id=0)
        response = await expect(env, pull_request(GROUP, TOPIC, 2, 5), ResponseCode.PULL_OFFSET_MOVED)
        assert pull_header(response).nextBeginOffset == 0


# --- malformed requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "fields", "missing"),
    [
        (RequestCode.SEND_MESSAGE, {"producerGroup": "PG", "queueId": "0"}, "topic"),
        (RequestCode.SEND_MESSAGE_V2, {"a": "PG", "e": "0"}, "b"),
        (RequestCode.PULL_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}, "queueOffset"),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC}, "queueId"),
        (RequestCode.GET_MAX_OFFSET, {"queueId": "0"}, "topic"),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": GROUP}, "offset"),
        (RequestCode.VIEW_MESSAGE_BY_ID, {}, "offset"),
    ],
)
async def test_header_missing_required_field_is_system_error_naming_it(
    tmp_path: os.PathLike[str], code: int, fields: dict[str, str], missing: str
) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "m")
        await expect(env, request(code, dict(fields), body=b"x"), ResponseCode.SYSTEM_ERROR, repr(missing))
        await assert_still_serving(env)


async def test_header_field_of_wrong_type_is_system_error_naming_it(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        cmd = pull_request(GROUP, TOPIC, 0, 0)
        assert cmd.ext_fields is not None
        cmd.ext_fields["queueOffset"] = "not-a-number"
        await expect(env, cmd, ResponseCode.SYSTEM_ERROR, "queueOffset", "not-a-number")
        await assert_still_serving(env)


def _truncated_batch() -> bytes:
    return batch_body([b"first", b"second"])[:-3]


def _inconsistent_batch() -> bytes:
    body = bytearray(batch_body([b"first"]))
    body[3] += 1  # totalSize no longer matches the lengths inside the record
    return bytes(body)


@pytest.mark.parametrize(
    "body",
    [_truncated_batch(), _inconsistent_batch(), b"\x00\x00\x00\x10", b""],
    ids=["truncated", "inconsistent-total", "short-head", "empty"],
)
@pytest.mark.parametrize("cpp_style", [False, True], ids=["code-320", "code-10-batch"])
async def test_malformed_batch_body_is_message_illegal(
    tmp_path: os.PathLike[str], body: bytes, cpp_style: bool
) -> None:
    async with broker_env(tmp_path) as env:
        if cpp_style:
            cmd = send_request(TOPIC, body, code=RequestCode.SEND_MESSAGE, batch=True)
        else:
            cmd = send_request(TOPIC, body, code=RequestCode.SEND_BATCH_MESSAGE)
        await expect(env, cmd, ResponseCode.MESSAGE_ILLEGAL, "batch")
        response = await env.call(simple_request(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId=0))
        assert ext(response).get("offset") == "0", describe(response)  # nothing of it was stored
        await assert_still_serving(env)


# --- lookups by commit-log offset ------------------------------------------------------------------


async def test_send_back_of_offset_that_is_no_message_is_system_error(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        sent = await send_text(env, TOPIC, "a real message")
        response = await env.call(simple_request(RequestCode.VIEW_MESSAGE_BY_ID, offset=0))
        record_size = messages(response)[0].total_size
        for bad in (record_size + 1_000_000, 7, -1):
            await expect(
                env,
                simple_request(RequestCode.CONSUMER_SEND_MSG_BACK, offset=bad, group=GROUP, delayLevel=0),
                ResponseCode.SYSTEM_ERROR,
                "look message by offset failed",
                str(bad),
            )
        # no retry topic was created for the failed send-backs
        response = await env.call(simple_request(RequestCode.GET_TOPIC_CONFIG, topic=f"%RETRY%{GROUP}"))
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, describe(response)
        assert sent.queueOffset == 0
        await assert_still_serving(env)


async def test_view_message_of_bad_offset_is_system_error(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "a real message")
        for bad in (10_000_000, 5, -1):
            await expect(
                env,
                simple_request(RequestCode.VIEW_MESSAGE_BY_ID, offset=bad),
                ResponseCode.SYSTEM_ERROR,
                str(bad),
            )
        await assert_still_serving(env)
