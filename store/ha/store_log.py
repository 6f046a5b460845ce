"""``StoreReplicaLog``: a ``DefaultMessageStore`` as the HA state machines see it (``ReplicaLog``).

The sans-IO replication code (``HAClient``, ``ClassicHAClient``, ``store.ha.role``) mutates the log
synchronously, but the store's ``append_raw`` and ``truncate_to`` are coroutines: a new commit-log
file, consume-queue truncation and every fsync run in worker threads. The adapter bridges the two
with a queue of deferred store operations:

* ``append_raw`` / ``truncate_to`` change a *virtual* log end at once (``max_offset``, the boundary
  walk and the next packet's offset check all see it) and queue the store operation;
* ``await drain()`` runs the queued operations in order, shielded from cancellation (a truncation
  that started always completes, as on disk it is made crash-safe by the store);
* nothing a slave tells its master may leave before the store holds what it acknowledges: the HA
  client's stream is wrapped in :class:`DrainingStream`, whose ``send_all`` drains first (an ack never
  covers bytes that exist only in this queue) and whose ``receive_some`` drains first (so at most one
  received chunk is ever queued). The ``persist`` hook the HA service calls after a truncation or a
  role change (:meth:`persist`) drains, then makes the epoch file durable.

Queued operations are at most one truncation followed by appends; a later truncation trims queued
appends first and only queues a store truncation for what lies below them.

The epoch file is shared with the store (``store.epoch_file``). The HA code trims and extends it
itself; the store's own ``truncate_to`` also trims it, which would drop an entry the HA code already
added for a point at the truncation offset (a new master's epoch), so a deferred truncation keeps the
HA code's entries.

Rules for callers: mutate only from the task that drains (the HA session task), or drain first (a
role change drains before it truncates). Master-side reads go straight to the store: ``read_raw``
returns a view of the mapped file (no copy), to be written to the socket as it is.
"""

from __future__ import annotations

import collections
import logging
import struct
from collections.abc import Callable

import trio

from remoting.protocol.message import BLANK_MAGIC, MAGIC_V1, MAGIC_V2
from store.epoch import EpochFile
from store.message_store import DefaultMessageStore

log = logging.getLogger("store.ha.store_log")

_SIZE_MAGIC = struct.Struct(">ii")


class _Append:
    __slots__ = ("data", "offset", "restart")

    def __init__(self, offset: int, data: bytes | memoryview, restart: bool) -> None:
        self.offset = offset
        self.data = data
        self.restart = restart

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


