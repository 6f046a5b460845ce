"""Admin calls against name servers and brokers (upstream ``DefaultMQAdminExt``), trio-native.

::

    async with RemotingClient() as rc:
        admin = MQAdmin(rc, "127.0.0.1:9876")
        info = await admin.examine_broker_cluster_info()

Name-server calls try each configured address in order (``"a:9876;b:9876"``) and move on when
one cannot be reached. A non-zero response code raises :class:`AdminError`; transport failures
raise :class:`remoting.errors.RemotingError` subclasses.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import msgspec

from client.hedge import first_answer
from client.message import RETRY_GROUP_TOPIC_PREFIX
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingConnectError, RemotingError
from remoting.headers import encode_header
from remoting.processor import unsupported_request_code
from remoting.protocol.broker import (
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    ConsumeStatsList,
    CreateTopicListRequestBody,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    HARuntimeInfo,
    ProducerConnection,
    ProducerTableInfo,
    QueryConsumeQueueRequestHeader,
    QueryConsumeQueueResponseBody,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
    SubscriptionGroupWrapper,
    TopicStatsTable,
    UpdateConsumerOffsetRequestHeader,
)
from remoting.protocol.common import (
    GroupList,
    KVTable,
    MessageQueue,
    TopicConfig,
    TopicConfigAndMappingSerializeWrapper,
    TopicList,
)
from remoting.protocol.namesrv import (
    MASTER_ID,
    BrokerMemberGroup,
    ClusterInfo,
    GetBrokerMemberGroupResponseBody,
    TopicRouteData,
)

__all__ = [
    "CLUSTER_NOT_FOUND",
    "NO_CONSUME_STATS",
    "NO_MASTER_PLACEHOLDER",
    "AdminError",
    "MQAdmin",
    "attributes_to_string",
    "cluster_addrs",
    "parse_namesrv_addrs",
    "properties_text",
    "route_addrs",
]

log = logging.getLogger("client.admin")

DEFAULT_TIMEOUT = 5.0
#: GET_CONSUMER_RUNNING_INFO waits for a broker that waits up to 10 s for the client (upstream: 12 s)
RUNNING_INFO_TIMEOUT = 12.0
#: upstream ``CommandUtil.NO_MASTER_PLACEHOLDER``: the key of a broker group without a master
NO_MASTER_PLACEHOLDER = "NO_MASTER"

#: mqadmin's message when a cluster name is not known to the name server.
CLUSTER_NOT_FOUND = "Make sure the specified clusterName exists or the name server connected to is correct."
#: mqadmin's message when a group's consume stats have no queue.
NO_CONSUME_STATS = (
    "Not found the consumer group consume stats, because return offset table is empty, "
    "maybe the consumer not consume any message"
)


def attributes_to_string(attributes: dict[str, str]) -> str | None:
    """A parsed attribute modification back to ``+k=v,-k`` (upstream ``AttributeParser.parseToString``)."""
    if not attributes:
        return None
    return ",".join(f"{k}={v}" if k.startswith("+") else k for k, v in attributes.items())


class AdminError(Exception):
    """The server answered with a non-zero response code."""

    def __init__(self, code: int, remark: str | None, addr: str) -> None:
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = "CODE"
        where = f" from {addr}" if addr else ""  # client-side conclusions have no address
        text = f"{name} ({code}){where}: {self.remark.strip()}".rstrip(": ")
        if code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and addr:
            # e.g. a broker's address given as the name server's: say what was asked of whom
            asked = unsupported_request_code(self.remark)
            if asked is not None:
                try:
                    what = RequestCode(asked).name
                except ValueError:
                    what = f"request {asked}"
                text += (
                    f" -- {addr} does not handle {what}: is it the kind of server this command asks"
                    " for (a name server with -n, a broker with -b, a controller with -a)?"
                )
        super().__init__(text)


def parse_namesrv_addrs(addrs: str | list[str]) -> list[str]:
    """``"a:9876;b:9876"`` (or a list) -> addresses, blanks dropped."""
    parts = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    return [p.strip() for p in parts if p.strip()]


def properties_text(properties: dict[str, str]) -> bytes:
    """A config update's body: ``key=value`` lines (upstream ``MixAll.properties2String``)."""
    return "".join(f"{k}={v}\n" for k, v in properties.items()).encode("utf-8")


