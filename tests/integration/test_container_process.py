"""The rmq-container process: started as a subprocess from .properties and TOML files, queried over
the wire, stopped with SIGTERM/SIGINT; plus in-process lifecycle checks of ContainerProcess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from container.config import ProcessConfig, load_process_config
from container.config_fields import PROJECT_ROOT
from container.process import (
    ComponentFactory,
    ContainerProcess,
    HostedComponent,
    ProcessContext,
    StartupError,
    run_process,
    start_brokers,
    start_controller,
    start_namesrv,
)
from namesrv.config import NamesrvConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.connection import ProcessorTable
from store.errors import StoreOpenError
from tests.cluster.harness import quiet_ports

BANNER_NAMESRV = re.compile(rb"^namesrv (127\.0\.0\.1:\d+)$", re.M)
STOP_DEADLINE = 10.0


class Proc:
    """A running ``python -m container.cli`` with its output collected."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stdout = b""
        self.stderr = b""

    async def read_until(self, pattern: re.Pattern[bytes], timeout: float = 15.0) -> re.Match[bytes]:
        assert self.process.stdout is not None
        with trio.move_on_after(timeout):
            while not (m := pattern.search(self.stdout)):
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    break
                self.stdout += chunk
            if m:
                return m
        self.process.kill()
        raise AssertionError(
            f"no {pattern.pattern!r} in stdout {self.stdout!r}; stderr {await self.drain_stderr()!r}"
        )

    async def drain_stderr(self) -> bytes:
        assert self.process.stderr is not None
        with trio.move_on_after(2):
            while chunk := await self.process.stderr.receive_some():
                self.stderr += chunk
        return self.stderr

    async def stop(self, sig: int) -> int:
        self.process.send_signal(sig)
        assert self.process.stdout is not None
        with trio.fail_after(STOP_DEADLINE):
            while chunk := await self.process.stdout.receive_some():
                self.stdout += chunk
            await self.drain_stderr()
            return await self.process.wait()


async def start(config: Path, *extra: str) -> Proc:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "container.cli", "-c", str(config), *extra],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return Proc(process)


async def cluster_info(addr: str) -> dict[str, object]:
    async with RemotingClient() as client:
        response = await client.invoke(addr, request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout=5.0)
    assert response.code == ResponseCode.SUCCESS
    return json.loads(response.body_bytes)


async def put_kv(addr: str, namespace: str, key: str, value: str) -> None:
    async with RemotingClient() as client:
        cmd = request(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})
        response = await client.invoke(addr, cmd, timeout=5.0)
    assert response.code == ResponseCode.SUCCESS


async def test_namesrv_from_properties_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(
        "# a name server on an ephemeral port\nlistenPort=0\nbindAddress=127.0.0.1\n"
        f"kvConfigPath={tmp_path}/kv/kvConfig.json\nconfigStorePath={tmp_path}/kv/namesrv.properties\n"
    )
    proc = await start(conf)
    addr = (await proc.read_until(BANNER_NAMESRV)).group(1).decode()
    info = await cluster_info(addr)
    assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    await put_kv(addr, "ORDER_TOPIC_CONFIG", "T1", "broker-a:4")
    assert await proc.stop(signal.SIGTERM) == 0
    assert b"rmq-container stopped" in proc.stderr
    assert json.loads((tmp_path / "kv" / "kvConfig.json").read_text())["configTable"] == {
        "ORDER_TOPIC_CONFIG": {"T1": "broker-a:4"}
    }


def _namesrv_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(f"listenPort=0\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path}/kv/kvConfig.json\n")
    return conf


