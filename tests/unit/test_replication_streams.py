"""``GatheringStream``: header and body leave together; batches wait for the slave's ack (in memory)."""

from __future__ import annotations

import trio
import trio.testing

from store.ha.packets import SlaveAck, SlaveHandshake, encode_transfer_header
from store.ha.streams import GatheringStream


def _batch(offset: int, body: bytes) -> tuple[bytes, bytes]:
    return encode_transfer_header(offset, len(body), 1, 0, offset), body


async def _drain(stream: trio.abc.ReceiveStream) -> bytes:
    """Everything that arrives until all tasks are idle (the mock clock then jumps the timeout)."""
    out = b""
    with trio.move_on_after(0.05):
        while True:
            out += await stream.receive_some()
    return out


async def test_batches_wait_for_the_ack_of_what_was_sent(autojump_clock: trio.testing.MockClock) -> None:
    master_side, slave_side = trio.testing.memory_stream_pair()
    gs = GatheringStream(master_side)
    first, second, third = _batch(0, b"a" * 10), _batch(10, b"b" * 5), _batch(15, b"c" * 7)
    await slave_side.send_all(SlaveHandshake(False, False, 2).encode() + SlaveAck(0).encode())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_reader, gs)
        for buf in first:
            await gs.send_all(buf)
        assert await _drain(slave_side) == b"".join(first)
        for buf in (*second, *third):
            await gs.send_all(buf)  # the first batch is not acked: both are held
        assert await _drain(slave_side) == b""
        await slave_side.send_all(SlaveAck(10).encode())
        assert await _drain(slave_side) == b"".join((*second, *third))
        # a heartbeat (no body) goes at once, after whatever was held
        fourth = _batch(22, b"d")
        for buf in fourth:
            await gs.send_all(buf)
        heartbeat = encode_transfer_header(23, 0, 1, 0, 23)
        await gs.send_all(heartbeat)
        assert await _drain(slave_side) == b"".join(fourth) + heartbeat
        nursery.cancel_scope.cancel()


async def test_unexpected_bytes_from_the_slave_turn_coalescing_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    master_side, slave_side = trio.testing.memory_stream_pair()
    gs = GatheringStream(master_side)
    await slave_side.send_all(b"\x00\x00\x00\x07" + bytes(12))  # not a handshake
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_reader, gs)
        await trio.testing.wait_all_tasks_blocked()
        assert not gs.coalesce
        for offset in (0, 10):
            for buf in _batch(offset, b"x" * 10):
                await gs.send_all(buf)
        assert len(await _drain(slave_side)) == 2 * (36 + 10)
        nursery.cancel_scope.cancel()


async def _pump_reader(gs: GatheringStream) -> None:
    while await gs.receive_some():
        pass
