"""Auto-switch and classic replication state machines wired back to back in memory (no sockets)."""

from __future__ import annotations

import struct

import pytest

from store.config import MessageStoreConfig
from store.ha.classic import ClassicHAClient, ClassicHAConnection
from store.ha.client import HAClient
from store.ha.connection import CONFIRM_PUSH_DELAY, HAConnection
from store.ha.events import (
    AckReceived,
    Appended,
    CloseConnection,
    ConfirmOffsetChanged,
    EpochStarted,
    HandshakeDone,
    PersistRequired,
)
from store.ha.gating import (
    acked_by_count,
    classic_slave_available,
    is_stored,
    rip34_check_before_put,
    rip34_in_sync_replicas,
    rip34_need_ack_nums,
    wait_result,
)
from store.ha.loopback import Loopback, connect
from store.ha.master import HAMasterState
from store.ha.memlog import MemLog
from store.ha.packets import (
    HAConnectionState,
    MasterHandshake,
    MasterPacketDecoder,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
)
from store.ha.role import RoleChangeError, become_master, become_slave, truncate_invalid_tail
from store.results import PutMessageStatus

CONFIG = MessageStoreConfig(haTransferBatchSize=256)


def fill(log: MemLog, count: int, size: int = 60, tag: bytes = b"m") -> None:
    for _ in range(count):
        log.append_message(tag * (size - 8))


def master_log(*epochs: tuple[int, int], file_size: int = 1024) -> MemLog:
    """A master log; ``epochs`` = (epoch, number of 60-byte messages written in it)."""
    log = MemLog(mapped_file_size=file_size)
    for epoch, count in epochs:
        become_master(log, epoch)
        fill(log, count, tag=bytes([65 + epoch % 26]))
    return log


def headers(chunk: bytes) -> list[MasterTransfer]:
    return [p for p in MasterPacketDecoder().feed(chunk) if isinstance(p, MasterTransfer)]


# ---------------------------------------------------------------- handshake and transfer


def test_handshake_then_transfer_copies_the_log_byte_for_byte() -> None:
    master = master_log((1, 30), (2, 25))
    slave = MemLog(mapped_file_size=1024)
    conn = HAConnection(master, CONFIG)
    client = HAClient(slave, CONFIG, broker_id=3)
    lb = connect(conn, client, 0.0)
    assert lb.closed is None
    assert client.state == conn.state == HAConnectionState.TRANSFER
    assert slave.bytes_range(0, slave.max_offset) == master.bytes_range(0, master.max_offset)
    assert slave.epoch_file.pairs() == master.epoch_file.pairs()
    kinds = [type(e) for e in lb.events]
    assert kinds[0] is HandshakeDone
    assert PersistRequired in kinds
    assert kinds.count(EpochStarted) == 2
    assert conn.ack_offset == master.max_offset
    assert conn.slave_id == 3


def test_batches_respect_batch_size_file_ends_and_epoch_boundaries() -> None:
    master = master_log((1, 7), (2, 9), (5, 40))
    slave = MemLog(mapped_file_size=1024)
    seen: list[MasterTransfer] = []
    decoder = MasterPacketDecoder()
    connect(
        HAConnection(master, CONFIG),
        HAClient(slave, CONFIG, broker_id=2),
        0.0,
        tap=lambda chunk: seen.extend(p for p in decoder.feed(chunk) if isinstance(p, MasterTransfer)),
    )
    assert slave.max_offset == master.max_offset
    epochs = master.epoch_file.entries(max_offset=master.max_offset)
    for batch in seen:
        end = batch.offset + len(batch.body)
        assert 0 < len(batch.body) <= CONFIG.haTransferBatchSize
        assert batch.offset // 1024 == (end - 1) // 1024, "batch crosses a file end"
        entry = next(e for e in epochs if e.epoch == batch.epoch)
        assert entry.start_offset == batch.epochStartOffset
        assert entry.start_offset <= batch.offset <= end <= entry.end_offset, (
            "batch crosses an epoch boundary"
        )
    assert {b.epoch for b in seen} == {1, 2, 5}


