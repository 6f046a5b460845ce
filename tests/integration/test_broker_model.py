"""Model test of a live broker over the wire (hypothesis): random sequences of sends (V1, V2, batch;
tags, keys, user properties; an explicit or a broker-chosen queue), pulls (offsets below, inside,
at and past a queue's range; tag subscriptions; with and without an offset commit), consumer-offset
commits and queries, min/max offsets, offsets by store time (LOWER and UPPER), lookups by key and
by offset message id, consumers' send-backs (to the retry topic, parked by delay level, or the
dead-letter topic; a copy sent back again), topic creation (widened or narrowed) and deletion,
and graceful restarts -- each answer compared with a plain in-memory model of what upstream's
broker answers.

The model follows upstream 5.x, not this project's code: ``DefaultMessageStore.getMessage``
(statuses, the next begin offset, a filtered scan that stops after ``max(16000 B, 20 B x
maxMsgNums)`` of consume-queue units or at the end of the unit file, at most 32 messages in memory),
``PullMessageProcessor`` (status to response code; the request's commit offset is stored whatever
the status), ``ConsumerManageProcessor.queryConsumerOffset`` (a group that never committed reads 0
from a queue that starts at 0 -- 4.x's rule, which this project keeps for an empty queue too),
``consumerSendMsgBack`` (the retry or DLQ topic created and persisted, one more reconsume time,
RETRY_TOPIC and ORIGIN_MESSAGE_ID kept from the first), ``getOffsetInQueueByTime``, ``deleteTopicInBroker`` (queues
and the topic's consumer offsets go, the commit log keeps the records: lookups by id and key still
find them). Consume-queue files of 8 units, so that scans and queues cross file ends.

``BROKER_MODEL_EXAMPLES`` sets the number of sequences (20 by default; the slave test runs half as
many), ``BROKER_MODEL_MIN_OPS`` their least length (5). A crash is a copy of the broker's files
taken at once (see :func:`snapshot`); the slave test crashes brokers with ``abandon``."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio
from hypothesis import given
from hypothesis import strategies as st

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.protocol.broker import LockBatchRequestBody, LockBatchResponseBody
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import StoredMessage, decode_message, decode_offset_msg_id
from store.config import BrokerRole
from tests.integration.broker_env import (
    BROKER_NAME,
    SKIPPED,
    BrokerEnv,
    broker_env,
    model_settings,
    no_file_replaced,
    run_in_temp_dir,
    snapshot,
    wait_until,
)
from tests.integration.broker_requests import (
    batch_body,
    describe,
    ext,
    messages,
    props,
    pull_all,
    pull_header,
    pull_request,
    send_header,
    send_request,
    simple_request,
)
from tests.integration.replication_kit import Running, replication_group
from tests.integration.storekit import read_queue
from tests.integration.test_broker_admin import create_topic as admin_create_topic

TOPICS = ("ModelA", "ModelB")
INITIAL_QUEUES = {"ModelA": 2, "ModelB": 3}
#: queue ids drawn for requests: past every topic's queue count too (-1: the broker picks one)
QUEUE_IDS = st.integers(-1, 4)
GROUPS = ("ModelG1", "ModelG2")
TAGS = (None, "TagA", "TagB", "TagC")
KEYS = (None, "k1", "k2", "k1 k3")
SUBSCRIPTIONS = ("*", "TagA", "TagA || TagB", "TagC", "TagZ")
CQ_UNITS = 8
#: upstream ``maxFilterMessageSize`` and consume-queue unit size
MAX_FILTER_BYTES = 16000
UNIT = 20
MAX_IN_MEMORY_COUNT = 32
QUERY_MAX_NUM = 64
CONFIG = {
    "mappedFileSizeConsumeQueue": CQ_UNITS * UNIT,
    "mappedFileSizeCommitLog": 64 * 1024,
    "autoCreateTopicEnable": False,
    # a small index file (the default one is a 400 MiB sparse file, which a crash copy reads whole)
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
}


@dataclass
class Msg:
    topic: str
    queue: int
    offset: int
    body: bytes
    tags: str | None
    keys: str | None
    user: str
    phys: int = -1
    #: what CONSUMER_SEND_MSG_BACK sets: the times consumed, the RETRY_TOPIC and ORIGIN_MESSAGE_ID
    #: properties (the first topic and message id of a message sent back again and again)
    reconsume: int = 0
    retry_topic: str | None = None
    origin: str | None = None


@dataclass
class Topic:
    queues: int
    data: dict[int, list[Msg]] = field(default_factory=dict)

    def queue(self, q: int) -> list[Msg]:
        return self.data.setdefault(q, [])


@dataclass
class Model:
    topics: dict[str, Topic] = field(default_factory=dict)
    #: (group, topic, queue) -> committed offset
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: every message ever stored, deleted topics' too (the commit log keeps them)
    stored: list[Msg] = field(default_factory=list)
    #: every value a (group, topic, queue) offset held since the last clean stop (0: never committed)
    offset_history: dict[tuple[str, str, int], set[int]] = field(default_factory=dict)
    serial: int = 0
    #: group -> (topic, queue) -> index of the client holding its rebalance lock (in memory on the
    #: broker, as upstream: a restart or a crash drops them; none expires in a sequence's time)
    locks: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def set_offset(self, key: tuple[str, str, int], offset: int | None) -> None:
        self.offset_history.setdefault(key, {self.offsets.get(key, 0)})
        if offset is None:
            self.offsets.pop(key, None)
        else:
            self.offsets[key] = offset
        self.offset_history[key].add(offset if offset is not None else 0)

    def body(self, size: int) -> bytes:
        self.serial += 1
        head = f"m{self.serial}:".encode()
        return head + b"x" * max(0, size - len(head))


def message_props(tags: str | None, keys: str | None, user: str) -> str:
    kv = {"USER": user}
    if tags is not None:
        kv["TAGS"] = tags
    if keys is not None:
        kv["KEYS"] = keys
    return props(**kv)


def matches(msg: Msg, subscription: str) -> bool:
    if subscription == "*":
        return True
    return msg.tags in {t.strip() for t in subscription.split("||")}


def expected_pull(
    queue: list[Msg], offset: int, max_nums: int, subscription: str
) -> tuple[int, int, list[Msg]]:
    """(response code, next begin offset, messages) as upstream's store and pull processor answer."""
    max_offset = len(queue)
    if max_offset == 0:
        return (ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND), 0, []
    if offset < 0:
        return ResponseCode.PULL_OFFSET_MOVED, 0, []
    if offset == max_offset:
        return ResponseCode.PULL_NOT_FOUND, offset, []
    if offset > max_offset:
        return ResponseCode.PULL_OFFSET_MOVED, max_offset, []
    scan_bytes = max(MAX_FILTER_BYTES, max_nums * UNIT)
    file_end = (offset // CQ_UNITS + 1) * CQ_UNITS
    found: list[Msg] = []
    next_begin = offset
    for qo in range(offset, min(max_offset, file_end)):
        if (qo - offset) * UNIT >= scan_bytes:
            break
        if found and (len(found) + 1 > max_nums or len(found) > MAX_IN_MEMORY_COUNT - 1):
            break
        next_begin = qo + 1
        if matches(queue[qo], subscription):
            found.append(queue[qo])
    return (ResponseCode.SUCCESS if found else ResponseCode.PULL_RETRY_IMMEDIATELY), next_begin, found


def check_message(got: StoredMessage, want: Msg, context: str) -> None:
    assert (got.topic, got.queue_id, got.queue_offset, got.body) == (
        want.topic,
        want.queue,
        want.offset,
        want.body,
    ), f"{context}: got {got.topic}/{got.queue_id}@{got.queue_offset} {got.body[:20]!r}, want {want}"
    assert (got.tags, got.keys, got.properties.get("USER")) == (want.tags, want.keys, want.user), context
    if want.phys >= 0:
        assert got.physical_offset == want.phys, context


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: upstream ``messageDelayLevel``'s 18 levels and ``SCHEDULE_TOPIC_XXXX``'s 18 queues
DELAY_LEVELS = 18
#: a subscription group's ``retryMaxTimes`` (upstream default)
RETRY_MAX_TIMES = 16
#: client ids of orderly consumers, and the queues they lock
CLIENTS = ("127.0.0.1@model-1", "127.0.0.1@model-2")
LOCK_QUEUES = (("ModelA", 0), ("ModelA", 1), ("ModelB", 0))


# --- the operations --------------------------------------------------------------------------------

topic_ix = st.integers(0, len(TOPICS) - 1)
one_op = st.one_of(
    st.tuples(
        st.just("send"),
        topic_ix,
        QUEUE_IDS,
        st.integers(1, 2000),
        st.integers(0, len(TAGS) - 1),
        st.integers(0, len(KEYS) - 1),
        st.booleans(),
    ),
    st.tuples(
        st.just("batch"),
        topic_ix,
        QUEUE_IDS,
        st.lists(
            st.tuples(st.integers(0, len(TAGS) - 1), st.integers(0, len(KEYS) - 1)),
            min_size=1,
            max_size=12,
        ),
    ),
    st.tuples(
        st.just("pull"),
        st.integers(0, len(GROUPS) - 1),
        topic_ix,
        st.integers(0, 3),
        st.sampled_from(["below", "inside", "inside", "inside", "max", "past", "zero"]),
        st.floats(0, 1),
        st.sampled_from([1, 2, 5, 32, 40]),
        st.integers(0, len(SUBSCRIPTIONS) - 1),
        st.booleans(),
    ),
    st.tuples(
        st.just("commit"),
        st.integers(0, len(GROUPS) - 1),
        topic_ix,
        st.integers(0, 3),
        st.integers(0, 50),
    ),
    st.tuples(st.just("query_offset"), st.integers(0, len(GROUPS) - 1), topic_ix, st.integers(0, 3)),
    st.tuples(st.just("minmax"), topic_ix, st.integers(0, 3)),
    st.tuples(st.just("key"), topic_ix, st.sampled_from(["k1", "k2", "k3"])),
    st.tuples(st.just("view"), st.floats(0, 1)),
    st.tuples(st.just("delete"), topic_ix),
    st.tuples(st.just("create"), topic_ix, st.integers(1, 4)),
    st.tuples(
        st.just("send_back"),
        st.integers(0, len(GROUPS) - 1),
        st.floats(0, 1),
        st.sampled_from([-1, 0, 0, 2, 20]),  # delay level: DLQ at once, the count's, a level, past 18
        st.sampled_from([None, 0, 1, 2, 3]),  # maxReconsumeTimes of the request
    ),
    st.tuples(
        st.just("search"),
        topic_ix,
        st.integers(0, 3),
        st.floats(0, 1),
        st.sampled_from(["at", "before", "after", "zero", "future"]),
        st.sampled_from(["LOWER", "UPPER"]),
    ),
    st.tuples(
        st.just("lock"),
        st.integers(0, len(GROUPS) - 1),
        st.integers(0, len(CLIENTS) - 1),
        st.lists(st.sampled_from(LOCK_QUEUES), min_size=1, max_size=3, unique=True),
    ),
    st.tuples(
        st.just("unlock"),
        st.integers(0, len(GROUPS) - 1),
        st.integers(0, len(CLIENTS) - 1),
        st.lists(st.sampled_from(LOCK_QUEUES), min_size=1, max_size=3, unique=True),
    ),
    st.tuples(
        st.just("retry_send"),
        st.integers(0, len(GROUPS) - 1),
        st.sampled_from([0, 1, 3, 16, 17]),  # reconsume times of the request
        st.sampled_from([None, 0, 2]),  # its maxReconsumeTimes
        st.sampled_from([None, "0", "3", "25", "-1"]),  # the DELAY property a client set
        st.sampled_from([-1, 0, 0, 1]),  # queue id: the retry topic has one queue
        st.booleans(),
    ),
    st.just(("restart",)),
    st.just(("crash",)),
)
ops = st.lists(one_op, min_size=int(os.environ.get("BROKER_MODEL_MIN_OPS", "5")), max_size=60)


async def create_topic(env: BrokerEnv, topic: str, queues: int) -> None:
    response = await admin_create_topic(env, topic, queues)
    assert response.code == ResponseCode.SUCCESS, describe(response)


def record_send(model: Model, topic: str, sent: list[Msg], response: RemotingCommand) -> None:
    """Check a send's answer against the model and file the messages with their offsets."""
    header = send_header(response)
    t = model.topics[topic]
    queue = header.queueId
    assert 0 <= queue < t.queues, f"queue {queue} chosen outside the topic's {t.queues}"
    q = t.queue(queue)
    assert header.queueOffset == len(q), (
        f"send to {topic}/{queue}: offset {header.queueOffset}, model {len(q)}"
    )
    ids = header.msgId.split(",") if header.msgId else []
    assert len(ids) == len(sent), f"{len(ids)} message ids for {len(sent)} messages"
    for i, (msg, msg_id) in enumerate(zip(sent, ids, strict=True)):
        msg.queue, msg.offset = queue, len(q)
        msg.phys = decode_offset_msg_id(msg_id)[2]
        assert i == 0 or msg.phys > sent[i - 1].phys
        q.append(msg)
        model.stored.append(msg)


async def do_send(env: BrokerEnv, model: Model, op: tuple) -> None:
    _, ti, queue, size, tag_i, key_i, v2 = op
    topic = TOPICS[ti]
    tags, keys = TAGS[tag_i], KEYS[key_i]
    msg = Msg(topic, queue, -1, model.body(size), tags, keys, f"u{model.serial}")
    code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    response = await env.call(
        send_request(
            topic, msg.body, code=code, queue_id=queue, properties=message_props(tags, keys, msg.user)
        ),
    )
    expect_send_refusal(model, topic, queue, response)
    if response.code == ResponseCode.SUCCESS:
        record_send(model, topic, [msg], response)


def expect_send_refusal(model: Model, topic: str, queue: int, response: RemotingCommand) -> None:
    t = model.topics.get(topic)
    if t is None:
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, describe(response)
    elif queue >= t.queues:
        assert response.code == ResponseCode.INVALID_PARAMETER, describe(response)
        assert f"queueId[{queue}] is illegal" in (response.remark or ""), describe(response)
    else:
        assert response.code == ResponseCode.SUCCESS, describe(response)


async def do_batch(env: BrokerEnv, model: Model, op: tuple) -> None:
    _, ti, queue, items = op
    topic = TOPICS[ti]
    sent = []
    for tag_i, key_i in items:
        body = model.body(100)
        sent.append(Msg(topic, queue, -1, body, TAGS[tag_i], KEYS[key_i], f"u{model.serial}"))
    body = batch_body([m.body for m in sent], [message_props(m.tags, m.keys, m.user) for m in sent])
    response = await env.call(
        send_request(topic, body, code=RequestCode.SEND_BATCH_MESSAGE, queue_id=queue, batch=True)
    )
    expect_send_refusal(model, topic, queue, response)
    if response.code == ResponseCode.SUCCESS:
        record_send(model, topic, sent, response)


def pull_offset(queue: list[Msg], where: str, frac: float) -> int:
    n = len(queue)
    return {
        "below": -1,
        "inside": int(frac * n) if n else 0,
        "max": n,
        "past": n + 1 + int(frac * 5),
        "zero": 0,
    }[where]


async def do_pull(env: BrokerEnv, model: Model, op: tuple) -> None:
    _, gi, ti, queue, where, frac, max_nums, si, commit = op
    group, topic, subscription = GROUPS[gi], TOPICS[ti], SUBSCRIPTIONS[si]
    t = model.topics.get(topic)
    q = t.queue(queue) if t is not None else []
    offset = pull_offset(q, where, frac)
    commit_offset = int(frac * 40) if commit else None
    response = await env.call(
        pull_request(
            group,
            topic,
            queue,
            offset,
            max_nums=max_nums,
            subscription=subscription,
            commit_offset=commit_offset,
        ),
    )
    context = (
        f"pull {group} {topic}/{queue}@{offset} max {max_nums} sub {subscription!r}: {describe(response)}"
    )
    if t is None:
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, context
        return
    if queue >= t.queues:
        assert response.code == ResponseCode.INVALID_PARAMETER, context
        return
    code, next_begin, want = expected_pull(q, offset, max_nums, subscription)
    assert response.code == code, f"{context}; model code {code}"
    header = pull_header(response)
    assert header.nextBeginOffset == next_begin, f"{context}; model next {next_begin}"
    assert (header.minOffset, header.maxOffset) == (0, len(q)), context
    got = messages(response) if response.code == ResponseCode.SUCCESS else []
    assert len(got) == len(want), (
        f"{context}; got {[m.queue_offset for m in got]}, model {[m.offset for m in want]}"
    )
    for g, w in zip(got, want, strict=True):
        check_message(g, w, context)
    if commit_offset is not None:
        model.set_offset((group, topic, queue), commit_offset)


async def do_commit(env: BrokerEnv, model: Model, op: tuple) -> None:
    _, gi, ti, queue, offset = op
    group, topic = GROUPS[gi], TOPICS[ti]
    response = await env.call(
        simple_request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            consumerGroup=group,
            topic=topic,
            queueId=queue,
            commitOffset=offset,
        ),
    )
    if topic not in model.topics:
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, describe(response)
        return
    assert response.code == ResponseCode.SUCCESS, describe(response)
    model.set_offset((group, topic, queue), offset)


