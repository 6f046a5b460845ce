"""RouteInfoManager: registration, liveness, removal, routes, acting master (sans-IO)."""

from __future__ import annotations

import json
import logging

import pytest

from namesrv.config import NamesrvConfig
from namesrv.routeinfo import DEFAULT_BROKER_CHANNEL_EXPIRED_TIME, RouteInfoManager
from remoting.protocol.common import DataVersion, PermName, TopicConfig, TopicConfigSerializeWrapper
from remoting.protocol.namesrv import QueueData, TopicRouteData

CLUSTER = "DefaultCluster"
MASTER = "127.0.0.1:10911"
SLAVE = "127.0.0.1:10921"
SLAVE2 = "127.0.0.1:10931"
SYS = "SELF_TEST_TOPIC"


def wrapper(*topics: TopicConfig, counter: int = 1, state: int = 0) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topicConfigTable={t.topicName: t for t in topics},
        dataVersion=DataVersion(stateVersion=state, timestamp=1000, counter=counter),
    )


def register(
    rim: RouteInfoManager,
    addr: str,
    broker_id: int,
    *topics: TopicConfig,
    name: str = "broker-a",
    now: int = 0,
    counter: int = 1,
    conn: object = None,
    acting: bool | None = None,
    timeout: int | None = None,
    state: int = 0,
    exact: bool = False,
):
    """Register like a broker does: its own broker-name topic is always in the table (upstream
    refuses a first registration that carries exactly one topic)."""
    if not exact:
        topics = (TopicConfig(topicName=SYS), *topics)
    return rim.register_broker(
        clusterName=CLUSTER,
        brokerAddr=addr,
        brokerName=name,
        brokerId=broker_id,
        haServerAddr=addr.replace("109", "209"),
        now_ms=now,
        topicConfigWrapper=wrapper(*topics, counter=counter, state=state),
        filterServerList=[],
        timeoutMillis=timeout,
        enableActingMaster=acting,
        connection_id=conn,
    )


def user_topics(rim: RouteInfoManager) -> list[str]:
    return sorted(t for t in rim.get_all_topic_list().topicList if t != SYS)


def cfg(**kw: object) -> NamesrvConfig:
    return NamesrvConfig(**kw)  # type: ignore[arg-type]


T1 = TopicConfig(topicName="T1", readQueueNums=4, writeQueueNums=4)


def test_master_registration_creates_route_cluster_and_member_group() -> None:
    rim = RouteInfoManager(cfg())
    result = register(rim, MASTER, 0, T1)
    assert result is not None
    assert result.masterAddr is None
    assert result.haServerAddr is None
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert [(b.brokerName, b.brokerAddrs) for b in route.brokerDatas] == [("broker-a", {0: MASTER})]
    assert route.queueDatas == [QueueData(brokerName="broker-a", readQueueNums=4, writeQueueNums=4, perm=6)]
    info = rim.get_all_cluster_info()
    assert info.clusterAddrTable == {CLUSTER: ["broker-a"]}
    assert info.brokerAddrTable["broker-a"].brokerAddrs == {0: MASTER}
    group = rim.get_broker_member_group(CLUSTER, "broker-a")
    assert group.brokerAddrs == {0: MASTER}
    assert user_topics(rim) == ["T1"]
    assert sorted(rim.get_topics_by_cluster(CLUSTER).topicList) == [SYS, "T1"]
    assert rim.get_topics_by_cluster("nope").topicList == []


def test_slave_gets_master_address_and_ha_address() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1)
    result = register(rim, SLAVE, 1, T1)
    assert result is not None
    assert result.masterAddr == MASTER
    assert result.haServerAddr == "127.0.0.1:20911"
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {0: MASTER, 1: SLAVE}


def test_slave_without_live_master_gets_no_master_address() -> None:
    rim = RouteInfoManager(cfg())
    result = register(rim, SLAVE, 1, T1)
    assert result is not None
    assert result.masterAddr is None


def test_slave_registration_does_not_change_topics() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1)
    register(
        rim,
        SLAVE,
        1,
        TopicConfig(topicName="T1", readQueueNums=1, writeQueueNums=1),
        TopicConfig(topicName="T2"),
    )
    assert user_topics(rim) == ["T1"]
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].readQueueNums == 4


def test_unchanged_data_version_keeps_topic_configs() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, counter=5)
    changed = TopicConfig(topicName="T1", readQueueNums=8, writeQueueNums=8)
    register(rim, MASTER, 0, changed, TopicConfig(topicName="NEW"), counter=5)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].readQueueNums == 4
    assert rim.pickup_topic_route_data("NEW") is not None  # topics new to the group still added
    register(rim, MASTER, 0, changed, counter=6)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].readQueueNums == 8


