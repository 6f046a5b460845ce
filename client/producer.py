"""trio-native producer: sync (awaited), oneway, batch and ordered (selector) sends.

Upstream: ``DefaultMQProducer`` / ``DefaultMQProducerImpl.sendDefaultImpl`` / ``sendKernelImpl``.
::

    async with Producer("PG", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("TopicTest", b"hello", tags="TagA", keys="k1"))

"Async" sends are just concurrent awaits: start ``producer.send(...)`` in a nursery task (or
many at once); there is no callback API. Every send is bounded by ``send_timeout`` in total,
retries included.

Sending (Java semantics):

* The queue is chosen round-robin over the topic's writable queues of brokers that have a
  master; a retry prefers a queue on a different broker than the failed attempt.
* ``send`` makes ``1 + retry_times_when_send_failed`` attempts. It retries after transport
  errors and after the response codes in :data:`RETRY_RESPONSE_CODES`; any other error code
  raises :class:`~client.message.MQBrokerError` at once. FLUSH_DISK_TIMEOUT,
  FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are results (``SendResult.send_status``), not
  errors. ``send_oneway``, sends to a given ``queue`` and ``selector`` sends make one attempt.
* A topic without a route is sent through the ``TBW102`` route with ``defaultTopic=TBW102`` so
  the broker can auto-create it; routes are refreshed every 30 s by the client instance.
* The client sets ``UNIQ_KEY`` once per message (kept across retries, as Java does, so a
  duplicate caused by a retry has the same message id); bodies over ``compress_over`` bytes
  are zlib-compressed (sysFlag COMPRESSED | ZLIB).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import trio

from client.instance import ClientInstance, own_or_shared
from client.lifecycle import StartStop
from client.message import (
    AUTO_CREATE_TOPIC_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    SEND_STATUS_BY_CODE,
    Message,
    MQBrokerError,
    MQClientError,
    SendResult,
    SendStatus,
    validate_group,
    validate_topic,
)
from client.route import TopicPublishInfo
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import (
    COMPRESSED_FLAG,
    COMPRESSION_ZLIB_TYPE,
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    TRANSACTION_PREPARED_TYPE,
    BatchItem,
    UniqIdGenerator,
    encode_batch_body,
    properties_to_string,
)

__all__ = ["RETRY_RESPONSE_CODES", "MessageQueueSelector", "Producer", "build_send_header"]

log = logging.getLogger("client.producer")

#: Response codes after which a send is retried on another queue (upstream ``retryResponseCodes``).
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
        ResponseCode.GO_AWAY,
    }
)

#: ``selector(message_queues, message, arg) -> MessageQueue`` (upstream ``MessageQueueSelector``).
MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

_WAIT_TRUE = "WAIT\x01true\x02"
#: bodies at least this large are compressed in a worker thread rather than on the event loop
_THREADED_COMPRESS_SIZE = 256 * 1024


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def build_send_header(
    *,
    v2: bool,
    group: str,
    topic: str,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str,
    default_topic_queue_nums: int = 4,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
    batch: bool = False,
    broker_name: str | None = None,
) -> dict[str, str]:
    """The SEND extFields, V2 (one-letter keys) or V1 (upstream ``SendMessageRequestHeader``)."""
    if v2:
        ext = {
            "a": group,
            "b": topic,
            "c": AUTO_CREATE_TOPIC_KEY,
            "d": str(default_topic_queue_nums),
            "e": str(queue_id),
            "f": str(sys_flag),
            "g": str(born_timestamp),
            "h": str(flag),
            "i": properties,
            "j": str(reconsume_times),
            "k": "false",
            "m": "true" if batch else "false",
        }
        if max_reconsume_times is not None:
            ext["l"] = str(max_reconsume_times)
        if broker_name:
            ext["n"] = broker_name
        return ext
    ext = {
        "producerGroup": group,
        "topic": topic,
        "defaultTopic": AUTO_CREATE_TOPIC_KEY,
        "defaultTopicQueueNums": str(default_topic_queue_nums),
        "queueId": str(queue_id),
        "sysFlag": str(sys_flag),
        "bornTimestamp": str(born_timestamp),
        "flag": str(flag),
        "properties": properties,
        "reconsumeTimes": str(reconsume_times),
        "unitMode": "false",
        "batch": "true" if batch else "false",
    }
    if max_reconsume_times is not None:
        ext["maxReconsumeTimes"] = str(max_reconsume_times)
    if broker_name:
        ext["bname"] = broker_name
    return ext


class _Prepared:
    """A message made ready for the wire once, reused by every attempt."""

    __slots__ = (
        "batch",
        "body",
        "flag",
        "max_reconsume_times",
        "msg_id",
        "properties",
        "reconsume_times",
        "sys_flag",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        properties: str,
        sys_flag: int,
        flag: int,
        msg_id: str,
        *,
        reconsume_times: int = 0,
        max_reconsume_times: int | None = None,
        batch: bool = False,
    ) -> None:
        self.topic = topic
        self.body = body
        self.properties = properties
        self.sys_flag = sys_flag
        self.flag = flag
        self.msg_id = msg_id
        self.reconsume_times = reconsume_times
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch


class Producer(StartStop):
    """A message producer (see the module docstring for the send semantics)."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        send_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        max_message_size: int = 4 * 1024 * 1024,
        compress_over: int = 4096,
        compress_level: int = 5,
        use_v2_header: bool = True,
        default_topic_queue_nums: int = 4,
        retry_another_broker_when_not_store_ok: bool = False,
        instance: ClientInstance | None = None,
        wall_clock: Callable[[], int] = _wall_ms,
        internal: bool = False,
    ) -> None:
        validate_group(group)
        instance, self._owns_instance = own_or_shared(instance, namesrv_addr)
        self.group = group
        self.instance = instance
        self.send_timeout = send_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.max_message_size = max_message_size
        self.compress_over = compress_over
        self.compress_level = compress_level
        self.use_v2_header = use_v2_header
        self.default_topic_queue_nums = default_topic_queue_nums
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self._wall_clock = wall_clock
        #: an instance-internal producer (a consumer's retry sender) is not announced in heartbeats
        self._internal = internal
        self._uniq = UniqIdGenerator(instance.client_ip, now_ms=wall_clock)
        self._valid_topics: set[str] = set()
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the (private) client instance and register the group. See ClientInstance for nesting."""
        if self._started:
            return
        if self._owns_instance:
            await self.instance.start()
        elif not self.instance.running:
            raise MQClientError("the shared client instance must be started before the producer")
        if not self._internal:
            try:
                self.instance.register_producer(self.group)
            except BaseException:
                if self._owns_instance:
                    await self.instance.shutdown()
                raise
        self._started = True

    async def shutdown(self) -> None:
        """Unregister from every broker and stop the private client instance."""
        if not self._started:
            return
        self._started = False
        try:
            if not self._internal:
                with trio.CancelScope(shield=True):
                    await self.instance.unregister_producer(self.group)
        finally:
            if self._owns_instance:
                await self.instance.shutdown()

    # ------------------------------------------------------------------ public API

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The queues ``send`` would choose from (upstream ``fetchPublishMessageQueues``)."""
        info = await self.instance.find_publish_info(topic, self.default_topic_queue_nums)
        return list(info.message_queues)

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer. ``queue`` or ``selector`` pin the queue (one attempt)."""
        self._check_started()
        prepared = self._prepare(msg, await self._compress_large(msg))
        deadline = trio.current_time() + (self.send_timeout if timeout is None else timeout)
        if queue is None and selector is None:
            info = self.instance.publish.get(prepared.topic)
            if info is None or not info.ok:
                info = await self.instance.find_publish_info(prepared.topic, self.default_topic_queue_nums)
            return await self._send_default(prepared, info, deadline)  # type: ignore[return-value]
        return await self._send_pinned(prepared, queue, selector, arg, msg, deadline, oneway=False)  # type: ignore[return-value]

    async def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        """Send without waiting for the broker's answer (one attempt; transport errors still raise)."""
        self._check_started()
        prepared = self._prepare(msg, await self._compress_large(msg))
        deadline = trio.current_time() + self.send_timeout
        if queue is None and selector is None:
            info = await self.instance.find_publish_info(prepared.topic, self.default_topic_queue_nums)
            await self._send_default(prepared, info, deadline, oneway=True)
            return
        await self._send_pinned(prepared, queue, selector, arg, msg, deadline, oneway=True)

    async def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        """SEND_BATCH_MESSAGE (320): all messages go to one queue; ``msg_id`` is their ids comma-joined.

        All messages must have the same topic, no delay level, and the topic must not be a retry topic.
        """
        self._check_started()
        prepared = self._prepare_batch(msgs)
        deadline = trio.current_time() + (self.send_timeout if timeout is None else timeout)
        if queue is None:
            info = await self.instance.find_publish_info(prepared.topic, self.default_topic_queue_nums)
            return await self._send_default(prepared, info, deadline)  # type: ignore[return-value]
        return await self._send_pinned(prepared, queue, None, None, None, deadline, oneway=False)  # type: ignore[return-value]

    # ------------------------------------------------------------------ preparation

    def _check_started(self) -> None:
        if not self._started:
            raise MQClientError(f"producer {self.group} is not started")

    def _check_topic(self, topic: str) -> None:
        if topic not in self._valid_topics:
            validate_topic(topic)
            if len(self._valid_topics) < 10_000:
                self._valid_topics.add(topic)

    def _check_body(self, topic: str, body: bytes) -> None:
        self._check_topic(topic)
        if not body:
            raise MQClientError("the message body length is zero", ResponseCode.MESSAGE_ILLEGAL)
        if len(body) > self.max_message_size:
            raise MQClientError(
                f"the message body size over max value, MAX: {self.max_message_size}",
                ResponseCode.MESSAGE_ILLEGAL,
            )

    async def _compress_large(self, msg: Message) -> bytes | None:
        """Compress a big body in a worker thread (small ones are compressed inline by _prepare)."""
        n = len(msg.body)
        if n > self.compress_over and n >= _THREADED_COMPRESS_SIZE and n <= self.max_message_size:
            return await trio.to_thread.run_sync(zlib.compress, msg.body, self.compress_level)
        return None

    def _prepare(self, msg: Message, compressed: bytes | None = None) -> _Prepared:
        topic = msg.topic
        body = msg.body
        self._check_body(topic, body)
        props = msg.properties
        msg_id = props.get(PROPERTY_UNIQ_KEY)
        if msg_id is None:
            msg_id = props[PROPERTY_UNIQ_KEY] = self._uniq.create()
        sys_flag = 0
        if compressed is not None:
            body = compressed
            sys_flag = COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE
        elif len(body) > self.compress_over:
            body = zlib.compress(body, self.compress_level)
            sys_flag = COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE
        if props.get("TRAN_MSG") == "true":
            sys_flag |= TRANSACTION_PREPARED_TYPE
        reconsume_times = 0
        max_reconsume: int | None = None
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and (
            PROPERTY_RECONSUME_TIME in props or PROPERTY_MAX_RECONSUME_TIMES in props
        ):
            # upstream moves these two into the header for sends to a retry topic
            props = dict(props)
            rt = props.pop(PROPERTY_RECONSUME_TIME, None)
            mrt = props.pop(PROPERTY_MAX_RECONSUME_TIMES, None)
            reconsume_times = int(rt) if rt else 0
            max_reconsume = int(mrt) if mrt else None
        prop_str = properties_to_string(props)
        if PROPERTY_WAIT not in props:
            prop_str += _WAIT_TRUE
        return _Prepared(
            topic,
            body,
            prop_str,
            sys_flag,
            msg.flag,
            msg_id,
            reconsume_times=reconsume_times,
            max_reconsume_times=max_reconsume,
        )

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Prepared:
        if not msgs:
            raise MQClientError("a batch needs at least one message", ResponseCode.MESSAGE_ILLEGAL)
        topic = msgs[0].topic
        self._check_topic(topic)  # the others must have the same topic
        items: list[BatchItem] = []
        ids: list[str] = []
        for m in msgs:
            if m.topic != topic:
                raise MQClientError(
                    "the topic of the messages in one batch should be the same", ResponseCode.MESSAGE_ILLEGAL
                )
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise MQClientError(
                    "retry group topic is not supported for batching", ResponseCode.MESSAGE_ILLEGAL
                )
            if m.properties.get(PROPERTY_DELAY):
                raise MQClientError(
                    "time delayed message is not supported for batching", ResponseCode.MESSAGE_ILLEGAL
                )
            if not m.body:
                raise MQClientError("the message body length is zero", ResponseCode.MESSAGE_ILLEGAL)
            uid = m.properties.get(PROPERTY_UNIQ_KEY)
            if uid is None:
                uid = m.properties[PROPERTY_UNIQ_KEY] = self._uniq.create()
            ids.append(uid)
            items.append(BatchItem(m.flag, m.body, properties_to_string(m.properties)))
        body = encode_batch_body(items)
        if len(body) > self.max_message_size:
            raise MQClientError(
                f"the batch body size {len(body)} is over the max value {self.max_message_size}",
                ResponseCode.MESSAGE_ILLEGAL,
            )
        wait = msgs[0].properties.get(PROPERTY_WAIT, "true")
        return _Prepared(topic, body, f"WAIT\x01{wait}\x02", 0, 0, ",".join(ids), batch=True)

    # ------------------------------------------------------------------ sending

    async def _send_pinned(
        self,
        p: _Prepared,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        msg: Message | None,
        deadline: float,
        *,
        oneway: bool,
    ) -> SendResult | None:
        """One attempt to a queue given by the caller or chosen by ``selector``."""
        if queue is None:
            assert selector is not None
            assert msg is not None
            info = await self.instance.find_publish_info(p.topic, self.default_topic_queue_nums)
            queue = selector(list(info.message_queues), msg, arg)
            if queue is None:
                raise MQClientError("select message queue return null", ResponseCode.SYSTEM_ERROR)
        if queue.topic != p.topic:
            raise MQClientError(
                f"message queue topic {queue.topic} does not match {p.topic}", ResponseCode.INVALID_PARAMETER
            )
        addr = self.instance.brokers.master_addr(queue.brokerName)
        if addr is None:
            addr = await self.instance.master_addr(queue.brokerName, p.topic)
        cmd = self._request(p, queue)
        if oneway:
            await self.instance.invoke_oneway(addr, cmd)
            return None
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            raise MQClientError(f"send of topic {p.topic} timed out", ResponseCode.SYSTEM_ERROR)
        return self._result(p, queue, await self.instance.invoke(addr, cmd, remaining), addr)

    async def _send_default(
        self, p: _Prepared, info: TopicPublishInfo, deadline: float, oneway: bool = False
    ) -> SendResult | None:
        """Round-robin queue choice with retries on another broker (see the module docstring)."""
        instance = self.instance
        times_total = 1 if oneway else 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        last_error: Exception | None = None
        last_result: SendResult | None = None
        attempts = 0
        for _ in range(times_total):
            now = trio.current_time()
            if now >= deadline:
                break
            if attempts:
                # the route refreshed meanwhile (a failed attempt asks for that) -- unless it lists
                # no queue now (its only group between masters): the queues held, which fail again
                # with the reason rather than leave nothing to choose from
                fresh = instance.publish.get(p.topic)
                if fresh is not None and fresh.ok:
                    info = fresh
            mq = info.select_one(last_broker)
            last_broker = mq.brokerName
            attempts += 1
            try:
                addr = instance.brokers.master_addr(mq.brokerName)
                if addr is None:
                    addr = await instance.master_addr(mq.brokerName, p.topic)
                cmd = self._request(p, mq)
                if oneway:
                    await instance.invoke_oneway(addr, cmd)
                    return None
                remoting = instance.remoting
                if remoting is None:
                    raise MQClientError(f"producer {self.group} is not started")
                result = self._result(p, mq, await remoting.invoke(addr, cmd, deadline - now), addr)
            except RemotingError as e:
                log.info(
                    "send to %s failed (%s); %s", mq, e, "retrying" if attempts < times_total else "giving up"
                )
                last_error = e
                continue
            except MQBrokerError as e:
                if e.code in RETRY_RESPONSE_CODES:
                    log.info(
                        "send to %s refused (%s); %s",
                        mq,
                        e,
                        "retrying" if attempts < times_total else "giving up",
                    )
                    last_error = e
                    continue
                raise
            except MQClientError as e:
                last_error = e
                continue
            if result.send_status is SendStatus.SEND_OK:
                return result
            last_result = result
            if not self.retry_another_broker_when_not_store_ok:
                return result
        if last_result is not None:
            return last_result
        if last_error is None:
            raise MQClientError(
                f"send of topic {p.topic} timed out before any attempt", ResponseCode.SYSTEM_ERROR
            )
        code = last_error.code if isinstance(last_error, MQClientError) else -1
        raise MQClientError(
            f"send failed after {attempts} attempt(s) for topic {p.topic}: {last_error}", code
        ) from last_error

    def _request(self, p: _Prepared, mq: MessageQueue) -> RemotingCommand:
        if p.batch:
            code = RequestCode.SEND_BATCH_MESSAGE
            v2 = True
        else:
            v2 = self.use_v2_header
            code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
        ext = build_send_header(
            v2=v2,
            group=self.group,
            topic=p.topic,
            queue_id=mq.queueId,
            sys_flag=p.sys_flag,
            born_timestamp=self._wall_clock(),
            flag=p.flag,
            properties=p.properties,
            default_topic_queue_nums=self.default_topic_queue_nums,
            reconsume_times=p.reconsume_times,
            max_reconsume_times=p.max_reconsume_times,
            batch=p.batch,
            broker_name=mq.brokerName,
        )
        return RemotingCommand(code=int(code), ext_fields=ext, body=p.body)

    def _result(self, p: _Prepared, mq: MessageQueue, response: RemotingCommand, addr: str) -> SendResult:
        status = SEND_STATUS_BY_CODE.get(response.code)
        if status is None:
            if response.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                # the route's master refuses writes: it may have stepped down (a failover the route
                # poll has not seen yet), so the route is read again now, not in up to 30 s
                self.instance.route_may_be_stale(addr)
            raise MQBrokerError(response.code, response.remark, addr)
        rext = response.ext_fields or {}
        try:
            queue_id = int(rext.get("queueId", mq.queueId))
            queue_offset = int(rext.get("queueOffset", -1))
        except ValueError as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad send response header: {e}", addr) from None
        if queue_id != mq.queueId:
            mq = MessageQueue(topic=mq.topic, brokerName=mq.brokerName, queueId=queue_id)
        return SendResult(
            send_status=status,
            msg_id=p.msg_id,
            offset_msg_id=rext.get("msgId", ""),
            message_queue=mq,
            queue_offset=queue_offset,
            transaction_id=rext.get("transactionId"),
            region_id=rext.get("MSG_REGION"),
        )
