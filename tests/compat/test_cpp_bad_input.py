"""Bad input through the real C++ client, as its user sees it.

This client version (rocketmq-client-cpp 1.2.x inside the ``rocketmq`` 0.4.4 wheel) retries a failed
sync send on the other broker groups and then raises ``ProducerSendSyncFailed`` with the generic
text "No route info of this topic: <topic>"; the broker's response code and remark only show up
in the client's own log (``processSendResponse error remark:<remark>, error code:<code>``). Both are
asserted here, together with a control message that goes through, so each case proves a rejection
by the broker and not a broken setup.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.compat.cluster import Clients, MakeContainer, broker_config, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]

MAX_SIZE = 65536
SEND_ERROR = re.compile(r"processSendResponse error remark:(.*), error code:(\d+)\[")


def broker_errors(log: str) -> list[tuple[str, int]]:
    """(remark, code) of every error response the client logged for a send."""
    return [(m.group(1), int(m.group(2))) for m in SEND_ERROR.finditer(log)]


def test_cpp_send_errors_surface_for_oversized_body_and_bad_topic(
    make_container: MakeContainer, client: Clients
) -> None:
    cluster = make_container("broker-a", "broker-b", maxMessageSize=MAX_SIZE)
    assert {broker_config(addr)["maxMessageSize"] for addr in cluster.brokers.values()} == {str(MAX_SIZE)}
    cases: list[dict[str, Any]] = [
        # Random bytes do not compress, so the body stays over the limit after the client's zlib step
        # (it compresses bodies over 4 KiB).
        {"topic": "CompatBigTopic", "body_random": 100 * 1024},
        {"topic": "CompatBigTopic", "body_random": 60 * 1024},  # control: under the limit
        {"topic": "bad topic!", "body": "x"},
        {"topic": "T" * 200, "body": "x"},  # the client allows 255 characters, the broker 127
        {"topic": "SCHEDULE_TOPIC_XXXX", "body": "x"},  # a system topic nobody may send to
        {"topic": "CompatGoodTopic", "body": "x"},  # control
    ]
    results = []
    for case in cases:  # one process per case: each case's log stands alone
        report = client(
            {"action": "produce", "namesrv": cluster.namesrv, "group": "PG_BAD", "messages": [case]}
        )
        assert "exception" not in report, report
        results.append((report["results"][0], broker_errors(report["_log"])))

    (
        (big, big_log),
        (fits, fits_log),
        (bad, bad_log),
        (long, long_log),
        (sched, sched_log),
        (good, good_log),
    ) = results
    assert fits["ok"], (fits, fits_log)
    assert good["ok"], (good, good_log)
    assert fits_log == good_log == []

    for result, topic in ((big, "CompatBigTopic"), (bad, "bad topic!"), (long, "T" * 200)):
        assert not result["ok"]
        assert result["error_type"] == "ProducerSendSyncFailed"
        assert f"No route info of this topic: {topic}" in result["error"]

    # MESSAGE_ILLEGAL (13) from every broker group it tried, naming the limit
    assert big_log, "the broker's refusal did not reach the client"
    assert {code for _, code in big_log} == {13}
    assert all(str(MAX_SIZE) in remark for remark, _ in big_log), big_log
    # INVALID_PARAMETER (29) for a topic name the broker refuses, with the reason
    assert {code for _, code in bad_log} == {29}
    assert all("bad topic!" in r and "illegal characters" in r for r, _ in bad_log), bad_log
    assert {code for _, code in long_log} == {29}
    assert all("127" in remark for remark, _ in long_log), long_log
    # NO_PERMISSION (16) for a system topic
    assert not sched["ok"]
    assert {code for _, code in sched_log} == {16}
    assert all("forbidden" in remark for remark, _ in sched_log), sched_log

    # nothing of the refused message was stored; the control message was
    pulled = client(
        {"action": "pull", "namesrv": cluster.namesrv, "group": "CG_BAD", "topic": "CompatBigTopic"}
    )
    assert len(pulled["messages"]) == 1, pulled["messages"]
