"""The name server's route tables (upstream ``RouteInfoManager``), as a sans-IO object.

No sockets, no trio, no clock: every call that needs the time takes ``now_ms``; connections are
opaque hashable ids. Calls return decisions (a register result, the NOTIFY_MIN_BROKER_ID_CHANGE
messages to send, the brokers that expired) and the caller does the I/O.

Tables (upstream names):

* ``topicQueueTable``: topic → {brokerName: QueueData}
* ``brokerAddrTable``: brokerName → BrokerData (cluster, brokerAddrs {brokerId: addr}, acting flag)
* ``clusterAddrTable``: cluster → {brokerName}
* ``brokerLiveTable``: (cluster, brokerAddr) → BrokerLiveInfo (last heartbeat, timeout,
  DataVersion, HA address, connection id)
* ``filterServerTable``: (cluster, brokerAddr) → [filter server addr]

Slave-acting-master support (ha-controller-container.md §4.1–4.5): a group's minimum broker id
is ``min(brokerAddrs)``; registration and unregistration compute the min-id change notifications
(returned only when ``notifyMinBrokerIdChanged`` is on); with ``supportActingMaster`` a route for a
group without id 0 presents its smallest-id member as id 0 when the topic is read-only there.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from remoting import fastjson
from remoting.protocol.common import (
    DataVersion,
    PermName,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
)
from remoting.protocol.namesrv import (
    MASTER_ID,
    SYNC_BROKER_MEMBER_GROUP_PREFIX,
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    NotifyMinBrokerIdChangeRequestHeader,
    QueueData,
    TopicRouteData,
)

log = logging.getLogger("namesrv")

#: Liveness timeout of a broker whose registration gave none (upstream 2 minutes).
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 120_000
#: a registration that brings more new topics than this logs one line for all of them
NEW_TOPICS_LOGGED_ONE_BY_ONE = 10


class RouteSettings(Protocol):
    """The NamesrvConfig keys the route tables read."""

    supportActingMaster: bool
    notifyMinBrokerIdChanged: bool
    deleteTopicWithBrokerRegistration: bool


class BrokerAddrInfo(NamedTuple):
    clusterName: str
    brokerAddr: str


@dataclass(slots=True)
class BrokerLiveInfo:
    lastUpdateTimestamp: int
    heartbeatTimeoutMillis: int
    dataVersion: DataVersion
    haServerAddr: str | None
    connection_id: Hashable | None


@dataclass(frozen=True, slots=True)
class UnregisterRequest:
    """One broker to remove (upstream ``UnRegisterBrokerRequestHeader``)."""

    clusterName: str
    brokerAddr: str
    brokerName: str
    brokerId: int


@dataclass(frozen=True, slots=True)
class MinBrokerIdChange:
    """A NOTIFY_MIN_BROKER_ID_CHANGE to send oneway to every address in ``targets``."""

    brokerName: str
    minBrokerId: int
    minBrokerAddr: str
    offlineBrokerAddr: str | None
    haBrokerAddr: str | None
    targets: tuple[str, ...]

    def header(self) -> NotifyMinBrokerIdChangeRequestHeader:
        # Upstream leaves brokerName unset on the wire; receivers know their own group.
        return NotifyMinBrokerIdChangeRequestHeader(
            minBrokerId=self.minBrokerId,
            minBrokerAddr=self.minBrokerAddr,
            offlineBrokerAddr=self.offlineBrokerAddr,
            haBrokerAddr=self.haBrokerAddr,
        )


@dataclass(slots=True)
class RegisterBrokerResult:
    """For a slave: the live master's address and HA address (else None)."""

    masterAddr: str | None = None
    haServerAddr: str | None = None
    notifications: list[MinBrokerIdChange] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ExpiredBroker:
    addr: BrokerAddrInfo
    connection_id: Hashable | None
    idle_ms: int
    timeout_ms: int


@dataclass(slots=True)
class RemovalResult:
    """What a scan or a closed connection removed, and the notifications to send."""

    removed: list[UnregisterRequest] = field(default_factory=list)
    expired: list[ExpiredBroker] = field(default_factory=list)
    notifications: list[MinBrokerIdChange] = field(default_factory=list)


