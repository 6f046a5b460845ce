"""Queue allocation and the per-queue processing state of a push consumer (pure, no I/O).

Upstream: ``AllocateMessageQueueAveragely`` and ``ProcessQueue``.

:func:`allocate_averagely` gives each consumer of a group a contiguous share of the sorted
queue list, the first ``len(mqs) % len(cids)`` consumers one queue more.

:class:`ProcessQueue` holds the messages pulled from one queue that are not yet consumed, so
the offset a consumer may commit is always the lowest unconsumed offset (or one past the
highest pulled message when nothing is outstanding). Orderly consumption additionally moves
messages into a "consuming" set while the listener runs, and commits them all at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sortedcontainers import SortedDict

from client.message import MessageExt
from remoting.protocol.common import MessageQueue

__all__ = ["ProcessQueue", "allocate_averagely", "mq_sort_key"]

#: A client considers its orderly lock lost after this long without renewal (upstream 30 s).
REBALANCE_LOCK_MAX_LIVE_TIME = 30.0


def mq_sort_key(mq: MessageQueue) -> tuple[str, str, int]:
    """Upstream ``MessageQueue.compareTo``: topic, then broker name, then queue id."""
    return (mq.topic, mq.brokerName, mq.queueId)


def allocate_averagely(
    mqs: Iterable[MessageQueue], cids: Iterable[str], current_cid: str
) -> list[MessageQueue]:
    """This consumer's share of ``mqs`` among ``cids`` (empty if ``current_cid`` is not a member)."""
    mq_all = sorted(mqs, key=mq_sort_key)
    cid_all = sorted(set(cids))
    if not mq_all or current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    n_mq, n_cid = len(mq_all), len(cid_all)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n_mq - start)
    return mq_all[start : start + max(count, 0)]


class ProcessQueue:
    """Pulled-but-unconsumed messages of one queue (see the module docstring)."""

    def __init__(self, now: float = 0.0) -> None:
        self._msgs: SortedDict = SortedDict()  # queue offset -> MessageExt
        self._consuming: SortedDict = SortedDict()  # orderly: taken by the listener
        self.queue_offset_max = -1
        self.msg_count = 0
        self.msg_size = 0
        self.dropped = False
        #: orderly: this client holds the broker lock of the queue
        self.locked = False
        self.last_lock_time = now
        self.last_pull_time = now
        self.last_consume_time = now
        #: orderly: a consume loop is working on this queue right now
        self.consuming = False

    def __repr__(self) -> str:
        return (
            f"<ProcessQueue count={self.msg_count} max={self.queue_offset_max} "
            f"dropped={self.dropped} locked={self.locked}>"
        )

    def put_messages(self, msgs: Sequence[MessageExt]) -> int:
        """Add pulled messages (duplicates of held offsets are ignored); returns how many were new."""
        added = 0
        for m in msgs:
            if m.queue_offset in self._msgs or m.queue_offset in self._consuming:
                continue
            self._msgs[m.queue_offset] = m
            added += 1
            self.msg_size += len(m.body)
            if m.queue_offset > self.queue_offset_max:
                self.queue_offset_max = m.queue_offset
        self.msg_count += added
        return added

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit now, or -1 if nothing was held.

        The offset is the lowest offset still held, or ``queue_offset_max + 1`` when none is.
        """
        if not self._msgs:
            return -1
        for m in msgs:
            gone = self._msgs.pop(m.queue_offset, None)
            if gone is not None:
                self.msg_count -= 1
                self.msg_size -= len(gone.body)
        if self._msgs:
            return self._msgs.keys()[0]
        return self.queue_offset_max + 1

    @property
    def min_offset(self) -> int:
        """The lowest offset held, or -1 when none is."""
        return self._msgs.keys()[0] if self._msgs else -1

    @property
    def max_span(self) -> int:
        """Distance between the lowest and highest held offsets (flow-control input)."""
        if not self._msgs:
            return 0
        keys = self._msgs.keys()
        return keys[-1] - keys[0]

    def is_empty(self) -> bool:
        return not self._msgs and not self._consuming

    def held_offsets(self) -> list[int]:
        return list(self._msgs.keys())

    # -- orderly --------------------------------------------------------------------------------

    def take_messages(self, n: int) -> list[MessageExt]:
        """Orderly: move up to ``n`` lowest-offset messages to the consuming set and return them."""
        out: list[MessageExt] = []
        while self._msgs and len(out) < n:
            off, m = self._msgs.popitem(0)
            self._consuming[off] = m
            out.append(m)
        return out

    def has_pending(self) -> bool:
        return bool(self._msgs)

    def commit(self) -> int:
        """Orderly: the taken messages are consumed; returns the offset to commit (-1 if none taken)."""
        if not self._consuming:
            return -1
        last = self._consuming.keys()[-1]
        for m in self._consuming.values():
            self.msg_size -= len(m.body)
        self.msg_count -= len(self._consuming)
        self._consuming.clear()
        return last + 1

    def make_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Orderly: put taken messages back so they are consumed again, in order."""
        for m in msgs:
            if self._consuming.pop(m.queue_offset, None) is not None:
                self._msgs[m.queue_offset] = m

    def lock_expired(self, now: float, max_live: float = REBALANCE_LOCK_MAX_LIVE_TIME) -> bool:
        return now - self.last_lock_time > max_live