async def check_query_offset(env: BrokerEnv, model: Model, group: str, topic: str, queue: int) -> None:
    response = await env.call(
        simple_request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=queue),
    )
    context = f"query offset {group} {topic}/{queue}: {describe(response)}"
    # never committed: 0, as every queue here starts at 0 and is in memory (upstream 4.x's rule, kept
    # for empty queues too; 5.x answers QUERY_NOT_FOUND for an empty one)
    want = model.offsets.get((group, topic, queue), 0)
    assert response.code == ResponseCode.SUCCESS, context
    assert int(ext(response)["offset"]) == want, f"{context}; model {want}"


async def check_minmax(env: BrokerEnv, model: Model, topic: str, queue: int) -> None:
    t = model.topics.get(topic)
    n = len(t.data.get(queue, [])) if t is not None else 0
    for code, want in ((RequestCode.GET_MAX_OFFSET, n), (RequestCode.GET_MIN_OFFSET, 0)):
        response = await env.call(simple_request(code, topic=topic, queueId=queue))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert int(ext(response)["offset"]) == want, (
            f"{topic}/{queue} code {code}: {describe(response)}, model {want}"
        )


async def do_key(env: BrokerEnv, model: Model, op: tuple) -> None:
    _, ti, key = op
    topic = TOPICS[ti]
    want = sorted(m.body for m in model.stored if m.topic == topic and m.keys and key in m.keys.split())
    if len(want) > QUERY_MAX_NUM:
        return

    async def bodies() -> tuple[RemotingCommand, list[bytes]]:
        response = await env.call(
            request(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": topic,
                    "key": key,
                    "maxNum": QUERY_MAX_NUM,
                    "beginTimestamp": 0,
                    "endTimestamp": int(time.time() * 1000) + 60_000,
                },
            ),
        )
        got = sorted(m.body for m in messages(response)) if response.code == ResponseCode.SUCCESS else []
        return response, got

    # the index is written just after dispatch: give it a moment
    with trio.move_on_after(5):
        while (await bodies())[1] != want:
            await trio.sleep(0.02)
    response, got = await bodies()
    assert got == want, f"query {topic} key {key}: {describe(response)}, {len(got)} found, model {len(want)}"
    if not want:
        assert response.code == ResponseCode.QUERY_NOT_FOUND, describe(response)


