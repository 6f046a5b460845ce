"""HAService over real loopback sockets with two in-memory logs (fast; 127.0.0.1, ephemeral ports)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
import trio

from store.config import MessageStoreConfig
from store.ha.ack_waiters import AckWaiters
from store.ha.memlog import MemLog
from store.ha.service import HAService
from store.results import PutMessageStatus


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.005)


def write(log: MemLog, service: HAService, count: int, tag: bytes = b"x") -> int:
    end = 0
    for i in range(count):
        _, end = log.append_message(tag + str(i).encode() * 20)
        service.notify_appended()
    return end


def same(a: MemLog, b: MemLog) -> bool:
    return a.max_offset == b.max_offset and a.bytes_range(0, a.max_offset) == b.bytes_range(0, b.max_offset)


def config(**kw: object) -> MessageStoreConfig:
    return MessageStoreConfig(haTransferBatchSize=1000, haSendHeartbeatInterval=200, **kw)  # type: ignore[arg-type]


async def test_slave_follows_master_over_tcp_and_survives_a_role_swap() -> None:
    log1, log2 = MemLog(mapped_file_size=4096), MemLog(mapped_file_size=4096)
    s1 = HAService(log1, config(), broker_id=1, listen_port=0)
    s2 = HAService(log2, config(), broker_id=2, listen_port=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(s1.run)
        await nursery.start(s2.run)
        await s1.change_to_master(1)
        write(log1, s1, 50)
        await s2.change_to_slave(f"127.0.0.1:{s1.bound_port}", 1)
        await wait_until(lambda: same(log1, log2))
        assert log2.epoch_file.pairs() == [(1, 0)]
        write(log1, s1, 30)
        await wait_until(lambda: same(log1, log2))

        # Unreplicated tail on broker 1, then broker 2 is promoted with epoch 2.
        await s2.change_to_master(2)
        start2 = log2.max_offset
        write(log1, s1, 5, tag=b"lost")
        write(log2, s2, 7, tag=b"new")
        await s1.change_to_slave(f"127.0.0.1:{s2.bound_port}", 2)
        await wait_until(lambda: same(log1, log2))
        assert log1.epoch_file.pairs() == [(1, 0), (2, start2)]
        assert all(b"lost" not in payload for _, payload in log1.records())
        nursery.cancel_scope.cancel()


async def test_wait_for_replication_with_all_ack_in_sync_state_set() -> None:
    log1, log2 = MemLog(mapped_file_size=4096), MemLog(mapped_file_size=4096)
    proposals: list[set[int]] = []
    controller_up = True

    async def alter(proposal: set[int]) -> tuple[set[int], int] | None:
        proposals.append(proposal)
        return (proposal, len(proposals)) if controller_up else None

    cfg = config(allAckInSyncStateSet=True, haMaxTimeSlaveNotCatchup=60_000)
    s1 = HAService(log1, cfg, broker_id=1, listen_port=0, alter_sync_state_set=alter, check_period=0.05)
    s2 = HAService(log2, cfg, broker_id=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(s1.run)
        await nursery.start(s2.run)
        await s1.change_to_master(1)
        end = write(log1, s1, 3)
        assert await s1.wait_for_replication(end, 0.5) is PutMessageStatus.PUT_OK  # set is {1}
        await s2.change_to_slave(f"127.0.0.1:{s1.bound_port}", 1)
        assert s1.group is not None
        group = s1.group
        await wait_until(lambda: group.sync_state_set == {1, 2})
        assert proposals[0] == {1, 2}
        end = write(log1, s1, 2)
        assert await s1.wait_for_replication(end, 5.0) is PutMessageStatus.PUT_OK
        assert log2.max_offset >= end
        assert s1.check_before_put() is None

        # The controller is unreachable and the slave stops: the SyncStateSet cannot shrink, so a new
        # message cannot be acknowledged by every member.
        controller_up = False
        s2.stop_role()
        end = write(log1, s1, 1)
        assert await s1.wait_for_replication(end, 0.3) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert proposals[-1] == {1}
        controller_up = True
        await wait_until(lambda: group.sync_state_set == {1})
        assert await s1.wait_for_replication(end, 0.3) is PutMessageStatus.PUT_OK
        nursery.cancel_scope.cancel()


async def test_slave_waits_for_the_master_address_and_non_master_refuses_slaves() -> None:
    log1, log2 = MemLog(), MemLog()
    s1 = HAService(log1, config(), broker_id=1, listen_port=0)
    s2 = HAService(log2, config(), broker_id=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(s1.run)
        await nursery.start(s2.run)
        await s2.change_to_slave(None, 1)
        # Broker 1 has no role yet: a connection is closed at once.
        stream = await trio.open_tcp_stream("127.0.0.1", s1.bound_port)
        with trio.fail_after(2):
            assert await stream.receive_some(10) == b""
        await stream.aclose()
        await s1.change_to_master(1)
        write(log1, s1, 10)
        s2.set_master_address(f"127.0.0.1:{s1.bound_port}")
        await wait_until(lambda: same(log1, log2))
        assert s2.check_before_put() is PutMessageStatus.SERVICE_NOT_AVAILABLE
        nursery.cancel_scope.cancel()


async def test_ack_listeners_release_send_waiters_when_the_slave_acks() -> None:
    log1, log2 = MemLog(mapped_file_size=4096), MemLog(mapped_file_size=4096)
    cfg = config(allAckInSyncStateSet=True, haMaxTimeSlaveNotCatchup=60_000)

    async def accept(proposal: set[int]) -> tuple[set[int], int]:
        return proposal, 1

    s1 = HAService(log1, cfg, broker_id=1, listen_port=0, alter_sync_state_set=accept, check_period=0.05)
    s2 = HAService(log2, cfg, broker_id=2)
    waiters = AckWaiters(lambda end, need: s1.group is None or s1.group.is_acked(end, need))
    s1.ack_listeners.append(waiters.notify)
    async with trio.open_nursery() as nursery:
        await nursery.start(waiters.run)
        await nursery.start(s1.run)
        await nursery.start(s2.run)
        await s1.change_to_master(1)
        await s2.change_to_slave(f"127.0.0.1:{s1.bound_port}", 1)
        await wait_until(lambda: s1.group is not None and s1.group.sync_state_set == {1, 2})
        end = write(log1, s1, 4)
        assert await waiters.wait(end, -1, 5.0)
        assert log2.max_offset >= end
        s2.stop_role()
        end = write(log1, s1, 1)
        # nobody acks it, but the SyncStateSet shrinks to the master alone: that releases it too
        assert await waiters.wait(end, -1, 5.0)
        assert log2.max_offset < end
        assert s1.group is not None
        assert s1.group.sync_state_set == {1}
        nursery.cancel_scope.cancel()


async def test_a_replica_that_is_not_master_closes_ha_connections_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A replica taking a slave for its master (a stale route) sees only its connection close; the
    slave says why, once for the repeated attempts."""
    log1, log2 = MemLog(mapped_file_size=4096), MemLog(mapped_file_size=4096)
    s1 = HAService(log1, config(), broker_id=1, listen_port=0)
    s2 = HAService(log2, config(), broker_id=2, listen_port=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(s1.run)
        await nursery.start(s2.run)
        await s1.change_to_master(1)
        await s2.change_to_slave(f"127.0.0.1:{s1.bound_port}", 1)
        with caplog.at_level(logging.INFO, "store.ha.service"):
            for _ in range(3):
                stream = await trio.open_tcp_stream("127.0.0.1", s2.bound_port)
                with trio.fail_after(5):
                    try:
                        assert await stream.receive_some(100) == b""  # closed at once
                    except trio.BrokenResourceError:
                        pass  # or reset (closed forcefully)
                await stream.aclose()
        nursery.cancel_scope.cancel()
    said = [r.getMessage() for r in caplog.records if "this replica is not the master" in r.getMessage()]
    assert len(said) == 1, said
    assert "(role slave)" in said[0]


async def test_a_stop_during_a_role_change_cancels_it_cleanly() -> None:
    """The broker stops (its tasks are cancelled) while a role change waits for the epoch file's
    fsync, which a worker thread finishes regardless: the service has stopped by then, and the
    change must end as cancelled -- not with an error that turns a clean stop into a crash (seen:
    a controller's role-change notice handled while its broker was stopping)."""
    in_thread = trio.Event()

    async def slow_persist() -> None:
        trio.lowlevel.current_trio_token().run_sync_soon(in_thread.set)
        await trio.to_thread.run_sync(time.sleep, 0.2)  # not abandoned on cancel, as a real fsync

    s = HAService(MemLog(mapped_file_size=4096), config(), broker_id=1, persist=slow_persist)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(s.run)
            nursery.start_soon(s.change_to_master, 1)
            await in_thread.wait()
            scope.cancel()  # the stop: the service's run ends while the thread runs on
    assert scope.cancelled_caught
    # a change asked of the stopped service: cancelled if the caller is being cancelled (its
    # own awaits came first), else refused plainly
    for change in (s.change_to_slave("127.0.0.1:1", 2), s.change_to_master(2)):
        with trio.CancelScope() as scope:
            scope.cancel()
            await change
        assert scope.cancelled_caught
    with pytest.raises(RuntimeError, match="not running"):
        await s.change_to_slave("127.0.0.1:1", 2)