async def test_sighup_stops_cleanly_but_not_under_nohup(tmp_path: Path) -> None:
    # a closed terminal: stop as for SIGTERM (the JVM runs an upstream broker's shutdown hooks too)
    proc = await start(_namesrv_conf(tmp_path))
    await proc.read_until(BANNER_NAMESRV)
    assert await proc.stop(signal.SIGHUP) == 0
    assert b"SIGHUP received: stopping" in proc.stderr
    assert b"rmq-container stopped" in proc.stderr

    # started with nohup (SIGHUP ignored): a hangup changes nothing
    process = await trio.lowlevel.open_process(
        ["nohup", sys.executable, "-m", "container.cli", "-c", str(_namesrv_conf(tmp_path))],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    nohup = Proc(process)
    addr = (await nohup.read_until(BANNER_NAMESRV)).group(1).decode()
    process.send_signal(signal.SIGHUP)
    await trio.sleep(0.5)
    assert process.returncode is None
    assert await cluster_info(addr) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert await nohup.stop(signal.SIGTERM) == 0
    assert b"SIGHUP" not in nohup.stderr


async def test_process_from_toml_serves_and_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    conf = tmp_path / "process.toml"
    conf.write_text(
        "[nettyServer]\nbindAddress = '127.0.0.1'\n"
        "[namesrv]\nlistenPort = 0\nkvConfigPath = '${rmq.data.dir}/namesrv/kvConfig.json'\n"
    )
    proc = await start(conf, "--data-dir", str(tmp_path / "data"))
    addr = (await proc.read_until(BANNER_NAMESRV)).group(1).decode()
    await proc.read_until(re.compile(rb"^data " + re.escape(str(tmp_path / "data").encode()) + rb"$", re.M))
    assert await cluster_info(addr) == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert await proc.stop(signal.SIGINT) == 0
    assert proc.stdout.startswith(b"rmq-container started (pid ")


async def test_unknown_keys_exit_non_zero_listing_each(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=a\nbrokerNmae=b\nlistenProt=1\n")
    proc = await start(conf)
    with trio.fail_after(STOP_DEADLINE):
        code = await proc.process.wait()
    stderr = await proc.drain_stderr()
    assert code == 2
    assert f"{conf}:2: unknown key 'brokerNmae'".encode() in stderr
    assert f"{conf}:3: unknown key 'listenProt'".encode() in stderr


async def test_port_in_use_exits_1_naming_component_and_address(tmp_path: Path) -> None:
    taken = trio.socket.socket()
    await taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    conf = tmp_path / "p.toml"
    conf.write_text(f"[nettyServer]\nbindAddress = '127.0.0.1'\n[namesrv]\nlistenPort = {port}\n")
    try:
        proc = await start(conf, "--data-dir", str(tmp_path))
        with trio.fail_after(STOP_DEADLINE):
            code = await proc.process.wait()
    finally:
        taken.close()
    assert code == 1
    assert (
        f"namesrv: cannot listen on 127.0.0.1:{port}: Address already in use (another process listens "
        "there: to run a second copy of this layout, start it with --port-offset N)"
    ).encode() in await proc.drain_stderr()


async def test_a_second_copy_needs_its_own_data_dir_and_runs_beside_the_first_with_a_port_offset(
    tmp_path: Path,
) -> None:
    port = quiet_ports(2)  # the second copy serves on port + 1 (--port-offset 1)
    conf = tmp_path / "copy.toml"
    conf.write_text(
        f"[nettyServer]\nbindAddress = '127.0.0.1'\n[namesrv]\nlistenPort = {port}\n"
        "kvConfigPath = '${rmq.data.dir}/namesrv/kvConfig.json'\n"
    )
    data = tmp_path / "data"
    first = await start(conf, "--data-dir", str(data))
    try:
        assert (await first.read_until(BANNER_NAMESRV)).group(1).decode() == f"127.0.0.1:{port}"
        pid = first.process.pid
        # the same file on the same data directory: refused before it binds anything, naming the holder
        second = await start(conf, "--data-dir", str(data), "--port-offset", "1")
        with trio.fail_after(STOP_DEADLINE):
            assert await second.process.wait() == 1
        stderr = await second.drain_stderr()
        assert (
            f"rmq-container: data directory {data} is in use by another rmq-container running copy.toml "
            f"(pid {pid}): stop that one, or give this one its own --data-dir (or $RMQ_DATA_DIR)"
        ).encode() in stderr
        assert b"listening on" not in stderr
        # its own data directory and the offset from the environment: serves beside the first
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "container.cli", "-c", str(conf), "--data-dir", str(tmp_path / "other")],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "RMQ_PORT_OFFSET": "1"},
        )
        third = Proc(process)
        try:
            assert (await third.read_until(BANNER_NAMESRV)).group(1).decode() == f"127.0.0.1:{port + 1}"
            await put_kv(f"127.0.0.1:{port + 1}", "ORDER_TOPIC_CONFIG", "T3", "broker-a:4")
            assert await cluster_info(f"127.0.0.1:{port}") == {"brokerAddrTable": {}, "clusterAddrTable": {}}
        finally:
            assert await third.stop(signal.SIGTERM) == 0
        assert (tmp_path / "other" / "namesrv" / "kvConfig.json").exists()
        assert not (data / "namesrv" / "kvConfig.json").exists()
    finally:
        assert await first.stop(signal.SIGTERM) == 0
    # the lock went with the process: the same file starts again on the data directory
    again = await start(conf, "--data-dir", str(data))
    await again.read_until(BANNER_NAMESRV)
    assert await again.stop(signal.SIGTERM) == 0


