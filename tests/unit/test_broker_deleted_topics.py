"""The master's table of lately deleted topics (broker.topics.DeletedTopics)."""

from __future__ import annotations

from broker.topics import DeletedTopics


def test_the_latest_deletion_of_a_topic_counts_and_the_oldest_topics_go_first() -> None:
    deleted = DeletedTopics(kept=3)
    for i, topic in enumerate(["a", "b", "c"]):
        deleted.note(topic, 100 * i)
    deleted.note("a", 500)  # deleted again: its new offset, and it is the latest now
    deleted.note("d", 600)
    assert deleted.offsets == {"c": 200, "a": 500, "d": 600}
    assert list(deleted.offsets) == ["c", "a", "d"]
