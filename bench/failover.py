"""Failover benchmark (issue #5): real ``rmq-container`` processes, dev timings (``conf/dev-cluster.toml``).

Layout (five processes, so that killing one kills exactly one replica and nothing else)::

    c0: name server + controller peer n0     a1: broker-a replica
    c1: controller peer n1                    a2: broker-a replica
    c2: controller peer n2

A three-peer controller group as in production; broker-a has two replicas with
``allAckInSyncStateSet=true``. The Python remoting client (:class:`bench.failover_kit.DirectSender`) sends
continuously straight to the replicas (4 loops, each at most one send per 5 ms after a success): to the
replica that acknowledged last, else to the other one.

Cases:

- **master kill → first successful send on the new master** (target p50 ≤ 1 s, p99 ≤ 2 s): SIGKILL the
  process of broker-a's master; the time until a send is acknowledged by the other replica. Also
  informational: until the name server's route names the new master as id 0. Between kills the killed
  replica is restarted on its data and the next kill waits until it is back in the SyncStateSet. On
  loopback a SIGKILL closes the dead process's connections, and the controller acts on the closed
  channel at once (upstream's ``BrokerHousekeepingService``), without waiting for a heartbeat timeout.
- **master freeze → first successful send on the new master** (informational): SIGSTOP instead of
  SIGKILL, so no connection closes (a host that hangs or is cut off): the controller must see the
  heartbeats stop (``controllerHeartBeatTimeoutMills`` 1000 ms, scans every 200 ms). A probe sends only
  to the other replica (sends to the frozen one hang until their timeout). The frozen process is then
  SIGKILLed and restarted like a killed one.
- **controller leader kill → new leader answering** (target ≤ 1 s): measured by
  :func:`bench.controller.leader_kills` (three controller processes, SIGKILL of the leader's, survivors
  polled with CONTROLLER_GET_METADATA_INFO), re-run here so the table has same-run figures.
- **acknowledged-but-lost messages** (target 0): after all kills every acknowledged body must be
  readable from the final master (PULL_MESSAGE of every queue).

Rows with a latency target have baseline = the target, so ratio ≤ 1 meets it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
from collections import Counter
from pathlib import Path

import trio

from bench.common import percentile, row
from bench.controller import leader_kills
from bench.failover_kit import (
    DirectSender,
    FailoverCluster,
    ProcSpec,
    create_topic,
    read_all,
    replicas,
    route_master,
    wait_settled,
)
from client.admin_controller import ControllerAdmin
from remoting.client import RemotingClient
from remoting.errors import RemotingError

log = logging.getLogger("bench.failover")

KILLS = 20
FREEZES = 20
GROUP = "broker-a"
TOPIC = "BenchFailoverTopic"
QUEUES = 4
TARGET_P50_S = 1.0
TARGET_P99_S = 2.0
TARGET_LEADER_S = 1.0
#: a failover that has not happened after this is an error, not a sample
FAILOVER_DEADLINE = 30.0

LAYOUT = [
    ProcSpec("c0", namesrv=True, controller=True),
    ProcSpec("c1", controller=True),
    ProcSpec("c2", controller=True),
    ProcSpec("a1", groups=(GROUP,)),
    ProcSpec("a2", groups=(GROUP,)),
]


class Samples:
    """Per failover: seconds from the kill (or freeze) to each event; the loss count at the end."""

    def __init__(self) -> None:
        self.send: dict[str, list[float]] = {"kill": [], "freeze": []}
        self.route: dict[str, list[float]] = {"kill": [], "freeze": []}
        self.elected: dict[str, list[float]] = {"kill": [], "freeze": []}
        self.acked = 0
        self.lost = 0
        self.twice = 0


async def _route_after(client: RemotingClient, namesrv: str, new: str, t0: float) -> float:
    """Seconds from ``t0`` until the name server routes id 0 of broker-a to ``new``."""
    with trio.fail_after(FAILOVER_DEADLINE):
        while True:
            try:
                if await route_master(client, namesrv, TOPIC, GROUP) == new:
                    return trio.current_time() - t0
            except RemotingError:
                pass
            await trio.sleep(0.005)


async def _one_failover(
    cluster: FailoverCluster,
    admin: ControllerAdmin,
    client: RemotingClient,
    sender: DirectSender,
    samples: Samples,
    mode: str,
) -> list[bytes]:
    """One failover of broker-a's master by SIGKILL (``mode="kill"``) or SIGSTOP (``"freeze"``: no
    connection closes, the controller must notice the missing heartbeats); then the replica is
    restarted. Returns the bodies the freeze probe got acknowledged."""
    info = await wait_settled(admin, GROUP, 2, 60)
    master = info.masterAddress
    assert master is not None
    new = next(a for a in cluster.replica_addrs(GROUP) if a != master)
    await sender.wait_acked(20, 10, at=master, after=trio.current_time())
    victim = cluster.procs[cluster.process_of(master)]
    # While the master is frozen, sends to it hang until their timeout: a probe sends to the other
    # replica only (every 5 ms), so the first acknowledged send there is seen at once.
    probe = DirectSender(client, [new], TOPIC, queues=QUEUES, prefix=f"probe{len(samples.send[mode])}")
    t0 = trio.current_time()
    if mode == "kill":
        victim.kill_now()
    else:
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGSTOP)

    async def first_send() -> None:
        watched = sender if mode == "kill" else probe
        with trio.fail_after(FAILOVER_DEADLINE):
            while (ack := watched.first_ack_after(t0, not_at=master)) is None:
                await watched.wait_acked(1, FAILOVER_DEADLINE, at=new, after=t0)
        samples.send[mode].append(ack.at - t0)

    async def elected() -> None:
        with trio.fail_after(FAILOVER_DEADLINE):
            while (await replicas(admin, GROUP)).masterAddress != new:
                await trio.sleep(0.005)
        samples.elected[mode].append(trio.current_time() - t0)

    async def routed() -> None:
        samples.route[mode].append(await _route_after(client, cluster.namesrvs.split(";")[0], new, t0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first_send)
        nursery.start_soon(elected)
        nursery.start_soon(routed)
        if mode == "freeze":
            stop_probe = trio.Event()
            nursery.start_soon(probe.run, stop_probe)
            await probe.wait_acked(1, FAILOVER_DEADLINE, after=t0)
            stop_probe.set()
    log.info(
        "%s %d (%s): first send on %s after %.3f s, elected %.3f s, routed %.3f s",
        mode,
        len(samples.send[mode]),
        victim.name,
        new,
        samples.send[mode][-1],
        samples.elected[mode][-1],
        samples.route[mode][-1],
    )
    victim.kill_now()  # a frozen one too (SIGKILL ends a stopped process)
    await victim.start()
    return [a.body for a in probe.acked]


async def master_failovers(root: Path, kills: int, freezes: int) -> Samples:
    cluster = FailoverCluster(root, LAYOUT, cluster="BenchFailover")
    samples = Samples()
    try:
        await cluster.start()
        async with RemotingClient(name="bench.failover", connect_timeout=1.0) as client:
            admin = ControllerAdmin(client, cluster.controllers, timeout=5.0)
            await wait_settled(admin, GROUP, 2, 60)
            await create_topic(client, cluster.replica_addrs(GROUP), TOPIC, QUEUES)
            sender = DirectSender(
                client, cluster.replica_addrs(GROUP), TOPIC, queues=QUEUES, pause=0.002, ok_pause=0.005
            )
            probed: list[bytes] = []
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender.run, stop, 4)
                for mode in ["kill"] * kills + ["freeze"] * freezes:
                    probed += await _one_failover(cluster, admin, client, sender, samples, mode)
                # the last restarted replica rejoins before the count, so it is a full group again
                await wait_settled(admin, GROUP, 2, 60)
                stop.set()
            final = (await replicas(admin, GROUP)).masterAddress
            assert final is not None
            acked = [a.body for a in sender.acked] + probed
            stored: Counter[bytes] = Counter()
            with trio.move_on_after(10):  # the last acknowledged ones may still be dispatching
                while True:
                    stored = Counter(await read_all(client, final, TOPIC, QUEUES))
                    if all(stored[b] for b in acked):
                        break
                    await trio.sleep(0.2)
            samples.acked = len(acked)
            samples.lost = sum(1 for b in acked if not stored[b])
            samples.twice = sum(1 for n in stored.values() if n > 1)
            log.info(
                "acked %d, lost %d, stored twice %d, attempts %d, failures %s",
                samples.acked,
                samples.lost,
                samples.twice,
                sender.attempts,
                dict(sender.failures),
            )
    except BaseException:
        print(cluster.output())
        _keep_logs(root)
        raise
    finally:
        cluster.close()
    return samples


def _keep_logs(root: Path) -> None:
    """Copy the processes' logs of a failed run to bench/results/failover-logs/ (the run's directory
    is temporary)."""
    keep = Path(__file__).resolve().parent / "results" / "failover-logs"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    for path in [*root.glob("*.out"), *root.glob("*.err"), *root.glob("*.toml")]:
        shutil.copy(path, keep / path.name)
    print(f"process logs kept in {keep}")


def run() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        root = Path(tmp)
        s = trio.run(master_failovers, root / "master", KILLS, FREEZES)
        leader = trio.run(leader_kills, root / "leader", KILLS)
    rows = []
    for mode, what in (("kill", "master kill (SIGKILL)"), ("freeze", "master freeze (SIGSTOP)")):
        n = len(s.send[mode])
        target = mode == "kill"
        case = f"{what} -> first successful send on the new master ({n}x, dev timings)"
        rows += [
            row(f"{case}, p50", percentile(s.send[mode], 50), "s", TARGET_P50_S, 1.0 if target else None),
            row(f"{case}, p99", percentile(s.send[mode], 99), "s", TARGET_P99_S, 1.0 if target else None),
            row(f"{case}, max", max(s.send[mode]), "s", TARGET_P99_S),
            row(f"{what} -> controller names the new master, p50", percentile(s.elected[mode], 50), "s"),
            row(f"{what} -> name server routes the new master, p50", percentile(s.route[mode], 50), "s"),
            row(f"{what} -> name server routes the new master, p99", percentile(s.route[mode], 99), "s"),
        ]
    lead = f"controller leader kill -> new leader answering ({len(leader)}x, bench.controller)"
    rows += [
        row(f"{lead}, p50", percentile(leader, 50), "s", TARGET_LEADER_S, 1.0),
        row(f"{lead}, p99", percentile(leader, 99), "s", TARGET_LEADER_S, 1.0),
        row(f"{lead}, max", max(leader), "s", TARGET_LEADER_S, 1.0),
        row(
            f"acknowledged-but-lost messages over all {KILLS + FREEZES} master failovers (target 0)",
            s.lost,
            "messages",
        ),
        row(f"acknowledged sends over the run (stored twice: {s.twice})", s.acked, "messages"),
    ]
    return rows
