"""HA replication packets: byte layouts and incremental decoders (sans-IO).

Auto-switch protocol (upstream ``AutoSwitchHAClient`` / ``AutoSwitchHAConnection``), all integers
big-endian:

* slave → master HANDSHAKE, 16 bytes: ``int state=1, short isSyncFromLastFile, short isAsyncLearner,
  long slaveBrokerId``
* slave → master TRANSFER ack, 12 bytes: ``int state=2, long slaveMaxOffset``
* master → slave HANDSHAKE, 20-byte header + body: ``int state=1, int bodySize=12*N, long masterMaxOffset,
  int masterLastEpoch`` then N × ``(int epoch, long startOffset)``
* master → slave TRANSFER, 36-byte header + body: ``int state=2, int bodySize, long offset, int epoch,
  long epochStartOffset, long confirmOffset`` then ``bodySize`` raw commit-log bytes (0 = heartbeat)

Classic protocol (upstream ``DefaultHAClient`` / ``DefaultHAConnection``):

* slave → master: 8 bytes, ``long slaveMaxOffset``
* master → slave: 12-byte header ``long offset, int bodySize`` + body (0 = heartbeat)

Decoders accept arbitrary chunks (``feed``) and return every complete packet; a packet's body is
delivered only once fully received, as a ``memoryview`` of the received bytes (no copy). Malformed input raises ``HAProtocolError``, after which the
decoder is unusable (the connection must be closed).
"""

from __future__ import annotations

import enum
import struct

import msgspec


class HAConnectionState(enum.IntEnum):
    """Upstream ``HAConnectionState``; the ordinal goes on the wire."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class HAProtocolError(Exception):
    """The peer sent bytes that violate the HA protocol; close the connection."""


#: Upstream buffer limit for the master's epoch list in a handshake.
MAX_HANDSHAKE_EPOCH_ENTRIES = 1000
#: Largest body a decoder accepts (a sane bound; upstream batches are ``haTransferBatchSize``, 32 KiB).
MAX_BODY_SIZE = 64 * 1024 * 1024

_STATE = struct.Struct(">i")
_STATE_SIZE = struct.Struct(">ii")
_SLAVE_HANDSHAKE = struct.Struct(">ihhq")  # 16
_SLAVE_ACK = struct.Struct(">iq")  # 12
_MASTER_HANDSHAKE = struct.Struct(">iiqi")  # 20
_EPOCH_ENTRY = struct.Struct(">iq")  # 12
_TRANSFER = struct.Struct(">iiqiqq")  # 36
_CLASSIC_REPORT = struct.Struct(">q")  # 8
_CLASSIC_TRANSFER = struct.Struct(">qi")  # 12

SLAVE_HANDSHAKE_SIZE = _SLAVE_HANDSHAKE.size
SLAVE_ACK_SIZE = _SLAVE_ACK.size
MASTER_HANDSHAKE_HEADER_SIZE = _MASTER_HANDSHAKE.size
EPOCH_ENTRY_SIZE = _EPOCH_ENTRY.size
TRANSFER_HEADER_SIZE = _TRANSFER.size
CLASSIC_REPORT_SIZE = _CLASSIC_REPORT.size
CLASSIC_HEADER_SIZE = _CLASSIC_TRANSFER.size


# ---------------------------------------------------------------------- packets


class SlaveHandshake(msgspec.Struct, frozen=True):
    """Slave → master, HANDSHAKE state."""

    isSyncFromLastFile: bool
    isAsyncLearner: bool
    slaveBrokerId: int

    def encode(self) -> bytes:
        return _SLAVE_HANDSHAKE.pack(
            HAConnectionState.HANDSHAKE,
            int(self.isSyncFromLastFile),
            int(self.isAsyncLearner),
            self.slaveBrokerId,
        )


class SlaveAck(msgspec.Struct, frozen=True):
    """Slave → master, TRANSFER state: the slave's max physical offset."""

    maxOffset: int

    def encode(self) -> bytes:
        return _SLAVE_ACK.pack(HAConnectionState.TRANSFER, self.maxOffset)


