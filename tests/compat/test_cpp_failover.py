"""The real C++ client across a controller-mode failover (issue #5). (A second test: a C++ orderly
push consumer keeps each key's order across a kill of broker-a's master's process. A third: the
same producer and consumer while the network cuts off broker-a's master's process for 10 s and
then lets it back, see :func:`test_cpp_client_loses_nothing_while_a_master_node_is_cut_off`.)

Three ``rmq-container`` processes: ``c0`` (name server + controller), ``p1`` and ``p2`` (one replica of
broker-a and one of broker-b each, ``allAckInSyncStateSet``, dev timings), with broker-a's master and
broker-b's master in different processes. A C++ producer sends continuously (``send_sync``, one
message every 50 ms for 45 s) while a C++ push consumer listens; the process holding broker-a's master
is SIGKILLed a few seconds in. Then:

* sends keep being acknowledged (broker-b takes them at once; the producer's retry picks another
  broker), and after the producer's route refresh (every 30 s in the C++ client) acknowledged sends
  land on broker-a's new master again;
* the push consumer receives every acknowledged message at least once (it too finds broker-a's new
  master at its route refresh).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from bench.failover_kit import (
    FailoverCluster,
    ProcSpec,
    create_routed_topic,
    read_all,
    replicas,
    spread_specs,
    wait_settled,
)
from client.admin_controller import ControllerAdmin
from client.instance import ClientInstance
from client.producer import Producer
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from remoting.protocol.controller import ReplicasInfo
from tests.cluster.harness import wait_until
from tests.cluster.netlab import NetLab, unavailable
from tests.cluster.test_orderly_failover import first_deliveries, send_pinned_and_kill
from tests.compat.cluster import ClientProcess, Clients, requires_cpp_client

pytestmark = [pytest.mark.compat, pytest.mark.slow, requires_cpp_client]

TOPIC = "CompatFailoverTopic"
QUEUES = 4
GROUPS = ("broker-a", "broker-b")
#: seconds the producer sends; must cover the kill, the client's route refresh (every 30 s) and a bit
PRODUCE_SECONDS = 45


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FailoverCluster]:
    c = FailoverCluster(tmp_path / "cluster", spread_specs(GROUPS), cluster="CompatFailover")
    try:
        yield c
    finally:
        c.close()


async def _masters_apart(cluster: FailoverCluster, admin: ControllerAdmin) -> ReplicasInfo:
    """Settle both groups with broker-a's and broker-b's masters in different processes (an admin
    election moves broker-b's if needed); broker-a's replica info."""
    a = await wait_settled(admin, "broker-a", 2, 30)
    b = await wait_settled(admin, "broker-b", 2, 30)
    assert a.masterAddress is not None
    assert b.masterAddress is not None
    pa = cluster.process_of(a.masterAddress)
    if cluster.process_of(b.masterAddress) == pa:
        target = cluster.broker_addr("p2" if pa == "p1" else "p1", "broker-b")
        target_id = next(r.brokerId for r in b.inSyncReplicas if r.brokerAddress == target)
        assert target_id is not None
        await admin.elect_master(cluster.cluster, "broker-b", target_id)

        async def moved() -> bool:
            return (await replicas(admin, "broker-b")).masterAddress == target

        await wait_until(moved, 10, "broker-b's master moved away from broker-a's process")
        await wait_settled(admin, "broker-b", 2, 30)
    return a


def _start_stream(
    client: Clients, namesrv: str, name: str, seconds: float, progress: Path, expect_file: Path
) -> tuple[ClientProcess, ClientProcess]:
    """A C++ push consumer (group ``CG_CPP_<name>``) receiving until it has every body
    ``expect_file`` will list, and a C++ producer (``PG_CPP_<name>``) sending one message every
    50 ms for ``seconds``, its counts in ``progress``."""
    consumer = client.start(
        {
            "action": "push_until",
            "namesrv": namesrv,
            "group": f"CG_CPP_{name}",
            "topic": TOPIC,
            "expect_file": str(expect_file),
            "wait": seconds + 60,
            "settle": 1,
            "deadline": seconds + 70,
        }
    )
    producer = client.start(
        {
            "action": "produce_stream",
            "namesrv": namesrv,
            "group": f"PG_CPP_{name}",
            "topic": TOPIC,
            "duration": seconds,
            "interval_ms": 50,
            "progress_file": str(progress),
            "deadline": seconds + 40,
        }
    )
    return consumer, producer


async def _acknowledged_and_received(
    producer: ClientProcess, consumer: ClientProcess, seconds: float, expect_file: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The producer's sends and the acknowledged ones, once it is done; then (``expect_file``
    listing those) the consumer's report."""
    sent: dict[str, Any] = await trio.to_thread.run_sync(producer.report, seconds + 40)
    assert "exception" not in sent, sent
    results = sent["results"]
    acked = [r for r in results if r.get("ok") and r["status"] == 0]
    await trio.Path(expect_file).write_text(json.dumps([r["body"] for r in acked]))
    got: dict[str, Any] = await trio.to_thread.run_sync(consumer.report, 80)
    assert "exception" not in got, got
    return results, acked, got


def _progress(path: Path) -> dict[str, int]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"sent": 0, "acked": 0}


