"""The trio driver around :class:`~controller.raft.core.RaftNode`: timers, storage, transport,
state-machine application, and an async API for the controller.

One loop task owns the node. Everything else (received messages, proposals, reads, ticks) is
queued for it, so the node is never touched between ``ready()`` and ``advance()``. For each
Ready the loop persists (and fsyncs, in a worker thread) first, then sends the messages, then
applies committed entries to the :class:`StateMachine` and releases reads — the ordering the
core's docstring requires.

Semantics the controller can rely on:

- ``propose`` resolves with ``StateMachine.apply``'s return value once the entry is applied
  here; entries with empty data are no-ops that are not passed to ``apply`` (result ``None``).
- ``linearizable_read`` returns once this leader confirmed with a quorum that it still leads
  *and* applied everything committed before the call; reading the local state machine right
  after it returns is linearizable.
- On a follower both raise :class:`NotLeaderError` immediately (no forwarding). If leadership
  is lost while waiting they raise :class:`LeadershipLostError` (a proposal may still commit);
  past the timeout :class:`RaftTimeoutError`.
- ``StateMachine.apply`` exceptions are bugs: they propagate and stop the driver.
"""

from __future__ import annotations

import logging
import os
import random
from collections import deque
from typing import Any, Protocol

import msgspec
import trio

from controller.raft.core import RaftNode, Ready
from controller.raft.errors import (
    LeadershipLostError,
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
    RaftTimeoutError,
)
from controller.raft.messages import (
    Entry,
    HardState,
    Message,
    PersistentState,
    Snapshot,
    SnapshotMeta,
    decode_message,
    encode_message,
)
from controller.raft.peers import check_self_id
from controller.raft.storage import FileStorage
from remoting.repeats import RepeatedLog

logger = logging.getLogger("controller.raft")

#: how often the ticker of a group of one looks again once it leads (it does not tick then)
SOLO_LEADER_CHECK_INTERVAL = 1.0
#: seconds between attempts to write the raft log while the disk refuses
SAVE_RETRY_S = 1.0


class StateMachine(Protocol):
    """The replicated application (the controller's ReplicasInfoManager)."""

    def apply(self, index: int, data: bytes) -> Any:
        """Apply one committed entry (never empty); the return value answers its proposal."""
        ...

    def snapshot(self) -> bytes:
        """Serialize the state after the last applied entry."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot's."""
        ...


class Transport(Protocol):
    """Fire-and-forget delivery of encoded Raft messages to a peer by id. ``send`` must not
    block on the network (queue and return) and must swallow delivery failures: Raft
    retries on its own. Incoming messages are handed to :meth:`RaftDriver.receive`."""

    async def send(self, to_id: str, msg_bytes: bytes) -> None: ...


class Storage(Protocol):
    """Durable Raft state (:class:`FileStorage`, or :class:`MemoryStorage` in simulations)."""

    blocking: bool

    def load(self) -> PersistentState: ...

    def save(self, hard_state: HardState | None, entries: list[Entry], snapshot: Snapshot | None) -> None: ...

    def compact(self, snapshot: Snapshot) -> None: ...

    def close(self) -> None: ...