def test_no_ack_and_no_data_before_the_truncation_is_persisted() -> None:
    master = master_log((1, 10))
    slave = MemLog(mapped_file_size=1024)
    conn = HAConnection(master, CONFIG)
    client = HAClient(slave, CONFIG, broker_id=2)
    client.prepare_connect()
    client.connection_made(0.0)
    conn.receive_data(client.data_to_send(), 0.0)
    events = client.receive_data(b"".join(bytes(b) for b in conn.poll_send(0.0)), 0.0)
    assert events == [PersistRequired()]
    assert client.awaiting_persist
    assert client.data_to_send() == b""
    assert conn.poll_send(0.0) == []
    assert client.next_deadline() == pytest.approx(CONFIG.haHousekeepingInterval / 1000)
    client.persisted(0.0)
    assert client.data_to_send() == SlaveAck(0).encode()


def test_slave_confirm_offset_is_min_of_master_confirm_and_local_max() -> None:
    master = master_log((1, 40))
    master.confirm_offset = 600
    slave = MemLog(mapped_file_size=1024)
    lb = connect(HAConnection(master, CONFIG), HAClient(slave, CONFIG, broker_id=2), 0.0)
    assert slave.confirm_offset == 600
    confirms = [e.confirm_offset for e in lb.events if isinstance(e, ConfirmOffsetChanged)]
    assert confirms == sorted(confirms)
    assert all(c <= 600 for c in confirms)
    assert confirms[0] < 600  # the first batch ended below the master's confirm offset


def test_master_heartbeats_when_idle_and_slave_reports_periodically() -> None:
    master = master_log((1, 3))
    slave = MemLog(mapped_file_size=1024)
    conn = HAConnection(master, CONFIG)
    client = HAClient(slave, CONFIG, broker_id=2)
    seen: list[MasterTransfer] = []
    decoder = MasterPacketDecoder()
    lb = connect(conn, client, 0.0, tap=lambda c: seen.extend(decoder.feed(c)))
    assert conn.poll_send(1.0) == []
    assert conn.next_deadline() == pytest.approx(5.0)
    assert client.next_deadline() == pytest.approx(5.0)
    lb.tick(5.0)
    heartbeats = [h for h in seen if isinstance(h, MasterTransfer) and not h.body]
    assert heartbeats
    assert heartbeats[-1].offset == master.max_offset
    assert heartbeats[-1].epoch == 1
    assert lb.closed is None
    # Master appends more: the next pump streams it.
    fill(master, 2)
    lb.pump(6.0)
    assert slave.max_offset == master.max_offset


def test_both_sides_close_after_housekeeping_interval_without_reads() -> None:
    master = master_log((1, 3))
    conn = HAConnection(master, CONFIG)
    client = HAClient(MemLog(), CONFIG, broker_id=2)
    connect(conn, client, 0.0)
    assert conn.tick(19.9) == []
    assert isinstance(conn.tick(20.0)[0], CloseConnection)
    assert conn.closed
    assert isinstance(client.tick(20.0)[0], CloseConnection)
    assert client.state == HAConnectionState.READY


def test_client_closes_if_master_does_not_answer_the_handshake() -> None:
    client = HAClient(MemLog(), CONFIG, broker_id=2)
    client.connection_made(0.0)
    assert client.data_to_send() == SlaveHandshake(False, False, 2).encode()
    assert client.tick(4.9) == []
    (event,) = client.tick(5.0)
    assert isinstance(event, CloseConnection)


def _client_in_transfer(slave: MemLog, epochs: tuple[tuple[int, int], ...] = ((1, 0),)) -> HAClient:
    client = HAClient(slave, CONFIG, broker_id=2)
    client.connection_made(0.0)
    client.data_to_send()
    client.receive_data(MasterHandshake(slave.max_offset, epochs[-1][0], epochs).encode(), 0.0)
    client.persisted(0.0)
    client.data_to_send()
    return client


@pytest.mark.parametrize(("offset", "kind"), [(700, "gap"), (500, "overlap")])
def test_client_rejects_a_gap_or_overlap(offset: int, kind: str) -> None:
    slave = MemLog(mapped_file_size=4096)
    slave.epoch_file.append(1, 0)
    fill(slave, 10)  # max 600
    client = _client_in_transfer(slave)
    (event,) = client.receive_data(MasterTransfer(offset, 1, 0, 0, b"x" * 60).encode(), 1.0)
    assert isinstance(event, CloseConnection)
    assert event.reason.startswith(kind)
    assert slave.max_offset == 600
    assert client.state == HAConnectionState.READY