def assert_all_delivered(acked: list[dict[str, Any]], got: dict[str, Any], summary: str = "") -> None:
    """The consumer's report ``got`` has every body of ``acked`` and did not time out."""
    received = {r["body"] for r in got["received"]}
    missing = [r["body"] for r in acked if r["body"] not in received]
    assert not got.get("timed_out"), (
        f"consumer timed out; {len(missing)} of {len(acked)} missing: {missing[:5]} {summary}"
    )
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages never delivered: {missing[:5]}"


@dataclass
class Stream:
    """A cluster with both masters settled apart, the test topic routed, and a C++ producer and
    push consumer streaming through it (see :func:`streaming`)."""

    rc: RemotingClient
    admin: ControllerAdmin
    #: broker-a's replica info before anything happened
    before: ReplicasInfo
    consumer: ClientProcess
    producer: ClientProcess


@asynccontextmanager
async def streaming(
    cluster: FailoverCluster, client: Clients, name: str, seconds: float, progress: Path, expect_file: Path
) -> AsyncIterator[Stream]:
    """Start ``cluster``, move the masters apart, create the routed topic, start the C++ stream
    (:func:`_start_stream`) and return once 60 sends were acknowledged."""
    await cluster.start()
    async with RemotingClient(name=f"test.cpp-{name.lower()}") as rc:
        admin = ControllerAdmin(rc, cluster.controllers, timeout=5.0)
        before = await _masters_apart(cluster, admin)
        assert before.masterAddress is not None
        await create_routed_topic(rc, cluster, TOPIC, QUEUES, GROUPS)
        consumer, producer = _start_stream(client, cluster.namesrvs, name, seconds, progress, expect_file)

        async def acked_some() -> bool:
            return _progress(progress)["acked"] >= 60

        await wait_until(acked_some, 30, "60 acknowledged C++ sends", interval=0.05)
        yield Stream(rc, admin, before, consumer, producer)


