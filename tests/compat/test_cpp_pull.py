"""The real C++ pull consumer reads every queue of a topic: all queues of both broker groups, every
message exactly once, queue offsets contiguous from 0; a tag expression selects the tagged ones."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from tests.compat.cluster import Clients, MakeContainer, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]

TOPIC = "CompatPullTopic"
COUNT = 40


def test_cpp_pull_consumer_reads_every_queue_exactly_once(
    make_container: MakeContainer, client: Clients
) -> None:
    cluster = make_container("broker-a", "broker-b")
    messages: list[dict[str, Any]] = [
        {"topic": TOPIC, "body": f"pull-{i:02d}", "keys": f"k{i}", "tags": "TagA" if i % 4 else "TagB"}
        for i in range(COUNT)
    ]
    sent = client({"action": "produce", "namesrv": cluster.namesrv, "group": "PG_PULL", "messages": messages})
    assert all(r["ok"] for r in sent["results"]), sent["results"]

    report = client({"action": "pull", "namesrv": cluster.namesrv, "group": "CG_PULL", "topic": TOPIC})
    assert "exception" not in report, report
    assert "error" not in report, report
    queues = report["queues"]
    # auto-created with defaultTopicQueueNums (4) on each broker group
    assert sorted((q["broker"], q["queue_id"]) for q in queues) == [
        (b, i) for b in ("broker-a", "broker-b") for i in range(4)
    ]
    assert all("error" not in q for q in queues), queues
    assert all(q["statuses"][-1] == "NO_NEW_MSG" for q in queues), queues

    got = report["messages"]
    counts = Counter(m["body"] for m in got)
    assert set(counts) == {m["body"] for m in messages}
    assert max(counts.values()) == 1, {b: n for b, n in counts.items() if n > 1}
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for m in got:
        assert m["msg_queue_id"] == m["queue_id"]
        assert m["topic"] == TOPIC
        per_queue[(m["broker"], m["queue_id"])].append(m["queue_offset"])
    for q in queues:
        offsets = per_queue[(q["broker"], q["queue_id"])]
        assert offsets == list(range(len(offsets))), (q, offsets)
        assert q["next_offset"] == len(offsets), q
    assert {b for b, _ in per_queue} == {"broker-a", "broker-b"}

    tagged = client(
        {
            "action": "pull",
            "namesrv": cluster.namesrv,
            "group": "CG_PULL",
            "topic": TOPIC,
            "expression": "TagB",
        }
    )
    assert sorted(m["body"] for m in tagged["messages"]) == sorted(
        m["body"] for m in messages if m["tags"] == "TagB"
    )
    # the offsets still move past the filtered-out messages
    assert sorted(q["next_offset"] for q in tagged["queues"]) == sorted(q["next_offset"] for q in queues)
