"""Request builders and response readers for the broker integration tests (Python remoting client).

Builders return a :class:`RemotingCommand` ready for ``env.call``; the readers turn responses into
typed headers and decoded messages, so each test states what it sends and what it expects.
"""

from __future__ import annotations

from collections.abc import Mapping

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.headers import decode_header, encode_header
from remoting.protocol.broker import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
)
from remoting.protocol.message import (
    BatchItem,
    StoredMessage,
    encode_batch_body,
    iter_messages,
    properties_to_string,
)
from tests.integration.broker_env import BrokerEnv

PRODUCER_GROUP = "TestProducerGroup"


def props(**kv: str) -> str:
    """A properties string (``KEY\\x01value\\x02`` pairs) from keyword arguments."""
    return properties_to_string(kv)


def send_request(
    topic: str,
    body: bytes = b"hello",
    *,
    code: int = RequestCode.SEND_MESSAGE,
    queue_id: int = 0,
    properties: str | None = None,
    born_timestamp: int = 1,
    reconsume_times: int | None = None,
    max_reconsume_times: int | None = None,
    batch: bool | None = None,
    group: str = PRODUCER_GROUP,
) -> RemotingCommand:
    """A SEND_MESSAGE (long field names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (compact) request."""
    header = SendMessageRequestHeader(
        producerGroup=group,
        topic=topic,
        queueId=queue_id,
        bornTimestamp=born_timestamp,
        properties=properties,
        reconsumeTimes=reconsume_times,
        maxReconsumeTimes=max_reconsume_times,
        batch=batch,
    )
    if code == RequestCode.SEND_MESSAGE:
        ext = encode_header(header)
    else:
        ext = encode_header(SendMessageRequestHeaderV2.from_v1(header))
    return request(code, dict(ext), body=body)


def batch_body(bodies: list[bytes], properties: list[str] | None = None) -> bytes:
    """A SEND_BATCH_MESSAGE body of ``bodies`` (each with its own properties string)."""
    ps = properties or [""] * len(bodies)
    return encode_batch_body(BatchItem(0, b, p) for b, p in zip(bodies, ps, strict=True))


def pull_request(
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_nums: int = 32,
    subscription: str = "*",
    suspend_ms: int | None = None,
    commit_offset: int | None = None,
) -> RemotingCommand:
    """A PULL_MESSAGE with the subscription in the request; suspended (long poll) when
    ``suspend_ms`` is given, committing ``commit_offset`` when given."""
    sys_flag = PullSysFlag.SUBSCRIPTION
    if suspend_ms is not None:
        sys_flag |= PullSysFlag.SUSPEND
    if commit_offset is not None:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    header = PullMessageRequestHeader(
        consumerGroup=group,
        topic=topic,
        queueId=queue_id,
        queueOffset=offset,
        maxMsgNums=max_nums,
        sysFlag=sys_flag,
        commitOffset=commit_offset if commit_offset is not None else 0,
        suspendTimeoutMillis=suspend_ms if suspend_ms is not None else 15000,
        subscription=subscription,
    )
    return request(RequestCode.PULL_MESSAGE, dict(encode_header(header)))


def simple_request(code: int, **fields: object) -> RemotingCommand:
    return request(code, dict(fields))


def create_topic_request(topic: str, queues: int) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC of ``topic`` with ``queues`` read and write queues (mqadmin's defaults
    otherwise)."""
    return simple_request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        topic=topic,
        defaultTopic="TBW102",
        readQueueNums=queues,
        writeQueueNums=queues,
        perm=6,
        topicFilterType="SINGLE_TAG",
        order=False,
    )


def pull_header(response: RemotingCommand) -> PullMessageResponseHeader:
    return decode_header(response, PullMessageResponseHeader)


def send_header(response: RemotingCommand) -> SendMessageResponseHeader:
    return decode_header(response, SendMessageResponseHeader)


def messages(response: RemotingCommand) -> list[StoredMessage]:
    """The stored records in a pull / query / view response body."""
    return list(iter_messages(response.body_bytes))


def describe(response: RemotingCommand) -> str:
    """For assertion messages: code, remark and extFields."""
    return f"code={response.code} remark={response.remark!r} ext={response.ext_fields}"


async def send_ok(env: BrokerEnv, cmd: RemotingCommand) -> SendMessageResponseHeader:
    """Send and insist on SUCCESS; the response header."""
    response = await env.call(cmd)
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return send_header(response)


async def send_text(
    env: BrokerEnv, topic: str, text: str, *, queue_id: int = 0, **properties: str
) -> SendMessageResponseHeader:
    return await send_ok(
        env, send_request(topic, text.encode(), queue_id=queue_id, properties=props(**properties) or None)
    )


async def pull_all(
    env: BrokerEnv, group: str, topic: str, queue_id: int, offset: int = 0, *, subscription: str = "*"
) -> list[StoredMessage]:
    """Every message of the queue from ``offset`` on (several pulls, no suspend)."""
    out: list[StoredMessage] = []
    while True:
        response = await env.call(pull_request(group, topic, queue_id, offset, subscription=subscription))
        if response.code == ResponseCode.PULL_NOT_FOUND:
            return out
        assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), describe(
            response
        )
        out += messages(response) if response.code == ResponseCode.SUCCESS else []
        nxt = pull_header(response).nextBeginOffset
        assert nxt > offset, f"pull from {offset} did not advance: {describe(response)}"
        offset = nxt


def ext(response: RemotingCommand) -> Mapping[str, str]:
    return response.ext_fields or {}
