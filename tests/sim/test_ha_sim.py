"""Deterministic simulation of auto-switch replication (handshake, truncation, transfer, SyncStateSet).

Two or three replicas (``MemLog``), a simulated controller, and per-connection in-order byte pipes, all
driven by one seeded ``random.Random`` and a simulated clock. Every step is one randomly drawn action:
a master write, moving a random number of bytes over a pipe, time passing (heartbeats, housekeeping,
SyncStateSet checks, reconnects), a disconnect, a node crash (losing unflushed bytes and unpersisted
epoch-file changes) and restart, a flush, a delayed epoch-file persist, a controller answer to a
SyncStateSet proposal, or a role swap with a new epoch (only a replica holding every confirmed byte may
be promoted).

Invariants after every step:

* confirmed prefixes never change: whatever any replica has ever reported as confirmed (the complete
  messages below its ``confirm_offset``) is the same bytes on every replica that reports it later;
* the controller's master holds every confirmed byte;
* no truncation cuts below the truncating replica's confirm offset, nor cuts confirmed bytes it holds;

and at the end, after healing all faults, every slave converges to the master's log and epoch history.

A failure names its seed; replay one seed with ``HA_SIM_SEED=<seed> .venv/bin/python -m pytest
tests/sim/test_ha_sim.py -q`` (``HA_SIM_SEEDS=<n>`` changes how many seeds run, default 2000).
The crash model keeps at least one copy of confirmed data: a crashing master that nobody can replace
keeps them (as if flushed), since losing every copy is a durability question, not a protocol one.
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from store.config import MessageStoreConfig
from store.ha.client import HAClient
from store.ha.connection import HAConnection
from store.ha.events import CloseConnection, Event, PersistRequired
from store.ha.master import HAMasterState
from store.ha.memlog import MemLog
from store.ha.role import become_master, become_slave
from store.ha.service import HAService

DEFAULT_SEEDS = 2000


class InvariantViolation(AssertionError):
    pass


@dataclass(eq=False)
class Link:
    master: Node
    slave: Node
    conn: HAConnection
    up: bytearray = field(default_factory=bytearray)
    down: bytearray = field(default_factory=bytearray)


@dataclass(eq=False)
class Node:
    id: int
    log: MemLog
    alive: bool = True
    role: str = "slave"
    client: HAClient | None = None
    group: HAMasterState | None = None
    link: Link | None = None
    links: list[Link] = field(default_factory=list)
    retry_at: float = 0.0
    restart_at: float = 0.0


class Sim:
    def __init__(self, seed: int, steps: int | None = None) -> None:
        self.seed = seed
        rng = self.rng = random.Random(seed)
        self.now = 0.0
        self.trace: list[str] = []
        file_size = rng.choice([512, 1024, 4096])
        self.config = MessageStoreConfig(
            haTransferBatchSize=rng.choice([64, 200, 1000, 32 * 1024]),
            haSendHeartbeatInterval=(heartbeat := rng.choice([500, 5000])),
            haHousekeepingInterval=heartbeat * rng.choice([4, 8]),
            haMaxTimeSlaveNotCatchup=rng.choice([2000, 15000]),
            allAckInSyncStateSet=rng.random() < 0.8,
            mappedFileSizeCommitLog=file_size,
        )
        self.file_size = file_size
        self.steps = steps if steps is not None else rng.randint(300, 1000)
        self.nodes = [
            Node(i, MemLog(mapped_file_size=file_size)) for i in range(1, rng.choice([2, 2, 3]) + 1)
        ]
        for node in self.nodes:
            node.log.before_truncate = self._check_truncation
        self.committed = bytearray()
        self.sync_state_set: set[int] = set()
        self.epoch = 0
        self.master_id = 0
        self.next_check = 0.0
        self.msg_counter = 0
        self.elect(self.nodes[0])

    # ------------------------------------------------------------------ helpers

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.now:.2f} {text}")

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    @property
    def master(self) -> Node:
        return self.node(self.master_id)

    def holds_committed(self, node: Node) -> bool:
        n = len(self.committed)
        return node.log.max_offset >= n and node.log.bytes_range(0, n) == self.committed

    # ------------------------------------------------------------------ invariants

    def _check_truncation(self, log: MemLog, offset: int) -> None:
        boundary = log.last_message_boundary_at_or_below(log.confirm_offset)
        if offset < boundary:
            raise InvariantViolation(f"truncation to {offset} below confirm offset {log.confirm_offset}")
        n = len(self.committed)
        if log.max_offset >= n and log.bytes_range(0, n) == self.committed and offset < n:
            raise InvariantViolation(f"truncation to {offset} cuts confirmed bytes (confirmed up to {n})")

    def check(self) -> None:
        for node in self.nodes:
            if not node.alive:
                continue
            log = node.log
            # Only complete messages count: a confirm offset may fall inside a message a slave has half of.
            confirm = log.last_message_boundary_at_or_below(min(log.confirm_offset, log.max_offset))
            if confirm <= 0:
                continue
            have = log.bytes_range(0, confirm)
            n = min(len(self.committed), confirm)
            if have[:n] != self.committed[:n]:
                first = next(i for i in range(n) if have[i] != self.committed[i])
                raise InvariantViolation(f"node {node.id}: confirmed bytes differ at offset {first}")
            if confirm > len(self.committed):
                self.committed += have[len(self.committed) :]
        master = self.master
        if master.alive and master.role == "master" and not self.holds_committed(master):
            raise InvariantViolation(
                f"master {master.id} lacks confirmed bytes (confirmed {len(self.committed)})"
            )

    # ------------------------------------------------------------------ links

    def open_link(self, slave: Node) -> None:
        master = self.master
        assert slave.client is not None
        slave.client.prepare_connect()
        slave.client.connection_made(self.now)
        conn = HAConnection(master.log, self.config, now=self.now, group=master.group)
        link = Link(master, slave, conn)
        slave.link = link
        master.links.append(link)
        self.note(f"connect {slave.id}->{master.id}")

    def close_link(self, link: Link, retry_after: float = 1.0) -> None:
        link.conn.connection_lost()
        if link in link.master.links:
            link.master.links.remove(link)
        slave = link.slave
        if slave.link is link:
            slave.link = None
            if slave.client is not None:
                slave.client.connection_lost()
            slave.retry_at = self.now + retry_after * self.rng.uniform(0.1, 1.0)

    def slave_events(self, node: Node, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, CloseConnection) and node.link is not None:
                self.note(f"slave {node.id} closes: {event.reason}")
                self.close_link(node.link, event.retry_after)
            elif isinstance(event, PersistRequired) and self.rng.random() < 0.5:
                self.persist(node)

    def master_events(self, link: Link, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, CloseConnection):
                self.note(f"master closes link of {link.slave.id}: {event.reason}")
                self.close_link(link)
                return

    def persist(self, node: Node) -> None:
        if node.client is not None and node.client.awaiting_persist:
            node.log.persist_epoch_file()
            self.slave_events(node, node.client.persisted(self.now))

    # ------------------------------------------------------------------ controller

    def eligible(self) -> list[Node]:
        """Who the controller may promote. With ``allAckInSyncStateSet`` the controller's own rule: a
        live SyncStateSet member (so the master check below tests the SyncStateSet and confirm-offset
        logic); without it, any live replica holding every confirmed byte."""
        if self.config.allAckInSyncStateSet:
            return [n for n in self.nodes if n.alive and n.id in self.sync_state_set]
        return [n for n in self.nodes if n.alive and self.holds_committed(n)]

    def elect(self, new: Node) -> None:
        self.epoch += 1
        old = self.master if self.master_id else None
        self.master_id = new.id
        self.sync_state_set = {new.id}
        self.note(f"elect {new.id} epoch {self.epoch}")
        for node in self.nodes:
            for link in list(node.links):
                self.close_link(link)
            if node.link is not None:
                self.close_link(node.link)
        for node in self.nodes:
            if not node.alive:
                continue
            if node is new:
                node.client = None
                become_master(node.log, self.epoch)
                node.log.persist_epoch_file()  # the service persists before accepting writes
                node.role = "master"
                node.group = HAMasterState(node.log, self.config, self_id=node.id, sync_state_set={node.id})
            else:
                if node.role == "master" or node.client is None:
                    node.group = None
                    node.client = HAClient(node.log, self.config, broker_id=node.id, now=self.now)
                node.role = "slave"
                become_slave(node.log, self.epoch)
                node.retry_at = self.now + (self.rng.uniform(0, 2) if node is old else 0.0)

    # ------------------------------------------------------------------ actions

    def act_write(self) -> None:
        master = self.master
        if not (master.alive and master.role == "master"):
            return
        for _ in range(self.rng.randint(1, 4)):
            self.msg_counter += 1
            size = self.rng.randint(8, min(300, self.file_size // 2))
            head = f"{self.epoch}:{master.id}:{self.msg_counter}:".encode()
            payload = (head + self.rng.randbytes(max(0, size - len(head))))[:size]
            master.log.append_message(payload)
        assert master.group is not None
        master.group.refresh_confirm_offset()

    def deliver(self, link: Link, *, up: bool, everything: bool = False) -> bool:
        """Move bytes over one direction of ``link`` (in order); returns whether any moved."""
        conn, client = link.conn, link.slave.client
        assert client is not None
        if up:
            link.up += client.data_to_send()
            buf = link.up
        else:
            for _ in range(1_000_000 if everything else self.rng.randint(1, 6)):
                bufs = conn.poll_send(self.now)
                if conn.closed:
                    self.note(f"master closed link of {link.slave.id}: {conn.close_reason}")
                    self.close_link(link)
                    return True
                if not bufs:
                    break
                link.down += b"".join(bytes(b) for b in bufs)
            buf = link.down
        if not buf:
            return False
        n = len(buf) if everything or self.rng.random() < 0.5 else self.rng.randint(1, len(buf))
        chunk = bytes(buf[:n])
        del buf[:n]
        if up:
            self.master_events(link, conn.receive_data(chunk, self.now))
        else:
            self.slave_events(link.slave, client.receive_data(chunk, self.now))
        return True

    def act_transmit(self) -> None:
        links = [link for m in self.nodes for link in m.links]
        if links:
            self.deliver(self.rng.choice(links), up=self.rng.random() < 0.5)

    def act_time(self, dt: float | None = None) -> None:
        if dt is None:
            dt = (
                self.rng.choice([0.01, 0.05, 0.2, 1.0])
                if self.rng.random() < 0.95
                else self.rng.choice([6.0, 30.0])
            )
        self.now += dt
        for node in self.nodes:
            if not node.alive:
                if self.now >= node.restart_at:
                    self.restart(node)
                continue
            if node.role == "slave" and node.client is not None:
                if node.link is not None:
                    self.slave_events(node, node.client.tick(self.now))
                elif self.now >= node.retry_at and self.master.alive and self.master.role == "master":
                    self.open_link(node)
            elif node.role == "master":
                for link in list(node.links):
                    self.master_events(link, link.conn.tick(self.now))
        master = self.master
        if master.alive and master.group is not None and self.now >= self.next_check:
            self.next_check = self.now + 5.0
            self.propose(master)

    def propose(self, master: Node) -> None:
        assert master.group is not None
        proposal = master.group.propose_sync_state_set(self.now)
        if proposal is not None:
            self.note(f"master {master.id} proposes {sorted(proposal)}")

    def act_controller(self) -> None:
        master = self.master
        if not master.alive or master.group is None:
            return
        if master.group.wants_proposal:
            self.propose(master)
        proposal = master.group.proposal
        if proposal is None:
            return
        if all(self.node(m).alive for m in proposal) and self.rng.random() < 0.8:
            master.group.on_sync_state_set_accepted(proposal, self.epoch)
            self.sync_state_set = set(proposal)
            self.note(f"controller accepts {sorted(proposal)}")
        else:
            master.group.on_sync_state_set_rejected()
            self.note("controller rejects proposal")

    def act_disconnect(self) -> None:
        links = [link for m in self.nodes for link in m.links]
        if links:
            link = self.rng.choice(links)
            self.note(f"disconnect {link.slave.id}")
            self.close_link(link)

    def act_flush(self) -> None:
        node = self.rng.choice(self.nodes)
        if node.alive:
            node.log.flush(self.rng.randint(node.log.flushed_offset, node.log.max_offset))

    def act_persist(self) -> None:
        for node in self.nodes:
            if node.alive:
                self.persist(node)

    def act_crash(self) -> None:
        node = self.rng.choice(self.nodes)
        if not node.alive:
            return
        if node.id == self.master_id and not [n for n in self.eligible() if n is not node]:
            # Nobody can take over: this replica's copy of the confirmed data must survive.
            node.log.flush(len(self.committed))
        self.note(f"crash {node.id} (flushed {node.log.flushed_offset} of {node.log.max_offset})")
        for link in list(node.links):
            self.close_link(link)
        if node.link is not None:
            self.close_link(node.link)
        node.log.crash()
        node.alive = False
        node.client = None
        node.group = None
        node.restart_at = self.now + self.rng.uniform(0.5, 10.0)
        if node.id != self.master_id and node.id in self.sync_state_set:
            # A replica that lost data is no longer in sync: the controller drops it (a fencing
            # assumption of this model; upstream relies on the master's shrink).
            self.sync_state_set.discard(node.id)
            master = self.master
            if master.alive and master.group is not None:
                master.group.on_sync_state_set_accepted(self.sync_state_set, self.epoch)
        if node.id == self.master_id:
            candidates = self.eligible()
            if candidates:
                self.elect(self.rng.choice(candidates))

    def restart(self, node: Node) -> None:
        node.alive = True
        self.note(f"restart {node.id} max {node.log.max_offset} epochs {node.log.epoch_file.pairs()}")
        if node.id == self.master_id:
            candidates = self.eligible()
            self.elect(self.rng.choice(candidates))
            return
        node.role = "slave"
        node.client = HAClient(node.log, self.config, broker_id=node.id, now=self.now)
        become_slave(node.log, self.epoch)
        node.retry_at = self.now

    def act_swap(self) -> None:
        candidates = [n for n in self.eligible() if n.id != self.master_id]
        if candidates:
            self.elect(self.rng.choice(candidates))

    ACTIONS = (
        ("write", 14),
        ("transmit", 40),
        ("time", 12),
        ("controller", 10),
        ("persist", 6),
        ("flush", 6),
        ("disconnect", 0.5),
        ("crash", 0.5),
        ("swap", 1.5),
    )

    def run(self) -> None:
        names = [a for a, _ in self.ACTIONS]
        weights = [w for _, w in self.ACTIONS]
        write = names.index("write")
        phase_end = 0
        for step in range(self.steps):
            if step >= phase_end:
                # Alternate busy and quiet phases, so slaves both catch up (and join the
                # SyncStateSet) and fall behind (leaving unreplicated tails to truncate).
                phase_end = step + self.rng.randint(20, 80)
                weights[write] = self.rng.choice([0, 0, 4, 14, 30])
            action = self.rng.choices(names, weights)[0]
            getattr(self, f"act_{action}")()
            self.check()
        self.heal()

    def heal(self) -> None:
        """Stop faults; everything must converge to the master's log."""
        for node in self.nodes:
            if not node.alive:
                node.restart_at = self.now
        self.act_time(0.0)
        for _ in range(20_000):
            progressed = False
            self.act_persist()
            for link in [link for m in self.nodes for link in m.links]:
                if link in link.master.links and self.deliver(link, up=True, everything=True):
                    progressed = True
                if link in link.master.links and self.deliver(link, up=False, everything=True):
                    progressed = True
            self.act_controller()
            self.check()
            if not progressed:
                if self.converged():
                    return
                self.act_time(0.5)
        raise InvariantViolation("did not converge after healing: " + self.describe())

    def converged(self) -> bool:
        master = self.master
        if not (master.alive and master.role == "master"):
            return False
        want = master.log.bytes_range(0, master.log.max_offset)
        for node in self.nodes:
            if node is master:
                continue
            if node.link is None or node.log.max_offset != master.log.max_offset:
                return False
            if node.log.bytes_range(0, node.log.max_offset) != want:
                raise InvariantViolation(f"slave {node.id} has the master's length but different bytes")
            if attribution(node.log) != attribution(master.log):
                raise InvariantViolation(
                    f"slave {node.id} epochs {node.log.epoch_file.pairs()} != master {master.log.epoch_file.pairs()}"
                )
        return True

    def describe(self) -> str:
        parts = []
        for n in self.nodes:
            parts.append(
                f"node {n.id} {n.role}{'' if n.alive else ' (dead)'} max={n.log.max_offset} "
                f"confirm={n.log.confirm_offset} epochs={n.log.epoch_file.pairs()}"
            )
        return "; ".join(parts)


