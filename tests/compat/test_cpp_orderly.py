"""Ordered messages with the real C++ client: ``send_orderly`` with a sharding argument puts every
message of one key into one queue, in send order; an orderly push consumer gets them in that order."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from tests.compat.cluster import Clients, MakeContainer, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]

TOPIC = "CompatOrderTopic"
# The client's hashing selector picks queue ``arg % 8`` of the topic's 8 write queues (4 per broker
# group, sorted by broker): two keys land on broker-a, two on broker-b, each key alone in its queue.
SHARDS = {"A": 1, "B": 2, "C": 5, "D": 6}
PER_ROUND = 10


def ordered_messages(seqs: range) -> list[dict[str, Any]]:
    """Round-robin over the keys, so the keys' messages interleave in time."""
    return [
        {
            "topic": TOPIC,
            "body": f"{key}-{seq:02d}",
            "keys": f"order-{key}",
            "tags": "TagO",
            "props": {"seq": str(seq)},
            "mode": "orderly",
            "arg": arg,
        }
        for seq in seqs
        for key, arg in SHARDS.items()
    ]


def check_send_offsets(report: dict[str, Any], messages: list[dict[str, Any]], first: int) -> None:
    """Each key alone in its queue: its messages got consecutive queue offsets first, first+1, ...

    This relies on the scenario's quiet start (``wait_first_heartbeat_pass`` in cpp_scenario.py):
    without it a send could race the client's heartbeat thread opening a broker connection, fail
    inside the client, and ``send_orderly`` would retry on a queue of the other broker — seen on a
    loaded machine as offsets ``[0, 0, 1, 2, ...]`` for one key, its first message stored in queue 0
    of broker-a and the rest in its own queue of broker-b. RocketMQ promises order per queue, so the
    check stays strict; the race belongs to the client, not to the broker.
    """
    assert "exception" not in report, report
    offsets: dict[str, list[int]] = defaultdict(list)
    for msg, result in zip(messages, report["results"], strict=True):
        assert result["ok"], result
        assert result["status"] == 0, result
        offsets[msg["keys"]].append(result["offset"])
    for key, got in offsets.items():
        assert got == list(range(first, first + len(got))), (key, got)


def test_cpp_orderly_consumer_gets_each_key_in_send_order(
    make_container: MakeContainer, client: Clients
) -> None:
    cluster = make_container("broker-a", "broker-b")
    round1 = ordered_messages(range(PER_ROUND))
    sent = client({"action": "produce", "namesrv": cluster.namesrv, "group": "PG_ORDER", "messages": round1})
    check_send_offsets(sent, round1, 0)

    round2 = ordered_messages(range(PER_ROUND, 2 * PER_ROUND))
    consumer = client.start(
        {
            "action": "push",
            "namesrv": cluster.namesrv,
            "group": "CG_ORDER",
            "topic": TOPIC,
            "expression": "TagO",
            "orderly": True,
            "thread_count": 4,
            "sleep_ms": 20,  # slow handlers of random duration: concurrent handling would reorder
            "props": ["seq"],
            "expect": [m["body"] for m in round1 + round2],
            "settle": 2,
            "wait": 40,
            "deadline": 55,
        }
    )
    sent = client({"action": "produce", "namesrv": cluster.namesrv, "group": "PG_ORDER", "messages": round2})
    check_send_offsets(sent, round2, PER_ROUND)
    report = consumer.report(70)

    assert not report.get("timed_out"), f"incomplete: {len(report['received'])} received"
    assert "exception" not in report, report
    per_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in report["received"]:
        per_key[r["keys"]].append(r)
    assert set(per_key) == {f"order-{k}" for k in SHARDS}
    for key, records in per_key.items():
        letter = key[-1]
        assert [r["body"] for r in records] == [f"{letter}-{s:02d}" for s in range(2 * PER_ROUND)], key
        assert len({r["queue_id"] for r in records}) == 1, key
        assert [r["queue_offset"] for r in records] == list(range(2 * PER_ROUND)), key
        assert [r["props"]["seq"] for r in records] == [str(s) for s in range(2 * PER_ROUND)]
        # and one finished before the next began
        finished = [body for body in report["completed"] if body.startswith(f"{letter}-")]
        assert finished == [r["body"] for r in records], key

    # where they are stored: each key in exactly one queue, the keys spread over both broker groups
    pulled = client({"action": "pull", "namesrv": cluster.namesrv, "group": "CG_ORDER_PULL", "topic": TOPIC})
    queues_of_key: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for m in pulled["messages"]:
        queues_of_key[m["keys"]].add((m["broker"], m["queue_id"]))
    assert all(len(q) == 1 for q in queues_of_key.values()), queues_of_key
    assert len(set().union(*queues_of_key.values())) == len(SHARDS)
    assert {b for q in queues_of_key.values() for b, _ in q} == {"broker-a", "broker-b"}


@pytest.mark.parametrize("topic_exists", [True, False], ids=["existing-topic", "auto-created-topic"])
def test_cpp_oneway_orderly_sends_are_stored_in_send_order(
    make_container: MakeContainer, client: Clients, topic_exists: bool
) -> None:
    """``send_oneway_orderly`` does not wait for answers: the client pipelines the sends on one
    connection, and the broker stores them in the order they arrive -- also the ones behind a send
    that waits: the first message of a new queue waits for its consume-queue file (the rest of that
    read batch used to be started in either order), and every send to a topic the first one
    auto-created waits for the topic's route before it is answered (they used to wait before they
    were stored, and woke up in any order). Each came out reordered per key in 2 of 3 runs."""
    cluster = make_container("broker-a")
    topic = f"CompatOnewayOrderly{'Existing' if topic_exists else 'New'}Topic"
    if topic_exists:  # its queues have no file yet
        create = {"topic": topic, "body": "create", "keys": "create", "mode": "sync"}
        created = client(
            {
                "action": "produce",
                "namesrv": cluster.namesrv,
                "group": "PG_ONEWAY_ORDER",
                "messages": [create],
            }
        )
        assert created["results"][0]["ok"], created
    messages = [
        {
            "topic": topic,
            "body": f"{key}-{seq:02d}",
            "keys": f"order-{key}",
            "mode": "oneway_orderly",
            "arg": arg,
        }
        for seq in range(PER_ROUND)
        for key, arg in SHARDS.items()
    ]
    sent = client(
        {"action": "produce", "namesrv": cluster.namesrv, "group": "PG_ONEWAY_ORDER", "messages": messages}
    )
    assert "exception" not in sent, sent
    per_key: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    deadline = time.monotonic() + 20
    while sum(len(v) for v in per_key.values()) < len(messages) and time.monotonic() < deadline:
        time.sleep(0.2)  # oneway: stored a moment after the client returns
        pulled = client(
            {"action": "pull", "namesrv": cluster.namesrv, "group": "CG_ONEWAY_PULL", "topic": topic}
        )
        per_key.clear()
        for m in pulled["messages"]:
            if m["keys"] != "create":
                per_key[m["keys"]].append((m["queue_id"], m["queue_offset"], m["body"]))
    assert sum(len(v) for v in per_key.values()) == len(messages), per_key
    for key, stored in per_key.items():
        letter = key[-1]
        assert len({q for q, _, _ in stored}) == 1, (key, stored)  # one queue per key
        in_queue_order = [body for _, _, body in sorted(stored)]
        assert in_queue_order == [f"{letter}-{s:02d}" for s in range(PER_ROUND)], key