def test_client_acks_only_its_latest_max_offset_per_write() -> None:
    master = master_log((1, 10))
    slave = MemLog(mapped_file_size=1024)
    client = _client_in_transfer(slave)
    batches = b"".join(
        MasterTransfer(off, 1, 0, 0, master.bytes_range(off, off + 120)).encode() for off in (0, 120, 240)
    )
    assert client.receive_data(batches, 1.0)[-1] == PersistRequired()  # the first batch starts epoch 1
    client.persisted(1.0)
    assert slave.max_offset == 360
    assert client.data_to_send() == SlaveAck(360).encode()  # not three acks
    client.receive_data(MasterTransfer(360, 1, 0, 0, master.bytes_range(360, 420)).encode(), 1.1)
    assert client.data_to_send() == SlaveAck(420).encode()


def test_client_rejects_a_new_epoch_that_claims_bytes_it_already_holds() -> None:
    slave = MemLog(mapped_file_size=4096)
    slave.epoch_file.append(1, 0)
    fill(slave, 10)
    client = _client_in_transfer(slave)
    (event,) = client.receive_data(MasterTransfer(600, 2, 300, 0, b"x" * 60).encode(), 1.0)
    assert isinstance(event, CloseConnection)
    assert slave.epoch_file.pairs() == [(1, 0)]


def test_client_rejects_a_packet_of_the_wrong_state() -> None:
    client = HAClient(MemLog(), CONFIG, broker_id=2)
    client.connection_made(0.0)
    (event,) = client.receive_data(MasterTransfer(0, 1, 0, 0, b"").encode(), 0.1)
    assert isinstance(event, CloseConnection)


def test_master_rejects_a_slave_that_is_ahead() -> None:
    master = master_log((1, 3))
    conn = HAConnection(master, CONFIG)
    conn.receive_data(SlaveHandshake(False, False, 2).encode(), 0.0)
    conn.poll_send(0.0)
    (event,) = conn.receive_data(SlaveAck(master.max_offset + 60).encode(), 0.0)
    assert isinstance(event, CloseConnection)
    assert conn.closed


def test_master_rejects_transfer_before_handshake() -> None:
    conn = HAConnection(master_log((1, 1)), CONFIG)
    (event,) = conn.receive_data(SlaveAck(0).encode(), 0.0)
    assert isinstance(event, CloseConnection)


def test_resume_after_reconnect_continues_without_gap() -> None:
    master = master_log((1, 20))
    slave = MemLog(mapped_file_size=1024)
    client = HAClient(slave, CONFIG, broker_id=2)
    connect(HAConnection(master, CONFIG), client, 0.0)
    client.connection_lost()
    fill(master, 20)
    lb = connect(HAConnection(master, CONFIG), client, 1.0)
    assert lb.closed is None
    assert slave.bytes_range(0, slave.max_offset) == master.bytes_range(0, master.max_offset)


def test_partial_message_tail_is_cut_before_reconnecting() -> None:
    master = master_log((1, 20))
    slave = MemLog(mapped_file_size=1024)
    slave.epoch_file.append(1, 0)
    slave.append_raw(0, master.bytes_range(0, 630))  # 10.5 messages
    slave.confirm_offset = 630
    client = HAClient(slave, CONFIG, broker_id=2)
    assert client.prepare_connect() == 600
    assert slave.max_offset == 600
    assert slave.confirm_offset == 600


# ---------------------------------------------------------------- master group state


def make_group(
    allack: bool = True, sync_state_set: tuple[int, ...] = (1,), **cfg: object
) -> tuple[MemLog, HAMasterState, MessageStoreConfig]:
    config = MessageStoreConfig(allAckInSyncStateSet=allack, haTransferBatchSize=256, **cfg)  # type: ignore[arg-type]
    log = master_log((1, 20))
    return log, HAMasterState(log, config, self_id=1, sync_state_set=sync_state_set), config


def attach(
    log: MemLog, group: HAMasterState, config: MessageStoreConfig, slave_id: int, now: float
) -> Loopback:
    slave = MemLog(mapped_file_size=1024)
    return connect(
        HAConnection(log, config, now=now, group=group), HAClient(slave, config, broker_id=slave_id), now
    )


