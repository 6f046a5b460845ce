"""``async with`` for client objects that have ``start()`` and ``shutdown()``."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartStop:
    """Base of Producer / PullConsumer / PushConsumer: ``async with x:`` starts and shuts down."""

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()
