"""The master's table of lately deleted topics (broker.topics.DeletedTopics)."""

from __future__ import annotations

from pathlib import Path

from broker.topics import DeletedTopics


def test_the_latest_deletion_of_a_topic_counts_and_the_oldest_topics_go_first() -> None:
    deleted = DeletedTopics(kept=3)
    for i, topic in enumerate(["a", "b", "c"]):
        deleted.note(topic, 100 * i)
    deleted.note("a", 500)  # deleted again: its new offset, and it is the latest now
    deleted.note("d", 600)
    assert deleted.offsets == {"c": 200, "a": 500, "d": 600}
    assert list(deleted.offsets) == ["c", "a", "d"]


def test_the_table_is_read_back_from_its_file(tmp_path: Path) -> None:
    deleted = DeletedTopics(str(tmp_path))
    deleted.note("a", 100)
    deleted.note("b", 50)
    Path(deleted.path).write_bytes(deleted.encode())
    again = DeletedTopics(str(tmp_path))
    again.load()
    assert list(again.offsets.items()) == [("a", 100), ("b", 50)]
    missing = DeletedTopics(str(tmp_path / "nowhere"))
    missing.load()
    assert missing.offsets == {}
