"""Queue allocation (AllocateMessageQueueAveragely) and ProcessQueue offset tracking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.message import MessageExt
from client.rebalance import ProcessQueue, allocate_averagely
from remoting.protocol.common import MessageQueue


def mqs(n: int, brokers: tuple[str, ...] = ("broker-a",)) -> list[MessageQueue]:
    return [MessageQueue(topic="T", brokerName=b, queueId=i) for b in brokers for i in range(n)]


def ids(alloc: list[MessageQueue]) -> list[tuple[str, int]]:
    return [(m.brokerName, m.queueId) for m in alloc]


@pytest.mark.parametrize(
    ("n_mq", "cids", "me", "expected"),
    [
        (4, ["a"], "a", [0, 1, 2, 3]),
        (4, ["a", "b"], "a", [0, 1]),
        (4, ["b", "a"], "b", [2, 3]),  # sorted ids: a first
        (5, ["a", "b"], "a", [0, 1, 2]),  # the first `mod` consumers get one more
        (5, ["a", "b"], "b", [3, 4]),
        (8, ["a", "b", "c"], "a", [0, 1, 2]),
        (8, ["a", "b", "c"], "b", [3, 4, 5]),
        (8, ["a", "b", "c"], "c", [6, 7]),
        (2, ["a", "b", "c"], "c", []),  # more consumers than queues
        (2, ["a", "b", "c"], "b", [1]),
        (4, ["a", "b"], "z", []),  # not a member
    ],
)
def test_allocate_averagely_matches_upstream(
    n_mq: int, cids: list[str], me: str, expected: list[int]
) -> None:
    assert [m.queueId for m in allocate_averagely(mqs(n_mq), cids, me)] == expected


def test_allocation_sorts_queues_by_broker_then_id() -> None:
    queues = list(reversed(mqs(2, ("broker-b", "broker-a"))))
    assert ids(allocate_averagely(queues, ["a", "b"], "a")) == [("broker-a", 0), ("broker-a", 1)]
    assert ids(allocate_averagely(queues, ["a", "b"], "b")) == [("broker-b", 0), ("broker-b", 1)]


@given(st.integers(min_value=0, max_value=40), st.integers(min_value=1, max_value=12))
def test_allocation_partitions_every_queue_exactly_once(n_mq: int, n_cid: int) -> None:
    queues = mqs(n_mq)
    cids = [f"c{i:02d}" for i in range(n_cid)]
    shares = [allocate_averagely(queues, cids, c) for c in cids]
    flat = [m for s in shares for m in s]
    assert sorted(flat, key=lambda m: m.queueId) == queues
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


def msg(offset: int, body: bytes = b"x") -> MessageExt:
    return MessageExt("T", body, queue_offset=offset)


def test_process_queue_commits_the_lowest_unconsumed_offset() -> None:
    pq = ProcessQueue()
    batch = [msg(i) for i in range(10, 15)]
    assert pq.put_messages(batch) == 5
    assert pq.msg_count == 5
    # out-of-order completion: the offset cannot pass the oldest outstanding message
    assert pq.remove_messages([batch[2], batch[4]]) == 10
    assert pq.remove_messages([batch[0]]) == 11
    assert pq.remove_messages([batch[1], batch[3]]) == 15  # nothing left: one past the highest
    assert pq.msg_count == 0
    assert pq.is_empty()
    # removing again (already gone) reports nothing to commit
    assert pq.remove_messages([batch[0]]) == -1


def test_process_queue_ignores_duplicates_and_tracks_span_and_size() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(1, b"ab"), msg(5, b"cde")])
    assert pq.put_messages([msg(5), msg(7)]) == 1
    assert pq.msg_count == 3
    assert pq.msg_size == 2 + 3 + 1
    assert pq.max_span == 6
    assert pq.queue_offset_max == 7


def test_orderly_take_commit_and_consume_again() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(i) for i in range(4)])
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [0, 1]
    pq.make_consume_again(first)
    again = pq.take_messages(3)
    assert [m.queue_offset for m in again] == [0, 1, 2]
    assert pq.commit() == 3
    assert pq.msg_count == 1
    assert [m.queue_offset for m in pq.take_messages(5)] == [3]
    assert pq.commit() == 4
    assert pq.commit() == -1
    assert pq.is_empty()


def test_lock_expiry() -> None:
    pq = ProcessQueue(now=100.0)
    assert not pq.lock_expired(129.0)
    assert pq.lock_expired(131.0)