class _Waiter:
    """A one-shot result slot for a proposal or read."""

    __slots__ = ("done", "error", "event", "index", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.index = 0

    def resolve(self, result: Any) -> None:
        if not self.done:
            self.done = True
            self.result = result
            self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self.error = error
            self.event.set()

    async def wait(self, timeout: float, what: str) -> Any:
        with trio.move_on_after(timeout):
            await self.event.wait()
        if not self.done:
            self.fail(RaftTimeoutError(f"{what} timed out after {timeout}s"))
        if self.error is not None:
            raise self.error
        return self.result


class RaftDriver:
    """Runs one Raft peer. ``peers`` maps every member id (this one included) to its address,
    as returned by :func:`~controller.raft.peers.parse_peers`. State lives in ``storage_dir``
    (``controllerStorePath``) unless ``storage`` is given (simulations)."""

    def __init__(
        self,
        node_id: str,
        peers: dict[str, str],
        storage_dir: str | os.PathLike[str] | None,
        transport: Transport,
        state_machine: StateMachine,
        *,
        tick_interval: float = 0.1,
        election_tick: int = 10,
        heartbeat_tick: int = 1,
        snapshot_interval: int = 10_000,
        pre_vote: bool = True,
        rng: random.Random | None = None,
        storage: Storage | None = None,
        max_inbox: int = 10_000,
    ) -> None:
        check_self_id(node_id, peers)
        if storage is None:
            if storage_dir is None:
                raise ValueError("need storage_dir or storage")
            storage = FileStorage(storage_dir)
        self.node_id = node_id
        self.peers = dict(peers)
        self._transport = transport
        self._sm = state_machine
        self._storage = storage
        self._tick_interval = tick_interval
        self._election_tick = election_tick
        self._heartbeat_tick = heartbeat_tick
        self._snapshot_interval = snapshot_interval
        self._pre_vote = pre_vote
        self._rng = rng or random.Random()
        self._max_inbox = max_inbox
        self._node: RaftNode | None = None
        self._wake = trio.Event()
        self._repeats = RepeatedLog(logger)
        self._ticks_due = 0
        self._inbox: deque[Message] = deque()
        self._proposals_in: list[tuple[bytes, _Waiter]] = []
        self._reads_in: list[tuple[bytes, _Waiter]] = []
        self._proposals: dict[int, tuple[int, _Waiter]] = {}
        self._reads: dict[bytes, _Waiter] = {}
        self._reads_applying: list[_Waiter] = []
        self._read_seq = 0
        self._applied = 0
        self._snapshot_index = 0
        self._role_key: tuple[bool, str | None, int] = (False, None, 0)
        self._role_changed = trio.Event()
        self._started = trio.Event()

    # --- status --------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._node is not None and self._node.is_leader

    @property
    def leader_id(self) -> str | None:
        return self._node.leader_id if self._node is not None else None

    @property
    def leader_address(self) -> str | None:
        lead = self.leader_id
        return self.peers.get(lead) if lead is not None else None

    @property
    def term(self) -> int:
        return self._node.term if self._node is not None else 0

    @property
    def applied_index(self) -> int:
        return self._applied

    @property
    def commit_index(self) -> int:
        return self._node.committed if self._node is not None else 0

    async def wait_started(self) -> None:
        """Return once storage was loaded and the state machine restored."""
        await self._started.wait()

    async def wait_role_change(self) -> None:
        """Return at the next change of (is_leader, leader_id, term)."""
        await self._role_changed.wait()

    # --- API for the controller ----------------------------------------------------------

    async def propose(self, data: bytes, timeout: float = 5.0) -> Any:
        """Replicate ``data`` and return ``StateMachine.apply``'s result for it."""
        self._require_leader()
        waiter = _Waiter()
        self._proposals_in.append((bytes(data), waiter))
        self._wake.set()
        return await waiter.wait(timeout, "proposal")

    async def linearizable_read(self, timeout: float = 5.0) -> None:
        """Return once reading the local state machine is linearizable (leader only)."""
        self._require_leader()
        waiter = _Waiter()
        self._read_seq += 1
        self._reads_in.append((self._read_seq.to_bytes(8, "big"), waiter))
        self._wake.set()
        await waiter.wait(timeout, "linearizable read")

    def receive(self, msg_bytes: bytes) -> None:
        """Hand over one encoded message from a peer (called by the transport; never blocks).
        Malformed messages are logged and dropped; so is everything past ``max_inbox``."""
        if len(self._inbox) >= self._max_inbox:
            logger.debug("%s: inbox full, dropping a message", self.node_id)
            return
        try:
            msg = decode_message(msg_bytes)
        except msgspec.MsgspecError as exc:
            logger.warning("%s: dropping malformed raft message: %s", self.node_id, exc)
            return
        self._inbox.append(msg)
        self._wake.set()

    # --- the loop ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load state, then drive the node until cancelled."""
        state = await self._blocking(self._storage.load)
        node = RaftNode(
            self.node_id,
            list(self.peers),
            election_tick=self._election_tick,
            heartbeat_tick=self._heartbeat_tick,
            rng=self._rng,
            pre_vote=self._pre_vote,
            storage_state=state,
        )
        if state.snapshot.meta.index:
            self._sm.restore(state.snapshot.data)
        self._applied = self._snapshot_index = state.snapshot.meta.index
        self._node = node
        logger.info(
            "%s: raft started at term %d, log %d..%d, commit %d",
            self.node_id,
            node.term,
            node.log.first_index,
            node.log.last_index,
            node.committed,
        )
        if not node.others:
            # a group of one has nobody to wait for or to clash with: it leads at once instead of
            # after an election timeout (half a second of the dev cluster's start-up)
            node.campaign()
            self._wake.set()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ticker)
                self._started.set()
                task_status.started()
                await self._loop(node)
        finally:
            self._fail_all(RaftError("raft driver stopped"))
            self._storage.close()

    async def _ticker(self) -> None:
        deadline = trio.current_time()
        while True:
            node = self._node
            if node is not None and node.is_leader and not node.others:
                # the leader of a group of one has nobody to heartbeat or to hear from, and stays
                # leader: its ticks would only wake the loop (the dev cluster's controller, 40 times
                # a second)
                await trio.sleep(SOLO_LEADER_CHECK_INTERVAL)
                deadline = trio.current_time()
                continue
            deadline += self._tick_interval
            await trio.sleep_until(deadline)
            self._ticks_due += 1
            self._wake.set()

    async def _loop(self, node: RaftNode) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            ticks, self._ticks_due = self._ticks_due, 0
            for _ in range(ticks):
                node.tick()
            inbox = self._inbox
            while inbox:
                node.step(inbox.popleft())
            if self._proposals_in:
                self._start_proposals(node)
            if self._reads_in:
                self._start_reads(node)
            while (rd := node.ready()) is not None:
                await self._handle_ready(node, rd)
            self._check_role(node)
            if self._applied - self._snapshot_index >= self._snapshot_interval:
                await self._compact(node)

    def _start_proposals(self, node: RaftNode) -> None:
        batch, self._proposals_in = self._proposals_in, []
        if not node.is_leader:
            error = self._not_leader(node)
            for _, waiter in batch:
                waiter.fail(error)
            return
        results = node.propose_batch([data for data, _ in batch])
        for (_, waiter), res in zip(batch, results, strict=True):
            waiter.index = res.index
            self._proposals[res.index] = (res.term, waiter)

    def _start_reads(self, node: RaftNode) -> None:
        batch, self._reads_in = self._reads_in, []
        if not node.is_leader:
            error = self._not_leader(node)
            for _, waiter in batch:
                waiter.fail(error)
            return
        for ctx, waiter in batch:
            self._reads[ctx] = waiter
            node.read_index(ctx)

    async def _handle_ready(self, node: RaftNode, rd: Ready) -> None:
        if rd.snapshot is not None or rd.entries or rd.hard_state is not None:
            await self._save(rd)
        for m in rd.messages:
            await self._transport.send(m.to, encode_message(m))
        if rd.snapshot is not None:
            self._sm.restore(rd.snapshot.data)
            self._applied = self._snapshot_index = rd.snapshot.meta.index
            for index in [i for i in self._proposals if i <= self._applied]:
                self._proposals.pop(index)[1].fail(LeadershipLostError("replaced by a snapshot"))
        for entry in rd.committed_entries:
            result = self._sm.apply(entry.index, entry.data) if entry.data else None
            self._applied = entry.index
            pending = self._proposals.pop(entry.index, None)
            if pending is not None:
                term, waiter = pending
                if term == entry.term:
                    waiter.resolve(result)
                else:
                    waiter.fail(ProposalDroppedError(f"log index {entry.index} taken by term {entry.term}"))
        for rs in rd.read_states:
            waiter = self._reads.pop(rs.context, None)
            if waiter is not None:
                waiter.index = rs.index
                self._reads_applying.append(waiter)
        if self._reads_applying:
            still = []
            for waiter in self._reads_applying:
                if waiter.index <= self._applied:
                    waiter.resolve(None)
                else:
                    still.append(waiter)
            self._reads_applying = still
        node.advance(rd)

    def _check_role(self, node: RaftNode) -> None:
        key = (node.is_leader, node.leader_id, node.term)
        if key == self._role_key:
            return
        was_leader_term = self._role_key[2] if self._role_key[0] else None
        self._role_key = key
        if was_leader_term is not None and not (node.is_leader and node.term == was_leader_term):
            error = LeadershipLostError(f"{self.node_id} lost leadership of term {was_leader_term}")
            for _, waiter in self._proposals.values():
                waiter.fail(error)
            self._proposals.clear()
            for waiter in self._reads.values():
                waiter.fail(error)
            self._reads.clear()
        self._role_changed.set()
        self._role_changed = trio.Event()

    async def _compact(self, node: RaftNode) -> None:
        index = self._applied
        term = node.log.term(index)
        if term is None:
            return
        data = self._sm.snapshot()
        snapshot = Snapshot(SnapshotMeta(index, term), data)
        await self._blocking(self._storage.compact, snapshot)
        node.compact(index, data)
        self._snapshot_index = index
        logger.info("%s: compacted raft log up to %d", self.node_id, index)

    # --- helpers -------------------------------------------------------------------------

    def _require_leader(self) -> None:
        node = self._node
        if node is None:
            raise NotLeaderError(None)
        if not node.is_leader:
            raise self._not_leader(node)

    def _not_leader(self, node: RaftNode) -> NotLeaderError:
        lead = node.leader_id
        return NotLeaderError(lead, self.peers.get(lead) if lead is not None else None)

    def _fail_all(self, error: RaftError) -> None:
        for _, waiter in self._proposals_in:
            waiter.fail(error)
        for _, waiter in self._reads_in:
            waiter.fail(error)
        for _, waiter in self._proposals.values():
            waiter.fail(error)
        for waiter in [*self._reads.values(), *self._reads_applying]:
            waiter.fail(error)
        self._proposals_in.clear()
        self._reads_in.clear()
        self._proposals.clear()
        self._reads.clear()
        self._reads_applying.clear()

    async def _save(self, rd: Ready) -> None:
        """Make ``rd``'s state and entries durable before anything is sent or applied. While the
        disk refuses (full), try again every :data:`SAVE_RETRY_S`: this peer stands still meanwhile
        -- a leader stops heartbeating and the others elect one that can write -- and says so
        once, with a reminder every 30 s."""
        while True:
            try:
                await self._blocking(self._storage.save, rd.hard_state, rd.entries, rd.snapshot)
            except OSError as exc:
                self._repeats.log(
                    "save",
                    logging.ERROR,
                    f"{self.node_id}: cannot write the raft log: {exc}; this peer waits (retrying every "
                    f"{SAVE_RETRY_S:g} s) and takes part again once it can",
                )
                await trio.sleep(SAVE_RETRY_S)
                continue
            self._repeats.resolved("save", f"{self.node_id}: the raft log is written again")
            return

    async def _blocking(self, fn: Any, *args: Any) -> Any:
        if self._storage.blocking:
            return await trio.to_thread.run_sync(fn, *args)
        return fn(*args)
