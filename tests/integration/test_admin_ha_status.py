"""``rmq-admin haStatus`` / GET_BROKER_HA_STATUS (907) on real broker pairs in one process: a
master's slave table, a slave's link to its master, classic and auto-switch replication."""

from __future__ import annotations

import datetime
import math
import struct
import time
from pathlib import Path

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.protocol.broker import HARuntimeInfo
from store.config import BrokerRole
from tests.integration.broker_env import CLUSTER
from tests.integration.broker_requests import describe
from tests.integration.replication_kit import Group, Running, replication_group, wait_until
from tests.integration.test_replication_auto import auto


async def cli(*args: str) -> Result:
    """Run the click command in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def ha_status(g: Group, broker: Running) -> HARuntimeInfo:
    response = await g.call(broker.addr, request(RequestCode.GET_BROKER_HA_STATUS))
    assert response.code == ResponseCode.SUCCESS, describe(response)
    return HARuntimeInfo.decode(response.body_bytes)


async def send_for_two_seconds(g: Group, master: Running) -> None:
    """Sends with no pause across two whole seconds of the clock: the last whole second before the
    status request carried bytes whenever the status is asked right after."""
    end = math.floor(trio.current_time()) + 2
    i = 0
    while trio.current_time() < end:
        await g.send_ok(master.addr, b"rate %d " % i + bytes(2000))
        i += 1


async def test_auto_switch_master_and_slave_status(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        m = await g.start("m", **auto(1, allAckInSyncStateSet=True))
        s = await g.start("s", **auto(2, allAckInSyncStateSet=True))
        # no role yet: nothing to describe, and the answer says why
        response = await g.call(m.addr, request(RequestCode.GET_BROKER_HA_STATUS))
        assert response.code == ResponseCode.SYSTEM_ERROR, describe(response)
        assert "no replication role yet" in (response.remark or ""), response.remark

        await m.broker.replication.change_to_master(1)
        await g.create_topic(m.addr, queues=2)
        await s.broker.replication.change_to_slave(m.ha_addr, 1, master_addr=m.addr)
        await wait_until(lambda: m.broker.replication.sync_state_set == {1, 2}, 10, "SyncStateSet {1, 2}")
        await send_for_two_seconds(g, m)

        info = await ha_status(g, m)
        end = m.store.max_phy_offset
        assert (info.master, info.masterCommitLogMaxOffset, info.inSyncSlaveNums) == (True, end, 1)
        (row,) = info.haConnectionInfo
        host, _, port = row.addr.rpartition(":")
        assert (host, port.isdigit()) == ("127.0.0.1", True), row.addr
        # all-ack: the slave acknowledged every message before its producer heard SUCCESS
        assert (row.slaveAckOffset, row.diff, row.inSync, row.transferFromWhere) == (end, 0, True, end)
        assert row.transferredByteInSecond > 2000, row

        slave_info = await ha_status(g, s)
        assert not slave_info.master
        c = slave_info.haClientRuntimeInfo
        assert c.masterAddr == m.ha_addr
        assert c.maxOffset == s.store.max_phy_offset == end
        assert c.transferredByteInSecond > 2000, c
        now_ms = time.time() * 1000
        assert now_ms - 3000 < c.lastReadTimestamp <= now_ms + 50, (c.lastReadTimestamp, now_ms)
        assert now_ms - 3000 < c.lastWriteTimestamp <= now_ms + 50, (c.lastWriteTimestamp, now_ms)

        # the slave leaves: no connection, and once the SyncStateSet shrank no in-sync slave
        await g.stop(s)
        await wait_until(lambda: m.broker.replication.sync_state_set == {1}, 5, "SyncStateSet shrinks")
        info = await ha_status(g, m)
        assert (info.haConnectionInfo, info.inSyncSlaveNums) == ([], 0)


async def test_classic_status_and_the_command_lines(tmp_path: Path) -> None:
    async with replication_group(tmp_path) as g:
        master = await g.start("m", brokerRole=BrokerRole.ASYNC_MASTER, haMaxGapNotInSync=10_000)
        await g.create_topic(master.addr, queues=1)
        slave = await g.start("s", brokerRole=BrokerRole.SLAVE, brokerId=1)
        classic = master.broker.replication.classic
        assert classic is not None
        # nothing stored yet: a slave that reported offset 0 is in sync
        await wait_until(lambda: classic.slave_acks == [0], 10, "the slave reported offset 0")
        info = await ha_status(g, master)
        assert [(r.slaveAckOffset, r.diff, r.inSync) for r in info.haConnectionInfo] == [(0, 0, True)]
        assert info.inSyncSlaveNums == 1
        for i in range(30):
            await g.send_ok(master.addr, b"classic %d " % i + bytes(1000))
        end = master.store.max_phy_offset
        await wait_until(lambda: classic.slave_acks == [end], 10, "the slave acknowledged everything")

        # a second "slave" that reported an offset far behind: connected, but falls behind
        host, _, port = master.ha_addr.rpartition(":")
        laggard = await trio.open_tcp_stream(host, int(port))
        await laggard.send_all(struct.pack(">q", 1000))
        laggard_host, laggard_port = laggard.socket.getsockname()[:2]
        laggard_addr = f"{laggard_host}:{laggard_port}"
        await wait_until(lambda: sorted(classic.slave_acks) == [1000, end], 5, "the laggard reported")

        info = await ha_status(g, master)
        assert (info.master, info.masterCommitLogMaxOffset, info.inSyncSlaveNums) == (True, end, 1)
        rows = {row.addr: row for row in info.haConnectionInfo}
        lag = rows.pop(laggard_addr)
        assert (lag.slaveAckOffset, lag.diff, lag.inSync) == (1000, end - 1000, False)
        (good,) = rows.values()
        assert (good.slaveAckOffset, good.diff, good.inSync) == (end, 0, True)

        # mqadmin's lines: -c lists the cluster's masters, -b any broker (here the slave)
        result = await cli("haStatus", "-n", g.namesrv_addr, "-c", CLUSTER)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[:5] == [
            "",
            f"#MasterAddr\t{master.addr}",
            f"#MasterCommitLogMaxOffset\t{end}",
            "#SlaveNum\t2",
            "#InSyncSlaveNum\t1",
        ], result.output
        assert lines[5].split() == [
            "#SlaveAddr",
            "#SlaveAckOffset",
            "#Diff",
            "#TransferSpeed(KB/s)",
            "#Status",
            "#TransferFromWhere",
        ]
        by_addr = {line.split()[0]: line for line in lines[6:]}
        assert by_addr[laggard_addr].split()[1:3] == ["1000", str(end - 1000)]
        assert by_addr[laggard_addr].split()[4:6] == ["Fall", "Behind"], by_addr[laggard_addr]
        assert "OK" in by_addr[good.addr].split(), by_addr[good.addr]

        result = await cli("haStatus", "-n", g.namesrv_addr, "-b", slave.addr)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[1:3] == [f"#MasterAddr\t{master.ha_addr}", f"#CommitLogMaxOffset\t{end}"], result.output
        assert [line.split("\t")[0] for line in lines[3:]] == [
            "#TransferSpeed(KB/s)",
            "#LastReadTime",
            "#LastWriteTime",
            "#MasterFlushOffset",
        ]
        read_at = datetime.datetime.strptime(lines[4].split("\t")[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        assert abs(time.time() - read_at) < 10, lines[4]  # local time, with milliseconds

        result = await cli("haStatus", "-n", g.namesrv_addr)
        assert result.exit_code == 2, result.output
        assert "-b/--brokerAddr or -c/--clusterName" in result.output
        await laggard.aclose()
