"""HA transport: one vectored write per batch of packets, without copying the log; the per-link
figures of ``haStatus`` (:class:`Link`).

A TRANSFER packet is a small header plus a body that is a view of the mapped commit log, and one
``HAConnection.poll_send`` returns several such packets. Writing each buffer with its own
``send_all`` costs a syscall (and a wake-up of the slave) per buffer; joining them would copy the
bodies. :func:`send_buffers` hands them all to the kernel at once with scatter/gather I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from remoting.sockets import unmapped

if TYPE_CHECKING:
    from store.ha.replica_log import ReplicaLog

Buffer = bytes | bytearray | memoryview
#: log bytes a connection's writer brings back into memory at once, ahead of what it sends next
#: (:class:`ReadAhead`)
READ_IN_BYTES = 8 * 1024 * 1024
#: Linux ``IOV_MAX``: most buffers one ``sendmsg`` takes.
IOV_MAX = 1024


class ReadAhead:
    """Brings the log bytes a connection sends next back into memory, in a worker thread, where
    they may have left it (``ReplicaLog.read_in_job``: the store's page-cache bound, or bytes
    written before the store's start), so that a slave catching up from far behind does not make
    the event loop wait for the disk in page faults. Asks for :data:`READ_IN_BYTES` at a time."""

    __slots__ = ("end", "log", "start")

    def __init__(self, rlog: ReplicaLog) -> None:
        self.log = rlog
        self.start = self.end = 0

    async def before_send(self, offset: int, size: int) -> None:
        """Called before the connection sends up to ``size`` bytes from ``offset`` (-1: not known
        yet)."""
        if offset < 0 or (self.start <= offset and offset + size <= self.end):
            return
        self.start, self.end = offset, offset + max(size, READ_IN_BYTES)
        job = self.log.read_in_job(offset, self.end)
        if job is not None:
            await trio.to_thread.run_sync(job)


async def send_buffers(stream: trio.abc.Stream, buffers: Sequence[Buffer]) -> None:
    """Send ``buffers`` in order: ``sendmsg`` on a socket stream (again with what the kernel did not
    take, after waiting until the socket is writable), one ``send_all`` per buffer on any other
    stream."""
    sock = getattr(stream, "socket", None)
    if sock is None or len(buffers) < 2:
        for buf in buffers:
            await stream.send_all(buf)
        return
    left = [buf for buf in buffers if len(buf)]
    i = 0
    while i < len(left):
        try:
            sent = await sock.sendmsg(left[i : i + IOV_MAX])
        except OSError as exc:
            raise trio.BrokenResourceError(f"HA socket send failed: {exc}") from exc
        while sent:
            size = len(left[i])
            if sent < size:
                left[i] = memoryview(left[i])[sent:]
                break
            sent -= size
            i += 1


class TransferMeter:
    """Bytes moved per second (upstream ``FlowMonitor``'s ``transferredByteInSecond``): what went
    through in the last whole second of the clock; 0 once a second passed without any."""

    __slots__ = ("_count", "_last", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._count = 0
        self._last = 0

    def add(self, nbytes: int, now: float) -> None:
        second = int(now)
        if second != self._second:
            self._last = self._count if second == self._second + 1 else 0
            self._second = second
            self._count = 0
        self._count += nbytes

    def per_second(self, now: float) -> int:
        second = int(now)
        if second == self._second:
            return self._last
        return self._count if second == self._second + 1 else 0


class Link:
    """What the status of one HA connection shows besides its protocol state (upstream
    ``HARuntimeInfo``): the peer's address, the bytes per second it moves (a master counts what
    it sends, a slave what it receives) and, on a slave, when it last read from and wrote to its
    master (trio clock; -inf before the first)."""

    __slots__ = ("address", "last_read", "last_write", "meter")

    def __init__(self, address: str) -> None:
        self.address = address
        self.meter = TransferMeter()
        self.last_read = -math.inf
        self.last_write = -math.inf


def peer_address(stream: trio.abc.Stream) -> str:
    """``host:port`` of the other end of a socket stream ("?" for other streams)."""
    sock = getattr(stream, "socket", None)
    try:
        host, port = sock.getpeername()[:2] if sock is not None else ("?", None)
    except OSError:
        return "?"
    return host if port is None else f"{unmapped(host)}:{port}"
