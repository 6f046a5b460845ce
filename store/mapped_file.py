"""Fixed-size memory-mapped files and the queue of them that forms one log.

Upstream: ``MappedFile`` / ``DefaultMappedFile``, ``MappedFileQueue`` and
``AllocateMappedFileService``. Every file has the same size and is named by the log offset of its
first byte, zero-padded to 20 digits. Files are contiguous: file *i* starts where file *i - 1* ends.

Positions per file (bytes relative to the file start): ``wrote_position`` (appended),
``committed_position`` (equal to wrote: there is no transient store pool) and ``flushed_position``
(durable up to here). Everything that blocks -- creating, pre-faulting, fsync, zeroing, deleting -- lives in
the ``*_sync`` functions, which the async layer runs in worker threads (``trio.to_thread``). The
only thing done on the trio thread is reading and writing the mapped memory.

Pre-faulting (``prefault=True``) reserves the file's blocks (``posix_fallocate``), so that writes
through the map can never hit ENOSPC (a SIGBUS). Page tables are populated separately, through
ctypes so the GIL is released: ahead of the writer (:meth:`MappedFile.populate_write_sync`, the
commit log's write-ahead window), in idle time (:meth:`MappedFile.populate_read_sync`, the
allocator's prepared file: into the page cache, by the page helper process), or for the whole
file when ``warm`` (upstream ``warmMapedFileEnable``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import sys
import threading
from collections.abc import Callable

from store.errors import StoreOpenError
from store.page_helper import PAGE_HELPER

log = logging.getLogger("store.mapped_file")

PAGE_SIZE = mmap.PAGESIZE

_MADV_WILLNEED = 3
_MADV_DONTNEED = 4
_MADV_POPULATE_READ = 22
_MADV_POPULATE_WRITE = 23
#: bytes per ``madvise`` call when a populate call may be asked to stop (``keep_going``): the
#: check between chunks takes the GIL, and every GIL hand-over costs the writer thread too
#: (4 MiB chunks made a write-ahead refill take twice its CPU time in wall time and cost the
#: writer ~0.35 us per 16 KiB record), so chunks are large and a populate call that need not
#: stop is one ``madvise``
POPULATE_CHUNK = 32 * 1024 * 1024
_MS_SYNC = 4
_ZERO_CHUNK = bytes(1 << 20)

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
    _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _libc.madvise.restype = ctypes.c_int
    _libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _libc.msync.restype = ctypes.c_int
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    _libc.mincore.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _libc = None


#: Python 3.13's ``mmap(..., trackfd=False)``: the map keeps no descriptor of the file
_HAS_TRACKFD = sys.version_info >= (3, 13)
#: where CPython 3.11 / 3.12 keep an mmap object's members ``data``, ``size`` and ``fd`` (after
#: ``PyObject_HEAD``: ``char *data``, ``Py_ssize_t size, pos``, ``off_t offset``, ``Py_ssize_t
#: exports``, ``int fd``); :func:`map_file` checks ``data`` and ``size`` on every map before it
#: touches ``fd``
_PTR = ctypes.sizeof(ctypes.c_void_p)
_SSIZE = ctypes.sizeof(ctypes.c_ssize_t)
_MMAP_DATA_AT = object.__basicsize__
_MMAP_SIZE_AT = _MMAP_DATA_AT + _PTR
_MMAP_FD_AT = _MMAP_SIZE_AT + 2 * _SSIZE + 8 + _SSIZE


#: memory maps left to the rest of the process -- the allocator's arenas, thread stacks,
#: libraries; a dev cluster's process has ~400 -- when store files are mapped: once the process
#: has ``vm.max_map_count`` maps, no allocation of it succeeds (a dev cluster at the limit died of
#: MemoryError raised in whichever task allocated next), so a store file is refused this many
#: maps short of it
MAP_RESERVE = 4096
MAX_MAP_COUNT_PATH = "/proc/sys/vm/max_map_count"
_SELF_MAPS = "/proc/self/maps"


def page_ceil(n: int) -> int:
    """``n`` rounded up to a whole number of pages."""
    return -(-n // PAGE_SIZE) * PAGE_SIZE


class MapBudget:
    """Keeps the process's memory maps :data:`MAP_RESERVE` short of ``vm.max_map_count``.

    A check reads the sysctl (so a changed limit counts at once) and counts the maps made since
    the last exact count (``/proc/self/maps``, one line a map); it recounts only once that
    estimate comes within twice the reserve of the limit -- and then on every check, so maps
    closed meanwhile count at once."""

    def __init__(self, limit_path: str = MAX_MAP_COUNT_PATH) -> None:
        self.limit_path = limit_path
        self._lock = threading.Lock()
        self._counted = 0  # maps of the process at the last exact count
        self._made = 0  # maps made by map_file since
        self._limit: int | None = None

    def _read_limit(self) -> int | None:
        # three system calls (a file object makes six): a worker thread takes the GIL back after
        # each, which waits while the event loop is busy
        try:
            fd = os.open(self.limit_path, os.O_RDONLY)
            try:
                return int(os.read(fd, 64))
            finally:
                os.close(fd)
        except (OSError, ValueError):  # not Linux, or no procfs: nothing to keep to
            return None

    def check(self, path: str) -> None:
        """Raise ``OSError(ENOMEM)`` naming the limit and the ways out when mapping one more file
        would leave the process fewer than :data:`MAP_RESERVE` maps."""
        with self._lock:
            self._limit = self._read_limit()  # every time (~10 us): a changed sysctl counts at once
            if self._limit is None or self._counted + self._made + 2 * MAP_RESERVE < self._limit:
                return
            self._counted, self._made = count_maps(), 0
            if self._counted + MAP_RESERVE < self._limit:
                return
            raise OSError(
                errno.ENOMEM,
                f"cannot map {path}: the process has {self._counted} memory maps and vm.max_map_count is "
                f"{self._limit} (every store file is one: a consume-queue file per queue, per replica; "
                f"{MAP_RESERVE} are kept for the rest of the process). Raise it (sysctl -w "
                "vm.max_map_count=655360, as upstream's bin/os.sh does), or delete unused topics "
                "(rmq-admin deleteTopic; with a dev cluster's data directory, deleting the whole directory "
                "starts it afresh)",
            )

    def made(self) -> None:
        with self._lock:
            self._made += 1


def count_maps() -> int:
    """The process's memory maps now (lines of ``/proc/self/maps``); blocking (it reads a line
    for every map: as many as the store files, near the limit)."""
    n = 0
    with open(_SELF_MAPS, "rb") as f:
        while chunk := f.read(1 << 16):
            n += chunk.count(b"\n")
    return n


#: the process's budget, shared by every store of it
MAP_BUDGET = MapBudget()


def map_file(fd: int, size: int, path: str = "") -> mmap.mmap:
    """``mmap.mmap(fd, size)`` -- shared, read-write -- that keeps no descriptor of the file.

    CPython's map keeps a duplicate of ``fd`` until it is closed (for ``size()`` and
    ``resize()``, which the store never calls), so every mapped file held a descriptor: a process
    with ~20,000 consume-queue files (5,000 topics of 4 queues on two replicas) reached a common
    hard limit of open files and could accept no connection, open no file and dispatch no
    message. Upstream's broker holds one too (a ``FileChannel`` per file). Python 3.13 has
    ``trackfd=False`` for this; on 3.11 / 3.12 the duplicate is closed and the map's member set to
    -1, as ``trackfd=False`` leaves it -- only where the object's ``data`` and ``size`` members
    are where this module expects them and the member names a descriptor of the same file (else
    the map keeps its descriptor, as before). The caller closes ``fd`` as usual.

    Refused (``OSError(ENOMEM)``, see :class:`MapBudget`) when the process is near
    ``vm.max_map_count``; ``path`` names the file in that error."""
    MAP_BUDGET.check(path or f"descriptor {fd}")
    if _HAS_TRACKFD:
        mm = mmap.mmap(fd, size, trackfd=False)  # type: ignore[call-arg,unused-ignore]
    else:
        mm = mmap.mmap(fd, size)
        try:
            _drop_duplicate_fd(mm, fd, size)
        except BaseException:
            mm.close()
            raise
    MAP_BUDGET.made()
    return mm


def _drop_duplicate_fd(mm: mmap.mmap, fd: int, size: int) -> None:
    base = id(mm)
    if (
        ctypes.c_void_p.from_address(base + _MMAP_DATA_AT).value != _address_of(mm)
        or ctypes.c_ssize_t.from_address(base + _MMAP_SIZE_AT).value != size
    ):
        return
    member = ctypes.c_int.from_address(base + _MMAP_FD_AT)
    dup = member.value
    if dup < 0 or dup == fd:
        return
    try:
        ours, theirs = os.fstat(fd), os.fstat(dup)
    except OSError:
        return
    if (ours.st_dev, ours.st_ino) != (theirs.st_dev, theirs.st_ino):
        return
    member.value = -1
    os.close(dup)


def file_name_of(offset: int) -> str:
    """The 20-digit zero-padded file name of a file starting at ``offset``."""
    return f"{offset:020d}"


def offset_of_name(name: str) -> int | None:
    """The start offset encoded in a file name, or None if it is not a 20-digit name."""
    if len(name) == 20 and name.isdigit():
        return int(name)
    return None


def fsync_path(path: str, *, data_only: bool = True) -> None:
    """fsync (fdatasync) a file by path; blocking. A missing file is ignored (it was deleted)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a directory so that created / deleted / renamed entries are durable; blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def zero_file_range_sync(path: str, start: int, end: int) -> None:
    """Write zeros over bytes [start, end) of the file, front to back, then fdatasync; blocking.

    Front to back matters: a crash part-way leaves zeros at ``start``, which recovery reads as the
    end of the data (and then clears the rest itself). Mapped views see the zeros at once.
    """
    if end <= start:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        pos = start
        while pos < end:
            n = min(end - pos, len(_ZERO_CHUNK) - pos % len(_ZERO_CHUNK))
            os.pwrite(fd, _ZERO_CHUNK[:n], pos)
            pos += n
        os.fdatasync(fd)
    finally:
        os.close(fd)


