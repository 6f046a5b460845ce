"""Cutting the store: truncation to an offset (replication), deleting the oldest files (retention)
and deleting topics.

Upstream: ``DefaultMessageStore.truncateFiles`` / ``truncateDirtyLogicFiles``,
``CommitLog.deleteExpiredFile``, ``ConsumeQueue.deleteExpiredFile`` / ``correctMinOffset``,
``IndexService.deleteExpiredFile``, ``DefaultMessageStore.deleteTopics``.

Crash safety of :func:`truncate_store` (a crash at any point must not bring back bytes past the
truncation point once they are gone, nor leave part of them): first the checkpoint is rewritten
so the next recovery scans from at or below the offset; then the commit log is zeroed from the
offset forward (so the record at the offset reads as the end of data as soon as the first page is
written) and later files are deleted; then consume queues, index and epoch file follow. If the
process dies before the first zeros reach the page cache, the store comes back untruncated, which
is the state the caller started from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from remoting.clock import TimeSlice
from store.flush import fsync_paths_sync
from store.mapped_file import MappedFile, delete_paths_sync, zero_file_range_sync

if TYPE_CHECKING:
    from store.consume_queue import ConsumeQueue
    from store.message_store import DefaultMessageStore

log = logging.getLogger("store.truncation")


async def truncate_store(store: DefaultMessageStore, offset: int) -> None:
    """Truncate everything to the record boundary ``offset`` (checked by the caller)."""
    cl = store.commit_log
    async with store.maintenance_lock:
        old_max = cl.max_offset
        ck = store.checkpoint
        data = ck.data
        data.physicFlushedOffset = (
            min(data.physicFlushedOffset, offset) if data.physicFlushedOffset >= 0 else offset
        )
        data.logicsFlushedOffset = (
            min(data.logicsFlushedOffset, offset) if data.logicsFlushedOffset >= 0 else offset
        )
        data.confirmPhyOffset = min(data.confirmPhyOffset, offset)
        await trio.to_thread.run_sync(ck.flush_sync, ck.snapshot())
        # a deleted topic's records lay below its mark; those past the cut are gone, and what
        # arrives there next (replicated from a new master) is not the deleted incarnation's
        marks = store.deletion_marks
        if any(end > offset for end in marks.marks.values()):
            marks.note([t for t, end in marks.marks.items() if end > offset], offset)
            await marks.save()

        cut_mf = cl.mfq.find(offset)
        old_wrote = cut_mf.wrote_position if cut_mf is not None else 0
        gone = cl.cut(offset)
        store.cl_flusher.truncated(offset)
        if cut_mf is not None and old_wrote > offset - cut_mf.file_from_offset:
            await trio.to_thread.run_sync(
                zero_file_range_sync, cut_mf.path, offset - cut_mf.file_from_offset, old_wrote
            )
        paths = cl.mfq.retire(gone)
        await trio.to_thread.run_sync(delete_paths_sync, paths)

        await truncate_logics(store, offset)

        d = store.dispatcher
        d.reput_offset = min(d.reput_offset, offset)
        if store._confirm_offset > offset:
            store._confirm_offset = offset
        epoch = store.epoch_file
        epoch.truncate_suffix(offset)
        epoch.set_end_offset(offset)
        await trio.to_thread.run_sync(epoch.persist)
        store.cl_flusher.flushed_offset = min(store.cl_flusher.flushed_offset, cl.max_offset)
    log.warning(
        "store truncated to offset %d (was %d): %d bytes and %d file(s) dropped",
        offset,
        old_max,
        old_max - offset,
        len(paths),
    )


async def truncate_logics(store: DefaultMessageStore, offset: int) -> None:
    """Drop consume-queue units and index entries of messages at or after ``offset`` and make the
    change durable."""
    gone_paths: list[str] = []
    cut_paths: list[str] = []
    for cq in list(store.queues):
        if cq.max_offset == 0 or (0 <= cq.max_physic_offset <= offset):
            continue
        gone, cut = cq.truncate_to_phys(offset)
        gone_paths.extend(cq.mfq.retire(gone))
        if cut is not None:
            cut_paths.append(cut.path)
    if gone_paths:
        log.warning("consume queues: deleted %d file(s) past offset %d", len(gone_paths), offset)
    await trio.to_thread.run_sync(delete_paths_sync, gone_paths)
    await trio.to_thread.run_sync(fsync_paths_sync, cut_paths)
    if store.index is not None:
        dropped = store.index.truncate_after(offset)
        if dropped:
            log.warning("index: dropped %d entries past offset %d", dropped, offset)
        store.index.drain()  # flush() does not drain (truncate_after just did; cheap)
        await trio.to_thread.run_sync(store.index.flush)


async def delete_oldest_commit_log_files(store: DefaultMessageStore, count: int) -> list[str]:
    """Retention: delete the ``count`` oldest commit-log files (never the current one)."""
    cl = store.commit_log
    async with store.maintenance_lock:
        gone: list[MappedFile] = cl.mfq.detach_first(count)
        if not gone:
            return []
        new_min = cl.min_offset
        cl.drop_marks_below(new_min)
        d = store.dispatcher
        if d.reput_offset < new_min:
            log.error(
                "retention deleted undispatched messages below %d (dispatch was at %d)",
                new_min,
                d.reput_offset,
            )
            d.reput_offset = new_min
        paths = cl.mfq.retire(gone)
        await trio.to_thread.run_sync(delete_paths_sync, paths)
        epoch = store.epoch_file
        epoch.truncate_prefix(new_min)
        if epoch.dirty:
            await trio.to_thread.run_sync(epoch.persist)
    for p in paths:
        log.info("retention: deleted commit-log file %s", p)
    return paths


#: queues a retention pass handles between two yields to the event loop, at most; and at most
#: this long (a queue whose pages were reclaimed costs a disk read: ~1.7 ms here)
EXPIRE_PASS_CHUNK = 500
EXPIRE_PASS_SLICE_S = 0.02


async def delete_expired_logics(store: DefaultMessageStore) -> None:
    """Retention: delete consume-queue and index files that only point below the commit log's
    min offset, and move the queues' min offsets up.

    As upstream's ``CleanConsumeQueueService``, the queues are visited only when the commit
    log's min offset went up since the last visit (and once after the start): with 36,000
    queues a visit every ``cleanResourceInterval`` took a quarter of the process's idle CPU, and
    the first one after a start blocked the event loop for seconds (the controller and the name
    server in the process did not answer). A visit yields to the event loop every
    :data:`EXPIRE_PASS_CHUNK` queues or :data:`EXPIRE_PASS_SLICE_S`, under the maintenance lock (a topic deletion or a
    truncation does not interleave with it); maps whose closing waits for live views are
    retried every round."""
    cl = store.commit_log
    min_phys = cl.min_offset
    paths: list[str] = []
    if min_phys > store.expired_logics_below:
        async with store.maintenance_lock:
            min_phys = cl.min_offset
            share = TimeSlice(EXPIRE_PASS_SLICE_S, EXPIRE_PASS_CHUNK)
            for cq in list(store.queues):
                gone = cq.detach_expired(min_phys)
                paths.extend(cq.mfq.retire(gone))
                cq.correct_min_offset(min_phys)
                await share.tick()
            store.expired_logics_below = min_phys
    for cq in store.queues:
        if cq.mfq.closing:
            cq.mfq.retry_closing()
    cl.mfq.retry_closing()
    if paths:
        log.info("retention: deleting %d consume-queue file(s) below offset %d", len(paths), min_phys)
        await trio.to_thread.run_sync(delete_paths_sync, paths)
    if store.index is not None:
        store.index.delete_files_before(min_phys)


async def restart_queue(cq: ConsumeQueue) -> None:
    """Cut a consume queue at ``cq.restart_at``: a message newer than all its units arrived for an
    offset below its max (see ``ConsumeQueue._put_slow``), so the units from there on are stale."""
    at = cq.restart_at
    cq.restart_at = None
    if at is None or at >= cq.max_offset:
        return
    stale = cq.max_offset - at
    gone, cut = cq.truncate_to_offset(at)
    log.warning(
        "consume queue %s/%d started over at offset %d where its messages are written (topic deleted "
        "and created again?): dropped %d stale unit(s) from there on",
        cq.topic,
        cq.queue_id,
        at,
        stale,
    )
    await trio.to_thread.run_sync(delete_paths_sync, cq.mfq.retire(gone))
    if cut is not None:
        await trio.to_thread.run_sync(fsync_paths_sync, [cut.path])


async def empty_queues_ending_by(store: DefaultMessageStore, topic: str, end: int) -> list[int]:
    """Empty the consume queues of ``topic`` whose units all end at or below the commit-log offset
    ``end`` (the queues of a topic deleted at ``end`` on the master and created again since: see
    ``broker.topics.DeletedTopics``); they start over at offset 0, as the master's did. Returns
    their queue ids. The caller makes sure everything below ``end`` is dispatched: a unit of the
    old topic dispatched later would come back."""
    emptied: list[int] = []
    for cq in list(store.queues.tables.get(topic, {}).values()):
        if cq.max_offset <= 0 or cq.max_physic_offset > end:
            continue
        gone, cut = cq.truncate_to_offset(0)
        emptied.append(cq.queue_id)
        await trio.to_thread.run_sync(delete_paths_sync, cq.mfq.retire(gone))
        if cut is not None:
            await trio.to_thread.run_sync(fsync_paths_sync, [cut.path])
    if emptied:
        log.info(
            "emptied consume queues %s of %s: their messages predate its deletion at %d", emptied, topic, end
        )
    return emptied


async def delete_queues(store: DefaultMessageStore, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Drop single consume queues: maps closed, files and (then empty) directories deleted,
    manifest rewritten. A message for such a queue later starts a new queue at offset 0 (as
    upstream, whose queue offsets also live in its queue table). Returns the queues dropped."""
    gone = store.queues.detach_queues(keys)
    paths: list[str] = []
    for cq in gone:
        files = list(cq.mfq.files)
        cq.close()
        paths.extend(mf.path for mf in files)
    dropped = [(cq.topic, cq.queue_id) for cq in gone]
    if paths:
        await trio.to_thread.run_sync(delete_paths_sync, paths)
    await trio.to_thread.run_sync(store.queues.remove_empty_dirs_sync, dropped)
    await trio.to_thread.run_sync(store.queues.rewrite_manifest_sync, store.queues.live_keys())
    return dropped


