"""Building blocks for controller-mode failover runs over real ``rmq-container`` processes, shared by
``bench/failover.py`` and ``tests/cluster/test_failure_modes.py`` (and the C++ failover test).

* :class:`ProcSpec` / :class:`FailoverCluster` — a layout of processes, each hosting any of: a name
  server, one peer of the controller group, one replica of some broker groups (controller mode,
  ``allAckInSyncStateSet``, the dev cluster's timings from ``conf/dev-cluster.toml``). Ports are free
  loopback ports; every process is a :class:`tests.cluster.harness.ContainerProc`. With a
  :class:`tests.cluster.netlab.NetLab` of the same process names, each process runs in its own
  network namespace, on its own address, so that the lab can cut the network between them.
* :func:`replicas` / :func:`wait_settled` — a group's replica info from the controller leader.
* :class:`DirectSender` — the Python remoting client sending unique bodies straight to a group's
  replicas (SEND_MESSAGE_V2, ``WAIT=true``): first to the replica that accepted last, then to each
  other one; every acknowledged (SUCCESS) body is recorded with the replica and the time.
* :func:`read_all` — every message body of a topic's queues on one broker (PULL_MESSAGE, no suspend).
* :func:`route` / :func:`route_master` — a topic's route from a name server; the address it routes id 0
  of a group to.
* :func:`send_request` / :func:`pull_request` — the SEND_MESSAGE_V2 / PULL_MESSAGE requests used here.

Everything is trio; process control is the harness's (returns at once or after a SIGKILL).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from client.admin import AdminError
from client.admin_controller import ControllerAdmin
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.headers import decode_header, encode_header
from remoting.protocol.broker import PullMessageRequestHeader, PullMessageResponseHeader, PullSysFlag
from remoting.protocol.controller import ReplicasInfo
from remoting.protocol.message import iter_messages
from remoting.protocol.namesrv import TopicRouteData
from tests.cluster.harness import ContainerProc, call, free_ports, toml_text, wait_until

if TYPE_CHECKING:
    from tests.cluster.netlab import NetLab

__all__ = [
    "DEV_BROKER_KEYS",
    "DEV_CONTROLLER_KEYS",
    "Ack",
    "DirectSender",
    "FailoverCluster",
    "ProcSpec",
    "alive_in_sync",
    "broker_role",
    "create_topic",
    "new_master",
    "pull_request",
    "read_all",
    "replicas",
    "route",
    "route_master",
    "send_request",
    "wait_settled",
]

#: Controller-mode broker timings of the dev cluster (conf/dev-cluster.toml).
DEV_BROKER_KEYS: dict[str, object] = {
    "allAckInSyncStateSet": True,
    "brokerHeartbeatInterval": 200,
    "controllerHeartBeatTimeoutMills": 1000,
    "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000,
    "syncControllerMetadataPeriod": 2000,
    "haMaxTimeSlaveNotCatchup": 5000,
}
#: Controller timings of the dev cluster (scans) with the dev Raft timings of conf/controller-cluster/.
DEV_CONTROLLER_KEYS: dict[str, object] = {
    "scanNotActiveBrokerInterval": 200,
    "scanInactiveMasterInterval": 1000,
    "rmqRaftHeartbeatIntervalMillis": 100,
    "rmqRaftElectionTimeoutMillis": 300,
}


# --- layout -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcSpec:
    """One process: a name server, a controller peer, and one replica of each group in ``groups``."""

    name: str
    namesrv: bool = False
    controller: bool = False
    groups: tuple[str, ...] = ()


def spread_specs(groups: tuple[str, ...]) -> list[ProcSpec]:
    """``c0`` (name server + controller) and ``p1``, ``p2``, each with one replica of every group."""
    return [
        ProcSpec("c0", namesrv=True, controller=True),
        ProcSpec("p1", groups=groups),
        ProcSpec("p2", groups=groups),
    ]


class FailoverCluster:
    """The processes of ``specs`` under ``directory`` (not started; see :meth:`start`)."""

    def __init__(
        self,
        directory: Path,
        specs: Sequence[ProcSpec],
        *,
        cluster: str = "FailoverCluster",
        broker_keys: Mapping[str, object] | None = None,
        controller_keys: Mapping[str, object] | None = None,
        raft_group: str = "failover",
        net: NetLab | None = None,
    ) -> None:
        if not any(s.namesrv for s in specs) or not any(s.controller for s in specs):
            raise ValueError("a layout needs at least one name server and one controller peer")
        self.directory = directory
        self.cluster = cluster
        self.specs = {s.name: s for s in specs}
        taken: set[int] = set()
        self.ns_ports = {s.name: free_ports(1, taken=taken)[0] for s in specs if s.namesrv}
        self.ctl_ports = {s.name: free_ports(1, taken=taken)[0] for s in specs if s.controller}
        self.broker_ports = {
            (s.name, g): free_ports(1, pairs=True, taken=taken)[0] for s in specs for g in s.groups
        }
        #: each process's address: 127.0.0.1, or with ``net`` its network namespace's (the process
        #: runs in the namespace named like it)
        self.ips = {s.name: net.address(s.name) if net is not None else "127.0.0.1" for s in specs}
        self.namesrvs = ";".join(f"{self.ips[name]}:{p}" for name, p in self.ns_ports.items())
        self.controllers = ";".join(f"{self.ips[name]}:{p}" for name, p in self.ctl_ports.items())
        #: controller peer id (n0, n1, ...) of each process that hosts one
        self.peer_ids = {name: f"n{i}" for i, name in enumerate(self.ctl_ports)}
        peers = ";".join(f"{self.peer_ids[name]}-{self.ips[name]}:{p}" for name, p in self.ctl_ports.items())
        directory.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, ContainerProc] = {}
        for index, spec in enumerate(specs):
            tables: dict[str, dict[str, object]] = {"nettyServer": {"bindAddress": self.ips[spec.name]}}
            if spec.namesrv:
                tables["namesrv"] = {
                    "listenPort": self.ns_ports[spec.name],
                    "kvConfigPath": "${rmq.data.dir}/namesrv/kv.json",
                    "configStorePath": "${rmq.data.dir}/namesrv/namesrv.properties",
                }
            if spec.controller:
                tables["controller"] = {
                    "controllerDLegerGroup": raft_group,
                    "controllerDLegerPeers": peers,
                    "controllerDLegerSelfId": self.peer_ids[spec.name],
                    "controllerStorePath": "${rmq.data.dir}/controller",
                    "configStorePath": "${rmq.data.dir}/controller.properties",
                    **DEV_CONTROLLER_KEYS,
                    **(controller_keys or {}),
                }
            brokers = [self._broker_keys(spec.name, g, index, broker_keys) for g in spec.groups]
            path = directory / f"{spec.name}.toml"
            path.write_text(toml_text(tables, brokers))
            prefix = net.argv_prefix(spec.name) if net is not None else ()
            self.procs[spec.name] = ContainerProc(spec.name, path, directory, argv_prefix=prefix)

    def _broker_keys(
        self, proc: str, group: str, index: int, extra: Mapping[str, object] | None
    ) -> dict[str, object]:
        return {
            "brokerClusterName": self.cluster,
            "brokerName": group,
            "brokerId": index,  # names the replica in logs; the controller assigns the real id
            "listenPort": self.broker_ports[(proc, group)],
            "brokerIP1": self.ips[proc],
            "brokerIP2": self.ips[proc],
            "namesrvAddr": self.namesrvs,
            "enableControllerMode": True,
            "controllerAddr": self.controllers,
            "autoCreateTopicEnable": True,
            "autoCreateSubscriptionGroup": True,
            "storePathRootDir": f"${{rmq.data.dir}}/{group}",
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "maxHashSlotNum": 5000,
            "maxIndexNum": 20000,
            **DEV_BROKER_KEYS,
            **(extra or {}),
        }

    # --- addresses ---

    def broker_addr(self, proc: str, group: str) -> str:
        return f"{self.ips[proc]}:{self.broker_ports[(proc, group)]}"

    def replica_addrs(self, group: str) -> list[str]:
        return [self.broker_addr(p, g) for (p, g) in self.broker_ports if g == group]

    def process_of(self, broker_addr: str) -> str:
        ip, _, port = broker_addr.rpartition(":")
        return next(p for (p, _g), bp in self.broker_ports.items() if bp == int(port) and self.ips[p] == ip)

    def controller_process(self, address: str) -> str:
        ip, _, port = address.rpartition(":")
        return next(p for p, cp in self.ctl_ports.items() if cp == int(port) and self.ips[p] == ip)

    # --- lifecycle ---

    async def start(self, names: Iterable[str] | None = None) -> None:
        """Spawn the named processes (default: all) in parallel and wait for every banner."""
        chosen = [self.procs[n] for n in (names if names is not None else self.procs)]
        for proc in chosen:
            proc.spawn()
        for proc in chosen:
            await proc.wait_ready()

    def close(self) -> None:
        for proc in self.procs.values():
            proc.close()

    def output(self, names: Iterable[str] | None = None) -> str:
        return "\n".join(self.procs[n].output() for n in (names if names is not None else self.procs))


# --- controller views ---------------------------------------------------------------------------------


async def replicas(admin: ControllerAdmin, group: str, timeout: float = 10.0) -> ReplicasInfo:
    """The group's replica info from the controller leader (waiting while the peers elect one)."""
    with trio.fail_after(timeout):
        while True:
            try:
                info = await admin.get_in_sync_state_data([group])
                return info.replicasInfoTable.get(group) or ReplicasInfo()
            except (AdminError, RemotingError):
                await trio.sleep(0.02)


