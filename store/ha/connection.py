"""Master side of auto-switch replication, one per slave (upstream ``AutoSwitchHAConnection``), sans-IO.

Driver loop::

    conn = HAConnection(log, config, now=now, group=master_state)
    loop:
        events = conn.receive_data(chunk, now)            # slave handshake / acks
        while bufs := conn.poll_send(now): write bufs     # handshake reply, batches, heartbeats
        wait for: readable, new data in the log, or conn.next_deadline()
        events += conn.tick(now)                          # housekeeping (read-idle timeout)
    on EOF / error / CloseConnection: conn.connection_lost(now)

States: the connection starts in HANDSHAKE and adopts the state of the slave's packets; the first
TRANSFER ack switches it to TRANSFER and fixes where streaming starts (0 → the min offset, or the
start of the last file with the slave's ``isSyncFromLastFile``; else the acked offset).

Batches are at most ``haTransferBatchSize`` bytes, never cross a commit-log file end (``read_raw``) nor
an epoch boundary (the epoch is looked up for every batch, so a new epoch appended while streaming is
honoured), and carry the epoch, its start offset and the master's confirm offset. A header with an
empty body is sent when nothing was written for ``haSendHeartbeatInterval``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from store.config import MessageStoreConfig
from store.epoch import LONG_MAX, EpochEntry
from store.ha.events import AckReceived, CloseConnection, Event, HandshakeDone
from store.ha.packets import (
    HAConnectionState,
    HAProtocolError,
    MasterHandshake,
    SlaveAck,
    SlaveHandshake,
    SlavePacketDecoder,
    encode_transfer_header,
)
from store.ha.replica_log import ReplicaLog

if TYPE_CHECKING:
    from store.ha.master import HAMasterState

log = logging.getLogger("store.ha.connection")


class HAConnection:
    """The master's session with one slave."""

    def __init__(
        self,
        rlog: ReplicaLog,
        config: MessageStoreConfig,
        *,
        now: float = 0.0,
        group: HAMasterState | None = None,
    ) -> None:
        self.log = rlog
        self.group = group
        self.batch_size = config.haTransferBatchSize
        self.heartbeat_interval = config.haSendHeartbeatInterval / 1000
        self.housekeeping_interval = config.haHousekeepingInterval / 1000
        self.flow_control = config.haFlowControlEnable
        self.max_bytes_per_second = config.maxHaTransferByteInSecond
        self.state = HAConnectionState.HANDSHAKE
        self.slave_id = -1
        self.is_async_learner = False
        self.is_sync_from_last_file = False
        self.handshake_received = False
        #: First offset the slave reported in TRANSFER (upstream ``slaveRequestOffset``).
        self.request_offset = -1
        #: Latest offset the slave acknowledged (upstream ``slaveAckOffset``).
        self.ack_offset = -1
        #: Next offset to stream (upstream ``nextTransferFromWhere``).
        self.next_offset = -1
        #: Master max offset and time of the last batch (caught-up bookkeeping, §3.7).
        self.last_master_max_offset = -1
        self.last_transfer_time = 0.0
        self.close_reason: str | None = None
        self._decoder = SlavePacketDecoder()
        self._pending: list[bytes | memoryview] = []
        self._last_read = now
        self._last_write = now
        self._window_start = now
        self._window_bytes = 0

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        """Bytes from the slave."""
        if self.state == HAConnectionState.SHUTDOWN:
            return []
        if data:
            self._last_read = now
        try:
            packets = self._decoder.feed(data)
        except HAProtocolError as exc:
            return [self._close(f"malformed packet from slave: {exc}")]
        events: list[Event] = []
        for packet in packets:
            if isinstance(packet, SlaveHandshake):
                events.append(self._on_handshake(packet))
            else:
                events.extend(self._on_ack(packet, now))
            if events and isinstance(events[-1], CloseConnection):
                break
        return events

    def _on_handshake(self, packet: SlaveHandshake) -> Event:
        if self.state != HAConnectionState.HANDSHAKE or self.handshake_received:
            return self._close("slave sent a second handshake on one connection")
        self.handshake_received = True
        self.slave_id = packet.slaveBrokerId
        self.is_async_learner = packet.isAsyncLearner
        self.is_sync_from_last_file = packet.isSyncFromLastFile
        ef = self.log.epoch_file
        reply = MasterHandshake(self.log.max_offset, ef.last_epoch(), tuple(ef.pairs()))
        self._pending.append(reply.encode())
        log.info(
            "slave %d handshake (learner=%s, syncFromLastFile=%s); our epochs %s, max %d",
            self.slave_id,
            self.is_async_learner,
            self.is_sync_from_last_file,
            reply.entries,
            reply.maxOffset,
        )
        if self.group is not None:
            self.group.on_handshake(self)
        return HandshakeDone(self.slave_id, self.is_async_learner, self.is_sync_from_last_file)

    def _on_ack(self, packet: SlaveAck, now: float) -> list[Event]:
        if not self.handshake_received:
            return [self._close("slave sent TRANSFER before its handshake")]
        if self.state == HAConnectionState.HANDSHAKE:
            self.state = HAConnectionState.TRANSFER
        offset = packet.maxOffset
        if self.request_offset < 0:
            self.request_offset = offset
            if offset > self.log.max_offset:
                return [self._close(f"slave requests offset {offset}, beyond our max {self.log.max_offset}")]
        elif self.next_offset >= 0 and offset > self.next_offset:
            return [self._close(f"slave acked {offset}, more than we sent ({self.next_offset})")]
        self.ack_offset = offset
        if self.group is not None:
            self.group.on_ack(self, now)
        return [AckReceived(self.slave_id, offset)]

    # ------------------------------------------------------------------ output

    def _start_offset(self) -> int | None:
        rlog = self.log
        if self.request_offset == 0:
            if self.is_sync_from_last_file:
                start = rlog.max_offset - rlog.max_offset % rlog.mapped_file_size
                return max(start, rlog.min_offset)
            return rlog.min_offset
        if self.request_offset < rlog.min_offset:
            return None
        return self.request_offset

    def _confirm_offset(self) -> int:
        return self.group.confirm_offset() if self.group is not None else self.log.confirm_offset

    def _epoch_at(self, offset: int) -> EpochEntry | None:
        entries = self.log.epoch_file.entries(max_offset=LONG_MAX)
        for entry in entries:
            if entry.start_offset <= offset < entry.end_offset:
                return entry
        return None

    def _header_epoch(self, offset: int) -> tuple[int, int]:
        entry = self._epoch_at(offset) if offset >= 0 else None
        if entry is None:
            entry = self.log.epoch_file.last_entry()
        return (entry.epoch, entry.start_offset) if entry is not None else (-1, -1)

    def poll_send(self, now: float) -> list[bytes | memoryview]:
        """Buffers to write now, in order (one packet: header and body); empty when there is nothing.
        Call repeatedly until empty, then wait for new data, a read, or ``next_deadline()``. If the
        slave cannot be served, the connection closes itself (``closed`` becomes True)."""
        if self.state == HAConnectionState.SHUTDOWN:
            return []
        if self._pending:
            out, self._pending = self._pending, []
            self._last_write = now
            return out
        if self.state != HAConnectionState.TRANSFER or self.request_offset < 0:
            return []
        rlog = self.log
        if self.next_offset < 0:
            start = self._start_offset()
            if start is None:
                self._close(f"slave needs offset {self.request_offset}, our log starts at {rlog.min_offset}")
                return []
            self.next_offset = start
            log.info("slave %d: streaming from offset %d", self.slave_id, start)
        size = min(self.batch_size, rlog.max_offset - self.next_offset)
        if self.flow_control:
            if now >= self._window_start + 1.0:
                self._window_start, self._window_bytes = now, 0
            size = min(size, self.max_bytes_per_second - self._window_bytes)
        if size > 0:
            entry = self._epoch_at(self.next_offset)
            if entry is None:
                log.error(
                    "no epoch entry covers offset %d; cannot stream to slave %d",
                    self.next_offset,
                    self.slave_id,
                )
                size = 0
            else:
                if entry.end_offset != LONG_MAX:
                    size = min(size, entry.end_offset - self.next_offset)
                body = rlog.read_raw(self.next_offset, size)
                if len(body) > 0:
                    header = encode_transfer_header(
                        self.next_offset, len(body), entry.epoch, entry.start_offset, self._confirm_offset()
                    )
                    self.next_offset += len(body)
                    self.last_master_max_offset = rlog.max_offset
                    self.last_transfer_time = now
                    self._last_write = now
                    self._window_bytes += len(body)
                    return [header, body]
        if (
            self.next_offset >= rlog.max_offset
            and self.ack_offset >= rlog.max_offset
            and self.group is not None
            and not self.is_async_learner
        ):
            self.group.update_caught_up_time(self.slave_id, now)
        if now >= self._last_write + self.heartbeat_interval:
            epoch, start = self._header_epoch(self.next_offset)
            self._last_write = now
            return [encode_transfer_header(self.next_offset, 0, epoch, start, self._confirm_offset())]
        return []

    @property
    def closed(self) -> bool:
        return self.state == HAConnectionState.SHUTDOWN

    def has_data_to_send(self) -> bool:
        """True when ``poll_send`` would return a batch right now (ignoring flow control)."""
        return bool(self._pending) or (
            self.state == HAConnectionState.TRANSFER
            and self.request_offset >= 0
            and (self.next_offset < 0 or self.next_offset < self.log.max_offset)
        )

    # ------------------------------------------------------------------ timers and teardown

    def next_deadline(self) -> float:
        """When ``tick``/``poll_send`` must run next even without new data."""
        deadline = self._last_read + self.housekeeping_interval
        if self.state == HAConnectionState.TRANSFER:
            deadline = min(deadline, self._last_write + self.heartbeat_interval)
            if self.flow_control:
                deadline = min(deadline, self._window_start + 1.0)
        return deadline

    def tick(self, now: float) -> list[Event]:
        if self.state == HAConnectionState.SHUTDOWN:
            return []
        if now >= self._last_read + self.housekeeping_interval:
            return [self._close("nothing read from the slave for haHousekeepingInterval")]
        return []

    def _close(self, reason: str) -> CloseConnection:
        log.warning("closing HA connection of slave %d: %s", self.slave_id, reason)
        self.close_reason = reason
        self.connection_lost()
        return CloseConnection(reason)

    def connection_lost(self) -> None:
        """The socket is gone: SHUTDOWN, and the group forgets this connection."""
        if self.state == HAConnectionState.SHUTDOWN:
            return
        self.state = HAConnectionState.SHUTDOWN
        self._pending.clear()
        if self.group is not None:
            self.group.on_connection_closed(self)
