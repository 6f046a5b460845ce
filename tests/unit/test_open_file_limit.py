"""container.process.raise_open_file_limit: the soft limit of open files goes up to the hard one
(every mapped store file holds a descriptor), in a child process so the suite's own limit stays."""

from __future__ import annotations

import resource
import subprocess
import sys

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