async def new_master(
    admin: ControllerAdmin, group: str, before: ReplicasInfo, timeout: float
) -> ReplicasInfo:
    """Wait until the controller names a master of ``group`` other than ``before``'s, with a
    higher epoch; its replica info."""

    async def changed() -> ReplicasInfo | None:
        r = await replicas(admin, group)
        return r if r.masterAddress not in (None, before.masterAddress) else None

    after: ReplicasInfo = await wait_until(changed, timeout, f"{group}: a new master")
    assert (after.masterEpoch or 0) > (before.masterEpoch or 0), (before, after)
    return after


def alive_in_sync(info: ReplicasInfo) -> set[str]:
    """Addresses of the live members of the SyncStateSet."""
    return {r.brokerAddress for r in info.inSyncReplicas if r.alive and r.brokerAddress}


async def wait_settled(
    admin: ControllerAdmin, group: str, members: int, timeout: float, interval: float = 0.05
) -> ReplicasInfo:
    """Poll until the group has a master and ``members`` live SyncStateSet members; its info."""
    last = ReplicasInfo()
    with trio.move_on_after(timeout):
        while True:
            last = await replicas(admin, group)
            if last.masterAddress and len(alive_in_sync(last)) >= members:
                return last
            await trio.sleep(interval)
    raise AssertionError(f"{group} not settled with {members} in sync within {timeout}s: {last}")


