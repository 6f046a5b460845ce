"""Hedged reads from name servers.

A name server whose host went dark takes a connection (or its attempt) and never answers; asking
the configured name servers one after the other then costs every read the whole call timeout
before the next one is asked. :func:`first_answer` asks one, and when it fails -- or has not
answered within a hedge delay -- the next one too, and so on; the first answer counts. Only for
requests that are harmless to ask twice (route, cluster and topic-list queries, KV reads).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import trio

from remoting.command import RemotingCommand
from remoting.errors import RemotingError

__all__ = ["NAMESRV_HEDGE_S", "first_answer"]

#: how long a name server may take to answer a read before the next one is asked too (a live
#: name server answers in well under a millisecond here; a loaded one in a few)
NAMESRV_HEDGE_S = 0.5


async def first_answer(
    invoke: Callable[[str, RemotingCommand], Awaitable[RemotingCommand]],
    addrs: Sequence[str],
    start: int,
    cmd: RemotingCommand,
    log: logging.Logger,
    hedge_s: float = NAMESRV_HEDGE_S,
) -> tuple[int, RemotingCommand]:
    """(index into ``addrs`` of the name server that answered first, its answer), asking
    ``addrs[start]`` first; one name server is asked directly. Raises the last RemotingError when
    none answered. Whatever the answer's code, it is an answer."""
    n = len(addrs)
    if n == 1:
        try:
            return 0, await invoke(addrs[0], cmd)
        except RemotingError as e:
            log.warning("name server %s: %s", addrs[0], e)
            raise
    answers: list[tuple[int, RemotingCommand]] = []
    errors: list[RemotingError] = []

    async def ask(i: int, nursery: trio.Nursery) -> None:
        idx = (start + i) % n
        failed = trio.Event()
        if i + 1 < n:
            nursery.start_soon(ask_next, i + 1, failed, nursery)
        try:
            # a copy each: the connection stamps its own opaque into the command
            response = await invoke(addrs[idx], msgspec.structs.replace(cmd))
        except RemotingError as e:
            log.warning("name server %s: %s", addrs[idx], e)
            errors.append(e)
            failed.set()
            return
        if not answers:
            answers.append((idx, response))
            nursery.cancel_scope.cancel()

    async def ask_next(i: int, failed: trio.Event, nursery: trio.Nursery) -> None:
        with trio.move_on_after(hedge_s):
            await failed.wait()
        await ask(i, nursery)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, 0, nursery)
    if answers:
        return answers[0]
    raise errors[-1]
