"""Classic master/slave replication (no controller; upstream ``DefaultHAClient``/``DefaultHAConnection``).

No epochs and no truncation. The slave reports its max offset (8 bytes) on connect, after each applied
batch and at least every ``haSendHeartbeatInterval``; the master streams from the first report
(0 → the start of its last commit-log file) with 12-byte headers ``offset, bodySize`` (0 = heartbeat).
A batch whose offset differs from the slave's max offset (unless the slave is empty) closes the
connection. Either side closes after ``haHousekeepingInterval`` without reading anything.

Same driver shape as the auto-switch classes: ``receive_data``, ``data_to_send``/``poll_send``,
``tick``, ``next_deadline``, ``connection_lost``.
"""

from __future__ import annotations

import logging

from store.config import MessageStoreConfig
from store.ha.events import AckReceived, Appended, CloseConnection, Event
from store.ha.packets import (
    ClassicReport,
    ClassicReportDecoder,
    ClassicTransferDecoder,
    HAProtocolError,
    encode_classic_header,
)
from store.ha.replica_log import ReplicaLog

log = logging.getLogger("store.ha.classic")


class ClassicHAClient:
    """Slave side of classic replication."""

    def __init__(self, rlog: ReplicaLog, config: MessageStoreConfig, *, now: float = 0.0) -> None:
        self.log = rlog
        self.heartbeat_interval = config.haSendHeartbeatInterval / 1000
        self.housekeeping_interval = config.haHousekeepingInterval / 1000
        self.connected = False
        self.close_reason: str | None = None
        self._decoder = ClassicTransferDecoder()
        self._out = bytearray()
        self._reported = -1
        self._last_read = now
        self._last_write = now

    def connection_made(self, now: float) -> None:
        self.connected = True
        self.close_reason = None
        self._decoder = ClassicTransferDecoder()
        self._out.clear()
        self._last_read = now
        self._report(now)

    def connection_lost(self) -> None:
        self.connected = False
        self._out.clear()

    def data_to_send(self) -> bytes:
        data = bytes(self._out)
        self._out.clear()
        return data

    def _report(self, now: float) -> None:
        self._reported = self.log.max_offset
        self._out += ClassicReport(self._reported).encode()
        self._last_write = now

    def _close(self, reason: str) -> CloseConnection:
        log.warning("closing classic HA connection to master: %s", reason)
        self.close_reason = reason
        self.connection_lost()
        return CloseConnection(reason)

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        if not self.connected:
            return []
        if data:
            self._last_read = now
        try:
            packets = self._decoder.feed(data)
        except HAProtocolError as exc:
            return [self._close(f"malformed packet from master: {exc}")]
        events: list[Event] = []
        rlog = self.log
        for packet in packets:
            empty = rlog.min_offset == rlog.max_offset
            if not empty and packet.offset != rlog.max_offset:
                events.append(
                    self._close(f"master sent offset {packet.offset}, local max is {rlog.max_offset}")
                )
                break
            if packet.body:
                rlog.append_raw(packet.offset, packet.body)
                events.append(Appended(packet.offset, rlog.max_offset))
        if self.connected and rlog.max_offset > self._reported:
            self._report(now)
        return events

    def next_deadline(self) -> float:
        if not self.connected:
            return float("inf")
        return min(self._last_write + self.heartbeat_interval, self._last_read + self.housekeeping_interval)

    def tick(self, now: float) -> list[Event]:
        if not self.connected:
            return []
        if now >= self._last_read + self.housekeeping_interval:
            return [self._close("nothing read from the master for haHousekeepingInterval")]
        if now >= self._last_write + self.heartbeat_interval:
            self._report(now)
        return []


class ClassicHAConnection:
    """Master side of classic replication, one per slave."""

    def __init__(
        self, rlog: ReplicaLog, config: MessageStoreConfig, *, now: float = 0.0, peer: str = ""
    ) -> None:
        self.log = rlog
        #: ``host:port`` of the slave, for log lines ("" when unknown)
        self.peer = peer
        self.batch_size = config.haTransferBatchSize
        self.heartbeat_interval = config.haSendHeartbeatInterval / 1000
        self.housekeeping_interval = config.haHousekeepingInterval / 1000
        self.request_offset = -1
        self.ack_offset = -1
        self.next_offset = -1
        self.closed = False
        self.close_reason: str | None = None
        self._decoder = ClassicReportDecoder()
        self._last_read = now
        self._last_write = now

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        if self.closed:
            return []
        if data:
            self._last_read = now
        try:
            reports = self._decoder.feed(data)
        except HAProtocolError as exc:
            return [self._close(f"malformed report from slave: {exc}")]
        if not reports:
            return []
        # Upstream reads only the last complete 8-byte group of what arrived.
        offset = reports[-1].maxOffset
        rlog = self.log
        if self.request_offset < 0:
            if offset > rlog.max_offset:
                # not this master's slave (or a stranger): its report must not count as an ack
                return [
                    self._close(f"slave requests {offset}, we hold [{rlog.min_offset}, {rlog.max_offset}]")
                ]
            self.request_offset = offset
        elif offset > max(self.next_offset, self.request_offset):
            # upstream counts any report as an ack: a SYNC_MASTER would answer a send its real
            # slave does not hold yet
            return [
                self._close(
                    f"slave acked {offset}, more than we sent ({max(self.next_offset, self.request_offset)})"
                )
            ]
        self.ack_offset = offset
        return [AckReceived(-1, offset)]

    def sending_from(self) -> int:
        """The log offset the next transfer starts at -- resolved from the slave's first report
        (0: the start of our last file) -- or -1 before it (or when our log does not hold it):
        for the driver to read those bytes in before :meth:`poll_send` (``streams.ReadAhead``)."""
        if self.next_offset < 0 and not self.closed and self.request_offset >= 0:
            rlog = self.log
            if self.request_offset == 0:
                start = rlog.max_offset - rlog.max_offset % rlog.mapped_file_size
                self.next_offset = max(start, rlog.min_offset)
            elif rlog.min_offset <= self.request_offset <= rlog.max_offset:
                self.next_offset = self.request_offset
        return self.next_offset

    def poll_send(self, now: float) -> list[bytes | memoryview]:
        if self.closed or self.request_offset < 0:
            return []
        rlog = self.log
        if self.next_offset < 0 and self.sending_from() < 0:
            self._close(
                f"slave requests {self.request_offset}, we hold [{rlog.min_offset}, {rlog.max_offset}]"
            )
            return []
        size = min(self.batch_size, rlog.max_offset - self.next_offset)
        if size > 0:
            body = rlog.read_raw(self.next_offset, size)
            header = encode_classic_header(self.next_offset, len(body))
            self.next_offset += len(body)
            self._last_write = now
            return [header, body]
        if now >= self._last_write + self.heartbeat_interval:
            self._last_write = now
            return [encode_classic_header(self.next_offset, 0)]
        return []

    def next_deadline(self) -> float:
        return min(self._last_write + self.heartbeat_interval, self._last_read + self.housekeeping_interval)

    def tick(self, now: float) -> list[Event]:
        if not self.closed and now >= self._last_read + self.housekeeping_interval:
            return [self._close("nothing read from the slave for haHousekeepingInterval")]
        return []

    def _close(self, reason: str) -> CloseConnection:
        log.warning("closing classic HA connection%s: %s", f" of {self.peer}" if self.peer else "", reason)
        self.close_reason = reason
        self.closed = True
        return CloseConnection(reason)

    def connection_lost(self) -> None:
        self.closed = True