# --- name server ------------------------------------------------------------------------------------


async def route(
    client: RemotingClient, namesrv: str, topic: str, timeout: float = 2.0
) -> TopicRouteData | None:
    r = await client.invoke(namesrv, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), timeout)
    if r.code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.decode(r.body_bytes)


async def route_master(client: RemotingClient, namesrv: str, topic: str, group: str) -> str | None:
    """The address ``namesrv`` routes id 0 of ``group`` to for ``topic`` (None: no such entry)."""
    data = await route(client, namesrv, topic)
    if data is None:
        return None
    for bd in data.brokerDatas:
        if bd.brokerName == group:
            return bd.brokerAddrs.get(0)
    return None


# --- brokers ----------------------------------------------------------------------------------------


async def broker_role(client: RemotingClient, addr: str) -> str | None:
    """The broker's ``brokerRole`` (GET_BROKER_CONFIG); None when it does not answer."""
    try:
        r = await call(client, addr, RequestCode.GET_BROKER_CONFIG, timeout=1.0)
    except RemotingError:
        return None
    if r.code != ResponseCode.SUCCESS:
        return None
    for line in r.body_bytes.decode().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "brokerRole":
            return value.strip()
    return None


async def create_topic(
    client: RemotingClient, addrs: Iterable[str], topic: str, queues: int, timeout: float = 5.0
) -> None:
    """UPDATE_AND_CREATE_TOPIC on every address (read/write queues = ``queues``, perm RW)."""
    for addr in addrs:
        ext = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": queues,
            "writeQueueNums": queues,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "order": "false",
        }
        r = await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), timeout)
        if r.code != ResponseCode.SUCCESS:
            raise AssertionError(f"creating {topic} on {addr}: {r.code} {r.remark}")


