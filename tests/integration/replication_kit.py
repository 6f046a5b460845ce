"""Brokers of one group in one process, for the replication tests.

::

    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.SYNC_MASTER)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        ...
        await g.stop(slave, crash=True)          # as if killed: no final flush, abort file stays
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)   # same store dir

A name server and one RemotingServer host every broker (as a container does); each broker runs in
its own cancel scope so it can be stopped and started again on the same store directory.
Stores use 256 KiB commit-log files (tests cross file ends) and a small index.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from store.message_store import DefaultMessageStore
from tests.integration.broker_env import broker_configs, wait_until
from tests.integration.broker_requests import (
    create_topic_request,
    describe,
    messages,
    pull_header,
    pull_request,
    send_request,
)

TIMEOUT = 5.0
TOPIC = "ReplTopic"
FILE_SIZE = 256 * 1024

__all__ = [
    "TOPIC",
    "Group",
    "Running",
    "commit_log_bytes",
    "consume_queue_units",
    "pull_bodies",
    "replication_group",
    "wait_until",
]


@dataclass
class Running:
    name: str
    broker: BrokerController
    scope: trio.CancelScope
    done: trio.Event = field(default_factory=trio.Event)

    @property
    def addr(self) -> str:
        return self.broker.addr

    @property
    def ha_addr(self) -> str:
        return self.broker.ha_addr

    @property
    def store(self) -> DefaultMessageStore:
        return self.broker.store


@dataclass
class Group:
    root: Path
    nursery: trio.Nursery
    server: RemotingServer
    namesrv: NamesrvController
    namesrv_addr: str
    broker_client: RemotingClient
    client: RemotingClient

    async def start(self, name: str, **overrides: Any) -> Running:
        """Start (or restart) broker ``name`` with its store under ``root/name``."""
        kw: dict[str, Any] = dict(
            mappedFileSizeCommitLog=FILE_SIZE,
            maxHashSlotNum=1000,
            maxIndexNum=4000,
            haSendHeartbeatInterval=500,
        )
        kw.update(overrides)
        bc, sc = broker_configs(os.fspath(self.root / name), self.namesrv_addr, **kw)
        broker = BrokerController(bc, sc, client=self.broker_client)
        scope = trio.CancelScope()
        running = Running(name, broker, scope)

        async def run(*, task_status: trio.TaskStatus[None]) -> None:
            try:
                with scope:
                    await broker.run(self.server, task_status=task_status)
            finally:
                running.done.set()

        await self.nursery.start(run)
        return running

    async def stop(self, running: Running, *, crash: bool = False) -> None:
        """Stop a broker; ``crash`` leaves its store as a killed process would (maps written but not
        flushed by us, abort file present, no checkpoint written)."""
        if crash:
            store = running.broker.store

            async def abandon() -> None:
                store.abandon()

            store.shutdown = abandon  # type: ignore[method-assign]
        running.scope.cancel()
        await running.done.wait()

    async def call(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(addr, cmd, TIMEOUT)

    async def send(self, addr: str, body: bytes, *, queue_id: int = 0, topic: str = TOPIC) -> RemotingCommand:
        return await self.call(addr, send_request(topic, body, queue_id=queue_id))

    async def send_ok(
        self, addr: str, body: bytes, *, queue_id: int = 0, topic: str = TOPIC
    ) -> RemotingCommand:
        response = await self.send(addr, body, queue_id=queue_id, topic=topic)
        assert response.code == ResponseCode.SUCCESS, describe(response)
        return response

    async def create_topic(self, addr: str, topic: str = TOPIC, queues: int = 4) -> None:
        response = await self.call(addr, create_topic_request(topic, queues))
        assert response.code == ResponseCode.SUCCESS, describe(response)


@asynccontextmanager
async def replication_group(tmp_path: Path) -> AsyncIterator[Group]:
    root = Path(tmp_path)
    async with trio.open_nursery() as nursery:
        namesrv = NamesrvController(NamesrvConfig(kvConfigPath=os.fspath(root / "kvConfig.json")))
        await nursery.start(namesrv.run)
        server = RemotingServer(name="repl-test")
        ns_listener = await server.add_listener("127.0.0.1", 0, namesrv.processor_table, name="namesrv")
        await nursery.start(server.run)
        async with (
            RemotingClient(name="repl-test.brokers") as broker_client,
            RemotingClient(name="repl-test.client") as client,
        ):
            yield Group(
                root, nursery, server, namesrv, f"127.0.0.1:{ns_listener.port}", broker_client, client
            )
            nursery.cancel_scope.cancel()


async def pull_bodies(g: Group, addr: str, queue_id: int, topic: str = TOPIC) -> list[bytes]:
    """Every readable message of a queue, in order (pulling on until nothing is found)."""
    bodies: list[bytes] = []
    offset = 0
    while True:
        response = await g.call(addr, pull_request("G", topic, queue_id, offset, max_nums=32))
        if response.code != ResponseCode.SUCCESS:
            return bodies
        bodies += [m.body for m in messages(response)]
        offset = pull_header(response).nextBeginOffset


# --- what is on disk ---------------------------------------------------------------------------------


def commit_log_bytes(store_root: Path, start: int, end: int, file_size: int = FILE_SIZE) -> bytes:
    """Bytes ``[start, end)`` of the commit log as the files on disk hold them."""
    out = bytearray()
    pos = start
    while pos < end:
        base = pos // file_size * file_size
        path = store_root / "commitlog" / f"{base:020d}"
        with open(path, "rb") as f:
            f.seek(pos - base)
            chunk = f.read(min(end, base + file_size) - pos)
        if not chunk:
            raise AssertionError(f"{path} has no bytes at {pos}")
        out += chunk
        pos += len(chunk)
    return bytes(out)


def consume_queue_units(store: DefaultMessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """Every unit ``(phys offset, size, tags code)`` of a consume queue, from min to max offset."""
    cq = store.queues.get(topic, queue_id)
    if cq is None:
        return []
    units = []
    for qo in range(cq.min_offset, cq.max_offset):
        unit = cq.unit(qo)
        assert unit is not None, f"{topic}/{queue_id} has no unit {qo}"
        units.append(tuple(unit))
    return units  # type: ignore[return-value]
