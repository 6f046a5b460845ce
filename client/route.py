"""Route cache: what a producer may write to and a consumer may read from (pure, no I/O).

Upstream: ``MQClientInstance.topicRouteData2TopicPublishInfo`` / ``topicRouteData2TopicSubscribeInfo``,
``TopicPublishInfo.selectOneMessageQueue`` and the instance's ``brokerAddrTable`` lookups
(``findBrokerAddressInPublish`` / ``findBrokerAddressInSubscribe``).

* Producers write to ``writeQueueNums`` queues of every broker group whose queue data has
  PERM_WRITE and whose route has a master (broker id 0). A route with ``orderTopicConf``
  (``brokerName:queueNums;...``) is an ordered topic: exactly those queues.
* Consumers read ``readQueueNums`` queues of every broker group with PERM_READ (a master is
  not required: reads may be served by a slave).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable

import msgspec

from client.message import MASTER_ID
from remoting.protocol.common import MessageQueue, PermName
from remoting.protocol.namesrv import BrokerData, QueueData, TopicRouteData

__all__ = [
    "BrokerAddrTable",
    "FindBrokerResult",
    "TopicPublishInfo",
    "publish_info_from_route",
    "routes_equal",
    "subscribe_queues_from_route",
]


class TopicPublishInfo:
    """The writable queues of one topic and the round-robin position over them."""

    __slots__ = ("_counter", "from_default_topic", "message_queues", "order_topic", "route")

    def __init__(
        self,
        message_queues: list[MessageQueue],
        route: TopicRouteData,
        *,
        order_topic: bool = False,
        from_default_topic: bool = False,
        seed: int | None = None,
    ) -> None:
        self.message_queues = message_queues
        self.route = route
        self.order_topic = order_topic
        #: True when built from the TBW102 route because the topic itself has no route yet
        self.from_default_topic = from_default_topic
        start = random.randrange(1 << 16) if seed is None else seed
        self._counter = itertools.count(start)

    @property
    def ok(self) -> bool:
        return bool(self.message_queues)

    def select_one(self, last_broker_name: str | None = None) -> MessageQueue:
        """Next queue round-robin; after a failure on ``last_broker_name`` prefer another broker."""
        mqs = self.message_queues
        n = len(mqs)
        if last_broker_name is not None:
            for _ in range(n):
                mq = mqs[next(self._counter) % n]
                if mq.brokerName != last_broker_name:
                    return mq
        return mqs[next(self._counter) % n]


def _sorted_queue_datas(route: TopicRouteData) -> list[QueueData]:
    return sorted(route.queueDatas, key=lambda q: q.brokerName)


def publish_info_from_route(
    topic: str, route: TopicRouteData, *, seed: int | None = None, from_default_topic: bool = False
) -> TopicPublishInfo:
    """The producer's view of ``route`` (see the module docstring)."""
    mqs: list[MessageQueue] = []
    if route.orderTopicConf:
        for item in route.orderTopicConf.split(";"):
            name, sep, nums = item.partition(":")
            if not sep or not nums.strip().isdigit():
                continue
            mqs.extend(MessageQueue(topic=topic, brokerName=name, queueId=i) for i in range(int(nums)))
        return TopicPublishInfo(
            mqs, route, order_topic=True, seed=seed, from_default_topic=from_default_topic
        )
    brokers = {bd.brokerName: bd for bd in route.brokerDatas}
    for qd in _sorted_queue_datas(route):
        if not PermName.is_writeable(qd.perm):
            continue
        bd = brokers.get(qd.brokerName)
        if bd is None or MASTER_ID not in bd.brokerAddrs:
            continue
        mqs.extend(
            MessageQueue(topic=topic, brokerName=qd.brokerName, queueId=i) for i in range(qd.writeQueueNums)
        )
    return TopicPublishInfo(mqs, route, seed=seed, from_default_topic=from_default_topic)


