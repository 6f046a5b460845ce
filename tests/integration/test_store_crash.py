"""SIGKILL crash tests: a child process appends with SYNC_FLUSH and reports every acknowledged
message; the parent kills it at random moments (during recovery, mid-append, around file rolls),
restarts it, and at the end checks that every acknowledged message is intact and readable by queue
offset and by key, and that each queue is dense (nothing but a torn tail was lost).

10 runs x 5 kills = 50 kills with SYNC_FLUSH, and 4 runs x 5 with ASYNC_FLUSH: a process kill
leaves the page cache, so there too every acknowledged message must survive -- including its
consume-queue unit, which the plain append path only stages (recovery rebuilds it). A failure
prints the seed; replay one run with
``.venv/bin/python -m pytest 'tests/integration/test_store_crash.py::test_sigkill_never_loses_acknowledged_messages[SYNC_FLUSH-SEED]'``.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from remoting.protocol.message import decode_message
from store.message_store import DefaultMessageStore
from tests.integration.store_crash_child import QUEUES, TOPIC, body_of, child_config
from tests.integration.storekit import STORE_HOST, read_queue

REPO = Path(__file__).resolve().parents[2]
KILLS_PER_RUN = 5


class Child:
    def __init__(self, root: Path, first: int, flush: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.store_crash_child", str(root), str(first), flush],
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=env,
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buf = b""
        self.ready = False
        self.acks: list[tuple[int, int, int, int]] = []

    def pump(self, timeout: float) -> None:
        """Read what the child printed within ``timeout`` seconds."""
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return
        chunk = os.read(self.fd, 65536)
        if not chunk:
            if self.proc.poll() not in (None, -signal.SIGKILL):
                raise AssertionError(f"child exited with {self.proc.returncode}")
            return
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            if line == b"ready":
                self.ready = True
            else:
                i, q, qo, off = map(int, line.split())
                self.acks.append((i, q, qo, off))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        # lines written before the kill still count: they were acknowledged
        while True:
            r, _, _ = select.select([self.fd], [], [], 0)
            if not r:
                break
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self.buf += chunk
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                if line != b"ready":
                    i, q, qo, off = map(int, line.split())
                    self.acks.append((i, q, qo, off))
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _run_with_kills(root: Path, rng: random.Random, flush: str) -> dict[int, tuple[int, int, int]]:
    acked: dict[int, tuple[int, int, int]] = {}
    first = 0
    for _kill in range(KILLS_PER_RUN):
        child = Child(root, first, flush)
        deadline = time.monotonic() + 30
        mode = rng.random()
        if mode < 0.15:  # kill during start / recovery
            time.sleep(rng.uniform(0.0, 0.4))
        else:
            want = rng.randint(1, 60 if flush == "SYNC_FLUSH" else 2000)
            while len(child.acks) < want:
                assert time.monotonic() < deadline, "child made no progress"
                child.pump(0.5)
            time.sleep(rng.uniform(0, 0.01))
        child.kill()
        for i, q, qo, off in child.acks:
            acked[i] = (q, qo, off)
        # numbers of unacknowledged messages may be reused: the next child starts after the last ack
        first = max(acked, default=-1) + 1
    return acked


async def _verify(root: Path, acked: dict[int, tuple[int, int, int]], flush: str) -> None:
    cfg = child_config(root, flush)
    store = DefaultMessageStore(cfg, store_host=STORE_HOST)
    await store.start()
    try:
        queues = {q: [decode_message(b) for b in read_queue(store, TOPIC, q)] for q in range(QUEUES)}
        for i, (q, qo, off) in sorted(acked.items()):
            msgs = queues[q]
            assert qo < len(msgs), f"acknowledged message {i} (queue {q} offset {qo}) is missing"
            msg = msgs[qo]
            assert msg.body == body_of(i), f"queue {q} offset {qo} holds the wrong body"
            assert msg.physical_offset == off
            assert msg.properties["KEYS"] == f"K{i}"
            found = store.query_message(TOPIC, f"K{i}", 8, 0, 2**62)
            assert off in found.phy_offsets, f"message {i} not found by key"
            found.release()
        for q, msgs in queues.items():
            # dense and ordered: offsets 0..n-1, bodies of increasing message numbers
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
            numbers = [int(m.body[:8]) for m in msgs]
            assert numbers == sorted(numbers), f"queue {q} out of order"
    finally:
        await store.shutdown()


@pytest.mark.parametrize(
    ("flush", "seed"),
    [("SYNC_FLUSH", seed) for seed in range(10)] + [("ASYNC_FLUSH", seed) for seed in range(4)],
)
def test_sigkill_never_loses_acknowledged_messages(tmp_path: Path, flush: str, seed: int) -> None:
    rng = random.Random(seed)
    try:
        acked = _run_with_kills(tmp_path, rng, flush)
        assert acked, "no message was ever acknowledged"
        trio.run(_verify, tmp_path, acked, flush)
    except BaseException:
        print(
            f"crash test failed with seed {seed}; replay: pytest '{__file__}::"
            f"test_sigkill_never_loses_acknowledged_messages[{flush}-{seed}]'"
        )
        raise