class RouteInfoManager:
    """Route tables of one name server. Not thread-safe; call from one task (the trio thread)."""

    def __init__(self, config: RouteSettings) -> None:
        self.config = config
        self.topicQueueTable: dict[str, dict[str, QueueData]] = {}
        self.brokerAddrTable: dict[str, BrokerData] = {}
        self.clusterAddrTable: dict[str, set[str]] = {}
        self.brokerLiveTable: dict[BrokerAddrInfo, BrokerLiveInfo] = {}
        self.filterServerTable: dict[BrokerAddrInfo, list[str]] = {}
        self.topicQueueMappingInfoTable: dict[str, dict[str, Any]] = {}
        self._route_cache: dict[tuple[str, bool], bytes] = {}

    def _changed(self) -> None:
        self._route_cache.clear()

    # -----------------------------------------------------------------------------------------
    # Registration

    def register_broker(
        self,
        *,
        clusterName: str,
        brokerAddr: str,
        brokerName: str,
        brokerId: int,
        haServerAddr: str | None,
        now_ms: int,
        topicConfigWrapper: TopicConfigSerializeWrapper | None = None,
        filterServerList: list[str] | None = None,
        zoneName: str | None = None,
        timeoutMillis: int | None = None,
        enableActingMaster: bool | None = None,
        connection_id: Hashable | None = None,
    ) -> RegisterBrokerResult | None:
        """REGISTER_BROKER. Returns None when the registration is refused outright.

        Refused: a single-topic (incremental) registration from a broker id not registered yet.
        A registration whose address replaces another address of the same id with a lower
        ``stateVersion`` is ignored (an empty result). Topic configs are taken only from the
        master (id 0) or the prime slave (new-version broker holding the group's minimum id),
        and only when the first registration, a changed DataVersion, or a topic this group does
        not have yet; the prime slave's topics lose PERM_WRITE when acting master is enabled.
        """
        self._changed()
        result = RegisterBrokerResult()
        wrapper = topicConfigWrapper
        new_version = wrapper.dataVersion if wrapper is not None else DataVersion()
        topic_table: dict[str, TopicConfig] = wrapper.topicConfigTable if wrapper is not None else {}

        self.clusterAddrTable.setdefault(clusterName, set()).add(brokerName)
        register_first = False
        broker_data = self.brokerAddrTable.get(brokerName)
        if broker_data is None:
            register_first = True
            broker_data = BrokerData(cluster=clusterName, brokerName=brokerName, brokerAddrs={})
            self.brokerAddrTable[brokerName] = broker_data
        old_version_broker = enableActingMaster is None
        broker_data.enableActingMaster = bool(enableActingMaster)
        broker_data.zoneName = zoneName
        addrs = broker_data.brokerAddrs

        prev_min = min(addrs) if addrs else 0
        min_id_changed = brokerId < prev_min

        # A broker switching role keeps its address: drop the address under its old id.
        for bid in [bid for bid, a in addrs.items() if a == brokerAddr and bid != brokerId]:
            del addrs[bid]

        old_addr = addrs.get(brokerId)
        if old_addr is not None and old_addr != brokerAddr:
            old_live = self.brokerLiveTable.get(BrokerAddrInfo(clusterName, old_addr))
            if old_live is not None and old_live.dataVersion.stateVersion > new_version.stateVersion:
                log.warning(
                    "registration of %s as %s/%d conflicts with %s (state version %d > %d), ignored",
                    brokerAddr,
                    brokerName,
                    brokerId,
                    old_addr,
                    old_live.dataVersion.stateVersion,
                    new_version.stateVersion,
                )
                self.brokerLiveTable.pop(BrokerAddrInfo(clusterName, brokerAddr), None)
                return result

        if brokerId not in addrs and len(topic_table) == 1:
            log.warning(
                "single-topic registration from %s (%s/%d) before its full registration, refused",
                brokerAddr,
                brokerName,
                brokerId,
            )
            return None

        addrs[brokerId] = brokerAddr
        register_first = register_first or not old_addr
        is_master = brokerId == MASTER_ID
        is_prime_slave = not old_version_broker and not is_master and brokerId == min(addrs)
        addr_info = BrokerAddrInfo(clusterName, brokerAddr)

        if wrapper is not None and (is_master or is_prime_slave):
            mapping: dict[str, Any] = getattr(wrapper, "topicQueueMappingInfoMap", None) or {}
            if self.config.deleteTopicWithBrokerRegistration and not mapping:
                for topic in [t for t, qmap in self.topicQueueTable.items() if brokerName in qmap]:
                    if topic not in topic_table:
                        self._remove_queue_data(topic, brokerName)
            version_changed = self._data_version_changed(addr_info, new_version)
            created: list[str] = []
            for tc in topic_table.values():
                if register_first or version_changed or self._topic_missing(tc.topicName, brokerName):
                    perm = tc.perm
                    if is_prime_slave and broker_data.enableActingMaster:
                        perm &= ~PermName.PERM_WRITE
                    if self._update_queue_data(brokerName, tc, perm):
                        created.append(tc.topicName)
            self._log_created(brokerName, brokerAddr, created)
            if version_changed or register_first:
                for topic, info in mapping.items():
                    bname = info.get("bname") if isinstance(info, dict) else None
                    self.topicQueueMappingInfoTable.setdefault(topic, {})[bname or brokerName] = info

        if addr_info not in self.brokerLiveTable:
            log.info(
                "new broker registered: %s/%d at %s, HA %s", brokerName, brokerId, brokerAddr, haServerAddr
            )
        self.brokerLiveTable[addr_info] = BrokerLiveInfo(
            lastUpdateTimestamp=now_ms,
            heartbeatTimeoutMillis=timeoutMillis
            if timeoutMillis is not None
            else DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
            dataVersion=new_version,
            haServerAddr=haServerAddr,
            connection_id=connection_id,
        )
        if filterServerList is not None:
            if filterServerList:
                self.filterServerTable[addr_info] = list(filterServerList)
            else:
                self.filterServerTable.pop(addr_info, None)

        if not is_master:
            master_addr = addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.brokerLiveTable.get(BrokerAddrInfo(clusterName, master_addr))
                if master_live is not None:
                    result.haServerAddr = master_live.haServerAddr
                    result.masterAddr = master_addr

        if min_id_changed and self.config.notifyMinBrokerIdChanged:
            change = _min_id_change(brokerName, addrs, offline=None, ha=haServerAddr)
            if change is not None:
                result.notifications.append(change)
        return result

    def _data_version_changed(self, addr_info: BrokerAddrInfo, version: DataVersion) -> bool:
        prev = self.brokerLiveTable.get(addr_info)
        return prev is None or prev.dataVersion != version

    def _topic_missing(self, topic: str, brokerName: str) -> bool:
        qmap = self.topicQueueTable.get(topic)
        return not qmap or brokerName not in qmap

    def _log_created(self, brokerName: str, brokerAddr: str, created: list[str]) -> None:
        """One line per new topic -- or, for a registration that brings many (a name server
        started after its brokers, e.g. a dev cluster restarted on a data directory of thousands
        of topics), one line for all of them, each topic at DEBUG."""
        one_by_one = len(created) <= NEW_TOPICS_LOGGED_ONE_BY_ONE
        level = logging.INFO if one_by_one else logging.DEBUG
        for topic in created:
            log.log(level, "new topic registered: %s %s", topic, self.topicQueueTable[topic][brokerName])
        if one_by_one:
            return
        shown = ", ".join(created[:NEW_TOPICS_LOGGED_ONE_BY_ONE])
        log.info("%d new topics registered by %s (%s): %s, ...", len(created), brokerName, brokerAddr, shown)

    def _update_queue_data(self, brokerName: str, tc: TopicConfig, perm: int) -> bool:
        """Put ``brokerName``'s queues of ``tc`` in the route table; True when the topic is new
        there (the caller logs it)."""
        qd = QueueData(
            brokerName=brokerName,
            readQueueNums=tc.readQueueNums,
            writeQueueNums=tc.writeQueueNums,
            perm=perm,
            topicSysFlag=tc.topicSysFlag,
        )
        qmap = self.topicQueueTable.setdefault(tc.topicName, {})
        old = qmap.get(brokerName)
        if old is None:
            qmap[brokerName] = qd
            return len(qmap) == 1
        if old != qd:
            log.info("topic changed: %s old %s new %s", tc.topicName, old, qd)
            qmap[brokerName] = qd
        return False

    def _remove_queue_data(self, topic: str, brokerName: str) -> None:
        qmap = self.topicQueueTable.get(topic)
        if qmap is None:
            return
        if qmap.pop(brokerName, None) is not None:
            log.info("topic %s removed from broker %s", topic, brokerName)
        if not qmap:
            del self.topicQueueTable[topic]

    def register_topic(self, topic: str, queueDatas: Iterable[QueueData]) -> bool:
        """REGISTER_TOPIC_IN_NAMESRV: set the topic's queues; False (nothing changed) when a
        queue names a broker group that is not registered."""
        qds = list(queueDatas)
        if not qds:
            return False
        for qd in qds:
            if qd.brokerName not in self.brokerAddrTable:
                log.warning("register topic %s names unknown broker %s", topic, qd.brokerName)
                return False
        self._changed()
        qmap = self.topicQueueTable.setdefault(topic, {})
        for qd in qds:
            qmap[qd.brokerName] = qd
        return True

    # -----------------------------------------------------------------------------------------
    # Liveness

    def update_broker_timestamp(self, clusterName: str, brokerAddr: str, now_ms: int) -> bool:
        """BROKER_HEARTBEAT / QUERY_DATA_VERSION: refresh liveness; False if not registered."""
        live = self.brokerLiveTable.get(BrokerAddrInfo(clusterName, brokerAddr))
        if live is None:
            return False
        live.lastUpdateTimestamp = now_ms
        return True

    def query_broker_data_version(self, clusterName: str, brokerAddr: str) -> DataVersion | None:
        live = self.brokerLiveTable.get(BrokerAddrInfo(clusterName, brokerAddr))
        return live.dataVersion if live is not None else None

    def is_broker_topic_config_changed(self, clusterName: str, brokerAddr: str, version: DataVersion) -> bool:
        """True unless the broker is registered with exactly this DataVersion."""
        return self._data_version_changed(BrokerAddrInfo(clusterName, brokerAddr), version)

    def scan_not_active_brokers(self, now_ms: int) -> RemovalResult:
        """Remove every broker not heard from within its heartbeat timeout."""
        expired = [
            ExpiredBroker(
                addr, live.connection_id, now_ms - live.lastUpdateTimestamp, live.heartbeatTimeoutMillis
            )
            for addr, live in self.brokerLiveTable.items()
            if live.lastUpdateTimestamp + live.heartbeatTimeoutMillis < now_ms
        ]
        for e in expired:
            log.warning(
                "broker %s of cluster %s expired: silent for %d ms (timeout %d ms)",
                e.addr.brokerAddr,
                e.addr.clusterName,
                e.idle_ms,
                e.timeout_ms,
            )
        result = self._remove_addrs([e.addr for e in expired])
        result.expired = expired
        return result

    def on_connection_closed(self, connection_id: Hashable) -> RemovalResult:
        """Remove at once every broker whose last registration came over this connection."""
        addrs = [a for a, live in self.brokerLiveTable.items() if live.connection_id == connection_id]
        if addrs:
            log.info(
                "connection %s closed: removing brokers %s", connection_id, [a.brokerAddr for a in addrs]
            )
        return self._remove_addrs(addrs)

    def _remove_addrs(self, addrs: list[BrokerAddrInfo]) -> RemovalResult:
        requests = []
        for addr in addrs:
            req = self._unregister_request_for(addr)
            if req is not None:
                requests.append(req)
            else:
                # Known to the live table only (e.g. its registration was overridden).
                self.brokerLiveTable.pop(addr, None)
                self.filterServerTable.pop(addr, None)
        result = RemovalResult(removed=requests)
        if requests:
            result.notifications = self.unregister_brokers(requests)
        return result

    def _unregister_request_for(self, addr: BrokerAddrInfo) -> UnregisterRequest | None:
        for bd in self.brokerAddrTable.values():
            if bd.cluster != addr.clusterName:
                continue
            for bid, a in bd.brokerAddrs.items():
                if a == addr.brokerAddr:
                    return UnregisterRequest(addr.clusterName, addr.brokerAddr, bd.brokerName, bid)
        return None

    # -----------------------------------------------------------------------------------------
    # Unregistration

    def unregister_broker(
        self, clusterName: str, brokerAddr: str, brokerName: str, brokerId: int
    ) -> list[MinBrokerIdChange]:
        """UNREGISTER_BROKER for one broker; see :meth:`unregister_brokers`."""
        return self.unregister_brokers([UnregisterRequest(clusterName, brokerAddr, brokerName, brokerId)])

    def unregister_brokers(self, requests: Iterable[UnregisterRequest]) -> list[MinBrokerIdChange]:
        """Remove brokers; a group left without members disappears with its queues.

        A group that lost its master but keeps members (and has acting master enabled) has
        PERM_WRITE wiped from all its queues. Returns min-broker-id notifications (only when
        ``notifyMinBrokerIdChanged`` is on and the group enables acting master).
        """
        self._changed()
        removed: set[str] = set()
        reduced: set[str] = set()
        notify: dict[str, tuple[dict[int, str], str]] = {}
        for req in requests:
            addr_info = BrokerAddrInfo(req.clusterName, req.brokerAddr)
            live = self.brokerLiveTable.pop(addr_info, None)
            log.info(
                "unregister broker %s/%d at %s (was live: %s)",
                req.brokerName,
                req.brokerId,
                req.brokerAddr,
                live is not None,
            )
            self.filterServerTable.pop(addr_info, None)
            remove_name = False
            bd = self.brokerAddrTable.get(req.brokerName)
            if bd is not None:
                min_changed = bool(bd.brokerAddrs) and req.brokerId == min(bd.brokerAddrs)
                for bid in [bid for bid, a in bd.brokerAddrs.items() if a == req.brokerAddr]:
                    del bd.brokerAddrs[bid]
                if not bd.brokerAddrs:
                    del self.brokerAddrTable[req.brokerName]
                    remove_name = True
                elif min_changed:
                    notify[req.brokerName] = (bd.brokerAddrs, req.brokerAddr)
            if remove_name:
                names = self.clusterAddrTable.get(req.clusterName)
                if names is not None:
                    names.discard(req.brokerName)
                    if not names:
                        del self.clusterAddrTable[req.clusterName]
                removed.add(req.brokerName)
                reduced.discard(req.brokerName)
            elif bd is not None:
                reduced.add(req.brokerName)
        self._clean_topics(removed, reduced)

        changes: list[MinBrokerIdChange] = []
        if self.config.notifyMinBrokerIdChanged:
            for name, (addrs, offline) in notify.items():
                bd = self.brokerAddrTable.get(name)
                if bd is None or not bd.enableActingMaster:
                    continue
                change = _min_id_change(name, addrs, offline=offline, ha=None)
                if change is not None:
                    changes.append(change)
        return changes

    def _clean_topics(self, removed: set[str], reduced: set[str]) -> None:
        masterless = {
            name
            for name in reduced
            if (bd := self.brokerAddrTable.get(name)) is not None
            and bd.enableActingMaster
            and (not bd.brokerAddrs or min(bd.brokerAddrs) > MASTER_ID)
        }
        for topic in list(self.topicQueueTable):
            qmap = self.topicQueueTable[topic]
            for name in removed:
                if qmap.pop(name, None) is not None:
                    log.debug("topic %s dropped broker %s", topic, name)
            if not qmap:
                del self.topicQueueTable[topic]
                continue
            for name in masterless:
                qd = qmap.get(name)
                if qd is not None:
                    qd.perm &= ~PermName.PERM_WRITE

    # -----------------------------------------------------------------------------------------
    # Topics and permissions

    def delete_topic(self, topic: str, clusterName: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV: the whole topic, or only its queues on one cluster's groups."""
        self._changed()
        if not clusterName:
            self.topicQueueTable.pop(topic, None)
            return
        names = self.clusterAddrTable.get(clusterName)
        if not names:
            return
        for name in names:
            self._remove_queue_data(topic, name)

    def wipe_write_perm_of_broker(self, brokerName: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER: clear PERM_WRITE on the group's queues; returns topic count."""
        return self._operate_write_perm(brokerName, wipe=True)

    def add_write_perm_of_broker(self, brokerName: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: set the group's queues to R+W; returns topic count."""
        return self._operate_write_perm(brokerName, wipe=False)

    def _operate_write_perm(self, brokerName: str, *, wipe: bool) -> int:
        self._changed()
        count = 0
        for qmap in self.topicQueueTable.values():
            qd = qmap.get(brokerName)
            if qd is None:
                continue
            qd.perm = qd.perm & ~PermName.PERM_WRITE if wipe else PermName.PERM_READ | PermName.PERM_WRITE
            count += 1
        return count

    # -----------------------------------------------------------------------------------------
    # Queries

    def get_all_topic_list(self) -> TopicList:
        return TopicList(topicList=list(self.topicQueueTable))

    def get_topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.clusterAddrTable.get(cluster, set())
        topics = [t for t, qmap in self.topicQueueTable.items() if any(n in qmap for n in names)]
        return TopicList(topicList=topics)

    def get_system_topic_list(self) -> TopicList:
        """Cluster names and broker names (each is a system topic), plus one broker address."""
        topics: list[str] = []
        for cluster, names in self.clusterAddrTable.items():
            topics.append(cluster)
            topics.extend(sorted(names))
        broker_addr = next(
            (next(iter(bd.brokerAddrs.values())) for bd in self.brokerAddrTable.values() if bd.brokerAddrs),
            None,
        )
        return TopicList(topicList=topics, brokerAddr=broker_addr)

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            brokerAddrTable={name: bd.copy() for name, bd in self.brokerAddrTable.items()},
            clusterAddrTable={c: sorted(names) for c, names in self.clusterAddrTable.items()},
        )

    def get_broker_member_group(self, clusterName: str, brokerName: str) -> BrokerMemberGroup:
        """The raw registered ids of a group (no acting-master rewrite)."""
        bd = self.brokerAddrTable.get(brokerName)
        return BrokerMemberGroup(
            cluster=clusterName, brokerName=brokerName, brokerAddrs=dict(bd.brokerAddrs) if bd else {}
        )

    def min_broker_id(self, brokerName: str) -> int | None:
        """The group's smallest registered broker id (None for an unknown or empty group)."""
        bd = self.brokerAddrTable.get(brokerName)
        return min(bd.brokerAddrs) if bd is not None and bd.brokerAddrs else None

    def live_brokers(self) -> dict[BrokerAddrInfo, BrokerLiveInfo]:
        """A copy of the liveness table (for admin output and tests)."""
        return dict(self.brokerLiveTable)

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route clients get for ``topic``, or None when no live group hosts it."""
        qmap = self.topicQueueTable.get(topic)
        if not qmap:
            return None
        broker_datas: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for name in qmap:
            bd = self.brokerAddrTable.get(name)
            if bd is None:
                continue
            bd = bd.copy()
            broker_datas.append(bd)
            if self.filterServerTable:
                for addr in bd.brokerAddrs.values():
                    servers = self.filterServerTable.get(BrokerAddrInfo(bd.cluster, addr))
                    if servers is not None:
                        filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        route = TopicRouteData(
            queueDatas=[QueueData(**_qd_fields(qd)) for qd in qmap.values()],
            brokerDatas=broker_datas,
            filterServerTable=filter_servers,
            topicQueueMappingByBroker=self.topicQueueMappingInfoTable.get(topic),
        )
        if self.config.supportActingMaster and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            _rewrite_acting_master(route)
        return route

    def route_body(self, topic: str, *, standard: bool) -> bytes | None:
        """The encoded route (fastjson or standard JSON), cached until the tables change."""
        key = (topic, standard)
        body = self._route_cache.get(key)
        if body is None:
            route = self.pickup_topic_route_data(topic)
            if route is None:
                return None
            body = fastjson.dumps(route, standard=standard)
            self._route_cache[key] = body
        return body


def _qd_fields(qd: QueueData) -> dict[str, Any]:
    return {
        "brokerName": qd.brokerName,
        "readQueueNums": qd.readQueueNums,
        "writeQueueNums": qd.writeQueueNums,
        "perm": qd.perm,
        "topicSysFlag": qd.topicSysFlag,
    }


def _rewrite_acting_master(route: TopicRouteData) -> None:
    """Present the smallest-id member of a masterless, read-only group as id 0 (§4.5)."""
    perms = {qd.brokerName: qd.perm for qd in route.queueDatas}
    for bd in route.brokerDatas:
        addrs = bd.brokerAddrs
        if not addrs or MASTER_ID in addrs or not bd.enableActingMaster:
            continue
        perm = perms.get(bd.brokerName)
        if perm is not None and not PermName.is_writeable(perm):
            acting = addrs.pop(min(addrs))
            addrs[MASTER_ID] = acting


def _min_id_change(
    brokerName: str, addrs: dict[int, str], *, offline: str | None, ha: str | None
) -> MinBrokerIdChange | None:
    if not addrs:
        return None
    min_id = min(addrs)
    if offline is not None or len(addrs) == 1:
        targets = tuple(addrs.values())
    else:
        targets = tuple(a for bid, a in addrs.items() if bid != min_id)
    return MinBrokerIdChange(
        brokerName=brokerName,
        minBrokerId=min_id,
        minBrokerAddr=addrs[min_id],
        offlineBrokerAddr=offline,
        haBrokerAddr=ha,
        targets=targets,
    )