def test_heartbeat_keeps_a_broker_alive_and_scan_expires_silent_ones() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, now=0)
    register(rim, SLAVE, 1, T1, now=0, timeout=10_000)
    assert rim.scan_not_active_brokers(10_000).removed == []
    assert rim.update_broker_timestamp(CLUSTER, MASTER, 100_000)
    assert not rim.update_broker_timestamp(CLUSTER, "1.2.3.4:1", 100_000)
    result = rim.scan_not_active_brokers(10_001)
    assert [(r.brokerAddr, r.brokerId) for r in result.removed] == [(SLAVE, 1)]
    assert [e.addr.brokerAddr for e in result.expired] == [SLAVE]
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {0: MASTER}
    # The master was refreshed at 100 s: alive until 100 s + 120 s.
    assert rim.scan_not_active_brokers(100_000 + DEFAULT_BROKER_CHANNEL_EXPIRED_TIME).removed == []
    gone = rim.scan_not_active_brokers(100_001 + DEFAULT_BROKER_CHANNEL_EXPIRED_TIME)
    assert [r.brokerAddr for r in gone.removed] == [MASTER]
    assert rim.pickup_topic_route_data("T1") is None
    assert rim.get_all_cluster_info().clusterAddrTable == {}
    assert rim.get_all_topic_list().topicList == []


def test_query_data_version_reports_change_and_refreshes() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, counter=3, now=0)
    same = DataVersion(stateVersion=0, timestamp=1000, counter=3)
    assert not rim.is_broker_topic_config_changed(CLUSTER, MASTER, same)
    assert rim.is_broker_topic_config_changed(CLUSTER, MASTER, DataVersion(timestamp=1000, counter=4))
    assert rim.is_broker_topic_config_changed(CLUSTER, SLAVE, same)  # unknown broker
    assert rim.query_broker_data_version(CLUSTER, MASTER) == same
    assert rim.query_broker_data_version(CLUSTER, SLAVE) is None


def test_connection_close_removes_every_broker_of_that_connection() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, conn="c1")
    register(rim, SLAVE, 1, T1, conn="c1")
    register(rim, "127.0.0.1:11911", 0, T1, name="broker-b", conn="c2")
    assert rim.on_connection_closed("unknown").removed == []
    result = rim.on_connection_closed("c1")
    assert sorted(r.brokerAddr for r in result.removed) == [MASTER, SLAVE]
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert [b.brokerName for b in route.brokerDatas] == ["broker-b"]
    assert rim.get_all_cluster_info().clusterAddrTable == {CLUSTER: ["broker-b"]}


def test_reregistration_over_new_connection_moves_ownership() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, conn="old")
    register(rim, MASTER, 0, T1, conn="new")
    assert rim.on_connection_closed("old").removed == []
    assert rim.pickup_topic_route_data("T1") is not None


def test_unregister_and_role_switch_keep_one_id_per_address() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1)
    register(rim, SLAVE, 1, T1)
    rim.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {1: SLAVE}
    register(rim, SLAVE, 0, T1, counter=2)  # the slave became master at the same address
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {0: SLAVE}


def test_lower_state_version_cannot_take_over_an_id() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, state=5)
    result = register(rim, "127.0.0.1:9999", 0, T1, state=4)
    assert result is not None
    assert result.masterAddr is None
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {0: MASTER}
    assert rim.update_broker_timestamp(CLUSTER, "127.0.0.1:9999", 1) is False
    register(rim, "127.0.0.1:9999", 0, T1, state=6)
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {0: "127.0.0.1:9999"}


def test_single_topic_registration_before_full_registration_is_refused() -> None:
    rim = RouteInfoManager(cfg())
    assert register(rim, MASTER, 0, T1, exact=True) is None
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {}
    assert register(rim, MASTER, 0, T1) is not None
    # Once registered, single-topic (incremental) registrations are fine.
    assert register(rim, MASTER, 0, TopicConfig(topicName="T3"), counter=2, exact=True) is not None
    assert rim.pickup_topic_route_data("T3") is not None


def test_delete_topic_everywhere_or_per_cluster() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, TopicConfig(topicName="T2"))
    rim.register_broker(
        clusterName="Other",
        brokerAddr="127.0.0.1:12911",
        brokerName="broker-x",
        brokerId=0,
        haServerAddr=None,
        now_ms=0,
        topicConfigWrapper=wrapper(T1, TopicConfig(topicName="T9")),
    )
    rim.delete_topic("T1", CLUSTER)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert [b.brokerName for b in route.brokerDatas] == ["broker-x"]
    rim.delete_topic("T1", "Other")
    assert rim.pickup_topic_route_data("T1") is None
    rim.delete_topic("T2")
    assert user_topics(rim) == ["T9"]
    rim.delete_topic("T9", "no-such-cluster")
    assert user_topics(rim) == ["T9"]