class StoreReplicaLog:
    """``ReplicaLog`` over a started ``DefaultMessageStore`` (see the module docstring)."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        #: queued store truncation (runs before the queued appends), or None
        self._truncate: int | None = None
        self._appends: collections.deque[_Append] = collections.deque()
        self._draining = False
        self._lock = trio.Lock()
        #: confirm offset asked for by the HA code (the store clamps to its own max offset)
        self._confirm: int | None = None
        #: number of store operations run by :meth:`drain` (tests and benchmarks)
        self.ops_done = 0

    # ------------------------------------------------------------------ virtual bounds

    @property
    def pending(self) -> bool:
        """True while store operations wait in the queue."""
        return self._truncate is not None or bool(self._appends)

    def _stable_end(self) -> int:
        """Below this offset the store holds exactly the virtual log's bytes."""
        end = self.store.max_phy_offset
        if self._truncate is not None:
            end = min(end, self._truncate)
        return end

    @property
    def min_offset(self) -> int:
        if self._appends and self._appends[0].restart:
            return self._appends[0].offset
        return self.store.min_phy_offset

    @property
    def max_offset(self) -> int:
        if self._appends:
            return self._appends[-1].end
        return self._stable_end()

    @property
    def mapped_file_size(self) -> int:
        return self.store.commit_log.file_size

    @property
    def epoch_file(self) -> EpochFile:
        return self.store.epoch_file

    @property
    def confirm_offset(self) -> int:
        if self._confirm is None:
            return self.store.confirm_offset
        return min(self._confirm, self.max_offset)

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None:
        self._confirm = value
        # A rise waits for the drain that lands the queued bytes (it sets the store's value then);
        # a drop is applied at once.
        if not self.pending or value < self.store.confirm_offset:
            self.store.set_confirm_offset(value)

    # ------------------------------------------------------------------ reads

    def read_raw(self, offset: int, max_bytes: int) -> memoryview:
        """A view of the mapped commit log (master side; never crosses a file end)."""
        if self.pending:
            raise RuntimeError("read_raw while store operations are queued (a master never queues)")
        view = self.store.read_raw(offset, max_bytes)
        if view is None:
            raise ValueError(
                f"read at {offset} outside [{self.store.min_phy_offset}, {self.store.max_phy_offset}]"
            )
        return view

    def _read_virtual(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of the virtual log at ``offset`` (fewer at its end)."""
        out = bytearray()
        stable = self._stable_end()
        pos = offset
        end = offset + size
        while pos < min(end, stable):
            view = self.store.read_raw(pos, min(end, stable) - pos)
            if not view:
                break
            out += view
            pos += len(view)
        for op in self._appends:
            if pos >= end:
                break
            if op.end <= pos:
                continue
            if op.offset > pos:
                break
            chunk = op.data[pos - op.offset : end - op.offset]
            out += chunk
            pos += len(chunk)
        return bytes(out)

    def read_in_job(self, start: int, end: int) -> Callable[[], None] | None:
        return self.store.commit_log.read_in_job(start, end)

    def last_message_boundary_at_or_below(self, offset: int) -> int:
        stable = self._stable_end()
        if offset <= stable or not self._appends:
            return self.store.last_message_boundary_at_or_below(min(offset, stable))
        # Walk record headers from the store's last boundary through the queued bytes.
        pos = self.store.last_message_boundary_at_or_below(stable)
        vmax = self.max_offset
        file_size = self.mapped_file_size
        limit = min(offset, vmax)
        while pos < limit:
            header = self._read_virtual(pos, _SIZE_MAGIC.size)
            if len(header) < _SIZE_MAGIC.size:
                break
            size, magic = _SIZE_MAGIC.unpack(header)
            if magic == BLANK_MAGIC:
                file_end = (pos // file_size + 1) * file_size
                if file_end > limit:
                    break
                pos = file_end
                continue
            if (magic != MAGIC_V1 and magic != MAGIC_V2) or size <= 0 or pos + size > limit:
                break
            pos += size
        return pos

    # ------------------------------------------------------------------ mutations (queued)

    def append_raw(self, offset: int, data: bytes | memoryview) -> None:
        vmax = self.max_offset
        restart = False
        if offset != vmax:
            empty = self.store.min_phy_offset == self.store.max_phy_offset and not self.pending
            if not empty:
                raise ValueError(f"append at {offset}, log ends at {vmax}")
            if offset % self.mapped_file_size:
                raise ValueError(f"an empty log can only restart at a file start, not at {offset}")
            restart = True
        if not data:
            return
        file_size = self.mapped_file_size
        if offset // file_size != (offset + len(data) - 1) // file_size:
            raise ValueError(f"{len(data)} bytes at {offset} cross a commit-log file end")
        self._appends.append(_Append(offset, data, restart))

    def truncate_to(self, offset: int) -> None:
        vmax = self.max_offset
        if offset >= vmax:
            return
        if self._draining:
            raise RuntimeError("truncate_to while a drain runs: drain first (see the module docstring)")
        if offset < self.min_offset:
            raise ValueError(f"truncate to {offset} below the log start {self.min_offset}")
        appends = self._appends
        while appends and appends[-1].offset >= offset:
            if appends[-1].restart:
                appends.pop()
                return  # the queued restart is undone: the store is untouched and still empty
            appends.pop()
        if appends:
            last = appends[-1]
            if last.end > offset:
                appends[-1] = _Append(last.offset, last.data[: offset - last.offset], last.restart)
            return
        if offset < self._stable_end():
            self._truncate = offset

    # ------------------------------------------------------------------ draining

    async def drain(self) -> None:
        """Run the queued store operations in order (shielded); returns when the queue is empty."""
        if not self.pending:
            return
        try:
            self._lock.acquire_nowait()  # the usual case: no yield to the scheduler
        except trio.WouldBlock:
            await self._lock.acquire()
        try:
            with trio.CancelScope(shield=True):
                self._draining = True
                try:
                    await self._drain_locked()
                finally:
                    self._draining = False
        finally:
            self._lock.release()

    async def _drain_locked(self) -> None:
        store = self.store
        if self._truncate is not None:
            offset = self._truncate
            # The HA code already shaped the epoch history for this point; keep its entries.
            kept = store.epoch_file.pairs()
            if offset < store.max_phy_offset:
                await store.truncate_to(offset)
                self.ops_done += 1
            self._truncate = None
            if store.epoch_file.pairs() != kept:
                store.epoch_file.replace(kept)
            await trio.to_thread.run_sync(store.epoch_file.persist)
        while self._appends:
            op = self._appends[0]
            # (a restart at another file start is the store's: append_raw on an empty log)
            # Popped only after the store took it: a failure leaves the queue as it was.
            await store.append_raw(op.offset, op.data)
            self._appends.popleft()
            self.ops_done += 1
        if self._confirm is not None:
            store.set_confirm_offset(self._confirm)

    async def persist(self) -> None:
        """The HA service's ``persist`` hook: drain, then make the epoch file durable."""
        await self.drain()
        if self.store.epoch_file.dirty:
            await trio.to_thread.run_sync(self.store.epoch_file.persist)


class DrainingStream(trio.abc.Stream):
    """A slave's HA stream: drains ``rlog`` before every send and every receive (see the module
    docstring: acks never run ahead of the store, and the queue holds at most one chunk)."""

    def __init__(self, inner: trio.abc.Stream, rlog: StoreReplicaLog) -> None:
        self.inner = inner
        self.rlog = rlog

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.rlog.drain()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        await self.rlog.drain()
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()
