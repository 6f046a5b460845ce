"""Consumer offset stores: remote (clustering: the broker keeps the group's offsets) and local
(broadcasting: each client keeps its own, in memory or in a file).

Upstream: ``RemoteBrokerOffsetStore`` and ``LocalFileOffsetStore``. Both keep the current
offset of every queue in memory (``update``/``read_memory``); ``read_store`` asks the backing
store and answers -1 when it has no offset for the queue; ``persist_all`` writes the in-memory
offsets of the given queues out (UPDATE_CONSUMER_OFFSET per queue, or one JSON file written
atomically) and forgets queues not in the set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Protocol

import trio

from client.instance import ClientInstance
from client.message import MQBrokerError, MQClientError
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.protocol.common import Body, MessageQueue

__all__ = ["LocalOffsetStore", "OffsetSerializeWrapper", "OffsetStore", "RemoteOffsetStore"]

log = logging.getLogger("client.offset_store")


class OffsetSerializeWrapper(Body, kw_only=True):
    """The local offsets file: ``{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:offset}}``."""

    offsetTable: dict[MessageQueue, int] = {}


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None: ...

    def read_memory(self, mq: MessageQueue) -> int: ...

    async def read_store(self, mq: MessageQueue) -> int: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        if offset < 0:
            return
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int:
        return self.table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


class RemoteOffsetStore(_MemoryTable):
    """Offsets of a clustering group, stored by the master of each queue's broker group."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def load(self) -> None:
        return None

    async def read_store(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET; -1 when the broker has none (22). Other failures raise."""
        cmd = RemotingCommand(
            code=int(RequestCode.QUERY_CONSUMER_OFFSET),
            ext_fields={
                "consumerGroup": self.group,
                "topic": mq.topic,
                "queueId": str(mq.queueId),
                "bname": mq.brokerName,
            },
        )
        addr, response = await self.instance.invoke_master(mq.brokerName, mq.topic, cmd)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr)
        try:
            offset = int((response.ext_fields or {})["offset"])
        except (KeyError, ValueError):
            raise MQBrokerError(
                ResponseCode.SYSTEM_ERROR, "query offset response without offset", addr
            ) from None
        self.update(mq, offset)
        return offset

    async def update_remote(self, mq: MessageQueue, offset: int, *, oneway: bool) -> None:
        """UPDATE_CONSUMER_OFFSET to the queue's master (raises on failure; a master that failed
        over gets it at its new address, see :meth:`ClientInstance.invoke_master`)."""
        cmd = RemotingCommand(
            code=int(RequestCode.UPDATE_CONSUMER_OFFSET),
            ext_fields={
                "consumerGroup": self.group,
                "topic": mq.topic,
                "queueId": str(mq.queueId),
                "commitOffset": str(offset),
                "bname": mq.brokerName,
            },
        )
        if oneway:
            await self.instance.invoke_master_oneway(mq.brokerName, mq.topic, cmd)
            return
        addr, response = await self.instance.invoke_master(mq.brokerName, mq.topic, cmd)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.table.get(mq)
        if offset is None:
            return
        try:
            await self.update_remote(mq, offset, oneway=False)
        except (RemotingError, MQClientError) as e:  # also: the group has no master right now
            log.warning("persisting offset %d of %s for %s failed: %s", offset, mq, self.group, e)

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        wanted = set(mqs)
        for mq in [m for m in self.table if m not in wanted]:
            del self.table[mq]
        if not self.table:
            return
        items = sorted(self.table.items(), key=lambda kv: (kv[0].topic, kv[0].brokerName, kv[0].queueId))

        async def one(mq: MessageQueue, offset: int) -> None:
            try:
                await self.update_remote(mq, offset, oneway=oneway)
            except (RemotingError, MQClientError) as e:
                log.warning("persisting offset %d of %s for %s failed: %s", offset, mq, self.group, e)

        async with trio.open_nursery() as n:
            for mq, offset in items:
                n.start_soon(one, mq, offset)


class LocalOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer: in memory, and in ``<directory>/<clientId>/<group>/offsets.json``
    when a directory is given (written atomically: temp file, fsync, rename)."""

    def __init__(self, group: str, client_id: str, directory: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.group = group
        self.path: str | None = (
            os.path.join(os.fspath(directory), client_id, group, "offsets.json")
            if directory is not None
            else None
        )
        self._stored: dict[MessageQueue, int] = {}
        self._written = False

    async def load(self) -> None:
        if self.path is None:
            return
        data = await trio.to_thread.run_sync(_read_file, self.path)
        if data is None:
            return
        wrapper = OffsetSerializeWrapper.decode(data)
        self._stored = dict(wrapper.offsetTable)
        self.table.update(self._stored)

    async def read_store(self, mq: MessageQueue) -> int:
        offset = self._stored.get(mq, -1)
        if offset >= 0:
            self.update(mq, offset)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all(list(self.table))

    async def persist_all(self, mqs: Iterable[MessageQueue], *, oneway: bool = True) -> None:
        if self.path is None:
            return
        wanted = set(mqs)
        table = dict(self._stored)
        table.update({mq: off for mq, off in self.table.items() if mq in wanted})
        if table == self._stored and self._written:
            return
        data = OffsetSerializeWrapper(offsetTable=table).encode()
        await trio.to_thread.run_sync(_write_atomic, self.path, data)
        self._stored = table
        self._written = True


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _write_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