async def do_view(env: BrokerEnv, model: Model, op: tuple) -> None:
    if not model.stored:
        return
    want = model.stored[min(len(model.stored) - 1, int(op[1] * len(model.stored)))]
    response = await env.call(simple_request(RequestCode.VIEW_MESSAGE_BY_ID, offset=want.phys))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    (got,) = messages(response)
    check_message(got, want, f"view {want.phys}")


async def do_send_back(env: BrokerEnv, model: Model, op: tuple) -> None:
    """A consumer hands a message back (CONSUMER_SEND_MSG_BACK, upstream ``consumerSendMsgBack``):
    consumed its maximum number of times, or asked with delay level -1, it goes to the group's
    dead-letter topic (queue 0, readable at once); else to its retry topic with a delay level
    (the request's, else 3 + the times consumed; at most 18), parked until then in
    SCHEDULE_TOPIC_XXXX's queue level - 1. Either way it counts one more consumption and keeps
    its body, flag, tags, keys and properties. The copy is read back where the model puts it."""
    _, gi, frac, delay_level, max_times_asked = op
    if not model.stored:
        return
    group = GROUPS[gi]
    target = model.stored[min(len(model.stored) - 1, int(frac * len(model.stored)))]
    fields: dict[str, object] = {"offset": target.phys, "group": group, "delayLevel": delay_level}
    if max_times_asked is not None:
        fields["maxReconsumeTimes"] = max_times_asked
    response = await env.call(simple_request(RequestCode.CONSUMER_SEND_MSG_BACK, **fields))
    context = f"send back {target.topic}/{target.queue}@{target.offset} (at {target.phys}) for {group}: {describe(response)}"
    assert response.code == ResponseCode.SUCCESS, context
    max_times = RETRY_MAX_TIMES if max_times_asked is None else max_times_asked
    retry = retry_topic(group)
    if target.reconsume >= max_times or delay_level < 0:
        topic, queue = dlq_topic(group), 0
        model.topics.setdefault(topic, Topic(1))
        level = 0
    else:
        model.topics.setdefault(retry, Topic(1))
        level = min(DELAY_LEVELS, delay_level if delay_level > 0 else 3 + target.reconsume)
        topic, queue = SCHEDULE_TOPIC, level - 1
        model.topics.setdefault(topic, Topic(DELAY_LEVELS))
    q = model.topics[topic].queue(queue)
    copy = Msg(
        topic,
        queue,
        len(q),
        target.body,
        target.tags,
        target.keys,
        target.user,
        reconsume=target.reconsume + 1,
        retry_topic=target.retry_topic or target.topic,
        origin=target.origin,
    )
    got = await read_one(env, topic, queue, copy.offset)
    context += f"; stored as {topic}/{queue}@{copy.offset}"
    check_message(got, copy, context)
    assert got.reconsume_times == copy.reconsume, f"{context}: reconsumed {got.reconsume_times} times"
    p = got.properties
    assert p.get("RETRY_TOPIC") == copy.retry_topic, f"{context}: {p}"
    assert p.get("MAX_RECONSUME_TIMES") == str(max_times), f"{context}: {p}"
    origin = p.get("ORIGIN_MESSAGE_ID", "")
    if copy.origin is None:
        assert decode_offset_msg_id(origin)[2] == target.phys, f"{context}: ORIGIN_MESSAGE_ID {origin!r}"
        copy.origin = origin
    else:
        assert origin == copy.origin, f"{context}: ORIGIN_MESSAGE_ID {origin!r}, first {copy.origin!r}"
    if level:
        assert (p.get("DELAY"), p.get("REAL_TOPIC"), p.get("REAL_QID")) == (str(level), retry, "0"), (
            f"{context}: {p}"
        )
    else:
        assert p.get("DELAY") == "0", f"{context}: {p}"  # upstream's setDelayTimeLevel(0)
    copy.phys = got.physical_offset
    q.append(copy)
    model.stored.append(copy)


