"""Deletion marks: for each lately deleted topic, the commit-log end when it was deleted.

Deleting a topic drops its consume queues, but its records stay in the commit log. Recovery after
a crash dispatches again every record from the checkpoint's scan start on (``store.recovery``), and
would rebuild the deleted topic's queues from those records: the topic, created again later (a
test suite deletes and recreates its topics), would serve the old messages and continue their
queue offsets. Upstream does exactly that. Here a record of a marked topic below its mark gets no
consume-queue unit (it keeps its index entries: lookups by key and id still find it, as they find
any deleted topic's record); records of the topic created again lie above the mark.

A mark is needed only while recovery could still scan below it: once a written checkpoint's scan
start (the older of its flushed commit-log and dispatch offsets) has passed the mark, it is dropped.
Marks live in ``<storePathRootDir>/deletedTopics.json`` (``{"topic": offset}``), written before the
queues' files are removed, so a crash in the middle of a deletion still finds them.
"""

from __future__ import annotations

import logging
import os

import msgspec
import trio

from store.checkpoint import CheckpointData
from store.mapped_file import fsync_dir

log = logging.getLogger("store.deletion_marks")

FILE_NAME = "deletedTopics.json"


def scan_start(data: CheckpointData) -> int:
    """Where a recovery from this checkpoint starts re-dispatching (-1: unknown, maybe anywhere)."""
    if data.physicFlushedOffset < 0 or data.logicsFlushedOffset < 0:
        return -1
    return min(data.physicFlushedOffset, data.logicsFlushedOffset)


class DeletionMarks:
    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, FILE_NAME)
        #: topic -> commit-log end at its deletion; every record of the deleted topic lies below
        self.marks: dict[str, int] = {}
        self.save_lock = trio.Lock()  # held while the file is replaced

    def covers(self, topic: str, phys: int) -> bool:
        """Whether the record of ``topic`` at ``phys`` belongs to a deleted incarnation of it."""
        return phys < self.marks.get(topic, -1)

    def note(self, topics: list[str], end: int) -> None:
        for topic in topics:
            self.marks[topic] = end

    def prune(self, checkpoint: CheckpointData) -> bool:
        """Drop the marks a recovery from ``checkpoint`` (written) can no longer scan below."""
        start = scan_start(checkpoint)
        gone = [t for t, end in self.marks.items() if end <= start]
        for topic in gone:
            del self.marks[topic]
        return bool(gone)

    def load_sync(self) -> list[str]:
        """Read the file; a damaged one is reported and ignored (the cost: a deleted topic's
        queues may come back after this one crash, as upstream's always do)."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        try:
            marks = msgspec.json.decode(raw, type=dict[str, int])
        except msgspec.DecodeError as exc:
            msg = f"{self.path}: unreadable ({exc}); ignored"
            log.warning(msg)
            return [msg]
        self.marks = marks
        if marks:
            log.info("deleted topics whose old records get no consume-queue unit: %s", sorted(marks))
        return []

    async def save(self) -> None:
        """Write the marks (atomically; the file is removed when there are none)."""
        async with self.save_lock:
            await trio.to_thread.run_sync(self._save_sync, dict(self.marks))

    def _save_sync(self, marks: dict[str, int]) -> None:
        directory = os.path.dirname(self.path)
        if not marks:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                return
            fsync_dir(directory)
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(msgspec.json.encode(marks))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(directory)
