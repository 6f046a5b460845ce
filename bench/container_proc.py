"""A real ``python -m container.cli`` process for the broker benchmarks, plus blocking remoting calls.

:class:`ContainerProcess` starts the process (a given TOML file, or the default dev cluster when
``config`` is None), records when it was started, and :meth:`ContainerProcess.wait_registered`
polls the name server's GET_BROKER_CLUSTER_INFO until the expected brokers are there. Output goes
to files in the work directory so a failure can show the broker log. Stopping is SIGTERM (then
SIGKILL after a grace period).

:func:`single_broker_toml` writes the process file of one ASYNC_FLUSH master on free loopback ports.
Everything here is synchronous: the load generators and servers are separate processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT
from remoting import fastjson
from remoting.codec import FrameDecoder, encode
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request

__all__ = [
    "ContainerError",
    "ContainerProcess",
    "call",
    "cluster_brokers",
    "free_port",
    "port_taken",
    "rss_bytes",
    "single_broker_toml",
]


class ContainerError(RuntimeError):
    """The container did not start or answer as expected (the message holds its output)."""


def port_taken(port: int) -> bool:
    """True when something already listens on (or holds) 127.0.0.1:port."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_port(taken: set[int], *, pair: bool = False) -> int:
    """A loopback port free a moment ago and not in ``taken`` (``pair``: port + 1 as well)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        want = {port, port + 1} if pair else {port}
        if want & taken or (pair and (port + 1 > 65535 or port_taken(port + 1))):
            continue
        taken |= want
        return port
    raise RuntimeError("no free loopback port")


def call(addr: str, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
    """One request on a fresh blocking connection; the response with the same opaque."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(b"".join(bytes(p) for p in encode(cmd)))
        decoder = FrameDecoder()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            for reply in decoder.feed(data):
                if reply.opaque == cmd.opaque:
                    return reply
    raise ContainerError(f"no answer from {addr} to request code {cmd.code}")


def cluster_brokers(namesrv: str, cluster: str) -> set[str]:
    """Broker names the name server lists for ``cluster`` (empty when it does not answer yet)."""
    try:
        reply = call(namesrv, request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout=1.0)
    except (OSError, ContainerError):
        return set()
    if reply.code != ResponseCode.SUCCESS or not reply.body:
        return set()
    info: dict[str, Any] = fastjson.loads(reply.body_bytes)
    return set(info.get("clusterAddrTable", {}).get(cluster, []))


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS from /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ContainerError(f"no VmRSS for pid {pid}")


def family_rss_bytes(pid: int) -> int:
    """Resident set size of a process and its child processes (the container's page helper,
    store/page_helper.py): what the process costs the machine. Pages mapped by both count twice."""
    children: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
    total = rss_bytes(pid)
    for child in children:
        with contextlib.suppress(OSError, ContainerError):
            total += rss_bytes(child)
    return total


def write_bytes(pid: int) -> int:
    """Bytes a process has caused to be written to storage (``write_bytes`` of /proc/PID/io: dirtied
    pages count when dirtied, whether or not written back yet)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise ContainerError(f"no write_bytes for pid {pid}")


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def single_broker_toml(
    directory: Path, cluster: str = "BenchCluster", broker_name: str = "broker-bench", **broker_keys: object
) -> tuple[Path, str, str]:
    """Write ``container.toml`` (name server + one ASYNC_FLUSH master) into ``directory``.

    Returns (config path, name server address, broker address). ``broker_keys`` override or add
    ``[[broker]]`` keys.
    """
    taken: set[int] = set()
    ns_port = free_port(taken)
    broker_port = free_port(taken, pair=True)
    keys: dict[str, object] = {
        "brokerClusterName": cluster,
        "brokerName": broker_name,
        "brokerId": 0,
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "listenPort": broker_port,
        "brokerIP1": "127.0.0.1",
        "brokerIP2": "127.0.0.1",
        "namesrvAddr": f"127.0.0.1:{ns_port}",
        "autoCreateTopicEnable": True,
        "autoCreateSubscriptionGroup": True,
        "storePathRootDir": "${rmq.data.dir}/" + broker_name,
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "maxHashSlotNum": 500_000,
        "maxIndexNum": 2_000_000,
    }
    keys.update(broker_keys)
    lines = [
        "[nettyServer]",
        'bindAddress = "127.0.0.1"',
        "",
        "[namesrv]",
        f"listenPort = {ns_port}",
        'kvConfigPath = "${rmq.data.dir}/namesrv/kvConfig.json"',
        'configStorePath = "${rmq.data.dir}/namesrv/namesrv.properties"',
        "",
        "[[broker]]",
        *(f"{k} = {_toml(v)}" for k, v in keys.items()),
    ]
    path = directory / "container.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}"


class ContainerProcess:
    """One ``python -m container.cli`` process; use as a context manager (stops it on exit)."""

    def __init__(
        self,
        work_dir: Path,
        config: Path | None,
        *,
        data_dir: Path,
        log_level: str = "WARNING",
    ) -> None:
        self.work_dir = work_dir
        self.config = config
        self.data_dir = data_dir
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.out_path = work_dir / "container.out"
        self.err_path = work_dir / "container.err"

    def __enter__(self) -> ContainerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        args = [sys.executable, "-m", "container.cli", "--log-level", self.log_level]
        if self.config is not None:
            args += ["-c", str(self.config)]
        env = dict(os.environ)
        env["RMQ_DATA_DIR"] = str(self.data_dir)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.started_at = time.perf_counter()
            self.proc = subprocess.Popen(
                args, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )

    def output(self) -> str:
        out = self.out_path.read_text(errors="replace") if self.out_path.exists() else ""
        err = self.err_path.read_text(errors="replace") if self.err_path.exists() else ""
        return f"--- stdout ---\n{out}\n--- stderr (tail) ---\n{err[-4000:]}"

    def wait_registered(self, namesrv: str, cluster: str, brokers: set[str], timeout: float = 30.0) -> float:
        """Poll the name server every 10 ms until ``brokers`` are registered in ``cluster``;
        returns the seconds since :meth:`start`."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ContainerError(f"container exited with {self.proc.returncode}\n{self.output()}")
            if cluster_brokers(namesrv, cluster) >= brokers:
                return time.perf_counter() - self.started_at
            time.sleep(0.01)
        raise ContainerError(f"brokers {sorted(brokers)} not registered within {timeout}s\n{self.output()}")

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
