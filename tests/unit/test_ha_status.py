"""The pieces of ``haStatus``: the per-second byte meter of an HA link and mqadmin's output lines."""

from __future__ import annotations

from client.admin_controller_cli import ha_status_lines
from remoting.protocol.broker import HAClientRuntimeInfo, HAConnectionRuntimeInfo, HARuntimeInfo
from store.ha.streams import TransferMeter


def test_the_meter_reports_the_last_whole_second() -> None:
    meter = TransferMeter()
    assert meter.per_second(10.0) == 0
    meter.add(100, 10.1)
    meter.add(50, 10.9)
    assert meter.per_second(10.95) == 0  # the second is not over yet; the one before moved nothing
    assert meter.per_second(11.2) == 150
    meter.add(7, 11.5)
    assert meter.per_second(11.6) == 150  # still the last whole second's figure
    assert meter.per_second(12.0) == 7
    assert meter.per_second(13.0) == 0  # a whole second without any bytes
    meter.add(1, 20.0)
    assert meter.per_second(20.5) == 0  # the seconds before were idle, not the old count
    assert meter.per_second(21.0) == 1


def test_master_lines() -> None:
    info = HARuntimeInfo(
        master=True,
        masterCommitLogMaxOffset=5000,
        inSyncSlaveNums=1,
        haConnectionInfo=[
            HAConnectionRuntimeInfo(
                addr="127.0.0.1:40001",
                slaveAckOffset=5000,
                diff=0,
                inSync=True,
                transferredByteInSecond=2048,
                transferFromWhere=5000,
            ),
            HAConnectionRuntimeInfo(
                addr="127.0.0.1:40002", slaveAckOffset=100, diff=4900, transferFromWhere=900
            ),
        ],
    )
    lines = ha_status_lines("127.0.0.1:10911", info)
    assert lines[:5] == [
        "",
        "#MasterAddr\t127.0.0.1:10911",
        "#MasterCommitLogMaxOffset\t5000",
        "#SlaveNum\t2",
        "#InSyncSlaveNum\t1",
    ]
    # mqadmin's printf formats, applied with Python's printf-style operator
    head = "%-32s  %-16s %16s %16s %16s %16s"
    row = "%-32s  %-16d %16d %16.2f %16s %16d"
    titles = (
        "#SlaveAddr",
        "#SlaveAckOffset",
        "#Diff",
        "#TransferSpeed(KB/s)",
        "#Status",
        "#TransferFromWhere",
    )
    assert lines[5] == head % titles
    assert lines[6] == row % ("127.0.0.1:40001", 5000, 0, 2.0, "OK", 5000)
    assert lines[7] == row % ("127.0.0.1:40002", 100, 4900, 0.0, "Fall Behind", 900)


def test_slave_lines() -> None:
    info = HARuntimeInfo(
        haClientRuntimeInfo=HAClientRuntimeInfo(
            masterAddr=None, transferredByteInSecond=512, maxOffset=77, masterFlushOffset=3
        )
    )
    lines = ha_status_lines("127.0.0.1:10915", info)
    assert lines[0] == ""
    assert lines[1:4] == ["#MasterAddr\tnull", "#CommitLogMaxOffset\t77", "#TransferSpeed(KB/s)\t0.50"]
    assert lines[4].startswith("#LastReadTime\t19")  # never read: the epoch, as mqadmin prints 0
    assert lines[4][-4:] == ",000"
    assert lines[6] == "#MasterFlushOffset\t3"
