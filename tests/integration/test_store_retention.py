"""Retention and disk space: expired files, deleteWhen, disk-full refusal, the shared-partition rule."""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio

from remoting.protocol.message import decode_message
from store.results import GetMessageStatus, PutMessageStatus
from store.truncation import EXPIRE_PASS_CHUNK
from tests.integration.storekit import Clock, put, read_queue, running_store, small_config

HOUR = 3_600_000


class Disk:
    """An injectable partition: ``used`` of ``total`` bytes."""

    def __init__(self, total: int = 100 * 2**30, used: float = 0.10) -> None:
        self.total = total
        self.used = used

    def __call__(self, path: str) -> tuple[int, int]:
        return self.total, int(self.total * (1 - self.used))


def _age_files(paths: list[str], now_ms: int, hours: float) -> None:
    stamp = (now_ms - hours * HOUR) / 1000
    for p in paths:
        os.utime(p, (stamp, stamp))


def _clock_at_hour(hour: int) -> Clock:
    t = time.localtime()
    start = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1))
    return Clock(start=int(start * 1000), step=0)


async def _fill(store, files: int) -> None:  # type: ignore[no-untyped-def]
    i = 0
    while len(store.commit_log.mfq.files) < files:
        await put(store, "TopicA", 0, b"x" * 2000, uniq=f"U{i}")
        i += 1


async def test_expired_files_are_deleted_at_the_delete_hour(tmp_path: Path) -> None:
    clock = _clock_at_hour(4)
    cfg = small_config(tmp_path, fileReservedTime=1, deleteWhen="04")
    async with running_store(cfg, now_ms=clock, disk_space=Disk()) as store:
        await _fill(store, 4)
        files = [mf.path for mf in store.commit_log.mfq.files]
        _age_files(files[:2], clock.ms, 2)
        _age_files(files[2:], clock.ms, 0.5)
        before = len(read_queue(store, "TopicA", 0))
        deleted = await store.run_clean_once()
        assert deleted == files[:2]
        assert set(os.listdir(cfg.commitlog_dir)).isdisjoint(os.path.basename(p) for p in files[:2])
        assert store.min_phy_offset == store.commit_log.mfq.files[0].file_from_offset
        # consume queue: the min offset moved to the first message still in the log
        min_q = store.get_min_offset_in_queue("TopicA", 0)
        assert min_q > 0
        first = decode_message(
            store.look_message_by_offset(store.get_commit_log_offset_in_queue("TopicA", 0, min_q))
        )  # type: ignore[arg-type]
        assert first.physical_offset >= store.min_phy_offset
        res = store.get_message("g", "TopicA", 0, 0, 32)
        assert res is not None
        assert res.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert res.next_begin_offset == min_q
        assert len(read_queue(store, "TopicA", 0)) == before - min_q


async def test_nothing_is_deleted_outside_the_delete_hour_with_room_on_disk(tmp_path: Path) -> None:
    clock = _clock_at_hour(10)
    cfg = small_config(tmp_path, fileReservedTime=1, deleteWhen="04;05")
    async with running_store(cfg, now_ms=clock, disk_space=Disk()) as store:
        await _fill(store, 3)
        _age_files([mf.path for mf in store.commit_log.mfq.files], clock.ms, 5)
        assert await store.run_clean_once() == []
        store.request_manual_delete()
        assert len(await store.run_clean_once()) == 2  # never the current file


async def test_disk_full_refuses_writes_and_cleans_forcibly(tmp_path: Path) -> None:
    clock = _clock_at_hour(10)
    disk = Disk()
    cfg = small_config(tmp_path, fileReservedTime=72)
    async with running_store(cfg, now_ms=clock, disk_space=disk) as store:
        await _fill(store, 3)
        disk.used = 0.95
        deleted = await store.run_clean_once()
        assert len(deleted) == 2  # young files, deleted anyway above diskSpaceCleanForciblyRatio
        res = await put(store, "TopicA", 0, b"refused")
        assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "disk is full" in res.remark
        disk.used = 0.50
        await store.run_clean_once()
        assert (await put(store, "TopicA", 0, b"accepted")).is_ok