def subscribe_queues_from_route(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """The consumer's view of ``route``: the readable queues of every readable broker group."""
    out: set[MessageQueue] = set()
    for qd in route.queueDatas:
        if PermName.is_readable(qd.perm):
            out.update(
                MessageQueue(topic=topic, brokerName=qd.brokerName, queueId=i)
                for i in range(qd.readQueueNums)
            )
    return out


def default_topic_route(route: TopicRouteData, default_queue_nums: int) -> TopicRouteData:
    """The TBW102 route reshaped for a new topic: at most ``default_queue_nums`` queues per broker.

    Upstream ``updateTopicRouteInfoFromNameServer(topic, isDefault=true, producer)``.
    """
    qds = [
        QueueData(
            brokerName=qd.brokerName,
            readQueueNums=min(default_queue_nums, qd.readQueueNums),
            writeQueueNums=min(default_queue_nums, qd.writeQueueNums),
            perm=qd.perm,
            topicSysFlag=qd.topicSysFlag,
        )
        for qd in route.queueDatas
    ]
    return TopicRouteData(
        queueDatas=qds, brokerDatas=[bd.copy() for bd in route.brokerDatas], filterServerTable={}
    )


def _normalized(route: TopicRouteData) -> tuple[object, ...]:
    return (
        route.orderTopicConf,
        sorted((msgspec.structs.astuple(q) for q in route.queueDatas), key=repr),
        sorted(
            ((b.brokerName, b.cluster, tuple(sorted(b.brokerAddrs.items()))) for b in route.brokerDatas),
            key=repr,
        ),
    )


def routes_equal(a: TopicRouteData | None, b: TopicRouteData | None) -> bool:
    """Whether two routes describe the same queues and addresses (order-insensitive)."""
    if a is None or b is None:
        return a is b
    return _normalized(a) == _normalized(b)


class FindBrokerResult(msgspec.Struct, frozen=True):
    """An address found for a broker group, and whether it is a slave's."""

    addr: str
    slave: bool
    broker_id: int


class BrokerAddrTable:
    """brokerName → {brokerId: address}, rebuilt from every route the client holds."""

    def __init__(self) -> None:
        self.table: dict[str, dict[int, str]] = {}

    def rebuild(self, routes: Iterable[TopicRouteData]) -> set[str]:
        """Replace the table from ``routes``; returns the addresses that were not known before."""
        before = self.all_addrs()
        table: dict[str, dict[int, str]] = {}
        for route in routes:
            for bd in route.brokerDatas:
                table.setdefault(bd.brokerName, {}).update(bd.brokerAddrs)
        self.table = table
        return self.all_addrs() - before

    def update(self, brokers: Iterable[BrokerData]) -> None:
        """Overlay the addresses of ``brokers`` (newest route wins per broker name)."""
        for bd in brokers:
            self.table[bd.brokerName] = dict(bd.brokerAddrs)

    def all_addrs(self) -> set[str]:
        return {a for addrs in self.table.values() for a in addrs.values()}

    def master_addrs(self) -> set[str]:
        return {addrs[MASTER_ID] for addrs in self.table.values() if MASTER_ID in addrs}

    def master_addr(self, broker_name: str) -> str | None:
        """``findBrokerAddressInPublish``: the master's address, None if unknown or masterless."""
        addrs = self.table.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    def find_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> FindBrokerResult | None:
        """``findBrokerAddressInSubscribe``: that id's address, else (unless ``only_this_broker``) any."""
        addrs = self.table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is not None:
            return FindBrokerResult(addr, broker_id != MASTER_ID, broker_id)
        if only_this_broker:
            return None
        bid = min(addrs)
        return FindBrokerResult(addrs[bid], bid != MASTER_ID, bid)

    def any_addr(self, broker_name: str) -> str | None:
        """The master if there is one, else the lowest-id slave."""
        addrs = self.table.get(broker_name)
        if not addrs:
            return None
        return addrs.get(MASTER_ID) or addrs[min(addrs)]
