"""A real broker and name server on ephemeral loopback ports, for the broker integration tests.

::

    async with broker_env(tmp_path) as env:
        response = await env.client.invoke(env.addr, request(...), 5)

One RemotingServer hosts both listeners (as a container does); the broker's store lives under
``tmp_path`` with small mapped files. ``env.client`` is a separate RemotingClient playing the
clients' and admin tools' part.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from hypothesis import HealthCheck, settings

from broker.config import BrokerConfig
from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.clock import monotonic_ms
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from store.config import MessageStoreConfig

CLUSTER = "TestCluster"
BROKER_NAME = "broker-a"
TIMEOUT = 5.0


@dataclass
class BrokerEnv:
    broker: BrokerController
    namesrv: NamesrvController
    #: the broker's address, ``127.0.0.1:<port>``
    addr: str
    namesrv_addr: str
    client: RemotingClient

    async def call(self, cmd: RemotingCommand, addr: str | None = None) -> RemotingCommand:
        return await self.client.invoke(addr or self.addr, cmd, TIMEOUT)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail after ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def model_settings(examples: int) -> Callable[[Any], Any]:
    """The hypothesis settings of a model test: ``examples`` sequences, no deadline (each runs real
    servers for seconds), no health check on slow or large draws."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def run_in_temp_dir(prefix: str, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
    """``trio.run(fn, root, *args)`` on a fresh directory, removed afterwards (for hypothesis tests,
    whose examples cannot share pytest's ``tmp_path``)."""
    root = tempfile.mkdtemp(prefix=prefix)
    try:
        trio.run(fn, root, *args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def broker_configs(root: str, namesrv_addr: str, **overrides: Any) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Configs of a test master; ``overrides`` go to whichever struct has the key."""
    bc = BrokerConfig(
        brokerClusterName=CLUSTER,
        brokerName=BROKER_NAME,
        brokerIP1="127.0.0.1",
        brokerIP2="127.0.0.1",
        listenPort=0,
        namesrvAddr=namesrv_addr,
    )
    sc = MessageStoreConfig(
        storePathRootDir=os.path.join(root, "store"),
        mappedFileSizeCommitLog=1024 * 1024,
        mappedFileSizeConsumeQueue=6000,
        haListenPort=0,
    )
    for key, value in overrides.items():
        target = bc if hasattr(bc, key) else sc
        assert hasattr(target, key), f"unknown config key {key}"
        setattr(target, key, value)
    return bc, sc


@asynccontextmanager
async def broker_env(
    tmp_path: os.PathLike[str],
    *,
    more_namesrvs: Sequence[str] = (),
    namesrv_clock: Callable[[], int] | None = None,
    **overrides: Any,
) -> AsyncIterator[BrokerEnv]:
    """Name server (on ``namesrv_clock`` if given: wall-clock ms) + broker (registered with it, and
    with ``more_namesrvs`` after it) + a client; torn down on exit."""
    root = os.fspath(tmp_path)
    async with trio.open_nursery() as nursery:
        namesrv = NamesrvController(
            NamesrvConfig(kvConfigPath=os.path.join(root, "kvConfig.json")),
            now_ms=namesrv_clock or monotonic_ms,
        )
        await nursery.start(namesrv.run)
        server = RemotingServer(name="broker-test")
        ns_listener = await server.add_listener("127.0.0.1", 0, namesrv.processor_table, name="namesrv")
        await nursery.start(server.run)
        namesrv_addr = f"127.0.0.1:{ns_listener.port}"
        async with RemotingClient(name="broker-test.broker-client") as broker_client:
            bc, sc = broker_configs(root, ";".join([namesrv_addr, *more_namesrvs]), **overrides)
            broker = BrokerController(bc, sc, client=broker_client)
            await nursery.start(broker.run, server)
            await wait_until(
                lambda: bool(namesrv.routes.brokerAddrTable.get(BROKER_NAME)), what="broker registration"
            )
            async with RemotingClient(name="broker-test.client") as client:
                yield BrokerEnv(broker, namesrv, broker.addr, namesrv_addr, client)
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def no_file_replaced(broker: BrokerController) -> AsyncIterator[None]:
    """Hold every lock under which the broker replaces a file (metadata, deletion marks, the
    queue manifest): a copy taken meanwhile sees each file whole. The copy is not one instant --
    files are read one after another while worker threads run -- and one taken while a file was
    renamed over could pair the new file's absence with its old backup, which no crash can."""
    async with AsyncExitStack() as stack:
        for lock in (
            broker.topics_file.lock,
            broker.groups_file.lock,
            broker.offsets_file.lock,
            broker.deleted_topics_file.lock,
            broker.store.maintenance_lock,
            broker.store.deletion_marks.save_lock,
        ):
            await stack.enter_async_context(lock)
        yield


#: files a crash copy found gone (replaced meanwhile), named when a check fails
SKIPPED: list[str] = []


def snapshot(root: str) -> str:
    """A copy of the broker's files as a SIGKILL would leave them: taken without yielding to the
    event loop, so no request, flush round or checkpoint of this process's tasks runs meanwhile,
    and read through the page cache, which holds every appended byte whether flushed or not."""
    copy = tempfile.mkdtemp(prefix="broker-model-crash-")
    for dirpath, _dirs, files in os.walk(root):
        target = os.path.join(copy, os.path.relpath(dirpath, root))
        os.makedirs(target, exist_ok=True)
        for name in files:
            try:  # a worker thread may be replacing a config file right now (write, then rename)
                shutil.copy2(os.path.join(dirpath, name), os.path.join(target, name))
            except FileNotFoundError:
                SKIPPED.append(os.path.join(dirpath, name))
    return copy
