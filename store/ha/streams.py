"""Master-side HA transport: one vectored write per batch of packets, without copying the log.

A TRANSFER packet is a small header plus a body that is a view of the mapped commit log, and one
``HAConnection.poll_send`` returns several such packets. Writing each buffer with its own
``send_all`` costs a syscall (and a wake-up of the slave) per buffer; joining them would copy the
bodies. :func:`send_buffers` hands them all to the kernel at once with scatter/gather I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

Buffer = bytes | bytearray | memoryview
#: Linux ``IOV_MAX``: most buffers one ``sendmsg`` takes.
IOV_MAX = 1024


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
