"""Real ``rmq-container`` processes for the multi-process tests (and the failover benchmarks).

Generic parts:

* :func:`free_ports` — loopback ports that were free a moment ago (``pairs`` for a broker's
  ``listenPort`` + HA port);
* :func:`toml_text` — a TOML process file from plain dicts (``[table]`` per dict, ``[[broker]]`` per
  broker dict), so a test states its keys and nothing else;
* :class:`ContainerProc` — one ``python -m container.cli -c FILE`` subprocess: start (waits for the
  banner), SIGKILL / SIGTERM, restart on the same config and data directory, output files per start
  (``<name>-<n>.out`` / ``.err``) and :meth:`ContainerProc.output` for failure messages;
* :func:`call` — one remoting request through a :class:`~remoting.client.RemotingClient`;
* :func:`wait_until` — poll an async predicate with a deadline.

Controller peers: :class:`ControllerCluster` writes one TOML file per peer of a Raft group
(``controllerDLegerPeers`` on free ports, store under each peer's data dir, fast ``rmqRaft*`` timings),
starts every peer in its own process and finds the leader the way brokers do
(CONTROLLER_GET_METADATA_INFO against the peers).

All waiting is async (trio); process control uses :mod:`subprocess` underneath, whose calls here
return at once or after a SIGKILL (milliseconds).
"""

from __future__ import annotations

import functools
import json
import random
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError

__all__ = [
    "PROJECT_ROOT",
    "ContainerProc",
    "ControllerCluster",
    "HarnessError",
    "call",
    "free_ports",
    "toml_text",
    "wait_until",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE = 30.0
STOP_DEADLINE = 15.0
BANNER_FIRST = "rmq-container started"


class HarnessError(AssertionError):
    """A process did not start, stop or answer as expected; the message carries its output."""


# --- ports and config files -----------------------------------------------------------------------


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def quiet_ports(span: int) -> int:
    """The first of ``span`` consecutive loopback ports free a moment ago, between 15000 and 32000:
    below Linux's ephemeral range, so that no client socket of a test running beside takes one of
    them before the process under test binds it (a port from ``bind(0)`` is free, its neighbour may
    be any connection's local port a moment later)."""
    rng = random.Random()
    for _ in range(500):
        first = rng.randrange(15000, 32000 - span)
        if all(_bindable(p) for p in range(first, first + span)):
            return first
    raise RuntimeError(f"no {span} consecutive free loopback ports between 15000 and 32000")


def free_ports(n: int, *, pairs: bool = False, taken: set[int] | None = None) -> list[int]:
    """``n`` loopback ports free a moment ago, distinct from each other and from ``taken`` (which is
    updated), below the ephemeral range (see :func:`quiet_ports`). With ``pairs`` each port's
    successor is free too (a broker's HA port)."""
    taken = taken if taken is not None else set()
    out: list[int] = []
    span = 2 if pairs else 1
    for _ in range(200 * n):
        if len(out) == n:
            return out
        port = quiet_ports(span)
        wanted = set(range(port, port + span))
        if wanted & taken:
            continue
        taken.update(wanted)
        out.append(port)
    raise RuntimeError("no free loopback ports found")


#: the fixed ports of the shipped layouts (conf/dev-cluster.toml, conf/failover/): name server,
#: controller, then the four brokers (each with its HA port, listenPort + 1)
DEV_PORTS = (9876, 9878, 10911, 10915, 10921, 10925)
_DEV_BROKER_PORTS = DEV_PORTS[2:]


def free_port_offset() -> int:
    """An offset for ``--port-offset`` that puts every port of :data:`DEV_PORTS` (and the brokers'
    HA ports) on loopback ports free a moment ago, between 15000 and 32000 (below Linux's
    ephemeral range, so that no client socket takes one before the process binds it)."""
    rng = random.Random()
    for _ in range(500):
        offset = rng.randrange(15000 - DEV_PORTS[0], 32000 - max(DEV_PORTS) - 1)
        wanted = [p + offset for p in DEV_PORTS] + [p + offset + 1 for p in _DEV_BROKER_PORTS]
        if all(_bindable(p) for p in wanted):
            return offset
    raise RuntimeError("no port offset with every port of the dev layout free")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def toml_text(
    tables: Mapping[str, Mapping[str, object]], brokers: Sequence[Mapping[str, object]] = ()
) -> str:
    """A process file: ``[name]`` for each entry of ``tables`` (e.g. ``nettyServer``, ``namesrv``,
    ``controller``), then one ``[[broker]]`` per broker dict."""
    lines: list[str] = []
    for name, keys in tables.items():
        lines += [f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in keys.items()), ""]
    for keys in brokers:
        lines += ["[[broker]]", *(f"{k} = {_toml_value(v)}" for k, v in keys.items()), ""]
    return "\n".join(lines)


