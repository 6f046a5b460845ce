"""The real C++ client produces (sync, async, oneway, ordered) and push-consumes (clustering, tag expression)
through a real ``rmq-container`` with two master broker groups and auto-created topics."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from tests.compat.cluster import Clients, Container, MakeContainer, invoke, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]

TOPIC = "CompatMixedTopic"
MODES = ("sync", "oneway", "orderly", "async")
TAGS = ("TagA", "TagB", "TagC")
PROPS = ("seq", "mode", "note")


def mixed_messages(first: int, count: int) -> list[dict[str, Any]]:
    """Messages ``first .. first+count-1``: modes cycle every message, tags every three, so every
    (mode, tag) pair occurs within 36; two keys each; user properties incl. non-ASCII text and spaces."""
    out = []
    for i in range(first, first + count):
        out.append(
            {
                "topic": TOPIC,
                "body": f"body-{i:03d}",
                "keys": f"key-{i:03d} group-{i % 4}",
                "tags": TAGS[(i // 3) % 3],
                "props": {"seq": str(i), "mode": MODES[i % len(MODES)], "note": f"héllo wörld = {i}: ok"},
                "mode": MODES[i % len(MODES)],
                "arg": i,
            }
        )
    return out


def assert_sent(report: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """Every send succeeded; each message gets its send result (``msg_id``, ``offset``) attached."""
    assert "exception" not in report, report
    results = report["results"]
    assert len(results) == len(messages)
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed
    for msg, result in zip(messages, results, strict=True):
        if msg["mode"] == "oneway":
            assert "status" not in result
        else:
            assert result["status"] == 0, result  # SEND_OK
            msg["result"] = result


def assert_exactly(report: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    """The consumer got every expected message once, nothing else, with its properties intact."""
    assert not report.get("timed_out"), f"incomplete: got {len(report['received'])} of {len(expected)}"
    assert "exception" not in report, report
    received = report["received"]
    counts = Counter(r["body"] for r in received)
    duplicates = {body: n for body, n in counts.items() if n > 1}
    assert not duplicates, f"delivered more than once: {duplicates}"
    by_body = {m["body"]: m for m in expected}
    extra = set(counts) - set(by_body)
    assert not extra, f"not expected (tag filter?): {sorted(extra)}"
    assert set(counts) == set(by_body)
    for r in received:
        sent = by_body[r["body"]]
        assert r["topic"] == TOPIC
        assert r["tags"] == sent["tags"]
        assert r["keys"] == sent["keys"]
        assert r["props"] == sent["props"], r
        assert r["reconsume_times"] == 0
        assert r["id"], r
        if "result" in sent:
            # what the send reported is what the consumer sees: the message id (the client's
            # UNIQ_KEY, kept by the broker) and the queue offset the broker answered
            assert r["id"] == sent["result"]["msg_id"], (r, sent)
            assert r["queue_offset"] == sent["result"]["offset"], (r, sent)


def wait_for_members(cluster: Container, group: str, count: int) -> None:
    """Wait until every broker of ``cluster`` lists ``count`` consumers of ``group`` (15 s)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if all(len(consumer_ids(addr, group)) == count for addr in cluster.brokers.values()):
            return
        time.sleep(0.1)
    pytest.fail(f"{count} consumers of {group} never showed up on every broker: {cluster.output()}")


def test_cpp_producer_and_push_consumers_exact_set_with_properties(
    make_container: MakeContainer, client: Clients
) -> None:
    cluster = make_container("broker-a", "broker-b")
    first = mixed_messages(0, 30)
    sent = client({"action": "produce", "namesrv": cluster.namesrv, "group": "PG_MIXED", "messages": first})
    assert_sent(sent, first)

    # Two groups consume concurrently: one with a tag expression, one with everything. A second batch
    # is sent while they run, so it reaches them through held (long-polling) pulls.
    second = mixed_messages(30, 15)
    everything = first + second
    tagged = [m for m in everything if m["tags"] in ("TagA", "TagB")]
    common = {"action": "push", "namesrv": cluster.namesrv, "topic": TOPIC, "props": list(PROPS)}
    filtered_consumer = client.start(
        {
            **common,
            "group": "CG_MIXED_TAGS",
            "expression": "TagA || TagB",
            "expect": [m["body"] for m in tagged],
            "settle": 3,
            "wait": 30,
            "deadline": 45,
        }
    )
    all_consumer = client.start(
        {
            **common,
            "group": "CG_MIXED_ALL",
            "expression": "*",
            "expect": [m["body"] for m in everything],
            "settle": 3,
            "wait": 30,
            "deadline": 45,
        }
    )
    sent = client({"action": "produce", "namesrv": cluster.namesrv, "group": "PG_MIXED", "messages": second})
    assert_sent(sent, second)

    tags_report = filtered_consumer.report(60)
    all_report = all_consumer.report(60)
    assert_exactly(tags_report, tagged)
    assert_exactly(all_report, everything)
    # the messages were spread over both broker groups
    pulled = client({"action": "pull", "namesrv": cluster.namesrv, "group": "CG_MIXED_PULL", "topic": TOPIC})
    per_broker = Counter(m["broker"] for m in pulled["messages"])
    assert set(per_broker) == {"broker-a", "broker-b"}, per_broker
    assert sum(per_broker.values()) == len(everything)


