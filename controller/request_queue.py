"""The controller leader's request queue (upstream: the ``DLedgerController`` event scheduler, one
thread that computes a request's result and waits for its Raft commit before the next).

Leader-only requests are queued; one task (:meth:`RequestQueue.run`) drains the queue in *rounds*.
A round takes every queued request (up to ``max_batch``), in arrival order, and:

1. passes a read barrier (``linearizable_read``) when it holds a read, or when the state is not
   known to be caught up: at the first round of a leadership term (a write after a term change
   must see everything committed before it) and after a proposal failed (its entry may or may not
   commit). Within a term every entry is this leader's own and is applied before the next round;
2. computes each request's :class:`~controller.replicas.ControllerResult` against the
   *speculative* state: the committed state plus the events of the requests computed before it in
   the round, applied to a :meth:`~controller.replicas.ReplicasInfoManager.fork`. Every result is
   therefore the one one-at-a-time processing in arrival order gives;
3. proposes the events of the whole round as ONE Raft entry (an entry holds a batch of events)
   and answers once it is applied. Requests that arrive meanwhile form the next round.

A request computed before the round's first event (a read, a rejection) depends on committed
state only and is answered at once. If the proposal fails, the requests that depended on it get
what one-at-a-time processing gives them: :class:`NotLeading` (→ CONTROLLER_NOT_LEADER) when
leadership was lost, the Raft error (→ SYSTEM_ERROR) for a timeout.

Rounds are not pipelined (the next round waits for the previous entry): on the benchmark machine
(three peers and the client on two cores) proposing the next round while one is in flight made
rounds smaller and throughput lower.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from controller.events import Event, encode_events
from controller.raft.errors import (
    LeadershipLostError,
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
    RaftTimeoutError,
)
from controller.replicas import ControllerResult, ReplicasInfoManager

log = logging.getLogger("controller")

#: Upstream ``ControllerRequestProcessor.WAIT_TIMEOUT_OUT``: how long a request may take in total.
REQUEST_TIMEOUT = 5.0
#: Most requests one round computes and commits together (upstream's event queue holds 1024).
MAX_BATCH = 1024

#: Computes a request's result from a state (the committed one, or a speculative fork of it).
Compute = Callable[[ReplicasInfoManager], ControllerResult]


class RaftHandle(Protocol):
    """What the controller needs from the Raft driver."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_id(self) -> str | None: ...

    @property
    def leader_address(self) -> str | None: ...

    async def propose(self, data: bytes, timeout: float) -> Any: ...

    async def linearizable_read(self, timeout: float) -> Any: ...


class NotLeading(Exception):
    """The request reached a peer that is not (or stopped being) the leader."""


@dataclass(eq=False)
class _Pending:
    """One queued request."""

    compute: Compute
    write: bool
    done: trio.Event = field(default_factory=trio.Event)
    result: ControllerResult | None = None
    error: BaseException | None = None
    #: the caller stopped waiting (timeout, cancellation): skipped if not computed yet
    abandoned: bool = False

    def resolve(self, result: ControllerResult) -> None:
        if not self.done.is_set():
            self.result = result
            self.done.set()

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


def _fail(requests: list[_Pending], exc: BaseException) -> None:
    """Fail every request that depended on a failed barrier or proposal, each with a fresh exception
    that :meth:`controller.manager.ControllerManager.handle` maps to the answer of one request."""
    if isinstance(exc, (NotLeading, NotLeaderError, LeadershipLostError, ProposalDroppedError)):
        log.info("controller request failed on a non-leader: %s", exc)
        make: Callable[[], BaseException] = lambda: NotLeading(str(exc))  # noqa: E731
    else:
        log.warning("controller requests failed waiting for the raft log: %s", exc)
        if isinstance(exc, RaftTimeoutError):
            make = lambda: RaftTimeoutError(str(exc))  # noqa: E731
        else:
            make = lambda: RaftError(str(exc))  # noqa: E731
    for pending in requests:
        pending.fail(make())


class RequestQueue:
    """See the module docstring. ``raft`` may be replaced before :meth:`run` starts (tests)."""

    def __init__(
        self, raft: RaftHandle, replicas: ReplicasInfoManager, *, max_batch: int = MAX_BATCH
    ) -> None:
        self.raft = raft
        self.replicas = replicas
        self.max_batch = max_batch
        self._queue: list[_Pending] = []
        self._current: list[_Pending] = []
        self._wakeup = trio.Event()
        self._caught_up_term: int | None = None
        #: rounds run and the requests they computed (statistics)
        self.rounds = 0
        self.requests = 0

    async def submit(self, compute: Compute, *, write: bool) -> ControllerResult:
        """Queue one request and wait (≤ :data:`REQUEST_TIMEOUT`) for its result.

        Raises :class:`NotLeading`, a :class:`RaftError` (e.g. ``RaftTimeoutError``),
        ``trio.TooSlowError``, or whatever ``compute`` raised (a bug).
        """
        pending = _Pending(compute, write)
        self._queue.append(pending)
        self._wakeup.set()
        try:
            with trio.fail_after(REQUEST_TIMEOUT):
                await pending.done.wait()
        finally:
            if not pending.done.is_set():
                pending.abandoned = True
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Drain the queue until cancelled; requests still waiting then fail."""
        task_status.started()
        try:
            while True:
                while not self._queue:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                batch = [p for p in self._queue[: self.max_batch] if not p.abandoned]
                del self._queue[: self.max_batch]
                if batch:
                    self._current = batch
                    await self._round(batch)
                    self._current = []
        finally:
            for pending in [*self._current, *self._queue]:
                pending.fail(RaftError("controller stopped"))
            self._queue.clear()

    async def _round(self, batch: list[_Pending]) -> None:
        self.rounds += 1
        self.requests += len(batch)
        term = getattr(self.raft, "term", None)
        try:
            if not self.raft.is_leader:
                raise NotLeading("not the leader")
            if any(not p.write for p in batch) or term is None or term != self._caught_up_term:
                self._caught_up_term = None
                await self.raft.linearizable_read(REQUEST_TIMEOUT)
                self._caught_up_term = term
        except (NotLeading, RaftError) as exc:
            _fail(batch, exc)
            return
        state = self.replicas
        events: list[Event] = []
        held: list[tuple[_Pending, ControllerResult]] = []
        for pending in batch:
            if events and state is self.replicas:
                state = self.replicas.fork()
                for event in events:
                    state.apply_event(event)
            try:
                result = pending.compute(state)
            except Exception as exc:  # a bug: raised again in the request's own task
                pending.fail(exc)
                continue
            if result.events:
                events += result.events
                if state is not self.replicas:
                    for event in result.events:
                        state.apply_event(event)
            if events:
                held.append((pending, result))
            else:
                pending.resolve(result)
        if not events:
            return
        self._caught_up_term = None  # until this proposal is known to be applied
        try:
            await self.raft.propose(encode_events(events), REQUEST_TIMEOUT)
        except RaftError as exc:
            _fail([p for p, _ in held], exc)
            return
        self._caught_up_term = term
        for pending, result in held:
            pending.resolve(result)
