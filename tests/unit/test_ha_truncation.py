"""The truncation cases drawn in RIP-44 ("Truncation example analysis", seed 001) and §3.4, end to end.

The RIP's figures are images; each case below is rebuilt from its caption. Every test builds the
epoch histories *and* the logs (100-byte records whose bytes depend on (epoch, offset), so two logs
agree exactly where the same epoch's master wrote them), runs the real handshake between a master
``HAConnection`` and a slave ``HAClient`` wired back to back, and checks the truncation point, the
slave's epoch file right after the handshake, and the fully synchronised result.
"""

from __future__ import annotations

import pytest

from store.config import MessageStoreConfig
from store.ha.client import HAClient
from store.ha.connection import HAConnection
from store.ha.events import CloseConnection, Truncated
from store.ha.loopback import connect
from store.ha.memlog import MemLog

RECORD = 100
CONFIG = MessageStoreConfig()


def payload(epoch: int, offset: int) -> bytes:
    return f"epoch {epoch} wrote offset {offset}".encode().ljust(RECORD - 8, b".")


def build(*history: tuple[int, int, int]) -> MemLog:
    """A log whose epoch ``e`` covers ``[start, end)``: ``(e, start, end)`` ascending and contiguous."""
    log = MemLog(mapped_file_size=1 << 20)
    for epoch, start, end in history:
        assert log.max_offset == start
        log.epoch_file.append(epoch, start)
        while log.max_offset < end:
            log.append_message(payload(epoch, log.max_offset))
        assert log.max_offset == end
    log.flush()
    return log


def sync(master: MemLog, slave: MemLog) -> tuple[int | None, list[tuple[int, int]], int]:
    """Run a session until idle. Returns (truncation point or None, slave epochs right after the
    handshake, slave max right after the handshake)."""
    at_handshake: list[tuple[list[tuple[int, int]], int]] = []

    def on_persist() -> None:
        at_handshake.append((slave.epoch_file.pairs(), slave.max_offset))
        slave.persist_epoch_file()

    conn = HAConnection(master, CONFIG, now=0.0)
    client = HAClient(slave, CONFIG, broker_id=2)
    lb = connect(conn, client, 0.0, on_persist=on_persist)
    assert lb.closed is None, lb.closed
    points = [e.offset for e in lb.events if isinstance(e, Truncated)]
    assert len(points) <= 1
    assert at_handshake  # the first persist is the handshake's; later ones start new epochs
    return (points[0] if points else None), at_handshake[0][0], at_handshake[0][1]


def assert_identical(master: MemLog, slave: MemLog) -> None:
    assert slave.max_offset == master.max_offset
    assert slave.bytes_range(0, slave.max_offset) == master.bytes_range(0, master.max_offset)
    assert slave.epoch_file.pairs() == master.epoch_file.pairs()


def test_case1_old_master_tail_beyond_new_masters_epoch_start_is_cut() -> None:
    # A (old master) wrote epoch 0 up to 1000, B had 900 when elected for epoch 1 and wrote to 1200.
    # (1) "The endoffset of epoch0 is truncated to the minimum of 900."
    a = build((0, 0, 1000))
    b = build((0, 0, 900), (1, 900, 1200))
    point, epochs, max_after = sync(master=b, slave=a)
    assert point == 900
    assert epochs == [(0, 0)]
    assert max_after == 900
    assert_identical(b, a)
    assert a.epoch_file.pairs() == [(0, 0), (1, 900)]


def test_case2_old_master_lost_unflushed_tail_copies_it_back() -> None:
    # A (old master) lost 900-1000 on an async-flush crash; B had all 1000 and now leads epoch 1.
    # (2) "truncated to 900, the minimum of the two. A will continue to copy B's messages."
    a = build((0, 0, 900))
    b = build((0, 0, 1000), (1, 1000, 1200))
    point, epochs, max_after = sync(master=b, slave=a)
    assert point is None  # min(900, 1000) = 900 = A's max: nothing to cut
    assert epochs == [(0, 0)]
    assert max_after == 900
    assert_identical(b, a)
    assert a.bytes_range(900, 1000) == b.bytes_range(900, 1000)


def test_case3_slave_fully_caught_up_on_previous_epoch_is_not_truncated() -> None:
    # B led epoch 1 (900-1200) and A had all of it when A was elected for epoch 2 at 1200.
    # (3) "The endoffset of epoch1 is truncated to the minimum of 1200, which does not need truncation."
    b = build((0, 0, 900), (1, 900, 1200))
    a = build((0, 0, 900), (1, 900, 1200), (2, 1200, 1500))
    point, epochs, max_after = sync(master=a, slave=b)
    assert point is None
    assert epochs == [(0, 0), (1, 900)]
    assert max_after == 1200
    assert_identical(a, b)


def test_case4_master_has_epochs_the_slave_never_saw() -> None:
    # A was cut off in epoch 0 at 1000; meanwhile C led epochs 1 (from 900) and 2 (from 1100).
    # (4) "The endoffset of epoch0 is truncated to the minimum of 900."
    a = build((0, 0, 1000))
    c = build((0, 0, 900), (1, 900, 1100), (2, 1100, 1300))
    point, epochs, _ = sync(master=c, slave=a)
    assert point == 900
    assert epochs == [(0, 0)]
    assert_identical(c, a)
    assert a.epoch_file.pairs() == [(0, 0), (1, 900), (2, 1100)]


