"""Slave side of auto-switch replication (upstream ``AutoSwitchHAClient``), sans-IO.

Driver loop (trio layer or simulation)::

    client.prepare_connect()                 # READY: cut a partial tail, trim the epoch file
    ... connect to the master's HA address ...
    client.connection_made(now)              # -> HANDSHAKE, handshake queued
    loop:
        send(client.data_to_send())
        events = client.receive_data(chunk, now)   # or client.tick(now) at client.next_deadline()
        PersistRequired  -> make truncation + epoch file durable, then
                            events = client.persisted(now) (handle those too)
        CloseConnection  -> close, wait ev.retry_after, start again
    on EOF / socket error: client.connection_lost()

Handshake (RIP-44 truncation): the master answers with its epoch entries and max offset. An empty
local epoch history is a new replica: nothing is truncated, and the first ack is 0 when the log is
empty (the master then starts at its min offset, or at its last file with ``syncFromLastFile``),
else the local max. Otherwise the consistent point of the two histories is computed
(``EpochFile.find_consistent_point``); none → close and retry after 2 s; else truncate the log and
the epoch file to it.

Transfer: every batch must start exactly at the local max offset (a gap or overlap closes the
connection); a batch of a new epoch records ``(epoch, epochStartOffset)`` and is applied only after
the driver persisted the epoch file (``PersistRequired`` → ``persisted()``), so an entry is always
durable before the bytes it covers; the confirm offset becomes
``min(master confirm, local max)``; the new max is acked when it grew, and at least every
``haSendHeartbeatInterval``. Acks report the max offset, so the last one says everything the earlier
ones do: an ack not yet taken by ``data_to_send`` is replaced by the next (the master handles one ack
per write, however many batches it applied). Nothing read for ``haHousekeepingInterval`` closes the connection.
"""

from __future__ import annotations

import collections
import logging

from store.config import MessageStoreConfig
from store.epoch import EpochFile, EpochFileError
from store.ha.events import (
    Appended,
    CloseConnection,
    ConfirmOffsetChanged,
    EpochStarted,
    Event,
    PersistRequired,
    Truncated,
)
from store.ha.packets import (
    HAConnectionState,
    HAProtocolError,
    MasterHandshake,
    MasterPacketDecoder,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
)
from store.ha.replica_log import ReplicaLog
from store.ha.role import truncate_invalid_tail

log = logging.getLogger("store.ha.client")

#: Upstream waits at most 5 s for the master's handshake reply.
HANDSHAKE_TIMEOUT = 5.0
#: Upstream retries a failed truncation after 2 s.
TRUNCATE_RETRY = 2.0
#: Upstream retries a connection after 5 s.
RECONNECT_RETRY = 5.0