def attribution(log: MemLog) -> list[tuple[int, int, int]]:
    """Which epoch wrote which bytes: the epoch entries that cover at least one byte (a master's epoch
    without data yet is not replicated)."""
    return [
        (e.epoch, e.start_offset, e.end_offset)
        for e in log.epoch_file.entries(max_offset=log.max_offset)
        if e.end_offset > e.start_offset
    ]


def run_seed(seed: int) -> Sim:
    sim = Sim(seed)
    try:
        sim.run()
    except Exception as exc:
        tail = "\n".join(sim.trace[-25:])
        raise AssertionError(
            f"HA simulation failed for seed {seed}: {exc}\n{sim.describe()}\nlast steps:\n{tail}\n"
            f"replay: HA_SIM_SEED={seed} .venv/bin/python -m pytest tests/sim/test_ha_sim.py -q"
        ) from exc
    return sim


def seeds() -> list[int]:
    if "HA_SIM_SEED" in os.environ:
        return [int(os.environ["HA_SIM_SEED"])]
    return list(range(int(os.environ.get("HA_SIM_SEEDS", DEFAULT_SEEDS))))


def test_ha_simulation_many_seeds() -> None:
    stats = {"writes": 0, "elections": 0, "truncations": 0, "crashes": 0}
    for seed in seeds():
        sim = run_seed(seed)
        stats["elections"] += sim.epoch - 1
        stats["truncations"] += sum(len(n.log.truncations) for n in sim.nodes)
        stats["crashes"] += sum(1 for t in sim.trace if " crash " in t)
        stats["writes"] += sim.msg_counter
    if "HA_SIM_SEED" not in os.environ:
        # The schedule must actually exercise the interesting paths.
        assert stats["elections"] > len(seeds()) // 4
        assert stats["truncations"] > len(seeds()) // 20
        assert stats["crashes"] > len(seeds()) // 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulation_is_deterministic(seed: int) -> None:
    a, b = Sim(seed), Sim(seed)
    a.run()
    b.run()
    assert a.trace == b.trace
    assert [n.log.bytes_range(0, n.log.max_offset) for n in a.nodes] == [
        n.log.bytes_range(0, n.log.max_offset) for n in b.nodes
    ]


