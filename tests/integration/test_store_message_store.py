"""DefaultMessageStore on real files: send path, read path, statuses, lookups, filters, modes."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import pytest
import trio

from remoting.protocol.message import (
    BLANK_MAGIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode_message,
    encode_message,
    offset_msg_id,
    tags_hash_code,
)
from store.config import BrokerRole, FlushDiskType
from store.mapped_file import MAP_BUDGET, MAP_RESERVE, count_maps
from store.message_store import DefaultMessageStore
from store.results import (
    BoundaryType,
    GetMessageStatus,
    Placed,
    PutMessageResult,
    PutMessageStatus,
    TagsCodeFilter,
)
from tests.integration.storekit import STORE_HOST, Clock, encode, put, read_queue, running_store, small_config


async def test_put_then_get_returns_the_messages_in_queue_order(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        for i in range(10):
            res = await put(store, "TopicA", i % 2, f"body-{i}".encode(), tags="t")
            assert res.status is PutMessageStatus.PUT_OK
            assert res.logics_offset == i // 2
        got = store.get_message("g", "TopicA", 1, 0, 32)
        assert got is not None
        assert got.status is GetMessageStatus.FOUND
        bodies = [decode_message(v).body for v in got.message_views]
        assert bodies == [f"body-{i}".encode() for i in range(1, 10, 2)]
        assert got.message_queue_offsets == [0, 1, 2, 3, 4]
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == (5, 0, 5)
        assert got.buffer_total_size == sum(len(v) for v in got.message_views)
        got.release()


async def test_get_message_returns_zero_copy_views_of_the_commit_log_maps(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        for i in range(5):
            await put(store, "TopicA", 0, bytes([i]) * 100)
        got = store.get_message("g", "TopicA", 0, 0, 32)
        assert got is not None
        maps = [mf.mm for mf in store.commit_log.mfq.files]
        for view in got.message_views:
            assert isinstance(view.obj, mmap.mmap)
            assert any(view.obj is m for m in maps)
        # the same memory: a change in the map shows through the view
        first = got.message_views[0]
        mf = store.commit_log.mfq.files[0]
        before = first[-1]
        mf.mm[len(first) - 1] = (before + 1) % 256
        assert first[-1] == (before + 1) % 256
        mf.mm[len(first) - 1] = before
        got.release()


async def test_stored_record_carries_offsets_store_time_and_offset_msg_id(tmp_path: Path) -> None:
    clock = Clock(step=0)
    async with running_store(small_config(tmp_path), now_ms=clock) as store:
        await put(store, "TopicA", 0, b"first")
        clock.ms += 7
        res = await put(store, "TopicA", 0, b"second", keys="k1 k2", uniq="U1")
        view = store.look_message_by_offset(res.wrote_offset)
        assert view is not None
        msg = decode_message(view)
        assert msg.physical_offset == res.wrote_offset
        assert msg.queue_offset == 1
        assert msg.store_timestamp == res.store_timestamp == clock.ms
        assert msg.total_size == res.wrote_bytes == len(view)
        assert res.msg_id == offset_msg_id(STORE_HOST, res.wrote_offset)
        assert len(res.msg_id) == 32
        view.release()


async def test_records_never_span_files_and_files_end_with_a_blank_filler(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg) as store:
        results = [await put(store, "TopicA", 0, b"x" * 3000) for _ in range(60)]
        size = cfg.mappedFileSizeCommitLog
        assert len(store.commit_log.mfq.files) >= 3
        for r in results:
            assert r.wrote_offset // size == (r.end_offset - 1) // size
        first = store.commit_log.mfq.files[0]
        last_end = max(r.end_offset for r in results if r.wrote_offset < size)
        blank_size, magic = struct.unpack_from(">ii", first.mm, last_end)
        assert magic == BLANK_MAGIC
        assert blank_size == size - last_end
        assert [decode_message(b).body for b in read_queue(store, "TopicA", 0)] == [b"x" * 3000] * 60


async def test_offset_statuses_follow_upstream(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        none = store.get_message("g", "Nope", 0, 0, 32)
        assert none is not None
        assert none.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        for i in range(3):
            await put(store, "TopicA", 0, b"m%d" % i)
        one = store.get_message("g", "TopicA", 0, 3, 32)
        assert one is not None
        assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert one.next_begin_offset == 3
        badly = store.get_message("g", "TopicA", 0, 10, 32)
        assert badly is not None
        assert badly.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
        assert badly.next_begin_offset == 3
        # a slave keeps the requested offset unless offsetCheckInSlave
        store.config.brokerRole = BrokerRole.SLAVE
        badly = store.get_message("g", "TopicA", 0, 10, 32)
        assert badly is not None
        assert badly.next_begin_offset == 10
        store.config.brokerRole = BrokerRole.ASYNC_MASTER


async def test_tag_filter_skips_units_by_tags_code(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        for i in range(6):
            await put(store, "TopicA", 0, b"m%d" % i, tags="A" if i % 3 == 0 else "B")
        only_a = TagsCodeFilter({tags_hash_code("A")})
        got = store.get_message("g", "TopicA", 0, 0, 32, tag_filter=only_a)
        assert got is not None
        assert got.status is GetMessageStatus.FOUND
        assert got.message_queue_offsets == [0, 3]
        assert got.next_begin_offset == 6
        none = store.get_message("g", "TopicA", 0, 0, 32, tag_filter=lambda code: code == tags_hash_code("C"))
        assert none is not None
        assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE
        assert none.next_begin_offset == 6


async def test_transfer_caps_limit_messages_per_pull(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, maxTransferCountOnMessageInMemory=4)
    async with running_store(cfg) as store:
        for i in range(10):
            await put(store, "TopicA", 0, b"m%d" % i)
        got = store.get_message("g", "TopicA", 0, 0, 32)
        assert got is not None
        assert got.message_queue_offsets == [0, 1, 2, 3]
        got = store.get_message("g", "TopicA", 0, 4, 2)
        assert got is not None
        assert got.message_queue_offsets == [4, 5]
        got = store.get_message("g", "TopicA", 0, 0, 32, max_bytes=len(encode("TopicA", 0, b"m0")) * 2)
        assert got is not None
        assert got.message_queue_offsets == [0, 1]


async def test_suggest_pulling_from_slave_when_reading_far_behind(tmp_path: Path) -> None:
    # 40% of a pretend 10 KiB of RAM: anything more than 4 KiB behind the end is "on disk"
    async with running_store(small_config(tmp_path), total_physical_memory=10 * 1024) as store:
        for _i in range(20):
            await put(store, "TopicA", 0, b"x" * 500)
        old = store.get_message("g", "TopicA", 0, 0, 1)
        new = store.get_message("g", "TopicA", 0, 19, 1)
        assert old is not None
        assert old.suggest_pulling_from_slave
        assert new is not None
        assert not new.suggest_pulling_from_slave


async def test_transaction_types_decide_queue_offsets_and_dispatch(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        await put(store, "TopicA", 0, b"plain", uniq="U0")
        half = await put(store, "TopicA", 0, b"half", sys_flag=TRANSACTION_PREPARED_TYPE, uniq="U1")
        back = await put(store, "TopicA", 0, b"rollback", sys_flag=TRANSACTION_ROLLBACK_TYPE, uniq="U2")
        commit = await put(store, "TopicA", 0, b"commit", sys_flag=TRANSACTION_COMMIT_TYPE, uniq="U3")
        assert half.logics_offset == 0
        assert back.logics_offset == 0
        assert commit.logics_offset == 1
        assert store.get_max_offset_in_queue("TopicA", 0) == 2
        bodies = [decode_message(b).body for b in read_queue(store, "TopicA", 0)]
        assert bodies == [b"plain", b"commit"]
        # the index takes prepared messages but not rollbacks (upstream)
        assert store.query_message("TopicA", "U1", 10, 0, 2**62).phy_offsets == [half.wrote_offset]
        assert store.query_message("TopicA", "U2", 10, 0, 2**62).phy_offsets == []


async def test_decoded_and_hinted_dispatch_agree(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        await put(store, "TopicA", 0, b"a", tags="T1", keys="K1", hints=True)
        await put(store, "TopicA", 0, b"b", tags="T1", keys="K1", hints=False)
        units = [store.queues.get("TopicA", 0).unit(i) for i in range(2)]  # type: ignore[union-attr]
        assert units[0][2] == units[1][2] == tags_hash_code("T1")  # type: ignore[index]
        assert len(store.query_message("TopicA", "K1", 10, 0, 2**62).phy_offsets) == 2


async def test_query_by_key_and_unique_key(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        a = await put(store, "TopicA", 0, b"a", keys="order-1 order-2", uniq="UNIQ-A")
        b = await put(store, "TopicA", 1, b"b", keys="order-2", uniq="UNIQ-B")
        await put(store, "TopicB", 0, b"c", keys="order-2")
        found = store.query_message("TopicA", "order-2", 32, 0, 2**62)
        assert sorted(found.phy_offsets) == sorted([a.wrote_offset, b.wrote_offset])
        assert [decode_message(v).body for v in found.message_views] == [b"b", b"a"]
        assert store.query_message("TopicA", "UNIQ-B", 32, 0, 2**62).phy_offsets == [b.wrote_offset]
        found.release()


async def test_offset_in_queue_by_time_lower_and_upper(tmp_path: Path) -> None:
    clock = Clock(step=0)
    async with running_store(small_config(tmp_path), now_ms=clock) as store:
        stamps = [100, 200, 200, 200, 300]
        for ts in stamps:
            clock.ms = ts
            await put(store, "TopicA", 0, b"m")
        by_time = store.get_offset_in_queue_by_time
        assert await by_time("TopicA", 0, 200, BoundaryType.LOWER) == 1
        assert await by_time("TopicA", 0, 200, BoundaryType.UPPER) == 3
        assert await by_time("TopicA", 0, 250, BoundaryType.LOWER) == 4
        assert await by_time("TopicA", 0, 250, BoundaryType.UPPER) == 3
        assert await by_time("TopicA", 0, 50, BoundaryType.LOWER) == 0
        assert await by_time("TopicA", 0, 999, BoundaryType.LOWER) == 5
        assert await store.get_earliest_message_time("TopicA", 0) == 100
        assert store.get_message_store_timestamp("TopicA", 0, 4) == 300
        assert store.get_earliest_store_time() == 100


async def test_lookups_by_queue_offset(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        results = [await put(store, "TopicA", 3, b"m%d" % i) for i in range(4)]
        assert store.get_commit_log_offset_in_queue("TopicA", 3, 2) == results[2].wrote_offset
        assert store.get_commit_log_offset_in_queue("TopicA", 3, 9) == 0
        assert (store.get_min_offset_in_queue("TopicA", 3), store.get_max_offset_in_queue("TopicA", 3)) == (
            0,
            4,
        )
        assert store.topics() == ["TopicA"]
        assert store.queue_ids("TopicA") == [3]
        assert store.min_phy_offset == 0
        assert store.max_phy_offset == results[-1].end_offset


async def test_batch_put_gets_consecutive_queue_offsets(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        await put(store, "TopicA", 0, b"single")
        block = bytearray()
        for i in range(5):
            block += encode("TopicA", 0, b"batch-%d" % i, uniq=f"B{i}")
        res = await store.put_messages(block, "TopicA", 0, sys_flag=0)
        assert res.status is PutMessageStatus.PUT_OK
        assert (res.logics_offset, res.msg_num, res.wrote_bytes) == (1, 5, len(block))
        assert len(res.msg_id.split(",")) == 5
        msgs = [decode_message(b) for b in read_queue(store, "TopicA", 0)]
        assert [m.queue_offset for m in msgs] == list(range(6))
        assert [m.body for m in msgs[1:]] == [b"batch-%d" % i for i in range(5)]
        assert store.query_message("TopicA", "B3", 4, 0, 2**62).phy_offsets == [msgs[4].physical_offset]
        tx = await store.put_messages(block, "TopicA", 0, sys_flag=TRANSACTION_PREPARED_TYPE)
        assert tx.status is PutMessageStatus.MESSAGE_ILLEGAL


async def test_oversized_messages_are_illegal(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path, maxMessageSize=1000)) as store:
        res = await put(store, "TopicA", 0, b"x" * 1001)
        assert res.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert "maxMessageSize" in res.remark
        assert (await put(store, "TopicA", 0, b"x" * 1000)).is_ok
        assert store.get_max_offset_in_queue("TopicA", 0) == 1


async def test_sync_flush_returns_after_the_bytes_are_flushed(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, flushDiskType=FlushDiskType.SYNC_FLUSH)
    async with running_store(cfg) as store:
        for _ in range(5):
            res = await put(store, "TopicA", 0, b"durable")
            assert res.is_ok
            assert store.flushed_offset >= res.end_offset


async def test_slave_refuses_puts(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path, brokerRole=BrokerRole.SLAVE)) as store:
        res = await put(store, "TopicA", 0, b"no")
        assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "slave" in res.remark


async def test_arrival_listener_hears_every_dispatch(tmp_path: Path) -> None:
    heard: list[tuple[str, int, int]] = []
    async with running_store(small_config(tmp_path)) as store:
        store.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
        await put(store, "TopicA", 0, b"a")
        await put(store, "TopicA", 1, b"b", hints=False)
        await put(store, "TopicA", 0, b"c")
    assert heard == [("TopicA", 0, 1), ("TopicA", 1, 1), ("TopicA", 0, 2)]


async def test_controller_mode_dispatches_only_up_to_the_confirm_offset(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path), controller_mode=True, background=True) as store:
        r = [await put(store, "TopicA", 0, b"m%d" % i) for i in range(4)]
        assert store.get_max_offset_in_queue("TopicA", 0) == 0
        store.set_confirm_offset(r[1].end_offset)  # the queue's first file is created in the background
        with trio.fail_after(5):
            while store.get_max_offset_in_queue("TopicA", 0) < 2:
                await trio.sleep(0.001)
        assert store.get_max_offset_in_queue("TopicA", 0) == 2
        store.confirm_offset = r[1].end_offset + 10  # not a record end: the next record waits
        await store.reput()
        assert store.get_max_offset_in_queue("TopicA", 0) == 2
        store.set_confirm_offset(store.max_phy_offset)
        assert store.get_max_offset_in_queue("TopicA", 0) == 4
        assert [decode_message(b).body for b in read_queue(store, "TopicA", 0)] == [
            b"m0",
            b"m1",
            b"m2",
            b"m3",
        ]


async def test_controller_mode_makes_a_queues_first_file_at_put_and_survives_failing_to(
    tmp_path: Path,
) -> None:
    async with running_store(small_config(tmp_path), controller_mode=True, background=True) as store:
        r = await put(store, "TopicA", 0, b"first")
        # the file exists already: the confirm offset dispatches the message at once
        store.set_confirm_offset(r.end_offset)
        assert store.get_max_offset_in_queue("TopicA", 0) == 1
        # creating it fails (disk full, say): the put still succeeds, the dispatch task makes it
        real = store.create_cq_file
        failures = []

        async def failing(cq: Any, queue_offset: int) -> None:
            if not failures:
                failures.append(queue_offset)
                raise OSError(28, "No space left on device")
            await real(cq, queue_offset)

        store.create_cq_file = failing  # type: ignore[method-assign]
        r = await put(store, "TopicB", 0, b"second")
        assert r.status == PutMessageStatus.PUT_OK
        assert failures == [0]
        store.set_confirm_offset(r.end_offset)
        with trio.fail_after(5):
            while store.get_max_offset_in_queue("TopicB", 0) < 1:
                await trio.sleep(0.001)
        assert [decode_message(b).body for b in read_queue(store, "TopicB", 0)] == [b"second"]


async def test_new_queues_past_the_map_budget_are_stored_and_dispatched_once_the_limit_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Near ``vm.max_map_count`` a new queue's file is refused: the sends still succeed (the
    messages are in the commit log), dispatch stops with the limit and the ways out in the log,
    and goes on once the limit is raised -- the process stays up (it died of MemoryError). No
    append follows the refusals: dispatch retries on its own (a refusal met by a put's own
    dispatch call left the dispatch task waiting for the next append)."""
    limit_file = tmp_path / "max_map_count"
    monkeypatch.setattr(MAP_BUDGET, "limit_path", str(limit_file))
    async with running_store(small_config(tmp_path / "store"), background=True) as store:
        r = await put(store, "Topic0", 0, b"m0")  # its queue's file exists before the limit
        limit_file.write_text(f"{count_maps() + MAP_RESERVE}\n")
        results = [await put(store, f"Topic{i}", 0, f"m{i}".encode()) for i in range(1, 6)]
        assert all(x.status == PutMessageStatus.PUT_OK for x in results)
        with trio.fail_after(5):
            while "vm.max_map_count" not in caplog.text:
                await trio.sleep(0.01)
        assert "dispatch stopped at commit-log offset" in caplog.text
        assert store.get_max_offset_in_queue("Topic5", 0) == 0
        assert r.status == PutMessageStatus.PUT_OK
        limit_file.write_text("655360\n")
        with trio.fail_after(5):
            while store.get_max_offset_in_queue("Topic5", 0) < 1:
                await trio.sleep(0.01)
        for i in range(1, 6):
            assert [decode_message(b).body for b in read_queue(store, f"Topic{i}", 0)] == [f"m{i}".encode()]
        assert [decode_message(b).body for b in read_queue(store, "Topic0", 0)] == [b"m0"]


