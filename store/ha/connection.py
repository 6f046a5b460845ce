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

Packets are at most ``haTransferBatchSize`` bytes, never cross a commit-log file end (``read_raw``) nor
an epoch boundary (the epoch is looked up for every ``poll_send``, so a new epoch appended while
streaming is honoured), and carry the epoch, its start offset and the master's confirm offset. One
``poll_send`` returns up to ``MAX_SEND_BYTES`` of consecutive packets (the driver writes them with one
vectored write). A header with an empty body is sent when nothing was written for
``haSendHeartbeatInterval``, and ``CONFIRM_PUSH_DELAY`` after the confirm offset moved past the one
last sent to a slave that has every byte (not in upstream: see that constant).

Ack clocking (Nagle-style; not in upstream, which streams whatever it has every loop): while the slave
has not acked everything already sent, less than one full packet of new data is *held* — for at most
``MAX_HOLD`` seconds. Under sends that wait for the slave (SYNC_MASTER) the data appended during one
round trip then travels in one packet and costs one ack, instead of a packet and an ack per message or
two. A slave far behind always has a full packet pending, so catch-up is never held.
"""

from __future__ import annotations

import logging
import math
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

#: Longest new data is held back waiting for the slave's ack of the previous packets (seconds).
MAX_HOLD = 0.02
#: Most body bytes one ``poll_send`` returns (several packets, one vectored write).
MAX_SEND_BYTES = 1024 * 1024
#: A confirm offset that moved after the last packet reaches a slave that has every byte in a header
#: of its own this long after (upstream: with the next data or heartbeat, up to
#: ``haSendHeartbeatInterval`` later, so a slave served its last message's consume-queue entry 5 s
#: late); data sent meanwhile carries it instead.
CONFIRM_PUSH_DELAY = 0.01


class HAConnection:
    """The master's session with one slave."""

    def __init__(
        self,
        rlog: ReplicaLog,
        config: MessageStoreConfig,
        *,
        now: float = 0.0,
        group: HAMasterState | None = None,
        peer: str = "",
    ) -> None:
        self.log = rlog
        self.group = group
        #: ``host:port`` of the other end, for log lines ("" when unknown)
        self.peer = peer
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
        #: End of the data sent so far and when the last data packet left (ack clocking).
        self._sent_end = -1
        self._sent_at = now
        self.close_reason: str | None = None
        self._decoder = SlavePacketDecoder()
        self._pending: list[bytes | memoryview] = []
        self._last_read = now
        self._last_write = now
        self._window_start = now
        self._window_bytes = 0
        #: the confirm offset carried by the last header sent, and when a newer one is due alone
        self._sent_confirm = -1
        self._confirm_due = math.inf

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        """Bytes from the slave. Of consecutive acks only the last is handled."""
        if self.state == HAConnectionState.SHUTDOWN:
            return []
        if data:
            self._last_read = now
        try:
            packets = self._decoder.feed(data)
        except HAProtocolError as exc:
            return [self._close(f"malformed packet from slave: {exc}")]
        events: list[Event] = []
        last = len(packets) - 1
        for i, packet in enumerate(packets):
            if isinstance(packet, SlaveHandshake):
                events.append(self._on_handshake(packet))
            elif i < last and isinstance(packets[i + 1], SlaveAck):
                continue  # acks report the slave's max offset: the next one supersedes this
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

    def sending_from(self) -> int:
        """The log offset the next TRANSFER packets start at -- resolved from the slave's request
        the first time it is known -- or -1 before (or when our log no longer holds it): for the
        driver to read those bytes in before :meth:`poll_send` (``streams.ReadAhead``)."""
        if self.next_offset < 0 and self.state == HAConnectionState.TRANSFER and self.request_offset >= 0:
            start = self._start_offset()
            if start is not None:
                self.next_offset = start
                log.info("slave %d: streaming from offset %d", self.slave_id, start)
        return self.next_offset

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

    def holding(self) -> bool:
        """True while new data waits for the slave's ack (see the module docstring); the hold ends at
        :meth:`hold_deadline` at the latest."""
        return (
            self.ack_offset < self._sent_end and 0 < self.log.max_offset - self.next_offset < self.batch_size
        )

    def hold_deadline(self) -> float:
        """When held data goes even without an ack."""
        return self._sent_at + MAX_HOLD

    def poll_send(self, now: float) -> list[bytes | memoryview]:
        """Buffers to write now, in order (whole packets: header, body, header, body, ...); empty when
        there is nothing. Call repeatedly until empty, then wait for new data, a read, or
        ``next_deadline()``. If the slave cannot be served, the connection closes itself (``closed``
        becomes True)."""
        if self.state == HAConnectionState.SHUTDOWN:
            return []
        if self._pending:
            out, self._pending = self._pending, []
            self._last_write = now
            return out
        if self.state != HAConnectionState.TRANSFER or self.request_offset < 0:
            return []
        rlog = self.log
        if self.next_offset < 0 and self.sending_from() < 0:
            self._close(f"slave needs offset {self.request_offset}, our log starts at {rlog.min_offset}")
            return []
        if self.flow_control and now >= self._window_start + 1.0:
            self._window_start, self._window_bytes = now, 0
        max_offset = rlog.max_offset
        if self.next_offset < max_offset and (not self.holding() or now >= self._sent_at + MAX_HOLD):
            out = self._packets(max_offset, now)
            if out:
                return out
        if (
            self.next_offset >= max_offset
            and self.ack_offset >= max_offset
            and self.group is not None
            and not self.is_async_learner
        ):
            self.group.update_caught_up_time(self.slave_id, now)
        if self.next_offset >= max_offset and self._confirm_offset() > self._sent_confirm:
            # the slave has every byte but not the confirm offset that makes the last ones readable
            if self._confirm_due == math.inf:
                self._confirm_due = now + CONFIRM_PUSH_DELAY
            if now >= self._confirm_due:
                return self._header_only(now)
        else:
            # nothing to push on its own (data waits to be sent, held for a batch, and carries the
            # confirm offset): a due time left from before would be a deadline in the past, and
            # the writer would wake again and again until the held data goes out
            self._confirm_due = math.inf
        if now >= self._last_write + self.heartbeat_interval:
            return self._header_only(now)
        return []

    def _header_only(self, now: float) -> list[bytes | memoryview]:
        """A heartbeat: a header at ``next_offset`` without body, with the current confirm offset."""
        epoch, start = self._header_epoch(self.next_offset)
        confirm = self._confirm_offset()
        self._last_write = now
        self._sent_confirm, self._confirm_due = confirm, math.inf
        return [encode_transfer_header(self.next_offset, 0, epoch, start, confirm)]

    def _packets(self, max_offset: int, now: float) -> list[bytes | memoryview]:
        """Consecutive packets from ``next_offset``: up to ``MAX_SEND_BYTES``, within one epoch."""
        size = min(MAX_SEND_BYTES, max_offset - self.next_offset)
        if self.flow_control:
            size = min(size, self.max_bytes_per_second - self._window_bytes)
        if size <= 0:
            return []
        entry = self._epoch_at(self.next_offset)
        if entry is None:
            self._close(f"no epoch entry covers offset {self.next_offset}; cannot stream")
            return []
        if entry.end_offset != LONG_MAX:
            size = min(size, entry.end_offset - self.next_offset)
        rlog = self.log
        confirm = self._confirm_offset()
        offset = self.next_offset
        end = offset + size
        out: list[bytes | memoryview] = []
        while offset < end:
            body = rlog.read_raw(offset, min(self.batch_size, end - offset))
            n = len(body)
            if n == 0:
                break
            out += (encode_transfer_header(offset, n, entry.epoch, entry.start_offset, confirm), body)
            offset += n
        if out:
            sent = offset - self.next_offset
            self.next_offset = self._sent_end = offset
            self.last_master_max_offset = max_offset
            self.last_transfer_time = self._sent_at = self._last_write = now
            self._window_bytes += sent
            self._sent_confirm, self._confirm_due = confirm, math.inf
        return out

    @property
    def closed(self) -> bool:
        return self.state == HAConnectionState.SHUTDOWN

    def has_data_to_send(self) -> bool:
        """True when ``poll_send`` would return a batch right now (ignoring flow control and holding)."""
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
            deadline = min(deadline, self._last_write + self.heartbeat_interval, self._confirm_due)
            if self.flow_control:
                deadline = min(deadline, self._window_start + 1.0)
                window_open = self._window_bytes < self.max_bytes_per_second
            else:
                window_open = True
            if window_open and self.holding():
                deadline = min(deadline, self._sent_at + MAX_HOLD)
        return deadline

    def tick(self, now: float) -> list[Event]:
        if self.state == HAConnectionState.SHUTDOWN:
            return []
        if now >= self._last_read + self.housekeeping_interval:
            return [self._close("nothing read from the slave for haHousekeepingInterval")]
        return []

    def _close(self, reason: str) -> CloseConnection:
        who = f"slave {self.slave_id}" if self.handshake_received else "a peer that sent no handshake"
        log.warning("closing HA connection of %s%s: %s", who, f" at {self.peer}" if self.peer else "", reason)
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