async def test_a_store_directory_that_cannot_be_made_exits_1_with_one_line(tmp_path: Path) -> None:
    # a data directory on a read-only file system or without permission ends the same way; a
    # path through a file is the one every user of the suite can make
    (tmp_path / "afile").write_text("not a directory")
    store = tmp_path / "afile" / "store"
    conf = tmp_path / "b.properties"
    conf.write_text(
        f"brokerClusterName=C\nbrokerName=x\nlistenPort=0\nnamesrvAddr=127.0.0.1:1\nstorePathRootDir={store}\n"
    )
    proc = await start(conf)
    with trio.fail_after(STOP_DEADLINE):
        code = await proc.process.wait()
    stderr = (await proc.drain_stderr()).decode()
    assert code == 1
    assert f"rmq-container: C_x_0: cannot start: Not a directory: {store}\n" in stderr
    assert "Traceback" not in stderr


def test_print_config_output_loads_back(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "container.cli", "--print-config", "--data-dir", str(tmp_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        check=True,
        timeout=30,
    )
    effective = tmp_path / "effective.toml"
    effective.write_bytes(out.stdout)
    cfg = load_process_config(effective)
    assert cfg.namesrv is not None
    assert [b.broker.brokerName for b in cfg.brokers] == ["broker-a", "broker-b", "broker-a", "broker-b"]
    assert cfg.brokers[0].store.storePathRootDir == str(tmp_path / "broker-a")


# --- in-process lifecycle --------------------------------------------------------------------------


class Recorder:
    """A component that records its life and, like a real one, cleans up in ``finally``."""

    def __init__(self, name: str, events: list[str], ports: list[int]) -> None:
        self.name = name
        self.events = events
        self.ports = ports

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.events.append(f"{self.name} started")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                accepting = await self.accepting()
            self.events.append(f"{self.name} stopped (port accepting: {accepting})")

    async def accepting(self) -> bool:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", self.ports[0])
        except OSError:
            return False
        await stream.aclose()
        return True

    def on_stop(self) -> None:
        self.events.append(f"{self.name} told")

    async def before_stop(self) -> None:
        self.events.append(f"{self.name} before stop (port accepting: {await self.accepting()})")


def _config() -> ProcessConfig:
    cfg = ProcessConfig(source="test")
    cfg.nettyServer.bindAddress = "127.0.0.1"
    return cfg


def _recorders(events: list[str], ports: list[int], *, hooks: bool = False) -> ComponentFactory:
    """A factory of two :class:`Recorder` components "a" and "b" on one listener (its port goes to
    ``ports``); with ``hooks`` they also take ``on_stop`` / ``before_stop``."""

    async def factory(ctx: ProcessContext) -> list[HostedComponent]:
        listener = await ctx.listen(0, ProcessorTable(), name="fake")
        ports.append(listener.port)
        hosted = []
        for name in ("a", "b"):
            r = Recorder(name, events, ports)
            hosted.append(
                HostedComponent(
                    name,
                    r,
                    [f"{name} {listener.address}"],
                    on_stop=r.on_stop if hooks else None,
                    before_stop=r.before_stop if hooks else None,
                )
            )
        return hosted

    return factory


async def test_components_start_in_order_and_stop_after_the_transport() -> None:
    events: list[str] = []
    ports: list[int] = []
    process = ContainerProcess(_config(), [_recorders(events, ports)])
    async with trio.open_nursery() as nursery:
        banner = await nursery.start(process.run)
        assert banner[1:] == [f"a 127.0.0.1:{ports[0]}", f"b 127.0.0.1:{ports[0]}"]
        stream = await trio.open_tcp_stream("127.0.0.1", ports[0])  # served while running
        await stream.aclose()
        process.stop()
    assert events[:2] == ["a started", "b started"]
    # components stop after the transport: their port no longer accepts connections
    assert sorted(events[2:]) == ["a stopped (port accepting: False)", "b stopped (port accepting: False)"]


async def test_a_graceful_stop_tells_components_then_awaits_them_while_the_transport_serves() -> None:
    events: list[str] = []
    ports: list[int] = []
    process = ContainerProcess(_config(), [_recorders(events, ports, hooks=True)])
    async with trio.open_nursery() as nursery:
        await nursery.start(process.run)
        process.stop()
    assert events[2:4] == ["a told", "b told"]
    # e.g. brokers unregistering from a name server in the same process: it still serves
    assert sorted(events[4:6]) == [
        "a before stop (port accepting: True)",
        "b before stop (port accepting: True)",
    ]
    assert sorted(events[6:]) == ["a stopped (port accepting: False)", "b stopped (port accepting: False)"]


async def test_a_failing_factory_releases_ports_bound_by_earlier_ones() -> None:
    ports: list[int] = []

    async def first(ctx: ProcessContext) -> list[HostedComponent]:
        ports.append((await ctx.listen(0, ProcessorTable(), name="first")).port)
        return []

    async def second(ctx: ProcessContext) -> list[HostedComponent]:
        await ctx.listen(ports[0], ProcessorTable(), name="second")
        return []

    with pytest.raises(StartupError) as err:
        await ContainerProcess(_config(), [first, second]).run()
    assert str(err.value).startswith(f"second: cannot listen on 127.0.0.1:{ports[0]}")
    # the first listener was closed: the port can be bound again
    listeners = await trio.open_tcp_listeners(ports[0], host="127.0.0.1")
    for lst in listeners:
        await lst.aclose()


class _RefusingStore:
    def __init__(self, nested: bool) -> None:
        self.nested = nested

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        refusal = StoreOpenError("/data/commitlog holds files of 1 bytes, but mappedFileSizeCommitLog is 2")
        if not self.nested:
            raise refusal

        async def inner(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            raise refusal

        async with trio.open_nursery() as nursery:  # as a controller peer starts its Raft driver
            await nursery.start(inner)


@pytest.mark.parametrize("nested", [False, True], ids=["bare", "inside-a-nursery"])
async def test_a_store_that_refuses_to_open_is_a_startup_error_naming_the_component(nested: bool) -> None:
    ports: list[int] = []

    async def factory(ctx: ProcessContext) -> list[HostedComponent]:
        ports.append((await ctx.listen(0, ProcessorTable(), name="broker-x")).port)
        return [HostedComponent("broker-x", _RefusingStore(nested))]

    with pytest.raises(StartupError) as err:
        await ContainerProcess(_config(), [factory]).run()
    assert (
        str(err.value) == "broker-x: /data/commitlog holds files of 1 bytes, but mappedFileSizeCommitLog is 2"
    )
    listeners = await trio.open_tcp_listeners(ports[0], host="127.0.0.1")  # released
    for lst in listeners:
        await lst.aclose()


async def test_a_broker_value_the_config_checks_let_through_is_a_one_line_startup_error(
    tmp_path: Path,
) -> None:
    """A broker that refuses a value on construction (the load-time checks missed it) stops the
    process with a StartupError naming the broker and its file, not a traceback."""
    conf = tmp_path / "b.toml"
    conf.write_text(f"[[broker]]\nbrokerName = 'broker-v'\nstorePathRootDir = '{tmp_path}/store'\n")
    cfg = load_process_config(conf)
    cfg.brokers[0].store.mappedFileSizeCommitLog = -1  # past the checks, as a new key's bad value would be
    with pytest.raises(StartupError) as err:
        await ContainerProcess(cfg, [start_brokers]).run()
    assert (
        str(err.value) == f"broker DefaultCluster_broker-v_0 ({conf}:1): file size must be positive, got -1"
    )


class SlowStarter:
    """A component whose start takes until ``go`` is set (a broker loading a large store)."""

    def __init__(self) -> None:
        self.go = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.go.wait()
        task_status.started()
        await trio.sleep_forever()


async def test_the_name_server_answers_while_a_later_component_still_starts(tmp_path: Path) -> None:
    """The transport runs from the start and a component's listener accepts once it has started:
    the name server (and the controller) answered nothing while a broker loaded its store -- a
    minute for 36,000 queues."""
    cfg = _config()
    cfg.namesrv = NamesrvConfig(listenPort=0, kvConfigPath=str(tmp_path / "kv.json"))
    slow = SlowStarter()
    slow_ports: list[int] = []

    async def slow_factory(ctx: ProcessContext) -> list[HostedComponent]:
        listener = await ctx.listen(0, ProcessorTable(), name="slow")
        slow_ports.append(listener.port)
        return [HostedComponent("slow", slow, ["slow"], listeners=[listener])]

    process = ContainerProcess(cfg, [start_namesrv, slow_factory])
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        nursery.start_soon(process.run)
        with trio.fail_after(5):
            while not slow_ports:
                await trio.sleep(0.01)
        namesrv = next(lst for lst in process.server.listeners if lst.name == "namesrv")
        response = await client.invoke(
            f"127.0.0.1:{namesrv.port}", request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), timeout=2.0
        )
        assert response.code == ResponseCode.SUCCESS
        # the starting component's port takes connections (the backlog) but serves nothing yet
        slow_addr = f"127.0.0.1:{slow_ports[0]}"
        with trio.move_on_after(0.5) as waited:
            await client.invoke(slow_addr, request(RequestCode.GET_BROKER_CONFIG), timeout=5.0)
        assert waited.cancelled_caught
        slow.go.set()
        response = await client.invoke(slow_addr, request(RequestCode.GET_BROKER_CONFIG), timeout=2.0)
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED  # served: its (empty) table answers
        process.stop()


async def test_brokers_join_their_replica_groups_once_every_component_has_started(tmp_path: Path) -> None:
    """A replica that loaded its store first waits for the process's other components before it
    registers with the controller: otherwise it was elected in place of its recorded master still
    loading (a master change and epoch for a mere restart of a process with large stores)."""
    from broker.replicas_manager import State
    from tests.cluster.harness import free_ports

    ns_port, ctl_port, broker_port = free_ports(3, pairs=True)
    conf = tmp_path / "process.toml"
    conf.write_text(
        "[nettyServer]\nbindAddress = '127.0.0.1'\n"
        f"[namesrv]\nlistenPort = {ns_port}\nkvConfigPath = '${{rmq.data.dir}}/namesrv/kv.json'\n"
        f"[controller]\ncontrollerDLegerGroup = 'join'\ncontrollerDLegerPeers = 'n0-127.0.0.1:{ctl_port}'\ncontrollerDLegerSelfId = 'n0'\n"
        "controllerStorePath = '${rmq.data.dir}/controller'\nrmqRaftElectionTimeoutMillis = 300\n"
        f"[[broker]]\nbrokerName = 'broker-j'\nlistenPort = {broker_port}\nbrokerIP1 = '127.0.0.1'\n"
        f"namesrvAddr = '127.0.0.1:{ns_port}'\nstorePathRootDir = '${{rmq.data.dir}}/broker-j'\n"
        f"enableControllerMode = true\ncontrollerAddr = '127.0.0.1:{ctl_port}'\n"
    )
    cfg = load_process_config(conf, data_dir=str(tmp_path / "data"))
    slow = SlowStarter()

    async def slow_factory(ctx: ProcessContext) -> list[HostedComponent]:
        return [HostedComponent("slow", slow, ["slow"])]

    process = ContainerProcess(cfg, [start_namesrv, start_controller, start_brokers, slow_factory])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(process.run)
        with trio.fail_after(10):
            while len(process.components) < 4:
                await trio.sleep(0.01)
        broker = process.components[2].component
        assert broker.replicas_manager is not None
        with trio.fail_after(10):
            while broker.listener is None or broker.listener.held:  # started and serving
                await trio.sleep(0.01)
        await trio.sleep(1.0)  # the controller led long ago (300 ms) and answers
        assert broker.replicas_manager.state == State.INITIAL  # it has not asked to join
        slow.go.set()
        with trio.fail_after(10):
            while broker.replicas_manager.state != State.RUNNING:
                await trio.sleep(0.01)
        assert broker.replicas_manager.view.is_master
        process.stop()


async def test_run_process_stops_on_sigterm_with_exit_code_0(tmp_path: Path) -> None:
    cfg = _config()
    cfg.namesrv = NamesrvConfig(listenPort=0, kvConfigPath=str(tmp_path / "kv.json"))
    started: list[list[str]] = []

    def on_started(lines: list[str]) -> None:
        started.append(lines)
        signal.raise_signal(signal.SIGTERM)

    with trio.fail_after(STOP_DEADLINE):
        assert await run_process(cfg, on_started=on_started) == 0
    assert any(line.startswith("namesrv 127.0.0.1:") for line in started[0])


async def test_a_hosted_broker_reports_the_process_transport_config(tmp_path: Path) -> None:
    # upstream's GET_BROKER_CONFIG lists the netty server and client keys with the broker's own
    from tests.cluster.harness import free_ports

    ns_port, broker_port = free_ports(2, pairs=True)
    conf = tmp_path / "process.toml"
    conf.write_text(
        "[nettyServer]\nbindAddress = '127.0.0.1'\nserverWorkerThreads = 5\n"
        "[nettyClient]\nclientCallbackExecutorThreads = 3\n"
        f"[namesrv]\nlistenPort = {ns_port}\nkvConfigPath = '${{rmq.data.dir}}/namesrv/kvConfig.json'\n"
        f"[[broker]]\nbrokerName = 'broker-t'\nlistenPort = {broker_port}\nbrokerIP1 = '127.0.0.1'\n"
        f"namesrvAddr = '127.0.0.1:{ns_port}'\nstorePathRootDir = '${{rmq.data.dir}}/broker-t'\n"
    )
    proc = await start(conf, "--data-dir", str(tmp_path / "data"))
    await proc.read_until(re.compile(rb"^broker \S+ 127\.0\.0\.1:\d+ ", re.M))
    addr = f"127.0.0.1:{broker_port}"
    async with RemotingClient() as client:
        response = await client.invoke(addr, request(RequestCode.GET_BROKER_CONFIG), timeout=5.0)
        assert response.code == ResponseCode.SUCCESS
        props = dict(line.split("=", 1) for line in response.body_bytes.decode().splitlines())
        assert props["brokerName"] == "broker-t"
        assert props["serverWorkerThreads"] == "5"
        assert props["clientCallbackExecutorThreads"] == "3"
        assert props["bindAddress"] == "127.0.0.1"
        # an ignored transport key may be updated (shown from then on); one read at start may not
        body = b"serverWorkerThreads=7\n"
        response = await client.invoke(
            addr, request(RequestCode.UPDATE_BROKER_CONFIG, body=body), timeout=5.0
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
        response = await client.invoke(
            addr, request(RequestCode.UPDATE_BROKER_CONFIG, body=b"bindAddress=0.0.0.0\n"), timeout=5.0
        )
        assert response.code == ResponseCode.NO_PERMISSION
        response = await client.invoke(addr, request(RequestCode.GET_BROKER_CONFIG), timeout=5.0)
        props = dict(line.split("=", 1) for line in response.body_bytes.decode().splitlines())
        assert props["serverWorkerThreads"] == "7"
        assert props["bindAddress"] == "127.0.0.1"
    assert await proc.stop(signal.SIGTERM) == 0
    # records of the shared store modules name the broker they belong to (remoting.log_owner)
    assert b"[store.recovery DefaultCluster_broker-t_0] recovery done" in proc.stderr
