"""A name server restarted on its own (its own process, SIGKILL, start again) gets its routes back
from the brokers within seconds: a broker registers again as soon as its connection to a name server
breaks, retrying after 1 s, 2 s, ... while it is down -- not at its next period (30 s), as upstream,
during which a client that asks the restarted name server for a route finds none (the C++ client's
producer then fails with "No route info of this topic")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bench.failover_kit import FailoverCluster, ProcSpec, create_routed_topic, route_master
from remoting.client import RemotingClient
from remoting.errors import RemotingError

TOPIC = "RestartRouteTopic"
#: the registration period is 30 s; a route back within this shows the re-registration acted
ROUTE_BACK_S = 10


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FailoverCluster]:
    specs = [
        ProcSpec("ns", namesrv=True),
        ProcSpec("c0", controller=True),
        ProcSpec("p1", groups=("broker-a",)),
    ]
    c = FailoverCluster(tmp_path / "cluster", specs, cluster="NsRestart")
    try:
        yield c
    finally:
        c.close()


async def test_a_restarted_name_server_routes_the_brokers_topics_again_within_seconds(
    cluster: FailoverCluster,
) -> None:
    with trio.fail_after(90):
        await cluster.start()
        async with RemotingClient(name="test.ns-restart") as client:
            await create_routed_topic(client, cluster, TOPIC, 4, ["broker-a"])
            ns = cluster.procs["ns"]
            ns.kill_now()
            await trio.sleep(1.5)  # down long enough for a registration attempt to fail
            await ns.start()
            restarted = trio.current_time()

            async def routed() -> str | None:
                try:
                    return await route_master(client, cluster.namesrvs, TOPIC, "broker-a")
                except RemotingError:
                    return None

            with trio.move_on_after(ROUTE_BACK_S):
                while await routed() is None:
                    await trio.sleep(0.05)
            took = trio.current_time() - restarted
    assert took < ROUTE_BACK_S, f"no route {ROUTE_BACK_S} s after the restart\n{cluster.output(['p1'])}"
    print(f"routed again {took:.2f} s after the name server's restart")
    assert "connection to name server" in cluster.procs["p1"].log_text()