def expired_queues(store: DefaultMessageStore, skip: Callable[[str], bool]) -> list[tuple[str, int]]:
    """The consume queues of topics not ``skip``-ped whose every message lies below the commit
    log's min offset (retention deleted them all); upstream's ``cleanExpired`` test, which also
    passes over queues without units."""
    min_phys = store.commit_log.min_offset
    return [
        (cq.topic, cq.queue_id)
        for cq in store.queues
        if 0 <= cq.max_physic_offset <= min_phys and not skip(cq.topic)
    ]


async def delete_topics(store: DefaultMessageStore, topics: list[str]) -> None:
    """Drop the topics' consume queues: maps closed, directories deleted, manifest rewritten.
    The topics are marked first (``store.deletion_marks``): their records in the log stay, and a
    recovery must not build the queues again from them."""
    store.deletion_marks.note(topics, store.commit_log.max_offset)
    await store.deletion_marks.save()
    gone = store.queues.detach_topics(topics)
    for cq in gone:
        cq.close()
    await trio.to_thread.run_sync(store.queues.delete_dirs_sync, topics)
    await trio.to_thread.run_sync(store.queues.rewrite_manifest_sync, store.queues.live_keys())
    if gone:
        log.info("deleted consume queues of topics %s (%d queues)", topics, len(gone))
