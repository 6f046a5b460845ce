"""Repeated crashes, two processes at once among them, lose no acknowledged message.

The three-process cluster of :mod:`tests.cluster.test_failover` (name server, controller peer and one
replica of broker-a and broker-b in each process; ``allAckInSyncStateSet``). A producer with no
client-side retries sends throughout, while the test SIGKILLs and restarts processes, one round
after another:

* a round of one kill takes down the process holding a group's master;
* a round of two kills takes down that process and, while it is still down, a second one. The
  surviving process then holds one controller peer of three (no Raft quorum, so no election) and
  one replica of each group; the two come back one after the other, on their data.

After each round both groups must have a master and all three replicas in sync again, and sends
must succeed. At the end every replica's commit log equals its master's, byte for byte, and every
acknowledged message is read back exactly once.

The down times come from a seeded generator (printed), so a failing run can be replayed.
"""

from __future__ import annotations

import random

import trio

from client.admin_controller import ControllerAdmin
from remoting.client import RemotingClient
from tests.cluster.harness import HarnessError, wait_until
from tests.cluster.test_failover import (
    GROUPS,
    Cluster,
    N,
    Sender,
    _logs_converge,
    assert_read_once,
    replicas,
    settled,
    start_settled,
    three_processes,  # noqa: F401 (the "cluster" fixture)
)

SEED = 20261208
#: (kills in the round, the group whose master's process is killed first)
ROUNDS = (
    (1, "broker-a"),
    (2, "broker-b"),
    (1, "broker-b"),
    (2, "broker-a"),
)
#: after a round, the time allowed for both groups to have a master and three replicas in sync
SETTLE = 60.0


async def _victim(cluster: Cluster, admin: ControllerAdmin, group: str) -> int:
    info = await replicas(admin, group)
    assert info.masterAddress is not None, f"{group} has no master before the round"
    return cluster.process_of(info.masterAddress)


async def _round(
    cluster: Cluster, admin: ControllerAdmin, sender: Sender, rnd: random.Random, kills: int, group: str
) -> str:
    first = await _victim(cluster, admin, group)
    down = [first]
    cluster.procs[first].kill_now()
    if kills == 2:
        await trio.sleep(rnd.uniform(0.2, 1.5))
        second = rnd.choice([i for i in range(N) if i != first])
        cluster.procs[second].kill_now()
        down.append(second)
    await trio.sleep(rnd.uniform(0.3, 2.5))
    for i in down:
        await cluster.procs[i].start()
        await trio.sleep(rnd.uniform(0.0, 1.0))
    for g in GROUPS:
        try:
            await wait_until(lambda g=g: settled(admin, g, N), SETTLE, f"{g}: a master and {N} in sync")
        except HarnessError as e:
            raise HarnessError(f"{e} after killing {down}\n{cluster.output()}") from None
    await sender.acked_after(len(sender.acked), 20, 20, f"sends after killing {down}")
    return f"killed p{'+p'.join(map(str, down))} ({group}'s master first)"


async def test_repeated_crashes_two_processes_at_once_lose_no_acknowledged_message(cluster: Cluster) -> None:
    rnd = random.Random(SEED)
    print(f"seed {SEED}")
    with trio.fail_after(300):
        async with RemotingClient(name="crash-test") as client:
            admin = await start_settled(cluster, client)

            sender = Sender.without_retries(cluster.namesrvs, "PG_CRASHES")
            epochs_before = {g: (await replicas(admin, g)).masterEpoch or 0 for g in GROUPS}
            async with sender.producer.instance, sender.producer, trio.open_nursery() as nursery:
                nursery.start_soon(sender.run)
                await sender.acked_after(0, 50, 20, "sends before the first kill")
                for kills, group in ROUNDS:
                    what = await _round(cluster, admin, sender, rnd, kills, group)
                    print(f"{what}: acked {len(sender.acked)}, failed {sender.failed}")
                sender.stop.set()
            # every round took a master down: each group was failed over at least twice
            for g in GROUPS:
                after = (await replicas(admin, g)).masterEpoch or 0
                assert after >= epochs_before[g] + 2, (g, epochs_before[g], after)
                await _logs_converge(cluster, admin, client, g)

            read = await assert_read_once(cluster.namesrvs, sender.acked)
            assert len(sender.acked) > 50 + 20 * len(ROUNDS)
            print(f"acked {len(sender.acked)}, failed {sender.failed}, read {read}")
