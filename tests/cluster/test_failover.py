"""Controller-mode failover across real ``rmq-container`` processes.

Three processes, each with a name server, one peer of a three-peer controller group and one replica of
each broker group (broker-a, broker-b: three replicas each, cross-deployed, ``allAckInSyncStateSet``).
A Python producer (``client.Producer``, no client-side retries, so nothing is sent twice) sends
continuously while

1. the process holding broker-a's master is SIGKILLed: a replica of the SyncStateSet becomes master
   with a higher epoch and sends succeed again; the killed process, restarted on its data, rejoins as
   a slave and ends with the same epoch history and commit log as the new master;
2. the process holding the controller leader (made to hold broker-a's master too) is SIGKILLed:
   another peer leads, the brokers find it, and broker-a fails over once more under the new leader.

Afterwards every acknowledged message is read back with ``client.PullConsumer`` exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from client.admin import AdminError
from client.admin_controller import ControllerAdmin
from client.instance import ClientInstance
from client.message import Message, MQBrokerError, MQClientError, PullStatus, SendStatus
from client.producer import Producer
from client.pull_consumer import PullConsumer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.errors import RemotingError
from remoting.protocol.controller import GetMetaDataResponseHeader, ReplicasInfo
from tests.cluster.harness import (
    FAST_RAFT,
    ContainerProc,
    HarnessError,
    call,
    free_ports,
    toml_text,
    wait_until,
)

CLUSTER = "FailoverCluster"
GROUPS = ("broker-a", "broker-b")
TOPIC = "FailoverTopic"
QUEUES = 2
N = 3
#: A master kill must be repaired (new master accepting sends) within this.
FAILOVER_BOUND = 10.0


class Cluster:
    """Three processes; ``ports[i]`` of process i: name server, controller, broker-a, broker-b."""

    def __init__(self, directory: Path) -> None:
        taken: set[int] = set()
        self.ns = free_ports(N, taken=taken)
        self.ctl = free_ports(N, taken=taken)
        self.brokers = {g: free_ports(N, pairs=True, taken=taken) for g in GROUPS}
        self.namesrvs = ";".join(f"127.0.0.1:{p}" for p in self.ns)
        self.controllers = ";".join(f"127.0.0.1:{p}" for p in self.ctl)
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(self.ctl))
        self.procs: list[ContainerProc] = []
        for i in range(N):
            tables = {
                "nettyServer": {"bindAddress": "127.0.0.1"},
                "namesrv": {"listenPort": self.ns[i], "kvConfigPath": "${rmq.data.dir}/namesrv/kv.json"},
                "controller": {
                    "controllerDLegerGroup": "failover",
                    "controllerDLegerPeers": peers,
                    "controllerDLegerSelfId": f"n{i}",
                    "controllerStorePath": "${rmq.data.dir}/controller",
                    "configStorePath": "${rmq.data.dir}/controller.properties",
                    "scanNotActiveBrokerInterval": 200,
                    "scanInactiveMasterInterval": 500,
                    **FAST_RAFT,
                },
            }
            brokers = [self._broker(g, i) for g in GROUPS]
            path = directory / f"p{i}.toml"
            path.write_text(toml_text(tables, brokers))
            self.procs.append(ContainerProc(f"p{i}", path, directory))

    def _broker(self, group: str, i: int) -> dict[str, object]:
        return {
            "brokerClusterName": CLUSTER,
            "brokerName": group,
            "brokerId": i,
            "listenPort": self.brokers[group][i],
            "brokerIP1": "127.0.0.1",
            "brokerIP2": "127.0.0.1",
            "namesrvAddr": self.namesrvs,
            "enableControllerMode": True,
            "controllerAddr": self.controllers,
            "allAckInSyncStateSet": True,
            "brokerHeartbeatInterval": 200,
            "controllerHeartBeatTimeoutMills": 1500,
            "syncBrokerMetadataPeriod": 500,
            "checkSyncStateSetPeriod": 500,
            "syncControllerMetadataPeriod": 1000,
            "haMaxTimeSlaveNotCatchup": 5000,
            "haSendHeartbeatInterval": 500,
            "slaveTimeout": 2000,
            "storePathRootDir": f"${{rmq.data.dir}}/{group}",
            "mappedFileSizeCommitLog": 1024 * 1024,
            "maxHashSlotNum": 1000,
            "maxIndexNum": 4000,
        }

    def process_of(self, broker_addr: str) -> int:
        port = int(broker_addr.rpartition(":")[2])
        return next(i for i in range(N) if port in (self.brokers[g][i] for g in GROUPS))

    def controller_process(self, address: str) -> int:
        return self.ctl.index(int(address.rpartition(":")[2]))

    def broker_addr(self, group: str, i: int) -> str:
        return f"127.0.0.1:{self.brokers[group][i]}"

    def output(self) -> str:
        return "\n".join(p.output() for p in self.procs)


@pytest.fixture(name="cluster")
def three_processes(tmp_path: Path) -> Iterator[Cluster]:
    """The three processes, not started; killed at the end (another module imports it too)."""
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        for p in c.procs:
            p.close()


async def replicas(admin: ControllerAdmin, group: str) -> ReplicasInfo:
    """The group's replica info from the controller leader (waiting while the peers elect one)."""
    with trio.fail_after(FAILOVER_BOUND):
        while True:
            try:
                info = await admin.get_in_sync_state_data([group])
                return info.replicasInfoTable.get(group) or ReplicasInfo()
            except (AdminError, RemotingError):
                await trio.sleep(0.05)


