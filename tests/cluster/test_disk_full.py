"""A full disk, for real: the default dev cluster (controller mode, a master and a slave per group)
with its data directory on a small tmpfs that another file then fills to the last byte.

The process must stay up (it used to die: of an OSError from a metadata write, and -- once that
was handled -- silently, of SIGBUS at a store into a hole of a sparse consume-queue or index map),
say what is refused once rather than at every attempt, keep every acknowledged message, and make
those messages pullable as soon as there is room again, also after a restart.

Needs a tmpfs mount (root, as in CI); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import trio

from client.admin_controller import ControllerAdmin
from client.instance import ClientInstance
from client.message import Message, MQClientError, SendStatus
from client.producer import Producer
from remoting.client import RemotingClient
from tests.cluster.harness import ContainerProc, wait_until
from tests.cluster.test_failover_dev_cluster import (
    DEV_CONFIG,
    dev_layout_on_free_ports,
    groups_ready,
    read_topic,
)
from tests.integration.storekit import fill, small_filesystem

#: room for the dev cluster's four 64 MiB commit-log files, their index slots and a little more
FS_SIZE = "300m"
TOPIC = "DiskFullTopic"


async def pullable(namesrv: str) -> Counter[bytes]:
    """Every message of the topic readable by queue offset: body -> times seen."""
    return Counter(await read_topic(namesrv, TOPIC, "CG_DISK_FULL"))


@pytest.mark.slow
async def test_a_full_disk_refuses_writes_and_loses_nothing(tmp_path: Path) -> None:
    args, ports = dev_layout_on_free_ports()
    namesrv = f"127.0.0.1:{ports[9876]}"
    with small_filesystem(tmp_path / "fs", FS_SIZE) as fs:
        proc = ContainerProc("dev", DEV_CONFIG, tmp_path, data_dir=fs / "data", args=args)
        try:
            with trio.fail_after(120):
                await proc.start()
                async with RemotingClient(name="disk-full-test") as client:
                    admin = ControllerAdmin(client, f"127.0.0.1:{ports[9878]}")
                    await wait_until(lambda: groups_ready(admin), 20, "both groups: a master and 2 in sync")
                instance = ClientInstance(namesrv, poll_name_server_interval=0.5)
                acked: list[bytes] = []
                refusals: list[str] = []
                async with instance, Producer("PG_DISK_FULL", instance=instance) as producer:
                    # every broker's commit-log file (64 MiB, reserved whole) and index exist ...
                    for i in range(16):
                        result = await producer.send(Message("WarmUpTopic", b"warm", keys=f"w{i}"))
                        assert result.send_status == SendStatus.SEND_OK
                    # ... then the disk fills up: new queues of a new topic get no file
                    filled = await trio.to_thread.run_sync(fill, fs / "filler")
                    assert filled > 0
                    assert os.statvfs(fs).f_bavail == 0
                    for i in range(600):
                        body = f"disk-full-{i}".encode()
                        try:
                            result = await producer.send(Message(TOPIC, body, keys=f"k{i}"))
                        except MQClientError as exc:
                            refusals.append(str(exc))
                            continue
                        if result.send_status == SendStatus.SEND_OK:
                            acked.append(body)
                # the messages are in the commit log (acknowledged), their queues could not be made
                assert acked, refusals[:3]
                await trio.sleep(2.5)  # dispatch retries every second meanwhile, the flushers too
                assert proc.running, proc.output()
                log = proc.log_text()
                assert "cannot make room for consume queue" in log, proc.output()
                # said once per broker, not at every retry
                assert log.count("dispatch stopped at commit-log offset") <= 4, proc.output()
                assert "Traceback" not in log, proc.output()
                assert set(await pullable(namesrv)).isdisjoint(acked)

                async def all_pullable() -> bool:
                    try:
                        seen = await pullable(namesrv)
                    except MQClientError:  # a restarted name server that has no route for it yet
                        return False
                    return all(seen.get(b) == 1 for b in acked)

                async def restart() -> None:
                    assert await proc.stop() == 0, proc.output()
                    await proc.start()
                    async with RemotingClient(name="disk-full-test") as client:
                        admin = ControllerAdmin(client, f"127.0.0.1:{ports[9878]}")
                        await wait_until(lambda: groups_ready(admin), 20, "both groups back after a restart")

                # a stop and a start on the full disk: both go through, nothing is lost
                await restart()
                await trio.sleep(1.5)
                assert proc.running, proc.output()
                # room again: every acknowledged message becomes pullable, exactly once
                (fs / "filler").unlink()
                await wait_until(all_pullable, 20, "every acknowledged message pullable", interval=0.5)
                # and after a restart with room (the stop writes the metadata it could not write before)
                await restart()
                await wait_until(all_pullable, 20, "every acknowledged message pullable after a restart")
                assert "Traceback" not in proc.log_text(), proc.output()
        finally:
            proc.close()