def test_caught_up_slave_is_proposed_for_the_sync_state_set_and_confirm_follows_acks() -> None:
    log, group, config = make_group()
    assert group.confirm_offset() == log.max_offset  # one member: max offset
    lb = attach(log, group, config, 2, 0.0)
    assert group.wants_proposal
    assert group.propose_sync_state_set(0.0) == {1, 2}
    assert group.propose_sync_state_set(0.0) is None  # one proposal in flight
    assert group.in_sync_replicas_nums == 2
    group.on_sync_state_set_accepted({1, 2}, epoch=5)
    assert group.sync_state_set == {1, 2}
    assert group.confirm_offset() == log.max_offset
    fill(log, 1)
    group.refresh_confirm_offset()
    assert group.confirm_offset() == log.max_offset - 60  # slave has not acked the new message
    assert not group.is_acked(log.max_offset)
    lb.pump(1.0)
    assert group.confirm_offset() == log.max_offset
    assert group.is_acked(log.max_offset)


def test_an_idle_slave_gets_the_confirm_offset_of_its_last_ack_after_confirm_push_delay() -> None:
    """rmq-container: a slave that has every byte learns the confirm offset its own ack moved in a
    header of its own CONFIRM_PUSH_DELAY later (upstream: with the next data or heartbeat, so its
    consume queues showed the last message up to haSendHeartbeatInterval late)."""
    log, group, config = make_group(sync_state_set=(1, 2))
    seen: list[MasterTransfer] = []
    decoder = MasterPacketDecoder()
    conn = HAConnection(log, config, now=0.0, group=group)
    slave = MemLog(mapped_file_size=1024)
    lb = connect(conn, HAClient(slave, config, broker_id=2), 0.0, tap=lambda c: seen.extend(decoder.feed(c)))
    assert group.confirm_offset() == log.max_offset  # the slave acked everything
    assert slave.max_offset == log.max_offset
    assert slave.confirm_offset < log.max_offset  # the data carried the confirm offset before that ack
    assert conn.next_deadline() == pytest.approx(CONFIRM_PUSH_DELAY)
    assert conn.poll_send(CONFIRM_PUSH_DELAY / 2) == []
    lb.tick(CONFIRM_PUSH_DELAY)
    assert slave.confirm_offset == log.max_offset
    assert [(h.offset, len(h.body), h.confirmOffset) for h in seen[-1:]] == [
        (log.max_offset, 0, log.max_offset)
    ]
    assert conn.next_deadline() == pytest.approx(CONFIRM_PUSH_DELAY + 5.0)  # then the heartbeat only
    # data within the delay carries the confirm offset itself: no header of its own
    fill(log, 1)
    lb.pump(6.0)
    count = len(seen)
    fill(log, 1)
    lb.pump(6.001)
    assert seen[count].body
    assert seen[count].confirmOffset == log.max_offset - 60
    lb.tick(6.001 + CONFIRM_PUSH_DELAY)
    assert slave.confirm_offset == log.max_offset
    assert sum(1 for h in seen[count:] if not h.body) == 1


def test_learner_never_joins() -> None:
    log, group, config = make_group(asyncLearner=True)
    attach(log, group, config, 2, 0.0)
    assert group.propose_sync_state_set(0.0) is None
    assert 2 not in group.caught_up_time


def test_slave_that_falls_behind_is_shrunk_after_ha_max_time_slave_not_catchup() -> None:
    log, group, config = make_group(sync_state_set=(1, 2))
    lb = attach(log, group, config, 2, 0.0)
    assert group.propose_sync_state_set(1.0) is None
    fill(log, 5)
    # The slave stops reading (no pump): not caught up since t=0.
    assert group.propose_sync_state_set(15.0) is None
    assert group.propose_sync_state_set(15.1) == {1}
    group.on_sync_state_set_accepted({1}, 6)
    assert group.confirm_offset() == log.max_offset
    lb.pump(16.0)
    assert group.propose_sync_state_set(16.0) == {1, 2}


def test_closing_a_member_connection_proposes_its_removal_and_freezes_confirm() -> None:
    log, group, config = make_group(sync_state_set=(1, 2))
    lb = attach(log, group, config, 2, 0.0)
    confirm = group.refresh_confirm_offset()
    lb.conn.connection_lost()
    fill(log, 3)
    assert group.refresh_confirm_offset() == confirm
    assert group.wants_proposal
    assert group.propose_sync_state_set(0.5) == {1}
    group.on_sync_state_set_rejected()
    assert group.sync_state_set == {1, 2}


