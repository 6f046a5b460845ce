"""A scripted in-test name server + brokers for the Python client's integration tests.

Built on :class:`remoting.server.RemotingServer` with in-memory queues. It answers the codes the
client uses (105, 10/310/320, 11, 14, 15, 29-31, 34, 35, 36, 38, 41, 42) the way the reference
documents describe, records every request it receives, and lets a test script failures
(``broker.fail_sends``), hold requests of a code at a gate (``broker.gates``), hold or answer pulls at once, suggest another broker id for pulls, and
push NOTIFY_CONSUMER_IDS_CHANGED. It is deliberately small: no files, no replication, the retry
topic copy of a send-back is visible at once (no delay levels).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import Connection, ProcessorTable, RequestContext
from remoting.headers import decode_header
from remoting.protocol.broker import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    PullMessageRequestHeader,
    PullSysFlag,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    UnlockBatchRequestBody,
)
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    decode_batch_body,
    decode_message,
    encode_message,
    offset_msg_id,
    parse_properties,
    properties_to_string,
)
from remoting.protocol.namesrv import BrokerData, QueueData, TopicRouteData
from remoting.server import Listener, RemotingServer

CLUSTER = "DefaultCluster"


class FakeBroker:
    """One broker (master or slave) with in-memory queues."""

    def __init__(self, cluster: FakeCluster, name: str, broker_id: int = 0) -> None:
        self.cluster = cluster
        self.name = name
        self.broker_id = broker_id
        self.addr = ""
        #: every request received, in arrival order: (code, extFields, body)
        self.requests: list[tuple[int, dict[str, str], bytes]] = []
        self.queues: dict[tuple[str, int], list[bytes]] = {}
        self.commitlog: dict[int, bytes] = {}
        self._phys = 0
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.groups: dict[str, dict[str, Connection]] = {}
        self.locks: dict[MessageQueue, str] = {}
        #: response codes to answer the next sends with (popped one per send)
        self.fail_sends: list[int] = []
        #: hold suspended pulls until a message arrives (long polling)
        self.long_polling = True
        #: the suggestWhichBrokerId put in pull responses
        self.suggest_broker_id = 0
        #: when False, topics unknown to this broker are refused with 17 even with TBW102
        self.auto_create = True
        #: answer CONSUMER_SEND_MSG_BACK with SYSTEM_ERROR
        self.fail_send_back = False
        #: request code -> an event its requests wait for before they are handled (a gate)
        self.gates: dict[int, trio.Event] = {}
        #: request code -> how many of its requests have reached a gate
        self.gated: dict[int, int] = {}
        self.topics: set[str] = set()
        self.auto_created: list[str] = []
        self._arrival = trio.Event()
        self.listener: Listener | None = None
        self.table = ProcessorTable(on_close=self._on_close)
        for code, handler in {
            RequestCode.SEND_MESSAGE: self._send,
            RequestCode.SEND_MESSAGE_V2: self._send,
            RequestCode.SEND_BATCH_MESSAGE: self._send,
            RequestCode.PULL_MESSAGE: self._pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.UNREGISTER_CLIENT: self._unregister,
            RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.LOCK_BATCH_MQ: self._lock,
            RequestCode.UNLOCK_BATCH_MQ: self._unlock,
        }.items():
            self.table.register(code, self._recording(handler))

    def _recording(self, handler):  # type: ignore[no-untyped-def]
        async def wrapped(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
            self.requests.append((cmd.code, dict(cmd.ext_fields or {}), cmd.body_bytes))
            gate = self.gates.get(cmd.code)
            if gate is not None:
                self.gated[cmd.code] = self.gated.get(cmd.code, 0) + 1
                await gate.wait()
            return await handler(ctx, cmd)

        return wrapped

    # ------------------------------------------------------------------ helpers for tests

    def codes(self) -> list[int]:
        return [c for c, _, _ in self.requests]

    def requests_with(self, code: int) -> list[dict[str, str]]:
        return [ext for c, ext, _ in self.requests if c == code]

    def messages(self, topic: str, queue_id: int | None = None) -> list[dict[str, object]]:
        out = []
        for (t, q), records in sorted(self.queues.items()):
            if t != topic or (queue_id is not None and q != queue_id):
                continue
            for rec in records:
                m = decode_message(rec)
                out.append(
                    {
                        "queue_id": q,
                        "body": m.body,
                        "properties": m.properties,
                        "sys_flag": m.sys_flag,
                        "m": m,
                    }
                )
        return out

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        *,
        reconsume_times: int = 0,
        flag: int = 0,
        sys_flag: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 1),
    ) -> tuple[int, int]:
        """Store a message; returns (queue offset, physical offset)."""
        q = self.queues.setdefault((topic, queue_id), [])
        host, port = self.addr.rsplit(":", 1)
        phys = self._phys
        rec = bytes(
            encode_message(
                topic=topic,
                queue_id=queue_id,
                flag=flag,
                body=body,
                properties=properties_to_string(properties),
                sys_flag=sys_flag,
                born_timestamp=int(time.time() * 1000),
                born_host=born_host,
                store_host=(host, int(port)),
                reconsume_times=reconsume_times,
                store_timestamp=int(time.time() * 1000),
                queue_offset=len(q),
                physical_offset=phys,
            )
        )
        self._phys += len(rec)
        self.commitlog[phys] = rec
        q.append(rec)
        self.topics.add(topic)
        self._arrival.set()
        self._arrival = trio.Event()
        return len(q) - 1, phys

    async def notify_ids_changed(self, group: str) -> None:
        for conn in list(self.groups.get(group, {}).values()):
            if not conn.closed:
                await conn.oneway(request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))

    # ------------------------------------------------------------------ handlers

    def _on_close(self, conn: Connection) -> None:
        for clients in self.groups.values():
            for cid, c in list(clients.items()):
                if c is conn:
                    del clients[cid]

    async def _send(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.SEND_MESSAGE:
            h = decode_header(cmd, SendMessageRequestHeader)
        else:
            h = decode_header(cmd, SendMessageRequestHeaderV2).to_v1()
        if self.fail_sends:
            code = self.fail_sends.pop(0)
            return cmd.response(code, f"scripted failure {code}")
        if self.broker_id != 0:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "slave cannot write")
        if h.topic not in self.topics and h.topic not in self.cluster.routes:
            if not (self.auto_create and h.defaultTopic == "TBW102"):
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
            self.auto_created.append(h.topic)
        qid = max(h.queueId, 0)
        born = ctx.connection.remote_address.rsplit(":", 1)
        born_host = (born[0], int(born[1]))
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            first = None
            ids = []
            for item in decode_batch_body(cmd.body_bytes):
                qoff, phys = self.put(
                    h.topic,
                    qid,
                    item.body,
                    parse_properties(item.properties),
                    flag=item.flag,
                    born_host=born_host,
                )
                first = qoff if first is None else first
                ids.append(offset_msg_id(self.addr, phys))
            return cmd.response(
                ResponseCode.SUCCESS,
                None,
                msgId=",".join(ids),
                queueId=qid,
                queueOffset=first,
                MSG_REGION="DefaultRegion",
                TRACE_ON="true",
            )
        qoff, phys = self.put(
            h.topic,
            qid,
            cmd.body_bytes,
            parse_properties(h.properties or ""),
            reconsume_times=h.reconsumeTimes or 0,
            flag=h.flag,
            sys_flag=h.sysFlag,
            born_host=born_host,
        )
        return cmd.response(
            ResponseCode.SUCCESS,
            None,
            msgId=offset_msg_id(self.addr, phys),
            queueId=qid,
            queueOffset=qoff,
            MSG_REGION="DefaultRegion",
            TRACE_ON="true",
        )

    def _pull_now(self, h: PullMessageRequestHeader) -> tuple[int, list[bytes], int]:
        q = self.queues.get((h.topic, h.queueId), [])
        return len(q), q[h.queueOffset : h.queueOffset + h.maxMsgNums], h.queueOffset

    async def _pull(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, PullMessageRequestHeader)
        if h.sysFlag & PullSysFlag.COMMIT_OFFSET:
            self.offsets[(h.consumerGroup, h.topic, h.queueId)] = h.commitOffset
        max_offset, records, _ = self._pull_now(h)
        if h.queueOffset > max_offset:
            return cmd.response(
                ResponseCode.PULL_OFFSET_MOVED,
                "OFFSET_OVERFLOW_BADLY",
                nextBeginOffset=max_offset,
                minOffset=0,
                maxOffset=max_offset,
                suggestWhichBrokerId=self.suggest_broker_id,
            )
        if not records and h.sysFlag & PullSysFlag.SUSPEND and self.long_polling:
            with trio.move_on_after(h.suspendTimeoutMillis / 1000):
                while not records:
                    await self._arrival.wait()
                    max_offset, records, _ = self._pull_now(h)
        if not records:
            return cmd.response(
                ResponseCode.PULL_NOT_FOUND,
                "OFFSET_OVERFLOW_ONE",
                nextBeginOffset=h.queueOffset,
                minOffset=0,
                maxOffset=max_offset,
                suggestWhichBrokerId=self.suggest_broker_id,
            )
        resp = cmd.response(
            ResponseCode.SUCCESS,
            "FOUND",
            nextBeginOffset=h.queueOffset + len(records),
            minOffset=0,
            maxOffset=max_offset,
            suggestWhichBrokerId=self.suggest_broker_id,
        )
        resp.body = b"".join(records)
        return resp

    async def _query_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        key = (ext["consumerGroup"], ext["topic"], int(ext["queueId"]))
        if key not in self.offsets:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        return cmd.response(ResponseCode.SUCCESS, None, offset=self.offsets[key])

    async def _update_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        self.offsets[(ext["consumerGroup"], ext["topic"], int(ext["queueId"]))] = int(ext["commitOffset"])
        return cmd.response(ResponseCode.SUCCESS)

    async def _max_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        return cmd.response(
            ResponseCode.SUCCESS, None, offset=len(self.queues.get((ext["topic"], int(ext["queueId"])), []))
        )

    async def _min_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, offset=0)

    async def _search_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        records = self.queues.get((ext["topic"], int(ext["queueId"])), [])
        ts = int(ext["timestamp"])
        for i, rec in enumerate(records):
            if decode_message(rec).store_timestamp >= ts:
                return cmd.response(ResponseCode.SUCCESS, None, offset=i)
        return cmd.response(ResponseCode.SUCCESS, None, offset=len(records))

    async def _heartbeat(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        hb = HeartbeatData.decode(cmd.body_bytes)
        for cd in hb.consumerDataSet:
            clients = self.groups.setdefault(cd.groupName, {})
            new = hb.clientID not in clients
            clients[hb.clientID] = ctx.connection
            if new and len(clients) > 1:
                await self.notify_ids_changed(cd.groupName)
        return cmd.response(ResponseCode.SUCCESS)

    async def _unregister(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        group = ext.get("consumerGroup")
        if group and self.groups.get(group, {}).pop(ext["clientID"], None) is not None:
            await self.notify_ids_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    async def _send_back(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = decode_header(cmd, ConsumerSendMsgBackRequestHeader)
        if self.fail_send_back:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        rec = self.commitlog.get(h.offset)
        if rec is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        m = decode_message(rec)
        props = dict(m.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, m.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, m.offset_msg_id)
        times = m.reconsume_times + 1
        topic = f"%DLQ%{h.group}" if times > (h.maxReconsumeTimes or 16) else f"%RETRY%{h.group}"
        self.put(topic, 0, m.body, props, reconsume_times=times, flag=m.flag, sys_flag=m.sys_flag)
        return cmd.response(ResponseCode.SUCCESS)

    async def _consumer_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        group = (cmd.ext_fields or {})["consumerGroup"]
        ids = sorted(self.groups.get(group, {}))
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.body = GetConsumerListByGroupResponseBody(consumerIdList=ids).encode()
        return resp

    async def _lock(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.decode(cmd.body_bytes)
        ok = []
        for mq in body.mqSet:
            owner = self.locks.get(mq)
            if owner is None or owner == body.clientId:
                self.locks[mq] = body.clientId
                ok.append(mq)
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.body = LockBatchResponseBody(lockOKMQSet=ok).encode()
        return resp

    async def _unlock(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        body = UnlockBatchRequestBody.decode(cmd.body_bytes)
        for mq in body.mqSet:
            if self.locks.get(mq) == body.clientId:
                del self.locks[mq]
        return cmd.response(ResponseCode.SUCCESS)


class FakeCluster:
    """Name server + brokers; ``routes`` maps topic → route returned by GET_ROUTEINFO_BY_TOPIC."""

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.namesrv_addr = ""
        self.brokers: dict[str, FakeBroker] = {}
        self.slaves: dict[str, FakeBroker] = {}
        self.routes: dict[str, TopicRouteData] = {}
        self.route_requests: list[str] = []
        self.namesrv_table = ProcessorTable()
        self.namesrv_table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)

    async def _route(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        topic = (cmd.ext_fields or {})["topic"]
        self.route_requests.append(topic)
        route = self.routes.get(topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
            )
        resp = cmd.response(ResponseCode.SUCCESS)
        resp.body = route.encode()
        return resp

    async def add_broker(self, name: str, *, with_slave: bool = False) -> FakeBroker:
        broker = FakeBroker(self, name)
        listener = await self.server.add_listener("127.0.0.1", 0, broker.table, name=name)
        broker.addr = listener.address
        broker.listener = listener
        self.brokers[name] = broker
        if with_slave:
            slave = FakeBroker(self, name, broker_id=1)
            sl = await self.server.add_listener("127.0.0.1", 0, slave.table, name=name + "-slave")
            slave.addr = sl.address
            # the slave serves the master's data
            slave.queues = broker.queues
            slave.commitlog = broker.commitlog
            self.slaves[name] = slave
        return broker

    def broker_data(self, name: str) -> BrokerData:
        addrs = {0: self.brokers[name].addr}
        if name in self.slaves:
            addrs[1] = self.slaves[name].addr
        return BrokerData(cluster=CLUSTER, brokerName=name, brokerAddrs=addrs)

    def add_topic(
        self, topic: str, brokers: list[str] | None = None, *, queues: int = 4, perm: int = 6
    ) -> None:
        names = brokers if brokers is not None else sorted(self.brokers)
        self.routes[topic] = TopicRouteData(
            queueDatas=[
                QueueData(brokerName=n, readQueueNums=queues, writeQueueNums=queues, perm=perm) for n in names
            ],
            brokerDatas=[self.broker_data(n) for n in names],
        )
        for n in names:
            self.brokers[n].topics.add(topic)

    def all_requests(self, code: int) -> list[tuple[str, dict[str, str]]]:
        out = []
        for b in list(self.brokers.values()) + list(self.slaves.values()):
            out.extend((b.name, ext) for c, ext, _ in b.requests if c == code)
        return out


@asynccontextmanager
async def fake_cluster(*broker_names: str, with_slave: bool = False) -> AsyncIterator[FakeCluster]:
    """A running fake name server with the given brokers (default: broker-a)."""
    server = RemotingServer(name="fake", shutdown_grace=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        cluster = FakeCluster(server)
        ns = await server.add_listener("127.0.0.1", 0, cluster.namesrv_table, name="namesrv")
        cluster.namesrv_addr = ns.address
        for name in broker_names or ("broker-a",):
            await cluster.add_broker(name, with_slave=with_slave)
        yield cluster
        nursery.cancel_scope.cancel()


async def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01) -> None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(interval)
        return
    raise AssertionError(f"condition not met within {timeout}s")


TAGS = PROPERTY_TAGS
