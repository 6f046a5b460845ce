"""container.process.raise_open_file_limit: the soft limit of open files goes up to the hard one
(connections hold descriptors), in a child process so the suite's own limit stays."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from store.consume_queue_store import ConsumeQueueStore
from tests.cluster.harness import PROJECT_ROOT

CHILD = """
import resource
from container.process import raise_open_file_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
before, after = raise_open_file_limit()
print(before, after, *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_soft_limit_is_raised_to_the_hard_limit() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    before, after, soft, hard = map(int, out)
    assert before == 256
    expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert after == soft == expected
    assert after > 256


STORE_CHILD = """
import os, resource, sys
from store.consume_queue_store import ConsumeQueueStore
from store.errors import StoreOpenError
root, limit = sys.argv[1], sys.argv[2]
# "one": one descriptor left beyond those open now (a file opens; CPython's mmap of it, which
# duplicates the descriptor for a moment, does not)
soft = len(os.listdir("/proc/self/fd")) if limit == "one" else int(limit)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
queues = ConsumeQueueStore(root + "/consumequeue", root, 6000)
try:
    queues.load_sync()
except StoreOpenError as exc:
    print("REFUSED", exc)
else:
    print("LOADED", len(list(queues)), len(os.listdir("/proc/self/fd")))
"""


def _load_in_child(root: Path, limit: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", STORE_CHILD, str(root), limit],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_store_with_more_queue_files_than_descriptors_loads_and_one_without_any_says_the_way_out(
    tmp_path: Path,
) -> None:
    queues = ConsumeQueueStore(str(tmp_path / "consumequeue"), str(tmp_path), 6000)
    queues.load_sync()
    for i in range(100):
        cq = queues.get_or_create(f"Topic{i}", 0)
        cq.install_file(cq.create_file_sync(0, 0), 0)
        assert cq.put(i * 100, 100, 0, 0)
    queues.close()
    # a mapped file holds no descriptor: 100 queue files map within 64 (a dev cluster's data
    # directory collects a topic per test run; with a descriptor per map, 20,000 queue files
    # reached a common hard limit and the process could not accept a connection)
    out = _load_in_child(tmp_path, "64")
    assert out.startswith("LOADED 100 "), out
    assert int(out.split()[2]) < 64
    # out of descriptors for another reason: refused with the way out (it was a traceback)
    out = _load_in_child(tmp_path, "one")
    assert out.startswith("REFUSED"), out
    assert "Too many open files" in out
    assert "this store has 100 consume queues" in out
    assert "ulimit -Hn" in out