async def test_cpp_client_sends_and_consumes_across_a_master_failover(
    cluster: FailoverCluster, client: Clients, tmp_path: Path
) -> None:
    progress, expect_file = tmp_path / "progress.json", tmp_path / "expect.json"
    namesrv = cluster.namesrvs
    with trio.fail_after(170):
        await cluster.start()
        async with RemotingClient(name="test.cpp-failover") as rc:
            admin = ControllerAdmin(rc, cluster.controllers, timeout=5.0)
            before = await _masters_apart(cluster, admin)
            await create_routed_topic(rc, cluster, TOPIC, QUEUES, GROUPS)

            consumer, producer = _start_stream(
                client, namesrv, "FAILOVER", PRODUCE_SECONDS, progress, expect_file
            )

            # ~5 s in: after the client's route refresh at +3 s, so that broker-a's new master is
            # learned at the next one (+33 s), not by chance right after the kill
            async def acked_some() -> bool:
                return _progress(progress)["acked"] >= 100

            await wait_until(acked_some, 30, "100 acknowledged C++ sends before the kill", interval=0.05)
            assert before.masterAddress is not None
            killed_at = time.time()
            cluster.procs[cluster.process_of(before.masterAddress)].kill_now()

            async def new_master() -> ReplicasInfo | None:
                r = await replicas(admin, "broker-a")
                return r if r.masterAddress not in (None, before.masterAddress) else None

            after: ReplicasInfo = await wait_until(new_master, 10, "broker-a: a new master")
            assert after.masterAddress is not None

            results, acked, got = await _acknowledged_and_received(
                producer, consumer, PRODUCE_SECONDS, expect_file
            )

            try:
                on_a = {b.decode() for b in await read_all(rc, after.masterAddress, TOPIC, QUEUES)}
            except RemotingError as e:
                raise AssertionError(f"reading broker-a's new master: {e}") from None

    acked_before = [r for r in acked if r["t"] < killed_at]
    acked_after = [r for r in acked if r["t"] > killed_at]
    failed = [r for r in results if not (r.get("ok") and r["status"] == 0)]
    on_new_a = sorted(r["t"] - killed_at for r in acked_after if r["body"] in on_a)
    summary = (
        f"{len(results)} sends: {len(acked_before)} acknowledged before the kill, {len(acked_after)} after, "
        f"{len(failed)} not acknowledged (e.g. {failed[:2]}); first acknowledged send on broker-a's new "
        f"master {on_new_a[0] if on_new_a else None} s after the kill"
    )
    print(summary)
    assert acked_before, summary
    assert acked_after, summary
    assert on_new_a, f"no acknowledged send reached broker-a's new master after the kill: {summary}"
    # the producer finds broker-a's new master at its next route refresh (every 30 s) and sends on
    assert on_new_a[0] <= 35, summary
    assert len(on_new_a) >= 10, summary
    assert_all_delivered(acked, got)


async def test_cpp_orderly_consumer_keeps_each_key_in_order_across_a_master_failover(
    cluster: FailoverCluster, client: Clients, tmp_path: Path
) -> None:
    # the Python producer pins each key to a queue (the C++ client's send_orderly would retry a
    # failed send on the next queue, which breaks a key's order by design); the process holding
    # broker-a's master is SIGKILLed while it sends; the C++ orderly push consumer finds the new
    # masters at its route refresh and must deliver each key's messages in send order
    topic = "CompatOrderlyFailoverTopic"
    expect_file = tmp_path / "expect.json"
    with trio.fail_after(170):
        await cluster.start()
        async with RemotingClient(name="test.cpp-orderly-failover") as rc:
            admin = ControllerAdmin(rc, cluster.controllers, timeout=5.0)
            before = await wait_settled(admin, "broker-a", 2, 30)
            await wait_settled(admin, "broker-b", 2, 30)
            assert before.masterAddress is not None
            await create_routed_topic(rc, cluster, topic, QUEUES, GROUPS)
            consumer = client.start(
                {
                    "action": "push_until",
                    "namesrv": cluster.namesrvs,
                    "group": "CG_CPP_ORDERLY_FAILOVER",
                    "topic": topic,
                    "orderly": True,
                    "expect_file": str(expect_file),
                    "wait": 90,
                    "settle": 1,
                    "deadline": 100,
                }
            )
            instance = ClientInstance(cluster.namesrvs, poll_name_server_interval=0.5)
            async with instance, Producer("PG_CPP_ORDERLY_FAILOVER", instance=instance) as producer:
                acked, killed_at = await send_pinned_and_kill(
                    producer,
                    topic,
                    QUEUES,
                    8,
                    10.0,
                    cluster.procs[cluster.process_of(before.masterAddress)].kill_now,
                    3.0,
                )
            expect_file.write_text(json.dumps([f"{k}-{x}" for k, ns in acked.items() for x in ns]))
            got: dict[str, Any] = await trio.to_thread.run_sync(consumer.report, 110)
    assert "exception" not in got, got
    assert not got.get("timed_out"), f"{len(got['received'])} received; not every acknowledged message"
    assert all(len([x for x in ns if x > killed_at]) > 50 for ns in acked.values()), (
        "few sends after the kill"
    )
    for key, first in first_deliveries(r["body"] for r in got["received"]).items():
        assert first == sorted(first), f"key {key}: first deliveries out of send order: {first}"
        assert set(acked[key]) <= set(first)