class HAClient:
    """One slave's replication session state; survives reconnects (``connection_lost``)."""

    def __init__(
        self, rlog: ReplicaLog, config: MessageStoreConfig, *, broker_id: int, now: float = 0.0
    ) -> None:
        self.log = rlog
        self.broker_id = broker_id
        self.sync_from_last_file = config.syncFromLastFile
        self.async_learner = config.asyncLearner
        self.heartbeat_interval = config.haSendHeartbeatInterval / 1000
        self.housekeeping_interval = config.haHousekeepingInterval / 1000
        self.state = HAConnectionState.READY
        self.close_reason: str | None = None
        self._decoder = MasterPacketDecoder()
        self._out = bytearray()
        #: where in ``_out`` the pending ack starts (-1: none), so a newer ack replaces it
        self._ack_at = -1
        self._last_read = now
        self._last_write = now
        self._handshake_sent_at = now
        self._awaiting_persist = False
        self._held: MasterTransfer | None = None
        self._backlog: collections.deque[MasterHandshake | MasterTransfer] = collections.deque()
        self._reported = -1

    # ------------------------------------------------------------------ lifecycle

    def prepare_connect(self) -> int:
        """READY step before each connection attempt: cut a partial tail, trim the epoch file.
        Returns the local max offset."""
        return truncate_invalid_tail(self.log)

    def connection_made(self, now: float) -> None:
        """A TCP connection to the master is up: send the handshake."""
        if self.state == HAConnectionState.SHUTDOWN:
            raise RuntimeError("client is shut down")
        self.state = HAConnectionState.HANDSHAKE
        self.close_reason = None
        self._decoder = MasterPacketDecoder()
        self._out.clear()
        self._ack_at = -1
        self._awaiting_persist = False
        self._held = None
        self._backlog.clear()
        self._reported = -1
        self._out += SlaveHandshake(self.sync_from_last_file, self.async_learner, self.broker_id).encode()
        self._last_read = self._last_write = self._handshake_sent_at = now

    def connection_lost(self) -> None:
        """The connection ended (EOF, error, or our own close): back to READY."""
        if self.state != HAConnectionState.SHUTDOWN:
            self.state = HAConnectionState.READY
        self._out.clear()
        self._ack_at = -1
        self._awaiting_persist = False
        self._held = None
        self._backlog.clear()

    def shutdown(self) -> None:
        self.state = HAConnectionState.SHUTDOWN
        self._out.clear()
        self._ack_at = -1

    def data_to_send(self) -> bytes:
        """Bytes to write to the master now (drains the buffer)."""
        data = bytes(self._out)
        self._out.clear()
        self._ack_at = -1
        return data

    @property
    def awaiting_persist(self) -> bool:
        return self._awaiting_persist

    def persisted(self, now: float) -> list[Event]:
        """The driver made the epoch file (and a handshake truncation) durable. Sends the first ack
        after a handshake, or applies the batch that started a new epoch; then goes on with the
        packets that arrived meanwhile. Returns the events of that work."""
        if not self._awaiting_persist:
            return []
        self._awaiting_persist = False
        events: list[Event] = []
        if self._held is not None:
            held, self._held = self._held, None
            events.extend(self._apply(held, now))
        elif self.state == HAConnectionState.TRANSFER:
            first = 0 if self.log.min_offset == self.log.max_offset else self.log.max_offset
            self._ack(first, now)
        events.extend(self._process(now))
        return events

    def next_deadline(self) -> float:
        """When ``tick`` must run next (heartbeat, housekeeping or handshake timeout)."""
        if self.state == HAConnectionState.HANDSHAKE:
            return min(
                self._handshake_sent_at + HANDSHAKE_TIMEOUT, self._last_read + self.housekeeping_interval
            )
        if self.state == HAConnectionState.TRANSFER:
            deadline = self._last_read + self.housekeeping_interval
            if not self._awaiting_persist:
                deadline = min(deadline, self._last_write + self.heartbeat_interval)
            return deadline
        return float("inf")

    def tick(self, now: float) -> list[Event]:
        """Timers: periodic offset report, read-idle housekeeping, handshake timeout."""
        if self.state == HAConnectionState.HANDSHAKE and now >= self._handshake_sent_at + HANDSHAKE_TIMEOUT:
            return [self._close("master did not answer the handshake in time", RECONNECT_RETRY)]
        if (
            self.state in (HAConnectionState.HANDSHAKE, HAConnectionState.TRANSFER)
            and now >= self._last_read + self.housekeeping_interval
        ):
            return [self._close("nothing read from the master for haHousekeepingInterval", RECONNECT_RETRY)]
        if (
            self.state == HAConnectionState.TRANSFER
            and not self._awaiting_persist
            and now >= self._last_write + self.heartbeat_interval
        ):
            self._ack(0 if self.log.min_offset == self.log.max_offset else self.log.max_offset, now)
        return []

    # ------------------------------------------------------------------ input

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[Event]:
        """Bytes from the master. Returns events; a ``CloseConnection`` ends the session."""
        if self.state not in (HAConnectionState.HANDSHAKE, HAConnectionState.TRANSFER):
            return []
        if data:
            self._last_read = now
        try:
            self._backlog.extend(self._decoder.feed(data))
        except HAProtocolError as exc:
            return [self._close(f"malformed packet from master: {exc}", RECONNECT_RETRY)]
        return self._process(now)

    def _process(self, now: float) -> list[Event]:
        """Handle buffered packets until none is left or a persist is awaited."""
        events: list[Event] = []
        while self._backlog and not self._awaiting_persist:
            packet = self._backlog.popleft()
            if isinstance(packet, MasterHandshake):
                if self.state != HAConnectionState.HANDSHAKE:
                    events.append(
                        self._close(f"master sent HANDSHAKE while we are {self.state.name}", RECONNECT_RETRY)
                    )
                    break
                events.extend(self._on_handshake(packet, now))
            else:
                if self.state != HAConnectionState.TRANSFER:
                    events.append(
                        self._close(f"master sent TRANSFER while we are {self.state.name}", RECONNECT_RETRY)
                    )
                    break
                events.extend(self._on_transfer(packet, now))
            if events and isinstance(events[-1], CloseConnection):
                break
        return events

    # ------------------------------------------------------------------ internals

    def _close(self, reason: str, retry_after: float) -> CloseConnection:
        log.warning("closing HA connection to master: %s", reason)
        self.close_reason = reason
        self.connection_lost()
        return CloseConnection(reason, retry_after)

    def _ack(self, offset: int, now: float) -> None:
        out = self._out
        if self._ack_at >= 0:
            del out[self._ack_at :]  # the pending ack is the last thing in the buffer
        self._ack_at = len(out)
        out += SlaveAck(offset).encode()
        self._reported = offset
        self._last_write = now

    def _on_handshake(self, packet: MasterHandshake, now: float) -> list[Event]:
        rlog = self.log
        local = rlog.epoch_file
        events: list[Event] = []
        if not local:
            log.info("local epoch history empty: new replica, no truncation")
        else:
            try:
                master = EpochFile.from_entries(packet.entries, packet.maxOffset)
            except EpochFileError as exc:
                return [self._close(f"master sent an inconsistent epoch history: {exc}", RECONNECT_RETRY)]
            point = local.find_consistent_point(master, local_max_offset=rlog.max_offset)
            first_local, first_master = local.first_entry(), master.first_entry()
            if (
                point < 0
                and first_local is not None
                and first_master is not None
                and first_local.start_offset == first_master.start_offset == rlog.min_offset
            ):
                # No shared epoch, but both histories begin where our log begins: nothing we hold
                # was ever the master's (e.g. our only epoch was a mastership nobody replicated).
                # Upstream stops here for manual repair; the empty prefix is a safe common point.
                point = first_local.start_offset
                log.warning(
                    "no common epoch with master %s (ours %s); both begin at %d: discarding our log",
                    master.pairs(),
                    local.pairs(),
                    point,
                )
            if point < 0:
                return [
                    self._close(
                        f"no consistent point between master epochs {master.pairs()} and ours {local.pairs()}",
                        TRUNCATE_RETRY,
                    )
                ]
            previous = rlog.max_offset
            if point < previous:
                log.info("truncating to consistent point %d (was %d)", point, previous)
                rlog.truncate_to(point)
                events.append(Truncated(point, previous))
            local.truncate_suffix(point)
            if rlog.confirm_offset > point:
                rlog.confirm_offset = point
        self.state = HAConnectionState.TRANSFER
        self._awaiting_persist = True
        events.append(PersistRequired())
        return events

    def _on_transfer(self, packet: MasterTransfer, now: float) -> list[Event]:
        rlog = self.log
        local_max = rlog.max_offset
        if packet.offset >= 0 and packet.offset != local_max and rlog.min_offset != local_max:
            kind = "gap" if packet.offset > local_max else "overlap"
            return [
                self._close(
                    f"{kind}: master sent offset {packet.offset}, local max is {local_max}",
                    RECONNECT_RETRY,
                )
            ]
        body = packet.body
        if body:
            ef = rlog.epoch_file
            if packet.epoch != ef.last_epoch():
                if packet.epochStartOffset > packet.offset:
                    return [
                        self._close(
                            f"epoch {packet.epoch} starts at {packet.epochStartOffset}, after batch {packet.offset}",
                            RECONNECT_RETRY,
                        )
                    ]
                if ef and packet.epochStartOffset < packet.offset:
                    return [
                        self._close(
                            f"epoch {packet.epoch} began at {packet.epochStartOffset} but our bytes up to "
                            f"{packet.offset} belong to epoch {ef.last_epoch()}",
                            RECONNECT_RETRY,
                        )
                    ]
            try:
                started = ef.append(packet.epoch, packet.epochStartOffset)
            except EpochFileError as exc:
                return [self._close(f"epoch history mismatch: {exc}", RECONNECT_RETRY)]
            if started:
                # The entry must be durable before any byte it covers can be.
                self._held = packet
                self._awaiting_persist = True
                return [EpochStarted(packet.epoch, packet.epochStartOffset), PersistRequired()]
        return self._apply(packet, now)

    def _apply(self, packet: MasterTransfer, now: float) -> list[Event]:
        rlog = self.log
        events: list[Event] = []
        if packet.body:
            rlog.append_raw(packet.offset, packet.body)
            local_max = rlog.max_offset
            events.append(Appended(packet.offset, local_max))
        else:
            local_max = rlog.max_offset
        if packet.confirmOffset >= 0:
            confirm = min(packet.confirmOffset, local_max)
            if confirm != rlog.confirm_offset:
                rlog.confirm_offset = confirm
                events.append(ConfirmOffsetChanged(confirm))
        if local_max > self._reported and rlog.min_offset != local_max:
            self._ack(local_max, now)
        return events
