"""Held pulls wake on arrival past their offset, or on timeout — never before."""

from __future__ import annotations

import trio
import trio.testing

from broker.long_polling import PullRequestHoldService
from remoting.command import RemotingCommand


async def test_held_pull_wakes_on_arrival_past_its_offset_and_on_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reruns: list[tuple[str, float]] = []

    async def rerun(ctx: object, req: RemotingCommand) -> None:
        reruns.append((str(ctx), trio.current_time()))

    svc = PullRequestHoldService(rerun, check_interval=1.0)
    async with trio.open_nursery() as n:
        await n.start(svc.run)
        t0 = trio.current_time()
        svc.hold("T", 0, 5, 15.0, "a", RemotingCommand(code=11))
        svc.hold("T", 1, 0, 15.0, "b", RemotingCommand(code=11))
        svc.notify_message_arriving("T", 0, 5)  # nothing past offset 5 yet
        await trio.testing.wait_all_tasks_blocked()
        assert reruns == []
        svc.notify_message_arriving("T", 0, 6)
        await trio.testing.wait_all_tasks_blocked()
        assert [r[0] for r in reruns] == ["a"]
        assert svc.held_count() == 1
        await trio.sleep(20)
        assert [r[0] for r in reruns] == ["a", "b"]
        assert 15.0 <= reruns[1][1] - t0 < 16.5
        n.cancel_scope.cancel()


async def test_many_held_pulls_each_rerun_once(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[str] = []

    async def rerun(ctx: object, req: RemotingCommand) -> None:
        seen.append(str(ctx))

    svc = PullRequestHoldService(rerun)
    async with trio.open_nursery() as n:
        await n.start(svc.run)
        for i in range(100):
            svc.hold("T", i % 4, 0, 1.0 + (i % 3), f"c{i}", RemotingCommand(code=11))
        svc.notify_message_arriving("T", 0, 1)
        await trio.sleep(5)
        n.cancel_scope.cancel()
    assert sorted(seen) == sorted(f"c{i}" for i in range(100))
