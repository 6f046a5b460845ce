"""Classic replication across real ``rmq-container`` processes: a SYNC_MASTER with its name server in
one process, its slave in another. Under continuous sends the slave process is SIGKILLed mid-transfer
and restarted on its data directory; it resumes from its recovered offset without a gap. At the end
(both stopped), the slave's commit log on disk equals the master's byte for byte and its consume-queue
files equal the master's.
"""

from __future__ import annotations

from pathlib import Path

import trio

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.protocol.common import KVTable
from tests.cluster.harness import ContainerProc, call, free_ports, toml_text, wait_until
from tests.integration.broker_requests import send_request

TOPIC = "ClusterReplTopic"
FILE_SIZE = 1024 * 1024
QUEUES = 4


def _broker(name: str, port: int, namesrv: str, **keys: object) -> dict[str, object]:
    return {
        "brokerClusterName": "ReplCluster",
        "brokerName": "broker-r",
        "listenPort": port,
        "brokerIP1": "127.0.0.1",
        "brokerIP2": "127.0.0.1",
        "namesrvAddr": namesrv,
        "storePathRootDir": f"${{rmq.data.dir}}/{name}",
        "mappedFileSizeCommitLog": FILE_SIZE,
        "maxHashSlotNum": 1000,
        "maxIndexNum": 4000,
        "haSendHeartbeatInterval": 500,
        "slaveTimeout": 1000,
        **keys,
    }


async def _max_offset(client: RemotingClient, addr: str) -> int:
    response = await call(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    assert response.code == ResponseCode.SUCCESS
    return int(KVTable.decode(response.body_bytes).table["commitLogMaxOffset"])


def _commit_log(root: Path, end: int) -> bytes:
    out = bytearray()
    for path in sorted((root / "commitlog").iterdir()):
        start = int(path.name)
        if start < end:
            out += path.read_bytes()[: end - start]
    return bytes(out)


def _queue_files(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue" / TOPIC
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


async def test_slave_process_killed_mid_transfer_resumes_without_gap(tmp_path: Path) -> None:
    taken: set[int] = set()
    (ns_port,) = free_ports(1, taken=taken)
    m_port, s_port = free_ports(2, pairs=True, taken=taken)
    namesrv = f"127.0.0.1:{ns_port}"
    netty = {"nettyServer": {"bindAddress": "127.0.0.1"}}
    m_conf = tmp_path / "master.toml"
    m_conf.write_text(
        toml_text(
            {
                **netty,
                "namesrv": {"listenPort": ns_port, "kvConfigPath": "${rmq.data.dir}/namesrv/kv.json"},
            },
            [_broker("m", m_port, namesrv, brokerId=0, brokerRole="SYNC_MASTER")],
        )
    )
    s_conf = tmp_path / "slave.toml"
    s_conf.write_text(toml_text(netty, [_broker("s", s_port, namesrv, brokerId=1, brokerRole="SLAVE")]))
    data = tmp_path / "data"
    master = ContainerProc("master", m_conf, tmp_path, data_dir=data)
    slave = ContainerProc("slave", s_conf, tmp_path, data_dir=data)
    m_addr, s_addr = f"127.0.0.1:{m_port}", f"127.0.0.1:{s_port}"
    codes: list[int] = []
    try:
        await master.start()
        await slave.start()
        async with RemotingClient(name="repl-cluster") as client:
            create = await call(
                client,
                m_addr,
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": TOPIC,
                    "defaultTopic": "TBW102",
                    "readQueueNums": QUEUES,
                    "writeQueueNums": QUEUES,
                    "perm": 6,
                    "topicFilterType": "SINGLE_TAG",
                    "order": "false",
                },
            )
            assert create.code == ResponseCode.SUCCESS, create.remark

            async def first_sync() -> bool:
                r = await client.invoke(m_addr, send_request(TOPIC, b"hello"), 5)
                return r.code == ResponseCode.SUCCESS

            await wait_until(first_sync, 20, "the slave to connect (a SYNC_MASTER send succeeding)")

            stop_sending = trio.Event()

            async def sender(k: int) -> None:
                i = 0
                while not stop_sending.is_set():
                    body = bytes([k]) * (200 + (i * 7919) % 4000)
                    r = await client.invoke(m_addr, send_request(TOPIC, body, queue_id=(k + i) % QUEUES), 5)
                    codes.append(r.code)
                    i += 1

            async with trio.open_nursery() as nursery:
                for k in range(6):
                    nursery.start_soon(sender, k)

                async def slave_progress() -> bool:
                    return await _max_offset(client, s_addr) > 2 * FILE_SIZE

                await wait_until(slave_progress, 60, "transfer under way")
                await slave.kill()  # SIGKILL, mid-transfer
                killed_at = len(codes)
                await trio.sleep(0.5)
                await slave.start()
                restarted_at = len(codes)

                async def resumed() -> bool:
                    return len(codes) > restarted_at + 200 and codes[-1] == ResponseCode.SUCCESS

                await wait_until(resumed, 60, "sends succeeding again after the restart")

                async def several_files() -> bool:
                    return await _max_offset(client, m_addr) > 4 * FILE_SIZE

                await wait_until(several_files, 60, "the master's log spanning several files")
                stop_sending.set()

            end = await _max_offset(client, m_addr)

            async def caught_up() -> bool:
                return await _max_offset(client, s_addr) == end

            await wait_until(caught_up, 30, "the slave to catch up")
            # messages sent while the slave was away are stored anyway (SLAVE_NOT_AVAILABLE)
            assert set(codes) <= {
                ResponseCode.SUCCESS,
                ResponseCode.SLAVE_NOT_AVAILABLE,
                ResponseCode.FLUSH_SLAVE_TIMEOUT,
            }
            assert codes[:killed_at].count(ResponseCode.SUCCESS) > 100
            m_root, s_root = data / "m", data / "s"

            async def same_queues() -> bool:
                return _queue_files(m_root) == _queue_files(s_root)

            await wait_until(same_queues, 10, "slave consume queues equal to the master's")
        assert await master.stop() == 0
        assert await slave.stop() == 0
        assert end > 3 * FILE_SIZE
        assert _commit_log(s_root, end) == _commit_log(m_root, end), "slave commit log differs"
        assert _queue_files(s_root) == _queue_files(m_root)
    finally:
        slave.close()
        master.close()
