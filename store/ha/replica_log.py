"""``ReplicaLog``: what the HA state machines need from a commit log (the store implements it).

All methods are synchronous and run on the trio thread; none may block on disk (``read_raw`` returns a
view of mapped memory, ``append_raw`` copies into it, ``truncate_to`` changes the in-memory state; the
store makes things durable later from a worker thread).

Durability ordering the store must keep (crash safety of the epoch history, see ``store.epoch``):

1. a commit-log truncation is durable before the epoch file that reflects it is persisted;
2. before flushing commit-log bytes, a dirty epoch file is persisted first (so an epoch entry is always
   on disk before any byte it covers).

``store.ha.memlog.MemLog`` is the in-memory reference implementation used by tests and simulations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from store.epoch import EpochFile


@runtime_checkable
class ReplicaLog(Protocol):
    """A replica's commit log as the replication protocol sees it."""

    @property
    def min_offset(self) -> int:
        """First physical offset still held (after retention)."""
        ...

    @property
    def max_offset(self) -> int:
        """Offset one past the last byte held (partial trailing messages included on a slave)."""
        ...

    @property
    def mapped_file_size(self) -> int:
        """Commit-log file size (``mappedFileSizeCommitLog``), for ``syncFromLastFile``."""
        ...

    @property
    def epoch_file(self) -> EpochFile:
        """The replica's epoch history."""
        ...

    @property
    def confirm_offset(self) -> int:
        """Offset up to which data is confirmed (dispatch stops here unless ``readUnCommitted``)."""
        ...

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None: ...

    def read_raw(self, offset: int, max_bytes: int) -> memoryview:
        """Up to ``max_bytes`` bytes from ``offset``, never crossing a file end; empty at ``max_offset``.
        ``offset`` must lie in ``[min_offset, max_offset]``."""
        ...

    def append_raw(self, offset: int, data: bytes | memoryview) -> None:
        """Append replicated bytes at exactly ``offset``. ``offset`` must equal ``max_offset``, unless
        the log holds no bytes (``min_offset == max_offset``): then the log restarts at ``offset``.
        Raises ``ValueError`` otherwise."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and after ``offset`` (commit log and everything derived from it: consume
        queues, index, dispatch position). The epoch file is *not* changed; callers trim it."""
        ...

    def last_message_boundary_at_or_below(self, offset: int) -> int:
        """Largest offset ``<= offset`` at which a complete message (or a file's blank filler) ends,
        scanning stored messages; ``min_offset`` if there is none."""
        ...

    def read_in_job(self, start: int, end: int) -> Callable[[], None] | None:
        """A blocking job, for a worker thread, that brings bytes [start, end) back into memory
        where they may have left it (the store's page-cache bound dropped them, or they were
        written before the store's start), so that ``read_raw`` and the send of its views do not
        wait for the disk on the event loop; None when they are in memory."""
        ...
