"""ControllerManager's batched write path: a round of queued requests computed against the
speculative state and committed as one Raft entry answers exactly what one-at-a-time processing
in arrival order answers, and ends in the same state.

The random-sequence check is seeded; a failure names the seed and the replay command.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from controller.events import decode_events
from controller.raft.errors import LeadershipLostError, RaftTimeoutError
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
    assert batched.manager.rounds == chunks, "every chunk was one round"
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


class GatedRaft:
    """Wraps the fake Raft: proposals wait until ``gate`` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = trio.Event()
        self.proposing = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def propose(self, data: bytes, timeout: float) -> Any:
        self.proposing.set()
        await self.gate.wait()
        return await self.inner.propose(data, timeout)


async def test_answers_from_committed_state_go_out_before_the_entry_commits() -> None:
    env = make_env()
    gated = GatedRaft(env.raft)
    env.manager.raft = gated  # type: ignore[assignment]
    answers: dict[int, RemotingCommand] = {}

    async def call(i: int, req: Req) -> None:
        answers[i] = await env.manager.handle(Ctx(1), request(*req))

    chunk = [_replica_info("broker-a"), _apply("broker-a", 1), _apply("broker-a", 2)]
    async with trio.open_nursery() as nursery:
        for i, req in enumerate(chunk):
            nursery.start_soon(call, i, req)
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(env.manager.run)
        await gated.proposing.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert list(answers) == [0], "the read of committed state is answered; the writes wait"
        assert answers[0].code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
        gated.gate.set()
        while len(answers) < 3:
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert [answers[i].code for i in (1, 2)] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]
    (entry,) = env.raft.proposals
    assert [e.newBrokerId for e in decode_events(entry)] == [1, 2], "one entry, both requests' events"


async def test_requests_arriving_during_a_commit_form_the_next_round() -> None:
    env = make_env()
    gated = GatedRaft(env.raft)
    env.manager.raft = gated  # type: ignore[assignment]
    done: list[int] = []

    async def call(req: Req) -> None:
        r = await env.manager.handle(Ctx(1), request(*req))
        assert r.code == ResponseCode.SUCCESS, r.remark
        done.append(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.manager.run)
        nursery.start_soon(call, _apply("broker-a", 1))
        await gated.proposing.wait()
        for bid in (2, 3, 4):
            nursery.start_soon(call, _apply("broker-a", bid))
        await trio.testing.wait_all_tasks_blocked()
        gated.gate.set()
        while len(done) < 4:
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert [len(decode_events(p)) for p in env.raft.proposals] == [1, 3]
    assert env.manager.rounds == 2


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
