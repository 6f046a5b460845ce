"""The name server component (upstream ``NamesrvController``).

Owns the route tables (:class:`~namesrv.routeinfo.RouteInfoManager`), the KV store
(:class:`~namesrv.kvconfig.KVConfigManager`) and the processor table to mount on a listener::

    namesrv = NamesrvController(config)
    await nursery.start(namesrv.run)          # loads kvConfig.json, then scans liveness
    await server.add_listener(host, config.listenPort, namesrv.processor_table, name="namesrv")

``run`` must have started before requests are served (it loads the KV file). A closed
connection removes the brokers registered over it at once; every
``scanNotActiveBrokerInterval`` ms brokers silent for longer than their heartbeat timeout (on a
monotonic clock, see :class:`NamesrvController`) are removed, and -- as upstream closes an expired
broker's channel -- a connection whose every registered broker expired is closed: a broker that
lives on registers again as soon as its connection to a name server ends
(:mod:`broker.controller`), not at its next period. (Brokers of one process share their
connection, so it stays while one of them still registers over it.) When
``notifyMinBrokerIdChanged`` is on, NOTIFY_MIN_BROKER_ID_CHANGE is sent oneway to the affected
brokers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

import trio

from namesrv.kvconfig import KVConfigManager
from namesrv.processor import NamesrvProcessor
from namesrv.routeinfo import MinBrokerIdChange, RemovalResult, RouteInfoManager
from remoting.client import PEER_UNACKED_TIMEOUT, RemotingClient
from remoting.clock import monotonic_ms
from remoting.codes import RequestCode
from remoting.command import request
from remoting.connection import Connection, ProcessorTable
from remoting.errors import RemotingError
from remoting.headers import encode_header

if TYPE_CHECKING:
    from namesrv.config import NamesrvConfig

log = logging.getLogger("namesrv")

#: Oneway send timeout for min-broker-id notifications (upstream 300 ms).
NOTIFY_TIMEOUT = 0.3


class NamesrvController:
    """One name server: tables, processor table, liveness scan (see the module docstring)."""

    def __init__(self, config: NamesrvConfig, *, now_ms: Callable[[], int] = monotonic_ms) -> None:
        """``now_ms``: the clock of broker liveness (and of ``waitSecondsForService``). Upstream
        measures liveness on the wall clock, so a step of it forward (NTP, a laptop resumed from a
        suspend) expired every broker at the next scan, and a step back kept a dead one routed."""
        self.config = config
        self.now_ms = now_ms
        self.started_at_ms = now_ms()
        self.routes = RouteInfoManager(config)
        self.kv = KVConfigManager(config.kvConfigPath)
        self.processor_table = ProcessorTable(on_close=self._on_close)
        NamesrvProcessor(self).register_into(self.processor_table)
        self._nursery: trio.Nursery | None = None
        self._client: RemotingClient | None = None
        #: the connections brokers registered over, by id (forgotten when they close)
        self.broker_connections: dict[Hashable, Connection] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the KV file, then scan broker liveness until cancelled."""
        await self.kv.load()
        self.started_at_ms = self.now_ms()
        try:
            async with (
                RemotingClient(name="namesrv.client", unacked_timeout=PEER_UNACKED_TIMEOUT) as client,
                trio.open_nursery() as nursery,
            ):
                self._client = client
                self._nursery = nursery
                task_status.started()
                log.info("name server started (scan every %d ms)", self.config.scanNotActiveBrokerInterval)
                while True:
                    await trio.sleep(self.config.scanNotActiveBrokerInterval / 1000)
                    self.scan_not_active_brokers()
        finally:
            self._nursery = None
            self._client = None

    def scan_not_active_brokers(self) -> RemovalResult:
        result = self.routes.scan_not_active_brokers(self.now_ms())
        self.send_notifications(result.notifications)
        if result.expired:
            self._close_expired({e.connection_id for e in result.expired})
        return result

    def _close_expired(self, connection_ids: set[Hashable]) -> None:
        """Close those of ``connection_ids`` that no live broker registered over."""
        connection_ids -= {live.connection_id for live in self.routes.brokerLiveTable.values()}
        for cid in connection_ids:
            conn = self.broker_connections.pop(cid, None)
            if conn is None or self._nursery is None:
                continue
            log.info("closing %s: every broker registered over it expired", conn.remote_address)
            self._nursery.start_soon(conn.aclose, "every broker registered over it expired")

    def _on_close(self, conn: Connection) -> None:
        self.broker_connections.pop(conn.id, None)
        result = self.routes.on_connection_closed(conn.id)
        self.send_notifications(result.notifications)

    def send_notifications(self, changes: Iterable[MinBrokerIdChange]) -> None:
        """Send NOTIFY_MIN_BROKER_ID_CHANGE oneway to every target, in the background."""
        for change in changes:
            if self._nursery is None or self._client is None:
                log.warning("not running: dropping min broker id notification %s", change)
                continue
            log.info(
                "min broker id of %s changed to %d (%s), notifying %s",
                change.brokerName,
                change.minBrokerId,
                change.minBrokerAddr,
                list(change.targets),
            )
            for addr in change.targets:
                self._nursery.start_soon(self._notify, addr, change)

    async def _notify(self, addr: str, change: MinBrokerIdChange) -> None:
        assert self._client is not None
        cmd = request(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, dict(encode_header(change.header())))
        try:
            await self._client.invoke_oneway(addr, cmd, NOTIFY_TIMEOUT)
        except RemotingError as e:
            log.warning("min broker id notification to %s failed: %s", addr, e)