async def test_new_queue_needs_a_file_and_still_reads_its_first_message(tmp_path: Path) -> None:
    async with running_store(small_config(tmp_path)) as store:
        for q in range(20):
            await put(store, f"T{q}", q, b"hello")
        for q in range(20):
            assert [decode_message(b).body for b in read_queue(store, f"T{q}", q)] == [b"hello"]


async def test_delete_topics_drops_their_queues(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg) as store:
        await put(store, "Gone", 0, b"a")
        await put(store, "Kept", 0, b"b")
        await store.delete_topics(["Gone"])
        assert store.topics() == ["Kept"]
        res = store.get_message("g", "Gone", 0, 0, 1)
        assert res is not None
        assert res.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert not (tmp_path / "consumequeue" / "Gone").exists()
    store2 = DefaultMessageStore(cfg, store_host=STORE_HOST)
    report = await store2.start()
    assert store2.topics() == ["Kept"]
    assert not report.rebuilt_queues
    await store2.shutdown()


async def test_expired_queues_are_dropped_and_stay_dropped_after_a_restart(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg) as store:
        await put(store, "Old", 0, b"a")
        await put(store, "Old", 1, b"b")
        await put(store, "Skipped", 0, b"c")
        await put(store, "Empty", 0, b"d")
        while len(store.commit_log.mfq.files) < 3:
            await put(store, "Live", 0, b"x" * 8000)
        store.queues.get_or_create("Fresh", 0)  # a queue without units: kept, as upstream
        assert await store.delete_expired_queues(lambda topic: False) == []  # nothing expired yet
        await store.delete_oldest_commit_log_files(1)
        dropped = await store.delete_expired_queues(lambda topic: topic == "Skipped")
        # "Live" keeps its later messages in the files left
        assert sorted(dropped) == [("Empty", 0), ("Old", 0), ("Old", 1)]
        assert set(store.topics()) == {"Live", "Skipped", "Fresh"}
        assert not (tmp_path / "consumequeue" / "Old").exists()
        assert (tmp_path / "consumequeue" / "Skipped" / "0").is_dir()
    store2 = DefaultMessageStore(cfg, store_host=STORE_HOST)
    report = await store2.start()
    try:
        assert set(store2.topics()) == {"Live", "Skipped", "Fresh"}
        assert report.rebuilt_queues == ["Fresh/0"]  # listed, without files: made again, empty
        # a new message for a dropped queue starts it at offset 0
        res = await put(store2, "Old", 1, b"again")
        assert res.logics_offset == 0
    finally:
        await store2.shutdown()


