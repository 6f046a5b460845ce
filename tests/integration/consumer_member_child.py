"""A member of the consumer-group model in a process of its own, so that it can die with SIGKILL.

``python -m tests.integration.consumer_member_child NAMESRV NAME ORDERLY``: a Python push consumer
of the model's group and topic (the model's settings) that writes ``queue offset body`` for every
message it is given to stdout -- flushed before the listener returns, so before the offset can be
committed -- and prints ``started`` once it runs. It leaves gracefully when its stdin closes.
"""

from __future__ import annotations

import sys

import trio

from client.message import ConsumeStatus, MessageExt
from tests.integration.test_consumer_group_model import member_consumer


async def main(namesrv: str, name: str, orderly: bool) -> None:
    async def on_messages(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            sys.stdout.write(f"{m.queue_id} {m.queue_offset} {m.body.decode()}\n")
        sys.stdout.flush()
        await trio.sleep(0.001)
        return ConsumeStatus.CONSUME_SUCCESS

    async with member_consumer(namesrv, name, orderly, on_messages):
        print("started", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)  # until the parent closes it


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] == "1")