def test_delete_topic_with_broker_registration() -> None:
    rim = RouteInfoManager(cfg(deleteTopicWithBrokerRegistration=True))
    register(rim, MASTER, 0, T1, TopicConfig(topicName="T2"), counter=1)
    register(rim, MASTER, 0, T1, counter=2)
    assert user_topics(rim) == ["T1"]


def test_retry_topic_route_is_served_when_registered() -> None:
    rim = RouteInfoManager(cfg())
    retry = TopicConfig(topicName="%RETRY%G1", readQueueNums=1, writeQueueNums=1)
    register(rim, MASTER, 0, T1, retry)
    route = rim.pickup_topic_route_data("%RETRY%G1")
    assert route is not None
    assert route.queueDatas[0].readQueueNums == 1
    assert route.brokerDatas[0].brokerAddrs == {0: MASTER}
    assert rim.pickup_topic_route_data("%RETRY%G2") is None


def test_route_body_styles_and_cache_invalidation() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1)
    register(rim, SLAVE, 1, T1)
    fast = rim.route_body("T1", standard=False)
    std = rim.route_body("T1", standard=True)
    assert fast is not None
    assert b'{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}' in fast
    assert std is not None
    assert json.loads(std)["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER, "1": SLAVE}
    assert TopicRouteData.decode(fast) == TopicRouteData.decode(std)
    assert rim.route_body("T1", standard=False) is fast  # cached
    rim.wipe_write_perm_of_broker("broker-a")
    fresh = rim.route_body("T1", standard=False)
    assert fresh is not None
    assert b'"perm":4' in fresh
    assert rim.route_body("nope", standard=True) is None


def test_wipe_and_add_write_perm_count_topics() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1, TopicConfig(topicName="T2", perm=PermName.PERM_READ))
    assert rim.wipe_write_perm_of_broker("broker-a") == 3
    assert {qd.perm for t in ("T1", "T2") for qd in rim.pickup_topic_route_data(t).queueDatas} == {4}  # type: ignore[union-attr]
    assert rim.add_write_perm_of_broker("broker-a") == 3
    assert {qd.perm for t in ("T1", "T2") for qd in rim.pickup_topic_route_data(t).queueDatas} == {6}  # type: ignore[union-attr]
    assert rim.wipe_write_perm_of_broker("nope") == 0


def test_register_topic_in_namesrv_needs_known_brokers() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1)
    qd = QueueData(brokerName="broker-a", readQueueNums=2, writeQueueNums=2, perm=6)
    assert rim.register_topic("X", [qd])
    assert rim.pickup_topic_route_data("X").queueDatas == [qd]  # type: ignore[union-attr]
    assert not rim.register_topic(
        "Y", [QueueData(brokerName="ghost", readQueueNums=1, writeQueueNums=1, perm=6)]
    )
    assert rim.pickup_topic_route_data("Y") is None


def test_system_topic_list_names_clusters_and_brokers() -> None:
    rim = RouteInfoManager(cfg())
    register(rim, MASTER, 0, T1)
    tl = rim.get_system_topic_list()
    assert tl.topicList == [CLUSTER, "broker-a"]
    assert tl.brokerAddr == MASTER


# --- slave acting master ------------------------------------------------------------------


def acting_group(rim: RouteInfoManager) -> None:
    register(rim, MASTER, 0, T1, acting=True)
    register(rim, SLAVE, 1, T1, acting=True)
    register(rim, SLAVE2, 2, T1, acting=True)


def test_master_loss_wipes_write_perm_and_route_shows_acting_master() -> None:
    rim = RouteInfoManager(cfg(supportActingMaster=True))
    acting_group(rim)
    rim.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].perm == PermName.PERM_READ
    assert route.brokerDatas[0].brokerAddrs == {0: SLAVE, 2: SLAVE2}
    # Member group shows the raw ids.
    assert rim.get_broker_member_group(CLUSTER, "broker-a").brokerAddrs == {1: SLAVE, 2: SLAVE2}
    assert rim.min_broker_id("broker-a") == 1