# ---------------------------------------------------------------------- the same, through trio


TRIO_SEEDS = 8


class FaultyStream(trio.abc.Stream):
    """Delays each write by a seeded random time and splits it into random pieces."""

    def __init__(self, inner: trio.abc.Stream, rng: random.Random) -> None:
        self.inner = inner
        self.rng = rng

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        await trio.sleep(self.rng.choice([0.0, 0.001, 0.01, 0.2]))
        while data:
            n = self.rng.randint(1, len(data))
            await self.inner.send_all(data[:n])
            data = data[n:]

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class TrioSim:
    """``HAService`` instances over in-memory streams under ``MockClock``; seeded faults and swaps."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.config = MessageStoreConfig(
            haTransferBatchSize=self.rng.choice([100, 1000]),
            haSendHeartbeatInterval=1000,
            haHousekeepingInterval=4000,
            haMaxTimeSlaveNotCatchup=3000,
            allAckInSyncStateSet=True,
            mappedFileSizeCommitLog=1024,
        )
        self.logs = {i: MemLog(mapped_file_size=1024) for i in (1, 2)}
        self.services: dict[int, HAService] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.streams: list[trio.abc.Stream] = []
        self.committed = bytearray()
        self.sync_state_set: set[int] = set()
        self.epoch = 0
        self.master_id = 0
        for log in self.logs.values():
            log.before_truncate = self._check_truncation

    def _check_truncation(self, log: MemLog, offset: int) -> None:
        if offset < log.last_message_boundary_at_or_below(log.confirm_offset):
            raise InvariantViolation(f"truncation to {offset} below confirm offset {log.confirm_offset}")

    def check(self) -> None:
        for node_id, log in self.logs.items():
            if node_id not in self.services:
                continue
            confirm = log.last_message_boundary_at_or_below(min(log.confirm_offset, log.max_offset))
            have = log.bytes_range(0, confirm)
            n = min(len(self.committed), confirm)
            if have[:n] != self.committed[:n]:
                raise InvariantViolation(f"node {node_id}: confirmed bytes differ")
            if confirm > len(self.committed):
                self.committed += have[len(self.committed) :]
        if self.master_id in self.services:
            log = self.logs[self.master_id]
            n = len(self.committed)
            if log.max_offset < n or log.bytes_range(0, n) != self.committed:
                raise InvariantViolation(f"master {self.master_id} lacks confirmed bytes")

    async def connect(self, address: str) -> trio.abc.Stream:
        target = self.services.get(int(address))
        if target is None:
            raise OSError(f"node {address} is down")
        a, b = trio.testing.memory_stream_pair()
        self.streams += [a, b]
        self.nursery.start_soon(target.handle_connection, FaultyStream(b, self.rng))
        return FaultyStream(a, self.rng)

    def _alter(self, node_id: int) -> Callable[[set[int]], Awaitable[tuple[set[int], int] | None]]:
        """The controller's ALTER_SYNC_STATE_SET as ``node_id`` sends it: like the real controller
        (controller/replicas.py) it refuses a broker that is not the master of the current epoch
        when the request arrives -- a demoted master shrinking the set to itself would otherwise
        confirm bytes that the new master lacks."""

        async def alter(proposal: set[int]) -> tuple[set[int], int] | None:
            service = self.services.get(node_id)
            epoch = service.epoch if service is not None else -1  # the request's masterEpoch
            await trio.sleep(self.rng.choice([0.0, 0.05, 0.5]))
            if self.rng.random() < 0.2 or not all(m in self.services for m in proposal):
                return None
            if node_id != self.master_id or epoch != self.epoch:
                return None  # CONTROLLER_INVALID_MASTER / CONTROLLER_FENCED_MASTER_EPOCH
            self.sync_state_set = set(proposal)
            return set(proposal), self.epoch

        return alter

    async def start(self, node_id: int) -> None:
        service = HAService(
            self.logs[node_id],
            self.config,
            broker_id=node_id,
            connect=self.connect,
            persist=self._persist(node_id),
            alter_sync_state_set=self._alter(node_id),
            check_period=1.0,
        )
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await service.run(task_status=task_status)

        await self.nursery.start(run)
        self.services[node_id] = service
        self.scopes[node_id] = scope

    def _persist(self, node_id: int) -> Callable[[], Awaitable[None]]:
        async def persist() -> None:
            await trio.sleep(self.rng.choice([0.0, 0.01]))
            self.logs[node_id].persist_epoch_file()

        return persist

    async def elect(self, node_id: int) -> None:
        self.epoch += 1
        self.master_id = node_id
        self.sync_state_set = {node_id}
        await self.services[node_id].change_to_master(self.epoch)
        for other, service in self.services.items():
            if other != node_id:
                await service.change_to_slave(str(node_id), self.epoch)

    def crash(self, node_id: int) -> None:
        self.scopes.pop(node_id).cancel()
        del self.services[node_id]
        self.sync_state_set.discard(node_id)
        log = self.logs[node_id]
        if node_id == self.master_id and not [n for n in self.sync_state_set if n in self.services]:
            log.flush(len(self.committed))
        log.crash()

    async def writer(self) -> None:
        counter = 0
        while True:
            await trio.sleep(self.rng.choice([0.001, 0.01, 0.1, 1.0]))
            service = self.services.get(self.master_id)
            if service is not None and service.role == "master":
                counter += 1
                self.logs[self.master_id].append_message(
                    f"{self.epoch}:{counter}:".encode() + self.rng.randbytes(self.rng.randint(10, 300))
                )
                service.notify_appended()

    async def chaos(self) -> None:
        for _ in range(40):
            await trio.sleep(self.rng.choice([0.1, 0.5, 2.0, 5.0]))
            self.check()
            action = self.rng.choice(["swap", "crash", "break", "flush", "nothing"])
            others = [n for n in self.services if n != self.master_id]
            if action == "swap":
                candidates = [n for n in others if n in self.sync_state_set]
                if candidates:
                    await self.elect(self.rng.choice(candidates))
            elif action == "crash" and others:
                victim = self.rng.choice([*others, self.master_id])
                was_master = victim == self.master_id
                self.crash(victim)
                if was_master:
                    candidates = [n for n in self.sync_state_set if n in self.services]
                    if candidates:
                        await self.elect(self.rng.choice(candidates))
                await trio.sleep(self.rng.choice([0.5, 3.0]))
                await self.start(victim)
                if self.master_id == victim:
                    await self.elect(victim)
                else:
                    await self.services[victim].change_to_slave(str(self.master_id), self.epoch)
            elif action == "break" and self.streams:
                await trio.aclose_forcefully(self.rng.choice(self.streams))
            elif action == "flush":
                log = self.logs[self.rng.choice([1, 2])]
                log.flush(self.rng.randint(log.flushed_offset, log.max_offset))

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await self.start(1)
            await self.start(2)
            await self.elect(1)
            checker_scope = trio.CancelScope()

            async def checker() -> None:
                with checker_scope:
                    while True:
                        await trio.sleep(0.05)
                        self.check()

            nursery.start_soon(checker)
            async with trio.open_nursery() as load:
                load.start_soon(self.writer)
                await self.chaos()
                load.cancel_scope.cancel()
            # Heal: no more faults; the slave must converge.
            master = self.logs[self.master_id]
            slave = self.logs[3 - self.master_id]
            with trio.fail_after(120):
                while not (
                    slave.max_offset == master.max_offset
                    and slave.bytes_range(0, slave.max_offset) == master.bytes_range(0, master.max_offset)
                ):
                    await trio.sleep(0.5)
            self.check()
            checker_scope.cancel()
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("seed", range(TRIO_SEEDS))
def test_ha_services_over_memory_streams_with_mock_clock(seed: int) -> None:
    sim = TrioSim(seed)
    try:
        trio.run(sim.main, clock=trio.testing.MockClock(autojump_threshold=0))
    except BaseException as exc:
        raise AssertionError(
            f"HA trio simulation failed for seed {seed} (fault decisions replay exactly; trio's task order "
            f"may differ): {exc!r}\n"
            f"replay: .venv/bin/python -m pytest 'tests/sim/test_ha_sim.py::"
            f"test_ha_services_over_memory_streams_with_mock_clock[{seed}]' -q"
        ) from exc
