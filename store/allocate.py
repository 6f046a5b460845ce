"""Creating commit-log files ahead of need, and bringing their pages into memory ahead of the
writer, off the event loop.

Upstream: ``AllocateMappedFileService``. The file after the current one is created (blocks
reserved) in a worker thread as soon as the log rolls, so the send path finds it ready.
:meth:`FileAllocator.get` is the one way to obtain a file: it hands out the prepared one or creates
it on the spot (serialized with preparation, so a file is never created twice). Bringing the
prepared file's pages into memory is CPU work (zero-filling 512 MiB costs 55 ms to over 1 s of
CPU here) that must not compete with the writer: :class:`IdleWorker`'s thread hands it to the
page helper process (:mod:`store.page_helper`), which runs at the lowest CPU priority, and stops
as soon as the file is taken.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import trio

from remoting.repeats import RepeatedLog
from store.commitlog import CommitLog
from store.mapped_file import PAGE_SIZE, MappedFile, MappedFileQueue, delete_paths_sync

log = logging.getLogger("store.allocate")

T = TypeVar("T")


class IdleWorker:
    """One daemon thread that runs blocking jobs, one at a time: best-effort work that nobody
    needs soon -- a job may wait indefinitely on a busy machine, so it must be cheap to abandon
    (see ``on_cancel``).

    Its jobs hand their CPU work to the page helper process, which runs in ``SCHED_IDLE``: it
    gets a CPU only when no other thread wants one, so it never delays the writer (nor other
    processes). The thread itself runs at normal priority and spends its time waiting for the
    helper, GIL released. (Until 2026-12-07 the thread itself was ``SCHED_IDLE`` and did the
    ``madvise`` calls: preempted while it held the GIL, or while the event loop waited to hand
    it over, it stopped the loop for 23-40 ms at a time under load -- a priority inversion no
    thread of this process can avoid. A separate thread, not trio's worker threads, so that a
    job that waits long for the helper never holds up an fsync.)
    """

    def __init__(self, name: str = "store-idle") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            self._jobs.get()()

    async def run_sync(self, fn: Callable[[], T], on_cancel: Callable[[], None] | None = None) -> T:
        """Run ``fn()`` in the thread; return its result or raise its exception. Once submitted
        the call waits for ``fn`` even when cancelled (like ``trio.to_thread.run_sync``):
        ``on_cancel`` is called on cancellation to make ``fn`` finish early; the call then
        returns as usual and the cancellation is delivered at the next checkpoint."""
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()
        done: list[T] = []
        failed: list[BaseException] = []

        def job() -> None:
            try:
                done.append(fn())
            except BaseException as exc:  # handed to the caller, re-raised there
                failed.append(exc)
            try:
                token.run_sync_soon(trio.lowlevel.reschedule, task)
            except trio.RunFinishedError:  # pragma: no cover - the caller waits, so never
                log.error("idle job %r finished after its trio run", fn)

        def abort(_: object) -> trio.lowlevel.Abort:
            if on_cancel is not None:
                on_cancel()
            return trio.lowlevel.Abort.FAILED

        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        self._jobs.put(job)
        await trio.lowlevel.wait_task_rescheduled(abort)
        if failed:
            raise failed[0]
        return done[0]


#: seconds of the writer's recent rate dirtied ahead of it (the write-ahead window, the start of a
#: prepared file): 0.5 s of a 400 MB/s writer is the full 128 MiB window
LEAD_SECONDS = 0.5
#: seconds of its rate read into the page cache ahead of it (zero-filled: dirtying those pages later
#: costs only the write fault); a big file's successor is created once the writer is that close
READ_AHEAD_SECONDS = 4.0
#: the least that is dirtied and read ahead, whatever the rate (a broker that receives a message now
#: and then)
MIN_LEAD = 4 * 1024 * 1024


class WritePace:
    """The commit log's recent write rate, and from it how much is worth bringing into memory
    ahead of the writer. Pages dirtied ahead are resident and are written back to disk (zeros)
    whether or not the writer ever reaches them: sized for a writer at memory speed everywhere,
    a dev cluster that had received 20 messages held 545 MB of file pages and had written 400 MB
    of zeros (four brokers, 64 MiB files: each its whole current file and half the next dirty).
    A big file's successor is created (its blocks reserved) only once the writer is within the
    read-ahead of the end, too.

    Sampled by :class:`WriteAhead` each time the writer passes its mark (every half window), so
    the rate is that of the last half window: a writer speeding up from idle gets the full window
    within two samples. It grows at once and falls by at most half a sample, so a pause (between
    two benchmark rounds, say) does not shrink the window the writer comes back to."""

    def __init__(self, max_lead: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_lead = max_lead
        self.clock = clock
        #: bytes a second over the last sampled interval (0 until two samples)
        self.rate = 0.0
        self._last: tuple[float, int] | None = None

    def sample(self, offset: int) -> None:
        """The writer is at log ``offset`` now."""
        now = self.clock()
        last, self._last = self._last, (now, offset)
        if last is None:
            return
        t0, o0 = last
        if offset < o0:  # the log was cut back: start over
            self.rate = 0.0
            return
        if now > t0:
            self.rate = max((offset - o0) / (now - t0), self.rate / 2)

    @property
    def lead(self) -> int:
        """Bytes to keep dirtied ahead of the writer: :data:`LEAD_SECONDS` of its rate, at least
        :data:`MIN_LEAD`, at most ``max_lead``; whole pages."""
        want = max(MIN_LEAD, int(self.rate * LEAD_SECONDS))
        want = min(want, self.max_lead)
        return want - want % PAGE_SIZE if want >= PAGE_SIZE else want

    @property
    def read_ahead(self) -> int:
        """Bytes ahead of the writer worth reading into the page cache (zero-filled: the bulk of
        a first touch's cost): :data:`READ_AHEAD_SECONDS` of its rate, at least :attr:`lead`."""
        return max(self.lead, int(self.rate * READ_AHEAD_SECONDS))


#: most small files (no bigger than the allocator's ``dirty_ahead``) prepared ahead: with one, a
#: writer rolling a 4 MiB file every ~10 ms outran their population and sustained 0.67-0.77 of
#: the no-roll rate (160,000-append rounds of bench.store); with 8, 0.79-0.82
MAX_PREPARED_FILES = 8

#: the process's idle-work thread (shared by every store: idle work is never urgent)
IDLE = IdleWorker()


class FileAllocator:
    """Hands out the files of one :class:`MappedFileQueue`.

    Preparing a file: create it (blocks reserved, in a trio worker thread), bring its pages into
    memory in the idle thread (:meth:`populate`), then publish it as the queue's ``next_file``.
    A file no bigger than ``dirty_ahead`` (small files roll every few milliseconds) is instead
    mapped writable whole in a worker thread, as :attr:`populating` too, and then published.
    While it is being populated it is only :attr:`populating`: :meth:`get` takes it from there at
    once (population stops), so a roll never waits for idle work."""

    def __init__(
        self,
        mfq: MappedFileQueue,
        dirty_ahead: int = 0,
        idle: IdleWorker = IDLE,
        pace: WritePace | None = None,
    ) -> None:
        self.mfq = mfq
        #: bytes at the start of a prepared file to map writable too (the write-ahead window); with
        #: a ``pace``, at most that: as much as the writer's rate asks for
        self.dirty_ahead = dirty_ahead
        self.idle = idle
        #: the writer's rate, which bounds what is brought into memory ahead of it; None: all of
        #: every file (the first ``dirty_ahead`` bytes dirty, the rest read)
        self.pace = pace
        #: the file in use whose population was asked for last, and up to where
        self._in_use_read: tuple[MappedFile | None, int] = (None, 0)
        #: the prepared file :meth:`populate` read last, and up to where it got
        self._prepared_read: tuple[MappedFile | None, int] = (None, 0)
        #: the created file being populated (not yet the queue's next file)
        self.populating: MappedFile | None = None
        #: a file in use whose population :meth:`run` still has to finish (:meth:`populate_later`)
        self._unpopulated: MappedFile | None = None
        self._lock = trio.Lock()
        #: held around a worker job that maps pages of this log writable -- a write-ahead refill
        #: (:class:`WriteAhead`), a big file's creation with its first window -- so that they run
        #: one at a time: with two CPUs, two such jobs at once left the writer one CPU among three
        #: runnable threads (it waited for a CPU 25-45 % of a 16 KiB ``bench.store`` round) and
        #: contended with each other in ext4's ``page_mkwrite`` (thousands of switches a round)
        self.dirtying = trio.Lock()
        self._wakeup = trio.Event()
        #: called when a prepared file becomes the queue's next file (set by :class:`WriteAhead`:
        #: a window that reached the end of the file in use goes on into it)
        self.published: Callable[[], None] | None = None
        #: creation failures (a full disk): said once per reason, repeats at DEBUG
        self._failures = RepeatedLog(log)

    def creation_failed(self, offset: int, exc: OSError) -> None:
        """The file at ``offset`` could not be created (by :meth:`get` for a writer that needs it,
        or ahead of one): logged at ERROR once per offset and reason -- a writer retries with
        every send, the preparation several times a second -- with a reminder every 30 s."""
        self._failures.log(
            "create",
            logging.ERROR,
            f"cannot create the commit-log file at offset {offset}: {exc.strerror or exc}; "
            "appends that need it are refused (CREATE_MAPPED_FILE_FAILED) until it can be created",
        )

    def _created(self, mf: MappedFile) -> None:
        self._failures.resolved(
            "create", f"created the commit-log file at offset {mf.file_from_offset}: appends go on"
        )

    async def get(self, offset: int) -> MappedFile:
        """The file starting at ``offset``: the prepared one (or the one being populated), or a
        new one. Raises OSError when it cannot be created (e.g. ENOSPC). Never waits for page
        population, only for a creation (reserving blocks and mapping: milliseconds); returns
        without a checkpoint unless it has to create the file."""
        mf = self._take_ready(offset)  # no need to wait for a preparation in progress
        if mf is not None:
            return mf
        async with self._lock:
            mf = self._take_ready(offset)  # prepared meanwhile
            if mf is not None:
                return mf
            try:
                mf = await trio.to_thread.run_sync(self.mfq.create_file_sync, offset)
            except OSError as exc:
                self.creation_failed(offset, exc)
                raise
            self._created(mf)
            self.populate_later(mf)
            return mf

    def _take_ready(self, offset: int) -> MappedFile | None:
        """The file for ``offset`` if it exists already: published, or created and being
        populated (then taken from the population, which stops at its next chunk, and left to
        :meth:`populate_later`). No checkpoint: a roll that takes it must not yield (see
        ``PutPaths._append_rolling``)."""
        mf = self.mfq.take_next(offset)
        if mf is not None:
            return mf
        mf = self.populating
        if mf is None or mf.file_from_offset != offset:
            return None
        self.populating = None
        self.populate_later(mf)
        return mf

    def populate_later(self, mf: MappedFile) -> None:
        """Have :meth:`run` bring the rest of ``mf`` -- a file in use that was not (fully)
        populated: created on the spot, taken while being populated, or loaded at start -- into
        the page cache in the idle thread, before it prepares the next file. Without that the
        write-ahead window must zero-fill every page itself (through 8 MiB readaheads here, ~18 ms
        of CPU each): it fell behind a writer of 400 MB/s, and a writer that overtakes it takes
        the readahead in its own fault (measured: 18 ms stalls every 8 MiB, 10,000 queues)."""
        self._unpopulated = mf
        self._wakeup.set()

    def follow(self, mf: MappedFile) -> None:
        """The writer of the file in use ``mf`` moved on (called by :class:`WriteAhead` at each
        refill): have :meth:`run` read ``mf`` further ahead when the writer's pace now asks for
        more than was asked before, and prepare the next file once the writer is that close to
        the end. Nothing without a pace (the whole file was asked for, the next one prepared)."""
        if self.pace is None:
            return
        asked_mf, asked = self._in_use_read
        if asked_mf is not mf or self._read_end(mf, mf.wrote_position) > asked:
            self.populate_later(mf)
        if not self.far_from_end(mf):
            self.request_prepare()

    def far_from_end(self, mf: MappedFile | None) -> bool:
        """Whether the writer of ``mf`` is further from its end than its pace reads ahead: a big
        file's successor is created then (its blocks reserved: 64 MiB to 1 GiB of disk, which a
        broker that receives a message now and then would hold for nothing for a long time)."""
        if self.pace is None or mf is None:
            return False
        return mf.file_size - mf.wrote_position > self.pace.read_ahead

    def _dirty_now(self) -> int:
        """Bytes at the start of a prepared file to dirty now."""
        return self.dirty_ahead if self.pace is None else min(self.dirty_ahead, self.pace.lead)

    def _read_end(self, mf: MappedFile, start: int) -> int:
        """Where reading ``mf`` into memory from ``start`` should stop now."""
        if self.pace is None:
            return mf.file_size
        return min(mf.file_size, start + self.pace.read_ahead)

    def request_prepare(self) -> None:
        """Ask :meth:`run` to prepare the file after the current last one."""
        self._wakeup.set()

    async def prepare(self, offset: int) -> None:
        """Create, populate and publish the file for ``offset`` unless it is ready or in the
        queue. Files no bigger than ``dirty_ahead`` are prepared that far ahead (``dirty_ahead``
        bytes of files, at most :data:`MAX_PREPARED_FILES`: 8 of 4 MiB for 32 MiB), one file per
        hold of the lock, so that a roll never waits behind a preparation; bigger ones one ahead
        (upstream prepares two) -- with a pace, only once the writer is within its read-ahead
        of the end of the file in use."""
        mfq = self.mfq
        urgent = mfq.file_size <= self.dirty_ahead
        ahead = min(MAX_PREPARED_FILES, max(1, self._dirty_now() // mfq.file_size)) if urgent else 1
        while True:
            async with self._lock:
                stale = mfq.drop_stale_prepared()
                if stale:
                    await trio.to_thread.run_sync(delete_paths_sync, mfq.retire(stale))
                last = mfq.last
                if last is not None and last.file_from_offset >= offset:
                    return
                if len(mfq.prepared) >= ahead or mfq.next_offset() != offset:
                    return
                if not urgent and self.far_from_end(last):
                    return  # :meth:`follow` asks again when the writer is close
                at = mfq.prepared_end()
                # a file no bigger than the write-ahead window is needed within milliseconds:
                # mapped writable whole; a bigger one its first window (what the writer meets
                # right after the roll), the rest is read in idle time (:meth:`populate`)
                dirty = mfq.file_size if urgent else min(self._dirty_now(), mfq.file_size)
                try:
                    if urgent:  # needed within milliseconds: not behind a refill
                        mf = await trio.to_thread.run_sync(self._create_writable_sync, at, dirty)
                    else:
                        async with self.dirtying:
                            mf = await trio.to_thread.run_sync(self._create_writable_sync, at, dirty)
                except OSError as exc:
                    self.creation_failed(at, exc)
                    return
                self._created(mf)
                if urgent:
                    if self.populating is mf:  # else a roll took it
                        self.populating = None
                        with trio.CancelScope(shield=True):
                            if not await self._publish_or_discard(mf):
                                return
                    continue
            if self.populating is not mf:
                return  # a roll took it (and asked for the rest of it: :meth:`populate_later`)
            try:
                self._prepared_read = (mf, await self.populate(mf))
            finally:
                # also when cancelled (the idle job has returned by then): publish or discard
                if self.populating is mf:
                    self.populating = None
                    with trio.CancelScope(shield=True):
                        await self._publish_or_discard(mf)
            return

    def _create_writable_sync(self, offset: int, dirty: int) -> MappedFile:
        """Create the file at ``offset`` and map its first ``dirty`` bytes writable (blocking; a
        worker thread, at normal priority).

        Not in the idle thread: left to it, 4 MiB rolls ran at 0.68-0.73 of the no-roll rate
        instead of 0.82-1.08 (the writer reached files not populated yet), and under a load that
        keeps both CPUs busy the page helper gets no CPU at all -- the writer then zero-filled the
        first pages of each new 64 MiB file in its own page faults (4 % of the broker's thread
        under batch sends). In one job with the creation: each worker job costs the busy event
        loop ~1.5 ms of CPU in hand-overs on this kind of machine (measured: 200 jobs that do
        nothing, 300 ms), a third of a 4 MiB file's writing time. The file is
        :attr:`populating` from its creation on, so that a roll that needs it meanwhile takes it
        at once (:meth:`_take_ready`) instead of waiting for the population (3.6 ms a roll, most
        rolls of a 4 MiB writer)."""
        mf = self.mfq.create_file_sync(offset)
        self.populating = mf  # a plain attribute: read by the event loop, written here
        if dirty:
            mf.populate_write_sync(0, dirty)
        return mf

    async def _publish_or_discard(self, mf: MappedFile) -> bool:
        """Keep the prepared ``mf`` as the queue's next prepared file (True), or delete it when the
        log moved on (or was truncated) while it was being prepared."""
        mfq = self.mfq
        if mfq.add_prepared(mf):
            if self.published is not None:
                self.published()
            return True
        await trio.to_thread.run_sync(delete_paths_sync, mfq.retire([mf]))
        return False

    async def populate(self, mf: MappedFile) -> int:
        """Bring ``mf`` -- created with its first window mapped writable -- further into memory
        from the idle thread: read-populated by the page helper past that window, as far as the
        writer's pace asks for (zero-filled page cache: the writer's first touch of a page then
        costs a minor fault, or nothing once the write-ahead window reached it). Stops between
        chunks once ``mf`` is no longer :attr:`populating` (taken by :meth:`get`: the write-ahead
        window goes on from there) or on cancellation. Returns how far it got."""
        start = mf.write_ahead_end
        return await self._read_in_idle(
            mf, start, max(start, self._read_end(mf, 0)), lambda: self.populating is mf
        )

    async def run(self) -> None:
        """Prepare the next file whenever asked (after each roll and at start)."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            mf, self._unpopulated = self._unpopulated, None
            if mf is not None:
                await self._populate_in_use(mf)
            if self.mfq.files:
                await self.prepare(self.mfq.next_offset())

    async def _populate_in_use(self, mf: MappedFile) -> int:
        """Read-populate ``mf`` from past its write-ahead window (or from where the last call for
        it stopped) to its end -- with a pace, to as far as the writer's rate asks for -- in the idle
        thread (the write-ahead window then only has to map the pages writable); stops between
        chunks once ``mf`` is no longer the last file (a roll) or on cancellation. Returns how
        far it got."""

        def in_use() -> bool:
            files = self.mfq.files
            return not mf.closed and bool(files) and files[-1] is mf

        wrote = mf.wrote_position
        end = self._read_end(mf, wrote)
        asked_mf, asked = self._in_use_read
        # beyond the write-ahead window, which :class:`WriteAhead` maps at normal priority: the
        # writer must never meet a page the idle helper is in the middle of bringing in
        start = min(max(wrote + self._dirty_now(), mf.write_ahead_end), end)
        if asked_mf is mf:
            start = max(start, asked)
        elif self._prepared_read[0] is mf:
            start = max(start, self._prepared_read[1])  # read when it was prepared
        self._in_use_read = (mf, end)
        return await self._read_in_idle(mf, start, end, in_use)

    async def _read_in_idle(self, mf: MappedFile, start: int, end: int, wanted: Callable[[], bool]) -> int:
        """``mf.populate_read_sync(start, end, keep_going)`` in the idle thread; ``keep_going()``
        turns false once ``wanted()`` does or the call is cancelled. Returns how far it got. An
        empty range makes no job (e.g. a small file prepared writable whole): the hand-overs to and
        from the idle thread cost the busy event loop more than reading does."""
        if start >= end:
            return end
        stop = False

        def keep_going() -> bool:
            return not stop and wanted()

        def cancel() -> None:
            nonlocal stop
            stop = True

        return await self.idle.run_sync(
            lambda: mf.populate_read_sync(start, end, keep_going), on_cancel=cancel
        )


#: bytes of the current commit-log file kept dirty-mapped ahead of the write position. Dirtying a
#: page costs about what its write fault would (~1.7 us here), so the window must be wide enough
#: for a worker thread to stay ahead of a writer at memory speed: 32 MiB gave 0.67 of the
#: baseline at 16 KiB records, 128 MiB 0.79 (bench.store).
WRITE_AHEAD_BYTES = 128 * 1024 * 1024
#: :attr:`CommitLog.write_ahead_mark` while a refill is asked for: beyond any log offset
NO_MARK = 1 << 62
#: bytes at the start of a prepared (not yet used) file that the allocator dirties: kept small,
#: the file may wait a long time for its first append
PREPARED_DIRTY_BYTES = 32 * 1024 * 1024


def _refill_sync(mf: MappedFile, start: int, end: int, nxt: MappedFile | None, spill: int) -> None:
    """One refill of the write-ahead window (a worker thread): [start, end) of the file in use,
    then the first ``spill`` bytes of the file prepared after it, where the window reaches
    into that."""
    if end > start:
        mf.populate_write_sync(start, end)
    if nxt is not None and spill > nxt.write_ahead_end:
        nxt.populate_write_sync(nxt.write_ahead_end, spill)


class WriteAhead:
    """Keeps the pages just ahead of the commit log's write position mapped writable and dirty.

    Pre-faulting a file (``MADV_POPULATE_READ``) maps its pages read-only: the writer's first
    store to each page still takes a write fault (~1.7 us here, more than copying a 1 KiB record).
    Mapping every page writable up front would dirty the whole file with zeros (and an fdatasync
    would write them all); this service dirties only a window of :data:`WRITE_AHEAD_BYTES` ahead
    of the writer, refilled in a worker thread when the writer crosses its middle
    (``CommitLog.write_ahead_mark``, checked by the append paths, which call :meth:`kick`), and
    across the end of the file into the prepared next one; the allocator dirties the first window
    of the file it prepares. Refills and that preparation run one at a time (the allocator's
    ``dirtying`` lock). The commit-log flusher syncs only the written range of a file, so the
    window stays dirty until the writer fills it.
    """

    def __init__(
        self,
        commit_log: CommitLog,
        window: int = WRITE_AHEAD_BYTES,
        allocator: FileAllocator | None = None,
    ) -> None:
        self.commit_log = commit_log
        #: the widest window; with the allocator's pace, as much of it as the writer's rate asks for
        self.window = window
        #: told after each refill (:meth:`FileAllocator.follow`): reads the file further ahead and
        #: prepares the next one as its pace asks for; its pace is sampled here
        self.allocator = allocator
        #: the allocator's: a refill does not run beside the next file's creation
        self._dirtying = allocator.dirtying if allocator is not None else trio.Lock()
        if allocator is not None:
            allocator.published = self._next_file_ready
        self._wakeup = trio.Event()

    def kick(self) -> None:
        """The writer passed the mark: refill the window soon. The mark moves out of reach
        until :meth:`run` sets the next one: every append past it would call again meanwhile
        (a refill takes milliseconds: 5,536 calls in a round of 8,000 16 KiB appends)."""
        self._wakeup.set()
        self.commit_log.write_ahead_mark = NO_MARK

    def _next_file_ready(self) -> None:
        """A file was prepared after the current one: if the window had reached the current
        file's end (no refill asked for until the roll), refill now, into the new file."""
        cl = self.commit_log
        mf = cl.current
        if mf is not None and cl.write_ahead_mark == mf.file_end_offset:
            self.kick()

    def _spill(self, mf: MappedFile, window: int) -> tuple[MappedFile | None, int]:
        """(the file prepared after ``mf``, how far into it a window of ``window`` bytes from
        the writer reaches) when it reaches past the end of ``mf`` and that file is ready -- so
        that after the roll the writer finds pages ahead of it mapped writable, not just the
        prepared file's first window (32 MiB: 8 ms of a 4 GB/s writer, which then overtook the
        refill that starts at the roll and faulted the pages in its own thread, in lockstep with
        it: 16 KiB ``bench.store`` rounds at 0.3 of the baseline) -- else (None, 0)."""
        over = mf.wrote_position + window - mf.file_size
        nxt = self.commit_log.mfq.next_file
        if over <= 0 or nxt is None or nxt.closed or nxt.file_from_offset != mf.file_end_offset:
            return None, 0
        return nxt, min(nxt.file_size, over)

    async def run(self) -> None:
        cl = self.commit_log
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            mf = cl.current
            if mf is None or mf.closed:
                continue
            window = self.window
            pace = self.allocator.pace if self.allocator is not None else None
            if pace is not None:
                pace.sample(mf.file_from_offset + mf.wrote_position)
                window = min(window, pace.lead)
            end = min(mf.file_size, mf.wrote_position + window)
            nxt, spill = self._spill(mf, window)
            async with self._dirtying:
                start = max(mf.wrote_position, mf.write_ahead_end)
                wanted = end > start or (nxt is not None and spill > nxt.write_ahead_end)
                if wanted and cl.current is mf and not mf.closed:
                    await trio.to_thread.run_sync(_refill_sync, mf, start, end, nxt, spill)
            if self.allocator is not None and not mf.closed:
                self.allocator.follow(mf)
            if cl.current is mf:
                # the next refill when the writer is half-way through the window; none once the
                # window reaches the end of the file and there is no next file yet, or past the
                # end of the next one too (the next file's first append kicks again)
                if end < mf.file_size:
                    cl.write_ahead_mark = mf.file_from_offset + max(end - window // 2, mf.wrote_position)
                elif nxt is not None and spill < nxt.file_size:
                    cl.write_ahead_mark = max(
                        nxt.file_from_offset + spill - window // 2, mf.file_from_offset + mf.wrote_position
                    )
                else:
                    cl.write_ahead_mark = mf.file_end_offset
            elif cl.write_ahead_mark == NO_MARK:
                self._wakeup.set()  # the log moved to another file meanwhile: its window next