def _body(response: RemotingCommand) -> bytes:
    return response.body_bytes


def cluster_addrs(info: ClusterInfo, cluster: str) -> list[str]:
    """Every broker address (masters and slaves) of ``cluster``, broker groups in name order, each
    group's by broker id; ValueError when the cluster is unknown."""
    names = info.clusterAddrTable.get(cluster)
    if names is None:
        raise ValueError(CLUSTER_NOT_FOUND)
    addrs: list[str] = []
    for name in sorted(names):
        bd = info.brokerAddrTable.get(name)
        if bd is not None:
            addrs.extend(addr for _, addr in sorted(bd.brokerAddrs.items()))
    return addrs


class MQAdmin:
    """Admin operations over a shared :class:`RemotingClient`."""

    def __init__(
        self, client: RemotingClient, namesrv: str | list[str], *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.client = client
        self.namesrv_addrs = parse_namesrv_addrs(namesrv)
        if not self.namesrv_addrs:
            raise ValueError("no name server address given")
        self.timeout = timeout
        #: the name server that answered the last read (asked first by the next one)
        self._namesrv_index = 0

    async def _call(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        response = await self.client.invoke(addr, cmd, self.timeout)
        if response.code != ResponseCode.SUCCESS:
            raise AdminError(response.code, response.remark, addr)
        return response

    async def call_broker(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """Send ``cmd`` to the broker at ``addr``; raise its error response as AdminError."""
        return await self._call(addr, cmd)

    async def call_namesrv(self, cmd: RemotingCommand) -> RemotingCommand:
        """Send to the first reachable name server (the configured order: for writes, which must
        not be asked twice; reads go through :meth:`read_namesrv`); raise its error response as
        AdminError."""
        last: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self._call(addr, cmd)
            except RemotingConnectError as e:
                log.debug("name server %s unreachable: %s", addr, e)
                last = e
        assert last is not None
        raise last

    async def read_namesrv(self, cmd: RemotingCommand) -> RemotingCommand:
        """A read (asking twice is harmless) from the name servers: the one that answered the last
        read first, the next one too when it fails or has not answered within ``NAMESRV_HEDGE_S``
        (:func:`client.hedge.first_answer`) -- a dark first name server costs a command half a
        second, not the call timeout, or the command (upstream's mqadmin waits it out). Raises the
        answer's error code as AdminError."""

        async def invoke(addr: str, c: RemotingCommand) -> RemotingCommand:
            return await self.client.invoke(addr, c, self.timeout)

        idx, response = await first_answer(invoke, self.namesrv_addrs, self._namesrv_index, cmd, log)
        self._namesrv_index = idx
        if response.code != ResponseCode.SUCCESS:
            raise AdminError(response.code, response.remark, self.namesrv_addrs[idx])
        return response

    # --- name server ----------------------------------------------------------------------

    async def examine_broker_cluster_info(self) -> ClusterInfo:
        response = await self.read_namesrv(request(RequestCode.GET_BROKER_CLUSTER_INFO))
        return ClusterInfo.decode(_body(response))

    async def fetch_all_topic_list(self) -> TopicList:
        response = await self.read_namesrv(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return TopicList.decode(_body(response))

    async def fetch_topics_by_cluster(self, cluster: str) -> TopicList:
        response = await self.read_namesrv(request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}))
        return TopicList.decode(_body(response))

    async def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        cmd = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True})
        response = await self.read_namesrv(cmd)
        return TopicRouteData.decode(_body(response))

    async def get_broker_member_group(self, cluster: str, broker_name: str) -> BrokerMemberGroup | None:
        cmd = request(
            RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": cluster, "brokerName": broker_name}
        )
        response = await self.read_namesrv(cmd)
        return GetBrokerMemberGroupResponseBody.decode(_body(response)).brokerMemberGroup

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """The value, or None when the name server has no such item."""
        try:
            response = await self.read_namesrv(
                request(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
            )
        except AdminError as e:
            if e.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise
        return (response.ext_fields or {}).get("value")

    async def _call_every_namesrv(self, code: RequestCode, fields: dict[str, str]) -> None:
        """``code`` to every configured name server in turn (a name server keeps its own KV table).

        As upstream's ``putKVConfigValue``/``deleteKVConfigValue``: every name server is asked even
        after one refuses, then the last refusal is raised as AdminError; a name server that cannot
        be reached raises at once.
        """
        refused: AdminError | None = None
        for addr in self.namesrv_addrs:
            try:
                await self._call(addr, request(code, fields))
            except AdminError as e:
                refused = e
        if refused is not None:
            raise refused

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG on every configured name server (see :meth:`_call_every_namesrv`)."""
        await self._call_every_namesrv(
            RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value}
        )

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        """DELETE_KV_CONFIG on every configured name server (see :meth:`_call_every_namesrv`)."""
        await self._call_every_namesrv(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    async def get_kv_list_by_namespace(self, namespace: str) -> KVTable | None:
        try:
            response = await self.read_namesrv(
                request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace})
            )
        except AdminError as e:
            if e.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise
        return KVTable.decode(_body(response))

    async def _call_namesrv_at(self, cmd: RemotingCommand, namesrv_addr: str | None) -> RemotingCommand:
        """To ``namesrv_addr`` when given, else to the first reachable configured name server."""
        if namesrv_addr is None:
            return await self.call_namesrv(cmd)
        return await self._call(namesrv_addr, cmd)

    async def wipe_write_perm_of_broker(self, broker_name: str, namesrv_addr: str | None = None) -> int:
        """WIPE_WRITE_PERM_OF_BROKER on ``namesrv_addr`` (default: the first reachable name server);
        returns how many topics of the broker group lost their write permission."""
        response = await self._call_namesrv_at(
            request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name}), namesrv_addr
        )
        return int((response.ext_fields or {}).get("wipeTopicCount", "0"))

    async def add_write_perm_of_broker(self, broker_name: str, namesrv_addr: str | None = None) -> int:
        """ADD_WRITE_PERM_OF_BROKER on ``namesrv_addr`` (default: the first reachable name server);
        returns how many topics of the broker group got read and write permission back."""
        response = await self._call_namesrv_at(
            request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name}), namesrv_addr
        )
        return int((response.ext_fields or {}).get("addTopicCount", "0"))

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        await self.call_namesrv(
            request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        )

    async def get_namesrv_config(self, namesrv_addr: str | None = None) -> dict[str, str]:
        """GET_NAMESRV_CONFIG of ``namesrv_addr`` (default: the first reachable name server) as
        ``key=value`` pairs."""
        response = await self._call_namesrv_at(request(RequestCode.GET_NAMESRV_CONFIG), namesrv_addr)
        result: dict[str, str] = {}
        for line in _body(response).decode("utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                result[key.strip()] = value.strip()
        return result

    async def namesrvs_ignoring_order_conf(self) -> list[str]:
        """The configured name servers that leave the order conf (ORDER_TOPIC_CONFIG) out of routes:
        those with ``orderMessageEnable=false``, upstream's default. Unreachable ones are skipped."""
        out = []
        for addr in self.namesrv_addrs:
            try:
                config = await self.get_namesrv_config(addr)
            except (AdminError, RemotingError) as e:
                log.debug("name server %s: no config: %s", addr, e)
                continue
            if config.get("orderMessageEnable", "false").lower() != "true":
                out.append(addr)
        return out

    async def update_namesrv_config(
        self, properties: dict[str, str], namesrv_addrs: list[str] | None = None
    ) -> None:
        """UPDATE_NAMESRV_CONFIG to each of ``namesrv_addrs`` (default: every configured name server).

        As upstream's ``updateNameServerConfig``: every name server is asked even after one refuses
        (a black-listed key: NO_PERMISSION), then the last refusal is raised as AdminError; a name
        server that cannot be reached raises at once.
        """
        body = properties_text(properties)
        refused: AdminError | None = None
        for addr in self.namesrv_addrs if namesrv_addrs is None else namesrv_addrs:
            try:
                await self._call(addr, request(RequestCode.UPDATE_NAMESRV_CONFIG, body=body))
            except AdminError as e:
                refused = e
        if refused is not None:
            raise refused

    # --- brokers --------------------------------------------------------------------------

    async def fetch_broker_runtime_stats(self, broker_addr: str) -> KVTable:
        response = await self._call(broker_addr, request(RequestCode.GET_BROKER_RUNTIME_INFO))
        return KVTable.decode(_body(response))

    async def get_broker_ha_status(self, broker_addr: str) -> HARuntimeInfo:
        """GET_BROKER_HA_STATUS: the broker's replication status (mqadmin ``haStatus``)."""
        response = await self._call(broker_addr, request(RequestCode.GET_BROKER_HA_STATUS))
        try:
            return HARuntimeInfo.decode(_body(response))
        except (ValueError, msgspec.ValidationError) as e:
            raise AdminError(ResponseCode.SYSTEM_ERROR, f"bad HARuntimeInfo body: {e}", broker_addr) from None

    async def query_topic_consume_by_who(self, topic: str) -> GroupList | None:
        """Consumer groups of ``topic``, asked of the first broker group of its route."""
        route = await self.examine_topic_route_info(topic)
        for bd in route.brokerDatas:
            addr = bd.brokerAddrs.get(MASTER_ID) or next(iter(bd.brokerAddrs.values()), None)
            if addr is not None:
                response = await self._call(
                    addr, request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
                )
                try:
                    return GroupList.decode(_body(response))
                except (ValueError, msgspec.ValidationError) as e:
                    raise AdminError(ResponseCode.SYSTEM_ERROR, f"bad GroupList body: {e}", addr) from None
        return None

    # --- cluster membership (upstream ``CommandUtil``) -------------------------------------------

    async def fetch_master_addrs_by_cluster(self, cluster: str) -> list[str]:
        """Master addresses of the broker groups of ``cluster`` (sorted); ValueError if unknown."""
        info = await self.examine_broker_cluster_info()
        names = info.clusterAddrTable.get(cluster)
        if names is None:
            raise ValueError(CLUSTER_NOT_FOUND)
        addrs = []
        for name in sorted(names):
            bd = info.brokerAddrTable.get(name)
            if bd is not None and MASTER_ID in bd.brokerAddrs:
                addrs.append(bd.brokerAddrs[MASTER_ID])
            else:
                log.warning("broker group %s of cluster %s has no master", name, cluster)
        return addrs

    async def fetch_master_and_slave_addrs_by_cluster(self, cluster: str) -> list[str]:
        return cluster_addrs(await self.examine_broker_cluster_info(), cluster)

    async def fetch_master_and_slave_distinguish(self, cluster: str) -> dict[str, list[str]]:
        """Upstream ``CommandUtil.fetchMasterAndSlaveDistinguish``: each broker group's master address
        (:data:`NO_MASTER_PLACEHOLDER` for groups without one) -> its slaves' addresses, groups in
        name order, slaves in id order; ValueError if the cluster is unknown."""
        info = await self.examine_broker_cluster_info()
        names = info.clusterAddrTable.get(cluster)
        if names is None:
            raise ValueError(CLUSTER_NOT_FOUND)
        result: dict[str, list[str]] = {}
        for name in sorted(names):
            bd = info.brokerAddrTable.get(name)
            if bd is None:
                continue
            master = bd.brokerAddrs.get(MASTER_ID, NO_MASTER_PLACEHOLDER)
            slaves = result.setdefault(master, [])
            slaves.extend(addr for bid, addr in sorted(bd.brokerAddrs.items()) if bid != MASTER_ID)
        return result

    async def get_topic_cluster_list(self, topic: str) -> list[str]:
        """Upstream ``getTopicClusterList``: the clusters holding the broker groups of ``topic``'s
        route, sorted (upstream looks at the route's first broker group only; this at all of them)."""
        info = await self.examine_broker_cluster_info()
        route = await self.examine_topic_route_info(topic)
        names = {bd.brokerName for bd in route.brokerDatas}
        return sorted(cluster for cluster, members in info.clusterAddrTable.items() if names & set(members))

    async def fetch_broker_names_by_cluster(self, cluster: str) -> list[str]:
        info = await self.examine_broker_cluster_info()
        names = info.clusterAddrTable.get(cluster)
        if names is None:
            raise ValueError(CLUSTER_NOT_FOUND)
        return sorted(names)

    async def fetch_broker_name_by_addr(self, addr: str) -> str:
        info = await self.examine_broker_cluster_info()
        for name, bd in info.brokerAddrTable.items():
            if addr in bd.brokerAddrs.values():
                return name
        raise ValueError(f"broker {addr} is not registered with the name server")

    async def delete_topic_in_namesrvs(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV on every configured name server (mqadmin deleteTopic)."""
        cmd_fields = {"topic": topic, "clusterName": cluster}
        for addr in self.namesrv_addrs:
            await self._call(addr, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, cmd_fields))

    # --- broker topics ----------------------------------------------------------------------------

    async def create_and_update_topic_config(
        self, broker_addr: str, config: TopicConfig, attributes: dict[str, str] | None = None
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC; ``attributes`` is a parsed modification (``{"+k": "v", "-k": ""}``)."""
        header = CreateTopicRequestHeader(
            topic=config.topicName,
            defaultTopic="TBW102",
            readQueueNums=config.readQueueNums,
            writeQueueNums=config.writeQueueNums,
            perm=config.perm,
            topicFilterType=config.topicFilterType.value,
            topicSysFlag=config.topicSysFlag,
            order=config.order,
            attributes=attributes_to_string(attributes or {}),
        )
        await self._call(
            broker_addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(encode_header(header)))
        )

    async def create_and_update_topic_config_list(self, broker_addr: str, configs: list[TopicConfig]) -> None:
        """UPDATE_AND_CREATE_TOPIC_LIST: every topic of ``configs`` at once (each one's
        ``attributes`` a modification, ``{"+k": "v", "-k": ""}``); the broker takes all or none."""
        body = CreateTopicListRequestBody(topicConfigList=configs).encode()
        await self._call(broker_addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body))

    async def delete_topic_in_broker(self, broker_addrs: Iterable[str], topic: str) -> None:
        for addr in broker_addrs:
            await self._call(addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}))

    async def get_topic_config(self, broker_addr: str, topic: str) -> TopicConfig:
        response = await self._call(broker_addr, request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic}))
        return TopicConfig.decode(_body(response))

    async def get_all_topic_config(self, broker_addr: str) -> TopicConfigAndMappingSerializeWrapper:
        response = await self._call(broker_addr, request(RequestCode.GET_ALL_TOPIC_CONFIG))
        return TopicConfigAndMappingSerializeWrapper.decode(_body(response))

    async def examine_topic_stats_of(self, broker_addr: str, topic: str) -> TopicStatsTable:
        response = await self._call(broker_addr, request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}))
        return TopicStatsTable.decode(_body(response))

    async def examine_topic_stats(self, topic: str, route_topic: str | None = None) -> TopicStatsTable:
        """Stats of ``topic`` from every broker group of the route of ``route_topic`` (default: ``topic``)."""
        route = await self.examine_topic_route_info(route_topic or topic)
        merged = TopicStatsTable()
        for addr in route_addrs(route):
            merged.offsetTable.update((await self.examine_topic_stats_of(addr, topic)).offsetTable)
        if not merged.offsetTable:
            raise AdminError(ResponseCode.TOPIC_NOT_EXIST, "Not found the topic stats info", "")
        return merged

    async def query_consume_queue(
        self,
        broker_addr: str,
        topic: str,
        queue_id: int,
        index: int,
        count: int,
        consumer_group: str | None = None,
    ) -> QueryConsumeQueueResponseBody:
        """QUERY_CONSUME_QUEUE (mqadmin ``queryCq``): ``count`` consume-queue units of the queue
        from ``index``. A broker answers an index outside the queue with a success without body
        and a remark (upstream does); that raises ValueError with the remark."""
        header = QueryConsumeQueueRequestHeader(
            topic=topic, queueId=queue_id, index=index, count=count, consumerGroup=consumer_group
        )
        cmd = request(RequestCode.QUERY_CONSUME_QUEUE, dict(encode_header(header)))
        response = await self._call(broker_addr, cmd)
        if not response.body:
            raise ValueError(f"{response.remark or 'no consume queue data'} (broker {broker_addr})")
        try:
            return QueryConsumeQueueResponseBody.decode(_body(response))
        except (ValueError, msgspec.ValidationError) as e:
            raise AdminError(
                ResponseCode.SYSTEM_ERROR, f"bad QueryConsumeQueueResponseBody: {e}", broker_addr
            ) from None

    # --- subscription groups and consumers ----------------------------------------------------------

    async def create_and_update_subscription_group_config(
        self, broker_addr: str, config: SubscriptionGroupConfig
    ) -> None:
        cmd = request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
        await self._call(broker_addr, cmd)

    async def create_and_update_subscription_group_config_list(
        self, broker_addr: str, configs: list[SubscriptionGroupConfig]
    ) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: every group of ``configs`` at once."""
        body = SubscriptionGroupList(groupConfigList=configs).encode()
        await self._call(
            broker_addr, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=body)
        )

    async def get_subscription_group_config(self, broker_addr: str, group: str) -> SubscriptionGroupConfig:
        response = await self._call(
            broker_addr, request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
        )
        return SubscriptionGroupConfig.decode(_body(response))

    async def get_all_subscription_group(self, broker_addr: str) -> SubscriptionGroupWrapper:
        response = await self._call(broker_addr, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        return SubscriptionGroupWrapper.decode(_body(response))

    async def delete_subscription_group(
        self, broker_addr: str, group: str, clean_offset: bool = False
    ) -> None:
        header = DeleteSubscriptionGroupRequestHeader(groupName=group, cleanOffset=clean_offset)
        await self._call(
            broker_addr, request(RequestCode.DELETE_SUBSCRIPTIONGROUP, dict(encode_header(header)))
        )

    async def examine_consume_stats_of(
        self, broker_addr: str, group: str, topic: str | None = None
    ) -> ConsumeStats:
        header = GetConsumeStatsRequestHeader(consumerGroup=group, topic=topic)
        response = await self._call(
            broker_addr, request(RequestCode.GET_CONSUME_STATS, dict(encode_header(header)))
        )
        return ConsumeStats.decode(_body(response))

    async def examine_consume_stats(
        self, group: str, topic: str | None = None, cluster: str | None = None
    ) -> ConsumeStats:
        """The group's progress on every broker group of its retry topic's route (or of ``topic``'s)."""
        route_topic = cluster or topic or RETRY_GROUP_TOPIC_PREFIX + group
        route = await self.examine_topic_route_info(route_topic)
        merged = ConsumeStats()
        for bd in route.brokerDatas:
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr is None:
                continue
            stats = await self.examine_consume_stats_of(addr, group, topic)
            merged.offsetTable.update(stats.offsetTable)
            merged.consumeTps += stats.consumeTps
        if not merged.offsetTable and topic is None:
            raise AdminError(ResponseCode.SYSTEM_ERROR, NO_CONSUME_STATS, "")
        return merged

    async def fetch_consume_stats_in_broker(
        self, broker_addr: str, is_order: bool = False
    ) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS: the consume stats of every group on one broker."""
        response = await self._call(
            broker_addr, request(RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": str(is_order).lower()})
        )
        return ConsumeStatsList.decode(_body(response))

    async def update_consumer_offset(
        self, broker_addr: str, group: str, mq: MessageQueue, offset: int
    ) -> None:
        """UPDATE_CONSUMER_OFFSET: commit ``offset`` as ``group``'s position in queue ``mq``."""
        header = UpdateConsumerOffsetRequestHeader(
            consumerGroup=group, topic=mq.topic, queueId=mq.queueId, commitOffset=offset
        )
        await self._call(
            broker_addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, dict(encode_header(header)))
        )

    async def reset_offset(
        self,
        broker_addr: str,
        group: str,
        topic: str,
        timestamp: int,
        *,
        queue_id: int = -1,
        offset: int | None = None,
        force: bool = True,
    ) -> dict[MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET at one broker: the group's offsets of every queue of
        ``topic`` to the first message stored at or after ``timestamp`` (negative: the queue's end),
        or of queue ``queue_id`` to ``offset``; the offsets the broker assigned."""
        header = ResetOffsetRequestHeader(
            group=group, topic=topic, queueId=queue_id, offset=offset, timestamp=timestamp, isForce=force
        )
        response = await self._call(
            broker_addr, request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(encode_header(header)))
        )
        return ResetOffsetBody.decode(_body(response)).offsetTable

    async def reset_offset_by_timestamp(
        self, topic: str, group: str, timestamp: int, force: bool = True
    ) -> dict[MessageQueue, int]:
        """:meth:`reset_offset` at the master of every broker group of the topic's route."""
        route = await self.examine_topic_route_info(topic)
        table: dict[MessageQueue, int] = {}
        for bd in route.brokerDatas:
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr is not None:
                table.update(await self.reset_offset(addr, group, topic, timestamp, force=force))
        return table

    async def search_offset(self, broker_addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the queue offset of the first message stored at or after it."""
        cmd = request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            {"topic": topic, "queueId": str(queue_id), "timestamp": str(timestamp)},
        )
        response = await self._call(broker_addr, cmd)
        return int((response.ext_fields or {}).get("offset", -1))

    async def examine_consumer_connection_info(
        self, group: str, broker_addr: str | None = None
    ) -> ConsumerConnection:
        """Who is online in ``group``: asked of ``broker_addr``, else of the brokers of its retry
        topic's route (the first that knows a member answers)."""
        if broker_addr is not None:
            addrs = [broker_addr]
        else:
            route = await self.examine_topic_route_info(RETRY_GROUP_TOPIC_PREFIX + group)
            addrs = route_addrs(route)
        for addr in addrs:
            response = await self._call(
                addr, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
            )
            connection = ConsumerConnection.decode(_body(response))
            if connection.connectionSet:
                return connection
        raise AdminError(ResponseCode.CONSUMER_NOT_ONLINE, "Not found the consumer group connection", "")

    async def get_consumer_running_info(
        self, group: str, client_id: str, jstack: bool = False, broker_addr: str | None = None
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO of one client of ``group``, asked through ``broker_addr`` or
        the first broker of the group's retry topic route (the broker asks the client)."""
        if broker_addr is None:
            addrs = route_addrs(await self.examine_topic_route_info(RETRY_GROUP_TOPIC_PREFIX + group))
            if not addrs:
                raise AdminError(
                    ResponseCode.SYSTEM_ERROR, f"no broker routes the retry topic of {group}", ""
                )
            broker_addr = addrs[0]
        header = GetConsumerRunningInfoRequestHeader(
            consumerGroup=group, clientId=client_id, jstackEnable=jstack
        )
        cmd = request(RequestCode.GET_CONSUMER_RUNNING_INFO, dict(encode_header(header)))
        response = await self.client.invoke(broker_addr, cmd, max(self.timeout, RUNNING_INFO_TIMEOUT))
        if response.code != ResponseCode.SUCCESS:
            raise AdminError(response.code, response.remark, broker_addr)
        return ConsumerRunningInfo.decode(_body(response))

    async def get_all_producer_info(self, broker_addr: str) -> ProducerTableInfo:
        """GET_ALL_PRODUCER_INFO: every producer group registered with the broker (mqadmin
        ``producer``)."""
        response = await self._call(broker_addr, request(RequestCode.GET_ALL_PRODUCER_INFO))
        try:
            return ProducerTableInfo.decode(_body(response))
        except (ValueError, msgspec.ValidationError) as e:
            raise AdminError(
                ResponseCode.SYSTEM_ERROR, f"bad ProducerTableInfo body: {e}", broker_addr
            ) from None

    async def examine_producer_connection_info(self, group: str, topic: str) -> ProducerConnection:
        """The producers of ``group`` connected to the brokers of ``topic``'s route (the first broker
        that knows a member answers)."""
        route = await self.examine_topic_route_info(topic)
        last: AdminError | None = None
        for addr in route_addrs(route):
            try:
                response = await self._call(
                    addr, request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
                )
            except AdminError as e:  # "the producer group[...] not exist" on this broker
                last = e
                continue
            connection = ProducerConnection.decode(_body(response))
            if connection.connectionSet:
                return connection
        reason = f" ({last.remark})" if last is not None and last.remark else ""
        raise AdminError(ResponseCode.SYSTEM_ERROR, f"Not found the producer group connection{reason}", "")

    # --- broker config ------------------------------------------------------------------------------

    async def get_broker_config(self, broker_addr: str) -> dict[str, str]:
        response = await self._call(broker_addr, request(RequestCode.GET_BROKER_CONFIG))
        result: dict[str, str] = {}
        for line in _body(response).decode("utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                result[key.strip()] = value.strip()
        return result

    async def update_broker_config(self, broker_addr: str, properties: dict[str, str]) -> None:
        await self._call(
            broker_addr, request(RequestCode.UPDATE_BROKER_CONFIG, body=properties_text(properties))
        )


def route_addrs(route: TopicRouteData) -> list[str]:
    """One address per broker group of ``route``: its master's, else its first replica's."""
    addrs = []
    for bd in route.brokerDatas:
        addr = bd.brokerAddrs.get(MASTER_ID) or next(iter(bd.brokerAddrs.values()), None)
        if addr is not None:
            addrs.append(addr)
    return addrs
