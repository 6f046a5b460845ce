"""The addresses a broker is given: IPv6 (``brokerIP1 = "::1"``), every address
(``bindAddress = "::"``), a host name (``brokerIP1 = "localhost"``).

Over IPv6 every record stored has IPv6 hosts (the born host is the connection's peer, the store
host the broker's address), which move STORETIMESTAMP and BODY 12 bytes each; what a user reads
back -- pulls, the message by its offset id, offsets by time -- must see the times and hosts stored.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from pathlib import Path

import pytest
import trio

from client.admin import MQAdmin
from client.admin_messages import view_by_offset_id
from client.message import Message, MessageExt, PullStatus, SendStatus
from client.producer import Producer
from client.pull_consumer import PullConsumer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from tests.cluster.harness import quiet_ports
from tests.integration.broker_env import broker_env
from tests.integration.broker_requests import (
    create_topic_request,
    describe,
    messages,
    pull_request,
    send_request,
)
from tests.integration.test_client_real_broker import routed_queues
from tests.integration.test_container_process import start


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")

TOPIC = "TopicOverV6"


@needs_ipv6
async def test_messages_sent_over_ipv6_keep_their_store_times_and_hosts(tmp_path: Path) -> None:
    async with broker_env(tmp_path, brokerIP1="::1", brokerIP2="::1") as env:
        assert env.addr.startswith("::1:")
        broker_port = int(env.addr.rpartition(":")[2])
        before = int(time.time() * 1000)
        async with Producer("PG_V6", env.namesrv_addr) as producer:
            singles = [await producer.send(Message(TOPIC, b"one-%d" % i, keys=f"k{i}")) for i in range(3)]
            batch = await producer.send_batch([Message(TOPIC, b"many-%d" % i) for i in range(4)])
        after = int(time.time() * 1000)
        assert all(r.send_status is SendStatus.SEND_OK for r in [*singles, batch])
        # IPv6 store host: 16 address bytes in the offset message id (56 hex chars)
        assert {len(r.offset_msg_id) for r in singles} == {56}

        pulled: list[MessageExt] = []
        async with PullConsumer("PullV6", env.namesrv_addr) as puller:
            for mq in await routed_queues(puller, TOPIC):
                result = await puller.pull(mq, "*", 0, 32)
                assert result.status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG)
                pulled.extend(result.messages)
            assert sorted(m.body for m in pulled) == sorted(
                [b"one-%d" % i for i in range(3)] + [b"many-%d" % i for i in range(4)]
            )
            for m in pulled:
                assert before <= m.store_timestamp <= after, (m.body, m.store_timestamp)
                assert m.born_host.startswith("[::1]:"), m.born_host
                assert m.store_host == f"[::1]:{broker_port}"
                assert before <= m.born_timestamp <= after
            # offsets by time: the last message of a queue is found by its own store time
            last = max(pulled, key=lambda m: (m.store_timestamp, m.queue_offset))
            mq = next(q for q in await routed_queues(puller, TOPIC) if q.queueId == last.queue_id)
            assert await puller.search_offset(mq, last.store_timestamp + 1) == last.queue_offset + 1
            assert await puller.search_offset(mq, before) == 0

        # the message by its offset id, as `rmq-admin queryMsgById` fetches it
        viewed = await view_by_offset_id(env.client, singles[1].offset_msg_id, 5.0)
        assert viewed.body == b"one-1"
        assert viewed.keys == "k1"
        assert before <= viewed.store_timestamp <= after
        assert viewed.born_host.startswith("[::1]:")


@needs_ipv6
async def test_bind_address_of_every_address_serves_ipv4_and_ipv6_clients(tmp_path: Path) -> None:
    """``bindAddress = "::"`` is every address, IPv4 and IPv6, as upstream's Java servers bind it:
    before, the process listened on IPv6 only, so its broker (registering at 127.0.0.1) was never
    routed and no IPv4 client reached either server. An IPv4 client of the dual-stack socket is
    its IPv4 address in what the broker stores (4 address bytes, no IPv6 flag), as upstream's."""
    port = quiet_ports(3)
    config = tmp_path / "dual.toml"
    config.write_text(
        f"""
[nettyServer]
bindAddress = "::"

[namesrv]
listenPort = {port}
kvConfigPath = "{tmp_path}/kv.json"
configStorePath = "{tmp_path}/namesrv.properties"

[[broker]]
brokerClusterName = "DualCluster"
brokerName = "broker-dual"
brokerId = 0
brokerRole = "ASYNC_MASTER"
listenPort = {port + 1}
brokerIP1 = "127.0.0.1"
namesrvAddr = "127.0.0.1:{port}"
autoCreateTopicEnable = true
storePathRootDir = "{tmp_path}/store"
mappedFileSizeCommitLog = 1048576
""",
        encoding="utf-8",
    )
    proc = await start(config)
    try:
        await proc.read_until(re.compile(rb"^broker DualCluster_broker-dual_0 ", re.M))
        assert f"\nnamesrv [::]:{port}\n".encode() in proc.stdout  # the banner brackets IPv6 hosts
        broker = f"127.0.0.1:{port + 1}"
        async with RemotingClient() as client:
            admin = MQAdmin(client, f"127.0.0.1:{port}")
            with trio.fail_after(10):  # registered with the name server over IPv4
                while not (await admin.examine_broker_cluster_info()).brokerAddrTable:
                    await trio.sleep(0.05)
            create = await client.invoke(broker, create_topic_request(TOPIC, 1), timeout=5.0)
            assert create.code == ResponseCode.SUCCESS, describe(create)
            for addr, body in ((broker, b"over-v4"), (f"::1:{port + 1}", b"over-v6")):
                sent = await client.invoke(
                    addr, send_request(TOPIC, body, code=RequestCode.SEND_MESSAGE_V2), 5.0
                )
                assert sent.code == ResponseCode.SUCCESS, describe(sent)
            # the IPv6 name server address answers too
            routed = await client.invoke(f"::1:{port}", request(RequestCode.GET_BROKER_CLUSTER_INFO), 5.0)
            assert routed.code == ResponseCode.SUCCESS
            pulled = await client.invoke(broker, pull_request("G", TOPIC, 0, 0), 5.0)
            assert pulled.code == ResponseCode.SUCCESS, describe(pulled)
        stored = {m.body: m for m in messages(pulled)}
        assert set(stored) == {b"over-v4", b"over-v6"}
        assert stored[b"over-v4"].born_host.startswith("127.0.0.1:")
        assert stored[b"over-v4"].sys_flag & 0x30 == 0
        assert stored[b"over-v6"].born_host.startswith("[::1]:")
        assert stored[b"over-v6"].sys_flag & 0x30 == 0x10  # born host IPv6, store host 127.0.0.1
        assert all(m.store_timestamp > 0 for m in stored.values())
    finally:
        assert await proc.stop(signal.SIGTERM) == 0


