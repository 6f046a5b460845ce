"""container.process.raise_open_file_limit: the soft limit of open files goes up to the hard one
(every mapped store file holds a descriptor), in a child process so the suite's own limit stays."""

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
import resource, sys
from store.consume_queue_store import ConsumeQueueStore
from store.errors import StoreOpenError
root = sys.argv[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
queues = ConsumeQueueStore(root + "/consumequeue", root, 6000)
try:
    queues.load_sync()
except StoreOpenError as exc:
    print("REFUSED", exc)
else:
    print("LOADED")
"""


def test_a_store_with_more_queue_files_than_descriptors_is_refused_with_the_way_out(tmp_path: Path) -> None:
    # a dev cluster's data directory collects a topic per test run after run; past the limit its
    # start failed with a traceback from deep in the loading
    queues = ConsumeQueueStore(str(tmp_path / "consumequeue"), str(tmp_path), 6000)
    queues.load_sync()
    for i in range(100):
        cq = queues.get_or_create(f"Topic{i}", 0)
        cq.install_file(cq.create_file_sync(0, 0), 0)
        assert cq.put(i * 100, 100, 0, 0)
    queues.close()
    out = subprocess.run(
        [sys.executable, "-c", STORE_CHILD, str(tmp_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith("REFUSED"), out
    assert "Too many open files" in out
    assert "this store has 100 consume queues" in out
    assert "the process may open 64 files" in out
    assert "ulimit -Hn" in out