async def create_routed_topic(
    client: RemotingClient, cluster: FailoverCluster, topic: str, queues: int, groups: Iterable[str]
) -> None:
    """:func:`create_topic` on every replica of ``groups``; returns once every name server routes
    the topic to each group's master."""
    groups = list(groups)
    await create_topic(client, [a for g in groups for a in cluster.replica_addrs(g)], topic, queues)
    deadline = trio.current_time() + 10
    for namesrv in cluster.namesrvs.split(";"):
        for g in groups:
            while await route_master(client, namesrv, topic, g) is None:
                if trio.current_time() > deadline:
                    raise AssertionError(
                        f"the name server {namesrv} does not route {topic} with {g} after 10 s"
                    )
                await trio.sleep(0.02)


def send_request(
    topic: str, queue_id: int, body: bytes, uniq_key: str, group: str = "PG_FAILOVER"
) -> RemotingCommand:
    """A SEND_MESSAGE_V2 that waits for the store (``WAIT=true``), auto-creating ``topic`` if needed."""
    ext = {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": f"UNIQ_KEY\x01{uniq_key}\x02WAIT\x01true\x02",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body)


@dataclass(frozen=True)
class Ack:
    """One acknowledged send: the body, the replica that answered SUCCESS, when (trio clock)."""

    body: bytes
    addr: str
    at: float


@dataclass
class DirectSender:
    """Sends unique bodies (``<prefix>-<n>`` padded to ``body_size``) to the replicas of one group.

    Each attempt carries a new body (a body is never sent twice, so "acknowledged" and "stored
    twice" cannot mix). An attempt goes to the replica that acknowledged last; on an error or a
    non-SUCCESS answer the next body goes to the following replica, after ``pause`` seconds.
    """

    client: RemotingClient
    addrs: list[str]
    topic: str
    queues: int = 4
    body_size: int = 128
    prefix: str = "m"
    timeout: float = 5.0
    pause: float = 0.005
    #: pause after an acknowledged send (0: the next one at once; > 0 caps the rate per loop)
    ok_pause: float = 0.0
    acked: list[Ack] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    #: the last remark (or error text) seen for each kind of failure
    remarks: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    _preferred: int = 0
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _acked_event: trio.Event = field(default_factory=trio.Event)

    def _body(self, n: int) -> bytes:
        return f"{self.prefix}-{n:09d}".encode().ljust(self.body_size, b".")

    async def send_one(self) -> Ack | None:
        """One attempt with a new body; the Ack, or None (the next attempt tries another replica)."""
        n = next(self._seq)
        body = self._body(n)
        index = self._preferred % len(self.addrs)
        addr = self.addrs[index]
        self.attempts += 1
        cmd = send_request(self.topic, n % self.queues, body, f"{self.prefix.upper()}{n:020X}")
        try:
            r = await self.client.invoke(addr, cmd, self.timeout)
        except RemotingError as e:
            key = f"{addr}: {type(e).__name__}"
            self.failures[key] += 1
            self.remarks[key] = str(e)
        else:
            if r.code == ResponseCode.SUCCESS:
                ack = Ack(body, addr, trio.current_time())
                self.acked.append(ack)
                event, self._acked_event = self._acked_event, trio.Event()
                event.set()
                if self.ok_pause:
                    await trio.sleep(self.ok_pause)
                return ack
            key = f"{addr}: code {r.code}"
            self.failures[key] += 1
            self.remarks[key] = r.remark or ""
        if self._preferred % len(self.addrs) == index:
            self._preferred = index + 1
        await trio.sleep(self.pause)
        return None

    async def run(self, stop: trio.Event, concurrency: int = 1) -> None:
        """Send until ``stop`` is set, ``concurrency`` attempts in flight."""

        async def loop() -> None:
            while not stop.is_set():
                await self.send_one()

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(loop)

    async def wait_acked(
        self, count: int, timeout: float, *, at: str | None = None, after: float = 0.0
    ) -> None:
        """Until ``count`` acks (on replica ``at`` if given, answered after ``after``) exist."""

        def enough() -> bool:
            return sum(1 for a in self.acked if a.at >= after and (at is None or a.addr == at)) >= count

        with trio.move_on_after(timeout):
            while True:
                event = self._acked_event  # replaced (and set) by the next ack
                if enough():
                    return
                await event.wait()
        raise AssertionError(
            f"fewer than {count} acknowledged sends{f' on {at}' if at else ''} within {timeout}s "
            f"({len(self.acked)} acked, failures {dict(self.failures)}, last remarks {self.remarks})"
        )

    def first_ack_after(self, t: float, *, not_at: str | None = None) -> Ack | None:
        """The earliest ack answered after ``t`` by a replica other than ``not_at``."""
        return min((a for a in self.acked if a.at > t and a.addr != not_at), key=lambda a: a.at, default=None)


def pull_request(topic: str, queue_id: int, offset: int, group: str) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumerGroup=group,
        topic=topic,
        queueId=queue_id,
        queueOffset=offset,
        maxMsgNums=64,
        sysFlag=PullSysFlag.SUBSCRIPTION,
        subscription="*",
    )
    return request(RequestCode.PULL_MESSAGE, dict(encode_header(header)))