# --- one process ----------------------------------------------------------------------------------


class ContainerProc:
    """One ``rmq-container`` subprocess for ``config`` (files in ``directory``, ``${rmq.data.dir}`` =
    ``data_dir``). :meth:`start` again after a kill restarts it on the same config and data."""

    def __init__(
        self,
        name: str,
        config: Path,
        directory: Path,
        *,
        data_dir: Path | None = None,
        args: Sequence[str] = (),
        argv_prefix: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.config = config
        self.directory = directory
        self.data_dir = data_dir if data_dir is not None else directory / f"{name}-data"
        self.args = list(args)
        #: put before the command (e.g. :meth:`tests.cluster.netlab.NetLab.argv_prefix`)
        self.argv_prefix = list(argv_prefix)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.banner: list[str] = []
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def _path(self, suffix: str, start: int | None = None) -> Path:
        return self.directory / f"{self.name}-{self.starts if start is None else start}.{suffix}"

    def output(self, tail: int = 6000) -> str:
        """stdout and the tail of stderr (the process log) of the latest start."""
        out = self._path("out").read_text(errors="replace") if self._path("out").exists() else ""
        err = self._path("err").read_text(errors="replace") if self._path("err").exists() else ""
        return f"--- {self.name} stdout ---\n{out}\n--- {self.name} stderr (tail) ---\n{err[-tail:]}"

    def log_text(self) -> str:
        """The process log (stderr) of every start so far."""
        parts = [self._path("err", n) for n in range(1, self.starts + 1)]
        return "\n".join(p.read_text(errors="replace") for p in parts if p.exists())

    def spawn(self) -> None:
        """Start the process without waiting (see :meth:`wait_ready`)."""
        if self.running:
            raise RuntimeError(f"{self.name} already running")
        self.starts += 1
        self.banner = []
        with self._path("out").open("wb") as out, self._path("err").open("wb") as err:
            self.process = subprocess.Popen(
                [
                    *self.argv_prefix,
                    sys.executable,
                    "-m",
                    "container.cli",
                    "-c",
                    str(self.config),
                    "--data-dir",
                    str(self.data_dir),
                    *self.args,
                ],
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    async def wait_ready(self, timeout: float = START_DEADLINE) -> list[str]:
        """Wait for the banner (printed once every component listens); return its lines."""
        with trio.move_on_after(timeout):
            while True:
                text = self._path("out").read_text(errors="replace")
                at = text.find(BANNER_FIRST)
                if at >= 0:
                    # the CLI writes the whole banner with one flush
                    self.banner = text[at:].splitlines()
                    return self.banner
                if not self.running:
                    code = self.process.returncode if self.process is not None else None
                    raise HarnessError(f"{self.name} exited with {code} before its banner\n{self.output()}")
                await trio.sleep(0.02)
        self.kill_now()
        raise HarnessError(f"{self.name}: no banner within {timeout}s\n{self.output()}")

    async def start(self, timeout: float = START_DEADLINE) -> list[str]:
        """Spawn and wait for the banner."""
        self.spawn()
        return await self.wait_ready(timeout)

    def kill_now(self) -> None:
        """SIGKILL and reap (a crash: only what was already written survives)."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(STOP_DEADLINE)

    async def kill(self) -> None:
        self.kill_now()

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_DEADLINE) -> int:
        """Send ``sig`` and wait for the exit; returns the exit code (SIGKILL after ``timeout``)."""
        proc = self.process
        if proc is None:
            raise RuntimeError(f"{self.name} not started")
        if proc.poll() is None:
            proc.send_signal(sig)
            with trio.move_on_after(timeout):
                while proc.poll() is None:
                    await trio.sleep(0.02)
            if proc.poll() is None:
                self.kill_now()
                raise HarnessError(f"{self.name} ignored {signal.Signals(sig).name}\n{self.output()}")
        return proc.returncode

    def close(self) -> None:
        """Make sure the process is gone (teardown)."""
        self.kill_now()


# --- requests and waiting -------------------------------------------------------------------------


async def call(
    client: RemotingClient,
    address: str,
    code: int,
    ext: Mapping[str, Any] | None = None,
    body: bytes | None = None,
    timeout: float = 3.0,
) -> RemotingCommand:
    """One request (extFields values are sent as strings); returns the response whatever its code."""
    return await client.invoke(address, request(code, dict(ext) if ext else None, body), timeout)


@asynccontextmanager
async def silent_peer() -> AsyncIterator[tuple[str, list[trio.SocketStream]]]:
    """A peer on loopback that accepts connections and reads requests but never answers (a host cut
    off by the network after the connection was made looks the same to its clients): its address
    and the connections it accepted."""
    accepted: list[trio.SocketStream] = []

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(stream)
        while await stream.receive_some(65536):
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield f"127.0.0.1:{port}", accepted
        nursery.cancel_scope.cancel()


async def wait_until(
    predicate: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 0.02
) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned); HarnessError after ``timeout``.
    Remoting errors count as "not yet"."""
    last: object = None
    with trio.move_on_after(timeout):
        while True:
            try:
                value = await predicate()
            except RemotingError as e:
                value, last = None, e
            if value:
                return value
            await trio.sleep(interval)
    raise HarnessError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")


# --- controller peers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Metadata:
    """A CONTROLLER_GET_METADATA_INFO answer."""

    address: str
    group: str | None
    leader_id: str | None
    leader_address: str | None
    is_leader: bool


#: Fast Raft timings for tests: heartbeat every 50 ms, elections after 300–600 ms of silence.
FAST_RAFT = {"rmqRaftHeartbeatIntervalMillis": 50, "rmqRaftElectionTimeoutMillis": 300}


class ControllerCluster:
    """``n`` controller peers of one Raft group, one ``rmq-container`` process each."""

    def __init__(
        self,
        directory: Path,
        n: int = 3,
        *,
        group: str = "test-group",
        controller_keys: Mapping[str, object] | None = None,
        taken: set[int] | None = None,
    ) -> None:
        self.directory = directory
        self.group = group
        ports = free_ports(n, taken=taken)
        self.ids = [f"n{i}" for i in range(n)]
        self.addresses = {nid: f"127.0.0.1:{port}" for nid, port in zip(self.ids, ports, strict=True)}
        peers = ";".join(f"{nid}-{addr}" for nid, addr in self.addresses.items())
        self.procs: dict[str, ContainerProc] = {}
        for nid in self.ids:
            keys: dict[str, object] = {
                "controllerDLegerGroup": group,
                "controllerDLegerPeers": peers,
                "controllerDLegerSelfId": nid,
                "controllerStorePath": "${rmq.data.dir}/controller",
                "configStorePath": "${rmq.data.dir}/controller.properties",
                **FAST_RAFT,
            }
            keys.update(controller_keys or {})
            path = directory / f"{nid}.toml"
            directory.mkdir(parents=True, exist_ok=True)
            path.write_text(toml_text({"nettyServer": {"bindAddress": "127.0.0.1"}, "controller": keys}))
            self.procs[nid] = ContainerProc(nid, path, directory, data_dir=directory / f"{nid}-data")

    @property
    def peer_list(self) -> str:
        """The ``-a`` argument of the admin commands: every peer, ``;``-separated."""
        return ";".join(self.addresses.values())

    async def start(self, timeout: float = START_DEADLINE) -> None:
        """Start every peer (in parallel) and wait for all banners."""
        for proc in self.procs.values():
            proc.spawn()
        for proc in self.procs.values():
            await proc.wait_ready(timeout)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.close()

    def output(self) -> str:
        return "\n".join(proc.output() for proc in self.procs.values())

    async def metadata(self, client: RemotingClient, nid: str, timeout: float = 1.0) -> Metadata:
        address = self.addresses[nid]
        r = await call(client, address, RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=timeout)
        if r.code != ResponseCode.SUCCESS:
            raise HarnessError(f"GET_METADATA_INFO at {address} answered {r.code} {r.remark}")
        ext = r.ext_fields or {}
        return Metadata(
            address,
            ext.get("group"),
            ext.get("controllerLeaderId"),
            ext.get("controllerLeaderAddress"),
            ext.get("isLeader") == "true",
        )

    async def leader_now(self, client: RemotingClient, among: Sequence[str] | None = None) -> str | None:
        """The id of the one peer (of ``among``, default: the running ones) that says it leads, when
        exactly one does and every asked peer that answers names it; else None."""
        ids = list(among) if among is not None else [n for n in self.ids if self.procs[n].running]
        answers: dict[str, Metadata] = {}
        for nid in ids:
            try:
                answers[nid] = await self.metadata(client, nid)
            except RemotingError:
                continue
        leaders = [nid for nid, m in answers.items() if m.is_leader]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        if any(m.leader_id != leader for m in answers.values()):
            return None
        return leader

    async def wait_leader(
        self, client: RemotingClient, timeout: float = 10.0, among: Sequence[str] | None = None
    ) -> str:
        """Poll until :meth:`leader_now` names a leader; return its id."""

        async def probe() -> str | None:
            return await self.leader_now(client, among)

        try:
            return await wait_until(probe, timeout, "a single controller leader")
        except HarnessError as e:
            raise HarnessError(f"{e}\n{self.output()}") from None