class MasterHandshake(msgspec.Struct, frozen=True):
    """Master → slave, HANDSHAKE state: the master's epoch entries ``(epoch, startOffset)`` ascending."""

    maxOffset: int
    lastEpoch: int
    entries: tuple[tuple[int, int], ...]

    def encode(self) -> bytes:
        if len(self.entries) > MAX_HANDSHAKE_EPOCH_ENTRIES:
            raise ValueError(f"{len(self.entries)} epoch entries exceed the handshake limit")
        header = _MASTER_HANDSHAKE.pack(
            HAConnectionState.HANDSHAKE, EPOCH_ENTRY_SIZE * len(self.entries), self.maxOffset, self.lastEpoch
        )
        return header + b"".join(_EPOCH_ENTRY.pack(e, s) for e, s in self.entries)


class MasterTransfer(msgspec.Struct, frozen=True):
    """Master → slave, TRANSFER state. Empty ``body`` = heartbeat (offset = next transfer offset).
    Decoded bodies are read-only ``memoryview``s of the received bytes."""

    offset: int
    epoch: int
    epochStartOffset: int
    confirmOffset: int
    body: bytes | memoryview = b""

    def header(self) -> bytes:
        return encode_transfer_header(
            self.offset, len(self.body), self.epoch, self.epochStartOffset, self.confirmOffset
        )

    def encode(self) -> bytes:
        return self.header() + bytes(self.body)


def encode_transfer_header(offset: int, body_size: int, epoch: int, epoch_start: int, confirm: int) -> bytes:
    """The 36-byte TRANSFER header; the body (a commit-log memoryview) is sent after it unchanged."""
    return _TRANSFER.pack(HAConnectionState.TRANSFER, body_size, offset, epoch, epoch_start, confirm)


class ClassicReport(msgspec.Struct, frozen=True):
    """Classic slave → master: max physical offset."""

    maxOffset: int

    def encode(self) -> bytes:
        return _CLASSIC_REPORT.pack(self.maxOffset)


class ClassicTransfer(msgspec.Struct, frozen=True):
    """Classic master → slave: raw commit-log bytes at ``offset`` (empty = heartbeat)."""

    offset: int
    body: bytes | memoryview = b""

    def header(self) -> bytes:
        return encode_classic_header(self.offset, len(self.body))

    def encode(self) -> bytes:
        return self.header() + bytes(self.body)


def encode_classic_header(offset: int, body_size: int) -> bytes:
    return _CLASSIC_TRANSFER.pack(offset, body_size)


SlavePacket = SlaveHandshake | SlaveAck
MasterPacket = MasterHandshake | MasterTransfer


# ---------------------------------------------------------------------- decoders


