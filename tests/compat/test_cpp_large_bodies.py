"""Large bodies through a real ``rmq-container`` with the real C++ client: the client zlib-compresses
every body over 4 KiB (``compressMsgBodyOverHowmuch``) and flags it COMPRESSED; the broker stores
the compressed bytes untouched and hands the flag back, so push and pull consumers inflate exactly
what was sent. Sizes from either side of the 4 KiB threshold up to just under the 4 MiB
``maxMessageSize`` (the client's own limit, 128 KiB by default, raised to match)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest

from tests.compat.cluster import Clients, MakeContainer, requires_cpp_client

pytestmark = [pytest.mark.compat, requires_cpp_client]

TOPIC = "CompatLargeBodyTopic"


def _text_body(i: int, size: int) -> str:
    """A compressible ASCII body that starts with its own name (the scenario compares text)."""
    rng = random.Random(i)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    head = f"large-{i:02d}:"
    parts = [head]
    n = len(head)
    while n < size:
        w = rng.choice(words) + " "
        parts.append(w)
        n += len(w)
    return "".join(parts)[:size]


def test_cpp_large_and_compressed_bodies_round_trip_through_push_and_pull(
    make_container: MakeContainer, client: Clients
) -> None:
    cluster = make_container("broker-a")
    sizes = [4095, 4097, 64 * 1024, 1024 * 1024, 4 * 1024 * 1024 - 64 * 1024]
    messages: list[dict[str, Any]] = [
        {"topic": TOPIC, "body": _text_body(i, size), "keys": f"large-{i:02d}", "tags": "Big", "mode": "sync"}
        for i, size in enumerate(sizes)
    ]
    sent = client(
        {
            "action": "produce",
            "namesrv": cluster.namesrv,
            "group": "PG_LARGE",
            "messages": messages,
            "max_message_size": 4 * 1024 * 1024,
        },
        timeout=90,
    )
    assert "exception" not in sent, sent
    failed = [r for r in sent["results"] if not r["ok"] or r.get("status") != 0]
    assert not failed, failed

    expected = {m["body"]: hashlib.sha256(m["body"].encode()).hexdigest() for m in messages}
    pushed = client(
        {
            "action": "push",
            "namesrv": cluster.namesrv,
            "group": "CG_LARGE",
            "topic": TOPIC,
            "expression": "Big",
            "expect": list(expected),
            "settle": 2,
            "wait": 40,
            "deadline": 60,
        },
        timeout=90,
    )
    assert not pushed.get("timed_out"), f"got {len(pushed['received'])} of {len(expected)}"
    got = sorted(hashlib.sha256(r["body"].encode()).hexdigest() for r in pushed["received"])
    assert got == sorted(expected.values())

    pulled = client(
        {"action": "pull", "namesrv": cluster.namesrv, "group": "CG_LARGE_PULL", "topic": TOPIC},
        timeout=90,
    )
    got = sorted(hashlib.sha256((m["body"] or "").encode()).hexdigest() for m in pulled["messages"])
    assert got == sorted(expected.values())