def test_a_replica_whose_joining_was_refused_is_held_back_doubling_until_its_connection_closes() -> None:
    log, group, config = make_group()
    lb = attach(log, group, config, 2, 0.0)
    assert group.propose_sync_state_set(0.0) == {1, 2}
    group.on_sync_state_set_rejected()  # not answered (no controller reachable): nothing held back
    fill(log, 1)
    lb.pump(0.0)
    assert group.propose_sync_state_set(0.0) == {1, 2}
    group.on_sync_state_set_rejected(0.0)  # e.g. CONTROLLER_INVALID_REPLICAS: no replica 2 there

    def ack(now: float) -> None:
        fill(log, 1)
        lb.pump(now)
        assert group.wants_proposal  # the ack qualifies it again ...

    ack(0.5)
    assert group.propose_sync_state_set(0.5) is None  # ... but it is held back for 1 s
    ack(1.0)
    assert group.propose_sync_state_set(1.0) == {1, 2}
    group.on_sync_state_set_rejected(1.0)
    ack(2.9)
    assert group.propose_sync_state_set(2.9) is None  # then 2 s
    ack(3.0)
    assert group.propose_sync_state_set(3.0) == {1, 2}
    group.on_sync_state_set_rejected(3.0)
    ack(6.9)
    assert group.propose_sync_state_set(6.9) is None  # then 4 s
    # a new connection gets a fresh chance
    lb.conn.connection_lost()
    assert group.propose_sync_state_set(7.0) is None
    lb = attach(log, group, config, 2, 7.0)
    assert group.propose_sync_state_set(7.0) == {1, 2}
    group.on_sync_state_set_accepted({1, 2}, epoch=2)
    assert group.sync_state_set == {1, 2}
    # a refused shrink holds nothing back: it is proposed again at once
    lb.conn.connection_lost()
    assert group.propose_sync_state_set(8.0) == {1}
    group.on_sync_state_set_rejected(8.0)
    assert group.propose_sync_state_set(8.0) == {1}  # the periodic check's next call


def test_member_without_connection_keeps_confirm_offset() -> None:
    log, group, _ = make_group(sync_state_set=(1, 2))
    before = group.refresh_confirm_offset()
    fill(log, 3)
    assert group.refresh_confirm_offset() == before
    assert group.propose_sync_state_set(0.0) == {1}


