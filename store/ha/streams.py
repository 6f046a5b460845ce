"""Master-side HA transport: fewer, larger writes without copying the log.

A TRANSFER packet is a small header plus a body that is a view of the mapped commit log. Writing
them with two ``send_all`` calls costs two syscalls (and two wake-ups of the slave) per batch;
joining them into one buffer would copy the body. :func:`send_buffers` hands any number of buffers
to the kernel at once with scatter/gather I/O.

:class:`GatheringStream` wraps an auto-switch master connection (whose writer sends ``header`` then
``body`` for each batch) and

* sends a header together with its body (one ``sendmsg``);
* coalesces batches like Nagle's algorithm: while the slave has not acknowledged everything already
  sent, new batches are held (up to ``max_held`` bytes) and go out together as soon as the ack comes.
  With many sends in flight a SYNC_MASTER otherwise streams a packet (and the slave answers an ack)
  for every one or two messages; holding makes the batches as large as what was appended during one
  round trip. The acks are read off the incoming bytes (a 16-byte handshake, then 12-byte acks);
  anything unexpected turns coalescing off for the connection. A write that is not a data batch
  (handshake reply, heartbeat) sends what is held first, so the order never changes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import trio

from store.ha.packets import (
    SLAVE_ACK_SIZE,
    SLAVE_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    HAConnectionState,
)

_HEAD = struct.Struct(">iiq")  # state, bodySize, offset: the start of a TRANSFER header
_ACK = struct.Struct(">iq")
Buffer = bytes | bytearray | memoryview
#: Most bytes held back while waiting for an ack (then they go anyway).
MAX_HELD = 256 * 1024


async def send_buffers(stream: trio.abc.Stream, buffers: Sequence[Buffer]) -> None:
    """Send ``buffers`` in order: one ``sendmsg`` on a socket stream (then ``send_all`` for what the
    kernel did not take), one ``send_all`` per buffer on any other stream."""
    sock = getattr(stream, "socket", None)
    if sock is None or len(buffers) < 2:
        for buf in buffers:
            await stream.send_all(buf)
        return
    try:
        sent = await sock.sendmsg(buffers)
    except OSError as exc:
        raise trio.BrokenResourceError(f"HA socket send failed: {exc}") from exc
    for buf in buffers:
        size = len(buf)
        if sent >= size:
            sent -= size
            continue
        await stream.send_all(memoryview(buf)[sent:])
        sent = 0


class GatheringStream(trio.abc.Stream):
    """An auto-switch master connection with joined header/body writes and ack-clocked batching."""

    def __init__(self, inner: trio.abc.Stream, *, coalesce: bool = True, max_held: int = MAX_HELD) -> None:
        self.inner = inner
        self.coalesce = coalesce
        self.max_held = max_held
        self._header: bytes | None = None
        self._held: list[Buffer] = []
        self._held_bytes = 0
        self._held_end = -1
        #: end offset of the last batch written / latest ack seen from the slave
        self._sent_end = -1
        self._acked = -1
        self._incoming = bytearray()
        self._handshake_seen = False
        self._lock = trio.Lock()

    # ------------------------------------------------------------------ writing

    async def send_all(self, data: Buffer) -> None:
        header = self._header
        if header is not None:
            self._header = None
            _state, size, offset = _HEAD.unpack_from(header)
            end = offset + size
            if self.coalesce and self._sent_end > self._acked and self._held_bytes + size <= self.max_held:
                self._held += (header, data)
                self._held_bytes += size
                self._held_end = end
                return
            await self._send((header, data), end)
            return
        if len(data) == TRANSFER_HEADER_SIZE:
            state, size, _offset = _HEAD.unpack_from(data)
            if state == HAConnectionState.TRANSFER and size > 0:
                self._header = bytes(data)  # its body is the next send_all
                return
        await self._send((data,), -1)

    async def _send(self, buffers: Sequence[Buffer], end: int) -> None:
        lock = self._lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            held, self._held = self._held, []
            held_end, self._held_end = self._held_end, -1
            self._held_bytes = 0
            out = [*held, *buffers]
            if out:
                await send_buffers(self.inner, out)
            self._sent_end = max(self._sent_end, held_end, end)
        finally:
            lock.release()

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    # ------------------------------------------------------------------ reading (acks clock the batches)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if self.coalesce and data:
            self._read_acks(data)
            if self._held and self._acked >= self._sent_end:
                await self._send((), -1)
        return data

    def _read_acks(self, data: bytes | bytearray) -> None:
        buf = self._incoming
        buf += data
        pos = 0
        if not self._handshake_seen:
            if len(buf) < SLAVE_HANDSHAKE_SIZE:
                return
            if _ACK.unpack_from(buf)[0] != HAConnectionState.HANDSHAKE:
                self._stop_coalescing()
                return
            self._handshake_seen = True
            pos = SLAVE_HANDSHAKE_SIZE
        while len(buf) - pos >= SLAVE_ACK_SIZE:
            state, offset = _ACK.unpack_from(buf, pos)
            if state != HAConnectionState.TRANSFER:
                self._stop_coalescing()
                return
            self._acked = max(self._acked, offset)
            pos += SLAVE_ACK_SIZE
        del buf[:pos]

    def _stop_coalescing(self) -> None:
        self.coalesce = False
        self._incoming.clear()
        self._acked = 1 << 62  # whatever is held goes with the next write

    async def aclose(self) -> None:
        self._held.clear()  # views of the mapped log: let the files close
        await self.inner.aclose()