class _Decoder:
    """Incremental frame decoding without copying bodies.

    A frame that lies wholly inside one ``feed`` is parsed in place: its body is a ``memoryview`` of
    the fed bytes (kept alive by the view; the fed object must not change afterwards — ``bytes``
    never does, anything else is copied once). Only a frame split over several chunks is assembled
    in a buffer, by copying just its own bytes. Subclasses give :meth:`_frame_size` (total length of
    the frame at ``pos`` once its header is in, validating it) and :meth:`_parse` (the packet of a
    complete frame, or None when incomplete); ``HEADER`` is the most bytes the frame size may need,
    and no frame is shorter.
    """

    HEADER = 4

    def __init__(self) -> None:
        self._buf = bytearray()
        self._failed: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete packet."""
        return len(self._buf)

    def _fail(self, message: str) -> HAProtocolError:
        self._failed = message
        return HAProtocolError(message)

    def feed(self, data: bytes | bytearray | memoryview) -> list:
        if self._failed is not None:
            raise HAProtocolError(f"decoder already failed: {self._failed}")
        if type(data) is not bytes:
            data = bytes(data)
        out: list = []
        buf = self._buf
        pos = 0
        end = len(data)
        # First complete a frame begun in an earlier chunk, copying only its missing bytes.
        while buf:
            size = self._frame_size(buf, 0) if len(buf) >= self.HEADER else None
            if size is not None and len(buf) == size:
                frame = bytes(buf)
                buf.clear()
                result = self._parse(frame, 0)
                assert result is not None
                out.append(result[0])
                break
            if pos == end:
                return out
            take = min((self.HEADER if size is None else size) - len(buf), end - pos)
            buf += memoryview(data)[pos : pos + take]
            pos += take
        while True:
            result = self._parse(data, pos)
            if result is None:
                break
            packet, pos = result
            out.append(packet)
        if pos < end:
            buf += data[pos:]
        return out

    def _frame_size(self, buf: bytes | bytearray, pos: int) -> int:
        raise NotImplementedError

    def _parse(self, buf: bytes, pos: int) -> tuple[object, int] | None:
        raise NotImplementedError


class SlavePacketDecoder(_Decoder):
    """Master side: decodes what a slave sends (``SlaveHandshake``, ``SlaveAck``).

    Upstream parses once 12 bytes are buffered even for a 16-byte handshake [quirk]; we wait for
    all 16."""

    HEADER = 4

    def feed(self, data: bytes | bytearray | memoryview) -> list[SlavePacket]:
        return super().feed(data)

    def _frame_size(self, buf: bytes | bytearray, pos: int) -> int:
        (state,) = _STATE.unpack_from(buf, pos)
        if state == HAConnectionState.HANDSHAKE:
            return SLAVE_HANDSHAKE_SIZE
        if state == HAConnectionState.TRANSFER:
            return SLAVE_ACK_SIZE
        raise self._fail(f"slave packet with state {state}, expected HANDSHAKE(1) or TRANSFER(2)")

    def _parse(self, buf: bytes, pos: int) -> tuple[SlavePacket, int] | None:
        if len(buf) - pos < 4:
            return None
        (state,) = _STATE.unpack_from(buf, pos)
        if state == HAConnectionState.HANDSHAKE:
            if len(buf) - pos < SLAVE_HANDSHAKE_SIZE:
                return None
            _, sync_last, learner, broker_id = _SLAVE_HANDSHAKE.unpack_from(buf, pos)
            for name, flag in (("isSyncFromLastFile", sync_last), ("isAsyncLearner", learner)):
                if flag not in (0, 1):
                    raise self._fail(f"slave handshake flag {name}={flag}, expected 0 or 1")
            return SlaveHandshake(bool(sync_last), bool(learner), broker_id), pos + SLAVE_HANDSHAKE_SIZE
        if state == HAConnectionState.TRANSFER:
            if len(buf) - pos < SLAVE_ACK_SIZE:
                return None
            _, offset = _SLAVE_ACK.unpack_from(buf, pos)
            if offset < 0:
                raise self._fail(f"slave acked a negative offset {offset}")
            return SlaveAck(offset), pos + SLAVE_ACK_SIZE
        raise self._fail(f"slave packet with state {state}, expected HANDSHAKE(1) or TRANSFER(2)")


class MasterPacketDecoder(_Decoder):
    """Slave side: decodes what a master sends (``MasterHandshake``, ``MasterTransfer``). A
    transfer's body is a ``memoryview`` (see :class:`_Decoder`)."""

    HEADER = 8  # state and body size; the shortest frame (a handshake header) has 20

    def __init__(self, max_body_size: int = MAX_BODY_SIZE) -> None:
        super().__init__()
        self.max_body_size = max_body_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[MasterPacket]:
        return super().feed(data)

    def _body_size(self, size: int, what: str) -> int:
        if size < 0 or size > self.max_body_size:
            raise self._fail(f"{what} body size {size} out of range [0, {self.max_body_size}]")
        return size

    def _handshake_body_size(self, size: int) -> int:
        size = self._body_size(size, "master handshake")
        if size % EPOCH_ENTRY_SIZE:
            raise self._fail(f"master handshake body size {size} is not a multiple of {EPOCH_ENTRY_SIZE}")
        if size // EPOCH_ENTRY_SIZE > MAX_HANDSHAKE_EPOCH_ENTRIES:
            raise self._fail(f"master handshake carries {size // EPOCH_ENTRY_SIZE} epoch entries")
        return size

    def _frame_size(self, buf: bytes | bytearray, pos: int) -> int:
        state, size = _STATE_SIZE.unpack_from(buf, pos)
        if state == HAConnectionState.HANDSHAKE:
            return MASTER_HANDSHAKE_HEADER_SIZE + self._handshake_body_size(size)
        if state == HAConnectionState.TRANSFER:
            return TRANSFER_HEADER_SIZE + self._body_size(size, "transfer")
        raise self._fail(f"master packet with state {state}, expected HANDSHAKE(1) or TRANSFER(2)")

    def _parse(self, buf: bytes, pos: int) -> tuple[MasterPacket, int] | None:
        avail = len(buf) - pos
        if avail < 4:
            return None
        (state,) = _STATE.unpack_from(buf, pos)
        if state == HAConnectionState.HANDSHAKE:
            if avail < MASTER_HANDSHAKE_HEADER_SIZE:
                return None
            _, size, max_offset, last_epoch = _MASTER_HANDSHAKE.unpack_from(buf, pos)
            size = self._handshake_body_size(size)
            end = pos + MASTER_HANDSHAKE_HEADER_SIZE + size
            if len(buf) < end:
                return None
            entries = tuple(
                _EPOCH_ENTRY.unpack_from(buf, p)
                for p in range(pos + MASTER_HANDSHAKE_HEADER_SIZE, end, EPOCH_ENTRY_SIZE)
            )
            return MasterHandshake(max_offset, last_epoch, entries), end
        if state == HAConnectionState.TRANSFER:
            if avail < TRANSFER_HEADER_SIZE:
                return None
            _, size, offset, epoch, epoch_start, confirm = _TRANSFER.unpack_from(buf, pos)
            size = self._body_size(size, "transfer")
            end = pos + TRANSFER_HEADER_SIZE + size
            if len(buf) < end:
                return None
            body = memoryview(buf)[pos + TRANSFER_HEADER_SIZE : end]
            return MasterTransfer(offset, epoch, epoch_start, confirm, body), end
        raise self._fail(f"master packet with state {state}, expected HANDSHAKE(1) or TRANSFER(2)")