def reserve_sync(path: str, start: int, end: int) -> None:
    """Give bytes [start, end) of the file at ``path`` disk blocks (``posix_fallocate``; contents
    unchanged); blocking. Raises OSError (ENOSPC on a full disk)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, start, end - start)
    finally:
        os.close(fd)


def touch_page_sync(path: str, start: int, length: int) -> None:
    """Write zeros over [start, start + length) of a fresh (all-zero) file so its first page
    fault happens here, in a worker thread; blocking."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, _ZERO_CHUNK[:length], start)
    finally:
        os.close(fd)


def clear_nonzero_tail_sync(mf: MappedFile, start: int) -> int:
    """Zero every non-zero byte of ``mf`` from ``start`` to the end of the file (checking 1 MiB at
    a time, so an all-zero tail costs one read); blocking. Returns how many bytes were rewritten."""
    chunk = len(_ZERO_CHUNK)
    rewritten = 0
    fd = -1
    try:
        pos = start
        while pos < mf.file_size:
            n = min(mf.file_size - pos, chunk - pos % chunk)
            if mf.mm[pos : pos + n] != _ZERO_CHUNK[:n]:
                if fd < 0:
                    fd = os.open(mf.path, os.O_RDWR)
                os.pwrite(fd, _ZERO_CHUNK[:n], pos)
                rewritten += n
            pos += n
        if fd >= 0:
            os.fdatasync(fd)
    finally:
        if fd >= 0:
            os.close(fd)
    return rewritten


