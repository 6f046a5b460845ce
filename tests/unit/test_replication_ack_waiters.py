"""``AckWaiters``: sends released in end-offset order as acks arrive, timeouts, re-checks."""

from __future__ import annotations

import trio
import trio.testing

from store.ha.ack_waiters import AckWaiters


async def test_waiters_are_released_exactly_when_acked() -> None:
    acked = 0
    checks: list[int] = []

    def is_acked(end: int, need: int) -> bool:
        checks.append(end)
        return end <= acked

    waiters = AckWaiters(is_acked)
    done: dict[int, bool] = {}

    async def send(end: int) -> None:
        done[end] = await waiters.wait(end, 2, 10)

    async with trio.open_nursery() as nursery:
        for end in (300, 100, 200, 400):
            nursery.start_soon(send, end)
        await trio.testing.wait_all_tasks_blocked()
        assert len(waiters) == 4
        acked = 250
        checks.clear()
        waiters.notify()
        await trio.testing.wait_all_tasks_blocked()
        assert done == {100: True, 200: True}
        # the release walk stopped at the first waiter still short of acks
        assert checks[:3] == [100, 200, 300]
        acked = 1000
        waiters.notify()
    assert done == {100: True, 200: True, 300: True, 400: True}
    assert len(waiters) == 0


async def test_waiters_time_out_at_their_own_deadline(autojump_clock: trio.testing.MockClock) -> None:
    waiters = AckWaiters(lambda end, need: False)
    ended: dict[int, float] = {}

    async def send(end: int, timeout: float) -> None:
        assert await waiters.wait(end, 2, timeout) is False
        ended[end] = trio.current_time()

    async with trio.open_nursery() as nursery:
        await nursery.start(waiters.run)
        nursery.start_soon(send, 10, 3.0)
        nursery.start_soon(send, 20, 1.0)  # an earlier deadline than the one the task sleeps on
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert ended == {10: 3.0, 20: 1.0}
    waiters.notify()  # the expired entries go at the next walk
    assert len(waiters) == 0


async def test_an_already_acked_offset_does_not_wait() -> None:
    waiters = AckWaiters(lambda end, need: need <= 1 or end <= 5)
    assert await waiters.wait(5, 2, 0)
    assert await waiters.wait(50, 1, 0)
    assert len(waiters) == 0


async def test_the_owner_can_release_everybody() -> None:
    state = {"force": False}
    waiters = AckWaiters(lambda end, need: state["force"])
    result: list[bool] = []

    async def send(end: int) -> None:
        result.append(await waiters.wait(end, 2, 10))

    async with trio.open_nursery() as nursery:
        for end in (100, 50):
            nursery.start_soon(send, end)
        await trio.testing.wait_all_tasks_blocked()
        state["force"] = True  # e.g. the role changed: everybody wakes and looks at the state
        waiters.notify()
    assert result == [True, True]
    assert len(waiters) == 0


async def test_a_cancelled_waiter_is_dropped_and_the_others_still_released() -> None:
    state = {"acked": 0}
    waiters = AckWaiters(lambda end, need: end <= state["acked"])
    result: dict[int, bool] = {}

    async def send(end: int) -> None:
        result[end] = await waiters.wait(end, 2, 10)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, 200)
        async with trio.open_nursery() as inner:
            inner.start_soon(send, 100)
            await trio.testing.wait_all_tasks_blocked()
            inner.cancel_scope.cancel()  # the send waiting for 100 goes away (connection closed)
        state["acked"] = 300
        waiters.notify()
    assert result == {200: True}