#: seconds broker-a's master's process stays cut off in the partition test
CUT_OFF_SECONDS = 10
#: seconds the producer sends in the partition test (before the cut, during it, and after the heal)
PARTITION_PRODUCE_SECONDS = 24


@contextmanager
def lab_failover_cluster(
    directory: Path, specs: list[ProcSpec], cluster: str
) -> Iterator[tuple[FailoverCluster, NetLab]]:
    """The processes of ``specs``, each in a network namespace of its own (the C++ clients stay
    in the test's); the test is skipped where namespaces cannot be made."""
    why_not = unavailable()
    if why_not is not None:
        pytest.skip(why_not)
    net = NetLab([s.name for s in specs])
    try:
        c = FailoverCluster(directory, specs, cluster=cluster, net=net)
        try:
            yield c, net
        finally:
            c.close()
    finally:
        net.close()


@pytest.fixture
def lab_cluster(tmp_path: Path) -> Iterator[tuple[FailoverCluster, NetLab]]:
    """The same three processes, each in a network namespace of its own."""
    with lab_failover_cluster(tmp_path / "cluster", spread_specs(GROUPS), "CompatPartition") as pair:
        yield pair


async def test_cpp_client_loses_nothing_while_a_master_node_is_cut_off(
    lab_cluster: tuple[FailoverCluster, NetLab], client: Clients, tmp_path: Path
) -> None:
    """Unlike a kill, the cut-off process runs on and still believes it is broker-a's master, and
    the C++ client's connections to it do not break but go silent. The producer's sends there time
    out (3 s) and its retries go to broker-b, the slave on the other process takes over broker-a,
    and after the heal the old master rejoins as a slave -- before the producer's route refresh
    tells it so (the slave refuses its sends, it retries elsewhere). Nothing acknowledged is lost:
    the consumer receives every acknowledged message, and broker-a's replicas end up equal."""
    cluster, net = lab_cluster
    progress, expect_file = tmp_path / "progress.json", tmp_path / "expect.json"
    with trio.fail_after(150):
        async with streaming(
            cluster, client, "PARTITION", PARTITION_PRODUCE_SECONDS, progress, expect_file
        ) as stream:
            rc, admin, before = stream.rc, stream.admin, stream.before
            assert before.masterAddress is not None
            node = cluster.process_of(before.masterAddress)
            net.isolate(node)
            cut_at = time.time()
            await trio.sleep(CUT_OFF_SECONDS)
            net.heal()
            healed_at = time.time()

            results, acked, got = await _acknowledged_and_received(
                stream.producer, stream.consumer, PARTITION_PRODUCE_SECONDS, expect_file
            )

            after = await wait_settled(admin, "broker-a", 2, 20)
            assert after.masterAddress not in (None, before.masterAddress), (before, after)
            replicas_of_a = cluster.replica_addrs("broker-a")
            held: dict[str, set[bytes]] = {}
            with trio.move_on_after(15):
                while True:
                    held = {a: set(await read_all(rc, a, TOPIC, QUEUES)) for a in replicas_of_a}
                    if len({frozenset(h) for h in held.values()}) == 1:
                        break
                    await trio.sleep(0.3)

    during = [r for r in acked if cut_at < r["t"] < healed_at]
    after_heal = [r for r in acked if r["t"] > healed_at]
    slowest = max((r["dt"] for r in results), default=0.0)
    summary = (
        f"{len(results)} sends, {len(acked)} acknowledged ({len(during)} during the {CUT_OFF_SECONDS} s cut, "
        f"{len(after_heal)} after the heal), slowest send {slowest:.1f} s; broker-a's master "
        f"{before.masterAddress} -> {after.masterAddress}"
    )
    print(summary)
    assert_all_delivered(acked, got)
    assert len(after_heal) >= 50, summary
    sizes = {a: len(h) for a, h in held.items()}
    assert len({frozenset(h) for h in held.values()}) == 1, f"broker-a's replicas differ: {sizes}"
