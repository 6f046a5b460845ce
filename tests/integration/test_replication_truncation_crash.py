"""A slave killed in the middle of its handshake truncation (upstream #10666, #9942, #9689).

History: broker a was master of epoch 1 (b replicated up to X), kept writing in epoch 1, became
master of epoch 2 and wrote more, then died; b became master of epoch 3 at X. a's store — epochs
[(1,0),(2,Y)], a divergent tail across several commit-log files — rejoins as b's slave: its
handshake truncates to X. A child process runs that slave and dies (``os._exit``, like SIGKILL)
before or after each blocking step of the truncation, or right after it.

After each kill the store is restarted (recovery) and must hold no stale data under an epoch label
it shares with the master (that is what the truncation point is computed from), and no epoch entry
beyond its end. Then it follows b to the end: its commit-log files on disk must be b's, byte for
byte (no stale file or tail left), with b's epoch file and consume queues.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import msgspec
import trio

from store.config import MessageStoreConfig
from store.message_store import DefaultMessageStore
from tests.integration.replication_kit import (
    FILE_SIZE,
    TOPIC,
    Running,
    commit_log_bytes,
    consume_queue_units,
    replication_group,
    wait_until,
)
from tests.integration.test_replication_auto import auto

KILLED = 137
PROJECT_ROOT = Path(__file__).resolve().parents[2]
POINTS = [
    ("checkpoint", "before"),
    ("zero", "before"),
    ("zero", "after"),
    ("delete", "after"),
    ("logics", "after"),
    ("epoch", "before"),
    ("epoch", "after"),
    ("done", "-"),
    ("append", "-"),
]


async def _child(config: MessageStoreConfig, master_ha: str, target: int, point: str, when: str) -> int:
    args = [
        sys.executable,
        "-m",
        "tests.integration.replication_truncation_child",
        msgspec.json.encode(config).decode(),
        master_ha,
        "3",
        str(target),
        point,
        when,
    ]
    with trio.fail_after(60):
        done = await trio.run_process(
            args, cwd=PROJECT_ROOT, capture_stdout=True, capture_stderr=True, check=False
        )
    if done.returncode not in (0, KILLED):
        raise AssertionError(f"child exited {done.returncode}: {done.stderr.decode()[-3000:]}")
    return done.returncode


def _files(root: Path) -> dict[int, bytes]:
    return {int(p.name): p.read_bytes() for p in sorted((root / "commitlog").iterdir())}


async def _check_restarted(config: MessageStoreConfig, master: Running, x: int, label: str) -> None:
    """The state a restart sees: shared epochs label identical bytes; no entry beyond the end."""
    s = DefaultMessageStore(config, store_host=("127.0.0.1", 1), controller_mode=True)
    await s.start()
    try:
        end = s.max_phy_offset
        pairs = s.epoch_file.pairs()
        theirs = dict(master.store.epoch_file.pairs())
        assert pairs, f"{label}: no epochs"
        assert pairs[0] == (1, 0), f"{label}: epochs {pairs}"
        assert all(start <= end for _, start in pairs), f"{label}: epoch entry beyond the end {end}: {pairs}"
        for i, (epoch, start) in enumerate(pairs):
            if theirs.get(epoch) != start:
                continue
            stop = pairs[i + 1][1] if i + 1 < len(pairs) else end
            master_stop = x if epoch == 1 else master.store.max_phy_offset
            upto = min(stop, master_stop)
            root = Path(config.storePathRootDir)
            master_root = Path(master.store.config.storePathRootDir)
            assert commit_log_bytes(root, start, upto) == commit_log_bytes(master_root, start, upto), (
                f"{label}: stale bytes under shared epoch {epoch} in [{start}, {upto})"
            )
    finally:
        await s.shutdown()


async def test_slave_killed_in_the_middle_of_truncation_keeps_no_stale_tail(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        a = await g.start("a", **auto(1))
        b = await g.start("b", **auto(2))
        await a.broker.replication.change_to_master(1)
        await g.create_topic(a.addr, queues=2)
        await b.broker.replication.change_to_slave(a.ha_addr, 1, master_addr=a.addr)
        for i in range(30):
            await g.send_ok(a.addr, b"shared %d" % i + bytes(1000), queue_id=i % 2)
        x = a.store.max_phy_offset
        await wait_until(lambda: b.store.max_phy_offset == x, 10, "b replicated")
        b_ha = b.broker.replication.ha
        assert b_ha is not None
        b_ha.stop_role()
        for i in range(120):  # a divergent tail over several files
            await g.send_ok(a.addr, b"stale-1 %d" % i + bytes(6000), queue_id=i % 2)
        await a.broker.replication.change_to_master(2)
        y = a.store.max_phy_offset
        for i in range(20):
            await g.send_ok(a.addr, b"stale-2 %d" % i + bytes(3000), queue_id=i % 2)
        assert a.store.epoch_file.pairs() == [(1, 0), (2, y)]
        assert a.store.max_phy_offset > x + 2 * FILE_SIZE
        a_config = a.broker.store_config
        await g.stop(a, crash=True)

        await b.broker.replication.change_to_master(3)
        for i in range(50):
            await g.send_ok(b.addr, b"epoch-3 %d" % i + bytes(2000), queue_id=i % 2)
        target = b.store.max_phy_offset
        await b.store.flush()
        a_root = Path(a_config.storePathRootDir)

        for point, when in POINTS:
            label = f"{point}/{when}"
            root = tmp_path / f"crash-{point}-{when}" / "store"
            shutil.copytree(a_root, root)
            (root / "lock").unlink(missing_ok=True)
            config = msgspec.structs.replace(a_config, storePathRootDir=str(root))
            assert await _child(config, b.ha_addr, target, point, when) == KILLED, f"{label} not reached"
            await _check_restarted(config, b, x, label)
            assert await _child(config, b.ha_addr, target, "none", "-") == 0

            theirs = _files(Path(b.broker.store_config.storePathRootDir))
            mine = _files(root)
            for start, data in theirs.items():
                if start < target:
                    assert mine.get(start) == data, f"{label}: commit-log file {start} differs"
            for start, data in mine.items():
                if start >= target:
                    assert not data.strip(b"\0"), f"{label}: stale commit-log file {start}"
            s = DefaultMessageStore(config, store_host=("127.0.0.1", 1), controller_mode=True)
            await s.start()
            try:
                assert s.max_phy_offset == target
                assert s.epoch_file.pairs() == b.store.epoch_file.pairs() == [(1, 0), (3, x)]
                for q in range(2):
                    assert consume_queue_units(s, TOPIC, q) == consume_queue_units(b.store, TOPIC, q), label
            finally:
                await s.shutdown()
