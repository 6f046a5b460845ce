"""Message store benchmark (issue #6): append + dispatch, cost growth, crash recovery, reads.

Cases (each against a baseline measured in the same run, alternating rounds, best round kept):

* **append + dispatch** of 128 B, 1 KiB and 16 KiB bodies: ``DefaultMessageStore.try_put_message``
  (``put_message`` when it declines), as the broker's send path calls it, of records encoded
  beforehand (the broker encodes once, on its side of the call; the timed part ends by draining
  the index writes still queued) and cycled through from :data:`HOT_BYTES` of buffers, so that
  they sit in the cache as a broker's just-encoded record and the baseline's one record do (every
  message still has its own UNIQ_KEY for the index; before 2026-11-27 the cases cycled through
  10,000 distinct records, 160 MiB at 16 KiB, read from memory each time: about 2 us more per
  16 KiB message -- still reported as the "cold in cache" row), ASYNC_FLUSH with
  the background services running, default config (index on: every message has a UNIQ_KEY and a
  tag). Baseline: the minimum any store must do -- pack the fixed header, CRC32 the body and copy
  the record into an already-faulted file mmap, no dispatch -- with the CRC-32 the project uses
  (``remoting.crc``: ISA-L's where installed). Targets: >= 0.35 of the baseline's msgs/s at 128 B
  and 1 KiB, >= 0.7 of its MB/s at 16 KiB. Informational rows: the same figure against the baseline
  with zlib's CRC-32 (what the project used before 2026-11-26: six times slower at 1 KiB, so that
  baseline is about half as fast), the same path without the index, with the encoding
  (``remoting.protocol.message.encode_message``) included, and the records appended 32 at a time
  by ``put_messages`` (a broker's SEND_BATCH_MESSAGE path); and the median of the per-round
  ratios (each store round against the baseline round of its iteration), which a baseline round
  that was fast for the VM's reasons moves less than it moves the best-against-best ratio.
* **cost growth**: 1 KiB appends spread over 1, 100 and 10,000 topic-queues, and with 4 MiB
  commit-log files (a roll every ~4000 messages) against 1 GiB files: each within +-20 % of the
  1-queue / no-roll figure (ratio >= 0.8). Rounds of 160,000 appends (180 MB): sustained rates,
  which 40,000-append rounds (before 2026-11-27) overstated for the rolls -- the no-roll round
  writes into a file the allocator populated while the store warmed up (~1,900 page faults in the
  round), the 4 MiB files are prepared one ahead and populated as they come (~46,600 faults, 1.5 us
  of system time per message against 0.2; fresh guest memory costs ~9 us a page on this VM).
* **crash recovery** of a 1 GiB commit log (4 KiB messages): seconds to ``start()`` after an
  abandoned store with a ~1 MiB and a ~512 MiB unflushed tail, and after a clean shutdown.
* **first touch of a page** (informational, after the append cases): microseconds a page to bring
  a new file into a writable map, from the next free memory and from memory just freed
  (:func:`bench.common.page_touch_costs`).
* **read path**: ``get_message`` of 32 x 1 KiB from a warm queue, microseconds per call, against
  the minimum (unpack 32 consume-queue units, slice 32 views).

The process's GIL switch interval is the one ``rmq-container`` sets
(:func:`container.process.shorten_gil_switch_interval`).

Standalone: ``python -m bench.store [quick]`` prints the table (``bin/bench store`` for the runner).
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from bench.common import markdown_table, page_touch_costs, row
from container.process import shorten_gil_switch_interval
from remoting.crc import crc32
from remoting.protocol.message import UniqIdGenerator, encode_message, tags_hash_code
from store.config import MessageStoreConfig
from store.message_store import DefaultMessageStore
from store.results import PutMessageStatus

STORE_HOST = ("127.0.0.1", 10911)
BORN_HOST = ("127.0.0.1", 40000)
TAG = "TagA"
TAG_CODE = tags_hash_code(TAG)
#: rounds of each case (best kept on both sides; the store and its baseline alternate): with three,
#: consecutive runs on the development VM put the 16 KiB ratio at 0.35 and 0.67 and the 10,000-queue
#: one at 0.66 and 0.88 -- the VM's slow spells last longer than a round
ROUNDS = 5


def _props(uniq: str) -> str:
    return f"TAGS\x01{TAG}\x02UNIQ_KEY\x01{uniq}\x02"


def _encode(topic: str, qid: int, body: bytes, uniq: str) -> bytearray:
    return encode_message(
        topic=topic,
        queue_id=qid,
        flag=0,
        body=body,
        properties=_props(uniq),
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host=BORN_HOST,
        store_host=STORE_HOST,
    )


# --------------------------------------------------------------------------- baseline


class Baseline:
    """Pack the fixed header, CRC32 the body, copy the record into a pre-faulted file mmap."""

    _HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")

    def __init__(self, directory: str, size: int) -> None:
        self.size = size
        self.path = os.path.join(directory, "baseline")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, size)
        self.mm = mmap.mmap(fd, size)
        os.close(fd)
        for pos in range(0, size, mmap.PAGESIZE):  # fault every page in
            self.mm[pos] = 0
        self.view = memoryview(self.mm)
        #: CPU seconds of this thread in the last :meth:`run`'s timed loop
        self.cpu = 0.0

    def run(self, body: bytes, n: int, crc: Callable[..., int] = crc32) -> float:
        """Seconds of wall time ``n`` records take; :attr:`cpu` is then this thread's CPU seconds
        for them (the pages' fault-in before the timed loop is in neither)."""
        topic = b"BenchTopic"
        props = _props("0" * 32).encode()
        head = self._HEADER.size
        total = head + len(body) + 1 + len(topic) + 2 + len(props)
        rec = bytearray(total)
        rec[head : head + len(body)] = body
        tail = head + len(body)
        rec[tail] = len(topic)
        rec[tail + 1 : tail + 1 + len(topic)] = topic
        struct.pack_into(">h", rec, tail + 1 + len(topic), len(props))
        rec[total - len(props) :] = props
        pack, view, limit = self._HEADER.pack_into, self.view, self.size - total
        ip = bytes([127, 0, 0, 1])
        # fault in again the pages this round writes: the VM reclaims file pages left untouched
        # for a while (the development VM runs DAMON), and a round on pages faulted afresh is
        # not the "already-faulted mmap" the baseline stands for (seen: 1 KiB rounds at 1.27M
        # msgs/s in one run, 1.8-1.9M in others)
        mm = self.mm
        for page in range(0, min(self.size, n * total + mmap.PAGESIZE), mmap.PAGESIZE):
            mm[page] = 0
        pos = 0
        c0 = time.thread_time()
        t0 = time.perf_counter()
        for i in range(n):
            pack(
                rec,
                0,
                total,
                -626843481,
                crc(body) & 0x7FFFFFFF,
                0,
                0,
                i,
                pos,
                0,
                1,
                ip,
                40000,
                2,
                ip,
                10911,
                0,
                0,
                len(body),
            )
            view[pos : pos + total] = rec
            pos += total
            if pos > limit:
                pos = 0
        wall = time.perf_counter() - t0
        self.cpu = time.thread_time() - c0
        return wall

    def close(self) -> None:
        self.view.release()
        self.mm.close()


# --------------------------------------------------------------------------- store helpers


async def _with_store(cfg: MessageStoreConfig, fn: Callable[[DefaultMessageStore], Awaitable[Any]]) -> Any:
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            try:
                return await fn(store)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await store.shutdown()


#: bytes of distinct record buffers the append cases cycle through: a broker appends a record it
#: has just encoded, so its bytes are in the core's cache (L2 here: 1 MiB a core), as the baseline's
#: one record is; 10,000 distinct 16 KiB records (160 MiB) would be read from memory every time
HOT_BYTES = 256 * 1024


def _records(
    topic_qids: list[tuple[str, int]], body: bytes, pool: int, hot_bytes: int | None = None
) -> list[tuple[bytearray, str, int, str]]:
    """``pool`` entries (record, topic, queue id, unique key), the keys all distinct. With
    ``hot_bytes`` the entries share as few record buffers as fit in it (a whole number of rounds
    over ``topic_qids``; the store rewrites a record's offsets and store time in place, so a shared
    buffer is as good as a fresh one) -- only the UNIQ_KEY property inside a shared buffer is then
    not the key the entry passes to the store's index, which these benchmarks never read back."""
    gen = UniqIdGenerator()
    nq = len(topic_qids)
    distinct = pool
    out: list[tuple[bytearray, str, int, str]] = []
    for i in range(pool):
        topic, qid = topic_qids[i % nq]
        uniq = gen.create()
        if i >= distinct:
            out.append((out[i % distinct][0], topic, qid, uniq))
            continue
        rec = _encode(topic, qid, body, uniq)
        out.append((rec, topic, qid, uniq))
        if i == 0 and hot_bytes is not None:
            distinct = max(1, hot_bytes // len(rec) // nq) * nq
    return out


async def _put_all(store: DefaultMessageStore, recs: list[tuple[bytearray, str, int, str]], n: int) -> float:
    put, try_put = store.put_message, store.try_put_message
    ok = PutMessageStatus.PUT_OK
    m = len(recs)
    t0 = time.perf_counter()
    checkpoint = trio.lowlevel.checkpoint
    for i in range(n):
        rec, topic, qid, uniq = recs[i % m]
        # as the broker's send path: the plain case without awaiting (stored when it answers),
        # else the general one
        if try_put(rec, topic, qid, 0, TAG_CODE, None, uniq) is None:
            res = await put(rec, topic, qid, sys_flag=0, tags_code=TAG_CODE, uniq_key=uniq)
            if res.status is not ok:
                raise RuntimeError(f"put failed: {res}")
        if not i & 255:
            # a broker's send path yields on every request; this loop lets the store's own
            # services (flush, write-ahead, allocation) run at least every 256 messages
            await checkpoint()
    if store.index is not None:
        store.index.drain()  # the index writes still queued belong to these messages
    return time.perf_counter() - t0


async def _warm(store: DefaultMessageStore, recs: list[tuple[bytearray, str, int, str]]) -> None:
    """Steady state before measuring: every queue has its file, the index's hash-slot pages were
    touched (3 passes over the key pool), and the next commit-log file is prepared -- unless the
    writer's pace does not ask for it yet (a 512 MiB file at the 128 B rate: ~400 MB of it left)."""
    await _put_all(store, recs, 3 * len(recs))
    cl = store.commit_log
    with trio.fail_after(60):
        while cl.mfq.next_file is None and not store.allocator.far_from_end(cl.current):
            await trio.sleep(0.02)


async def _measure(
    store: DefaultMessageStore, recs: list[tuple[bytearray, str, int, str]], n: int
) -> tuple[float, float]:
    """(msgs per wall second, msgs per CPU second of this thread)."""
    c0 = time.thread_time()
    wall = await _put_all(store, recs, n)
    return n / wall, n / (time.thread_time() - c0)


async def _encode_put_all(
    store: DefaultMessageStore, body: bytes, uniqs: list[str], n: int
) -> tuple[float, float]:
    put, try_put = store.put_message, store.try_put_message
    m = len(uniqs)
    c0 = time.thread_time()
    t0 = time.perf_counter()
    for i in range(n):
        uniq = uniqs[i % m]
        rec = _encode("BenchTopic", 0, body, uniq)
        if try_put(rec, "BenchTopic", 0, 0, TAG_CODE, None, uniq) is None:
            await put(rec, "BenchTopic", 0, sys_flag=0, tags_code=TAG_CODE, uniq_key=uniq)
        if not i & 255:
            await trio.lowlevel.checkpoint()
    if store.index is not None:
        store.index.drain()
    return n / (time.perf_counter() - t0), n / (time.thread_time() - c0)


BATCH = 32


async def _put_batches(
    store: DefaultMessageStore, body: bytes, uniqs: list[str], n: int
) -> tuple[float, float]:
    """``n`` messages as ``put_messages`` of :data:`BATCH` records each (the shape of a broker's
    SEND_BATCH_MESSAGE), records encoded beforehand as in :func:`_measure`: distinct keys, as few
    batch buffers as fit in :data:`HOT_BYTES` (at least one)."""
    batches: list[tuple[bytearray, list[tuple[int, str | None, str | None]]]] = []
    distinct = len(uniqs) // BATCH
    for b in range(len(uniqs) // BATCH):
        keys = uniqs[b * BATCH : (b + 1) * BATCH]
        hints: list[tuple[int, str | None, str | None]] = [(TAG_CODE, None, u) for u in keys]
        if b >= distinct:
            batches.append((batches[b % distinct][0], hints))
            continue
        encoded = bytearray().join(_encode("BenchTopic", 0, body, u) for u in keys)
        batches.append((encoded, hints))
        if b == 0:
            distinct = max(1, HOT_BYTES // len(encoded))
    put = store.put_messages
    ok = PutMessageStatus.PUT_OK
    m = len(batches)
    c0 = time.thread_time()
    t0 = time.perf_counter()
    for i in range(n // BATCH):
        encoded, hints = batches[i % m]
        res = await put(encoded, "BenchTopic", 0, sys_flag=0, hints=hints)
        if res.status is not ok:
            raise RuntimeError(f"put failed: {res}")
    if store.index is not None:
        store.index.drain()
    done = n // BATCH * BATCH
    return done / (time.perf_counter() - t0), done / (time.thread_time() - c0)


def _config(root: str, **kw: Any) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=root, **kw)


# --------------------------------------------------------------------------- cases


POOL = 10_000  # distinct records / keys per run, the same for every case


def bench_append(work: str, quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    sizes = [(128, 60_000), (1024, 40_000), (16 * 1024, 8_000)]
    base = Baseline(work, 256 * 1024 * 1024)
    for size, n in sizes:
        if quick:
            n //= 4
        body = b"x" * size
        best: dict[str, tuple[float, float]] = {}
        paired: list[float] = []  # each store round against the baseline round of its iteration

        def keep(key: str, got: tuple[float, float], best: dict[str, tuple[float, float]] = best) -> None:
            old = best.get(key, (0.0, 0.0))
            best[key] = (max(old[0], got[0]), max(old[1], got[1]))

        async def store_round(
            index: bool, encode: bool, n: int = n, body: bytes = body, batch: bool = False, cold: bool = False
        ) -> tuple[float, float]:
            root = tempfile.mkdtemp(dir=work)
            cfg = _config(root, mappedFileSizeCommitLog=512 * 1024 * 1024, messageIndexEnable=index)

            async def go(store: DefaultMessageStore) -> tuple[float, float]:
                recs = _records([("BenchTopic", 0)], body, POOL, None if cold else HOT_BYTES)
                await _warm(store, recs)
                if encode:
                    return await _encode_put_all(store, body, [r[3] for r in recs], n)
                if batch:
                    return await _put_batches(store, body, [r[3] for r in recs], n)
                return await _measure(store, recs, n)

            try:
                return await _with_store(cfg, go)  # type: ignore[no-any-return]
            finally:
                shutil.rmtree(root, ignore_errors=True)

        for _ in range(ROUNDS):
            wall = base.run(body, n)
            keep("base", (n / wall, n / base.cpu))
            keep("base_zlib", (n / base.run(body, n, zlib.crc32), 0.0))
            got = trio.run(store_round, True, False)
            keep("store", got)
            paired.append(got[0] / (n / wall))
            keep("noindex", trio.run(store_round, False, False))
            keep("encode", trio.run(store_round, True, True))
            keep("batch", trio.run(store_round, True, False, n, body, True))
            keep("cold", trio.run(store_round, True, False, n, body, False, True))
        label = f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
        scale, unit, target = (size / 1e6, "MB/s", 0.7) if size >= 16 * 1024 else (1.0, "msgs/s", 0.35)
        b_wall, b_cpu = best["base"][0] * scale, best["base"][1] * scale
        rows.append(row(f"append+dispatch {label}", best["store"][0] * scale, unit, b_wall, target))
        rows.append(
            row(
                f"append+dispatch {label}, median of the per-round ratios (store round / the baseline round before it)",
                statistics.median(paired),
                "x",
            )
        )
        rows.append(
            row(
                f"append+dispatch {label}, vs the baseline with zlib's CRC-32",
                best["store"][0] * scale,
                unit,
                best["base_zlib"][0] * scale,
            )
        )
        rows.append(row(f"append+dispatch {label}, per CPU-second", best["store"][1] * scale, unit, b_cpu))
        rows.append(row(f"append+dispatch {label}, no index", best["noindex"][0] * scale, unit, b_wall))
        rows.append(
            row(
                f"append+dispatch {label}, records from a {POOL:,}-record pool (cold in cache)",
                best["cold"][0] * scale,
                unit,
                b_wall,
            )
        )
        rows.append(row(f"encode+append+dispatch {label}", best["encode"][0] * scale, unit, b_wall))
        rows.append(
            row(
                f"append+dispatch {label}, batches of {BATCH} (put_messages)",
                best["batch"][0] * scale,
                unit,
                b_wall,
            )
        )
    base.close()
    return rows


def bench_growth(work: str, quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    body = b"x" * 1024
    # 160,000 appends per round (0.5 s): with 40,000 the rounds lasted ~0.1 s, short enough for the
    # VM's jitter to move the 10,000-queue ratio between 0.67 and 0.88 in consecutive runs (0.80-0.84
    # at this length), and each of the 10,000 queues got 4 appends, too few to fill its staging buffer
    n = 40_000 if quick else 160_000

    async def queues_round(nq: int) -> float:
        root = tempfile.mkdtemp(dir=work)
        cfg = _config(root, mappedFileSizeCommitLog=512 * 1024 * 1024)
        tq = [(f"T{q // 8}", q % 8) for q in range(nq)]

        async def go(store: DefaultMessageStore) -> float:
            recs = _records(tq, body, POOL)
            await _warm(store, recs)
            return (await _measure(store, recs, n))[0]

        try:
            return float(await _with_store(cfg, go))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    async def roll_round(file_size: int) -> float:
        root = tempfile.mkdtemp(dir=work)
        cfg = _config(root, mappedFileSizeCommitLog=file_size)

        async def go(store: DefaultMessageStore) -> float:
            recs = _records([("BenchTopic", 0)], body, POOL)
            await _warm(store, recs)
            return (await _measure(store, recs, n))[0]

        try:
            return float(await _with_store(cfg, go))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    best = {1: 0.0, 100: 0.0, 10_000: 0.0}
    for _ in range(ROUNDS):
        for nq in best:
            best[nq] = max(best[nq], trio.run(queues_round, nq))
    for nq in (100, 10_000):
        rows.append(row(f"1 KiB appends over {nq:,} topic-queues vs 1", best[nq], "msgs/s", best[1], 0.8))
    rolls = {"big": 0.0, "small": 0.0}
    for _ in range(ROUNDS):
        rolls["big"] = max(rolls["big"], trio.run(roll_round, 1024 * 1024 * 1024))
        rolls["small"] = max(rolls["small"], trio.run(roll_round, 4 * 1024 * 1024))
    rows.append(
        row("1 KiB appends rolling 4 MiB files vs no roll", rolls["small"], "msgs/s", rolls["big"], 0.8)
    )
    return rows


def bench_recovery(work: str, quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    root = tempfile.mkdtemp(dir=work)
    log_size = (256 if quick else 1024) * 1024 * 1024
    cfg = _config(root, mappedFileSizeCommitLog=log_size)
    body = b"r" * 4000
    recs = _records([("RecTopic", q) for q in range(4)], body, 1000)
    rec_size = len(recs[0][0])

    async def fill_and_crash(bytes_before_checkpoint: int, tail_bytes: int) -> None:
        store = DefaultMessageStore(cfg, store_host=STORE_HOST)
        await store.start()
        await _put_all(store, recs, bytes_before_checkpoint // rec_size)
        await store.flush()
        await store.logics_flusher.flush()
        await _put_all(store, recs, tail_bytes // rec_size)
        store.abandon()

    async def timed_start() -> tuple[float, int, int]:
        store = DefaultMessageStore(cfg, store_host=STORE_HOST)
        t0 = time.perf_counter()
        report = await store.start()
        elapsed = time.perf_counter() - t0
        await store.shutdown()
        return elapsed, report.scanned_messages, store.max_phy_offset

    half = log_size // 2 - 8 * 1024 * 1024
    trio.run(fill_and_crash, half, half)  # ~1 GiB log, ~half of it unflushed
    large, large_n, total = trio.run(timed_start)
    trio.run(fill_and_crash, 0, 1024 * 1024)  # reopen, 1 MiB unflushed tail
    small, small_n, total = trio.run(timed_start)
    clean, _, _ = trio.run(timed_start)
    gib = total / 2**30
    rows.append(row(f"recovery, {gib:.2f} GiB log, 1 MiB tail ({small_n} msgs)", small, "s"))
    rows.append(row(f"recovery, {gib:.2f} GiB log, {half >> 20} MiB tail ({large_n} msgs)", large, "s"))
    rows.append(row(f"recovery, {gib:.2f} GiB log, clean shutdown", clean, "s"))
    shutil.rmtree(root, ignore_errors=True)
    return rows


def bench_read(work: str, quick: bool) -> list[dict[str, Any]]:
    root = tempfile.mkdtemp(dir=work)
    cfg = _config(root, mappedFileSizeCommitLog=64 * 1024 * 1024)
    calls = 5_000 if quick else 20_000

    async def go(store: DefaultMessageStore) -> tuple[float, float]:
        recs = _records([("ReadTopic", 0)], b"y" * 1024, 1000)
        await _put_all(store, recs, 10_000)
        cq = store.queues.get("ReadTopic", 0)
        assert cq is not None
        best_case = best_base = float("inf")
        unit = struct.Struct(">qiq")
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for i in range(calls):
                res = store.get_message("g", "ReadTopic", 0, (i * 32) % 9_000, 32)
                if res is None or len(res.message_views) != 32:
                    raise RuntimeError(f"unexpected read result {res}")
                res.release()
            best_case = min(best_case, (time.perf_counter() - t0) / calls)
            read = store.commit_log.read
            t0 = time.perf_counter()
            for i in range(calls):
                units = cq.read_units((i * 32) % 9_000, 32)
                assert units is not None
                views = [read(off, size) for off, size, _ in unit.iter_unpack(units)]
                for v in views:
                    v.release()  # type: ignore[union-attr]
            best_base = min(best_base, (time.perf_counter() - t0) / calls)
        return best_case * 1e6, best_base * 1e6

    case, base = trio.run(_with_store, cfg, go)
    shutil.rmtree(root, ignore_errors=True)
    # lower is better: report the ratio base / case so that 1.0 means "no overhead"
    r = row("get_message 32 x 1 KiB, warm queue (us/call)", case, "us", base)
    r["ratio"] = round(base / case, 3) if case else None
    return [r]


def run(quick: bool = False) -> list[dict[str, Any]]:
    logging.getLogger("store").setLevel(logging.ERROR)
    shorten_gil_switch_interval()  # as the rmq-container process runs its stores
    work = tempfile.mkdtemp(prefix="bench-store-")
    try:
        rows: list[dict[str, Any]] = []
        rows += bench_append(work, quick)
        # informational: what a page of new page cache costs after the append cases (each round's
        # store is deleted after it, so its pages are reused by the next; see page_touch_costs)
        fresh, reused = page_touch_costs(work)
        rows.append(
            row(
                "first touch of a new page-cache page: next free page vs one just freed (us/page)",
                fresh,
                "us",
                reused,
            )
        )
        rows += bench_growth(work, quick)
        rows += bench_read(work, quick)
        rows += bench_recovery(work, quick)
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(markdown_table(run(quick="quick" in sys.argv[1:])))