async def test_clean_forcibly_ratio_deletes_without_refusing(tmp_path: Path) -> None:
    clock = _clock_at_hour(10)
    disk = Disk(used=0.87)  # above diskSpaceCleanForciblyRatio 0.85, below the warning level 0.90
    async with running_store(small_config(tmp_path), now_ms=clock, disk_space=disk) as store:
        await _fill(store, 3)
        assert len(await store.run_clean_once()) == 2
        assert (await put(store, "TopicA", 0, b"ok")).is_ok


async def test_shared_partition_share_triggers_cleaning(tmp_path: Path) -> None:
    clock = _clock_at_hour(10)
    cfg = small_config(tmp_path, replicasPerDiskPartition=4, logicalDiskSpaceCleanForciblyThreshold=0.8)
    # 4 replicas share 1 MiB: this store's share is 256 KiB; 4 x 64 KiB commit-log files exceed 80 %
    disk = Disk(total=1024 * 1024, used=0.10)
    async with running_store(cfg, now_ms=clock, disk_space=disk) as store:
        await _fill(store, 4)
        assert len(await store.run_clean_once()) >= 1
    cfg2 = small_config(tmp_path / "b", replicasPerDiskPartition=1)
    async with running_store(cfg2, now_ms=clock, disk_space=disk) as store:
        await _fill(store, 4)
        assert await store.run_clean_once() == []


async def test_epoch_file_prefix_follows_retention(tmp_path: Path) -> None:
    clock = _clock_at_hour(4)
    async with running_store(
        small_config(tmp_path, fileReservedTime=1), now_ms=clock, disk_space=Disk()
    ) as store:
        store.epoch_file.append(1, 0)
        await _fill(store, 3)
        store.epoch_file.append(2, store.max_phy_offset)
        await _fill(store, 4)
        files = [mf.path for mf in store.commit_log.mfq.files]
        _age_files(files[:2], clock.ms, 3)
        # the others young by the store's clock (their real mtimes are hours off it between
        # midnight and 04:30, when 04:30 today is still ahead: they were all expired then)
        _age_files(files[2:], clock.ms, 0)
        await store.run_clean_once()
        first = store.epoch_file.first_entry()
        assert first is not None
        assert first.epoch == 1
        assert first.start_offset == store.min_phy_offset


async def test_queues_are_visited_when_the_commit_log_min_offset_went_up_and_the_visit_yields(
    tmp_path: Path,
) -> None:
    """As upstream's CleanConsumeQueueService: the queues are visited once after the start and
    then only when the commit log's min offset went up (a visit of 36,000 queues every
    cleanResourceInterval took a quarter of an idle process's CPU, and the first one blocked its
    event loop for seconds); a visit lets other tasks run between chunks of queues."""
    cfg = small_config(tmp_path, fileReservedTime=0, deleteWhen=";".join(f"{h:02d}" for h in range(24)))
    async with running_store(cfg, disk_space=Disk()) as store:
        for i in range(3 * EXPIRE_PASS_CHUNK):
            await put(store, f"Topic{i}", 0, b"x" * 100)
        assert len(store.commit_log.mfq.files) >= 3
        ticks = 0
        visiting = True

        async def ticker() -> None:
            nonlocal ticks
            while visiting:
                ticks += 1
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await trio.lowlevel.checkpoint()
            before = ticks
            await store.delete_expired_logics()  # the first visit
            visiting = False
        assert ticks - before >= 3  # it yielded between its chunks
        assert store.expired_logics_below == store.commit_log.min_offset
        # nothing changed: no visit (it would wait for the maintenance lock)
        async with store.maintenance_lock:
            with trio.fail_after(2):
                await store.delete_expired_logics()
        # the oldest commit-log file goes: the next round visits the queues
        assert await store.run_clean_once()
        assert store.expired_logics_below == store.commit_log.min_offset > 0
        assert store.get_min_offset_in_queue("Topic0", 0) == 1  # its message is gone
        last = f"Topic{3 * EXPIRE_PASS_CHUNK - 1}"
        assert store.get_min_offset_in_queue(last, 0) == 0  # in the file that stays
        assert len(read_queue(store, last, 0)) == 1
