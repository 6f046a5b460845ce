"""Helpers for the message-store tests: configs with small files, record encoding, a started store."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import resource
import struct
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from remoting.protocol.message import decode_message, encode_message, tags_hash_code
from store.config import MessageStoreConfig
from store.mapped_file import PAGE_SIZE, MappedFile, _address_of
from store.message_store import DefaultMessageStore
from store.results import PutMessageResult

STORE_HOST = ("127.0.0.1", 10911)
BORN_HOST = ("127.0.0.1", 40000)
T0 = 1_700_000_000_000


class Clock:
    """An injectable wall clock (ms) that advances by ``step`` per call."""

    def __init__(self, start: int = T0, step: int = 1) -> None:
        self.ms = start
        self.step = step

    def __call__(self) -> int:
        self.ms += self.step
        return self.ms


def small_config(root: Path | str, **overrides: Any) -> MessageStoreConfig:
    """Upstream defaults with small files: 64 KiB commit-log files, 100-unit consume-queue files,
    a small index, and timers that stay out of the way of tests."""
    kw: dict[str, Any] = dict(
        storePathRootDir=str(root),
        mappedFileSizeCommitLog=64 * 1024,
        mappedFileSizeConsumeQueue=100 * 20,
        maxHashSlotNum=1000,
        maxIndexNum=4000,
        maxMessageSize=16 * 1024,
    )
    kw.update(overrides)
    return MessageStoreConfig(**kw)


def props(tags: str | None = None, keys: str | None = None, uniq: str | None = None, **extra: str) -> str:
    out = ""
    if tags is not None:
        out += f"TAGS\x01{tags}\x02"
    if keys is not None:
        out += f"KEYS\x01{keys}\x02"
    if uniq is not None:
        out += f"UNIQ_KEY\x01{uniq}\x02"
    for k, v in extra.items():
        out += f"{k}\x01{v}\x02"
    return out


def encode(
    topic: str,
    queue_id: int,
    body: bytes,
    *,
    tags: str | None = None,
    keys: str | None = None,
    uniq: str | None = None,
    sys_flag: int = 0,
    prepared_offset: int = 0,
    **extra: str,
) -> bytearray:
    return encode_message(
        topic=topic,
        queue_id=queue_id,
        flag=0,
        body=body,
        properties=props(tags, keys, uniq, **extra),
        sys_flag=sys_flag,
        born_timestamp=T0,
        born_host=BORN_HOST,
        store_host=STORE_HOST,
        prepared_transaction_offset=prepared_offset,
    )


async def put(
    store: DefaultMessageStore,
    topic: str,
    queue_id: int,
    body: bytes,
    *,
    tags: str | None = None,
    keys: str | None = None,
    uniq: str | None = None,
    sys_flag: int = 0,
    hints: bool = True,
    **extra: str,
) -> PutMessageResult:
    """Encode and put one message (with dispatch hints unless ``hints`` is False)."""
    rec = encode(topic, queue_id, body, tags=tags, keys=keys, uniq=uniq, sys_flag=sys_flag, **extra)
    if hints:
        return await store.put_message(
            rec, topic, queue_id, sys_flag=sys_flag, tags_code=tags_hash_code(tags), keys=keys, uniq_key=uniq
        )
    return await store.put_message(rec, topic, queue_id, sys_flag=sys_flag)


@contextlib.asynccontextmanager
async def running_store(
    config: MessageStoreConfig, *, background: bool = False, **kw: Any
) -> AsyncIterator[DefaultMessageStore]:
    """A started store (optionally with its background services), shut down cleanly on exit."""
    store = DefaultMessageStore(config, store_host=STORE_HOST, **kw)
    await store.start()
    try:
        if background:
            async with trio.open_nursery() as nursery:
                await nursery.start(store.run)
                try:
                    yield store
                finally:
                    nursery.cancel_scope.cancel()
        else:
            yield store
    finally:
        await store.shutdown()


def read_queue(store: DefaultMessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Every message of a queue, in queue order, as bytes (pulls in batches of 32)."""
    out: list[bytes] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        res = store.get_message("g", topic, queue_id, offset, 32)
        assert res is not None
        if not res.message_views:
            break
        out.extend(bytes(v) for v in res.message_views)
        offset = res.next_begin_offset
        res.release()
    return out


def place_batch(
    block: bytearray, hints: list[tuple[int, str | None, str | None]], slot: tuple[int, int, int]
) -> tuple[tuple[int, int, int], list[int]]:
    """What the broker's batch encoder does for a slot: every record carries its queue offset,
    physical offset and the store timestamp; (slot, consume-queue units)."""
    base, qo, now = slot
    units: list[int] = []
    pos = 0
    for i, (tags_code, _, _) in enumerate(hints):
        size = decode_message(block, pos).total_size
        struct.pack_into(">qq", block, pos + 20, qo + i, base + pos)
        struct.pack_into(">q", block, pos + 56, now)
        units += (base + pos, size, tags_code)
        pos += size
    return slot, units


def mapped_pages(mf: MappedFile | mmap.mmap, start: int, end: int) -> list[bool]:
    """Whether each page of [start, end) of a file's map is mapped in this process
    (``/proc/self/pagemap`` bit 63)."""
    mm = mf.mm if isinstance(mf, MappedFile) else mf
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        pytest.skip("no /proc/self/pagemap here")
    try:
        first = (_address_of(mm) + start) // PAGE_SIZE
        count = (end - start) // PAGE_SIZE
        raw = os.pread(fd, 8 * count, 8 * first)
    finally:
        os.close(fd)
    return [bool(e >> 63) for e in struct.unpack(f"<{count}Q", raw)]


def cached_pages(path: str, start: int = 0, end: int | None = None) -> list[bool]:
    """Whether each page of [start, end) of the file (to its end by default) is in the page cache
    (``mincore`` of a fresh read-only map of it, which tells whether or not any process maps the
    page); skips the test where the calls fail."""
    size = os.path.getsize(path) if end is None else end
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if base in (None, ctypes.c_void_p(-1).value):
        pytest.skip(f"mmap failed (errno {ctypes.get_errno()})")
    try:
        count = -(-(size - start) // PAGE_SIZE)
        vec = (ctypes.c_ubyte * count)()
        if libc.mincore(base + start, size - start, vec) != 0:
            pytest.skip(f"mincore failed (errno {ctypes.get_errno()})")
        return [bool(v & 1) for v in vec]
    finally:
        libc.munmap(base, size)


def major_faults() -> int:
    """Major page faults of the calling thread so far (a store's trio thread: each one a wait for
    the disk on the event loop)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_majflt


def drop_pages(path: str) -> None:
    """Write the file back and drop its pages from the page cache; skip the test where they stay
    (a file system that keeps a file's pages in memory whatever it is told: tmpfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if any(cached_pages(path)):
        pytest.skip("this file system keeps the file's pages in memory (tmpfs?)")


def skip_unless_pages_drop(directory: Path) -> None:
    """Skip the test where the file system keeps a flushed file's pages (tests of the commit log's
    page-cache bound need them to go)."""
    probe = directory / "page-drop-probe"
    probe.write_bytes(b"x" * 4 * PAGE_SIZE)
    drop_pages(str(probe))
    probe.unlink()


# --- a disk that fills up ------------------------------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``300m``) mounted at ``path`` (made here) for the
    block; skips the test where it cannot be mounted (not root)."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the filesystem has no byte left; returns how many."""
    chunk = bytes(1 << 20)
    written = 0
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                n = f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]
                continue
            written += n or 0
