"""Restarting ``rmq-container`` on the same data directory, seen by the real C++ client.

(a) SIGTERM (clean stop, exit 0): every message is still there, and a consumer group resumes after
    the offsets it committed: nothing it had consumed is delivered again.
(b) SYNC_FLUSH and SIGKILL right after the sends were acknowledged: every acknowledged message is
    consumable after the restart.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.compat.cluster import Clients, Container, MakeContainer, broker_config, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]


def batch(topic: str, prefix: str, count: int) -> list[dict[str, Any]]:
    return [
        {"topic": topic, "body": f"{prefix}-{i:02d}", "keys": f"{prefix}{i}", "tags": "TagS"}
        for i in range(count)
    ]


def produce(client: Clients, cluster: Container, messages: list[dict[str, Any]]) -> None:
    report = client(
        {"action": "produce", "namesrv": cluster.namesrv, "group": "PG_RESTART", "messages": messages}
    )
    assert "exception" not in report, report
    failed = [r for r in report["results"] if not (r["ok"] and r["status"] == 0)]
    assert not failed, failed


def consume(client: Clients, cluster: Container, topic: str, expect: list[str], settle: float) -> list[str]:
    report = client(
        {
            "action": "push",
            "namesrv": cluster.namesrv,
            "group": "CG_RESTART",
            "topic": topic,
            "expression": "*",
            "expect": expect,
            "settle": settle,
            "wait": 30,
            "deadline": 45,
        }
    )
    assert "exception" not in report, report
    assert not report.get("timed_out"), f"incomplete: {len(report['received'])} of {len(expect)}"
    return [r["body"] for r in report["received"]]


def pull_all(client: Clients, cluster: Container, topic: str) -> Counter[str]:
    report = client(
        {"action": "pull", "namesrv": cluster.namesrv, "group": "CG_RESTART_PULL", "topic": topic}
    )
    assert "error" not in report, report
    assert all("error" not in q for q in report["queues"]), report["queues"]
    return Counter(m["body"] for m in report["messages"])


def test_cpp_messages_and_committed_offsets_survive_sigterm_restart(
    make_container: MakeContainer, client: Clients
) -> None:
    topic = "CompatRestartTopic"
    cluster = make_container("broker-a", "broker-b")
    consumed = batch(topic, "before", 20)
    produce(client, cluster, consumed)
    got = consume(client, cluster, topic, [m["body"] for m in consumed], settle=1)
    assert Counter(got) == Counter(m["body"] for m in consumed)
    # consumer shut down: its offsets are committed; these are stored but not consumed yet
    pending = batch(topic, "pending", 10)
    produce(client, cluster, pending)

    assert cluster.stop() == 0, cluster.output()
    cluster.start()

    after = batch(topic, "after", 10)
    produce(client, cluster, after)
    # the committed group resumes exactly after what it had consumed
    want = [m["body"] for m in pending + after]
    got = consume(client, cluster, topic, want, settle=3)
    redelivered = sorted(b for b in got if b.startswith("before-"))
    assert not redelivered, f"committed messages delivered again after a clean restart: {redelivered}"
    assert Counter(got) == Counter(want)
    # and every message is still stored, once
    assert pull_all(client, cluster, topic) == Counter(m["body"] for m in consumed + pending + after)


def test_cpp_acknowledged_messages_survive_sigkill_with_sync_flush(
    make_container: MakeContainer, client: Clients
) -> None:
    topic = "CompatCrashTopic"
    cluster = make_container("broker-a", "broker-b", flushDiskType="SYNC_FLUSH")
    assert {broker_config(addr)["flushDiskType"] for addr in cluster.brokers.values()} == {"SYNC_FLUSH"}
    acked = batch(topic, "acked", 50)
    produce(client, cluster, acked)

    assert cluster.kill() == -9
    cluster.start()

    assert pull_all(client, cluster, topic) == Counter(m["body"] for m in acked)
    # the restarted brokers take new messages in the same queues
    more = batch(topic, "more", 8)
    produce(client, cluster, more)
    assert pull_all(client, cluster, topic) == Counter(m["body"] for m in acked + more)