@pytest.mark.parametrize("hints", [True, False])
async def test_schedule_topic_units_carry_the_delivery_time(tmp_path: Path, hints: bool) -> None:
    clock = Clock(step=0)
    async with running_store(small_config(tmp_path), now_ms=clock) as store:
        res = await put(store, "SCHEDULE_TOPIC_XXXX", 2, b"later", hints=hints, DELAY="3")
        unit = store.queues.get("SCHEDULE_TOPIC_XXXX", 2).unit(0)  # type: ignore[union-attr]
        assert unit is not None
        assert unit[2] == res.store_timestamp + 10_000


async def test_unwritable_next_file_gives_create_mapped_file_failed(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg) as store:
        first = await put(store, "TopicA", 0, b"x" * 3000)
        # a directory squatting on the next file's name: creating the file fails
        (tmp_path / "commitlog" / f"{cfg.mappedFileSizeCommitLog:020d}").mkdir()
        results = [await put(store, "TopicA", 0, b"x" * 3000) for _ in range(30)]
        failed = [r for r in results if r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED]
        assert failed
        assert all(r.is_ok for r in results[: results.index(failed[0])])
        (tmp_path / "commitlog" / f"{cfg.mappedFileSizeCommitLog:020d}").rmdir()
        ok = await put(store, "TopicA", 0, b"after")
        assert ok.is_ok
        assert ok.wrote_offset == cfg.mappedFileSizeCommitLog
        # queue offsets stay dense: failed puts took none
        assert ok.logics_offset == 1 + results.index(failed[0])
        assert first.logics_offset == 0