class ClassicReportDecoder(_Decoder):
    """Classic master side: 8-byte offset reports from the slave."""

    HEADER = CLASSIC_REPORT_SIZE

    def feed(self, data: bytes | bytearray | memoryview) -> list[ClassicReport]:
        return super().feed(data)

    def _frame_size(self, buf: bytes | bytearray, pos: int) -> int:
        return CLASSIC_REPORT_SIZE

    def _parse(self, buf: bytes, pos: int) -> tuple[ClassicReport, int] | None:
        if len(buf) - pos < CLASSIC_REPORT_SIZE:
            return None
        (offset,) = _CLASSIC_REPORT.unpack_from(buf, pos)
        if offset < 0:
            raise self._fail(f"classic slave reported a negative offset {offset}")
        return ClassicReport(offset), pos + CLASSIC_REPORT_SIZE


class ClassicTransferDecoder(_Decoder):
    """Classic slave side: 12-byte header + body from the master (body: a ``memoryview``)."""

    HEADER = CLASSIC_HEADER_SIZE

    def __init__(self, max_body_size: int = MAX_BODY_SIZE) -> None:
        super().__init__()
        self.max_body_size = max_body_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[ClassicTransfer]:
        return super().feed(data)

    def _frame_size(self, buf: bytes | bytearray, pos: int) -> int:
        _, size = _CLASSIC_TRANSFER.unpack_from(buf, pos)
        if size < 0 or size > self.max_body_size:
            raise self._fail(f"classic transfer body size {size} out of range [0, {self.max_body_size}]")
        return CLASSIC_HEADER_SIZE + size

    def _parse(self, buf: bytes, pos: int) -> tuple[ClassicTransfer, int] | None:
        if len(buf) - pos < CLASSIC_HEADER_SIZE:
            return None
        end = pos + self._frame_size(buf, pos)
        if len(buf) < end:
            return None
        (offset, _) = _CLASSIC_TRANSFER.unpack_from(buf, pos)
        return ClassicTransfer(offset, memoryview(buf)[pos + CLASSIC_HEADER_SIZE : end]), end
