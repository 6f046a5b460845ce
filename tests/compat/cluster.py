"""A real ``rmq-container`` subprocess for the compatibility tests.

:class:`Container` writes a TOML process file into a test directory (name server plus master broker
groups on free loopback ports), starts ``python -m container.cli -c FILE``, waits for its banner and
for every broker to be registered with the name server, and stops it with SIGTERM (clean stop,
exit code checked) or SIGKILL (crash). ``start`` again restarts it on the same data directory and
the same ports. Output goes to files in the directory (``container-N.out`` / ``.err`` per start), so
a failing test can point at the broker log.

:class:`ClientProcess` / :func:`run_client` / :class:`Clients` run one C++ client scenario
(``cpp_scenario.py``) in a fresh interpreter with a hard timeout and return its JSON report plus the
C++ client's own log: the native client runs its own threads, and a hung client must not hang
pytest. :func:`invoke`, :func:`cluster_info` and :func:`broker_config` ask the container directly
over the wire (readiness, effective config).

Everything here is synchronous and blocking on purpose (the clients are separate processes).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from remoting import fastjson
from remoting.codec import FrameDecoder, encode
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from tests.cluster.harness import free_ports

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).resolve().with_name("cpp_scenario.py")

START_DEADLINE = 30.0
STOP_DEADLINE = 15.0
RESULT_PREFIX = "SCENARIO-RESULT "

_BANNER_NAMESRV = re.compile(r"^namesrv (\S+)$", re.M)
_BANNER_BROKER = re.compile(r"^broker (\S+) (\S+) \((\w+)\)", re.M)


#: Every C++ client test module carries this (the scenarios import ``rocketmq`` in their own process).
requires_cpp_client = pytest.mark.skipif(
    importlib.util.find_spec("rocketmq") is None, reason="the rocketmq (C++ client) package is not installed"
)


class ContainerError(AssertionError):
    """The container did not start, stop or answer as expected (the message holds its output)."""


# --- ports ----------------------------------------------------------------------------------------


def free_port(*, pair: bool = False, taken: set[int] | None = None) -> int:
    """A loopback port that was free a moment ago (``pair``: ``port + 1`` too, for a broker's HA port)."""
    return free_ports(1, pairs=pair, taken=taken)[0]


# --- a blocking one-shot remoting call (for readiness checks) -------------------------------------


def invoke(addr: str, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
    """Send ``cmd`` to ``addr`` on a fresh connection and return the response."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(b"".join(bytes(part) for part in encode(cmd)))
        decoder = FrameDecoder()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            for reply in decoder.feed(chunk):
                if reply.opaque == cmd.opaque:
                    return reply
    raise ContainerError(f"no response from {addr} to request code {cmd.code}")


def cluster_info(namesrv: str) -> dict[str, Any]:
    reply = invoke(namesrv, request(RequestCode.GET_BROKER_CLUSTER_INFO))
    if reply.code != ResponseCode.SUCCESS:
        raise ContainerError(f"GET_BROKER_CLUSTER_INFO answered {reply.code} {reply.remark}")
    return fastjson.loads(reply.body_bytes)


def broker_config(addr: str) -> dict[str, str]:
    """The effective config of the broker at ``addr`` (GET_BROKER_CONFIG)."""
    reply = invoke(addr, request(RequestCode.GET_BROKER_CONFIG))
    if reply.code != ResponseCode.SUCCESS:
        raise ContainerError(f"GET_BROKER_CONFIG answered {reply.code} {reply.remark}")
    pairs = (line.partition("=") for line in reply.body_bytes.decode().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, _, v in pairs}


# --- the container --------------------------------------------------------------------------------


@dataclass
class BrokerSpec:
    """One master broker group; ``extra`` holds further ``[[broker]]`` keys (broker or store keys)."""

    name: str
    extra: dict[str, object] = field(default_factory=dict)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


class Container:
    """One ``rmq-container`` process (name server + master broker groups) under ``directory``."""

    def __init__(self, directory: Path, brokers: list[BrokerSpec], cluster: str = "CompatCluster") -> None:
        self.directory = directory
        self.cluster = cluster
        self.data_dir = directory / "data"
        self.config_path = directory / "container.toml"
        directory.mkdir(parents=True, exist_ok=True)
        self.specs = brokers
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.brokers: dict[str, str] = {}
        self._pick_ports()

    def _pick_ports(self) -> None:
        taken: set[int] = set()
        self.namesrv_port = free_port(taken=taken)
        self.broker_ports = {b.name: free_port(pair=True, taken=taken) for b in self.specs}
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self._write_config()

    def _write_config(self) -> None:
        lines = [
            "[nettyServer]",
            'bindAddress = "127.0.0.1"',
            "",
            "[namesrv]",
            f"listenPort = {self.namesrv_port}",
            'kvConfigPath = "${rmq.data.dir}/namesrv/kvConfig.json"',
            'configStorePath = "${rmq.data.dir}/namesrv/namesrv.properties"',
        ]
        for spec in self.specs:
            keys: dict[str, object] = {
                "brokerClusterName": self.cluster,
                "brokerName": spec.name,
                "brokerId": 0,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": "ASYNC_FLUSH",
                "listenPort": self.broker_ports[spec.name],
                "namesrvAddr": self.namesrv,
                "autoCreateTopicEnable": True,
                "autoCreateSubscriptionGroup": True,
                "storePathRootDir": f"${{rmq.data.dir}}/{spec.name}",
                "mappedFileSizeCommitLog": 8 * 1024 * 1024,
                "mappedFileSizeConsumeQueue": 6000 * 20,
                "maxHashSlotNum": 5000,
                "maxIndexNum": 20000,
            }
            keys.update(spec.extra)
            lines += ["", "[[broker]]", *(f"{k} = {_toml_value(v)}" for k, v in keys.items())]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # --- lifecycle ---

    @property
    def stdout_path(self) -> Path:
        return self.directory / f"container-{self.starts}.out"

    @property
    def stderr_path(self) -> Path:
        return self.directory / f"container-{self.starts}.err"

    def output(self) -> str:
        """stdout and the tail of stderr (the process log) of the latest start, for failure messages."""
        out = self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""
        err = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return f"--- stdout ---\n{out}\n--- stderr (last 6000 chars) ---\n{err[-6000:]}"

    def log_text(self) -> str:
        """The whole process log (stderr) of every start so far."""
        parts = []
        for n in range(1, self.starts + 1):
            path = self.directory / f"container-{n}.err"
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)

    def start(self, deadline: float = START_DEADLINE) -> None:
        """Start the process and return once every broker is registered with the name server.

        The first start moves to other free ports (up to twice) if one was taken meanwhile; a restart
        keeps the ports, as a restarted server would.
        """
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("container already running")
        for _ in range(2 if self.starts == 0 else 0):
            try:
                self._start_once(deadline)
                return
            except ContainerError:
                if "cannot listen" not in self.output():
                    raise
            self._pick_ports()
        self._start_once(deadline)

    def _start_once(self, deadline: float) -> None:
        self.starts += 1
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "container.cli",
                    "-c",
                    str(self.config_path),
                    "--data-dir",
                    str(self.data_dir),
                ],
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        end = time.monotonic() + deadline
        try:
            self._wait_banner(end)
            self._wait_registered(end)
        except BaseException:
            self.kill()
            raise

    def _wait_banner(self, end: float) -> None:
        assert self.process is not None
        while time.monotonic() < end:
            text = self.stdout_path.read_text(errors="replace")
            m = _BANNER_NAMESRV.search(text)
            brokers = {name: addr for name, addr, _role in _BANNER_BROKER.findall(text)}
            if m and len(brokers) == len(self.specs):
                if m.group(1) != self.namesrv:
                    raise ContainerError(f"name server at {m.group(1)}, expected {self.namesrv}")
                self.brokers = {
                    spec.name: addr
                    for spec in self.specs
                    for name, addr in brokers.items()
                    if name.endswith(f"_{spec.name}_0")
                }
                return
            if self.process.poll() is not None:
                raise ContainerError(f"container exited with {self.process.returncode}\n{self.output()}")
            time.sleep(0.05)
        raise ContainerError(f"no banner within the deadline\n{self.output()}")

    def _wait_registered(self, end: float) -> None:
        want = {spec.name for spec in self.specs}
        last: object = None
        while time.monotonic() < end:
            try:
                info = cluster_info(self.namesrv)
                last = info
                registered = set(info.get("clusterAddrTable", {}).get(self.cluster, []))
                if registered >= want:
                    return
            except (OSError, ContainerError) as e:
                last = e
            time.sleep(0.05)
        raise ContainerError(f"brokers not registered in time (last: {last!r})\n{self.output()}")

    def stop(self) -> int:
        """SIGTERM and wait for the exit; returns the exit code."""
        return self._signal(signal.SIGTERM)

    def kill(self) -> int:
        """SIGKILL (a crash: nothing flushed beyond what the store already wrote)."""
        return self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> int:
        proc = self.process
        if proc is None:
            raise RuntimeError("container not started")
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_DEADLINE)
                raise ContainerError(
                    f"container ignored {signal.Signals(sig).name}\n{self.output()}"
                ) from None
        return proc.returncode

    def close(self) -> None:
        """Make sure the process is gone (fixture teardown)."""
        if self.process is not None and self.process.poll() is None:
            self.kill()


# --- client scenarios -----------------------------------------------------------------------------


class ScenarioError(AssertionError):
    """A client scenario crashed, timed out or printed no report."""


class ClientProcess:
    """One ``cpp_scenario.py`` process; :meth:`report` waits for it (bounded) and parses its report.

    ``home`` becomes the client's ``$HOME`` (the C++ client writes its log under
    ``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.0``). The process runs in its own session so a
    timeout kills it with every thread it started.
    """

    def __init__(self, spec: dict[str, Any], *, home: Path) -> None:
        self.spec = spec
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(SCENARIO)],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(spec).encode())
        self.proc.stdin.close()
        self.proc.stdin = None  # communicate() would flush the closed pipe

    def report(self, timeout: float = 60.0) -> dict[str, Any]:
        proc = self.proc
        action = self.spec.get("action")
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise ScenarioError(
                f"client scenario {action} timed out after {timeout} s\n"
                f"stdout: {out.decode(errors='replace')[-3000:]}\n"
                f"stderr: {err.decode(errors='replace')[-3000:]}\n{self.log_tail()}"
            ) from None
        text = out.decode(errors="replace")
        lines = [line[len(RESULT_PREFIX) :] for line in text.splitlines() if line.startswith(RESULT_PREFIX)]
        if not lines:
            raise ScenarioError(
                f"client scenario {action} exited {proc.returncode} without a report\n"
                f"stdout: {text[-3000:]}\nstderr: {err.decode(errors='replace')[-3000:]}\n{self.log_tail()}"
            )
        report: dict[str, Any] = json.loads(lines[-1])
        report["_stderr"] = err.decode(errors="replace")
        report["_returncode"] = proc.returncode
        return report

    def kill(self) -> None:
        """Kill the scenario and its threads if it is still running (teardown)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()

    def log(self) -> str:
        """The C++ client's own log file for this process ("" if it wrote none)."""
        path = self.home / "logs" / "rocketmq-cpp" / f"{self.proc.pid}_rocketmq-cpp.log.0"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, chars: int = 3000) -> str:
        return f"--- C++ client log (tail) ---\n{self.log()[-chars:]}"


def run_client(spec: dict[str, Any], *, home: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Run one scenario to its end (at most ``timeout`` seconds) and return its report.

    The report gets ``_log``: the C++ client's log text.
    """
    client = ClientProcess(spec, home=home)
    report = client.report(timeout)
    report["_log"] = client.log()
    return report


#: The ``make_container`` fixture's type.
MakeContainer = Callable[..., Container]


class Clients:
    """Runs C++ client scenarios in fresh processes, all with ``$HOME`` = ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.started: list[ClientProcess] = []

    def __call__(self, spec: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Run ``spec`` to its end and return the report (with ``_log``, the client's log)."""
        return run_client(spec, home=self.home, timeout=timeout)

    def start(self, spec: dict[str, Any]) -> ClientProcess:
        """Start ``spec`` in the background; call ``.report(timeout)`` on the result."""
        proc = ClientProcess(spec, home=self.home)
        self.started.append(proc)
        return proc
