"""ControllerManager's batched write path (controller/request_queue.py): a round of queued requests
computed against the speculative state and committed as one Raft entry answers exactly what
one-at-a-time processing in arrival order answers, and ends in the same state.

Two seeded random checks: chunks of requests queued before the queue task runs (each chunk one
round), and requests arriving one by one while entries commit at random moments (rounds formed
by whatever queued up during a commit). A failure names the seed and the replay command.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from controller.events import decode_events
from controller.raft.errors import LeadershipLostError, NotLeaderError, RaftTimeoutError
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.protocol.controller import SyncStateSet
from tests.unit.test_controller_manager import C, Ctx, Env, addr

NAMES = ("broker-a", "broker-b")
IDS = (1, 2, 3, 4)
SEEDS = 150
STEPS = 60

Req = tuple[int, dict[str, object] | None, bytes | None]


# --- a random request sequence, biased towards requests that pass validation ------------------------


def _alive_ids(env: Env, name: str) -> list[int]:
    return [b for b in IDS if env.manager.is_alive(C, name, b)]


def random_request(rng: random.Random, env: Env) -> Req:
    """One request; ``env`` (the one-at-a-time reference, at this point of the sequence) is only
    looked at to make valid requests likely, so that successes and rejections both occur."""
    name = rng.choice(NAMES)
    replicas = env.manager.replicas
    info = replicas.sync_state_info(name)
    known = replicas.replica_info(name)
    kind = rng.choices(
        ["next", "apply", "register", "elect", "alter", "clean", "replica", "sync"],
        weights=[1, 4, 3, 3, 8, 1, 1, 1],
    )[0]
    bid = rng.choice(IDS)
    if kind == "next":
        return RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": name}, None
    if kind == "apply":
        if known is not None and rng.random() < 0.5:
            bid = known.nextAssignBrokerId if rng.random() < 0.7 else bid
        check = f"{addr(bid)};{rng.choice((1, 2))}"
        ext = {"clusterName": C, "brokerName": name, "appliedBrokerId": bid, "registerCheckCode": check}
        return RequestCode.CONTROLLER_APPLY_BROKER_ID, ext, None
    if kind == "register":
        address = addr(bid) if rng.random() < 0.7 else f"10.0.0.{bid}:10911"
        ext = {
            "clusterName": C,
            "brokerName": name,
            "brokerId": bid,
            "brokerAddress": address,
            "invokeTime": 1,
        }
        return RequestCode.CONTROLLER_REGISTER_BROKER, ext, None
    if kind == "elect":
        target = rng.choice((-1, *IDS))
        ext = {"clusterName": C if target != -1 else "", "brokerName": name, "brokerId": target}
        if target != -1 and rng.random() < 0.3:
            ext["designateElect"] = True
        return RequestCode.CONTROLLER_ELECT_MASTER, ext, None
    if kind == "alter":
        master, epoch, set_epoch = bid, rng.randint(0, 4), rng.randint(0, 6)
        members = {b for b in IDS if rng.random() < 0.4}
        if info is not None and rng.random() < 0.75:
            master, epoch, set_epoch = info.masterBrokerId or 1, info.masterEpoch, info.syncStateSetEpoch
            alive = _alive_ids(env, name)
            members = {master} | {b for b in alive if rng.random() < 0.5}
        ext = {"brokerName": name, "masterBrokerId": master, "masterEpoch": epoch, "invokeTime": 1}
        body = SyncStateSet(syncStateSet=frozenset(members), syncStateSetEpoch=set_epoch).encode()
        return RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body
    if kind == "clean":
        ext = {"clusterName": C, "brokerName": name, "isCleanLivingBroker": rng.random() < 0.5}
        if rng.random() < 0.7:
            ext["brokerControllerIdsToClean"] = ";".join(str(b) for b in IDS if rng.random() < 0.4)
        return RequestCode.CLEAN_BROKER_DATA, ext, None
    if kind == "replica":
        return RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": name}, None
    return RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, b'["broker-a","broker-b"]'


def beat_all(env: Env, rng: random.Random) -> None:
    """The same liveness in every env of a seed: some brokers alive, with random epochs/offsets."""
    for name in NAMES:
        for bid in IDS:
            if rng.random() < 0.75:
                env.manager.heartbeats.on_heartbeat(
                    clusterName=C,
                    brokerName=name,
                    brokerAddr=addr(bid),
                    brokerId=bid,
                    now_ms=env.now,
                    heartbeatTimeoutMillis=10_000,
                    epoch=rng.choice((-1, -1, 0, 1, 2)),
                    maxOffset=rng.randint(0, 1000),
                    electionPriority=rng.randint(0, 3),
                )


def outcome(r: RemotingCommand) -> tuple[Any, ...]:
    return (r.code, r.remark, r.ext_fields, r.body_bytes if r.body else None)


def notifications(env: Env) -> list[tuple[str, Any, bytes]]:
    return sorted((a, sorted((c.ext_fields or {}).items()), c.body_bytes) for a, c in env.sent)


# --- the batched side: a chunk of requests queued in a known order, then one round ----------------------


async def run_chunk(env: Env, chunk: list[Req]) -> list[RemotingCommand]:
    """Queue every request of ``chunk`` (in order) before the manager's queue task runs, then let it
    run until all are answered: the chunk is one round."""
    answers: list[RemotingCommand | None] = [None] * len(chunk)

    async def call(i: int, req: Req) -> None:
        answers[i] = await env.manager.handle(Ctx(1), request(*req))

    async with trio.open_nursery() as requests:
        for i, req in enumerate(chunk):
            requests.start_soon(call, i, req)
            await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as queue:
            queue.start_soon(env.manager.run)
            while any(a is None for a in answers):
                await trio.testing.wait_all_tasks_blocked()
            queue.cancel_scope.cancel()
    return [a for a in answers if a is not None]


def make_env() -> Env:
    env = Env()
    env.raft.term = 1  # type: ignore[attr-defined]  # writes skip the barrier within a term
    return env


async def check_seed(seed: int) -> None:
    rng = random.Random(seed)
    sequential, batched = make_env(), make_env()
    liveness = rng.getstate()
    beat_all(sequential, rng)
    rng.setstate(liveness)
    beat_all(batched, rng)
    expected: list[tuple[Any, ...]] = []
    requests: list[Req] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sequential.manager.run)
        for _ in range(STEPS):
            req = random_request(rng, sequential)
            requests.append(req)
            expected.append(outcome(await sequential.manager.handle(Ctx(1), request(*req))))
        nursery.cancel_scope.cancel()
    got: list[tuple[Any, ...]] = []
    chunks = 0
    pos = 0
    while pos < len(requests):
        size = rng.randint(1, 12)
        got += [outcome(r) for r in await run_chunk(batched, requests[pos : pos + size])]
        pos += size
        chunks += 1
    replay = f"replay: pytest 'tests/unit/test_controller_manager_batching.py::test_batched_equals_one_at_a_time[{seed}]'"
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, f"seed {seed}, request {i} {requests[i][:2]}: {have} != {want}; {replay}"
    assert batched.manager.replicas.snapshot() == sequential.manager.replicas.snapshot(), replay
    assert notifications(batched) == notifications(sequential), replay
    assert batched.manager.queue.rounds == chunks, "every chunk was one round"
    assert len(batched.raft.proposals) <= chunks
    batched_events = [e for p in batched.raft.proposals for e in decode_events(p)]
    sequential_events = [e for p in sequential.raft.proposals for e in decode_events(p)]
    assert batched_events == sequential_events, f"the same events in the same order; {replay}"


@pytest.mark.parametrize("seed", range(SEEDS))
async def test_batched_equals_one_at_a_time(seed: int) -> None:
    await check_seed(seed)


async def test_random_sequences_do_batch_several_writes_per_entry() -> None:
    """The check above is not vacuous: over the seeds many entries hold events of several requests
    and many requests succeed or are rejected against an uncommitted state."""
    rng = random.Random(7)
    env = make_env()
    beat_all(env, rng)
    ref = make_env()
    rng2 = random.Random(7)
    beat_all(ref, rng2)
    requests: list[Req] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ref.manager.run)
        for _ in range(STEPS):
            req = random_request(rng2, ref)
            requests.append(req)
            await ref.manager.handle(Ctx(1), request(*req))
        nursery.cancel_scope.cancel()
    for pos in range(0, len(requests), 12):
        await run_chunk(env, requests[pos : pos + 12])
    assert max(len(decode_events(p)) for p in env.raft.proposals) >= 2


# --- failures: what every request of a round gets -------------------------------------------------------


def _apply(name: str, bid: int, check: str = "x;1") -> Req:
    ext = {"clusterName": C, "brokerName": name, "appliedBrokerId": bid, "registerCheckCode": check}
    return RequestCode.CONTROLLER_APPLY_BROKER_ID, ext, None


def _replica_info(name: str) -> Req:
    return RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": name}, None


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (LeadershipLostError("n0 lost leadership of term 1"), ResponseCode.CONTROLLER_NOT_LEADER),
        (RaftTimeoutError("proposal timed out"), ResponseCode.SYSTEM_ERROR),
    ],
)
async def test_failed_proposal_fails_every_request_that_depended_on_it(
    error: BaseException, code: int
) -> None:
    env = make_env()
    env.raft.fail_propose = error
    chunk = [
        _apply("broker-a", 5),  # rejected against committed state: answered at once
        _apply("broker-a", 1),  # an event
        _apply("broker-a", 3),  # rejected, but against the state after the event above
        _replica_info("broker-a"),  # a read of the uncommitted set
    ]
    answers = await run_chunk(env, chunk)
    assert answers[0].code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert [a.code for a in answers[1:]] == [code, code, code]
    assert env.manager.replicas.broker_names() == [], "nothing applied"
    # and the next round starts with a barrier again (the outcome of the proposal is unknown)
    env.raft.fail_propose = None
    reads = env.raft.reads
    (answer,) = await run_chunk(env, [_apply("broker-a", 1)])
    assert answer.code == ResponseCode.SUCCESS
    assert env.raft.reads == reads + 1


class SlowRaft:
    """A fake Raft leader whose entries stay in flight until the test commits them: ``propose``
    appends to the log at once and returns when the entry is committed (in log order, applied to
    the state machine as it commits); the test can also fail every entry in flight, as a lost
    leadership does, or commit an entry whose proposer has already timed out."""

    def __init__(self, sm: Any) -> None:
        self.sm = sm
        self.is_leader = True
        self.leader_id: str | None = "n0"
        self.leader_address: str | None = "127.0.0.1:9878"
        self.term = 1
        self.index = 0
        self.proposals: list[bytes] = []  # committed entries
        self.in_flight: list[tuple[bytes, trio.Event, list[Any]]] = []
        self.reads = 0
        self.proposed = trio.Event()

    async def propose(self, data: bytes, timeout: float) -> Any:
        if not self.is_leader:
            raise NotLeaderError(self.leader_id, self.leader_address)
        slot: tuple[bytes, trio.Event, list[Any]] = (data, trio.Event(), [])
        self.in_flight.append(slot)
        self.proposed.set()
        self.proposed = trio.Event()
        await slot[1].wait()
        outcome = slot[2][0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def linearizable_read(self, timeout: float) -> None:
        if not self.is_leader:
            raise NotLeaderError(self.leader_id, self.leader_address)
        self.reads += 1

    def commit(self, n: int = 1, *, timed_out: bool = False) -> None:
        """Commit (and apply) the ``n`` oldest entries in flight; ``timed_out``: their proposers
        got RaftTimeoutError first."""
        for _ in range(min(n, len(self.in_flight))):
            data, done, outcome = self.in_flight.pop(0)
            self.index += 1
            self.proposals.append(data)
            result = self.sm.apply(self.index, data)
            outcome.append(RaftTimeoutError("proposal timed out") if timed_out else result)
            done.set()

    def lose_leadership(self) -> None:
        """Every entry in flight is lost (the new leader's log overwrites it)."""
        self.is_leader = False
        for _, done, outcome in self.in_flight:
            outcome.append(LeadershipLostError(f"n0 lost leadership of term {self.term}"))
            done.set()
        self.in_flight.clear()
        self.term += 1


def slow_env() -> tuple[Env, SlowRaft]:
    env = Env()
    raft = SlowRaft(env.manager.replicas)
    env.manager.raft = raft  # type: ignore[assignment]
    env.raft = raft  # type: ignore[assignment]
    return env, raft


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_answers_from_committed_state_go_out_before_the_entry_commits() -> None:
    env, raft = slow_env()
    answers: dict[int, RemotingCommand] = {}

    async def call(i: int, req: Req) -> None:
        answers[i] = await env.manager.handle(Ctx(1), request(*req))

    chunk = [_replica_info("broker-a"), _apply("broker-a", 1), _apply("broker-a", 2)]
    async with trio.open_nursery() as nursery:
        for i, req in enumerate(chunk):
            nursery.start_soon(call, i, req)
            await settle()
        nursery.start_soon(env.manager.run)
        await settle()
        assert list(answers) == [0], "the read of committed state is answered; the writes wait"
        assert answers[0].code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
        raft.commit()
        await settle()
        nursery.cancel_scope.cancel()
    assert [answers[i].code for i in (1, 2)] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]
    (entry,) = raft.proposals
    assert [e.newBrokerId for e in decode_events(entry)] == [1, 2], "one entry, both requests' events"


