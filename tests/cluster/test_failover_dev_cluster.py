"""The default dev cluster (``conf/dev-cluster.toml``, what ``bin/rmq-container`` runs with no argument)
in controller mode: started as a real process (on free ports instead of the fixed ones), both broker
groups elect a master whose SyncStateSet holds both replicas, a Python client sends to and reads from
both groups, the process stops without the controller reacting to its own brokers going away (the
brokers unregister from the name server first), and restarted on its data directory it comes back
the same way (same masters, same epochs)."""

from __future__ import annotations

import re
from pathlib import Path

import trio

from client.admin import AdminError
from client.admin_controller import ControllerAdmin
from client.instance import ClientInstance
from client.message import Message, MQClientError, PullStatus, SendStatus
from client.producer import Producer
from client.pull_consumer import PullConsumer
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.cluster.harness import DEV_PORTS, PROJECT_ROOT, ContainerProc, free_port_offset, wait_until

DEV_CONFIG = PROJECT_ROOT / "conf" / "dev-cluster.toml"
TOPIC = "DevClusterTopic"


def dev_layout_on_free_ports() -> tuple[list[str], dict[int, int]]:
    """``rmq-container`` arguments that move a shipped layout (conf/dev-cluster.toml, the files of
    conf/failover/) onto free ports -- ``--port-offset``, as a user runs a second copy -- and where
    each fixed port of :data:`DEV_PORTS` went."""
    offset = free_port_offset()
    return ["--port-offset", str(offset)], {p: p + offset for p in DEV_PORTS}


async def groups_ready(admin: ControllerAdmin) -> bool:
    try:
        info = await admin.get_in_sync_state_data(["broker-a", "broker-b"])
    except (AdminError, RemotingError):
        return False
    table = info.replicasInfoTable
    return all(
        (r := table.get(g)) is not None
        and r.masterBrokerId is not None
        and len([x for x in r.inSyncReplicas if x.alive]) == 2
        for g in ("broker-a", "broker-b")
    )


async def masters(admin: ControllerAdmin) -> dict[str, tuple[int | None, int | None]]:
    """(master broker id, master epoch) of both groups, as the controller has them."""
    info = await admin.get_in_sync_state_data(["broker-a", "broker-b"])
    return {g: (r.masterBrokerId, r.masterEpoch) for g, r in info.replicasInfoTable.items()}


async def masters_routed(namesrv: str) -> bool:
    """Whether the name server routes the topic to a writable queue of both groups (after a
    restart its route table starts empty and fills as the brokers re-register as masters)."""
    instance = ClientInstance(namesrv)
    async with instance:
        try:
            info = await instance.find_publish_info(TOPIC)
        except MQClientError:
            return False
        return {q.brokerName for q in info.message_queues} == {"broker-a", "broker-b"}


async def send_and_read(namesrv: str, bodies: list[bytes]) -> list[bytes]:
    """Send ``bodies`` (each acknowledged), then read the whole topic back."""
    instance = ClientInstance(namesrv, poll_name_server_interval=0.5)
    async with instance, Producer("PG_DEV", instance=instance) as producer:
        for body in bodies:
            result = await producer.send(Message(TOPIC, body))
            assert result.send_status == SendStatus.SEND_OK
    return await read_topic(namesrv, TOPIC, "CG_DEV")


async def read_topic(namesrv: str, topic: str, group: str) -> list[bytes]:
    """The body of every message of ``topic`` pullable by queue offset, queue by queue."""
    got: list[bytes] = []
    reader = ClientInstance(namesrv)
    async with reader, PullConsumer(group, instance=reader) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset, 64)
                if result.status != PullStatus.FOUND:
                    break
                got += [m.body for m in result.messages]
                offset = result.next_begin_offset
    return got


async def test_dev_cluster_runs_controller_mode_and_restarts(tmp_path: Path) -> None:
    args, ports = dev_layout_on_free_ports()
    proc = ContainerProc("dev", DEV_CONFIG, tmp_path, args=args)
    namesrv = f"127.0.0.1:{ports[9876]}"
    try:
        with trio.fail_after(60):
            banner = await proc.start()
            assert any(line.startswith("controller n0 ") for line in banner)
            async with RemotingClient(name="dev-test") as client:
                admin = ControllerAdmin(client, f"127.0.0.1:{ports[9878]}")
                await wait_until(lambda: groups_ready(admin), 20, "both groups: a master and 2 in sync")
                # upstream's start lines, which scripts and test fixtures wait for: every replica's
                # once it is routed (a replica registers after the controller gave it a role)
                booted = re.compile(
                    rf"The broker\[broker-[ab], 127\.0\.0\.1:\d+\] boot success\. serializeType=JSON "
                    rf"and name server is {re.escape(namesrv)}$",
                    re.M,
                )

                async def all_booted() -> bool:
                    return len(booted.findall(proc.log_text())) == 4

                await wait_until(all_booted, 10, "four 'boot success' lines of brokers")
                log = proc.log_text()
                assert f"The Name Server boot success. serializeType=JSON, address {namesrv}\n" in log
                assert "The ControllerManager boot success. serializeType=JSON\n" in log
                first = [f"first-{i}".encode() for i in range(16)]

                async def all_read() -> bool:
                    return sorted(await send_and_read(namesrv, [])) == sorted(first)

                got = await send_and_read(namesrv, first)
                if sorted(got) != sorted(first):  # the last ones may still be on their way to the queues
                    await wait_until(all_read, 15, "every message readable")
                brokers = {m.brokerName for m in await _queues(namesrv)}
                assert brokers == {"broker-a", "broker-b"}

                before = await masters(admin)
                await proc.stop()
                # a graceful stop is not a failure: the controller going down with its brokers
                # must not try to elect new masters for them on its way out
                log = proc.log_text()
                shutdown = log[log.index("stopping: transport first") :]
                assert "elect" not in shutdown.lower(), shutdown
                # the brokers unregistered while the name server still served (upstream's order)
                unregistering = log[log.index("SIGTERM received") : log.index("stopping: transport first")]
                assert unregistering.count("[namesrv] unregister broker") == 4, unregistering
                assert "unregister from name server" not in log  # no failed unregistration
                # a fresh start and a graceful stop are quiet: no warning, no error (the replicas'
                # race for broker ids is logged at INFO)
                assert [ln for ln in log.splitlines() if " WARNING " in ln or " ERROR " in ln] == []
                await proc.start()
                await wait_until(lambda: groups_ready(admin), 20, "both groups back after a restart")
                assert await masters(admin) == before  # same master, same epoch
                # the controller's view comes first; clients can send once the restarted name
                # server has the masters' registrations again
                await wait_until(lambda: masters_routed(namesrv), 20, "both masters routed again")
                second = [f"second-{i}".encode() for i in range(8)]
                got = await send_and_read(namesrv, second)

                async def everything() -> bool:
                    return sorted(await send_and_read(namesrv, [])) == sorted(first + second)

                if sorted(got) != sorted(first + second):
                    await wait_until(everything, 15, "every message readable after the restart")
                # the restart was quiet too (a replica told to wait for its recorded master logs
                # that at INFO)
                log = proc.log_text()
                assert [ln for ln in log.splitlines() if " WARNING " in ln or " ERROR " in ln] == []
    finally:
        proc.close()


async def _queues(namesrv: str) -> list:
    instance = ClientInstance(namesrv)
    async with instance, PullConsumer("CG_DEV_Q", instance=instance) as consumer:
        return await consumer.fetch_subscribe_message_queues(TOPIC)
