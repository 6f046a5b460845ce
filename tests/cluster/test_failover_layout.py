"""The shipped multi-process layout for failover tests (``conf/failover/``: ``core.toml`` with the
name server and the controller, ``node-1.toml`` and ``node-2.toml`` with one replica of broker-a and
one of broker-b each), moved onto free ports with ``--port-offset``, as its comments tell a user to run it: three processes; both
groups elect a master with both replicas in sync; broker-b's master moved to the other node with
``electMaster``; the node holding broker-a's master SIGKILLed; broker-a's other replica takes over and
every message acknowledged before and after the kill is read back from the new masters."""

from __future__ import annotations

from pathlib import Path

import trio

from client.admin_controller import ControllerAdmin
from remoting.client import RemotingClient
from tests.cluster.harness import PROJECT_ROOT, ContainerProc, wait_until
from tests.cluster.test_failover_dev_cluster import (
    dev_layout_on_free_ports,
    groups_ready,
    send_and_read,
)

LAYOUT = PROJECT_ROOT / "conf" / "failover"


async def test_the_shipped_failover_layout_fails_over_without_losing_an_acknowledged_message(
    tmp_path: Path,
) -> None:
    args, ports = dev_layout_on_free_ports()
    data = tmp_path / "data"  # one data directory for the three, as with the defaults
    procs = {
        name: ContainerProc(name, LAYOUT / f"{name}.toml", tmp_path, data_dir=data, args=args)
        for name in ("core", "node-1", "node-2")
    }
    namesrv, controller = f"127.0.0.1:{ports[9876]}", f"127.0.0.1:{ports[9878]}"
    node_of = {
        f"127.0.0.1:{ports[p]}": n
        for n, ps in (("node-1", (10911, 10921)), ("node-2", (10915, 10925)))
        for p in ps
    }
    try:
        with trio.fail_after(150):
            for proc in procs.values():
                proc.spawn()
            for proc in procs.values():
                await proc.wait_ready()
            async with RemotingClient(name="test.failover-layout") as rc:
                admin = ControllerAdmin(rc, controller, timeout=5.0)
                await wait_until(lambda: groups_ready(admin), 30, "both groups: a master and 2 in sync")
                info = (await admin.get_in_sync_state_data(["broker-a", "broker-b"])).replicasInfoTable
                a_master, b_master = info["broker-a"].masterAddress, info["broker-b"].masterAddress
                assert a_master is not None
                assert b_master is not None
                if node_of[a_master] == node_of[b_master]:
                    # as core.toml says: broker-b's master onto the other node
                    other = next(
                        r
                        for r in info["broker-b"].inSyncReplicas
                        if node_of[r.brokerAddress] != node_of[a_master]
                    )
                    await admin.elect_master("DefaultCluster", "broker-b", other.brokerId)
                    table = (await admin.get_in_sync_state_data(["broker-b"])).replicasInfoTable
                    b_master = table["broker-b"].masterAddress
                    assert b_master is not None
                assert node_of[b_master] != node_of[a_master]

                first = [b"before-%d" % i for i in range(20)]
                assert sorted(await send_and_read(namesrv, first)) == sorted(first)
                procs[node_of[a_master]].kill_now()

                async def new_a_master() -> str | None:
                    table = (await admin.get_in_sync_state_data(["broker-a"])).replicasInfoTable
                    m = table["broker-a"].masterAddress
                    return m if m not in (None, a_master) else None

                await wait_until(new_a_master, 10, "broker-a: the other node's replica as master")
                second = [b"after-%d" % i for i in range(20)]
                got = await send_and_read(namesrv, second)
                # read back from the new masters: everything acknowledged, once
                assert sorted(got) == sorted(first + second), sorted(set(first + second) - set(got))
    finally:
        for proc in procs.values():
            proc.close()