async def test_requests_arriving_during_a_commit_form_the_next_round() -> None:
    env, raft = slow_env()
    answers: dict[str, RemotingCommand] = {}

    async def call(key: str, req: Req) -> None:
        answers[key] = await env.manager.handle(Ctx(1), request(*req))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.manager.run)
        nursery.start_soon(call, "a1", _apply("broker-a", 1))
        await settle()
        assert len(raft.in_flight) == 1
        nursery.start_soon(call, "a2", _apply("broker-a", 2))
        await settle()
        nursery.start_soon(
            call, "next", (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"brokerName": "broker-a"}, None)
        )
        await settle()
        # rejected against the speculation: id 1 is taken (by another check code)
        nursery.start_soon(call, "taken", _apply("broker-a", 1, check="y;2"))
        await settle()
        nursery.start_soon(call, "a3", _apply("broker-a", 3))
        await settle()
        assert len(raft.in_flight) == 1, "the next round waits for the entry in flight"
        assert answers == {}
        raft.commit()
        await settle()
        assert set(answers) == {"a1"}
        assert len(raft.in_flight) == 1
        raft.commit()
        await settle()
        nursery.cancel_scope.cancel()
    assert answers["a2"].code == ResponseCode.SUCCESS
    assert answers["next"].ext_fields["nextBrokerId"] == "3"
    assert answers["taken"].code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    assert answers["a3"].code == ResponseCode.SUCCESS
    assert [len(decode_events(p)) for p in raft.proposals] == [1, 2]
    assert env.manager.replicas.replica_info("broker-a").all_brokers() == {1, 2, 3}
    assert env.manager.queue.rounds == 2


