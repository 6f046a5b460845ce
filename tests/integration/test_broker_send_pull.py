"""Send, pull, offsets and lookups against a real broker with the Python remoting client (issue 3):
SEND_MESSAGE / V2 / batch (incl. the C++ client's code-10 batch), response headers, TBW102
auto-creation, tag filtering, long polling, offset commits and queries, message lookups,
CONSUMER_SEND_MSG_BACK to the retry and dead-letter topics, and a broker restart."""

from __future__ import annotations

import logging
import os
import shutil
import time

import pytest
import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.headers import decode_header
from remoting.protocol.broker import (
    EarliestMsgStoretimeResponseHeader,
    LockBatchRequestBody,
    OffsetResponseHeader,
)
from remoting.protocol.common import MessageQueue, TopicConfig
from remoting.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
    decode_offset_msg_id,
    java_string_hash,
)
from tests.integration.broker_env import BrokerEnv, broker_env, no_file_replaced, snapshot, wait_until
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
    send_ok,
    send_request,
    send_text,
    simple_request,
)

TOPIC = "SendPullTopic"
GROUP = "SendPullGroup"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


async def offset_of(
    env: BrokerEnv, code: int, topic: str = TOPIC, queue_id: int = 0, **fields: object
) -> int:
    response = await env.call(simple_request(code, topic=topic, queueId=queue_id, **fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return decode_header(response, OffsetResponseHeader).offset


async def query_offset(env: BrokerEnv, group: str = GROUP, topic: str = TOPIC, queue_id: int = 0) -> int:
    return await offset_of(env, RequestCode.QUERY_CONSUMER_OFFSET, topic, queue_id, consumerGroup=group)


async def last_in_queue(env: BrokerEnv, topic: str, queue_id: int) -> StoredMessage:
    """The newest message of a queue."""
    top = await offset_of(env, RequestCode.GET_MAX_OFFSET, topic, queue_id)
    assert top > 0, f"{topic}/{queue_id} is empty"
    response = await env.call(pull_request("InspectorGroup", topic, queue_id, top - 1, max_nums=1))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    (msg,) = messages(response)
    return msg


# --- send ------------------------------------------------------------------------------------------


async def test_send_v1_and_v2_answer_offset_msg_id_queue_offset_and_region(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        headers = []
        for i, code in enumerate([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2] * 2):
            response = await env.call(
                send_request(TOPIC, f"m{i}".encode(), code=code, queue_id=1, properties=props(TAGS="t"))
            )
            assert response.code == ResponseCode.SUCCESS, describe(response)
            assert ext(response)["MSG_REGION"] == "DefaultRegion"
            assert ext(response)["TRACE_ON"] in ("true", "false")
            headers.append(send_header(response))
        assert [h.queueOffset for h in headers] == [0, 1, 2, 3]
        assert {h.queueId for h in headers} == {1}
        stored = await pull_all(env, GROUP, TOPIC, 1)
        assert [m.body for m in stored] == [b"m0", b"m1", b"m2", b"m3"]
        host, port = env.addr.split(":")
        for h, msg in zip(headers, stored, strict=True):
            assert decode_offset_msg_id(h.msgId) == (host, int(port), msg.physical_offset)
            assert msg.queue_offset == h.queueOffset
            # the broker gave each message a unique key and says so in transactionId
            assert h.transactionId == msg.properties[PROPERTY_UNIQ_KEY]
            assert msg.properties["CLUSTER"] == env.broker.broker_config.brokerClusterName
            assert msg.tags == "t"
        assert len({h.transactionId for h in headers}) == 4
        # physical offsets are the records' positions, back to back
        assert stored[1].physical_offset == stored[0].physical_offset + stored[0].total_size


async def test_send_keeps_a_client_unique_key(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        uniq = "7F0000010000ABCDEF0123456789ABCD"
        sent = await send_text(env, TOPIC, "with key", UNIQ_KEY=uniq, KEYS="order-1")
        assert sent.transactionId == uniq
        (msg,) = await pull_all(env, GROUP, TOPIC, 0)
        assert msg.uniq_key == uniq
        assert msg.keys == "order-1"


async def test_batch_send_stores_every_item_with_consecutive_offsets(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        first = await send_text(env, TOPIC, "before", queue_id=2)
        bodies = [f"b{i}".encode() for i in range(5)]
        item_props = [props(TAGS=f"tag{i}", KEYS=f"k{i}") for i in range(5)]
        response = await env.call(
            send_request(
                TOPIC, batch_body(bodies, item_props), code=RequestCode.SEND_BATCH_MESSAGE, queue_id=2
            )
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        h = send_header(response)
        assert (h.queueId, h.queueOffset) == (2, first.queueOffset + 1)
        stored = (await pull_all(env, GROUP, TOPIC, 2))[1:]
        assert [m.body for m in stored] == bodies
        assert [m.queue_offset for m in stored] == [1, 2, 3, 4, 5]
        assert [m.tags for m in stored] == [f"tag{i}" for i in range(5)]
        assert [m.keys for m in stored] == [f"k{i}" for i in range(5)]
        host, port = env.addr.split(":")
        ids = h.msgId.split(",")
        assert [decode_offset_msg_id(i) for i in ids] == [
            (host, int(port), m.physical_offset) for m in stored
        ]
        assert h.transactionId is not None
        assert h.transactionId.split(",") == [m.uniq_key for m in stored]
        assert ext(response)["MSG_REGION"] == "DefaultRegion"


async def test_cpp_style_batch_code_10_with_batch_1(tmp_path: os.PathLike[str]) -> None:
    """The C++ client sends batches as SEND_MESSAGE with ``batch:"1"`` and numbers as JSON numbers."""
    async with broker_env(tmp_path) as env:
        bodies = [b"c0", b"c1", b"c2"]
        fields = {
            "producerGroup": "CppGroup",
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": 3,
            "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000),
            "flag": 0,
            "properties": "",
            "reconsumeTimes": 0,
            "unitMode": "0",
            "batch": "1",
        }
        cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=fields, body=batch_body(bodies))  # type: ignore[arg-type]
        response = await env.call(cmd)
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert send_header(response).queueOffset == 0
        stored = await pull_all(env, GROUP, TOPIC, 3)
        assert [m.body for m in stored] == bodies


async def test_unknown_topic_is_auto_created_from_tbw102_and_routed(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        cmd = send_request("AutoTopic", b"first")
        assert cmd.ext_fields is not None
        cmd.ext_fields["defaultTopicQueueNums"] = "3"
        await send_ok(env, cmd)
        response = await env.call(simple_request(RequestCode.GET_TOPIC_CONFIG, topic="AutoTopic"))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        config = TopicConfig.decode(response.body_bytes)
        assert (config.readQueueNums, config.writeQueueNums) == (3, 3)

        async def routed() -> bool:
            r = await env.call(
                simple_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="AutoTopic"), env.namesrv_addr
            )
            return r.code == ResponseCode.SUCCESS

        with trio.fail_after(10):
            while not await routed():
                await trio.sleep(0.05)


async def test_unknown_topic_without_auto_create_is_topic_not_exist(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, autoCreateTopicEnable=False) as env:
        response = await env.call(send_request("AutoTopic"))
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, describe(response)
        assert "AutoTopic" in (response.remark or "")


# --- pull ------------------------------------------------------------------------------------------


async def test_pull_by_tag_filters_on_hash_then_exact_tag(tmp_path: os.PathLike[str]) -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")  # the classic collision
    async with broker_env(tmp_path) as env:
        for i, tag in enumerate(["TagA", "Aa", "TagB", "BB", "TagC", "Aa"]):
            await send_text(env, TOPIC, f"{i}-{tag}", TAGS=tag)
        await send_text(env, TOPIC, "untagged")
        got = await pull_all(env, GROUP, TOPIC, 0, subscription="TagA || TagC")
        assert [m.body for m in got] == [b"0-TagA", b"4-TagC"]
        got = await pull_all(env, GROUP, TOPIC, 0, subscription="Aa")
        assert [m.body for m in got] == [b"1-Aa", b"5-Aa"]  # "BB" has the same hash but another tag
        got = await pull_all(env, GROUP, TOPIC, 0, subscription="*")
        assert len(got) == 7
        # a pull whose whole window is filtered out still moves the consumer forward
        response = await env.call(pull_request(GROUP, TOPIC, 0, 6, subscription="TagA"))
        assert response.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND), describe(
            response
        )
        assert pull_header(response).nextBeginOffset == 7


async def test_pull_answers_count_limit_and_next_offsets(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for i in range(10):
            await send_text(env, TOPIC, f"m{i}")
        response = await env.call(pull_request(GROUP, TOPIC, 0, 2, max_nums=5))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert [m.body for m in messages(response)] == [f"m{i}".encode() for i in range(2, 7)]
        h = pull_header(response)
        assert (h.nextBeginOffset, h.minOffset, h.maxOffset, h.suggestWhichBrokerId) == (7, 0, 10, 0)


async def test_suspended_pull_is_answered_when_a_message_arrives(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "old", queue_id=0)
        await send_text(env, TOPIC, "old", queue_id=1)
        answers: dict[int, RemotingCommand] = {}

        async def long_poll(queue_id: int) -> None:
            answers[queue_id] = await env.client.invoke(
                env.addr, pull_request(GROUP, TOPIC, queue_id, 1, suspend_ms=20_000), 30
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll, 0)
            nursery.start_soon(long_poll, 1)
            await wait_until(lambda: env.broker.hold.held_count() == 2, what="both pulls held")
            assert answers == {}
            sent_at = trio.current_time()
            await send_text(env, TOPIC, "new", queue_id=0)
            await wait_until(lambda: 0 in answers, timeout=3, what="the queue-0 pull answered")
            assert trio.current_time() - sent_at < 3
            # the other queue's pull is still held
            assert 1 not in answers
            assert env.broker.hold.held_count() == 1
            await send_text(env, TOPIC, "new", queue_id=1)
        for queue_id in (0, 1):
            response = answers[queue_id]
            assert response.code == ResponseCode.SUCCESS, describe(response)
            assert [m.body for m in messages(response)] == [b"new"]
            assert pull_header(response).nextBeginOffset == 2


async def test_suspended_pull_times_out_with_pull_not_found(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "old")
        started = trio.current_time()
        response = await env.client.invoke(env.addr, pull_request(GROUP, TOPIC, 0, 1, suspend_ms=400), 10)
        elapsed = trio.current_time() - started
        assert response.code == ResponseCode.PULL_NOT_FOUND, describe(response)
        assert pull_header(response).nextBeginOffset == 1
        assert 0.35 <= elapsed < 3.0, elapsed
        assert env.broker.hold.held_count() == 0


async def test_long_polling_disabled_holds_for_short_polling_time(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path, longPollingEnable=False, shortPollingTimeMills=300) as env:
        await send_text(env, TOPIC, "old")
        started = trio.current_time()
        response = await env.client.invoke(env.addr, pull_request(GROUP, TOPIC, 0, 1, suspend_ms=20_000), 10)
        assert response.code == ResponseCode.PULL_NOT_FOUND, describe(response)
        assert 0.25 <= trio.current_time() - started < 3.0


# --- offsets ---------------------------------------------------------------------------------------


async def test_pull_commits_the_offset_it_carries(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for i in range(4):
            await send_text(env, TOPIC, f"m{i}")
        response = await env.call(pull_request(GROUP, TOPIC, 0, 2, commit_offset=2))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert await query_offset(env) == 2
        # without the commit flag the carried offset is ignored
        cmd = pull_request(GROUP, TOPIC, 0, 3)
        assert cmd.ext_fields is not None
        cmd.ext_fields["commitOffset"] = "3"
        await env.call(cmd)
        assert await query_offset(env) == 2


async def test_query_and_update_consumer_offset(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "m")
        # never committed, queue starts at 0: read from the beginning
        assert await query_offset(env) == 0
        response = await env.call(
            simple_request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                consumerGroup=GROUP,
                topic=TOPIC,
                queueId=0,
                setZeroIfNotFound="false",
            )
        )
        assert response.code == ResponseCode.QUERY_NOT_FOUND, describe(response)
        response = await env.call(
            simple_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup=GROUP,
                topic=TOPIC,
                queueId=0,
                commitOffset=1,
            )
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert await query_offset(env) == 1
        assert await query_offset(env, group="OtherGroup") == 0
        response = await env.call(
            simple_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup=GROUP,
                topic="NoSuchTopic",
                queueId=0,
                commitOffset=1,
            )
        )
        assert response.code == ResponseCode.TOPIC_NOT_EXIST, describe(response)


async def test_a_new_group_on_a_queue_whose_start_is_out_of_memory_is_not_found(
    tmp_path: os.PathLike[str],
) -> None:
    """Upstream's rule: a group that never committed reads 0 only when the queue's first message is
    still within the memory a read may expect cached (``accessMessageInMemoryMaxRatio`` % of RAM
    behind the log's end); else QUERY_NOT_FOUND, so that the client starts where its
    ConsumeFromWhere says -- a new group on a long history does not read it all from the start."""
    async with broker_env(tmp_path) as env:
        empty = await env.call(
            simple_request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=0)
        )
        assert (empty.code, ext(empty).get("offset")) == (ResponseCode.SUCCESS, "0"), describe(empty)
        for i in range(20):
            await send_text(env, TOPIC, "x" * 1000 + str(i))
        assert await query_offset(env) == 0
        # 40 % of 20 KiB: the first message (~1.1 KiB records, 20 of them) is now "on disk"
        env.broker.store.total_physical_memory = 20 * 1024
        response = await env.call(
            simple_request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=0)
        )
        assert response.code == ResponseCode.QUERY_NOT_FOUND, describe(response)
        # a committed offset is answered whatever the memory
        await env.call(
            simple_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup=GROUP,
                topic=TOPIC,
                queueId=0,
                commitOffset=3,
            )
        )
        assert await query_offset(env) == 3


async def test_max_min_offset_search_by_time_and_earliest_store_time(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for i in range(3):
            await send_text(env, TOPIC, f"m{i}")
            await trio.sleep(0.005)  # distinct store timestamps (ms clock)
        stored = await pull_all(env, GROUP, TOPIC, 0)
        times = [m.store_timestamp for m in stored]
        assert times == sorted(times)
        assert len(set(times)) == 3
        assert await offset_of(env, RequestCode.GET_MAX_OFFSET) == 3
        assert await offset_of(env, RequestCode.GET_MIN_OFFSET) == 0
        assert await offset_of(env, RequestCode.GET_MAX_OFFSET, queue_id=1) == 0

        async def search(ts: int, boundary: str = "LOWER") -> int:
            return await offset_of(
                env, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=ts, boundaryType=boundary
            )

        assert await search(times[1]) == 1
        assert await search(times[1], "UPPER") == 1
        assert await search(times[1] + 1) == 2
        assert await search(times[2] - 1, "UPPER") == 1
        assert await search(0) == 0
        assert await search(times[2] + 60_000) == 3

        response = await env.call(
            simple_request(RequestCode.GET_EARLIEST_MSG_STORETIME, topic=TOPIC, queueId=0)
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert decode_header(response, EarliestMsgStoretimeResponseHeader).timestamp == times[0]


# --- lookups ---------------------------------------------------------------------------------------


async def test_view_message_by_id_returns_the_record(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "first")
        sent = await send_text(env, TOPIC, "second", KEYS="k")
        _, _, phys = decode_offset_msg_id(sent.msgId)
        response = await env.call(simple_request(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        (msg,) = messages(response)
        assert (msg.body, msg.topic, msg.queue_offset, msg.keys) == (b"second", TOPIC, 1, "k")
        assert msg.offset_msg_id == sent.msgId


async def test_query_message_by_key_and_by_unique_key(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        await send_text(env, TOPIC, "a", KEYS="order-1 shared")
        await send_text(env, TOPIC, "b", KEYS="order-2 shared")
        sent_c = await send_text(env, TOPIC, "c")
        await send_text(env, "OtherTopic", "d", KEYS="shared")
        now = int(time.time() * 1000)

        async def query(key: str, *, unique: bool = False, max_num: int = 32) -> RemotingCommand:
            fields: dict[str, object] = {
                "topic": TOPIC,
                "key": key,
                "maxNum": max_num,
                "beginTimestamp": 0,
                "endTimestamp": now + 60_000,
            }
            if unique:
                fields["_UNIQUE_KEY_QUERY"] = "true"
            return await env.call(request(RequestCode.QUERY_MESSAGE, fields))

        async def bodies(key: str, **kw: bool) -> list[bytes]:
            response = await query(key, **kw)
            if response.code != ResponseCode.SUCCESS:
                return []
            return sorted(m.body for m in messages(response))

        # the index is written by dispatch, just after the append: poll briefly
        with trio.fail_after(5):
            while await bodies("shared") != [b"a", b"b"]:
                await trio.sleep(0.02)
        assert await bodies("order-1") == [b"a"]
        assert sent_c.transactionId is not None
        assert await bodies(sent_c.transactionId, unique=True) == [b"c"]
        response = await query("no-such-key")
        assert response.code == ResponseCode.QUERY_NOT_FOUND, describe(response)
        assert "indexLastUpdateTimestamp" in ext(response)


# --- send back (retry and dead-letter) -------------------------------------------------------------


async def send_back(
    env: BrokerEnv, phys: int, group: str = GROUP, delay_level: int = 0, **fields: object
) -> None:
    response = await env.call(
        simple_request(
            RequestCode.CONSUMER_SEND_MSG_BACK, offset=phys, group=group, delayLevel=delay_level, **fields
        )
    )
    assert response.code == ResponseCode.SUCCESS, describe(response)


async def test_send_back_parks_a_retry_copy_then_dead_letters_after_max_reconsume_times(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        sent = await send_text(env, TOPIC, "fails every time", TAGS="t", KEYS="k")
        phys = decode_offset_msg_id(sent.msgId)[2]
        levels = len(env.broker.store_config.delay_levels_ms)
        for attempt in range(1, 17):  # the default maxReconsumeTimes is 16
            await send_back(env, phys)
            level = min(3 + attempt - 1, levels)
            copy = await last_in_queue(env, SCHEDULE_TOPIC, level - 1)
            assert copy.body == b"fails every time"
            assert copy.reconsume_times == attempt
            p = copy.properties
            assert p[PROPERTY_REAL_TOPIC] == f"%RETRY%{GROUP}"
            assert p[PROPERTY_DELAY] == str(level)
            assert p[PROPERTY_RETRY_TOPIC] == TOPIC
            assert p[PROPERTY_MAX_RECONSUME_TIMES] == "16"
            assert int(p[PROPERTY_REAL_QID]) >= 0
            assert (copy.tags, copy.keys) == ("t", "k")
            phys = copy.physical_offset
        # the retry topic exists (for the consumer to subscribe to once delivery is due)
        response = await env.call(simple_request(RequestCode.GET_TOPIC_CONFIG, topic=f"%RETRY%{GROUP}"))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        # the 17th failure goes to the dead-letter queue, not delayed
        await send_back(env, phys)
        dead = await last_in_queue(env, f"%DLQ%{GROUP}", 0)
        assert dead.body == b"fails every time"
        assert dead.properties[PROPERTY_DELAY] == "0"  # upstream's setDelayTimeLevel(0): not delayed
        assert dead.properties[PROPERTY_RETRY_TOPIC] == TOPIC
        # every copy names the first message by its offset msg id (as upstream, not the UNIQ_KEY)
        assert dead.properties[PROPERTY_ORIGIN_MESSAGE_ID] == sent.msgId


async def test_send_back_honours_max_reconsume_times_and_negative_delay(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        sent = await send_text(env, TOPIC, "m")
        phys = decode_offset_msg_id(sent.msgId)[2]
        await send_back(env, phys, maxReconsumeTimes=1)
        copy = await last_in_queue(env, SCHEDULE_TOPIC, 2)
        assert copy.properties[PROPERTY_MAX_RECONSUME_TIMES] == "1"
        await send_back(env, copy.physical_offset, maxReconsumeTimes=1)
        assert (await last_in_queue(env, f"%DLQ%{GROUP}", 0)).body == b"m"
        # delayLevel < 0: straight to the DLQ
        await send_back(env, phys, group="OtherGroup", delay_level=-1)
        assert (await last_in_queue(env, "%DLQ%OtherGroup", 0)).body == b"m"


async def test_a_parked_delayed_message_is_logged_as_not_delivered(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    """SEND_OK for a delayed message that no schedule service will deliver yet: the broker says so,
    once per topic (the second send is quiet), for a producer's send and for a reconsume later."""
    caplog.set_level(logging.INFO, logger="broker.send")
    async with broker_env(tmp_path) as env:

        def parked() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

        sent = await send_text(env, TOPIC, "later", DELAY="2")
        await send_text(env, TOPIC, "later again", DELAY="2")
        assert (await last_in_queue(env, SCHEDULE_TOPIC, 1)).body == b"later again"
        assert parked() == [
            f"a message to {TOPIC} with delay level 2 (5s) is stored in SCHEDULE_TOPIC_XXXX queue 1 and "
            "will not be delivered: delayed delivery (the schedule service) is not built yet -- see "
            "the README's feature table"
        ]
        await send_back(env, decode_offset_msg_id(sent.msgId)[2])
        assert parked()[1].startswith(
            f"a message to consume again by group {GROUP} (reconsume later) with delay level 3 (10s) "
            "is stored in SCHEDULE_TOPIC_XXXX queue 2 and will not be delivered"
        )
        # a plain send says nothing
        await send_text(env, TOPIC, "now")
        assert len(parked()) == 2


async def test_send_to_retry_topic_past_max_reconsume_goes_to_dlq(tmp_path: os.PathLike[str]) -> None:
    """A client resending to %RETRY%group itself (the send-back fallback) is dead-lettered past the
    max (the request's maxReconsumeTimes counts from client version V3_4_9 on, as upstream), or at
    once while the group holds queue locks (an orderly consumer), with DELAY -1 (upstream)."""
    async with broker_env(tmp_path) as env:
        retry = f"%RETRY%{GROUP}"
        await send_ok(env, send_request(retry, b"r1", reconsume_times=1, max_reconsume_times=3))
        assert (await last_in_queue(env, retry, 0)).body == b"r1"
        await send_ok(env, send_request(retry, b"r4", reconsume_times=4, max_reconsume_times=3))
        dead = await last_in_queue(env, f"%DLQ%{GROUP}", 0)
        assert (dead.body, dead.properties[PROPERTY_DELAY]) == (b"r4", "-1")
        cmd = send_request(retry, b"v349", reconsume_times=4, max_reconsume_times=3)
        cmd.version = 121  # V3_4_9 itself
        await send_ok(env, cmd)
        assert (await last_in_queue(env, f"%DLQ%{GROUP}", 0)).body == b"v349"

        # an orderly consumer of the group locks a queue: its retries go to the DLQ at once
        lock = LockBatchRequestBody(
            consumerGroup=GROUP,
            clientId="127.0.0.1@orderly",
            mqSet=[MessageQueue(topic=TOPIC, brokerName=env.broker.broker_config.brokerName, queueId=0)],
        )
        response = await env.call(request(RequestCode.LOCK_BATCH_MQ, body=lock.encode()))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        await send_ok(env, send_request(retry, b"orderly", reconsume_times=1, max_reconsume_times=3))
        assert (await last_in_queue(env, f"%DLQ%{GROUP}", 0)).body == b"orderly"
        assert (await last_in_queue(env, retry, 0)).body == b"r1"


async def test_topics_a_send_back_creates_survive_a_crash_right_after_its_answer(
    tmp_path: os.PathLike[str],
) -> None:
    """The retry and dead-letter topics a send-back (or a retry send past its max) creates are written
    before the answer, as upstream's ``createTopicInSendMessageBackMethod`` persists them: a crash
    right after it keeps the topics, so their messages stay readable (they were not, until a later
    send-back created the topic again)."""
    live = os.path.join(os.fspath(tmp_path), "live")
    async with broker_env(live) as env:
        await send_ok(env, send_request("%RETRY%CrashH", b"r0", max_reconsume_times=1))
        # the retry topic exists: this one creates only the DLQ
        await send_ok(env, send_request("%RETRY%CrashH", b"r", reconsume_times=9, max_reconsume_times=1))
        sent = await send_text(env, TOPIC, "m")
        phys = decode_offset_msg_id(sent.msgId)[2]
        await send_back(env, phys, group="CrashG")  # %RETRY%CrashG, the copy parked
        await send_back(env, phys, group="CrashG", delay_level=-1)  # %DLQ%CrashG
        async with no_file_replaced(env.broker):
            crashed = snapshot(live)  # the files as a SIGKILL now would leave them
    try:
        async with broker_env(crashed) as env:
            for topic in ("%RETRY%CrashG", "%DLQ%CrashG", "%DLQ%CrashH"):
                response = await env.call(simple_request(RequestCode.GET_TOPIC_CONFIG, topic=topic))
                assert response.code == ResponseCode.SUCCESS, f"{topic}: {describe(response)}"
            assert (await last_in_queue(env, "%DLQ%CrashG", 0)).body == b"m"
            assert (await last_in_queue(env, "%DLQ%CrashH", 0)).body == b"r"
    finally:
        shutil.rmtree(crashed, ignore_errors=True)


# --- restart ---------------------------------------------------------------------------------------


async def test_restart_keeps_messages_and_consumer_offsets(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        for i in range(5):
            await send_text(env, TOPIC, f"m{i}", queue_id=i % 2, KEYS=f"k{i}")
        await send_ok(
            env, send_request(TOPIC, batch_body([b"b0", b"b1"]), code=RequestCode.SEND_BATCH_MESSAGE)
        )
        await env.call(pull_request(GROUP, TOPIC, 0, 2, commit_offset=2))
        response = await env.call(
            simple_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                consumerGroup=GROUP,
                topic=TOPIC,
                queueId=1,
                commitOffset=1,
            )
        )
        assert response.code == ResponseCode.SUCCESS, describe(response)
        before = {q: [m.body for m in await pull_all(env, GROUP, TOPIC, q)] for q in (0, 1)}
    assert before == {0: [b"m0", b"m2", b"m4", b"b0", b"b1"], 1: [b"m1", b"m3"]}

    async with broker_env(tmp_path) as env:
        after = {q: [m.body for m in await pull_all(env, GROUP, TOPIC, q)] for q in (0, 1)}
        assert after == before
        assert await query_offset(env, queue_id=0) == 2
        assert await query_offset(env, queue_id=1) == 1
        # the store carries on where it was
        sent = await send_text(env, TOPIC, "after restart")
        assert sent.queueOffset == 5


async def test_a_pull_after_the_store_stopped_is_answered_with_the_reason(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The store stops under a broker that still serves (a crash being handled, a stop with pulls
    in flight): a pull gets SYSTEM_ERROR naming the cause, as upstream's "store getMessage return
    null" -- not a handler crash logged with a traceback."""
    async with broker_env(tmp_path) as env:
        await send_ok(env, send_request("PullAfterStop", b"m0"))
        env.broker.store.abandon()
        with caplog.at_level(logging.ERROR):
            response = await env.call(pull_request("G", "PullAfterStop", 0, 0))
        assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)
        assert "message store is not running" in (response.remark or ""), describe(response)
        assert not [r for r in caplog.records if "handler for code" in r.getMessage()], caplog.text
