"""Broker metadata managers: topic table and auto-create, groups, offsets, client tables, locks, tag filter."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clients import ClientChannel, ConsumerManager
from broker.filter import TagFilter, build_subscription
from broker.groups import SubscriptionGroupManager
from broker.locks import RebalanceLockManager
from broker.offsets import ConsumerOffsetManager
from broker.topics import TopicConfigManager, describe_topic_change, validate_group, validate_topic
from remoting.protocol.broker import (
    ConsumerData,
    ConsumerOffsetWrapper,
    HeartbeatData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from remoting.protocol.common import (
    DataVersion,
    MessageQueue,
    PermName,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from remoting.protocol.peek import leading_data_version, leading_topic_fields, offset_table_entries


def _topics(tmp_path: object, auto: bool = True) -> TopicConfigManager:
    return TopicConfigManager(
        config_dir=str(tmp_path),
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        auto_create_topic_enable=auto,
        default_topic_queue_nums=8,
        now_ms=lambda: 1000,
    )


def test_auto_create_from_tbw102_takes_min_queue_count_and_drops_inherit(tmp_path: object) -> None:
    topics = _topics(tmp_path)
    created = topics.create_in_send("NewTopic", "TBW102", 4)
    assert created is not None
    assert (created.readQueueNums, created.writeQueueNums) == (4, 4)
    assert created.perm == PermName.PERM_READ | PermName.PERM_WRITE
    assert topics.create_in_send("Big", "TBW102", 100).writeQueueNums == 8  # type: ignore[union-attr]


def test_auto_create_refused_without_template_or_when_disabled(tmp_path: object) -> None:
    assert _topics(tmp_path, auto=False).create_in_send("X", "TBW102", 4) is None
    assert _topics(tmp_path).create_in_send("X", "NoSuchTemplate", 4) is None


def test_adopt_stored_routes_a_topic_without_config_and_leaves_configs_alone(tmp_path: object) -> None:
    topics = _topics(tmp_path)
    version = topics.data_version
    made = topics.adopt_stored("OnlyInStore", 3)
    assert made is not None
    assert (made.readQueueNums, made.writeQueueNums) == (4, 4)
    assert made.perm == PermName.PERM_READ | PermName.PERM_WRITE
    assert topics.get("OnlyInStore") == made
    assert topics.data_version.counter == version.counter + 1
    # more of its queues turned up (dispatch catching up on a new master): widened
    wider = topics.adopt_stored("OnlyInStore", 5)
    assert wider is not None
    assert (wider.readQueueNums, wider.writeQueueNums) == (6, 6)
    assert topics.adopt_stored("OnlyInStore", 4) is None
    # once configured otherwise, it is left alone like any other topic
    topics.update(made.__class__(topicName="OnlyInStore", readQueueNums=2, writeQueueNums=2))
    assert topics.adopt_stored("OnlyInStore", 7) is None
    # a config with fewer queues than the store holds (lowered on purpose) stays as it is
    topics.update(made.__class__(topicName="Narrowed", readQueueNums=2, writeQueueNums=1))
    before = topics.get("Narrowed")
    assert topics.adopt_stored("Narrowed", 5) is None
    assert topics.get("Narrowed") == before


def test_topic_table_persists_with_data_version(tmp_path: object) -> None:
    topics = _topics(tmp_path)
    before = topics.data_version
    topics.create_in_send("Persisted", "TBW102", 4)
    assert topics.data_version.counter == before.counter + 1
    topics.persist()
    with open(os.path.join(str(tmp_path), "topics.json")) as f:
        raw = json.load(f)
    assert raw["topicConfigTable"]["Persisted"]["writeQueueNums"] == 4
    again = _topics(tmp_path)
    again.load()
    assert again.get("Persisted") == topics.get("Persisted")
    assert again.data_version == topics.data_version


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("TopicTest", True),
        ("a|b%c_d-e", True),
        ("", False),
        ("bad topic", False),
        ("x" * 128, False),
        ("%RETRY%" + "g" * 200, True),
    ],
)
def test_topic_name_validation(name: str, ok: bool) -> None:
    assert (validate_topic(name) is None) is ok


def test_group_name_validation() -> None:
    assert validate_group("CG_1") is None
    assert "illegal" in (validate_group("bad group") or "")
    assert "longer" in (validate_group("g" * 121) or "")


def test_groups_auto_create_and_persist(tmp_path: object) -> None:
    groups = SubscriptionGroupManager(config_dir=str(tmp_path), auto_create=True, now_ms=lambda: 5)
    assert groups.find("CG_A") is not None
    groups.persist()
    again = SubscriptionGroupManager(config_dir=str(tmp_path), auto_create=False, now_ms=lambda: 5)
    again.load()
    assert again.find("CG_A") is not None
    assert again.find("CG_B") is None


def test_consumer_offsets_round_trip_fastjson_file_and_version_step(tmp_path: object) -> None:
    offsets = ConsumerOffsetManager(config_dir=str(tmp_path), now_ms=lambda: 7, version_step=2)
    assert offsets.query("g", "T", 0) == -1
    offsets.commit("g", "T", 0, 10)
    assert offsets.data_version.counter == 0
    offsets.commit("g", "T", 1, 11)
    assert offsets.data_version.counter == 1
    offsets.persist()
    with open(os.path.join(str(tmp_path), "consumerOffset.json")) as f:
        text = f.read()
    assert '"T@g":{0:10,1:11}' in text  # fastjson style, as upstream writes it
    again = ConsumerOffsetManager(config_dir=str(tmp_path), now_ms=lambda: 7)
    again.load()
    assert again.query("g", "T", 1) == 11
    assert again.groups_of_topic("T") == {"g"}


_OFFSET_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["commit", "commit", "commit", "remove_topic", "remove_group", "replace", "sync", "load"]
        ),
        st.sampled_from(["g1", "g2", "g3"]),
        st.sampled_from(["T1", "T2"]),
        st.integers(0, 3),
        st.integers(-1, 2**40),
    ),
    max_size=40,
)


@given(_OFFSET_OPS)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_consumer_offsets_encode_from_kept_entries_equals_the_whole_table(
    tmp_path: object, ops: list
) -> None:
    """``encode`` re-encodes only the entries that changed since its last call: after any
    sequence of commits, removals, replacements, a slave sync's writes straight into the table
    and reloads, it gives the bytes of the whole table encoded afresh."""
    offsets = ConsumerOffsetManager(config_dir=str(tmp_path), now_ms=lambda: 7, version_step=3)
    for op, group, topic, queue_id, offset in ops:
        if op == "commit":
            offsets.commit(group, topic, queue_id, offset)
        elif op == "remove_topic":
            offsets.remove_topic(topic)
        elif op == "remove_group":
            offsets.remove_group(group)
        elif op == "replace":
            offsets.replace_all(ConsumerOffsetWrapper(offsetTable={f"{topic}@{group}": {queue_id: offset}}))
        elif op == "sync":  # what SlaveSynchronize.sync_consumer_offset does
            offsets.table[f"{topic}@{group}"] = {queue_id: offset, queue_id + 1: offset}
        else:
            offsets.persist()
            offsets.load()
        assert offsets.encode() == offsets.wrapper().encode()
    assert ConsumerOffsetWrapper.decode(offsets.encode()).offsetTable == offsets.table


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["update", "update", "find", "delete", "mutate", "replace", "load"]),
            st.sampled_from(["g1", "g2", "g3", "TOOLS_CONSUMER"]),
            st.integers(0, 20),
        ),
        max_size=30,
    )
)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_subscription_groups_encode_from_kept_entries_equals_the_whole_table(
    tmp_path: object, ops: list
) -> None:
    """As for the offsets: the kept per-group texts never go stale (in-place changes included)."""
    groups = SubscriptionGroupManager(config_dir=str(tmp_path), auto_create=True, now_ms=lambda: 7)
    for op, name, n in ops:
        if op == "update":
            groups.update(SubscriptionGroupConfig(groupName=name, retryMaxTimes=n, attributes={"a": str(n)}))
        elif op == "find":
            groups.find(name + "x")
        elif op == "delete":
            groups.delete(name)
        elif op == "mutate" and name in groups.table:
            groups.table[name].attributes[str(n)] = "v"
            groups.table[name].retryQueueNums = n
        elif op == "replace":
            groups.replace_all(
                SubscriptionGroupWrapper(
                    subscriptionGroupTable={name: SubscriptionGroupConfig(groupName=name)}
                )
            )
        elif op == "load":
            groups.persist()
            groups.load()
        assert groups.encode() == groups.wrapper().encode()


def test_config_file_falls_back_to_backup_when_main_is_corrupt(tmp_path: object) -> None:
    offsets = ConsumerOffsetManager(config_dir=str(tmp_path), now_ms=lambda: 7)
    offsets.commit("g", "T", 0, 1)
    offsets.persist()
    offsets.commit("g", "T", 0, 2)
    offsets.persist()  # previous content now in .bak
    with open(os.path.join(str(tmp_path), "consumerOffset.json"), "wb") as f:
        f.write(b"{not json")
    again = ConsumerOffsetManager(config_dir=str(tmp_path), now_ms=lambda: 7)
    again.load()
    assert again.query("g", "T", 0) == 1


@dataclass
class _Conn:
    id: int


def test_consumer_membership_changes_on_join_leave_and_close() -> None:
    mgr = ConsumerManager()
    hb = HeartbeatData.decode(
        b'{"clientID":"c1","consumerDataSet":[{"groupName":"G","consumeType":1,"messageModel":1,'
        b'"consumeFromWhere":0,"subscriptionDataSet":[{"topic":"T","subString":"*","subVersion":"1"}]}]}\n'
    )
    data: ConsumerData = hb.consumerDataSet[0]
    assert mgr.register(data, ClientChannel("c1", _Conn(1), "CPP", 63, 0), 0) is True
    assert mgr.register(data, ClientChannel("c1", _Conn(1), "CPP", 63, 10), 10) is False
    assert mgr.register(data, ClientChannel("c2", _Conn(2), "CPP", 63, 10), 10) is True
    assert mgr.get("G").client_ids() == ["c1", "c2"]  # type: ignore[union-attr]
    assert mgr.connection_closed(1) == ["G"]
    assert mgr.get("G").client_ids() == ["c2"]  # type: ignore[union-attr]
    assert mgr.expire(200_000, 120_000) == ["G"]
    assert mgr.get("G") is None


def test_rebalance_lock_is_exclusive_until_expiry() -> None:
    locks = RebalanceLockManager(max_live_ms=60_000)
    mq = MessageQueue(topic="T", brokerName="b", queueId=0)
    assert locks.try_lock_batch("G", [mq], "c1", 0) == [mq]
    assert locks.try_lock_batch("G", [mq], "c2", 30_000) == []
    assert locks.try_lock_batch("G", [mq], "c1", 30_000) == [mq]  # renewal
    assert locks.try_lock_batch("G", [mq], "c2", 95_000) == [mq]  # c1's lock expired
    locks.unlock_batch("G", [mq], "c1")  # not the holder: no effect
    assert locks.is_locked("G", mq, "c2", 95_000)


def test_tag_filter_matches_hash_then_exact_tag() -> None:
    sub = build_subscription("T", "TagA || TagB")
    f = TagFilter(sub)
    from remoting.protocol.message import tags_hash_code

    assert f.is_matched_by_consume_queue(tags_hash_code("TagA"))
    assert not f.is_matched_by_consume_queue(tags_hash_code("TagC"))
    assert f.is_matched_by_commit_log({"TAGS": "TagB"})
    assert not f.is_matched_by_commit_log({"TAGS": "TagC"})
    assert not f.is_matched_by_commit_log({})
    everything = TagFilter(build_subscription("T", "*"))
    assert everything.is_matched_by_consume_queue(12345)
    assert everything.is_matched_by_commit_log({})


def test_topic_changes_are_logged_as_queues_and_changed_fields(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    topics = _topics(tmp_path)
    caplog.set_level("INFO", logger="broker.topics")
    topics.update(TopicConfig(topicName="LogT", readQueueNums=4, writeQueueNums=4, perm=6))
    topics.update(TopicConfig(topicName="LogT", readQueueNums=4, writeQueueNums=4, perm=6))  # same: no line
    topics.update(TopicConfig(topicName="LogT", readQueueNums=8, writeQueueNums=8, perm=4, order=True))
    topics.delete("LogT")
    lines = [r.getMessage() for r in caplog.records if "LogT" in r.getMessage()]
    assert lines == [
        "created topic LogT: 4 read / 4 write queues, perm 6 (RW-)",
        "topic LogT changed: readQueueNums 4 -> 8, writeQueueNums 4 -> 8, perm 6 (RW-) -> 4 (R--), order False -> True",
        "deleted topic LogT",
    ]
    made = describe_topic_change(
        None, TopicConfig(topicName="F", order=True, attributes={"+message.type": "FIFO"})
    )
    assert (
        made
        == "created topic F: 16 read / 16 write queues, perm 6 (RW-), order True, attributes {'+message.type': 'FIFO'}"
    )


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["create", "change", "attr", "delete", "replace"]),
            st.integers(0, 30),
            st.integers(1, 16),
        ),
        max_size=60,
    )
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_topics_json_from_kept_encodings_is_the_whole_wrapper_encoded(tmp_path: object, ops: list) -> None:
    # topics.json is assembled from each topic's encoding kept between calls: after any sequence of
    # creations, changes (also in place, of attributes), deletions and whole-table replacements
    # its bytes are exactly those of the wrapper encoded from scratch
    topics = _topics(tmp_path)
    for op, n, queues in ops:
        name = f'T{n}\\u00e9"' if n % 7 == 0 else f"T{n}"
        if op == "create":
            topics.update(TopicConfig(topicName=name, readQueueNums=queues, writeQueueNums=queues))
        elif op == "change" and name in topics.table:
            topics.update(msgspec.structs.replace(topics.table[name], perm=queues % 8))
        elif op == "attr" and name in topics.table:
            topics.table[name].attributes = {**topics.table[name].attributes, "+message.type": str(queues)}
        elif op == "delete":
            topics.delete(name)
        elif op == "replace":
            topics.replace_all(dict(list(topics.table.items())[::2]), topics.data_version)
        expected = TopicConfigSerializeWrapper(topicConfigTable=topics.table, dataVersion=topics.data_version)
        assert topics.encode() == expected.encode()


def test_a_metadata_bodys_leading_data_version_is_read_without_decoding_the_rest() -> None:
    # as upstream's fastjson writes GET_ALL_SUBSCRIPTIONGROUP_CONFIG (fields by name)
    java = (
        b'{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000},"forbiddenTable":{},'
        b'"subscriptionGroupTable":{"G":{"brokerId":0,"consumeEnable":true,"groupName":"G"}}}'
    )
    assert leading_data_version(java) == DataVersion(counter=3, stateVersion=0, timestamp=1700000000000)
    ours = SubscriptionGroupManager(config_dir="/nonexistent", auto_create=True, now_ms=lambda: 7)
    ours.find("G")
    assert leading_data_version(ours.encode()) == ours.data_version
    for other in (
        b'{"forbiddenTable":{},"dataVersion":{"counter":3}}',
        b'{"dataVersion":{"counter":"x"}}',
        b"",
        b"{",
    ):
        assert leading_data_version(other) is None


def test_a_topic_bodys_leading_version_and_lately_deleted_topics_are_read_without_the_table() -> None:
    head = b'{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":5}'
    version = DataVersion(counter=2, stateVersion=0, timestamp=5)
    table = b',"mappingDataVersion":{"counter":0},"topicConfigTable":{"T":{"topicName":"T"}}}'
    assert leading_topic_fields(head + b',"deletedTopicOffsets":{"T1":100,"T2":5}' + table) == (
        version,
        {"T1": 100, "T2": 5},
    )
    assert leading_topic_fields(head + table) == (version, {})  # upstream's bodies: no such field
    for bad in (b'{"T}1":100}', b'{"T1":"x"}', b"{"):
        assert leading_topic_fields(head + b',"deletedTopicOffsets":' + bad + table) is None


def test_an_offset_tables_entries_are_cut_out_as_text_and_only_a_well_formed_table_is() -> None:
    version = b'{"counter":2,"stateVersion":0,"timestamp":5}'
    body = b'{"dataVersion":' + version + b',"offsetTable":{"T@G":{0:10,1:11},"T@\\"q\\"":{},"U@G":{3:-1}}}'
    assert offset_table_entries(body) == (
        version,
        {b'"T@G"': b"{0:10,1:11}", b'"T@\\"q\\""': b"{}", b'"U@G"': b"{3:-1}"},
    )
    assert offset_table_entries(b'{"dataVersion":' + version + b',"offsetTable":{}}') == (version, {})
    ours = ConsumerOffsetManager(config_dir="/nonexistent", now_ms=lambda: 7)
    ours.commit("G", "T", 0, 5)
    assert offset_table_entries(ours.encode()) == (ours.data_version.encode(), {b'"T@G"': b"{0:5}"})
    for bad in (
        b'{"dataVersion":' + version + b',"offsetTable":{"T@G":{0:10},,"U@G":{}}}',  # two commas
        b'{"dataVersion":' + version + b',"offsetTable":{"T@G":{"0":10}}}',  # quoted keys: decoded whole
        b'{"offsetTable":{"T@G":{0:10}},"dataVersion":' + version + b"}",  # another order
    ):
        assert offset_table_entries(bad) is None