def test_case5_two_slaves_with_a_diverged_epoch_both_cut_to_its_start() -> None:
    # Epoch 1 (A) wrote 0-800 everywhere. B led epoch 2 from 800 (to 1000), C copied it to 900.
    # A, which never saw epoch 2, was elected for epoch 3 at 800.
    # (5) "Both B and C are truncated to 800 of epoch1."
    a = build((1, 0, 800), (3, 800, 1000))
    b = build((1, 0, 800), (2, 800, 1000))
    c = build((1, 0, 800), (2, 800, 900))
    for slave in (b, c):
        point, epochs, max_after = sync(master=a, slave=slave)
        assert point == 800
        assert epochs == [(1, 0)]
        assert max_after == 800
        assert_identical(a, slave)


def test_case6_diverged_later_epoch_of_the_slave_is_cut_at_the_shared_epoch_end() -> None:
    # Epoch 0 ended at 1000 on both. B led epoch 1 from 1000; A, isolated, also wrote 1000-1200 in a
    # later epoch 2 that the current master B does not know.
    # (6) "The endoffset of epoch0 is truncated to the minimum of 1000."
    a = build((0, 0, 1000), (2, 1000, 1200))
    b = build((0, 0, 1000), (1, 1000, 1300))
    point, epochs, _ = sync(master=b, slave=a)
    assert point == 1000
    assert epochs == [(0, 0)]
    assert_identical(b, a)


# ---------------------------------------------------------------- further §3.4 cases


def test_empty_slave_is_a_new_replica_and_copies_everything() -> None:
    master = build((1, 0, 700), (2, 700, 1500))
    slave = MemLog(mapped_file_size=1 << 20)
    point, epochs, max_after = sync(master, slave)
    assert (point, epochs, max_after) == (None, [], 0)
    assert_identical(master, slave)


def test_empty_slave_with_sync_from_last_file_starts_at_the_masters_last_file() -> None:
    master = MemLog(mapped_file_size=1024)
    master.epoch_file.append(1, 0)
    while master.max_offset < 3000:
        master.append_message(payload(1, master.max_offset))
    config = MessageStoreConfig(syncFromLastFile=True)
    slave = MemLog(mapped_file_size=1024)
    lb = connect(HAConnection(master, config), HAClient(slave, config, broker_id=2), 0.0)
    assert lb.closed is None
    assert slave.min_offset == 2048
    assert slave.max_offset == master.max_offset
    assert slave.bytes_range(2048, slave.max_offset) == master.bytes_range(2048, master.max_offset)
    assert slave.epoch_file.pairs() == [(1, 0)]


def test_no_consistent_point_closes_and_retries_after_two_seconds_without_truncating() -> None:
    # §3.4 example: <1,100><2,300>… vs <1,200><2,500> → −1.
    slave = MemLog(mapped_file_size=1 << 20)
    for _ in range(7):
        slave.append_message(payload(0, slave.max_offset))
    slave.epoch_file.append(1, 100)
    slave.epoch_file.append(2, 300)
    slave.epoch_file.append(3, 500)
    master = build((1, 0, 200), (2, 200, 500), (3, 500, 600))
    master.epoch_file.replace([(1, 200), (2, 500)])
    before = slave.bytes_range(0, slave.max_offset)
    lb = connect(HAConnection(master, CONFIG), HAClient(slave, CONFIG, broker_id=2), 0.0)
    assert isinstance(lb.closed, CloseConnection)
    assert lb.closed.retry_after == 2.0
    assert "no consistent point" in lb.closed.reason
    assert slave.bytes_range(0, slave.max_offset) == before
    assert slave.epoch_file.pairs() == [(1, 100), (2, 300), (3, 500)]


@pytest.mark.parametrize(
    ("local", "master", "expected"),
    [
        # The four upstream EpochFileCacheTest samples, as logs.
        (((1, 100, 300), (2, 300, 500), (3, 500, 700)), ((1, 100, 300), (2, 300, 450), (3, 450, 700)), 450),
        (((1, 100, 300), (2, 300, 500), (3, 500, 700)), ((1, 100, 300), (2, 300, 500), (3, 500, 600)), 600),
        (
            ((1, 100, 300), (2, 300, 500), (3, 500, 700)),
            ((1, 100, 300), (2, 300, 500), (3, 500, 800), (4, 800, 900)),
            700,
        ),
    ],
)
def test_upstream_samples_as_logs(
    local: tuple[tuple[int, int, int], ...], master: tuple[tuple[int, int, int], ...], expected: int
) -> None:
    def build_from(history: tuple[tuple[int, int, int], ...]) -> MemLog:
        first = history[0][1]
        log = MemLog(mapped_file_size=1 << 20)
        # Fill [0, first) with epoch-0 bytes not covered by any entry (retention of older epochs).
        while log.max_offset < first:
            log.append_message(payload(0, log.max_offset))
        for epoch, start, end in history:
            log.epoch_file.append(epoch, start)
            while log.max_offset < end:
                log.append_message(payload(epoch, log.max_offset))
        return log

    slave = build_from(local)
    point, _, max_after = sync(build_from(master), slave)
    assert max_after == expected
    assert point == (expected if expected < 700 else None)


def test_no_shared_epoch_but_same_beginning_discards_the_slaves_unreplicated_log() -> None:
    # Found by the simulation: B led epoch 2 from offset 0 and nobody copied its writes; C (which had
    # nothing) was elected for epoch 3 at 0. Upstream finds no consistent point and stalls forever;
    # both histories begin where B's log begins, so the empty prefix is a safe common point.
    b = build((2, 0, 800))
    c = build((3, 0, 300))
    point, epochs, max_after = sync(master=c, slave=b)
    assert (point, epochs, max_after) == (0, [], 0)
    assert_identical(c, b)
