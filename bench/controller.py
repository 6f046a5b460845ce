"""Controller benchmarks over real ``rmq-container`` processes (three peers of one controller group,
dev Raft timings from ``conf/controller-cluster/``: 100 ms heartbeats, 300 ms election timeout).

Cases:

- **leader kill → new leader answering** (issue #5, target ≤ 1 s): SIGKILL the leader's process and
  poll the two survivors with CONTROLLER_GET_METADATA_INFO (every few ms) until one answers
  ``isLeader=true``; then restart the killed peer on its data directory and wait until it follows
  the leader. p50 / p99 / max over :data:`KILLS` kills (baseline = the 1 s target, so ratio ≤ 1 meets it).
- **controller request throughput**: CONTROLLER_ALTER_SYNC_STATE_SET (a Raft write: the set of a
  broker set toggles between {1, 2} and {1}, epoch by epoch; 1 in flight = one broker set, 64 in
  flight = 64 broker sets) and BROKER_HEARTBEAT (answered by the peer itself) per second, from this
  process over loopback, against the same-run baseline of :mod:`bench.raft`: no-op proposals through
  a 3-node in-process Raft cluster with fsync, at the same number in flight.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

import trio

from bench.common import percentile, row
from bench.raft import cluster_proposals
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.protocol.controller import SyncStateSet
from tests.cluster.harness import ControllerCluster

log = logging.getLogger("bench.controller")

#: conf/controller-cluster/ (the dev profile)
DEV_TIMINGS = {"rmqRaftHeartbeatIntervalMillis": 100, "rmqRaftElectionTimeoutMillis": 300}
KILLS = 20
DURATION = 3.0
POLL = 0.005
TARGET_FAILOVER_S = 1.0
CLUSTER = "BenchCluster"


# --- leader kill -> new leader answering -------------------------------------------------------------


async def _first_leader_answer(
    client: RemotingClient, cluster: ControllerCluster, survivors: list[str]
) -> str:
    """Poll the survivors until one says it leads; return its id."""
    with trio.fail_after(30):
        while True:
            for nid in survivors:
                try:
                    r = await client.invoke(
                        cluster.addresses[nid], request(RequestCode.CONTROLLER_GET_METADATA_INFO), 0.5
                    )
                except RemotingError:
                    continue
                if (r.ext_fields or {}).get("isLeader") == "true":
                    return nid
            await trio.sleep(POLL)


async def leader_kills(root: Path, kills: int) -> list[float]:
    """Seconds from SIGKILL of the leader to a survivor answering as leader, per kill."""
    cluster = ControllerCluster(root, 3, group="bench-kill", controller_keys=DEV_TIMINGS)
    samples: list[float] = []
    try:
        await cluster.start()
        async with RemotingClient(connect_timeout=0.5) as client:
            for i in range(kills):
                leader = await cluster.wait_leader(client, timeout=30)
                survivors = [nid for nid in cluster.ids if nid != leader]
                started = time.perf_counter()
                cluster.procs[leader].kill_now()
                new = await _first_leader_answer(client, cluster, survivors)
                samples.append(time.perf_counter() - started)
                log.info("kill %d: %s -> %s in %.3f s", i + 1, leader, new, samples[-1])
                await cluster.procs[leader].start()
                await _rejoined(client, cluster, leader)
    finally:
        cluster.close()
    return samples


async def _rejoined(client: RemotingClient, cluster: ControllerCluster, nid: str) -> None:
    with trio.fail_after(30):
        while True:
            leader = await cluster.leader_now(client)
            if leader is not None:
                meta = await cluster.metadata(client, nid)
                if meta.leader_id == leader:
                    return
            await trio.sleep(0.02)


# --- request throughput ---------------------------------------------------------------------------------


class Leader:
    """The current leader's address, found again after "not leader"."""

    def __init__(self, client: RemotingClient, cluster: ControllerCluster) -> None:
        self.client = client
        self.cluster = cluster
        self.address = ""

    async def refresh(self) -> None:
        self.address = self.cluster.addresses[await self.cluster.wait_leader(self.client, timeout=30)]

    async def call(self, code: int, ext: dict[str, object], body: bytes | None = None) -> RemotingCommand:
        while True:
            try:
                r = await self.client.invoke(self.address, request(code, ext, body), 5.0)
            except RemotingError:
                await self.refresh()
                continue
            if r.code == ResponseCode.CONTROLLER_NOT_LEADER:
                await self.refresh()
                continue
            return r


def _broker(k: int, broker_id: int) -> str:
    # nothing listens there: the role-change notifications of the setup elections just fail
    return f"127.0.0.1:{20000 + k * 10 + broker_id}"


