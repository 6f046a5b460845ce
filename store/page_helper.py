"""Bringing file pages into the page cache in a helper process at the lowest CPU priority.

Zero-filling the pages of a new commit-log file (what the first touch of each costs, 55 ms to
over 1 s of CPU for 512 MiB here) is work nobody needs soon, so it must take only CPU time nobody
else wants: ``SCHED_IDLE``. A thread of this process cannot do it safely: it takes the GIL back
after every system call, and a ``SCHED_IDLE`` thread preempted while it holds the GIL (or while
the event loop, asked to hand the GIL over after the 0.5 ms switch interval, waits for it to take
it) stops the loop until it gets a CPU again -- measured: bursts of 23-40 ms stalls of a broker's
loop under load, every one with the idle thread in its ``madvise``. So the pages are faulted into
the page cache by a separate process (its own GIL, nothing of ours to hold) through its own
read-only map of the file: ``MADV_POPULATE_READ`` over a range, one request at a time. Pages that
process brought in are shared: this process maps them at its first touch (a minor fault) or when
the commit log's write-ahead window maps them writable.

The helper is this file run as a script (standard library only, started with ``-I -S``: ~15 ms);
it is started at the first request and again after it died, reads requests from its stdin and
answers on its stdout, and exits when its stdin closes (this process exited, however it did).

Wire (both directions little-endian, binary): a request is :data:`REQUEST` (start, end, length
of the path) followed by the path's bytes; the answer is :data:`ANSWER`, 0 or a negative errno.
"""

from __future__ import annotations

import atexit
import errno
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import threading

log = logging.getLogger("store.page_helper")

#: a request: start and end (bytes of the file; start on a page boundary), path length
REQUEST = struct.Struct("<QQH")
#: an answer: 0, or -errno of what failed
ANSWER = struct.Struct("<q")
_MADV_POPULATE_READ = 22


def lowest_priority() -> None:
    """Put the calling thread in ``SCHED_IDLE`` (Linux scheduling is per thread; for the helper
    that is the whole process): it then runs only when a CPU has nothing else to do."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        log.debug("no SCHED_IDLE here: idle work runs at normal priority")
        return
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as exc:
        log.debug("could not enter SCHED_IDLE: %s", exc)


def _read_exactly(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd``, or fewer at its end."""
    parts = []
    while n:
        part = os.read(fd, n)
        if not part:
            break
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def populate_cache(path: str, start: int, end: int) -> int:
    """Fault bytes [start, end) of the file at ``path`` into the page cache through a read-only
    map (in the calling process; the helper's work). Returns 0 or -errno."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return -(exc.errno or errno.EIO)
    try:
        with mmap.mmap(fd, end - start, mmap.MAP_SHARED, mmap.PROT_READ, offset=start) as mm:
            # one page at a time, not through readahead: readahead locks a whole window of pages
            # (the device's read_ahead_kb: 8 MiB on the development VM) before it fills them, and
            # a writer that touches one of them waits until this SCHED_IDLE process gets a CPU
            # back to finish (one page at a time costs ~1.7x the CPU here: idle CPU)
            mm.madvise(mmap.MADV_RANDOM)
            mm.madvise(_MADV_POPULATE_READ)
    except ValueError:  # the range is no longer inside the file
        return -errno.EINVAL
    except OSError as exc:
        return -(exc.errno or errno.EIO)
    finally:
        os.close(fd)
    return 0


def serve(rfd: int = 0, wfd: int = 1) -> None:
    """The helper's loop: answer requests from ``rfd`` on ``wfd`` until ``rfd`` ends."""
    lowest_priority()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is for the container
    while True:
        head = _read_exactly(rfd, REQUEST.size)
        if len(head) < REQUEST.size:
            return
        start, end, n = REQUEST.unpack(head)
        raw = _read_exactly(rfd, n)
        if len(raw) < n:
            return
        try:
            os.write(wfd, ANSWER.pack(populate_cache(os.fsdecode(raw), start, end)))
        except BrokenPipeError:
            return


class PageHelper:
    """This process's side of the helper: :meth:`populate` sends a request and waits for the
    answer (blocking, GIL released while it waits), one request at a time. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self.forget_after_fork)

    @property
    def pid(self) -> int | None:
        """The helper's process id, None when it is not running."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> subprocess.Popen[bytes] | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        if self._broken:
            return None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as exc:
            self._broken = True
            log.warning("cannot start the page helper (%s): new files are populated in this process", exc)
            return None
        self._proc = proc
        log.debug("page helper started, pid %d", proc.pid)
        return proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        proc.kill()
        proc.wait()

    def populate(self, path: str, start: int, end: int) -> int | None:
        """Have the helper fault [start, end) of ``path`` into the page cache, and wait for it.
        Returns 0 or -errno of what failed there; None when there is no helper (it cannot be
        started: the caller may do the work itself)."""
        raw = os.fsencode(path)
        with self._lock:
            for _attempt in range(2):  # a helper that died is started again, once
                proc = self._start()
                if proc is None:
                    return None
                assert proc.stdin is not None
                assert proc.stdout is not None
                try:
                    os.write(proc.stdin.fileno(), REQUEST.pack(start, end, len(raw)) + raw)
                    answer = _read_exactly(proc.stdout.fileno(), ANSWER.size)
                except OSError:
                    answer = b""
                if len(answer) == ANSWER.size:
                    return ANSWER.unpack(answer)[0]
                log.warning("the page helper (pid %d) died: starting another", proc.pid)
                self._stop()
            return -errno.EPIPE

    def forget_after_fork(self) -> None:
        """In a forked child (``os.register_at_fork``): drop the parent's helper (its pipes
        closed here, not the helper), and the lock, which the fork may have copied held; the
        child starts its own helper."""
        self._lock = threading.Lock()
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.returncode = 0  # the parent's child: nothing for this process to wait for
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()

    def close(self) -> None:
        """Stop the helper (at exit; a later request starts another)."""
        with self._lock:
            self._stop()


#: the process's helper (shared by every store)
PAGE_HELPER = PageHelper()


if __name__ == "__main__":
    serve()
