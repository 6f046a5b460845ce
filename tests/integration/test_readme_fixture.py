"""The README's pytest fixture ("A dev cluster per test session"), run as written: its code block is
the conftest.py of two pytest sessions started side by side as two pytest-xdist workers would be
(``PYTEST_XDIST_WORKER`` gw0 and gw1), each sending with the official C++ client to its own dev
cluster (real ``bin/rmq-container`` processes on their own ports and data directories)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from container.config_fields import PROJECT_ROOT

pytest.importorskip("rocketmq.client", reason="the official C++ client (PyPI rocketmq==0.4.4)")

SESSION_TEST = """
from rocketmq.client import Message, Producer, SendStatus


def test_send_to_the_sessions_cluster(namesrv):
    producer = Producer("PG_README_FIXTURE")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        message = Message("ReadmeFixtureTopic")
        message.set_body(b"hello")
        result = producer.send_sync(message)
    finally:
        producer.shutdown()
    assert result.status == SendStatus.OK
    print("SENT-TO", namesrv)
"""


def readme_conftest() -> str:
    """The README's conftest.py block, with ``RMQ`` pointing at this checkout."""
    text = (PROJECT_ROOT / "README.md").read_text()
    m = re.search(r"```python\n(# conftest\.py\n.*?)```", text, re.S)
    assert m, "no conftest.py block in the README"
    code, n = re.subn(
        r"^RMQ = .*$", f"RMQ = {str(PROJECT_ROOT / 'bin' / 'rmq-container')!r}", m.group(1), flags=re.M
    )
    assert n == 1, "the block has no RMQ line"
    return code


async def test_the_readme_fixture_gives_two_workers_a_cluster_each(tmp_path: Path) -> None:
    code = readme_conftest()
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def session(worker: str) -> None:
        directory = tmp_path / worker
        (directory / "home").mkdir(parents=True)
        (directory / "conftest.py").write_text(code)
        (directory / "test_session.py").write_text(SESSION_TEST)
        env = {**os.environ, "PYTEST_XDIST_WORKER": worker, "HOME": str(directory / "home")}
        env.pop("RMQ_PORT_OFFSET", None)
        results[worker] = await trio.run_process(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-s",
                "-p",
                "no:cacheprovider",
                "--basetemp",
                str(directory / "tmp"),
            ],
            cwd=directory,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    with trio.fail_after(180):
        async with trio.open_nursery() as nursery:
            for worker in ("gw0", "gw1"):
                nursery.start_soon(session, worker)
    for worker, offset in (("gw0", 100), ("gw1", 200)):
        out = results[worker].stdout.decode(errors="replace")
        assert results[worker].returncode == 0, (
            f"{worker}:\n{out}\n{results[worker].stderr.decode(errors='replace')}"
        )
        assert "1 passed" in out, out
        assert f"SENT-TO 127.0.0.1:{9876 + offset}" in out, out