async def _setup_broker_set(leader: Leader, cluster: ControllerCluster, k: int) -> None:
    name = f"bench-{k}"
    names = {"clusterName": CLUSTER, "brokerName": name}
    for broker_id in (1, 2):
        addr = _broker(k, broker_id)
        r = await leader.call(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {**names, "appliedBrokerId": broker_id, "registerCheckCode": f"{addr};1"},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        for address in cluster.addresses.values():
            hb = {**names, "brokerAddr": addr, "brokerId": broker_id, "heartbeatTimeoutMills": 600_000}
            r = await leader.client.invoke(address, request(RequestCode.BROKER_HEARTBEAT, hb), 5.0)
            assert r.code == ResponseCode.SUCCESS, r.remark
        r = await leader.call(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            {**names, "brokerId": broker_id, "brokerAddress": addr, "invokeTime": 1},
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    r = await leader.call(RequestCode.CONTROLLER_ELECT_MASTER, {**names, "brokerId": 1})
    assert r.code == ResponseCode.SUCCESS, r.remark


async def _alter_loop(
    leader: Leader, k: int, deadline: float, counts: list[int], epochs: dict[int, int]
) -> None:
    """Toggle set ``k`` between {1, 2} and {1}; ``epochs[k]`` is its SyncStateSet epoch (1 after the
    election; odd epochs have {1})."""
    name = f"bench-{k}"
    epoch = epochs.get(k, 1)
    while trio.current_time() < deadline:
        wide = epoch % 2 == 1
        members = frozenset({1, 2}) if wide else frozenset({1})
        body = SyncStateSet(syncStateSet=members, syncStateSetEpoch=epoch).encode()
        ext = {"brokerName": name, "masterBrokerId": 1, "masterEpoch": 1, "invokeTime": 1}
        r = await leader.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, ext, body)
        if r.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"alter SyncStateSet of {name} failed: {r.code} {r.remark}")
        epoch = int((r.ext_fields or {})["newSyncStateSetEpoch"])
        epochs[k] = epoch
        counts[0] += 1


async def _heartbeat_loop(
    leader: Leader, k: int, deadline: float, counts: list[int], epochs: dict[int, int]
) -> None:
    hb = {
        "clusterName": CLUSTER,
        "brokerName": f"bench-{k}",
        "brokerAddr": _broker(k, 1),
        "brokerId": 1,
        "heartbeatTimeoutMills": 600_000,
    }
    while trio.current_time() < deadline:
        r = await leader.client.invoke(leader.address, request(RequestCode.BROKER_HEARTBEAT, hb), 5.0)
        if r.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"heartbeat failed: {r.code} {r.remark}")
        counts[0] += 1


async def request_rates(
    root: Path, in_flight: tuple[int, ...], duration: float
) -> dict[tuple[str, int], float]:
    """(kind, in flight) → requests/s, for kind in alter / heartbeat."""
    cluster = ControllerCluster(root, 3, group="bench-rate", controller_keys=DEV_TIMINGS)
    rates: dict[tuple[str, int], float] = {}
    try:
        await cluster.start()
        async with RemotingClient(connect_timeout=1.0) as client:
            leader = Leader(client, cluster)
            await leader.refresh()
            sets = max(in_flight)
            async with trio.open_nursery() as nursery:
                for k in range(sets):
                    nursery.start_soon(_setup_broker_set, leader, cluster, k)
            epochs: dict[int, int] = {}
            for kind, loop in (("alter", _alter_loop), ("heartbeat", _heartbeat_loop)):
                for n in in_flight:
                    counts = [0]
                    deadline = trio.current_time() + duration
                    started = time.perf_counter()
                    async with trio.open_nursery() as nursery:
                        for k in range(n):
                            nursery.start_soon(loop, leader, k, deadline, counts, epochs)
                    rates[(kind, n)] = counts[0] / (time.perf_counter() - started)
    finally:
        cluster.close()
    return rates


# --- run ------------------------------------------------------------------------------------------------


def run() -> list[dict]:
    in_flight = (1, 64)
    with tempfile.TemporaryDirectory(prefix="bench-controller-") as tmp:
        root = Path(tmp)
        samples = trio.run(leader_kills, root / "kills", KILLS)
        baseline_before = {
            n: trio.run(cluster_proposals, root / f"raft-a{n}", n, DURATION) for n in in_flight
        }
        rates = trio.run(request_rates, root / "rates", in_flight, DURATION)
        baseline_after = {n: trio.run(cluster_proposals, root / f"raft-b{n}", n, DURATION) for n in in_flight}
    baseline = {n: (baseline_before[n] + baseline_after[n]) / 2 for n in in_flight}
    kill_case = f"controller leader kill -> new leader answering ({len(samples)} kills, dev timings)"
    rows = [
        row(f"{kill_case}, p50", percentile(samples, 50), "s", TARGET_FAILOVER_S, 1.0),
        row(f"{kill_case}, p99", percentile(samples, 99), "s", TARGET_FAILOVER_S, 1.0),
        row(f"{kill_case}, max", max(samples), "s", TARGET_FAILOVER_S, 1.0),
    ]
    for n in in_flight:
        rows.append(
            row(
                f"alter SyncStateSet, {n} in flight (3 peers, vs raft no-op proposals {n} in flight)",
                rates[("alter", n)],
                "req/s",
                baseline[n],
            )
        )
    for n in in_flight:
        rows.append(
            row(
                f"broker heartbeat, {n} in flight (vs raft no-op proposals {n} in flight)",
                rates[("heartbeat", n)],
                "req/s",
                baseline[n],
            )
        )
    for n in in_flight:
        rows.append(
            row(
                f"raft no-op proposals, {n} in flight (3 nodes in-process, fsync; baseline)",
                baseline[n],
                "proposals/s",
            )
        )
    return rows