async def read_one(env: BrokerEnv, topic: str, queue: int, offset: int) -> StoredMessage:
    """The message at ``offset`` of a queue, once dispatched (waits up to 5 s)."""
    last = ""
    with trio.move_on_after(5):
        while True:
            response = await env.call(pull_request("ModelAudit", topic, queue, offset, max_nums=1))
            if response.code == ResponseCode.SUCCESS:
                (got,) = messages(response)
                return got
            last = describe(response)
            await trio.sleep(0.02)
    raise AssertionError(f"{topic}/{queue}@{offset} not readable: {last}")


async def do_search(env: BrokerEnv, model: Model, op: tuple) -> None:
    """SEARCH_OFFSET_BY_TIMESTAMP (upstream ``ConsumeQueue.getOffsetInQueueByTime``) at, just
    before or just after a message's store time, or before or after them all: LOWER is the first
    offset stored at or after the time (the max offset when none is), UPPER the last one stored at
    or before it (0 when none is). The queue's store times are read first (they are the broker's)."""
    _, ti, queue, frac, where, boundary = op
    topic = TOPICS[ti]
    t = model.topics.get(topic)
    q = t.data.get(queue, []) if t is not None else []
    if t is None or queue >= t.queues or not q:
        return
    got = await pull_all(env, "ModelAudit", topic, queue)
    assert [m.body for m in got] == [m.body for m in q], f"{topic}/{queue} before a search"
    times = [m.store_timestamp for m in got]
    at = times[min(len(times) - 1, int(frac * len(times)))]
    when = {"at": at, "before": at - 1, "after": at + 1, "zero": 0, "future": times[-1] + 3_600_000}[where]
    if boundary == "LOWER":
        want = next((i for i, ts in enumerate(times) if ts >= when), len(times))
    else:
        want = max((i for i, ts in enumerate(times) if ts <= when), default=0)
    response = await env.call(
        simple_request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            topic=topic,
            queueId=queue,
            timestamp=when,
            boundaryType=boundary,
        )
    )
    context = f"search {topic}/{queue} {boundary} {when} ({where}) in {times}: {describe(response)}"
    assert response.code == ResponseCode.SUCCESS, context
    assert int(ext(response)["offset"]) == want, f"{context}; model {want}"