async def test_controller_mode_restart_keeps_unconfirmed_records_out_of_the_queues(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    async with running_store(cfg, controller_mode=True) as store:
        r = [await put(store, "TopicA", 0, b"m%d" % i) for i in range(5)]
        store.set_confirm_offset(r[2].end_offset)
        await store.reput()
        assert store.get_max_offset_in_queue("TopicA", 0) == 3
    async with running_store(cfg, controller_mode=True) as store:
        assert store.confirm_offset == r[2].end_offset
        assert store.get_max_offset_in_queue("TopicA", 0) == 3
        nxt = await put(store, "TopicA", 0, b"m5")
        assert nxt.logics_offset == 5  # the unconfirmed records keep their queue offsets
        store.set_confirm_offset(store.max_phy_offset)
        await store.reput()
        assert [decode_message(b).body for b in read_queue(store, "TopicA", 0)] == [
            b"m%d" % i for i in range(6)
        ]


async def test_try_put_message_appends_in_the_plain_case_and_declines_otherwise(tmp_path: Path) -> None:
    """The broker's synchronous send call: the same append as put_message when the case is plain;
    None with nothing written (so the caller's put_message decides) whenever it is not."""
    code = tags_hash_code("t")

    def attempt(store: DefaultMessageStore, queue_id: int, uniq: str, **kw: int | None) -> Placed | None:
        sys_flag = kw.get("sys_flag") or 0
        rec = encode("TopicA", queue_id, uniq.encode(), tags="t", uniq=uniq, sys_flag=sys_flag)
        tags_code = kw.get("tags_code", code)
        return store.try_put_message(rec, "TopicA", queue_id, sys_flag, tags_code, None, uniq)

    async with running_store(small_config(tmp_path / "async")) as store:
        first = await put(store, "TopicA", 0, b"first", tags="t", uniq="U0")  # creates the queue
        end = store.max_phy_offset
        # declined: no queue yet, no tags code, a transaction half -- nothing appended
        assert attempt(store, 5, "N1") is None
        assert attempt(store, 0, "N2", tags_code=None) is None
        assert attempt(store, 0, "N3", sys_flag=TRANSACTION_PREPARED_TYPE) is None
        assert store.max_phy_offset == end
        got = attempt(store, 0, "U1")
        assert got is not None
        phys, size, queue_offset, stored_at = got
        assert (phys, queue_offset) == (end, 1)
        assert store.max_phy_offset == end + size
        result = PutMessageResult.placed(got, store.host_field)
        assert result.status is PutMessageStatus.PUT_OK
        assert (result.wrote_offset, result.wrote_bytes, result.logics_offset) == (end, size, 1)
        assert result.msg_id == offset_msg_id(STORE_HOST, end)
        msgs = store.get_message("g", "TopicA", 0, 0, 32)
        assert msgs is not None
        stored = [decode_message(v) for v in msgs.message_views]
        assert [m.body for m in stored] == [b"first", b"U1"]
        assert stored[1].store_timestamp == stored_at
        msgs.release()
        assert store.query_message("TopicA", "U1", 10, 0, 2**62).phy_offsets == [end]
        assert first.wrote_offset == 0
        # a slave store declines too
        store.config.brokerRole = BrokerRole.SLAVE
        assert attempt(store, 0, "U2") is None
        assert store.max_phy_offset == end + size

    cfg = small_config(tmp_path / "sync", flushDiskType=FlushDiskType.SYNC_FLUSH)
    async with running_store(cfg) as store:
        await put(store, "TopicA", 0, b"first", tags="t", uniq="U0")
        end = store.max_phy_offset
        assert attempt(store, 0, "U1") is None  # SYNC_FLUSH must wait for the flush
        assert store.max_phy_offset == end


async def test_the_plain_case_goes_on_across_reservation_steps_and_files_of_a_queue(tmp_path: Path) -> None:
    """A queue file's blocks are reserved in steps (store.consume_queue); the plain send path
    declines only where a step or a file ends (the general path then reserves or creates), and
    right after that appends in the plain case again (the queue's ``stage_limit`` follows). The
    queue's ``max_physic_offset`` counts its staged units."""
    code = tags_hash_code("t")
    cfg = small_config(tmp_path, mappedFileSizeConsumeQueue=3000 * 20)  # 3 reservation steps a file
    async with running_store(cfg) as store:
        declined = staged = 0
        for i in range(7000):
            rec = encode("TopicA", 0, b"m%d" % i, tags="t")
            if store.try_put_message(rec, "TopicA", 0, 0, code, None, None) is None:
                declined += 1
                res = await store.put_message(rec, "TopicA", 0, sys_flag=0, tags_code=code)
                assert res.is_ok
            cq = store.queues.get("TopicA", 0)
            assert cq is not None
            assert cq.cur is not None
            assert cq.stage_limit * 20 == cq.cur.file_from_offset + cq.cur.reserved
            # the last message's end, whether its unit is staged or in the map
            assert cq.max_physic_offset == store.max_phy_offset
            staged += cq.staged > 0
        assert staged > 6000  # most of them were
        assert len(cq.mfq.files) == 3
        # the first append (the queue's creation), 3 files x 3 steps, and the commit-log rolls
        rolls = store.max_phy_offset // cfg.mappedFileSizeCommitLog
        assert declined <= 1 + 9 + rolls, (declined, rolls)
        assert [decode_message(b).body for b in read_queue(store, "TopicA", 0)] == [
            b"m%d" % i for i in range(7000)
        ]


async def test_queues_of_a_deleted_topic_are_emptied_only_once_dispatched_past_the_deletion(
    tmp_path: Path,
) -> None:
    """``empty_queues_ending_by``: the queues whose units all end at or below the offset start
    over at 0; a queue with a later unit (the topic created again) stays; nothing happens while
    dispatch is below the offset (controller mode: the confirm offset holds it back)."""
    async with running_store(small_config(tmp_path), controller_mode=True, background=True) as store:
        old = [await put(store, "TopicA", q, b"old-%d" % q) for q in (0, 1, 1)]
        deleted_at = store.max_phy_offset
        await put(store, "TopicA", 0, b"new")  # queue 0 of the topic created again
        assert await store.empty_queues_ending_by("TopicA", deleted_at) is None  # nothing dispatched
        store.set_confirm_offset(old[1].end_offset)
        await store.reput()
        assert await store.empty_queues_ending_by("TopicA", deleted_at) is None  # not yet past it
        assert store.get_max_offset_in_queue("TopicA", 1) == 1
        store.set_confirm_offset(store.max_phy_offset)
        await store.reput()
        assert store.get_max_offset_in_queue("TopicA", 1) == 2
        # queue 0 holds old-0 and then "new" at offset 1 (no restart in this store): it ends past
        # the deletion and stays; queue 1 ends below it
        assert await store.empty_queues_ending_by("TopicA", deleted_at) == [1]
        assert (store.get_min_offset_in_queue("TopicA", 1), store.get_max_offset_in_queue("TopicA", 1)) == (
            0,
            0,
        )
        assert store.get_max_offset_in_queue("TopicA", 0) == 2
        await put(store, "TopicA", 1, b"again")
        store.set_confirm_offset(store.max_phy_offset)
        await store.reput()
        assert [decode_message(b).body for b in read_queue(store, "TopicA", 1)] == [b"again"]
        assert await store.empty_queues_ending_by("TopicA", deleted_at) == []


def _host_text(host: tuple[str, int]) -> str:
    return f"[{host[0]}]:{host[1]}" if ":" in host[0] else f"{host[0]}:{host[1]}"


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
@pytest.mark.parametrize(
    ("born", "stored"),
    [
        (("::1", 40000), STORE_HOST),
        (("::1", 40000), ("::1", 10911)),
        (("127.0.0.1", 40000), ("::1", 10911)),
        (("fe80::1:2", 40001), ("2001:db8::7", 10911)),
    ],
)
async def test_ipv6_hosts_move_the_store_timestamp_whatever_flags_the_caller_passes(
    tmp_path: Path, flush: FlushDiskType, born: tuple[str, int], stored: tuple[str, int]
) -> None:
    """A record's IPv6 host bits (set by the encoder from the hosts, not by the client that sent
    it) put STORETIMESTAMP and BODY 12 bytes further on; the store writes and checks them where
    the record's own SYSFLAG says, even when the caller's ``sys_flag`` is the client's, without
    those bits -- before, an IPv6 born host got the store timestamp written into its last 8
    bytes and the record kept 0 as its store time."""
    clock = Clock(step=0)
    config = small_config(tmp_path, flushDiskType=flush, maxMessageSize=1000)
    async with running_store(config, background=True, now_ms=clock) as store:

        def record(body: bytes, uniq: str) -> bytearray:
            return encode_message(
                topic="TopicV6",
                queue_id=0,
                flag=0,
                body=body,
                properties=f"UNIQ_KEY\x01{uniq}\x02",
                sys_flag=0,
                born_timestamp=1234,
                born_host=born,
                store_host=stored,
            )

        results = []
        for i in range(3):
            clock.ms += 5
            results.append(await store.put_message(record(b"v6-%d" % i, f"U{i}"), "TopicV6", 0, sys_flag=0))
        clock.ms += 5
        block = record(b"b0", "B0") + record(b"b1", "B1")
        results.append(await store.put_messages(block, "TopicV6", 0, sys_flag=0))
        assert all(r.status is PutMessageStatus.PUT_OK for r in results), results
        msgs = [decode_message(b) for b in read_queue(store, "TopicV6", 0)]
        assert [m.body for m in msgs] == [b"v6-0", b"v6-1", b"v6-2", b"b0", b"b1"]
        assert [m.store_timestamp for m in msgs] == [r.store_timestamp for r in results[:3]] + [clock.ms] * 2
        assert [m.store_timestamp for m in msgs[:3]] == [clock.ms - 15, clock.ms - 10, clock.ms - 5]
        assert {m.born_host for m in msgs} == {_host_text(born)}
        assert {m.store_host for m in msgs} == {_host_text(stored)}
        assert {m.born_timestamp for m in msgs} == {1234}
        assert [m.queue_offset for m in msgs] == list(range(5))
        # the store times are searchable
        assert await store.get_offset_in_queue_by_time("TopicV6", 0, clock.ms - 10, BoundaryType.LOWER) == 1
        # the size check reads BODY where the record has it: one byte over maxMessageSize is refused
        over = await store.put_message(record(b"x" * 1001, "X"), "TopicV6", 0, sys_flag=0)
        assert over.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert "1001" in over.remark
        assert (await store.put_message(record(b"x" * 1000, "Y"), "TopicV6", 0, sys_flag=0)).is_ok
