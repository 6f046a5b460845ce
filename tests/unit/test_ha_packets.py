"""HA packets: byte layouts built by hand from the reference (§3.2, §3.10), round trips, chunked decoding."""

from __future__ import annotations

import pytest

from store.ha.packets import (
    ClassicReport,
    ClassicReportDecoder,
    ClassicTransfer,
    ClassicTransferDecoder,
    HAConnectionState,
    HAProtocolError,
    MasterHandshake,
    MasterPacketDecoder,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
    SlavePacketDecoder,
)


def be(value: int, size: int) -> bytes:
    return value.to_bytes(size, "big", signed=True)


# Hand-built from the reference tables, field by field.
SLAVE_HANDSHAKE_BYTES = be(1, 4) + be(1, 2) + be(0, 2) + be(7, 8)
SLAVE_ACK_BYTES = be(2, 4) + be(123456789012, 8)
MASTER_HANDSHAKE_BYTES = (
    be(1, 4) + be(24, 4) + be(8000, 8) + be(8, 4) + be(7, 4) + be(7000, 8) + be(8, 4) + be(7700, 8)
)
MASTER_TRANSFER_BYTES = be(2, 4) + be(5, 4) + be(4096, 8) + be(3, 4) + be(1024, 8) + be(4000, 8) + b"hello"
MASTER_HEARTBEAT_BYTES = be(2, 4) + be(0, 4) + be(4101, 8) + be(3, 4) + be(1024, 8) + be(4101, 8)
CLASSIC_REPORT_BYTES = be(65536, 8)
CLASSIC_TRANSFER_BYTES = be(65536, 8) + be(3, 4) + b"abc"


def test_state_ordinals_match_upstream() -> None:
    assert [s.value for s in HAConnectionState] == [0, 1, 2, 3, 4]
    assert [s.name for s in HAConnectionState] == ["READY", "HANDSHAKE", "TRANSFER", "SUSPEND", "SHUTDOWN"]


def test_slave_handshake_layout() -> None:
    packet = SlaveHandshake(isSyncFromLastFile=True, isAsyncLearner=False, slaveBrokerId=7)
    assert packet.encode() == SLAVE_HANDSHAKE_BYTES
    assert len(SLAVE_HANDSHAKE_BYTES) == 16
    assert SlavePacketDecoder().feed(SLAVE_HANDSHAKE_BYTES) == [packet]


def test_slave_ack_layout() -> None:
    assert SlaveAck(123456789012).encode() == SLAVE_ACK_BYTES
    assert SlavePacketDecoder().feed(SLAVE_ACK_BYTES) == [SlaveAck(123456789012)]


def test_master_handshake_layout() -> None:
    packet = MasterHandshake(maxOffset=8000, lastEpoch=8, entries=((7, 7000), (8, 7700)))
    assert packet.encode() == MASTER_HANDSHAKE_BYTES
    assert MasterPacketDecoder().feed(MASTER_HANDSHAKE_BYTES) == [packet]


def test_master_handshake_with_no_entries() -> None:
    packet = MasterHandshake(maxOffset=0, lastEpoch=-1, entries=())
    data = packet.encode()
    assert data == be(1, 4) + be(0, 4) + be(0, 8) + be(-1, 4)
    assert MasterPacketDecoder().feed(data) == [packet]


def test_master_transfer_and_heartbeat_layout() -> None:
    packet = MasterTransfer(offset=4096, epoch=3, epochStartOffset=1024, confirmOffset=4000, body=b"hello")
    assert packet.encode() == MASTER_TRANSFER_BYTES
    heartbeat = MasterTransfer(offset=4101, epoch=3, epochStartOffset=1024, confirmOffset=4101)
    assert heartbeat.encode() == MASTER_HEARTBEAT_BYTES
    assert len(MASTER_HEARTBEAT_BYTES) == 36
    assert MasterPacketDecoder().feed(MASTER_TRANSFER_BYTES + MASTER_HEARTBEAT_BYTES) == [packet, heartbeat]


def test_classic_layouts() -> None:
    assert ClassicReport(65536).encode() == CLASSIC_REPORT_BYTES
    assert ClassicTransfer(65536, b"abc").encode() == CLASSIC_TRANSFER_BYTES
    assert ClassicReportDecoder().feed(CLASSIC_REPORT_BYTES) == [ClassicReport(65536)]
    assert ClassicTransferDecoder().feed(CLASSIC_TRANSFER_BYTES) == [ClassicTransfer(65536, b"abc")]
    assert ClassicTransferDecoder().feed(be(10, 8) + be(0, 4)) == [ClassicTransfer(10, b"")]