def _call_on_range(mm: mmap.mmap, start: int, end: int, name: str, *args: object) -> int | None:
    """libc's ``name(address of byte start, end - start, *args)`` on bytes [start, end) of ``mm``,
    GIL released, and its result; None when the map is closed or there is no libc. The
    map cannot be closed while the call runs (it holds an export, so ``close()`` fails and is
    retried by its owner)."""
    if _libc is None or end <= start or mm.closed:
        return None
    try:
        guard = memoryview(mm)[start:end]
    except ValueError:  # closed since the check
        return None
    try:
        rc: int = getattr(_libc, name)(_address_of(mm) + start, end - start, *args)
        return rc
    finally:
        guard.release()


def madvise_range(mm: mmap.mmap, start: int, end: int, advice: int, path: str = "") -> bool:
    """``madvise(advice)`` over bytes [start, end) of ``mm`` (``start`` a page boundary), GIL
    released (see :func:`_call_on_range`); False when the call failed (logged at DEBUG: advice is
    best effort), the map is closed or there is no libc."""
    rc = _call_on_range(mm, start, end, "madvise", advice)
    if rc is None:
        return False
    if rc != 0:
        log.debug("madvise(%d) failed (errno %d) for %s", advice, ctypes.get_errno(), path or "a map")
        return False
    return True