def consumer_ids(broker: str, group: str) -> list[str]:
    reply = invoke(broker, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))
    if reply.code != ResponseCode.SUCCESS:
        return []
    return list(fastjson.loads(reply.body_bytes).get("consumerIdList", []))


def test_cpp_two_push_consumers_of_one_group_share_the_queues(
    make_container: MakeContainer, client: Clients
) -> None:
    topic = "CompatSharedTopic"
    group = "CG_SHARED"
    cluster = make_container("broker-a", "broker-b")
    # the topic must exist before the consumers start (they look up its route once at start)
    # (sync sends go round-robin over the queues of both broker groups, which creates it on both)
    seed = [{"topic": topic, "body": f"seed-{i}", "tags": "TagS", "mode": "sync"} for i in range(8)]
    assert_sent(client({"action": "produce", "namesrv": cluster.namesrv, "messages": seed}), seed)
    messages = [
        {"topic": topic, "body": f"shared-{i:02d}", "keys": f"s{i}", "tags": "TagS", "mode": "sync"}
        for i in range(40)
    ]
    expect = [m["body"] for m in seed + messages]
    spec = {
        "action": "push",
        "namesrv": cluster.namesrv,
        "group": group,
        "topic": topic,
        "expression": "TagS",
        "wait": 10,  # no expectation of its own (the split is not known in advance): listen this long
        "deadline": 35,
    }
    first, second = client.start(spec), client.start(spec)
    wait_for_members(cluster, group, 2)
    assert_sent(client({"action": "produce", "namesrv": cluster.namesrv, "messages": messages}), messages)
    reports = [first.report(50), second.report(50)]

    got = [[r["body"] for r in rep["received"]] for rep in reports]
    everything = Counter(got[0] + got[1])
    assert set(everything) == set(expect)
    assert got[0], "the first consumer got nothing"
    assert got[1], "the second consumer got nothing"
    # The seeds were there while the group was still rebalancing (the first consumer may have taken
    # them before handing their queue over): at-least-once allows them twice. What was sent once both
    # members were registered arrives once.
    duplicates = {b: n for b, n in everything.items() if n > 1 and not b.startswith("seed-")}
    assert not duplicates


