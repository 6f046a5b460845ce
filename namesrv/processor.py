"""Name-server request handlers (upstream ``DefaultRequestProcessor`` + ``ClientRequestProcessor``).

Each handler decodes its typed header (a :class:`remoting.headers.HeaderError` becomes a
SYSTEM_ERROR response in the dispatcher), calls the route tables or KV store, and builds the
response. extFields of responses are strings only (``RemotingCommand.response`` converts).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from namesrv.config import IGNORED_NAMESRV_KEYS
from remoting import fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import decode_header, encode_header
from remoting.protocol.common import DataVersion, TopicConfigSerializeWrapper
from remoting.protocol.namesrv import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    V3_0_11,
    V4_9_4,
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    BrokerHeartbeatRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetBrokerMemberGroupRequestHeader,
    GetBrokerMemberGroupResponseBody,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    RegisterTopicRequestHeader,
    TopicRouteData,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
    crc32,
)

if TYPE_CHECKING:
    from namesrv.controller import NamesrvController

log = logging.getLogger("namesrv")

#: Suffix upstream appends to "no route" remarks (``FAQUrl.suggestTodo(APPLY_TOPIC_URL)``).
FAQ_SUFFIX = "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
#: Config keys UPDATE_NAMESRV_CONFIG may never change (upstream's built-in black list).
_ALWAYS_BLACKLISTED = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})

Handler = Callable[[RequestContext, RemotingCommand], Awaitable[RemotingCommand | None]]


def _ok(request: RemotingCommand, body: bytes | None = None, header: Any = None) -> RemotingCommand:
    response = request.response(ResponseCode.SUCCESS)
    if header is not None:
        response.ext_fields = encode_header(header)
    response.body = body
    return response


class NamesrvProcessor:
    """Maps name-server request codes onto a :class:`NamesrvController`'s tables."""

    def __init__(self, controller: NamesrvController) -> None:
        self.c = controller

    def register_into(self, table: ProcessorTable) -> None:
        handlers: dict[int, Handler] = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.GET_BROKER_MEMBER_GROUP: self.get_broker_member_group,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: self.register_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }
        for code, handler in handlers.items():
            table.register(code, handler)

    # --- routes ----------------------------------------------------------------------------

    async def get_route_info_by_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetRouteInfoRequestHeader)
        config = self.c.config
        if getattr(config, "needWaitForService", False):
            waited_ms = self.c.now_ms() - self.c.started_at_ms
            if waited_ms < getattr(config, "waitSecondsForService", 45) * 1000:
                return request.response(ResponseCode.SYSTEM_ERROR, "name server not ready")
        standard = request.version >= V4_9_4 or bool(h.acceptStandardJsonOnly)
        routes = self.c.routes
        order_conf = (
            self.c.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, h.topic) if config.orderMessageEnable else None
        )
        if order_conf is not None:
            route = routes.pickup_topic_route_data(h.topic)
            body = None
            if route is not None:
                route.orderTopicConf = order_conf
                body = fastjson.dumps(route, standard=standard)
        else:
            # the cached encoding (a route without an order conf): also with orderMessageEnable,
            # as in the dev profile, where a test suite's thousands of topics are polled every 30 s
            body = routes.route_body(h.topic, standard=standard)
        if body is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}{FAQ_SUFFIX}",
            )
        return _ok(request, body)

    async def register_broker(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, RegisterBrokerRequestHeader)
        body = request.body_bytes
        if h.bodyCrc32 != 0 and crc32(body) != h.bodyCrc32:
            log.warning("register broker from %s: crc32 not match", ctx.connection.remote_address)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        filter_servers: list[str] | None = None
        try:
            if request.version >= V3_0_11:
                if body:
                    reg = (
                        RegisterBrokerBody.decode_compressed(body, request.version)
                        if h.compressed
                        else RegisterBrokerBody.decode(body)
                    )
                else:
                    reg = RegisterBrokerBody()
                wrapper: TopicConfigSerializeWrapper = reg.topicConfigSerializeWrapper
                filter_servers = reg.filterServerList
            else:
                wrapper = TopicConfigSerializeWrapper.decode(body) if body else TopicConfigSerializeWrapper()
        except (ValueError, msgspec.ValidationError) as e:
            log.warning(
                "register broker %s: bad body from %s: %s", h.brokerAddr, ctx.connection.remote_address, e
            )
            return request.response(ResponseCode.SYSTEM_ERROR, f"Failed to decode RegisterBrokerBody: {e}")

        result = self.c.routes.register_broker(
            clusterName=h.clusterName,
            brokerAddr=h.brokerAddr,
            brokerName=h.brokerName,
            brokerId=h.brokerId,
            haServerAddr=h.haServerAddr,
            now_ms=self.c.now_ms(),
            topicConfigWrapper=wrapper,
            filterServerList=filter_servers,
            zoneName=(request.ext_fields or {}).get("__ZONE_NAME"),
            timeoutMillis=h.heartbeatTimeoutMillis,
            enableActingMaster=h.enableActingMaster,
            connection_id=ctx.connection.id,
        )
        if result is None:
            return request.response(ResponseCode.SYSTEM_ERROR, "register broker failed")
        self.c.broker_connections[ctx.connection.id] = ctx.connection
        self.c.send_notifications(result.notifications)
        kv_body = None
        if self.c.config.returnOrderTopicConfigToBroker:
            kv = self.c.kv.list_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
            kv_body = kv.encode() if kv is not None else None
        header = RegisterBrokerResponseHeader(haServerAddr=result.haServerAddr, masterAddr=result.masterAddr)
        return _ok(request, kv_body, header)

    async def unregister_broker(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, UnRegisterBrokerRequestHeader)
        changes = self.c.routes.unregister_broker(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId)
        self.c.send_notifications(changes)
        return _ok(request)

    async def broker_heartbeat(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, BrokerHeartbeatRequestHeader)
        self.c.routes.update_broker_timestamp(h.clusterName, h.brokerAddr, self.c.now_ms())
        return _ok(request)

    async def query_data_version(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, QueryDataVersionRequestHeader)
        routes = self.c.routes
        body = request.body_bytes
        try:
            version = DataVersion.decode(body) if body else None
        except (ValueError, msgspec.ValidationError) as e:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad DataVersion body: {e}")
        changed = version is None or routes.is_broker_topic_config_changed(
            h.clusterName, h.brokerAddr, version
        )
        routes.update_broker_timestamp(h.clusterName, h.brokerAddr, self.c.now_ms())
        stored = routes.query_broker_data_version(h.clusterName, h.brokerAddr)
        return _ok(
            request,
            stored.encode() if stored is not None else None,
            QueryDataVersionResponseHeader(changed=changed),
        )

    async def get_broker_member_group(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetBrokerMemberGroupRequestHeader)
        group = self.c.routes.get_broker_member_group(h.clusterName, h.brokerName)
        return _ok(request, GetBrokerMemberGroupResponseBody(brokerMemberGroup=group).encode())

    async def get_broker_cluster_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return _ok(request, self.c.routes.get_all_cluster_info().encode())

    async def wipe_write_perm(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, WipeWritePermOfBrokerRequestHeader)
        count = self.c.routes.wipe_write_perm_of_broker(h.brokerName)
        log.info(
            "wipe write perm of broker %s by %s: %d topics",
            h.brokerName,
            ctx.connection.remote_address,
            count,
        )
        return _ok(request, header=WipeWritePermOfBrokerResponseHeader(wipeTopicCount=count))

    async def add_write_perm(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, AddWritePermOfBrokerRequestHeader)
        count = self.c.routes.add_write_perm_of_broker(h.brokerName)
        log.info(
            "add write perm of broker %s by %s: %d topics", h.brokerName, ctx.connection.remote_address, count
        )
        return _ok(request, header=AddWritePermOfBrokerResponseHeader(addTopicCount=count))

    async def get_all_topic_list(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if not self.c.config.enableAllTopicList:
            return request.response(ResponseCode.SYSTEM_ERROR, "disable")
        return _ok(request, self.c.routes.get_all_topic_list().encode())

    async def get_topics_by_cluster(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if not getattr(self.c.config, "enableTopicList", True):
            return request.response(ResponseCode.SYSTEM_ERROR, "disable")
        h = decode_header(request, GetTopicsByClusterRequestHeader)
        return _ok(request, self.c.routes.get_topics_by_cluster(h.cluster).encode())

    async def get_system_topic_list(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return _ok(request, self.c.routes.get_system_topic_list().encode())

    async def delete_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, DeleteTopicFromNamesrvRequestHeader)
        self.c.routes.delete_topic(h.topic, h.clusterName)
        return _ok(request)

    async def register_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, RegisterTopicRequestHeader)
        body = request.body_bytes
        if body:
            try:
                route = TopicRouteData.decode(body)
            except (ValueError, msgspec.ValidationError) as e:
                return request.response(ResponseCode.SYSTEM_ERROR, f"bad TopicRouteData body: {e}")
            self.c.routes.register_topic(h.topic, route.queueDatas)
        return _ok(request)

    # --- KV config -------------------------------------------------------------------------

    async def put_kv_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, PutKVConfigRequestHeader)
        self.c.kv.put(h.namespace, h.key, h.value)
        await self.c.kv.persist()
        return _ok(request)

    async def get_kv_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, GetKVConfigRequestHeader)
        value = self.c.kv.get(h.namespace, h.key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}"
            )
        return request.response(ResponseCode.SUCCESS, value=value)

    async def delete_kv_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        h = decode_header(request, DeleteKVConfigRequestHeader)
        self.c.kv.delete(h.namespace, h.key)
        await self.c.kv.persist()
        return _ok(request)

    async def get_kv_list_by_namespace(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand:
        h = decode_header(request, GetKVListByNamespaceRequestHeader)
        table = self.c.kv.list_namespace(h.namespace)
        if table is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace}")
        return _ok(request, table.encode())

    # --- name server config ----------------------------------------------------------------

    async def get_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return _ok(request, config_to_properties(self.c.config).encode("utf-8"))

    async def update_config(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = request.body_bytes
        if not body:
            return _ok(request)
        try:
            updates = parse_properties(body.decode("utf-8"))
        except UnicodeDecodeError as e:
            return request.response(ResponseCode.SYSTEM_ERROR, f"UnsupportedEncodingException {e}")
        black = _ALWAYS_BLACKLISTED | set(
            filter(None, getattr(self.c.config, "configBlackList", "").split(";"))
        )
        if black & updates.keys():
            return request.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        ignored = sorted(k for k in updates if k in IGNORED_NAMESRV_KEYS)
        if ignored:
            # upstream keys without a meaning here: accepted, as in a config file
            log.info(
                "name server config keys without effect in rmq-container ignored: %s", ", ".join(ignored)
            )
            updates = {k: v for k, v in updates.items() if k not in IGNORED_NAMESRV_KEYS}
        error = apply_config_updates(self.c.config, updates)
        if error is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, error)
        log.info("name server config updated by %s: %s", ctx.connection.remote_address, updates)
        return _ok(request)


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` lines (Java properties, simple form): ``#``/``!`` comments, ``=`` or ``:``."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            result[line] = ""
        else:
            result[line[:cut].strip()] = line[cut + 1 :].strip()
    return result


def config_to_properties(config: object) -> str:
    """The config as ``key=value`` lines (upstream ``getAllConfigsFormatString``)."""
    if isinstance(config, msgspec.Struct):
        names: tuple[str, ...] = config.__struct_fields__
    else:
        names = tuple(n for n in vars(config) if not n.startswith("_"))
    lines = []
    for name in names:
        value = getattr(config, name)
        text = (
            "" if value is None else ("true" if value is True else "false" if value is False else str(value))
        )
        lines.append(f"{name}={text}")
    return "\n".join(lines) + "\n"


def apply_config_updates(config: object, updates: dict[str, str]) -> str | None:
    """Set known keys on ``config`` with type conversion; returns an error text or None."""
    current: dict[str, Any] = {}
    known = config.__struct_fields__ if isinstance(config, msgspec.Struct) else tuple(vars(config))
    unknown = [k for k in updates if k not in known]
    if unknown:
        return f"unknown config keys: {', '.join(sorted(unknown))}"
    if isinstance(config, msgspec.Struct):
        current = msgspec.structs.asdict(config)
        current.update(updates)
        try:
            converted = msgspec.convert(current, type(config), strict=False)
        except msgspec.ValidationError as e:
            return f"bad config value: {e}"
        for k in updates:
            setattr(config, k, getattr(converted, k))
        return None
    for k, v in updates.items():
        setattr(config, k, v)
    return None
