"""The README's code, run as written: the pytest fixture ("A dev cluster per test session") as the
conftest.py of two pytest sessions started side by side as two pytest-xdist workers would be
(``PYTEST_XDIST_WORKER`` gw0 and gw1), each sending with the official C++ client to its own dev
cluster (real ``bin/rmq-container`` processes on their own ports and data directories); and the
trio example of the project's own client against a dev cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from container.config_fields import PROJECT_ROOT
from tests.cluster.harness import ContainerProc, wait_until
from tests.cluster.test_failover_dev_cluster import DEV_CONFIG, dev_layout_on_free_ports

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


def readme_block(first_line: str) -> str:
    """The README's python code block that starts with ``first_line``."""
    text = (PROJECT_ROOT / "README.md").read_text()
    m = re.search(r"```python\n(" + re.escape(first_line) + r"\n.*?)```", text, re.S)
    assert m, f"no python block starting {first_line!r} in the README"
    return m.group(1)


def readme_conftest() -> str:
    """The README's conftest.py block, with ``RMQ`` pointing at this checkout."""
    code, n = re.subn(
        r"^RMQ = .*$",
        f"RMQ = {str(PROJECT_ROOT / 'bin' / 'rmq-container')!r}",
        readme_block("# conftest.py"),
        flags=re.M,
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


async def test_the_readme_trio_example_sends_and_consumes(tmp_path: Path) -> None:
    args, ports = dev_layout_on_free_ports()
    namesrv = f"127.0.0.1:{ports[9876]}"
    code = readme_block("# a trio program: send, then consume what was sent")
    assert code.count('"127.0.0.1:9876"') == 2
    script = tmp_path / "example.py"
    script.write_text(code.replace('"127.0.0.1:9876"', repr(namesrv)))
    proc = ContainerProc("dev", DEV_CONFIG, tmp_path, args=args)
    try:
        with trio.fail_after(90):
            await proc.start()
            # the README's own readiness sign: every replica's boot line
            await wait_until(lambda: _booted(proc, 4), 20, "four broker boot lines")
            done = await trio.run_process(
                [sys.executable, str(script)],
                cwd=PROJECT_ROOT,
                env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    finally:
        await proc.kill()
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"{out}\n{done.stderr.decode(errors='replace')}"
    assert re.search(r"^SendStatus\.SEND_OK [0-9A-F]{32}$", out, re.M), out
    assert "received DemoTopic TagA b'hello'" in out, out


async def _booted(proc: ContainerProc, n: int) -> bool:
    return proc.log_text().count("boot success. serializeType=JSON and name server is") >= n