async def test_lost_leadership_fails_the_round_in_flight_and_the_queued_requests() -> None:
    env, raft = slow_env()
    answers: dict[str, RemotingCommand] = {}

    async def call(key: str, req: Req) -> None:
        answers[key] = await env.manager.handle(Ctx(1), request(*req))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.manager.run)
        nursery.start_soon(call, "b1", _apply("broker-b", 1))
        await settle()
        nursery.start_soon(call, "a1", _apply("broker-a", 1))
        await settle()
        raft.lose_leadership()
        await settle()
        assert {k: r.code for k, r in answers.items()} == dict.fromkeys(
            ("b1", "a1"), ResponseCode.CONTROLLER_NOT_LEADER
        )
        assert env.manager.replicas.broker_names() == []
        # leader again in a later term: catch up first, then the committed state is the base
        raft.is_leader = True
        reads = raft.reads
        nursery.start_soon(call, "again", _apply("broker-a", 2))
        await settle()
        assert raft.reads == reads + 1
        nursery.cancel_scope.cancel()
    assert answers["again"].code == ResponseCode.CONTROLLER_BROKER_ID_INVALID, "broker-a is unknown"


async def test_an_entry_committed_after_its_proposer_timed_out() -> None:
    """The proposal times out (outcome unknown) but the entry commits: its requests answered
    SYSTEM_ERROR, and the next round catches up before computing, so it sees the entry."""
    env, raft = slow_env()
    answers: dict[str, RemotingCommand] = {}

    async def call(key: str, req: Req) -> None:
        answers[key] = await env.manager.handle(Ctx(1), request(*req))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.manager.run)
        nursery.start_soon(call, "a1", _apply("broker-a", 1))
        await settle()
        nursery.start_soon(call, "a1-again", _apply("broker-a", 1, check="y;2"))
        await settle()
        reads = raft.reads
        raft.commit(timed_out=True)
        await settle()
        assert raft.reads == reads + 1
        nursery.cancel_scope.cancel()
    assert answers["a1"].code == ResponseCode.SYSTEM_ERROR
    assert "timed out" in answers["a1"].remark
    assert answers["a1-again"].code == ResponseCode.CONTROLLER_BROKER_ID_INVALID, "computed after the entry"