def test_gating_in_controller_mode() -> None:
    log, group, _config = make_group(sync_state_set=(1,), minInSyncReplicas=2)
    assert group.check_before_put() is PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    assert group.need_ack_nums() == -1
    assert group.is_acked(log.max_offset)  # a one-member set acks at once
    _, group2, _ = make_group(allack=False, inSyncReplicas=2)
    assert group2.need_ack_nums() == 2
    assert not group2.is_acked(10)
    assert wait_result(False) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert wait_result(True) is PutMessageStatus.PUT_OK
    assert is_stored(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
    assert not is_stored(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)


def test_gating_pure_functions() -> None:
    assert acked_by_count(100, 1, [])
    assert acked_by_count(100, 2, [50, 100])
    assert not acked_by_count(100, 3, [50, 100])
    cfg = MessageStoreConfig(inSyncReplicas=2, minInSyncReplicas=1, enableAutoInSyncReplicas=True)
    in_sync = rip34_in_sync_replicas(3, 1000, [0], ha_max_gap_not_in_sync=500)
    assert in_sync == 1
    assert rip34_need_ack_nums(cfg, in_sync) == 1
    assert rip34_check_before_put(cfg, in_sync) is None
    strict = MessageStoreConfig(inSyncReplicas=2, minInSyncReplicas=1)
    assert rip34_check_before_put(strict, in_sync) is PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
    assert not classic_slave_available(0, 100, 0, 1000)
    assert classic_slave_available(1, 100, 0, 1000)


# ---------------------------------------------------------------- role change


def test_become_master_cuts_partial_tail_and_starts_the_epoch_at_max() -> None:
    log = MemLog(mapped_file_size=1024)
    log.epoch_file.append(1, 0)
    fill(log, 5)
    log.append_raw(300, struct.pack(">iI", 60, 0xDAA320A7) + b"half")
    log.epoch_file.append(3, 312)  # stale entry beyond the cut
    assert become_master(log, 4) == 300
    assert log.max_offset == 300
    assert log.epoch_file.pairs() == [(1, 0), (4, 300)]
    assert become_master(log, 4) == 300  # same epoch again keeps the entry
    assert log.epoch_file.pairs() == [(1, 0), (4, 300)]
    with pytest.raises(RoleChangeError):
        become_master(log, 3)
    with pytest.raises(RoleChangeError):
        become_slave(log, 2)
    assert become_slave(log, 5) == 300


def test_truncate_invalid_tail_trims_epochs_at_the_cut() -> None:
    log = MemLog()
    log.epoch_file.append(1, 0)
    fill(log, 2)
    log.epoch_file.append(2, 120)
    assert truncate_invalid_tail(log) == 120
    assert log.epoch_file.pairs() == [(1, 0)]


# ---------------------------------------------------------------- classic


def test_classic_slave_copies_from_the_last_file_and_follows() -> None:
    master = MemLog(mapped_file_size=1024)
    fill(master, 40)
    slave = MemLog(mapped_file_size=1024)
    conn = ClassicHAConnection(master, CONFIG)
    client = ClassicHAClient(slave, CONFIG)
    client.connection_made(0.0)

    def pump(now: float) -> list:
        events = []
        for _ in range(1000):
            up = client.data_to_send()
            events += conn.receive_data(up, now) if up else []
            bufs = conn.poll_send(now)
            if not bufs and not up:
                break
            if bufs:
                events += client.receive_data(b"".join(bytes(b) for b in bufs), now)
        return events

    events = pump(0.0)
    start = master.max_offset - master.max_offset % 1024
    assert slave.min_offset == start
    assert slave.bytes_range(start, slave.max_offset) == master.bytes_range(start, master.max_offset)
    assert any(isinstance(e, Appended) for e in events)
    assert conn.ack_offset == master.max_offset
    fill(master, 3)
    events = pump(1.0)
    assert slave.max_offset == master.max_offset
    assert isinstance(events[-1], AckReceived)
    # heartbeat and report when idle
    assert conn.poll_send(6.0)
    assert client.tick(6.0) == []
    assert client.data_to_send()


def test_classic_master_counts_no_report_beyond_what_it_sent() -> None:
    """A report of bytes the master never wrote (a stranger, another master's slave) closes the
    connection instead of counting as an ack: a SYNC_MASTER would answer sends its slave lacks."""
    master = MemLog(mapped_file_size=1024)
    fill(master, 5)  # max 300
    # a first report beyond the end: closed at once, no ack
    conn = ClassicHAConnection(master, CONFIG)
    (event,) = conn.receive_data(struct.pack(">q", 2**62), 0.0)
    assert isinstance(event, CloseConnection)
    assert conn.ack_offset == -1
    # a slave that asked for 120, got what there was, then reports more than it was sent
    conn = ClassicHAConnection(master, CONFIG)
    assert conn.receive_data(struct.pack(">q", 120), 0.0) == [AckReceived(-1, 120)]
    assert conn.poll_send(0.0)  # 120..300
    assert conn.receive_data(struct.pack(">q", 300), 0.1) == [AckReceived(-1, 300)]
    (event,) = conn.receive_data(struct.pack(">q", 301), 0.2)
    assert isinstance(event, CloseConnection)
    assert conn.ack_offset == 300
    # before anything was sent, a report past the request is as impossible
    conn = ClassicHAConnection(master, CONFIG)
    conn.receive_data(struct.pack(">q", 60), 0.0)
    (event,) = conn.receive_data(struct.pack(">q", 61), 0.0)
    assert isinstance(event, CloseConnection)


def test_classic_slave_rejects_wrong_offset() -> None:
    slave = MemLog()
    fill(slave, 2)
    client = ClassicHAClient(slave, CONFIG)
    client.connection_made(0.0)
    (event,) = client.receive_data(struct.pack(">qi", 60, 1) + b"x", 0.0)
    assert isinstance(event, CloseConnection)
    assert slave.max_offset == 120


def test_batch_of_a_new_epoch_waits_for_the_epoch_file_to_be_persisted() -> None:
    slave = MemLog(mapped_file_size=4096)
    slave.epoch_file.append(1, 0)
    fill(slave, 10)  # max 600
    client = _client_in_transfer(slave)
    slave.persist_epoch_file()
    slave.flush()
    stream = (
        MasterTransfer(600, 2, 600, 0, b"y" * 60).encode()
        + MasterTransfer(660, 2, 600, 0, b"z" * 60).encode()
    )
    events = client.receive_data(stream, 1.0)
    assert events == [EpochStarted(2, 600), PersistRequired()]
    assert slave.max_offset == 600  # nothing applied yet
    slave.crash()  # a crash now loses the unpersisted entry, and no byte of epoch 2 exists
    assert slave.epoch_file.pairs() == [(1, 0)]
    assert slave.max_offset == 600


def test_persisted_applies_the_held_batch_and_the_backlog() -> None:
    slave = MemLog(mapped_file_size=4096)
    slave.epoch_file.append(1, 0)
    fill(slave, 10)
    client = _client_in_transfer(slave)
    stream = (
        MasterTransfer(600, 2, 600, 0, b"y" * 60).encode()
        + MasterTransfer(660, 2, 600, 0, b"z" * 60).encode()
    )
    client.receive_data(stream, 1.0)
    slave.persist_epoch_file()
    events = client.persisted(1.0)
    assert [e for e in events if isinstance(e, Appended)] == [Appended(600, 660), Appended(660, 720)]
    assert slave.epoch_file.pairs() == [(1, 0), (2, 600)]
    assert client.data_to_send().endswith(SlaveAck(720).encode())


def test_a_confirm_push_that_is_no_longer_due_leaves_no_deadline_in_the_past() -> None:
    """A confirm push was due, then data came that waits for the slave's ack (held for a batch):
    the push is moot (the data will carry the confirm offset), and a due time left in place made
    next_deadline() a moment in the past -- the connection's writer woke again and again, never
    sleeping, until the held data went out (the trio simulation hung on it with a mock clock)."""
    log, group, config = make_group(sync_state_set=(1, 2))
    conn = HAConnection(log, config, now=0.0, group=group)
    connect(conn, HAClient(MemLog(mapped_file_size=1024), config, broker_id=2), 0.0)
    fill(log, 1)
    assert conn.poll_send(1.0)  # sent; the slave's ack is not read yet
    fill(log, 1)  # less than a batch: held until that ack
    conn._confirm_due = 1.0  # due from before the data came
    assert conn.poll_send(1.005) == []
    assert conn.holding()
    assert conn.next_deadline() > 1.005


def test_a_proposal_with_an_unknown_outcome_keeps_its_replicas_in_the_ack_set_until_the_controller_decides() -> (
    None
):
    """The controller may commit a proposal whose answer never came (its leader stopped under it):
    until its set is known, the replicas the proposal adds count for acks and the confirm offset,
    so that nothing is acknowledged without a replica the controller may elect next."""
    log, group, config = make_group()
    lb = attach(log, group, config, 2, 0.0)
    assert group.propose_sync_state_set(0.0) == {1, 2}
    group.on_sync_state_set_rejected()  # no answer
    assert group.sync_state_set == {1}
    assert group.effective_sync_state_set == {1, 2}
    assert group.in_sync_replicas_nums == 2
    fill(log, 1)
    group.refresh_confirm_offset()
    assert not group.is_acked(log.max_offset)  # replica 2 has not acked it
    lb.pump(0.1)
    assert group.is_acked(log.max_offset)
    # proposed again at the next check, although no replica qualified anew: an answer settles it
    assert group.propose_sync_state_set(0.2) == {1, 2}
    group.on_sync_state_set_rejected()
    # replica 2 goes away meanwhile: the next proposal leaves it out, and still goes out
    lb.conn.connection_lost()
    fill(log, 1)
    group.refresh_confirm_offset()
    assert not group.is_acked(log.max_offset)
    assert group.propose_sync_state_set(0.3) == {1}
    group.on_sync_state_set_accepted({1}, epoch=3)  # the controller's set: settled
    assert group.effective_sync_state_set == {1}
    assert group.is_acked(log.max_offset)

    # a definite refusal comes only for the controller's current set: nothing is unconfirmed then
    lb = attach(log, group, config, 2, 1.0)
    assert group.propose_sync_state_set(1.0) == {1, 2}
    group.on_sync_state_set_rejected()
    assert group.effective_sync_state_set == {1, 2}
    assert group.propose_sync_state_set(1.1) == {1, 2}
    group.on_sync_state_set_rejected(1.1)  # e.g. CONTROLLER_BROKER_NOT_ALIVE
    assert group.effective_sync_state_set == {1}
