"""``send_buffers``: many buffers leave in order, over a socket (vectored) or any other stream."""

from __future__ import annotations

import trio
import trio.testing

from store.ha.streams import IOV_MAX, send_buffers


async def _receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        data = await stream.receive_some()
        assert data, "stream closed early"
        out += data
    return bytes(out)


async def test_buffers_arrive_in_order_over_a_socket_even_beyond_iov_max() -> None:
    a, b = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(a), trio.SocketStream(b)
    buffers = [bytes([i % 251]) * (1 + i % 7) for i in range(IOV_MAX + 300)]
    buffers += [memoryview(b"tail" * 100_000)]  # more than the socket buffer: a partial sendmsg
    expected = b"".join(bytes(buf) for buf in buffers)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_buffers, sender, buffers)
        assert await _receive_exactly(receiver, len(expected)) == expected
    await sender.aclose()
    await receiver.aclose()


async def test_buffers_arrive_in_order_over_a_memory_stream() -> None:
    left, right = trio.testing.memory_stream_pair()
    buffers = [b"one", memoryview(b"two"), bytearray(b"three")]
    await send_buffers(left, buffers)
    assert await _receive_exactly(right, 11) == b"onetwothree"