def lock_body(group: str, client: str, queues: list[tuple[str, int]]) -> bytes:
    mqs = [MessageQueue(topic=t, brokerName=BROKER_NAME, queueId=q) for t, q in queues]
    return LockBatchRequestBody(consumerGroup=group, clientId=client, mqSet=mqs).encode()


async def do_lock(env: BrokerEnv, model: Model, op: tuple) -> None:
    """LOCK_BATCH_MQ (upstream ``RebalanceLockManager.tryLockBatch``): each queue that is free or
    the client's own is locked (or renewed) for it; the answer lists them."""
    _, gi, ci, queues = op
    group = GROUPS[gi]
    held = model.locks.setdefault(group, {})
    want = sorted(mq for mq in queues if held.get(mq, ci) == ci)
    response = await env.call(
        request(RequestCode.LOCK_BATCH_MQ, body=lock_body(group, CLIENTS[ci], queues)),
    )
    context = f"lock {queues} for {CLIENTS[ci]} of {group}, held {held}: {describe(response)}"
    assert response.code == ResponseCode.SUCCESS, context
    granted = LockBatchResponseBody.decode(response.body_bytes).lockOKMQSet
    assert all(mq.brokerName == BROKER_NAME for mq in granted), context
    assert sorted((mq.topic, mq.queueId) for mq in granted) == want, f"{context}; model {want}"
    for mq in want:
        held[mq] = ci


