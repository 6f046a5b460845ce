"""The controller's broker liveness table: update rules, alive boundary, inactive scan (#10416)."""

from __future__ import annotations

from controller.heartbeat import (
    DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
    DEFAULT_ELECTION_PRIORITY,
    BrokerHeartbeatManager,
    BrokerIdentityInfo,
)

C, B = "c", "broker-a"


def beat(hb: BrokerHeartbeatManager, broker_id: int, now: float, **kw) -> None:
    hb.on_heartbeat(
        clusterName=C,
        brokerName=B,
        brokerAddr=f"127.0.0.{broker_id}:10911",
        brokerId=broker_id,
        now_ms=now,
        **kw,
    )


def test_first_heartbeat_defaults_like_upstream() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 100.0)
    info = hb.live_info(C, B, 1)
    assert info is not None
    assert info.heartbeatTimeoutMillis == DEFAULT_BROKER_CHANNEL_EXPIRED_TIME == 10_000
    assert (info.epoch, info.maxOffset, info.confirmOffset) == (-1, -1, -1)
    assert info.electionPriority == DEFAULT_ELECTION_PRIORITY == 2**31 - 1
    assert info.identity == BrokerIdentityInfo(C, B, 1)


def test_alive_boundary_is_last_plus_timeout_inclusive() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 1000.0, heartbeatTimeoutMillis=3000)
    assert hb.is_alive(C, B, 1, 4000.0)
    assert not hb.is_alive(C, B, 1, 4000.5)
    assert not hb.is_alive(C, B, 2, 1000.0), "unknown broker"
    assert not hb.is_alive(C, "other", 1, 1000.0)
    assert not hb.is_alive(C, B, None, 1000.0)


def test_scan_removes_expired_brokers_and_keeps_live_ones() -> None:
    """Both directions of the scan condition (upstream #10416: the scan must actually remove)."""
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 0.0, heartbeatTimeoutMillis=1000)
    beat(hb, 2, 0.0, heartbeatTimeoutMillis=1000)
    beat(hb, 2, 900.0, heartbeatTimeoutMillis=1000)
    assert hb.scan_inactive(1000.0) == [], "exactly at the timeout: still alive"
    assert len(hb) == 2
    expired = hb.scan_inactive(1000.5)
    assert [e.brokerId for e in expired] == [1]
    assert hb.live_info(C, B, 1) is None
    assert not hb.is_alive(C, B, 1, 1000.5)
    assert hb.is_alive(C, B, 2, 1000.5)
    assert hb.scan_inactive(1900.0) == []
    assert [e.brokerId for e in hb.scan_inactive(1901.0)] == [2]
    assert len(hb) == 0
    assert hb.scan_inactive(10**9) == [], "repeated scans keep working on an empty table"


def test_a_removed_broker_comes_back_with_a_new_heartbeat() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 0.0, heartbeatTimeoutMillis=10, epoch=5, maxOffset=100)
    hb.scan_inactive(100.0)
    beat(hb, 1, 200.0, heartbeatTimeoutMillis=10, epoch=1, maxOffset=7)
    info = hb.live_info(C, B, 1)
    assert (info.epoch, info.maxOffset) == (1, 7), "a new entry starts from the new values"


def test_update_rules_epoch_and_offsets_only_move_forward() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 0.0, epoch=2, maxOffset=100, confirmOffset=90, electionPriority=5, heartbeatTimeoutMillis=10)
    beat(hb, 1, 1.0, epoch=1, maxOffset=500, confirmOffset=490, electionPriority=3, heartbeatTimeoutMillis=20)
    info = hb.live_info(C, B, 1)
    assert (info.epoch, info.maxOffset, info.confirmOffset) == (2, 100, 90), "older epoch ignored"
    assert (info.electionPriority, info.heartbeatTimeoutMillis, info.lastUpdateTimestamp) == (3, 20, 1.0)
    beat(hb, 1, 2.0, epoch=2, maxOffset=50, confirmOffset=40)
    assert (info.epoch, info.maxOffset, info.confirmOffset) == (2, 100, 90), "smaller offset ignored"
    beat(hb, 1, 3.0, epoch=2, maxOffset=150, confirmOffset=140)
    assert (info.epoch, info.maxOffset, info.confirmOffset) == (2, 150, 140)
    beat(hb, 1, 4.0, epoch=3, maxOffset=10, confirmOffset=5)
    assert (info.epoch, info.maxOffset, info.confirmOffset) == (3, 10, 5), (
        "newer epoch wins even with smaller offset"
    )


def test_connection_close_removes_every_broker_heard_on_it() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 0.0, conn_id="conn-A")
    beat(hb, 2, 0.0, conn_id="conn-A")
    beat(hb, 3, 0.0, conn_id="conn-B")
    gone = hb.on_connection_closed("conn-A")
    assert sorted(g.brokerId for g in gone) == [1, 2]
    assert [e.brokerId for e in hb.entries()] == [3]
    assert hb.on_connection_closed("conn-A") == []


def test_reconnected_broker_is_tracked_on_its_new_connection() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 0.0, conn_id="old")
    beat(hb, 1, 1.0, conn_id="new")
    assert hb.on_connection_closed("old") == []
    assert [g.brokerId for g in hb.on_connection_closed("new")] == [1]


def test_active_brokers_num_counts_live_replicas_per_set() -> None:
    hb = BrokerHeartbeatManager()
    beat(hb, 1, 0.0, heartbeatTimeoutMillis=100)
    beat(hb, 2, 0.0, heartbeatTimeoutMillis=1000)
    hb.on_heartbeat(clusterName=C, brokerName="broker-b", brokerAddr="x:1", brokerId=1, now_ms=0.0)
    assert hb.active_brokers_num(500.0) == {C: {B: 1, "broker-b": 1}}
