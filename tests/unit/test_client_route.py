"""Route → producer/consumer queue lists and broker address lookups."""

from __future__ import annotations

from client.route import (
    BrokerAddrTable,
    default_topic_route,
    publish_info_from_route,
    routes_equal,
    subscribe_queues_from_route,
)
from remoting.protocol.common import MessageQueue
from remoting.protocol.namesrv import BrokerData, QueueData, TopicRouteData


def route(
    *queues: tuple[str, int, int, int], addrs: dict[str, dict[int, str]] | None = None
) -> TopicRouteData:
    addrs = (
        addrs
        if addrs is not None
        else {name: {0: f"10.0.0.{i}:10911"} for i, (name, *_) in enumerate(queues)}
    )
    return TopicRouteData(
        queueDatas=[
            QueueData(brokerName=n, readQueueNums=r, writeQueueNums=w, perm=p) for n, r, w, p in queues
        ],
        brokerDatas=[BrokerData(cluster="C", brokerName=n, brokerAddrs=a) for n, a in addrs.items()],
    )


def names(mqs: list[MessageQueue] | set[MessageQueue]) -> list[tuple[str, int]]:
    return sorted((m.brokerName, m.queueId) for m in mqs)


def test_producers_use_write_queues_of_writable_brokers_with_a_master() -> None:
    r = route(
        ("b-rw", 2, 3, 6),
        ("a-ro", 4, 4, 4),  # read only
        ("c-nomaster", 2, 2, 6),
        addrs={"b-rw": {0: "h:1"}, "a-ro": {0: "h:2"}, "c-nomaster": {1: "h:3"}},
    )
    info = publish_info_from_route("T", r)
    assert names(info.message_queues) == [("b-rw", 0), ("b-rw", 1), ("b-rw", 2)]
    assert info.ok
    assert not info.order_topic


def test_consumers_use_read_queues_of_readable_brokers_even_without_master() -> None:
    r = route(
        ("b-rw", 2, 3, 6),
        ("a-wo", 4, 4, 2),  # write only
        ("c-nomaster", 2, 2, 6),
        addrs={"b-rw": {0: "h:1"}, "a-wo": {0: "h:2"}, "c-nomaster": {1: "h:3"}},
    )
    assert names(subscribe_queues_from_route("T", r)) == [
        ("b-rw", 0),
        ("b-rw", 1),
        ("c-nomaster", 0),
        ("c-nomaster", 1),
    ]


def test_order_topic_conf_defines_the_queues() -> None:
    r = route(("a", 8, 8, 6), ("b", 8, 8, 6))
    r.orderTopicConf = "a:2;b:1"
    info = publish_info_from_route("T", r)
    assert info.order_topic
    assert names(info.message_queues) == [("a", 0), ("a", 1), ("b", 0)]


def test_round_robin_and_retry_prefers_another_broker() -> None:
    info = publish_info_from_route("T", route(("a", 2, 2, 6), ("b", 2, 2, 6)), seed=0)
    picks = [info.select_one() for _ in range(4)]
    assert names(picks) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    info = publish_info_from_route("T", route(("a", 2, 2, 6), ("b", 2, 2, 6)), seed=0)
    assert info.select_one().brokerName == "a"
    assert info.select_one("a").brokerName == "b"
    # with a single broker the retry still returns a queue
    single = publish_info_from_route("T", route(("a", 2, 2, 6)), seed=0)
    assert single.select_one("a").brokerName == "a"


def test_default_topic_route_caps_queue_numbers() -> None:
    tbw = route(("a", 8, 8, 7), ("b", 2, 2, 7))
    r = default_topic_route(tbw, 4)
    assert [(q.brokerName, q.readQueueNums, q.writeQueueNums) for q in r.queueDatas] == [
        ("a", 4, 4),
        ("b", 2, 2),
    ]
    assert names(publish_info_from_route("New", r).message_queues) == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 0),
        ("b", 1),
    ]


def test_routes_equal_ignores_order() -> None:
    addrs = {"a": {0: "h:1"}, "b": {0: "h:2"}}
    r1 = route(("a", 4, 4, 6), ("b", 4, 4, 6), addrs=addrs)
    r2 = route(("b", 4, 4, 6), ("a", 4, 4, 6), addrs=dict(reversed(addrs.items())))
    assert routes_equal(r1, r2)
    assert not routes_equal(
        r1, route(("a", 4, 4, 6), ("b", 4, 4, 6), addrs={"a": {0: "h:1"}, "b": {0: "h:3"}})
    )
    r3 = route(("a", 4, 4, 6), ("b", 4, 2, 6), addrs=addrs)
    assert not routes_equal(r1, r3)
    assert not routes_equal(r1, None)


def test_broker_addr_table_lookups() -> None:
    t = BrokerAddrTable()
    new = t.rebuild([route(("a", 1, 1, 6), addrs={"a": {0: "m:1", 1: "s:1"}, "b": {2: "s:2"}})])
    assert new == {"m:1", "s:1", "s:2"}
    assert t.master_addr("a") == "m:1"
    assert t.master_addr("b") is None
    found = t.find_subscribe("a", 1, False)
    assert found is not None
    assert (found.addr, found.slave) == ("s:1", True)
    # suggested id missing: any address unless only_this_broker
    fallback = t.find_subscribe("b", 0, False)
    assert fallback is not None
    assert (fallback.addr, fallback.slave) == ("s:2", True)
    assert t.find_subscribe("b", 0, True) is None
    assert t.find_subscribe("zzz", 0, False) is None
    assert t.any_addr("a") == "m:1"
    assert t.rebuild([]) == set()
    assert t.master_addr("a") is None
