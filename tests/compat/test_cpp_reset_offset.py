"""``rmq-admin consumerStatus`` and ``resetOffsetByTime`` while the real C++ push consumer runs: it
reports its state when the broker asks, and consumes the topic again from the reset point, without a restart (the broker answers its next pull of each queue with
PULL_OFFSET_MOVED to the reset offset, which the client follows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.protocol.broker import ConsumeStats
from tests.compat.cluster import PROJECT_ROOT, Clients, MakeContainer, invoke, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]

TOPIC = "CompatResetTopic"
GROUP = "CG_CPP_RESET"
COUNT = 12


def consumed(broker: str) -> int:
    """The group's committed offsets over the topic's queues on ``broker``."""
    cmd = request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC})
    response = invoke(broker, cmd)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return sum(w.consumerOffset for w in ConsumeStats.decode(response.body_bytes).offsetTable.values())


def rmq_admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "client.admin_cli", *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cpp_push_consumer_follows_a_reset_offset_by_time(
    make_container: MakeContainer, client: Clients, tmp_path: Path
) -> None:
    cluster = make_container("broker-a")
    broker = f"127.0.0.1:{cluster.broker_ports['broker-a']}"
    before = int(time.time() * 1000) - 1000
    bodies = [f"reset-{i:02d}" for i in range(COUNT)]
    sent = client(
        {
            "action": "produce",
            "namesrv": cluster.namesrv,
            "group": "PG_RESET",
            "messages": [{"topic": TOPIC, "body": b} for b in bodies],
        }
    )
    assert all(r["ok"] for r in sent["results"]), sent["results"]

    expect_file = tmp_path / "expect.json"
    consumer = client.start(
        {
            "action": "push_until",
            "namesrv": cluster.namesrv,
            "group": GROUP,
            "topic": TOPIC,
            "expect_file": str(expect_file),
            "wait": 60,
            "settle": 2,
            "deadline": 70,
        }
    )
    end = time.monotonic() + 30
    while consumed(broker) < COUNT:
        assert time.monotonic() < end, f"the consumer committed {consumed(broker)} of {COUNT}"
        time.sleep(0.2)

    # while it runs: what the C++ consumer reports about itself (GET_CONSUMER_RUNNING_INFO)
    status = rmq_admin("consumerStatus", "-n", cluster.namesrv, "-g", GROUP)
    assert status.returncode == 0, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert lines[1].split()[0] == "1", status.stdout  # one client, its report written to a file
    assert lines[1].split()[2] == "V3_1_8", status.stdout  # the version the C++ client 2.x sends
    connection = rmq_admin("consumerConnection", "-n", cluster.namesrv, "-g", GROUP)
    assert connection.returncode == 0, connection.stdout + connection.stderr
    assert connection.stdout.splitlines()[1].split()[2:] == ["CPP", "V3_1_8"], connection.stdout
    report_text = Path(lines[1].split()[-1]).read_text()
    assert f"Topic: {TOPIC}" in report_text, report_text
    assert lines[-1] == "Rebalance OK", status.stdout

    admin = rmq_admin("resetOffsetByTime", "-n", cluster.namesrv, "-g", GROUP, "-t", TOPIC, "-s", str(before))
    assert admin.returncode == 0, admin.stdout + admin.stderr
    rows = [line.split() for line in admin.stdout.splitlines()[2:]]
    assert [(row[0], row[2]) for row in rows] == [("broker-a", "0")] * len(rows), admin.stdout
    assert rows, admin.stdout
    reset_at = time.time()

    sent = client(
        {
            "action": "produce",
            "namesrv": cluster.namesrv,
            "group": "PG_RESET",
            "messages": [{"topic": TOPIC, "body": "after"}],
        }
    )
    assert all(r["ok"] for r in sent["results"]), sent["results"]
    expect_file.write_text(json.dumps([*bodies, "after"]))
    report = consumer.report(timeout=80)
    assert not report.get("timed_out"), report
    assert "exception" not in report, report
    counts = Counter(r["body"] for r in report["received"])
    assert counts == Counter({**dict.fromkeys(bodies, 2), "after": 1}), counts
    again = [r for r in report["received"] if r["body"] in bodies and r["t"] >= reset_at - 0.5]
    assert sorted(r["body"] for r in again) == bodies  # the second delivery of each came after the reset
    assert all(r["reconsume_times"] == 0 for r in report["received"])
