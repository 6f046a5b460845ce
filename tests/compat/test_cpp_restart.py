"""Restarting ``rmq-container`` on the same data directory, seen by the real C++ client.

(a) SIGTERM (clean stop, exit 0): every message is still there, and a consumer group resumes after
    the offsets it committed: nothing it had consumed is delivered again.
(b) SYNC_FLUSH and SIGKILL right after the sends were acknowledged: every acknowledged message is
    consumable after the restart.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
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


def _progress(path: Path) -> dict[str, int]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"sent": 0, "acked": 0}


@pytest.mark.slow
def test_running_cpp_clients_carry_on_across_a_container_crash(
    make_container: MakeContainer, client: Clients, tmp_path: Path
) -> None:
    """A C++ producer streams and a C++ push consumer listens while the container is SIGKILLed and
    started again on its data: the clients reconnect by themselves (the producer at once, on the
    restarted name server's route) and every acknowledged message is delivered (SYNC_FLUSH)."""
    topic, group = "CompatLiveRestartTopic", "CG_LIVE_RESTART"
    cluster = make_container("broker-a", "broker-b", flushDiskType="SYNC_FLUSH")
    seed = batch(topic, "seed", 8)  # creates the topic on both brokers
    produce(client, cluster, seed)
    progress, expect_file = tmp_path / "progress.json", tmp_path / "expect.json"
    consumer = client.start(
        {
            "action": "push_until",
            "namesrv": cluster.namesrv,
            "group": group,
            "topic": topic,
            "expect_file": str(expect_file),
            "wait": 90,
            "settle": 1,
            "deadline": 100,
        }
    )
    producer = client.start(
        {
            "action": "produce_stream",
            "namesrv": cluster.namesrv,
            "group": "PG_LIVE_RESTART",
            "topic": topic,
            "duration": 15,
            "interval_ms": 20,
            "progress_file": str(progress),
            "deadline": 60,
        }
    )
    deadline = time.monotonic() + 20
    while _progress(progress)["acked"] < 100:
        assert time.monotonic() < deadline, "100 acknowledged sends before the restart"
        time.sleep(0.05)
    killed_at = time.time()
    assert cluster.kill() == -9
    time.sleep(1)
    cluster.start()
    started_at = time.time()
    sent = producer.report(60)
    assert "exception" not in sent, sent
    results = sent["results"]
    acked = [r for r in results if r.get("ok") and r["status"] == 0]
    expect_file.write_text(json.dumps([r["body"] for r in acked]))
    got = consumer.report(100)
    assert "exception" not in got, got
    after = sorted(r["t"] - started_at for r in acked if r["t"] > started_at)
    failed = [r for r in results if not (r.get("ok") and r["status"] == 0)]
    received = Counter(r["body"] for r in got["received"])
    missing = [r["body"] for r in acked if r["body"] not in received]
    summary = (
        f"{len(results)} sends, {len(acked)} acknowledged ({len(after)} after the restart, first "
        f"{after[0] if after else None} s after), {len(failed)} not (e.g. {failed[:2]}); down for "
        f"{started_at - killed_at:.1f} s; {len(missing)} missing; {sum(n - 1 for n in received.values())} twice"
    )
    print(summary)
    assert len(after) >= 50, summary  # sends go on after the restart
    assert not got.get("timed_out"), summary
    assert not missing, f"{summary}: {missing[:5]}"