async def do_unlock(env: BrokerEnv, model: Model, op: tuple) -> None:
    """UNLOCK_BATCH_MQ: the client's own locks among the queues are released, others' stay."""
    _, gi, ci, queues = op
    group = GROUPS[gi]
    response = await env.call(
        request(RequestCode.UNLOCK_BATCH_MQ, body=lock_body(group, CLIENTS[ci], queues)),
    )
    assert response.code == ResponseCode.SUCCESS, describe(response)
    held = model.locks.get(group, {})
    for mq in queues:
        if held.get(mq) == ci:
            del held[mq]


async def do_retry_send(env: BrokerEnv, model: Model, op: tuple) -> None:
    """A send to a group's retry topic (what a client does when its send-back failed; upstream
    ``handleRetryAndDLQ``): the retry topic is created with one queue if need be; past the
    maximum reconsume times (the request's, else the group's 16) -- or at once while any client
    of the group holds a queue lock (an orderly consumer) -- the message goes to the group's
    dead-letter topic with DELAY=-1; otherwise to the retry topic, parked by its DELAY level."""
    _, gi, reconsume, max_times_asked, delay, queue, v2 = op
    group = GROUPS[gi]
    retry = retry_topic(group)
    msg = Msg(retry, queue, -1, model.body(300), "TagA", "k2", f"u{model.serial}", reconsume=reconsume)
    extra = {"DELAY": delay} if delay is not None else {}
    code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    response = await env.call(
        send_request(
            retry,
            msg.body,
            code=code,
            queue_id=queue,
            properties=props(TAGS=msg.tags or "", KEYS=msg.keys or "", USER=msg.user, **extra),
            reconsume_times=reconsume,
            max_reconsume_times=max_times_asked,
        )
    )
    context = (
        f"send to {retry}/{queue} reconsumed {reconsume} max {max_times_asked} DELAY {delay}, "
        f"locks {model.locks.get(group)}: {describe(response)}"
    )
    model.topics.setdefault(retry, Topic(1))
    if queue >= 1:
        assert response.code == ResponseCode.INVALID_PARAMETER, context
        return
    assert response.code == ResponseCode.SUCCESS, context
    max_times = RETRY_MAX_TIMES if max_times_asked is None else max_times_asked
    level = 0
    if reconsume > max_times or model.locks.get(group):
        topic, queue = dlq_topic(group), 0
        model.topics.setdefault(topic, Topic(1))
        want_delay: str | None = "-1"
    elif delay is not None and int(delay) > 0:
        level = min(DELAY_LEVELS, int(delay))
        topic, queue = SCHEDULE_TOPIC, level - 1
        model.topics.setdefault(topic, Topic(DELAY_LEVELS))
        want_delay = str(level)
    else:
        topic, queue = retry, 0
        want_delay = delay
    q = model.topics[topic].queue(queue)
    msg.topic, msg.queue, msg.offset = topic, queue, len(q)
    assert send_header(response).queueOffset == msg.offset, f"{context}; model {topic}/{queue}@{msg.offset}"
    got = await read_one(env, topic, queue, msg.offset)
    context += f"; stored as {topic}/{queue}@{msg.offset}"
    check_message(got, msg, context)
    assert got.reconsume_times == reconsume, f"{context}: reconsumed {got.reconsume_times} times"
    p = got.properties
    assert p.get("DELAY") == want_delay, f"{context}: {p}"
    if level:
        assert (p.get("REAL_TOPIC"), p.get("REAL_QID")) == (retry, "0"), f"{context}: {p}"
    msg.phys = got.physical_offset
    q.append(msg)
    model.stored.append(msg)


