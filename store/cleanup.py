"""Retention and disk space: delete expired commit-log files and what points into them, and refuse
writes when the disk is nearly full.

Upstream: ``CleanCommitLogService`` and ``CleanConsumeQueueService`` in ``DefaultMessageStore``.

Commit-log files (never the newest) are deleted, oldest first and at most
:data:`DELETE_FILES_BATCH_MAX` per round, when their modification time is older than
``fileReservedTime`` hours and one of these holds: the local hour is listed in ``deleteWhen``
(``"04"`` or ``"04;16"``), the disk is above ``diskMaxUsedSpaceRatio``, or a manual delete was
requested. Above ``diskSpaceCleanForciblyRatio`` (with ``cleanFileForciblyEnable``) files are
deleted regardless of age; above ``diskSpaceWarningLevelRatio`` the store is also marked disk-full
and refuses writes until usage falls back. With ``replicasPerDiskPartition > 1`` (several brokers of
one container on one partition), a store whose own files exceed
``logicalDiskSpaceCleanForciblyThreshold`` of its share of the partition cleans forcibly too.

Consume-queue files whose units all point below the new commit-log minimum are deleted next, then
index files, and the epoch file's prefix is cut.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

log = logging.getLogger("store.cleanup")

#: Upstream ``DELETE_FILES_BATCH_MAX``.
DELETE_FILES_BATCH_MAX = 10
#: Rounds a manual delete request stays active (upstream ``MAX_MANUAL_DELETE_FILE_TIMES``).
MANUAL_DELETE_ROUNDS = 20

#: ``disk_space(path) -> (total_bytes, free_bytes)`` of the partition holding ``path``.
DiskSpaceFn = Callable[[str], tuple[int, int]]


def statvfs_disk_space(path: str) -> tuple[int, int]:
    """Total and available bytes of the partition holding ``path`` (``statvfs``)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def is_hour_listed(when: str, now_ms: int) -> bool:
    """Upstream ``UtilAll.isItTimeToDo``: is the local hour of ``now_ms`` one of ``when``'s
    ``;``-separated hours?"""
    hour = time.localtime(now_ms / 1000).tm_hour
    for w in when.split(";"):
        w = w.strip()
        if w.isdigit() and int(w) == hour:
            return True
    return False


class CleanService:
    """Runs the retention rules for one store; :meth:`run` every ``cleanResourceInterval`` ms."""

    def __init__(self, store: DefaultMessageStore, disk_space: DiskSpaceFn | None = None) -> None:
        self.store = store
        self.disk_space = disk_space or statvfs_disk_space
        self._manual_rounds = 0
        #: set when usage is above ``diskSpaceCleanForciblyRatio`` (upstream ``cleanImmediately``)
        self.clean_immediately = False
        #: last measured used ratio of the commit-log partition (0..1)
        self.physic_ratio = 0.0

    def request_manual_delete(self) -> None:
        """Upstream ``executeDeleteFilesManually``: delete expired files now, ignoring deleteWhen."""
        self._manual_rounds = MANUAL_DELETE_ROUNDS

    async def run(self) -> None:
        interval = self.store.config.cleanResourceInterval / 1000
        while True:
            await trio.sleep(interval)
            await self.clean_once()

    def _used_ratio(self, path: str) -> tuple[float, int]:
        try:
            total, free = self.disk_space(path)
        except OSError as exc:
            log.error("cannot measure disk space of %s: %s", path, exc)
            return -1.0, 0
        if total <= 0:
            return -1.0, 0
        return (total - free) / total, total

    def measure_sync(self) -> tuple[float, float, int]:
        """(commit-log partition used ratio, consume-queue partition used ratio, commit-log
        partition total bytes); may block (statvfs), so it runs in a worker thread."""
        cfg = self.store.config
        phys, total = self._used_ratio(cfg.commitlog_dir)
        logics, _ = self._used_ratio(cfg.consumequeue_dir)
        return phys, logics, total

    def evaluate(self, phys: float, logics: float, total: int) -> bool:
        """Update the disk-full flag from measured ratios; True when files should be reclaimed
        (upstream ``isSpaceToDelete``)."""
        cfg = self.store.config
        self.clean_immediately = False
        self.physic_ratio = phys
        worst = max(phys, logics)
        if worst > cfg.diskSpaceWarningLevelRatio:
            if not self.store.disk_full:
                log.error(
                    "disk usage %.1f%% is above diskSpaceWarningLevelRatio %.0f%%: refusing writes",
                    worst * 100,
                    cfg.diskSpaceWarningLevelRatio * 100,
                )
            self.store.set_disk_full(True)
            self.clean_immediately = True
            return True
        if self.store.disk_full:
            log.info("disk usage %.1f%% is back below the warning level: accepting writes", worst * 100)
            self.store.set_disk_full(False)
        if worst > cfg.diskSpaceCleanForciblyRatio:
            self.clean_immediately = True
            return True
        max_ratio = min(max(cfg.diskMaxUsedSpaceRatio, 10), 95) / 100
        if cfg.replicasPerDiskPartition > 1 and total > 0:
            share = total / cfg.replicasPerDiskPartition
            used = self.store.major_file_size()
            if used / share > cfg.logicalDiskSpaceCleanForciblyThreshold:
                log.info(
                    "store uses %.1f%% of its share of the partition (threshold %.0f%%): cleaning forcibly",
                    used / share * 100,
                    cfg.logicalDiskSpaceCleanForciblyThreshold * 100,
                )
                self.clean_immediately = True
                return True
        return phys < 0 or phys > max_ratio or logics < 0 or logics > max_ratio

    async def clean_once(self) -> list[str]:
        """One round. Returns the commit-log files deleted."""
        store = self.store
        cfg = store.config
        now = store.now_ms()
        space = self.evaluate(*await trio.to_thread.run_sync(self.measure_sync))
        time_up = is_hour_listed(cfg.deleteWhen, now)
        manual = self._manual_rounds > 0
        if manual:
            self._manual_rounds -= 1
        deleted: list[str] = []
        if time_up or space or manual:
            at_once = cfg.cleanFileForciblyEnable and self.clean_immediately
            deleted = await self._delete_commit_log_files(now, cfg.fileReservedTime * 3_600_000, at_once)
        await store.delete_expired_logics()
        return deleted

    async def _delete_commit_log_files(self, now: int, reserved_ms: int, at_once: bool) -> list[str]:
        store = self.store
        mfq = store.commit_log.mfq
        candidates = [mf.path for mf in mfq.files[:-1]][:DELETE_FILES_BATCH_MAX]
        if not candidates:
            return []

        def mtimes() -> list[int]:
            out = []
            for p in candidates:
                try:
                    out.append(int(os.stat(p).st_mtime * 1000))
                except FileNotFoundError:
                    out.append(0)
            return out

        stamps = await trio.to_thread.run_sync(mtimes)
        count = 0
        for stamp in stamps:
            if at_once or now >= stamp + reserved_ms:
                count += 1
            else:
                break
        if count == 0:
            return []
        return await store.delete_oldest_commit_log_files(count)
