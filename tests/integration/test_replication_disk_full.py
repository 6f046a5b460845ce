"""A slave whose disk fills up while its master goes on (auto-switch replication, real brokers in one
process, the slave's store on a small tmpfs that a file then fills).

The slave cannot create its next commit-log file: replication pauses -- said once -- instead of the
ENOSPC ending the broker (and with it the process), the master keeps taking sends, and once there
is room the slave catches up to the same bytes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from tests.integration.replication_kit import (
    FILE_SIZE,
    TOPIC,
    commit_log_bytes,
    replication_group,
    wait_until,
)
from tests.integration.storekit import fill, small_filesystem
from tests.integration.test_replication_auto import auto

QUEUES = 2


async def test_a_slave_out_of_disk_pauses_and_catches_up_once_there_is_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="store.ha.service")
    with small_filesystem(tmp_path / "fs", "16m") as fs:
        async with replication_group(tmp_path) as g:
            m = await g.start("m", **auto(1))
            s = await g.start("s", **auto(2), storePathRootDir=str(fs / "store"))
            await m.broker.replication.change_to_master(1)
            await g.create_topic(m.addr, queues=QUEUES)
            await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
            await g.send_ok(m.addr, b"before the disk fills")
            await wait_until(lambda: s.store.max_phy_offset == m.store.max_phy_offset, 10, "slave caught up")

            await trio.to_thread.run_sync(fill, fs / "filler")
            # more than the slave's file in use and the ones it prepared can take: it needs new files
            body = bytes(range(256)) * 40
            for i in range(24 * FILE_SIZE // len(body)):
                await g.send_ok(m.addr, body + b"%d" % i, queue_id=i % QUEUES)
            await trio.sleep(2.5)  # the slave retries every second meanwhile
            assert s.store.max_phy_offset < m.store.max_phy_offset
            assert not s.done.is_set()  # the slave broker runs on
            paused = [r for r in caplog.records if "paused: the local store refused" in r.getMessage()]
            assert 1 <= len([r for r in paused if r.levelno == logging.ERROR]) <= 2, paused

            (fs / "filler").unlink()
            end = m.store.max_phy_offset
            await wait_until(lambda: s.store.max_phy_offset == end, 15, f"slave reaching {end}")
            await m.store.flush()
            await s.store.flush()
            assert commit_log_bytes(fs / "store", 0, end) == commit_log_bytes(g.root / "m" / "store", 0, end)
            await wait_until(
                lambda: (
                    s.store.get_max_offset_in_queue(TOPIC, 0) == m.store.get_max_offset_in_queue(TOPIC, 0)
                ),
                10,
                "slave consume queue complete",
            )