async def do_delete(env: BrokerEnv, model: Model, op: tuple) -> None:
    topic = TOPICS[op[1]]
    response = await env.call(simple_request(RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    model.topics.pop(topic, None)
    for k in [k for k in model.offset_history if k[1] == topic]:
        del model.offset_history[k]  # the deletion is durable at once: no old value comes back
    for k in [k for k in model.offsets if k[1] == topic]:
        del model.offsets[k]


async def do_create(env: BrokerEnv, model: Model, op: tuple) -> None:
    _, ti, queues = op
    topic = TOPICS[ti]
    await create_topic(env, topic, queues)
    t = model.topics.setdefault(topic, Topic(queues))
    t.queues = queues  # narrowed or widened: the queues' data stays


async def check_everything(env: BrokerEnv, model: Model) -> None:
    """Every queue of every topic read whole, every offset queried, min/max of every queue."""
    for topic, t in model.topics.items():
        for queue in range(t.queues):
            q = t.data.get(queue, [])
            got: list[StoredMessage] = []
            offset = 0
            while offset < len(q):
                response = await env.call(pull_request("ModelAudit", topic, queue, offset))
                assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), describe(
                    response
                )
                got += messages(response) if response.code == ResponseCode.SUCCESS else []
                offset = pull_header(response).nextBeginOffset
            assert len(got) == len(q), f"{topic}/{queue}: read {len(got)}, model {len(q)}"
            for g, w in zip(got, q, strict=True):
                check_message(g, w, f"audit {topic}/{queue}")
    for topic in TOPICS:
        for queue in range(4):
            await check_minmax(env, model, topic, queue)
            for group in GROUPS:
                await check_query_offset(env, model, group, topic, queue)


HANDLERS = {
    "send": do_send,
    "batch": do_batch,
    "pull": do_pull,
    "commit": do_commit,
    "key": do_key,
    "view": do_view,
    "delete": do_delete,
    "create": do_create,
    "send_back": do_send_back,
    "search": do_search,
    "lock": do_lock,
    "unlock": do_unlock,
    "retry_send": do_retry_send,
}


async def reconcile_offsets(env: BrokerEnv, model: Model) -> None:
    """After a crash a committed offset may be any value it held since the last clean stop (the
    broker persists offsets every ``flushConsumerOffsetInterval``); take the broker's answer."""
    for key, history in model.offset_history.items():
        group, topic, queue = key
        response = await env.call(
            simple_request(
                RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=queue
            ),
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        got = int(ext(response)["offset"])
        assert got in history, f"offset of {key} after a crash: {got}, held since the last stop: {history}"
        if topic in model.topics:
            model.offsets[key] = got
        else:
            model.offsets.pop(key, None)
    model.offset_history.clear()


async def run_sequence(root: str, sequence: list[tuple]) -> None:
    model = Model()
    SKIPPED.clear()
    pending = list(sequence)
    first = True
    crashed = False
    roots = [root]
    try:
        while first or pending:
            async with broker_env(roots[-1], **CONFIG) as env:
                if first:
                    for topic, queues in INITIAL_QUEUES.items():
                        await create_topic(env, topic, queues)
                        model.topics[topic] = Topic(queues)
                    first = False
                if crashed:
                    await reconcile_offsets(env, model)
                    crashed = False
                while pending and pending[0][0] not in ("restart", "crash"):
                    op = pending.pop(0)
                    try:
                        if op[0] == "query_offset":
                            await check_query_offset(env, model, GROUPS[op[1]], TOPICS[op[2]], op[3])
                        elif op[0] == "minmax":
                            await check_minmax(env, model, TOPICS[op[1]], op[2])
                        else:
                            await HANDLERS[op[0]](env, model, op)
                    except AssertionError as exc:
                        exc.add_note(
                            f"at op {len(sequence) - len(pending) - 1}: {op}; model topics {model.topics}; "
                            f"files crash copies missed: {SKIPPED}"
                        )
                        raise
                if pending and pending[0][0] == "crash":
                    pending.pop(0)
                    async with no_file_replaced(env.broker):
                        roots.append(snapshot(roots[-1]))
                    crashed = True
                    model.locks.clear()
                    continue  # the next broker starts on the copy; this one stops (its files are left)
                await wait_until(lambda: env.broker.store.dispatch_behind_bytes == 0, what="dispatch")
                await check_everything(env, model)
                model.offset_history.clear()
                if pending:
                    pending.pop(0)  # the restart: leave the context, start again on the same files
                    model.locks.clear()
    finally:
        for extra in roots[1:]:
            shutil.rmtree(extra, ignore_errors=True)


EXAMPLES = int(os.environ.get("BROKER_MODEL_EXAMPLES", "20"))


@model_settings(EXAMPLES)
@given(sequence=ops)
def test_broker_answers_as_the_model(sequence: list[tuple]) -> None:
    run_in_temp_dir("broker-model-", run_sequence, sequence)


# --- the same sequences with a slave attached --------------------------------------------------------

replicated_ops = st.lists(
    st.one_of(
        one_op,
        st.just(("slave_restart",)),
        st.just(("slave_crash",)),
    ),
    min_size=int(os.environ.get("BROKER_MODEL_MIN_OPS", "5")),
    max_size=60,
)


def check_slave(slave: Running, model: Model) -> None:
    """The slave, caught up and synced, holds what the model holds: topics with their queue
    counts, every queue's messages, none of a deleted topic's, and the committed offsets."""
    sb = slave.broker
    for topic in TOPICS:
        t = model.topics.get(topic)
        config = sb.topics.get(topic)
        if t is None:
            assert config is None, f"slave keeps deleted topic {topic}"
            for queue in range(5):
                assert slave.store.get_max_offset_in_queue(topic, queue) == 0, f"slave {topic}/{queue}"
            continue
        assert config is not None, f"slave lacks topic {topic}"
        assert config.readQueueNums == t.queues, f"slave {topic}: {config}"
        for queue in range(max(5, t.queues)):
            got = [decode_message(b) for b in read_queue(slave.store, topic, queue)]
            want = t.data.get(queue, [])
            assert len(got) == len(want), f"slave {topic}/{queue}: {len(got)} messages, model {len(want)}"
            for g, w in zip(got, want, strict=True):
                check_message(g, w, f"slave {topic}/{queue}")
        for group in GROUPS:
            for queue in range(4):
                want_offset = model.offsets.get((group, topic, queue), -1)
                got_offset = sb.offsets.query(group, topic, queue)
                assert got_offset == want_offset, (
                    f"slave offset {group} {topic}/{queue}: {got_offset}, model {want_offset}"
                )


async def settle_slave(master: Running, slave: Running) -> None:
    await wait_until(
        lambda: (
            slave.store.max_phy_offset == master.store.max_phy_offset
            and slave.store.dispatch_behind_bytes == 0
        ),
        10,
        "slave catching up",
    )
    await slave.broker.replication.slave_sync.sync_all(master.addr)


async def run_replicated(root: str, sequence: list[tuple]) -> None:
    model = Model()
    roles = {
        "m": {"brokerRole": BrokerRole.ASYNC_MASTER},
        "s": {"brokerRole": BrokerRole.SLAVE, "brokerId": 1},
    }
    async with replication_group(Path(root)) as g:
        master = await g.start("m", **roles["m"], **CONFIG)
        # restarted on its ports, as a real master is: the slave keeps its master's addresses
        port = master.addr.rsplit(":", 1)[1]
        roles["m"] |= {"listenPort": int(port), "haListenPort": int(master.ha_addr.rsplit(":", 1)[1])}
        slave = await g.start("s", **roles["s"], **CONFIG)

        def env() -> BrokerEnv:
            return BrokerEnv(master.broker, g.namesrv, master.addr, g.namesrv_addr, g.client)

        for topic, queues in INITIAL_QUEUES.items():
            await create_topic(env(), topic, queues)
            model.topics[topic] = Topic(queues)
        for i, op in enumerate(sequence):
            try:
                if op[0] in ("restart", "crash"):
                    if op[0] == "restart":
                        await check_everything(env(), model)
                        await settle_slave(master, slave)
                        check_slave(slave, model)
                        model.offset_history.clear()
                    await g.stop(master, crash=op[0] == "crash")
                    model.locks.clear()
                    master = await g.start("m", **roles["m"], **CONFIG)
                    if op[0] == "crash":
                        await reconcile_offsets(env(), model)
                elif op[0] in ("slave_restart", "slave_crash"):
                    await g.stop(slave, crash=op[0] == "slave_crash")
                    slave = await g.start("s", **roles["s"], **CONFIG)
                elif op[0] == "query_offset":
                    await check_query_offset(env(), model, GROUPS[op[1]], TOPICS[op[2]], op[3])
                elif op[0] == "minmax":
                    await check_minmax(env(), model, TOPICS[op[1]], op[2])
                else:
                    await HANDLERS[op[0]](env(), model, op)
            except AssertionError as exc:
                exc.add_note(f"at op {i}: {op}; model topics {model.topics}")
                raise
        await wait_until(lambda: master.store.dispatch_behind_bytes == 0, what="dispatch")
        await check_everything(env(), model)
        await settle_slave(master, slave)
        check_slave(slave, model)


@model_settings(max(1, EXAMPLES // 2))
@given(sequence=replicated_ops)
def test_a_slave_converges_to_the_model(sequence: list[tuple]) -> None:
    """Classic master and slave: the master answers as the model, and the slave, once caught up
    and synced, holds the same topics, messages and offsets -- across restarts and crashes of
    either, and topics deleted and created again."""
    run_in_temp_dir("broker-model-repl-", run_replicated, sequence)
