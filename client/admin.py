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

import msgspec

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingConnectError, RemotingError
from remoting.protocol.common import GroupList, KVTable, TopicList
from remoting.protocol.namesrv import (
    MASTER_ID,
    BrokerMemberGroup,
    ClusterInfo,
    GetBrokerMemberGroupResponseBody,
    TopicRouteData,
)

__all__ = ["AdminError", "MQAdmin", "parse_namesrv_addrs"]

log = logging.getLogger("client.admin")

DEFAULT_TIMEOUT = 5.0


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
        super().__init__(f"{name} ({code}) from {addr}: {self.remark}".rstrip(": "))


def parse_namesrv_addrs(addrs: str | list[str]) -> list[str]:
    """``"a:9876;b:9876"`` (or a list) -> addresses, blanks dropped."""
    parts = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    return [p.strip() for p in parts if p.strip()]


def _body(response: RemotingCommand) -> bytes:
    return response.body_bytes


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

    async def _call(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        response = await self.client.invoke(addr, cmd, self.timeout)
        if response.code != ResponseCode.SUCCESS:
            raise AdminError(response.code, response.remark, addr)
        return response

    async def call_namesrv(self, cmd: RemotingCommand) -> RemotingCommand:
        """Send to the first reachable name server; raise its error response as AdminError."""
        last: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self._call(addr, cmd)
            except RemotingConnectError as e:
                log.debug("name server %s unreachable: %s", addr, e)
                last = e
        assert last is not None
        raise last

    # --- name server ----------------------------------------------------------------------

    async def examine_broker_cluster_info(self) -> ClusterInfo:
        response = await self.call_namesrv(request(RequestCode.GET_BROKER_CLUSTER_INFO))
        return ClusterInfo.decode(_body(response))

    async def fetch_all_topic_list(self) -> TopicList:
        response = await self.call_namesrv(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return TopicList.decode(_body(response))

    async def fetch_topics_by_cluster(self, cluster: str) -> TopicList:
        response = await self.call_namesrv(request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}))
        return TopicList.decode(_body(response))

    async def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        cmd = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True})
        response = await self.call_namesrv(cmd)
        return TopicRouteData.decode(_body(response))

    async def get_broker_member_group(self, cluster: str, broker_name: str) -> BrokerMemberGroup | None:
        cmd = request(
            RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": cluster, "brokerName": broker_name}
        )
        response = await self.call_namesrv(cmd)
        return GetBrokerMemberGroupResponseBody.decode(_body(response)).brokerMemberGroup

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """The value, or None when the name server has no such item."""
        try:
            response = await self.call_namesrv(
                request(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
            )
        except AdminError as e:
            if e.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise
        return (response.ext_fields or {}).get("value")

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        await self.call_namesrv(
            request(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})
        )

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        await self.call_namesrv(request(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key}))

    async def get_kv_list_by_namespace(self, namespace: str) -> KVTable | None:
        try:
            response = await self.call_namesrv(
                request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace})
            )
        except AdminError as e:
            if e.code == ResponseCode.QUERY_NOT_FOUND:
                return None
            raise
        return KVTable.decode(_body(response))

    async def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        response = await self.call_namesrv(
            request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        )
        return int((response.ext_fields or {}).get("wipeTopicCount", "0"))

    async def add_write_perm_of_broker(self, broker_name: str) -> int:
        response = await self.call_namesrv(
            request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
        )
        return int((response.ext_fields or {}).get("addTopicCount", "0"))

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        await self.call_namesrv(
            request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        )

    async def get_namesrv_config(self) -> dict[str, str]:
        """Each name server's config as ``key=value`` pairs (first reachable one)."""
        response = await self.call_namesrv(request(RequestCode.GET_NAMESRV_CONFIG))
        result: dict[str, str] = {}
        for line in _body(response).decode("utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                result[key.strip()] = value.strip()
        return result

    # --- brokers --------------------------------------------------------------------------

    async def fetch_broker_runtime_stats(self, broker_addr: str) -> KVTable:
        response = await self._call(broker_addr, request(RequestCode.GET_BROKER_RUNTIME_INFO))
        return KVTable.decode(_body(response))

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