async def check_random_arrivals_seed(seed: int) -> tuple[int, int, int]:
    """Returns (rounds, requests, entries holding several events) of the queued run."""
    rng = random.Random(seed)
    sequential = make_env()
    queued, raft = slow_env()
    liveness = rng.getstate()
    beat_all(sequential, rng)
    rng.setstate(liveness)
    beat_all(queued, rng)
    expected: list[tuple[Any, ...]] = []
    requests: list[Req] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sequential.manager.run)
        for _ in range(STEPS):
            req = random_request(rng, sequential)
            requests.append(req)
            expected.append(outcome(await sequential.manager.handle(Ctx(1), request(*req))))
        nursery.cancel_scope.cancel()
    answers: list[RemotingCommand | None] = [None] * len(requests)

    async def call(i: int, req: Req) -> None:
        answers[i] = await queued.manager.handle(Ctx(1), request(*req))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(queued.manager.run)
        for i, req in enumerate(requests):
            nursery.start_soon(call, i, req)
            await settle()
            if raft.in_flight and rng.random() < 0.2:
                raft.commit(rng.randint(1, len(raft.in_flight)))
                await settle()
        while any(a is None for a in answers):
            raft.commit(len(raft.in_flight))
            await settle()
        nursery.cancel_scope.cancel()
    replay = f"replay: pytest 'tests/unit/test_controller_manager_batching.py::test_random_arrivals_equal_one_at_a_time[{seed}]'"
    for i, (want, have) in enumerate(zip(expected, answers, strict=True)):
        assert have is not None
        assert outcome(have) == want, (
            f"seed {seed}, request {i} {requests[i][:2]}: {outcome(have)} != {want}; {replay}"
        )
    assert queued.manager.replicas.snapshot() == sequential.manager.replicas.snapshot(), replay
    assert notifications(queued) == notifications(sequential), replay
    got_events = [e for p in raft.proposals for e in decode_events(p)]
    assert got_events == [e for p in sequential.raft.proposals for e in decode_events(p)], replay
    queue = queued.manager.queue
    return queue.rounds, queue.requests, sum(len(decode_events(p)) > 1 for p in raft.proposals)


@pytest.mark.parametrize("seed", range(SEEDS))
async def test_random_arrivals_equal_one_at_a_time(seed: int) -> None:
    await check_random_arrivals_seed(seed)


async def test_random_arrivals_do_form_rounds_of_several_requests() -> None:
    """The check above is not vacuous: rounds of several requests and entries of several
    requests' events occur."""
    stats = [await check_random_arrivals_seed(seed) for seed in range(10)]
    rounds, requests, multi = (sum(column) for column in zip(*stats, strict=True))
    assert requests > rounds * 1.3
    assert multi >= 5


async def test_a_request_that_timed_out_before_its_round_is_skipped() -> None:
    env = make_env()
    with trio.move_on_after(0.01):  # no queue task running: the request waits, then gives up
        await env.manager.handle(Ctx(1), request(*_apply("broker-a", 1)))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.manager.run)
        r = await env.manager.handle(Ctx(1), request(*_replica_info("broker-a")))
        nursery.cancel_scope.cancel()
    assert r.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, "the abandoned apply never ran"
    assert env.raft.proposals == []