async def read_all(
    client: RemotingClient,
    addr: str,
    topic: str,
    queues: int,
    *,
    group: str = "CG_FAILOVER_CHECK",
    timeout: float = 5.0,
) -> list[bytes]:
    """Every message body in queues ``0..queues-1`` of ``topic`` on the broker at ``addr`` (a master
    or a slave)."""
    out: list[bytes] = []
    for queue_id in range(queues):
        offset = 0
        while True:
            r = await client.invoke(addr, pull_request(topic, queue_id, offset, group), timeout)
            if r.code == ResponseCode.PULL_NOT_FOUND:
                break
            if r.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY):
                raise AssertionError(f"pull {topic}/{queue_id}@{offset} from {addr}: {r.code} {r.remark}")
            if r.code == ResponseCode.SUCCESS:
                out += [m.body for m in iter_messages(r.body_bytes)]
            head = decode_header(r, PullMessageResponseHeader)
            nxt = head.nextBeginOffset
            if r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and nxt == offset >= head.maxOffset:
                break  # a slave at the end of the queue sends the reader to its master
            if nxt <= offset:
                raise AssertionError(
                    f"pull {topic}/{queue_id}@{offset} from {addr} did not advance: {r.code} {r.remark} "
                    f"{r.ext_fields}"
                )
            offset = nxt
    return out