async def test_a_broker_named_by_host_name_registers_the_name_and_stores_its_address(tmp_path: Path) -> None:
    """``brokerIP1`` may be a host name, as upstream's may (docker-compose service names): the
    name is the address registered and routed, the address it resolves to is every stored
    record's STOREHOST and in every offset message id. Before, the broker failed to start with
    ``illegal IP address string passed to inet_pton``."""
    async with broker_env(tmp_path, brokerIP1="localhost", brokerIP2="localhost") as env:
        port = int(env.addr.rpartition(":")[2])
        assert env.addr == f"localhost:{port}"
        async with Producer("PG_NAMED", env.namesrv_addr) as producer:
            sent = await producer.send(Message(TOPIC, b"named", keys="kn"))
        assert sent.send_status is SendStatus.SEND_OK
        assert sent.message_queue.brokerName == env.broker.broker_config.brokerName
        assert sent.offset_msg_id.startswith(f"7F000001{port:08X}")
        viewed = await view_by_offset_id(env.client, sent.offset_msg_id, 5.0)
        assert viewed.body == b"named"
        assert viewed.store_host == f"127.0.0.1:{port}"
        async with PullConsumer("PullNamed", env.namesrv_addr) as puller:
            queues = await routed_queues(puller, TOPIC)
            mq = next(q for q in queues if q.queueId == sent.message_queue.queueId)
            result = await puller.pull(mq, "*", 0, 32)
        assert [m.body for m in result.messages] == [b"named"]
        assert result.messages[0].store_host == f"127.0.0.1:{port}"
