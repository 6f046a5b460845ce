"""Where a controller peer runs inside an ``rmq-container`` process (one trio process, real sockets):
embedded next to a name server (``enableControllerInNamesrv=true``) and standalone from an upstream
controller file. Either way it serves on its own address in ``controllerDLegerPeers``, never on the
name server's port."""

from __future__ import annotations

from pathlib import Path

import trio

from container.config import load_process_config
from container.config_fields import PROJECT_ROOT
from container.process import ContainerProcess
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from tests.cluster.harness import free_ports

FAST = "rmqRaftHeartbeatIntervalMillis=50\nrmqRaftElectionTimeoutMillis=300\n"


async def ask(client: RemotingClient, address: str, code: int, ext: dict | None = None) -> RemotingCommand:
    return await client.invoke(address, request(code, ext), 3.0)


async def wait_leader(client: RemotingClient, address: str) -> dict[str, str]:
    """Poll CONTROLLER_GET_METADATA_INFO at ``address`` until it says it leads; return its header."""
    with trio.fail_after(10):
        while True:
            r = await ask(client, address, RequestCode.CONTROLLER_GET_METADATA_INFO)
            assert r.code == ResponseCode.SUCCESS, r.remark
            if (r.ext_fields or {}).get("isLeader") == "true":
                return dict(r.ext_fields or {})
            await trio.sleep(0.02)


async def test_controller_embedded_in_namesrv_serves_on_its_peer_port(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    conf = tmp_path / "namesrv.properties"
    conf.write_text(
        "listenPort=0\nbindAddress=127.0.0.1\n"
        "kvConfigPath=${rmq.data.dir}/namesrv/kvConfig.json\n"
        "enableControllerInNamesrv=true\n"
        "controllerDLegerGroup=embedded\n"
        f"controllerDLegerPeers=n0-127.0.0.1:{port}\n"
        "controllerDLegerSelfId=n0\n"
        "controllerStorePath=${rmq.data.dir}/controller\n" + FAST
    )
    config = load_process_config(conf, data_dir=str(tmp_path / "data"))
    process = ContainerProcess(config)
    controller = f"127.0.0.1:{port}"
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        banner = await nursery.start(process.run)
        namesrv = next(line.split()[1] for line in banner if line.startswith("namesrv "))
        assert f"controller n0 {controller} group embedded peers 1" in banner
        assert namesrv != controller

        meta = await wait_leader(client, controller)
        assert (meta["group"], meta["controllerLeaderId"], meta["controllerLeaderAddress"]) == (
            "embedded",
            "n0",
            controller,
        )
        assert meta["peers"] == f"n0:{controller};"
        # the name server's port is the name server's only
        r = await ask(client, namesrv, RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        r = await ask(client, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert r.code == ResponseCode.SUCCESS
        r = await ask(client, controller, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

        # a write goes through the Raft log under controllerStorePath
        names = {"clusterName": "c", "brokerName": "b"}
        r = await ask(
            client,
            controller,
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {**names, "appliedBrokerId": "1", "registerCheckCode": "127.0.0.1:1;1"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = await ask(client, controller, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, names)
        assert r.ext_fields is not None
        assert r.ext_fields["nextBrokerId"] == "2"
        store = tmp_path / "data" / "controller"
        assert store.is_dir()
        assert any(f.stat().st_size > 0 for f in store.rglob("*") if f.is_file())
        process.stop()


async def test_standalone_controller_file_starts_a_controller(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    conf = tmp_path / "controller.properties"
    conf.write_text(
        "controllerDLegerGroup=alone\n"
        f"controllerDLegerPeers=n0-127.0.0.1:{port}\n"
        "controllerDLegerSelfId=n0\n"
        "controllerStorePath=${rmq.data.dir}/controller\n"
        "bindAddress=127.0.0.1\n" + FAST
    )
    config = load_process_config(conf, data_dir=str(tmp_path))
    assert config.namesrv is None
    process = ContainerProcess(config)
    controller = f"127.0.0.1:{port}"
    async with trio.open_nursery() as nursery, RemotingClient() as client:
        banner = await nursery.start(process.run)
        assert f"controller n0 {controller} group alone peers 1" in banner
        assert not any(line.startswith("namesrv") for line in banner)
        meta = await wait_leader(client, controller)
        assert (meta["group"], meta["controllerLeaderAddress"]) == ("alone", controller)
        r = await ask(client, controller, RequestCode.GET_CONTROLLER_CONFIG)
        assert r.code == ResponseCode.SUCCESS
        assert b"controllerDLegerGroup=alone\n" in r.body_bytes
        process.stop()
    # stopped: the port is free again
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    for listener in listeners:
        await listener.aclose()


def test_shipped_controller_files_load(tmp_path: Path) -> None:
    single = load_process_config(PROJECT_ROOT / "conf" / "controller.properties", data_dir=str(tmp_path))
    assert single.controller is not None
    assert single.controller.self_address == "127.0.0.1:9878"
    assert single.controller.store_path == str(tmp_path / "controller" / "n0")

    peers = []
    for nid in ("n0", "n1", "n2"):
        cfg = load_process_config(
            PROJECT_ROOT / "conf" / "controller-cluster" / f"controller-{nid}.properties",
            data_dir=str(tmp_path),
        )
        assert cfg.controller is not None
        assert cfg.controller.controllerDLegerSelfId == nid
        assert cfg.controller.store_path == str(tmp_path / "controller" / nid)
        peers.append((cfg.controller.controllerDLegerGroup, cfg.controller.controllerDLegerPeers))
    assert len(set(peers)) == 1