def test_acting_master_rewrite_is_off_by_default_and_skips_member_topic() -> None:
    rim = RouteInfoManager(cfg())
    acting_group(rim)
    rim.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.brokerDatas[0].brokerAddrs == {1: SLAVE, 2: SLAVE2}
    rim2 = RouteInfoManager(cfg(supportActingMaster=True))
    member = TopicConfig(topicName="rmq_sys_SYNC_BROKER_MEMBER_broker-a", perm=PermName.PERM_INHERIT)
    register(rim2, SLAVE, 1, member, acting=True)
    route = rim2.pickup_topic_route_data("rmq_sys_SYNC_BROKER_MEMBER_broker-a")
    assert route is not None
    assert route.brokerDatas[0].brokerAddrs == {1: SLAVE}


def test_prime_slave_registration_is_read_only_and_returning_master_restores() -> None:
    rim = RouteInfoManager(cfg(supportActingMaster=True))
    register(rim, SLAVE, 1, T1, acting=True)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].perm == PermName.PERM_READ
    assert route.brokerDatas[0].brokerAddrs == {0: SLAVE}
    register(rim, MASTER, 0, T1, acting=True)
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].perm == 6
    assert route.brokerDatas[0].brokerAddrs == {0: MASTER, 1: SLAVE}


def test_old_version_slave_is_not_a_prime_slave() -> None:
    rim = RouteInfoManager(cfg(supportActingMaster=True))
    register(rim, SLAVE, 1, T1, acting=None)
    assert rim.pickup_topic_route_data("T1") is None


def test_min_broker_id_notifications_when_enabled() -> None:
    rim = RouteInfoManager(cfg(notifyMinBrokerIdChanged=True))
    register(rim, SLAVE, 1, T1, acting=True)
    register(rim, SLAVE2, 2, T1, acting=True)
    result = register(rim, MASTER, 0, T1, acting=True)
    assert result is not None
    [change] = result.notifications
    assert (change.minBrokerId, change.minBrokerAddr, change.offlineBrokerAddr) == (0, MASTER, None)
    assert change.haBrokerAddr == "127.0.0.1:20911"
    assert sorted(change.targets) == [SLAVE, SLAVE2]
    assert change.header().minBrokerAddr == MASTER
    [gone] = rim.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    assert (gone.minBrokerId, gone.minBrokerAddr, gone.offlineBrokerAddr) == (1, SLAVE, MASTER)
    assert sorted(gone.targets) == [SLAVE, SLAVE2]
    assert rim.unregister_broker(CLUSTER, SLAVE2, "broker-a", 2) == []  # not the minimum


def test_min_broker_id_change_via_scan_and_notifications_off_by_default() -> None:
    rim = RouteInfoManager(cfg(notifyMinBrokerIdChanged=True))
    register(rim, MASTER, 0, T1, acting=True, timeout=1000, now=0)
    register(rim, SLAVE, 1, T1, acting=True, timeout=60_000, now=0)
    result = rim.scan_not_active_brokers(5000)
    assert [n.minBrokerAddr for n in result.notifications] == [SLAVE]
    rim2 = RouteInfoManager(cfg())
    register(rim2, SLAVE, 1, T1, acting=True)
    assert register(rim2, MASTER, 0, T1, acting=True).notifications == []  # type: ignore[union-attr]


@pytest.mark.parametrize("acting", [False, None])
def test_no_unregister_notification_without_acting_master(acting: bool | None) -> None:
    rim = RouteInfoManager(cfg(notifyMinBrokerIdChanged=True))
    register(rim, MASTER, 0, T1, acting=acting)
    register(rim, SLAVE, 1, T1, acting=acting)
    assert rim.unregister_broker(CLUSTER, MASTER, "broker-a", 0) == []
    route = rim.pickup_topic_route_data("T1")
    assert route is not None
    assert route.queueDatas[0].perm == 6


def test_a_registration_of_many_new_topics_logs_one_line_for_them(caplog: pytest.LogCaptureFixture) -> None:
    # a name server started after its brokers (a dev cluster restarted on thousands of topics)
    # used to log one line per topic
    caplog.set_level(logging.DEBUG, logger="namesrv")
    rim = RouteInfoManager(cfg())
    few = [TopicConfig(topicName=f"Few{i}") for i in range(3)]
    register(rim, MASTER, 0, *few)
    many = [TopicConfig(topicName=f"Many{i:03d}") for i in range(200)]
    register(rim, SLAVE, 0, *many, name="broker-b")
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "topic" in r.getMessage()]
    assert sorted(m.split()[3] for m in info[:4]) == ["Few0", "Few1", "Few2", SYS]
    assert len(info) == 5, info
    assert info[4].startswith(f"200 new topics registered by broker-b ({SLAVE}): Many000, Many001, ")
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and "Many" in r.getMessage()]
    assert len(debug) == 200
    assert len(user_topics(rim)) == 203
