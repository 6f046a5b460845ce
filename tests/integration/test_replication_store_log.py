"""``StoreReplicaLog``: the message store as the HA state machines see it (real stores and files).

Mutations are queued and applied by ``drain()``; the virtual view (max offset, boundaries) must be
what the store shows once drained, and a queued truncation must keep the epoch entries the HA code
added after asking for it.
"""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing

from store.config import BrokerRole
from store.ha.store_log import DrainingStream, StoreReplicaLog
from store.message_store import DefaultMessageStore
from tests.integration.storekit import put, read_queue, running_store, small_config

FILE = 64 * 1024  # small_config's commit-log file size


async def _fill(master: DefaultMessageStore, n: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    for i in range(n):
        await put(master, "T", i % 2, bytes([i % 256]) * rng.randint(20, 2500), keys=f"k{i}")


def _chunks(master: DefaultMessageStore, start: int, rng: random.Random) -> list[tuple[int, bytes]]:
    """The master's bytes from ``start`` as replication batches (random sizes, never crossing a file)."""
    out = []
    offset = start
    while offset < master.max_phy_offset:
        view = master.read_raw(offset, rng.randint(1, 7000))
        assert view is not None
        out.append((offset, bytes(view)))
        offset += len(view)
    return out


async def test_queued_appends_are_virtual_until_drained(tmp_path: Path) -> None:
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill(master, 150)
        rlog = StoreReplicaLog(slave)
        rng = random.Random(5)
        chunks = _chunks(master, 0, rng)
        for offset, data in chunks[:20]:
            rlog.append_raw(offset, data)
        queued_end = chunks[19][0] + len(chunks[19][1])
        assert rlog.max_offset == queued_end
        assert slave.max_phy_offset == 0  # nothing reached the store yet
        await rlog.drain()
        assert not rlog.pending
        assert slave.max_phy_offset == queued_end
        for offset, data in chunks[20:]:
            rlog.append_raw(offset, data)
            if rng.random() < 0.3:
                await rlog.drain()
        await rlog.drain()
        assert slave.max_phy_offset == master.max_phy_offset
        assert read_queue(slave, "T", 0) == read_queue(master, "T", 0)
        assert read_queue(slave, "T", 1) == read_queue(master, "T", 1)


async def test_boundaries_over_queued_bytes_match_the_store(tmp_path: Path) -> None:
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill(master, 120)
        rlog = StoreReplicaLog(slave)
        rng = random.Random(9)
        chunks = _chunks(master, 0, rng)
        half = len(chunks) // 2
        for offset, data in chunks[:half]:
            rlog.append_raw(offset, data)
        await rlog.drain()
        for offset, data in chunks[half:]:
            rlog.append_raw(offset, data)
        probes = [rng.randrange(0, master.max_phy_offset + 1) for _ in range(200)] + [master.max_phy_offset]
        virtual = {p: rlog.last_message_boundary_at_or_below(p) for p in probes}
        await rlog.drain()
        for p, b in virtual.items():
            assert (
                b == slave.last_message_boundary_at_or_below(p) == master.last_message_boundary_at_or_below(p)
            )


async def test_truncation_trims_queued_appends_or_queues_a_store_truncation(tmp_path: Path) -> None:
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill(master, 100)
        rlog = StoreReplicaLog(slave)
        chunks = _chunks(master, 0, random.Random(2))
        for offset, data in chunks:
            rlog.append_raw(offset, data)
        await rlog.drain()
        end = slave.max_phy_offset
        rlog.epoch_file.append(1, 0)

        # A cut inside queued bytes never reaches the store.
        more = _chunks(master, end, random.Random(1))
        assert not more  # the slave holds everything; write more on the master
        await _fill(master, 30, seed=8)
        more = _chunks(master, end, random.Random(1))
        for offset, data in more:
            rlog.append_raw(offset, data)
        cut = rlog.last_message_boundary_at_or_below((end + rlog.max_offset) // 2)
        assert cut > end
        done = rlog.ops_done
        rlog.truncate_to(cut)
        assert rlog.max_offset == cut
        await rlog.drain()
        assert slave.max_phy_offset == cut
        assert rlog.ops_done > done  # only appends ran
        assert slave.last_message_boundary_at_or_below(cut) == cut

        # A cut below the store's end is queued; the epoch entry added after it survives.
        point = rlog.last_message_boundary_at_or_below(end // 2)
        rlog.truncate_to(point)
        rlog.epoch_file.truncate_suffix(point)
        rlog.epoch_file.append(2, point)
        assert slave.max_phy_offset == cut  # not yet
        await rlog.persist()
        assert slave.max_phy_offset == point
        assert slave.epoch_file.pairs() == [(1, 0), (2, point)]
        reloaded = type(slave.epoch_file)(slave.epoch_file.path)
        reloaded.load()
        assert reloaded.pairs() == [(1, 0), (2, point)]


async def test_an_empty_store_restarts_at_the_masters_first_file(tmp_path: Path) -> None:
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill(master, 150)
        start = master.max_phy_offset // FILE * FILE  # the start of the master's last file
        assert start > 0
        rlog = StoreReplicaLog(slave)
        for offset, data in _chunks(master, start, random.Random(4)):
            rlog.append_raw(offset, data)
        assert rlog.min_offset == start
        await rlog.drain()
        assert slave.min_phy_offset == start
        assert slave.max_phy_offset == master.max_phy_offset
        await slave.reput()
        # the queues hold what the slave has, at the master's queue offsets
        for q in (0, 1):
            tail = read_queue(slave, "T", q)
            assert tail
            assert tail == read_queue(master, "T", q)[-len(tail) :]


async def test_draining_stream_sends_only_what_the_store_holds(tmp_path: Path) -> None:
    async with (
        running_store(small_config(tmp_path / "m")) as master,
        running_store(small_config(tmp_path / "s", brokerRole=BrokerRole.SLAVE)) as slave,
    ):
        await _fill(master, 20)
        rlog = StoreReplicaLog(slave)
        left, right = trio.testing.memory_stream_pair()
        stream = DrainingStream(left, rlog)
        for offset, data in _chunks(master, 0, random.Random(6)):
            rlog.append_raw(offset, data)
        assert slave.max_phy_offset == 0
        await stream.send_all(b"ack")
        assert slave.max_phy_offset == master.max_phy_offset  # drained before the bytes left
        assert await right.receive_some() == b"ack"
        await stream.aclose()
