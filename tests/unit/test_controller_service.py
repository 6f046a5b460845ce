"""The controller's trio layer: role-change notifier coalescing, scan schedules."""

from __future__ import annotations

import trio
import trio.testing

from controller.service import RoleChangeNotifier
from remoting.codes import RequestCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingConnectError


def note(epoch: int) -> RemotingCommand:
    return request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, {"masterEpoch": epoch})


async def test_notifier_sends_latest_epoch_per_address_and_survives_send_errors() -> None:
    sent: list[tuple[str, int]] = []
    release = trio.Event()

    async def send(address: str, cmd: RemotingCommand, timeout: float) -> None:
        if address == "down:1":
            raise RemotingConnectError("down:1 refused")
        await release.wait()
        sent.append((address, int(cmd.ext_fields["masterEpoch"])))

    notifier = RoleChangeNotifier(send)
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        notifier.submit("a:1", note(2))
        notifier.submit("a:1", note(3))  # replaces the queued epoch 2
        notifier.submit("a:1", note(1))  # older than the queued one: ignored
        notifier.submit("down:1", note(3))
        await trio.testing.wait_all_tasks_blocked()
        notifier.submit("b:1", note(3))
        await trio.testing.wait_all_tasks_blocked()
        notifier.submit("b:1", note(4))  # cancels the in-flight epoch 3 send to b
        await trio.testing.wait_all_tasks_blocked()
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert sorted(sent) == [("a:1", 3), ("b:1", 4)]
    assert sorted(notifier.sent) == [("a:1", 3), ("b:1", 4)]
