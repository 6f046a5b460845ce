"""Controller failover across real processes: three ``rmq-container`` processes, each one peer of a
controller group. The leader is SIGKILLed; another peer leads within a bound and still knows the
broker sets; the killed peer, restarted on its data directory, rejoins as a follower with its Raft
log; ``rmq-admin`` controller commands work against the group throughout (following the leader).

The broker set is a fake one registered through the controller API (apply id, heartbeat, register)
by the test's own remoting client, so the test depends on the controller only."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.protocol.controller import SyncStateSet
from tests.cluster.harness import PROJECT_ROOT, ControllerCluster, free_ports

C, B = "FailoverCluster", "broker-f"
#: After a SIGKILL of the leader another peer must lead within this (election timeout 300–600 ms).
FAILOVER_BOUND = 5.0
_RAFT_STARTED = re.compile(r"raft started at term (\d+), log (\d+)\.\.(\d+), commit (\d+)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    group = ControllerCluster(tmp_path, 3, group="failover")
    try:
        yield group
    finally:
        group.close()


async def rmq_admin(*args: str) -> str:
    """Run ``rmq-admin`` (``python -m client.admin_cli``); return stdout, fail on a non-zero exit."""
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "client.admin_cli", *args],
            cwd=PROJECT_ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"rmq-admin {args} exited {done.returncode}\nstdout: {out}\nstderr: {err}"
    return out


async def leader_call(
    client: RemotingClient,
    cluster: ControllerCluster,
    code: int,
    ext: dict[str, object] | None = None,
    body: bytes | None = None,
) -> RemotingCommand:
    """Send to the current leader like a broker would; find it again after "not leader"."""
    with trio.fail_after(15):
        while True:
            leader = await cluster.wait_leader(client)
            try:
                r = await client.invoke(cluster.addresses[leader], request(code, ext, body), 3.0)
            except RemotingError:
                continue
            if r.code not in (ResponseCode.CONTROLLER_NOT_LEADER, ResponseCode.SYSTEM_ERROR):
                return r
            await trio.sleep(0.05)


async def register_broker_set(
    client: RemotingClient, cluster: ControllerCluster, brokers: dict[int, str]
) -> None:
    """Apply ids, heartbeat to every peer (brokers do), register each replica."""
    for broker_id, addr in brokers.items():
        r = await leader_call(
            client,
            cluster,
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {
                "clusterName": C,
                "brokerName": B,
                "appliedBrokerId": broker_id,
                "registerCheckCode": f"{addr};1",
            },
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    for address in cluster.addresses.values():
        for broker_id, addr in brokers.items():
            hb = {
                "clusterName": C,
                "brokerName": B,
                "brokerAddr": addr,
                "brokerId": broker_id,
                "heartbeatTimeoutMills": 120_000,
                "epoch": 0,
                "maxOffset": 0,
            }
            r = await client.invoke(address, request(RequestCode.BROKER_HEARTBEAT, hb), 3.0)
            assert r.code == ResponseCode.SUCCESS, r.remark
    for broker_id, addr in brokers.items():
        reg = {
            "clusterName": C,
            "brokerName": B,
            "brokerId": broker_id,
            "brokerAddress": addr,
            "invokeTime": 1,
        }
        r = await leader_call(client, cluster, RequestCode.CONTROLLER_REGISTER_BROKER, reg)
        assert r.code == ResponseCode.SUCCESS, r.remark


async def test_leader_kill_another_peer_leads_and_the_killed_one_rejoins(cluster: ControllerCluster) -> None:
    p1, p2 = free_ports(2)  # nothing listens there: role-change notifications just fail
    brokers = {1: f"127.0.0.1:{p1}", 2: f"127.0.0.1:{p2}"}
    await cluster.start()
    async with RemotingClient() as client:
        await cluster.wait_leader(client, timeout=15)
        await register_broker_set(client, cluster, brokers)

        out = await rmq_admin("electMaster", "-a", cluster.peer_list, "-c", C, "-bn", B, "-b", "1")
        assert f"#BrokerMasterAddr\t{brokers[1]}\n" in out
        assert "#MasterEpoch\t1\n" in out
        assert f"\t#Broker\t1\t{brokers[1]}\n" in out
        assert f"\t#Broker\t2\t{brokers[2]}\n" in out

        alter = {"brokerName": B, "masterBrokerId": 1, "masterEpoch": 1, "invokeTime": 1}
        proposed = SyncStateSet(syncStateSet=frozenset({1, 2}), syncStateSetEpoch=1).encode()
        r = await leader_call(client, cluster, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, alter, proposed)
        assert r.code == ResponseCode.SUCCESS, r.remark

        out = await rmq_admin("getSyncStateSet", "-a", cluster.peer_list, "-b", B)
        assert "#MasterBrokerId\t1\n" in out
        assert "#SyncStateSetNums\t2\n" in out
        assert out.count("InSyncReplica:\tReplicaIdentity{") == 2
        assert f"brokerId=2, brokerAddress='{brokers[2]}', alive=true" in out

        # --- SIGKILL the leader's process: a survivor leads within the bound ---
        leader = await cluster.wait_leader(client)
        survivors = [nid for nid in cluster.ids if nid != leader]
        killed_at = time.perf_counter()
        await cluster.procs[leader].kill()
        new = await cluster.wait_leader(client, timeout=FAILOVER_BOUND, among=survivors)
        took = time.perf_counter() - killed_at
        assert new != leader
        assert took < FAILOVER_BOUND
        meta = await cluster.metadata(client, new)
        assert meta.is_leader
        assert (meta.leader_id, meta.leader_address, meta.group) == (new, cluster.addresses[new], "failover")

        # the new leader knows the broker set (it was replicated before the kill)
        r = await leader_call(client, cluster, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.ext_fields is not None
        assert (r.ext_fields["masterBrokerId"], r.ext_fields["masterEpoch"]) == ("1", "1")
        assert SyncStateSet.decode(r.body_bytes) == SyncStateSet(
            syncStateSet=frozenset({1, 2}), syncStateSetEpoch=2
        )

        # --- restart the killed peer on its data directory: it rejoins as a follower ---
        await cluster.procs[leader].start()

        async def rejoined() -> bool:
            m = await cluster.metadata(client, leader)
            return (
                not m.is_leader
                and m.leader_id is not None
                and m.leader_id == await cluster.wait_leader(client)
            )

        with trio.fail_after(10):
            while not await rejoined():
                await trio.sleep(0.05)
        starts = _RAFT_STARTED.findall(cluster.procs[leader].log_text())
        assert len(starts) == 2, cluster.procs[leader].log_text()[-3000:]
        term, _first, last, _commit = (int(x) for x in starts[1])
        assert term >= 1
        assert last >= 5  # leader no-op, 2 applies, election, SyncStateSet change: the log was kept

        # admin commands through a follower follow the leader
        out = await rmq_admin("electMaster", "-a", cluster.addresses[leader], "-c", C, "-bn", B, "-b", "2")
        assert f"#BrokerMasterAddr\t{brokers[2]}\n" in out
        assert "#MasterEpoch\t2\n" in out
        out = await rmq_admin("getControllerMetaData", "-a", cluster.addresses[leader])
        now = await cluster.wait_leader(client)
        assert f"#ControllerLeaderId\t{now}\n" in out
        assert f"#ControllerLeaderAddress\t{cluster.addresses[now]}\n" in out
        assert out.count("#Peer:\t") == 3
        out = await rmq_admin("getSyncStateSet", "-a", cluster.peer_list, "-b", B)
        assert "#MasterBrokerId\t2\n" in out
        assert "#SyncStateSetNums\t1\n" in out


async def test_admin_reports_unreachable_controllers(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    with trio.fail_after(30):
        done = await trio.run_process(
            [
                sys.executable,
                "-m",
                "client.admin_cli",
                "getSyncStateSet",
                "-a",
                f"127.0.0.1:{port}",
                "-b",
                B,
                "--timeout",
                "1",
            ],
            cwd=PROJECT_ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.decode().startswith("rmq-admin getSyncStateSet command failed:")