async def settled(admin: ControllerAdmin, group: str, members: int) -> ReplicasInfo | None:
    """The group's replica info once it has a master and ``members`` live in-sync replicas."""
    r = await replicas(admin, group)
    alive = [x for x in r.inSyncReplicas if x.alive]
    return r if r.masterBrokerId is not None and len(alive) == members else None


async def create_topic(client: RemotingClient, cluster: Cluster) -> None:
    """On every replica, so whichever becomes master has it without waiting for the slave sync."""
    for group in GROUPS:
        for i in range(N):
            r = await call(
                client,
                cluster.broker_addr(group, i),
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": QUEUES, "writeQueueNums": QUEUES,
                 "perm": 6, "topicFilterType": "SINGLE_TAG", "order": "false"},
            )  # fmt: skip
            assert r.code == ResponseCode.SUCCESS, r.remark


class Sender:
    """Sends unique bodies continuously; remembers which were acknowledged (SEND_OK)."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.acked: list[bytes] = []
        self.failed = 0
        self.stop = trio.Event()
        self.done = trio.Event()
        self._n = 0

    @classmethod
    def without_retries(cls, namesrvs: str, group: str) -> Sender:
        """A sender whose producer (group ``group``) never retries a send, so nothing is stored
        twice, and times a send out after 3 s, on a client instance of its own that polls the name
        servers every 0.5 s; enter ``producer.instance``, then ``producer``, to start them."""
        instance = ClientInstance(namesrvs, poll_name_server_interval=0.5)
        return cls(Producer(group, instance=instance, retry_times_when_send_failed=0, send_timeout=3.0))

    async def run(self) -> None:
        try:
            while not self.stop.is_set():
                body = f"m-{self._n}".encode()
                self._n += 1
                try:
                    result = await self.producer.send(Message(TOPIC, body))
                except (MQClientError, MQBrokerError, RemotingError):
                    self.failed += 1
                    await trio.sleep(0.02)
                    continue
                if result.send_status == SendStatus.SEND_OK:
                    self.acked.append(body)
                await trio.sleep(0.002)
        finally:
            self.done.set()

    async def acked_after(self, count: int, more: int, timeout: float, what: str) -> None:
        async def enough() -> bool:
            return len(self.acked) >= count + more

        await wait_until(enough, timeout, what)


async def read_everything(namesrvs: str) -> list[bytes]:
    """Every message of the topic, from every queue of both groups (pulled from the masters; a
    NO_MATCHED_MSG answer moves on to its next offset, as the upstream client does)."""
    out: list[bytes] = []
    instance = ClientInstance(namesrvs, poll_name_server_interval=0.5)
    async with instance, PullConsumer("CG_FAILOVER_CHECK", instance=instance) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(TOPIC):
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset, 64)
                if result.status == PullStatus.NO_NEW_MSG or result.next_begin_offset <= offset:
                    break
                assert result.status != PullStatus.OFFSET_ILLEGAL, (mq, offset, result)
                out += [m.body for m in result.messages]
                offset = result.next_begin_offset
    return out


async def start_settled(cluster: Cluster, client: RemotingClient) -> ControllerAdmin:
    """Start the three processes, wait until both groups have a master and all three replicas in
    sync, and create the topic on every replica; returns the controller admin."""
    for p in cluster.procs:
        p.spawn()
    for p in cluster.procs:
        await p.wait_ready()
    admin = ControllerAdmin(client, cluster.controllers, timeout=5.0)
    for group in GROUPS:
        await wait_until(lambda g=group: settled(admin, g, N), 30, f"{group}: a master and {N} in sync")
    await create_topic(client, cluster)
    return admin


async def assert_read_once(namesrvs: str, acked: list[bytes]) -> int:
    """Read the topic back until every acknowledged body is there (10 s at most: the last ones may
    still be on their way to the consume queues); none may be missing, none stored twice. Returns
    how many messages were read."""
    got: list[bytes] = []
    counts: Counter[bytes] = Counter()
    with trio.move_on_after(10):
        while True:
            got = await read_everything(namesrvs)
            counts = Counter(got)
            if all(counts[b] for b in acked):
                break
            await trio.sleep(0.2)
    missing = [b for b in acked if counts[b] == 0]
    twice = [b for b in acked if counts[b] > 1]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    assert not twice, f"{len(twice)} acknowledged messages stored twice, e.g. {twice[:5]}"
    return len(got)


async def test_master_and_controller_leader_kills_lose_no_acknowledged_message(cluster: Cluster) -> None:
    with trio.fail_after(120):
        async with RemotingClient(name="failover-test") as client:
            admin = await start_settled(cluster, client)

            sender = Sender.without_retries(cluster.namesrvs, "PG_FAILOVER")
            async with sender.producer.instance, sender.producer, trio.open_nursery() as nursery:
                nursery.start_soon(sender.run)
                await sender.acked_after(0, 50, 20, "sends before the first kill")
                await _kill_master(cluster, admin, sender, client)
                await _kill_controller_leader(cluster, admin, sender)
                sender.stop.set()
            for group in GROUPS:
                await _logs_converge(cluster, admin, client, group)

            read = await assert_read_once(cluster.namesrvs, sender.acked)
            assert len(sender.acked) > 100
            print(f"acked {len(sender.acked)}, failed {sender.failed}, read {read}")


async def _kill_master(
    cluster: Cluster, admin: ControllerAdmin, sender: Sender, client: RemotingClient
) -> None:
    before = await replicas(admin, "broker-a")
    assert before.masterAddress is not None
    victim = cluster.process_of(before.masterAddress)
    old_sss = {r.brokerId for r in before.inSyncReplicas}
    cluster.procs[victim].kill_now()
    t0 = trio.current_time()

    async def new_master() -> ReplicasInfo | None:
        r = await replicas(admin, "broker-a")
        return r if r.masterBrokerId not in (None, before.masterBrokerId) else None

    after = await wait_until(new_master, FAILOVER_BOUND, "broker-a: a new master")
    assert after.masterBrokerId in old_sss
    assert (after.masterEpoch or 0) > (before.masterEpoch or 0)
    await sender.acked_after(len(sender.acked), 30, FAILOVER_BOUND, "sends after the master kill")
    print(f"broker-a master kill -> new master {trio.current_time() - t0:.2f}s")

    await cluster.procs[victim].start()
    old_addr = cluster.broker_addr("broker-a", victim)

    async def rejoined() -> bool:
        r = await replicas(admin, "broker-a")
        return any(x.brokerAddress == old_addr and x.alive for x in r.inSyncReplicas)

    await wait_until(rejoined, 30, "the old master back in broker-a's SyncStateSet")
    new_master = (await replicas(admin, "broker-a")).masterAddress
    assert new_master is not None

    seen: list[object] = []

    async def same_history() -> bool:
        mine, _ = await _epochs(client, old_addr)
        theirs, _ = await _epochs(client, new_master)
        seen[:] = [mine, theirs]
        return mine == theirs

    try:
        await wait_until(same_history, 20, "the rejoined replica's epoch history equal to the new master's")
    except HarnessError as e:
        raise HarnessError(f"{e}: rejoined {seen[0]}, master {seen[1]}\n{cluster.output()}") from None


async def _epochs(client: RemotingClient, addr: str) -> tuple[list[tuple[int, int]], int]:
    from remoting.protocol.controller import EpochEntryCache

    r = await call(client, addr, RequestCode.GET_BROKER_EPOCH_CACHE)
    assert r.code == ResponseCode.SUCCESS, r.remark
    cache = EpochEntryCache.decode(r.body_bytes)
    return [(e.epoch, e.startOffset) for e in cache.epochList], cache.maxOffset


async def _kill_controller_leader(cluster: Cluster, admin: ControllerAdmin, sender: Sender) -> None:
    leader = cluster.controller_process(await admin.leader_address())
    # Put broker-a's master in the leader's process, so that killing it needs a failover that only
    # a newly elected controller leader can carry out.
    target = cluster.broker_addr("broker-a", leader)
    info = await replicas(admin, "broker-a")
    target_id = next(r.brokerId for r in info.inSyncReplicas if r.brokerAddress == target)
    if info.masterAddress != target:
        assert target_id is not None
        await admin.elect_master(CLUSTER, "broker-a", target_id)

        async def moved() -> bool:
            return (await replicas(admin, "broker-a")).masterAddress == target

        await wait_until(moved, 10, "broker-a's master moved to the controller leader's process")
    # an election leaves the new master alone in the SyncStateSet: wait until the others rejoin it
    await wait_until(lambda: settled(admin, "broker-a", N), 20, "broker-a: 3 in sync again")
    await sender.acked_after(len(sender.acked), 20, FAILOVER_BOUND, "sends to the moved master")
    before = await replicas(admin, "broker-a")
    cluster.procs[leader].kill_now()
    survivors = [i for i in range(N) if i != leader]

    metas: dict[int, object] = {}

    async def new_leader() -> str | None:
        for i in survivors:
            metas[i] = await admin.get_metadata(f"127.0.0.1:{cluster.ctl[i]}")
        meta = metas[survivors[0]]
        assert isinstance(meta, GetMetaDataResponseHeader)
        if (
            meta.controllerLeaderAddress
            and cluster.controller_process(meta.controllerLeaderAddress) != leader
        ):
            return meta.controllerLeaderAddress
        return None

    try:
        await wait_until(new_leader, FAILOVER_BOUND, "a new controller leader")
    except HarnessError as e:
        raise HarnessError(f"{e}: killed p{leader}, metadata {metas}\n{cluster.output()}") from None

    last: list[ReplicasInfo] = []

    async def new_master() -> ReplicasInfo | None:
        r = await replicas(admin, "broker-a")
        last[:] = [r]
        return r if r.masterAddress not in (None, target) else None

    try:
        after = await wait_until(new_master, FAILOVER_BOUND, "broker-a: a new master under the new leader")
    except HarnessError as e:
        raise HarnessError(f"{e}: killed p{leader}, broker-a {last}\n{cluster.output()}") from None
    print(
        f"leader p{leader} killed; broker-a {before.masterBrokerId}@{before.masterEpoch} -> {after.masterBrokerId}@{after.masterEpoch}"
    )
    assert (after.masterEpoch or 0) > (before.masterEpoch or 0)
    await sender.acked_after(len(sender.acked), 30, FAILOVER_BOUND, "sends after the leader kill")


async def _logs_converge(
    cluster: Cluster, admin: ControllerAdmin, client: RemotingClient, group: str
) -> None:
    """Once sends stopped, every running replica of ``group`` holds the master's commit log byte for
    byte (a rejoined old master truncated whatever it had that the group did not keep)."""
    master = (await replicas(admin, group)).masterAddress
    assert master is not None
    _, end = await _epochs(client, master)
    root = {i: cluster.procs[i].data_dir / group / "commitlog" for i in range(N)}
    expected = _commit_log(root[cluster.process_of(master)], end)
    for i in range(N):
        if not cluster.procs[i].running:
            continue
        addr = cluster.broker_addr(group, i)

        async def caught_up(addr: str = addr) -> bool:
            return (await _epochs(client, addr))[1] == end

        await wait_until(caught_up, 10, f"{group} replica {addr} at the master's max offset {end}")
        assert _commit_log(root[i], end) == expected, f"{group} replica {addr} differs from the master"


def _commit_log(directory: Path, end: int) -> bytes:
    out = bytearray()
    for path in sorted(directory.iterdir()):
        start = int(path.name)
        if start < end:
            out += path.read_bytes()[: end - start]
    return bytes(out)