STREAMS = [
    (SlavePacketDecoder, SLAVE_HANDSHAKE_BYTES + SLAVE_ACK_BYTES + SLAVE_ACK_BYTES),
    (MasterPacketDecoder, MASTER_HANDSHAKE_BYTES + MASTER_TRANSFER_BYTES + MASTER_HEARTBEAT_BYTES),
    (ClassicReportDecoder, CLASSIC_REPORT_BYTES * 3),
    (ClassicTransferDecoder, CLASSIC_TRANSFER_BYTES + be(65539, 8) + be(0, 4) + CLASSIC_TRANSFER_BYTES),
]


@pytest.mark.parametrize(("decoder_cls", "stream"), STREAMS)
def test_split_at_every_point_gives_the_same_packets(decoder_cls: type, stream: bytes) -> None:
    expected = decoder_cls().feed(stream)
    assert len(expected) == 3
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            decoder = decoder_cls()
            got = decoder.feed(stream[:i]) + decoder.feed(stream[i:j]) + decoder.feed(stream[j:])
            assert got == expected, (i, j)
            assert decoder.buffered == 0


@pytest.mark.parametrize(("decoder_cls", "stream"), STREAMS)
def test_byte_at_a_time(decoder_cls: type, stream: bytes) -> None:
    decoder = decoder_cls()
    got = []
    for k in range(len(stream)):
        got += decoder.feed(stream[k : k + 1])
    assert got == decoder_cls().feed(stream)


def test_slave_handshake_is_not_parsed_before_all_16_bytes() -> None:
    decoder = SlavePacketDecoder()
    assert decoder.feed(SLAVE_HANDSHAKE_BYTES[:12]) == []
    assert decoder.feed(SLAVE_HANDSHAKE_BYTES[12:]) == [SlaveHandshake(True, False, 7)]


@pytest.mark.parametrize(
    ("decoder_cls", "data", "message"),
    [
        (SlavePacketDecoder, be(0, 4) + bytes(12), "state 0"),
        (SlavePacketDecoder, be(4, 4) + bytes(12), "state 4"),
        (SlavePacketDecoder, be(1, 4) + be(2, 2) + be(0, 2) + be(1, 8), "isSyncFromLastFile=2"),
        (SlavePacketDecoder, be(2, 4) + be(-5, 8), "negative"),
        (MasterPacketDecoder, be(3, 4) + bytes(32), "state 3"),
        (MasterPacketDecoder, be(1, 4) + be(13, 4) + bytes(12), "multiple of 12"),
        (MasterPacketDecoder, be(1, 4) + be(12 * 1001, 4) + bytes(12), "1001 epoch entries"),
        (MasterPacketDecoder, be(2, 4) + be(-1, 4) + bytes(28), "out of range"),
        (ClassicTransferDecoder, be(0, 8) + be(-1, 4), "out of range"),
        (ClassicReportDecoder, be(-1, 8), "negative"),
    ],
)
def test_malformed_input_raises_a_clear_error(decoder_cls: type, data: bytes, message: str) -> None:
    decoder = decoder_cls()
    with pytest.raises(HAProtocolError, match=message):
        decoder.feed(data)
    with pytest.raises(HAProtocolError, match="already failed"):
        decoder.feed(b"")


def test_body_size_limit_is_configurable() -> None:
    decoder = MasterPacketDecoder(max_body_size=4)
    with pytest.raises(HAProtocolError, match="out of range"):
        decoder.feed(MASTER_TRANSFER_BYTES)


def test_too_many_epoch_entries_refused_on_encode() -> None:
    with pytest.raises(ValueError, match="exceed"):
        MasterHandshake(0, 1, tuple((i, i) for i in range(1001))).encode()


def test_a_body_inside_one_chunk_is_a_view_of_it_and_only_a_split_one_is_copied() -> None:
    bodies = [bytes([i]) * (100 + i) for i in range(3)]
    stream = b"".join(MasterTransfer(1000 + i, 1, 0, 0, b).encode() for i, b in enumerate(bodies))
    decoder = MasterPacketDecoder()
    cut = len(stream) - 50  # the last packet arrives in two chunks
    first = stream[:cut]
    whole = decoder.feed(first)
    assert [bytes(p.body) for p in whole] == bodies[:2]
    assert all(isinstance(p.body, memoryview) and p.body.obj is first for p in whole)
    (split,) = decoder.feed(stream[cut:])
    assert bytes(split.body) == bodies[2]
    assert split.body.obj is not first
    assert decoder.buffered == 0
