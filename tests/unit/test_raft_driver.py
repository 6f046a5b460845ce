"""The trio Raft driver: in-process clusters over the in-memory transport.

Most tests run under pytest-trio's ``autojump_clock`` (``MockClock(autojump_threshold=0)``)
with in-memory storage (no threads, so virtual time is exact); the restart/compaction tests use real files and the real clock.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from controller.raft.driver import RaftDriver
from controller.raft.errors import LeadershipLostError, NotLeaderError, RaftTimeoutError
from controller.raft.storage import MemoryStorage
from controller.raft.transport import MemoryNetwork

PEERS = {f"n{i}": f"127.0.0.1:{9878 + i}" for i in range(3)}


class ListMachine:
    """State machine keeping the applied payloads; ``apply`` answers with the new length."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.restored = 0

    def apply(self, index: int, data: bytes) -> int:
        self.items.append(data)
        return len(self.items)

    def snapshot(self) -> bytes:
        return b"\n".join(self.items)

    def restore(self, data: bytes) -> None:
        self.items = data.split(b"\n") if data else []
        self.restored += 1


class Harness:
    def __init__(self, nursery: trio.Nursery, net: MemoryNetwork, root: Path | None, **kw: object) -> None:
        self.nursery = nursery
        self.net = net
        self.root = root
        self.kw = kw
        self.drivers: dict[str, RaftDriver] = {}
        self.machines: dict[str, ListMachine] = {}
        self.scopes: dict[str, trio.CancelScope] = {}
        self.mem = {p: MemoryStorage() for p in PEERS}

    async def start(self, nid: str) -> RaftDriver:
        sm = ListMachine()
        storage = None if self.root is not None else self.mem[nid]
        driver = RaftDriver(
            nid,
            PEERS,
            self.root / nid if self.root is not None else None,
            self.net.transport(nid),
            sm,
            storage=storage,
            rng=random.Random(nid),
            **self.kw,  # type: ignore[arg-type]
        )
        scope = trio.CancelScope()

        async def runner(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await driver.run(task_status=task_status)

        self.net.attach(nid, driver.receive)
        await self.nursery.start(runner)
        self.drivers[nid], self.machines[nid], self.scopes[nid] = driver, sm, scope
        return driver

    def crash(self, nid: str) -> None:
        self.net.detach(nid)
        self.scopes[nid].cancel()

    async def leader(self, timeout: float = 10.0, exclude: str | None = None) -> RaftDriver:
        with trio.fail_after(timeout):
            while True:
                for nid, d in self.drivers.items():
                    if d.is_leader and nid != exclude and not self.scopes[nid].cancel_called:
                        return d
                await trio.sleep(0.05)


@asynccontextmanager
async def cluster(root: Path | None = None, **kw: object) -> AsyncIterator[Harness]:
    kw.setdefault("tick_interval", 0.05)
    net = MemoryNetwork(rng=random.Random(7), max_delay=0.002)
    async with trio.open_nursery() as nursery:
        await nursery.start(net.run)
        h = Harness(nursery, net, root, **kw)
        for nid in PEERS:
            await h.start(nid)
        yield h
        nursery.cancel_scope.cancel()


async def test_proposal_returns_apply_result_and_replicates(autojump_clock):
    async with cluster() as h:
        leader = await h.leader()
        results = [await leader.propose(b"v%d" % i) for i in range(5)]
        assert results == [1, 2, 3, 4, 5]
        await leader.linearizable_read()
        with trio.fail_after(2):
            while any(len(sm.items) < 5 for sm in h.machines.values()):
                await trio.sleep(0.05)
        for sm in h.machines.values():
            assert sm.items == [b"v%d" % i for i in range(5)]


async def test_follower_refuses_with_leader_address(autojump_clock):
    async with cluster() as h:
        leader = await h.leader()
        with trio.fail_after(2):
            while not all(d.leader_id == leader.node_id for d in h.drivers.values()):
                await trio.sleep(0.05)
        follower = next(d for d in h.drivers.values() if not d.is_leader)
        with pytest.raises(NotLeaderError) as info:
            await follower.propose(b"x")
        assert (info.value.leader_id, info.value.leader_addr) == (leader.node_id, PEERS[leader.node_id])
        with pytest.raises(NotLeaderError):
            await follower.linearizable_read()
        assert follower.leader_address == PEERS[leader.node_id]


async def test_isolated_leader_stops_serving_and_majority_elects_new_one(autojump_clock):
    async with cluster() as h:
        old = await h.leader()
        await old.propose(b"before")
        h.net.isolate(old.node_id)
        with pytest.raises((LeadershipLostError, RaftTimeoutError)):
            await old.propose(b"lost?", timeout=3)
        with pytest.raises((LeadershipLostError, RaftTimeoutError, NotLeaderError)):
            await old.linearizable_read(timeout=3)
        new = await h.leader(exclude=old.node_id)
        assert new.term > 1
        assert await new.propose(b"after") >= 2
        # The old leader stepped down on its own (check-quorum): it stops answering as leader.
        with trio.fail_after(5):
            while old.is_leader:
                await trio.sleep(0.05)
        h.net.heal()
        with trio.fail_after(5):
            while old.leader_id != new.node_id:
                await trio.sleep(0.05)
        assert h.machines[old.node_id].items[0] == b"before"


async def test_leader_crash_fails_over_and_waiters_see_role_change(autojump_clock):
    async with cluster() as h:
        old = await h.leader()
        await old.propose(b"a")
        watcher = next(d for d in h.drivers.values() if d is not old)
        changed = trio.Event()

        async def watch() -> None:
            await watcher.wait_role_change()
            changed.set()

        h.nursery.start_soon(watch)
        await trio.lowlevel.checkpoint()
        h.crash(old.node_id)
        new = await h.leader(exclude=old.node_id)
        assert changed.is_set()
        assert await new.propose(b"b") == 2


async def test_restart_from_files_restores_state_and_term(tmp_path):
    async with cluster(tmp_path, tick_interval=0.02) as h:
        leader = await h.leader()
        for i in range(10):
            await leader.propose(b"p%d" % i)
        term = leader.term
        for nid in PEERS:
            h.crash(nid)
    async with cluster(tmp_path, tick_interval=0.02) as h:
        leader = await h.leader()
        assert leader.term > term
        await leader.linearizable_read()
        assert h.machines[leader.node_id].items == [b"p%d" % i for i in range(10)]


async def test_compaction_snapshot_restores_after_restart_and_catches_up_laggard(tmp_path):
    async with cluster(tmp_path, tick_interval=0.02, snapshot_interval=8) as h:
        leader = await h.leader()
        lagger = next(nid for nid in PEERS if nid != leader.node_id)
        h.crash(lagger)
        for i in range(30):
            await leader.propose(b"p%d" % i)
        assert (tmp_path / leader.node_id / "snapshot").exists()
        # The laggard's next entry was compacted away: it must catch up from a snapshot.
        await h.start(lagger)
        with trio.fail_after(10):
            while len(h.machines[lagger].items) < 30:
                await trio.sleep(0.02)
        assert h.machines[lagger].restored == 1
        assert h.machines[lagger].items == [b"p%d" % i for i in range(30)]
        for nid in PEERS:
            h.crash(nid)
    async with cluster(tmp_path, tick_interval=0.02, snapshot_interval=8) as h:
        leader = await h.leader()
        await leader.linearizable_read()
        sm = h.machines[leader.node_id]
        assert sm.restored == 1
        assert sm.items == [b"p%d" % i for i in range(30)]


async def test_a_group_of_one_leads_at_once_and_again_after_a_restart(tmp_path):
    # nobody to wait for: no election timeout (an hour of ticks here) before it leads and commits
    async def one_peer() -> tuple[int, list[bytes]]:
        net = MemoryNetwork(rng=random.Random(1), max_delay=0.0)
        sm = ListMachine()
        driver = RaftDriver(
            "n0", {"n0": PEERS["n0"]}, tmp_path / "n0", net.transport("n0"), sm, tick_interval=3600.0
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(net.run)
            net.attach("n0", driver.receive)
            await nursery.start(driver.run)
            with trio.fail_after(10):
                await driver.propose(b"x")
            assert driver.is_leader
            nursery.cancel_scope.cancel()
        return driver.term, sm.items

    term1, items1 = await one_peer()
    term2, items2 = await one_peer()
    assert (items1, items2) == ([b"x"], [b"x", b"x"])  # the second run applied the first's entry too
    assert term2 > term1


async def test_the_leader_of_a_group_of_one_stops_ticking_and_still_serves(autojump_clock):
    net = MemoryNetwork(rng=random.Random(1), max_delay=0.0)
    sm = ListMachine()
    driver = RaftDriver(
        "n0", {"n0": PEERS["n0"]}, None, net.transport("n0"), sm, storage=MemoryStorage(), tick_interval=0.01
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(net.run)
        net.attach("n0", driver.receive)
        await nursery.start(driver.run)
        assert await driver.propose(b"a") == 1
        node = driver._node
        assert node is not None
        ticks = node._ticks
        await trio.sleep(60)  # 6,000 tick intervals: nothing to heartbeat, nobody to hear from
        assert node._ticks == ticks
        assert driver.is_leader
        assert await driver.propose(b"b") == 2
        await driver.linearizable_read()
        assert sm.items == [b"a", b"b"]
        nursery.cancel_scope.cancel()