def pages_resident(mm: mmap.mmap, start: int, end: int) -> bool:
    """Whether every page holding bytes [start, end) of ``mm`` is in the page cache (``mincore``:
    a lookup, no I/O, a few microseconds for a few thousand pages), so that reading them takes no
    wait for the disk; False when that cannot be told (no libc, a closed map, a failed call)."""
    lo = start - start % PAGE_SIZE
    vec = ctypes.create_string_buffer(max(0, (end - lo + PAGE_SIZE - 1) // PAGE_SIZE))
    rc = _call_on_range(mm, lo, end, "mincore", vec)
    return rc == 0 and b"\x00" not in vec.raw  # bit 0 of each page's byte: resident


def drop_pages_below(mm: mmap.mmap, start: int, end: int, path: str = "") -> None:
    """Unmap from this process the pages holding bytes of [start, end) that lie wholly below
    ``end`` (``MADV_DONTNEED``), for a file written sequentially up to ``end``: the writer is done
    with them. For a shared file mapping that moves their dirty bits to the page cache and loses
    nothing; they stay cached, and a later access maps them again (a minor fault). Blocking, GIL
    released, best effort.

    Call it before making the range durable: writeback write-protects each page it cleans, which
    for a page still mapped costs a TLB-shootdown IPI to every CPU running this process (see
    :meth:`MappedFile.flush_range_sync`). And pages left mapped count in the process's resident
    set: a consume queue or index file keeps every page it ever wrote mapped (its units and
    entries grow 20 bytes a message each), which grew a long-running broker's RSS without bound."""
    lo = start - start % PAGE_SIZE
    hi = end - end % PAGE_SIZE
    if hi > lo:
        madvise_range(mm, lo, hi, _MADV_DONTNEED, path)


def read_in_range(mm: mmap.mmap, start: int, end: int, path: str = "") -> None:
    """Bring bytes [start, end) of ``mm`` into memory and map them, their reads asked for at once
    (``MADV_WILLNEED``, then ``MADV_POPULATE_READ``); blocking, GIL released, best effort."""
    start -= start % PAGE_SIZE
    if madvise_range(mm, start, end, _MADV_WILLNEED, path):
        madvise_range(mm, start, end, _MADV_POPULATE_READ, path)


def no_read_around(mm: mmap.mmap) -> None:
    """``MADV_RANDOM`` over the whole map: a fault reads the page it needs and nothing around it.

    A fault on a page of a file map that is not in the page cache otherwise reads the device's
    readahead window around it (its ``read_ahead_kb``: 128 KiB by default, 8 MiB on the virtual
    disk of the development VM), holes included, each zero-filled. A consume-queue file is a
    sparse 5.7 MB file whose data is a few pages at the front for most queues: loading a queue
    from a cold page cache, or writing the first unit of a new page, zero-filled the whole file --
    1.4 ms of system time and 5.7 MB of page cache per queue (a 5,000-queue store took 23 s to
    load, 60 % of it in ``memset``). Whole map, one call: advice on part of a map splits it into
    several of the process's memory maps (:class:`MapBudget`)."""
    advice = getattr(mmap, "MADV_RANDOM", None)
    if advice is None:  # pragma: no cover - platforms without madvise
        return
    try:
        mm.madvise(advice)
    except OSError as exc:  # pragma: no cover - the kernel refused the advice: reads as before
        log.debug("MADV_RANDOM failed: %s", exc)


def _address_of(mm: mmap.mmap) -> int:
    buf = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(buf)
    finally:
        del buf


class MappedFile:
    """One mapped file of ``file_size`` bytes whose first byte is log offset ``file_from_offset``.

    ``view`` is a memoryview over the whole map; slices of it are zero-copy views whose ``.obj``
    is the ``mmap``. Closing fails (and is retried later by the owner) while such slices live.
    """

    __slots__ = (
        "dir_synced",
        "dropped_to",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "last_store_timestamp",
        "mm",
        "path",
        "read_ahead_end",
        "reserved",
        "view",
        "write_ahead_end",
        "wrote_position",
    )

    def __init__(self, path: str, file_from_offset: int, file_size: int, mm: mmap.mmap) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.mm = mm
        self.view = memoryview(mm)
        self.wrote_position = 0
        self.flushed_position = 0
        #: whether the directory entry of the file is known durable (see ``sync_dir``)
        self.dir_synced = True
        #: store timestamp of the newest message appended here (0 = unknown); retention uses mtime.
        self.last_store_timestamp = 0
        #: pages below this position were mapped writable ahead of the writer
        #: (:meth:`populate_write_sync`; the commit log's write-ahead window)
        self.write_ahead_end = 0
        #: bytes below this position have disk blocks and may be written through the map. A store
        #: into a hole of a sparse file needs a block the kernel may not have (a full disk): the
        #: process then dies of SIGBUS. Commit-log files are reserved whole at creation; a
        #: consume-queue file reserves in steps ahead of its writer (see ``store.consume_queue``).
        self.reserved = file_size
        #: a map without read-around (``random_access``): bytes below this position were asked
        #: for (:meth:`read_ahead`)
        self.read_ahead_end = 0
        #: flushed bytes below this position were dropped from the page cache
        #: (:meth:`drop_cache_sync`, the commit log's ``rmqCommitLogPageCacheBytes``)
        self.dropped_to = 0

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"

    # --- blocking constructors / destructors (worker thread) --------------------------------------

    @classmethod
    def open_sync(
        cls,
        path: str,
        file_from_offset: int,
        file_size: int,
        *,
        create: bool,
        prefault: bool = False,
        warm: bool = False,
        sync_dir: bool = True,
        random_access: bool = False,
    ) -> MappedFile:
        """Open (or create) and map the file; blocking.

        ``prefault``: reserve the blocks (pages are mapped separately: :meth:`populate_write_sync`,
        :meth:`populate_read_sync`);
        ``warm`` also maps every page writable and writes the file once (:meth:`warm_sync`).
        ``sync_dir``: a created file starts with
        ``dir_synced = False`` and whoever first makes its data durable fsyncs the directory too
        (creation stays fast: a directory fsync waits for a journal commit).
        ``random_access``: the map reads no more than the page a fault needs (``MADV_RANDOM``), see
        :meth:`read_ahead`.
        An existing file of the wrong size is resized to ``file_size`` with a warning (a shorter file
        reads as zeros past its old end, which recovery treats as the end of the data).
        """
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        made = False  # a file this call made (empty before): removed again if it cannot be set up
        try:
            size = os.fstat(fd).st_size
            made = create and not size
            if size != file_size:
                if size and not create:
                    log.warning("mapped file %s is %d bytes, expected %d: resizing", path, size, file_size)
                os.ftruncate(fd, file_size)
            if prefault:
                try:
                    os.posix_fallocate(fd, 0, file_size)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        raise
                    log.debug("posix_fallocate unsupported for %s: %s", path, exc)
            mm = map_file(fd, file_size, path)
            if random_access:
                no_read_around(mm)
        except OSError:
            if made:
                # a full disk, say: no empty file is left behind (nor the blocks a failed
                # posix_fallocate may have reserved) for recovery to find after the log's end
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        finally:
            os.close(fd)
        mf = cls(path, file_from_offset, file_size, mm)
        if prefault and warm:
            mf.warm_sync()
        if create and sync_dir:
            mf.dir_synced = False
        return mf

    def warm_sync(self) -> None:
        """Upstream ``warmMapedFileEnable``: map every page writable and dirty, then fdatasync (the
        whole file is written once, with zeros), so appends take no page fault at all; blocking."""
        self.populate_write_sync(0, self.file_size)
        fsync_path(self.path)

    def close(self) -> bool:
        """Unmap. Returns False (and keeps the map) while zero-copy views of it are still alive."""
        if self.mm.closed:
            return True
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            self.view = memoryview(self.mm)
            return False
        return True

    @property
    def closed(self) -> bool:
        return self.mm.closed

    # --- positions ------------------------------------------------------------------------------

    @property
    def committed_position(self) -> int:
        """Upstream's committed position; equal to :attr:`wrote_position` (no transient pool)."""
        return self.wrote_position

    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, pos: int) -> None:
        """Set wrote / committed / flushed positions (recovery and truncation)."""
        self.wrote_position = pos
        self.flushed_position = pos

    def flush_sync(self) -> None:
        """fdatasync the file (the map shares the page cache); blocking."""
        fsync_path(self.path)

    def flush_range_sync(self, start: int, end: int) -> None:
        """Make bytes [start, end) durable -- ``msync(MS_SYNC)`` of their pages, which is an
        fdatasync of that range only -- so pages beyond ``end`` that :meth:`populate_write_sync`
        dirtied ahead of the writer stay dirty (and fault-free). Blocking, GIL released; a file
        closed meanwhile is skipped (it was retired).

        The pages wholly below ``end`` (the writer has left them: appends only go forward) are
        first dropped from this process's page tables (``MADV_DONTNEED``: for a shared file
        mapping that moves their dirty bits to the page cache and loses nothing; a later read
        maps them again). Writeback write-protects every page it cleans, and for a page still
        mapped that costs a TLB-shootdown IPI to each CPU running this process -- one per 4 KiB
        page, interrupting the writer thread (measured: a writer of 16 KiB records went from 4.9
        to 8.5 us a record while a concurrent msync ran). Dropping the range first costs one
        batched TLB flush instead.
        """
        if _libc is None:
            self.flush_sync()
            return
        start -= start % PAGE_SIZE
        end = min(end, self.file_size)
        if end <= start or self.mm.closed:
            return
        # an export of the map while the call runs: close() fails (and is retried) meanwhile
        try:
            guard = self.view[start:end]
        except ValueError:  # closed since the check
            return
        try:
            # the page holding ``end`` may still be written to: it stays
            drop_pages_below(self.mm, start, end, self.path)
            if _libc.msync(_address_of(self.mm) + start, end - start, _MS_SYNC) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"msync of {self.path} [{start}, {end}): {os.strerror(err)}")
        finally:
            guard.release()

    def drop_cache_sync(self, start: int, end: int) -> None:
        """Drop the whole pages of bytes [start, end) from this process's page tables and from
        the page cache (``MADV_DONTNEED``, then ``POSIX_FADV_DONTNEED``), for flushed bytes that
        readers are not expected to need soon: the memory goes back to the kernel's free lists,
        from which the next pages the writer needs are taken (on a VM that returns free memory
        to its host, a page the guest has not used lately costs ~10 us at its first touch
        against ~1 us for one it freed moments ago). A later read brings the bytes back from
        the disk (see :meth:`read_in_sync`). A dirty page is not dropped (the kernel starts its
        writeback instead): call it on flushed bytes only. Blocking; best effort."""
        lo = start - start % PAGE_SIZE
        hi = min(end, self.file_size)
        hi -= hi % PAGE_SIZE
        if hi <= lo or self.mm.closed:
            return
        drop_pages_below(self.mm, lo, hi, self.path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:  # deleted meanwhile (retention): its pages went with it
            log.debug("cannot open %s to drop its cached pages: %s", self.path, exc)
            return
        try:
            os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
        except OSError as exc:
            log.debug("POSIX_FADV_DONTNEED failed for %s: %s", self.path, exc)
        finally:
            os.close(fd)

    def populate_write_sync(self, start: int, end: int, keep_going: Callable[[], bool] | None = None) -> int:
        """Map pages [start, end) writable and dirty (``MADV_POPULATE_WRITE``, contents
        unchanged), so that the writer's first store to each takes no page fault -- on this kind
        of machine that fault costs more than copying a 1 KiB record. Blocking, GIL released;
        best effort (a failure only leaves the faults). Advances :attr:`write_ahead_end` as it
        goes; pages the writer has already passed are skipped. Without ``keep_going`` one call
        does it all; with it, chunks of :data:`POPULATE_CHUNK`, stopping once ``keep_going()``
        is false. Returns the end of the populated range."""
        return self._populate(start, end, _MADV_POPULATE_WRITE, keep_going)

    def populate_read_sync(self, start: int, end: int, keep_going: Callable[[], bool]) -> int:
        """Bring pages [start, end) into the page cache (for a new file that is zero-filling
        them, the bulk of the cost of a first touch), checking ``keep_going()`` between chunks;
        blocking, GIL released, best effort. Returns the end of the populated range.

        The pages are faulted in by the page helper process (:mod:`store.page_helper`) at the
        lowest CPU priority, through its own map: this process maps them at its first touch or
        through the write-ahead window. Where the helper cannot run, by ``MADV_POPULATE_READ``
        here (the pages are then also mapped read-only)."""
        return self._populate(start, end, _MADV_POPULATE_READ, keep_going)

    def read_in_sync(self, start: int, end: int) -> None:
        """Bring the pages of [start, end) into memory and map them (``MADV_POPULATE_READ``),
        GIL released, before Python code reads them: a read of a page that is not in the page
        cache waits for the disk with the GIL held, stopping every thread of the process --
        the event loop too (a cold start of 36,000 consume queues blocked it for 15 s). Unlike
        :meth:`populate_read_sync`, also below the write position; the reads of the range are
        asked for at once first (``MADV_WILLNEED``), so that a map without read-around
        (``random_access``) does not wait for them page by page. Blocking; best effort (a
        kernel without the advice reads at the first touch)."""
        read_in_range(self.mm, start, min(end, self.file_size), self.path)

    def resident(self, start: int, end: int) -> bool:
        """Whether every page of bytes [start, end) is in the page cache (:func:`pages_resident`):
        a read of them waits for no disk."""
        return pages_resident(self.mm, start, min(end, self.file_size))

    def read_ahead(self, start: int, end: int) -> None:
        """Ask the kernel to read [start, end) of the file into the page cache, not waiting for
        it (``MADV_WILLNEED``: the reads of a range go to the disk together), and remember that
        it was asked (:attr:`read_ahead_end`). For a map without read-around, whose reader
        would otherwise wait for the disk once per page; the range should hold written data
        (a hole would be read as a page of zeros too). Does not wait for the reads."""
        end = min(self.file_size, end + (-end % PAGE_SIZE))  # the advice takes whole pages
        madvise_range(self.mm, start - start % PAGE_SIZE, end, _MADV_WILLNEED, self.path)
        if end > self.read_ahead_end:
            self.read_ahead_end = end

    def _populate(
        self,
        start: int,
        end: int,
        advice: int,
        keep_going: Callable[[], bool] | None,
        *,
        skip_written: bool = True,
    ) -> int:
        """``madvise(advice)`` over [start, end) -- in :data:`POPULATE_CHUNK` steps when
        ``keep_going`` is given, else in one call -- skipping pages below the write position
        (read without a lock: it only ever moves the start forward) unless not ``skip_written``.
        Returns how far it got."""
        start -= start % PAGE_SIZE
        end = min(end, self.file_size)
        if _libc is None or end <= start or self.mm.closed:
            return start
        write = advice == _MADV_POPULATE_WRITE
        pos = start
        while pos < end:
            wrote = self.wrote_position if skip_written else 0
            if wrote > pos:
                pos = min(end, wrote - wrote % PAGE_SIZE)
                if pos >= end:
                    break
            if keep_going is not None and not keep_going():
                return pos
            n = end - pos if keep_going is None else min(POPULATE_CHUNK, end - pos)
            if not self._advise(pos, pos + n, advice):
                return pos
            pos += n
            if write and pos > self.write_ahead_end:
                self.write_ahead_end = pos
        if write and end > self.write_ahead_end:
            self.write_ahead_end = end
        return end

    def _advise(self, start: int, end: int, advice: int) -> bool:
        """One step of :meth:`_populate`: read-population through the page helper (this process
        only when there is none), the rest by ``madvise`` here."""
        if advice == _MADV_POPULATE_READ:
            answer = PAGE_HELPER.populate(self.path, start, end)
            if answer is not None:
                if answer:
                    log.debug("page helper: populating %s failed (errno %d)", self.path, -answer)
                return answer == 0
        return madvise_range(self.mm, start, end, advice, self.path)


class StoreLayoutError(StoreOpenError):
    """The files of a log directory were laid out with another file size than the configured one
    (the config changed under an existing store): the store refuses to open them, as upstream
    does, and changes nothing on disk. Resizing would cut off or orphan stored messages."""


class MappedFileQueue:
    """The contiguous, fixed-size files of one log directory (commit log or one consume queue).

    ``files`` is ordered by start offset. Lookups by offset are O(1) arithmetic. Mutating methods
    named ``*_sync`` block and belong in worker threads; the others only touch memory.
    """

    def __init__(
        self,
        store_dir: str,
        file_size: int,
        *,
        prefault: bool = False,
        warm: bool = False,
        sync_dir: bool = True,
        size_key: str = "",
        random_access: bool = False,
    ) -> None:
        if file_size <= 0:
            raise ValueError(f"file size must be positive, got {file_size}")
        self.store_dir = store_dir
        self.file_size = file_size
        #: the config key that sets ``file_size`` (named by :class:`StoreLayoutError`)
        self.size_key = size_key
        self.prefault = prefault
        self.warm = warm
        self.sync_dir = sync_dir
        #: maps without read-around (:meth:`MappedFile.open_sync`)
        self.random_access = random_access
        self.files: list[MappedFile] = []
        #: files created ahead of need (pre-faulted), consecutive from :meth:`next_offset`
        self.prepared: list[MappedFile] = []
        #: files removed from the queue whose maps could not be closed yet (views alive)
        self.closing: list[MappedFile] = []
        #: where the first file goes while the queue is empty (kept across truncation to empty)
        self.base_offset = 0

    # --- loading ---------------------------------------------------------------------------------

    def load_sync(self) -> list[str]:
        """Map the existing files in name order; blocking. Returns human-readable problems found.

        Non-conforming names are ignored; a gap in the offsets ends the log there (files after the
        gap are deleted, as they can never be reached); files shorter than the file size (torn or
        truncated) are extended with zeros. Raises :class:`StoreLayoutError`, changing nothing, when
        the files were made with another file size: a file longer than the configured size, or
        files named in steps of their own, different, size.
        """
        problems: list[str] = []
        os.makedirs(self.store_dir, exist_ok=True)
        entries: list[tuple[int, str]] = []
        for name in os.listdir(self.store_dir):
            off = offset_of_name(name)
            path = os.path.join(self.store_dir, name)
            if off is None or not os.path.isfile(path):
                if not name.endswith(".tmp"):
                    log.warning("ignoring unexpected entry %s", path)
                continue
            entries.append((off, path))
        entries.sort()
        self._check_layout(entries)
        expected: int | None = None
        for i, (off, path) in enumerate(entries):
            if off % self.file_size != 0 or (expected is not None and off != expected):
                dropped = [p for _, p in entries[i:]]
                msg = f"file {path} does not follow {expected}: dropping {len(dropped)} file(s) {dropped}"
                problems.append(msg)
                log.error(msg)
                for p in dropped:
                    os.unlink(p)
                break
            size = os.path.getsize(path)
            if size != self.file_size:
                problems.append(f"file {path} had size {size}, expected {self.file_size}")
            mf = MappedFile.open_sync(
                path, off, self.file_size, create=False, random_access=self.random_access
            )
            mf.set_positions(self.file_size)
            self.files.append(mf)
            expected = off + self.file_size
        if self.files:
            self.base_offset = self.files[0].file_from_offset
        return problems

    def _check_layout(self, entries: list[tuple[int, str]]) -> None:
        """Raise :class:`StoreLayoutError` when ``entries`` (offset, path; sorted) were written
        with another file size than :attr:`file_size`."""
        found: int | None = None
        for _, path in entries:
            size = os.path.getsize(path)
            if size > self.file_size:
                found = size
                break
        if found is None and len(entries) >= 2:
            step = entries[1][0] - entries[0][0]
            if step != self.file_size and step == os.path.getsize(entries[0][1]):
                found = step
        if found is None:
            return
        key = self.size_key or "the file size"
        raise StoreLayoutError(
            f"{self.store_dir} holds files of {found} bytes, but {key} is {self.file_size}: the store "
            f"was created with another file size. Set {key} = {found} to open it (nothing was changed)"
        )

    # --- lookups ---------------------------------------------------------------------------------

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def min_offset(self) -> int:
        """Start of the first file (:attr:`base_offset` when empty)."""
        return self.files[0].file_from_offset if self.files else self.base_offset

    @property
    def max_offset(self) -> int:
        """End of the written data (:attr:`base_offset` when empty)."""
        if not self.files:
            return self.base_offset
        last = self.files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        """End of the durable data: the first file not completely flushed decides."""
        for mf in self.files:
            if mf.flushed_position < mf.wrote_position or mf.wrote_position < mf.file_size:
                return mf.file_from_offset + mf.flushed_position
        return self.max_offset

    def find(self, offset: int) -> MappedFile | None:
        """The file holding byte ``offset``, or None when outside every file."""
        files = self.files
        if not files:
            return None
        i = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= i < len(files):
            return files[i]
        return None

    def path_for(self, offset: int) -> str:
        return os.path.join(self.store_dir, file_name_of(offset))

    # --- growth ----------------------------------------------------------------------------------

    def create_file_sync(self, offset: int) -> MappedFile:
        """Create and map the file starting at ``offset`` (pre-faulted if configured); blocking.
        The file is not added to the queue (see :meth:`install`)."""
        os.makedirs(self.store_dir, exist_ok=True)
        return MappedFile.open_sync(
            self.path_for(offset),
            offset,
            self.file_size,
            create=True,
            prefault=self.prefault,
            warm=self.warm,
            sync_dir=self.sync_dir,
            random_access=self.random_access,
        )

    def next_offset(self) -> int:
        """Start offset of the file that would follow the last one."""
        last = self.last
        return last.file_end_offset if last is not None else self.base_offset

    @property
    def next_file(self) -> MappedFile | None:
        """The first file created ahead of need, if any."""
        return self.prepared[0] if self.prepared else None

    def prepared_end(self) -> int:
        """Start offset of the file that would follow the last prepared one (or the last file)."""
        return self.prepared[-1].file_end_offset if self.prepared else self.next_offset()

    def add_prepared(self, mf: MappedFile) -> bool:
        """Keep ``mf``, created ahead of need, if it starts at :meth:`prepared_end`; else False."""
        if mf.closed or mf.file_from_offset != self.prepared_end():
            return False
        self.prepared.append(mf)
        return True

    def take_next(self, offset: int) -> MappedFile | None:
        """The pre-created file for ``offset`` if it is the next one (it is then no longer
        prepared)."""
        if self.prepared and self.prepared[0].file_from_offset == offset:
            return self.prepared.pop(0)
        return None

    def drop_stale_prepared(self) -> list[MappedFile]:
        """Remove the prepared files when they no longer follow the last file (the log was
        truncated or restarted elsewhere); returns them for :meth:`retire`."""
        if self.prepared and self.prepared[0].file_from_offset != self.next_offset():
            gone, self.prepared = self.prepared, []
            return gone
        return []

    def install(self, mf: MappedFile) -> None:
        """Append a created file to the queue; it must start where the last one ends."""
        if self.files and mf.file_from_offset != self.files[-1].file_end_offset:
            raise ValueError(f"{mf.path} does not follow {self.files[-1].path}")
        if not self.files:
            self.base_offset = mf.file_from_offset
        self.files.append(mf)

    # --- shrinking -------------------------------------------------------------------------------

    def detach_after(self, offset: int) -> list[MappedFile]:
        """Remove from the queue every file that starts at or after ``offset`` (and the pre-created
        files if they do); returns them so the caller can delete them off the event loop."""
        gone = [mf for mf in self.files if mf.file_from_offset >= offset]
        if gone:
            self.files = [mf for mf in self.files if mf.file_from_offset < offset]
            if not self.files:
                self.base_offset = offset // self.file_size * self.file_size
        gone += self.drop_stale_prepared()
        return gone

    def detach_first(self, count: int) -> list[MappedFile]:
        """Remove the ``count`` oldest files from the queue (retention); never the last one."""
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        gone, self.files = self.files[:count], self.files[count:]
        self.base_offset = self.files[0].file_from_offset
        return gone

    def retire(self, files: list[MappedFile]) -> list[str]:
        """Unmap files removed from the queue; those with live views wait in :attr:`closing`.
        Returns their paths (to delete with :func:`delete_paths_sync`)."""
        for mf in files:
            if not mf.close():
                self.closing.append(mf)
        return [mf.path for mf in files]

    def retry_closing(self) -> None:
        """Close maps whose views have since been released."""
        if self.closing:
            self.closing = [mf for mf in self.closing if not mf.close()]

    def close_all(self) -> None:
        files = self.files + self.prepared
        self.prepared = []
        self.files = []
        for mf in files:
            if not mf.close():
                log.warning("map of %s still has live views at close; leaving it to the GC", mf.path)
        self.retry_closing()

    def dirty_files(self) -> list[tuple[MappedFile, int]]:
        """(file, wrote position) for every file with unflushed bytes, oldest first."""
        return [(mf, mf.wrote_position) for mf in self.files if mf.flushed_position < mf.wrote_position]


def delete_paths_sync(paths: list[str], on_missing: Callable[[str], None] | None = None) -> None:
    """Unlink files and fsync their directories; blocking."""
    dirs = set()
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            if on_missing is not None:
                on_missing(p)
        dirs.add(os.path.dirname(p))
    for d in dirs:
        fsync_dir(d)
