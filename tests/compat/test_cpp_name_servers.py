"""The real C++ client with two name servers, while the first one's host goes dark and then a
master dies (issue #3).

Five ``rmq-container`` processes, each in a network namespace of its own: ``ns1`` and ``ns2`` (a
name server each), ``c0`` (the controller), ``p1`` and ``p2`` (one replica of broker-a and one of
broker-b each, masters apart). Clients and brokers are given ``ns1;ns2``. A C++ producer sends
continuously and a C++ push consumer listens; ``ns1``'s network goes down (its connections go
silent, nothing is reset), then the process of broker-a's master is SIGKILLed. Then:

* ``ns2`` routes broker-a's new master at once: the brokers register with each name server on its
  own, so the silent one holds back no registration with the other (it did for up to the
  registration's timeout when one loop waited for both);
* the producer's sends go on being acknowledged, and the consumer receives every acknowledged
  message -- the C++ client turns to ``ns2`` when ``ns1`` stops answering.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bench.failover_kit import FailoverCluster, ProcSpec, route_master
from tests.cluster.harness import wait_until
from tests.cluster.netlab import NetLab
from tests.compat.cluster import Clients, requires_cpp_client
from tests.compat.test_cpp_failover import (
    GROUPS,
    TOPIC,
    _acknowledged_and_received,
    _progress,
    assert_all_delivered,
    lab_failover_cluster,
    streaming,
)

pytestmark = [pytest.mark.compat, pytest.mark.slow, requires_cpp_client]

#: seconds the producer sends: ns1 goes dark after ~3 s, broker-a's master dies ~3 s later
PRODUCE_SECONDS = 20
#: seconds after the kill within which the live name server must route the new master (the
#: controller names it within ~0.1 s of a kill; the registration is one round trip)
ROUTED_BOUND = 1.0


@pytest.fixture
def lab_cluster(tmp_path: Path) -> Iterator[tuple[FailoverCluster, NetLab]]:
    specs = [
        ProcSpec("ns1", namesrv=True),
        ProcSpec("ns2", namesrv=True),
        ProcSpec("c0", controller=True),
        ProcSpec("p1", groups=GROUPS),
        ProcSpec("p2", groups=GROUPS),
    ]
    with lab_failover_cluster(tmp_path / "cluster", specs, "CompatTwoNameServers") as pair:
        yield pair


async def test_cpp_client_and_brokers_carry_on_when_one_of_two_name_servers_goes_dark(
    lab_cluster: tuple[FailoverCluster, NetLab], client: Clients, tmp_path: Path
) -> None:
    cluster, net = lab_cluster
    progress, expect_file = tmp_path / "progress.json", tmp_path / "expect.json"
    ns2 = cluster.namesrvs.split(";")[1]
    with trio.fail_after(150):
        async with streaming(cluster, client, "TWO_NS", PRODUCE_SECONDS, progress, expect_file) as stream:
            rc, before = stream.rc, stream.before
            assert before.masterAddress is not None
            net.isolate("ns1")
            dark_at = time.time()
            acked_when_dark = _progress(progress)["acked"]
            await trio.sleep(3)
            killed_at = time.time()
            cluster.procs[cluster.process_of(before.masterAddress)].kill_now()

            async def new_master_routed() -> bool:
                m = await route_master(rc, ns2, TOPIC, "broker-a")
                return m not in (None, before.masterAddress)

            await wait_until(new_master_routed, 10, "ns2 routing broker-a's new master", interval=0.01)
            routed_after = time.time() - killed_at
            results, acked, got = await _acknowledged_and_received(
                stream.producer, stream.consumer, PRODUCE_SECONDS, expect_file
            )
    after_kill = [r for r in acked if r["t"] > killed_at]
    failed = [r for r in results if not (r.get("ok") and r["status"] == 0)]
    summary = (
        f"{len(results)} sends, {len(acked)} acknowledged ({acked_when_dark} before ns1 went dark, "
        f"{len(after_kill)} after the kill), {len(failed)} not (e.g. {failed[:2]}); ns2 routed the "
        f"new master {routed_after:.3f} s after the kill, {killed_at - dark_at:.1f} s after ns1 went dark"
    )
    print(summary)
    assert routed_after <= ROUTED_BOUND, summary
    assert len(after_kill) >= 50, summary
    assert_all_delivered(acked, got, summary)
