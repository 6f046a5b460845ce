"""``HAConnection`` sending: ack-clocked holding, several packets per ``poll_send`` (sans-IO)."""

from __future__ import annotations

import pytest

from store.config import MessageStoreConfig
from store.ha.connection import MAX_HOLD, MAX_SEND_BYTES, HAConnection
from store.ha.events import AckReceived, CloseConnection
from store.ha.memlog import MemLog
from store.ha.packets import MasterPacketDecoder, MasterTransfer, SlaveAck, SlaveHandshake
from store.ha.role import become_master

BATCH = 256
CONFIG = MessageStoreConfig(haTransferBatchSize=BATCH)


def fill(log: MemLog, count: int, size: int = 60) -> None:
    for _ in range(count):
        log.append_message(b"m" * (size - 8))


def streaming(log: MemLog, config: MessageStoreConfig = CONFIG) -> HAConnection:
    """A connection past the handshake whose slave asked for everything (ack 0)."""
    conn = HAConnection(log, config)
    conn.receive_data(SlaveHandshake(False, False, 2).encode(), 0.0)
    assert conn.poll_send(0.0)  # the handshake reply
    conn.receive_data(SlaveAck(0).encode(), 0.0)
    return conn


def packets(bufs: list) -> list[MasterTransfer]:
    out = MasterPacketDecoder().feed(b"".join(bytes(b) for b in bufs))
    assert all(isinstance(p, MasterTransfer) for p in out)
    return out  # type: ignore[return-value]


def master(messages: int, file_size: int = 64 * 1024) -> MemLog:
    log = MemLog(mapped_file_size=file_size)
    become_master(log, 1)
    fill(log, messages)
    return log


def test_data_appended_while_unacked_is_held_until_the_ack_then_goes_in_one_poll() -> None:
    log = master(2)
    conn = streaming(log)
    first = packets(conn.poll_send(0.0))
    assert [(p.offset, len(p.body)) for p in first] == [(0, 120)]
    fill(log, 3)
    assert conn.holding()
    assert conn.poll_send(0.001) == []  # the first packet is not acked yet
    assert conn.next_deadline() == pytest.approx(MAX_HOLD)
    conn.receive_data(SlaveAck(120).encode(), 0.002)
    assert not conn.holding()
    second = packets(conn.poll_send(0.002))
    assert [(p.offset, len(p.body)) for p in second] == [(120, 180)]
    assert b"".join(p.body for p in first + second) == log.bytes_range(0, log.max_offset)


def test_held_data_goes_after_max_hold_without_an_ack() -> None:
    log = master(1)
    conn = streaming(log)
    packets(conn.poll_send(0.0))
    fill(log, 1)
    assert conn.poll_send(MAX_HOLD / 2) == []
    late = packets(conn.poll_send(MAX_HOLD))
    assert [(p.offset, len(p.body)) for p in late] == [(60, 60)]


def test_a_full_packet_pending_is_never_held() -> None:
    log = master(1)
    conn = streaming(log)
    packets(conn.poll_send(0.0))
    fill(log, BATCH // 60 + 1)  # more than one packet's worth
    assert not conn.holding()
    sent = packets(conn.poll_send(0.0))
    assert sent[0].offset == 60
    assert sum(len(p.body) for p in sent) == log.max_offset - 60


def test_one_poll_returns_consecutive_packets_up_to_max_send_bytes() -> None:
    log = master(3 * MAX_SEND_BYTES // 60, file_size=MAX_SEND_BYTES)
    conn = streaming(log, MessageStoreConfig(haTransferBatchSize=32 * 1024))
    sent = packets(conn.poll_send(0.0))
    assert len(sent) == MAX_SEND_BYTES // (32 * 1024)
    assert all(0 < len(p.body) <= 32 * 1024 for p in sent)
    assert [p.offset for p in sent] == [i * 32 * 1024 for i in range(len(sent))]
    assert sum(len(p.body) for p in sent) == MAX_SEND_BYTES  # stops at the file end too
    more = packets(conn.poll_send(0.0))  # a slave far behind: nothing is held
    assert more[0].offset == MAX_SEND_BYTES


def test_of_several_acks_in_one_read_only_the_last_is_handled() -> None:
    log = master(5)
    conn = streaming(log)
    packets(conn.poll_send(0.0))
    events = conn.receive_data(SlaveAck(60).encode() + SlaveAck(180).encode() + SlaveAck(300).encode(), 0.1)
    assert events == [AckReceived(2, 300)]
    assert conn.ack_offset == 300


def test_a_closed_connection_is_logged_with_its_peer_and_whether_it_identified_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger="store.ha.connection")
    log = master(1)
    stranger = HAConnection(log, CONFIG, peer="127.0.0.1:40632")
    events = stranger.receive_data(b"GET / HTTP/1.1\r\n\r\n", 0.0)
    assert any(isinstance(e, CloseConnection) for e in events)
    slave = streaming(log)
    slave.peer = "127.0.0.1:40700"
    slave.tick(CONFIG.haHousekeepingInterval / 1000 + 1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("closing HA connection of a peer that sent no handshake at 127.0.0.1:40632: ")
    assert lines[1].startswith("closing HA connection of slave 2 at 127.0.0.1:40700: nothing read")