def _deliveries(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a ``push_until`` scenario appended to its ``deliveries_file`` so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_cpp_consumer_killed_mid_stream_hands_its_queues_to_the_other_member(
    make_container: MakeContainer, client: Clients, tmp_path: Path
) -> None:
    """Two C++ push consumers of one group share a topic's queues while a producer streams; one is
    SIGKILLed. The broker sees its connection close and tells the group, so the other member takes
    the dead one's queues at once (not at its rebalance timer, every 10 s in the C++ client), from the
    offsets the dead one's pulls committed: every acknowledged message is delivered at least once."""
    topic, group = "CompatHandoverTopic", "CG_HANDOVER"
    cluster = make_container("broker-a")  # one broker group: a queue id names one queue
    seed = [{"topic": topic, "body": f"seed-{i}", "mode": "sync"} for i in range(8)]  # creates the topic
    assert_sent(client({"action": "produce", "namesrv": cluster.namesrv, "messages": seed}), seed)
    expect_file = tmp_path / "expect.json"
    survivor_file, victim_file = tmp_path / "survivor.jsonl", tmp_path / "victim.jsonl"
    common = {"action": "push_until", "namesrv": cluster.namesrv, "group": group, "topic": topic}
    survivor = client.start(
        {**common, "expect_file": str(expect_file), "deliveries_file": str(survivor_file), "wait": 60}
        | {"settle": 1, "deadline": 75}
    )
    victim = client.start(
        {**common, "expect_file": str(tmp_path / "never.json"), "deliveries_file": str(victim_file)}
        | {"wait": 60, "deadline": 75}
    )
    wait_for_members(cluster, group, 2)
    producer = client.start(
        {
            "action": "produce_stream",
            "namesrv": cluster.namesrv,
            "group": "PG_HANDOVER",
            "topic": topic,
            "duration": 8,
            "interval_ms": 10,
            "deadline": 30,
        }
    )
    deadline = time.monotonic() + 20
    while sum(r["body"].startswith("s-") for r in _deliveries(victim_file)) < 50:
        if time.monotonic() > deadline:
            pytest.fail(f"the second consumer got {len(_deliveries(victim_file))} messages in 20 s")
        time.sleep(0.05)
    killed_at = time.time()
    victim.kill()
    sent = producer.report(40)
    assert "exception" not in sent, sent
    acked = [r["body"] for r in sent["results"] if r.get("ok") and r["status"] == 0]
    failed = [r for r in sent["results"] if not (r.get("ok") and r["status"] == 0)]
    assert not failed, failed[:3]
    by_victim = _deliveries(victim_file)
    victim_bodies = {r["body"] for r in by_victim}
    expect_file.write_text(json.dumps([b for b in acked if b not in victim_bodies]))
    report = survivor.report(80)
    assert "exception" not in report, report

    by_survivor = report["received"]
    got = Counter(r["body"] for r in by_survivor + by_victim)
    missing = [b for b in acked if b not in got]
    summary = (
        f"{len(acked)} acknowledged; the killed consumer got {len(by_victim)}, the other "
        f"{len(by_survivor)}; {sum(n - 1 for n in got.values())} delivered twice; {len(missing)} missing"
    )
    print(summary)
    assert not report.get("timed_out"), summary
    assert not missing, f"{summary}: {missing[:5]}"
    # the queues the killed consumer was reading when it died (its last second)
    victim_queues = {r["queue_id"] for r in by_victim if killed_at - 1 <= r["t"] <= killed_at}
    assert victim_queues, summary
    taken = [r["t"] - killed_at for r in by_survivor if r["queue_id"] in victim_queues and r["t"] > killed_at]
    assert taken, f"the other consumer never read queues {victim_queues}: {summary}"
    print(f"queues {sorted(victim_queues)} taken over {min(taken):.2f} s after the kill")
    # 0.01 s in the experiments; 8.6-8.8 s when the broker did not tell the group (the timer's turn)
    assert min(taken) < 3, f"queues {victim_queues} taken over {min(taken):.1f} s after the kill"


def test_cpp_broadcasting_consumers_of_one_group_each_get_every_message(
    make_container: MakeContainer, client: Clients
) -> None:
    topic = "CompatBroadcastTopic"
    group = "CG_BROADCAST"
    cluster = make_container("broker-a", "broker-b")
    seed = [{"topic": topic, "body": f"seed-{i}", "mode": "sync"} for i in range(8)]  # creates the topic
    assert_sent(client({"action": "produce", "namesrv": cluster.namesrv, "messages": seed}), seed)
    messages = [{"topic": topic, "body": f"cast-{i:02d}", "mode": "sync"} for i in range(40)]
    spec = {
        "action": "push",
        "namesrv": cluster.namesrv,
        "group": group,
        "topic": topic,
        "broadcasting": True,
        # the messages sent once both run (a broadcasting consumer keeps its offsets itself and
        # picks its start; whether it gets the seeds is not asserted)
        "expect": [m["body"] for m in messages],
        "settle": 2,
        "wait": 30,
        "deadline": 45,
    }
    # each its own instance name: the C++ client keeps a broadcasting consumer's offsets in
    # ~/.rocketmq_offsets/<ip>@<instance name>/<group>, and two consumers starting together in one
    # home with the same name race to create that directory (the loser never starts consuming)
    consumers = [client.start({**spec, "instance_name": f"cast{i}"}) for i in range(2)]
    wait_for_members(cluster, group, 2)
    time.sleep(1)  # their first pulls (which fix their start offsets) are out
    assert_sent(client({"action": "produce", "namesrv": cluster.namesrv, "messages": messages}), messages)
    for consumer in consumers:
        report = consumer.report(50)
        assert not report.get("timed_out"), f"got {len(report['received'])} of {len(messages)}"
        got = Counter(r["body"] for r in report["received"] if r["body"].startswith("cast-"))
        assert set(got) == {m["body"] for m in messages}
        assert max(got.values()) == 1, got


def test_cpp_batch_send_is_consumed_message_by_message_with_properties(
    make_container: MakeContainer, client: Clients
) -> None:
    """The C++ client's SEND_BATCH_MESSAGE (its own MessageBatch body encoding): each message of a
    batch reaches a push consumer once, with its own keys, tags and user properties, at consecutive
    queue offsets of one queue starting at the offset the send reported."""
    cluster = make_container("broker-a")
    batches = [mixed_messages(10 * b, 10) for b in range(3)]  # tags and keys differ within a batch
    spec = [{"mode": "batch", "items": batch} for batch in batches]
    sent = client({"action": "produce", "namesrv": cluster.namesrv, "group": "PG_BATCH", "messages": spec})
    assert "exception" not in sent, sent
    assert [r["ok"] for r in sent["results"]] == [True] * 3, sent["results"]
    assert [r["status"] for r in sent["results"]] == [0] * 3, sent["results"]
    everything = [m for batch in batches for m in batch]
    pushed = client(
        {
            "action": "push",
            "namesrv": cluster.namesrv,
            "group": "CG_BATCH",
            "topic": TOPIC,
            "expression": "*",
            "props": list(PROPS),
            "expect": [m["body"] for m in everything],
            "settle": 2,
            "wait": 30,
            "deadline": 45,
        }
    )
    assert_exactly(pushed, everything)
    by_body = {r["body"]: r for r in pushed["received"]}
    for batch, result in zip(batches, sent["results"], strict=True):
        got = [by_body[m["body"]] for m in batch]
        assert len({r["queue_id"] for r in got}) == 1, got  # a batch is stored in one queue
        assert [r["queue_offset"] for r in got] == list(range(result["offset"], result["offset"] + 10))
    # every message kept its own client-made id (the C++ client reports "" as a batch's msg_id)
    assert len({r["id"] for r in pushed["received"]}) == len(everything)
