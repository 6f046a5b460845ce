"""Master-side HA transport: a packet's header and body go out in one ``sendmsg`` (no copy, one
syscall).

A TRANSFER packet is a small header plus a body that is a view of the mapped commit log. Writing
them with two ``send_all`` calls costs two syscalls (and two wake-ups of the slave) per batch;
joining them into one buffer would copy the body. :func:`send_buffers` hands both to the kernel at
once with scatter/gather I/O.

:class:`GatheringStream` applies that to the auto-switch service's connections, whose writer sends
``header`` then ``body``: an auto-switch TRANSFER header that announces a body is held until the
body comes and both leave together; everything else passes through at once.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import trio

from store.ha.packets import TRANSFER_HEADER_SIZE, HAConnectionState

_STATE_SIZE = struct.Struct(">ii")
Buffer = bytes | bytearray | memoryview


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
    """An auto-switch master connection whose TRANSFER header and body leave in one syscall."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self._header: bytes | None = None

    async def send_all(self, data: Buffer) -> None:
        header = self._header
        if header is not None:
            self._header = None
            await send_buffers(self.inner, (header, data))
            return
        if len(data) == TRANSFER_HEADER_SIZE:
            state, body_size = _STATE_SIZE.unpack_from(data)
            if state == HAConnectionState.TRANSFER and body_size > 0:
                self._header = bytes(data)  # its body is the next send_all
                return
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()
