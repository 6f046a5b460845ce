"""The consuming half of the push consumer: listener calls, results, send-back, orderly locks.

Upstream: ``ConsumeMessageConcurrentlyService``, ``ConsumeMessageOrderlyService`` and the
consumer-side calls of ``MQClientAPIImpl`` (GET_CONSUMER_LIST_BY_GROUP, CONSUMER_SEND_MSG_BACK,
LOCK_BATCH_MQ, UNLOCK_BATCH_MQ). :class:`~client.push_consumer.PushConsumer` owns one
:class:`ConsumeService` and one :class:`ConsumerBrokerCalls`; the semantics are described in
the push consumer's module docstring.
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from client.instance import ClientInstance
from client.message import ConsumeStatus, Message, MessageExt, MQBrokerError, MQClientError
from client.rebalance import ProcessQueue, mq_sort_key
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.protocol.broker import (
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import (
    PROPERTY_MAX_OFFSET,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MIN_OFFSET,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRAN_MSG,
)

if TYPE_CHECKING:
    from client.push_consumer import PushConsumer

__all__ = ["ConsumeService", "ConsumerBrokerCalls", "QueueState", "by_broker"]

log = logging.getLogger("client.consumer")


class QueueState:
    """A queue assigned to a push consumer: its process queue, next pull offset and tasks."""

    __slots__ = ("idle", "mq", "next_offset", "pq", "pull_call", "pull_scope", "pull_since", "wakeup")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.mq = mq
        self.pq = pq
        self.next_offset = 0
        self.pull_scope = trio.CancelScope()
        #: the pull request in flight (cancelled when the queue's master moves), and since when
        self.pull_call: trio.CancelScope | None = None
        self.pull_since = 0.0
        #: orderly: set when messages arrive for the consume loop
        self.wakeup = trio.Event()
        #: orderly: set whenever no listener call is running on this queue
        self.idle = trio.Event()
        self.idle.set()


def by_broker(mqs: Sequence[MessageQueue]) -> dict[str, list[MessageQueue]]:
    """Queues grouped by broker name, each group sorted."""
    out: dict[str, list[MessageQueue]] = {}
    for mq in sorted(mqs, key=mq_sort_key):
        out.setdefault(mq.brokerName, []).append(mq)
    return out


class ConsumerBrokerCalls:
    """Group membership, send-back and queue locks, as one consumer group calls them."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group

    async def find_consumer_ids(self, topic: str) -> list[str] | None:
        """GET_CONSUMER_LIST_BY_GROUP from some broker of ``topic``; None if none answered."""
        route = self.instance.routes.get(topic)
        if route is None:
            return None
        brokers = list(route.brokerDatas)
        random.shuffle(brokers)
        for bd in brokers:
            if not bd.brokerAddrs:
                continue
            addr = bd.brokerAddrs.get(0) or bd.brokerAddrs[min(bd.brokerAddrs)]
            cmd = RemotingCommand(
                code=int(RequestCode.GET_CONSUMER_LIST_BY_GROUP), ext_fields={"consumerGroup": self.group}
            )
            try:
                response = await self.instance.invoke(addr, cmd, self.instance.call_timeout)
            except RemotingError as e:
                log.warning("consumer list of %s from %s: %s", self.group, addr, e)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning(
                    "consumer list of %s from %s: code %d %s",
                    self.group,
                    addr,
                    response.code,
                    response.remark,
                )
                continue
            return GetConsumerListByGroupResponseBody.decode(response.body_bytes).consumerIdList
        return None

    async def send_back(
        self, mq: MessageQueue, msg: MessageExt, delay_level: int, max_reconsume_times: int
    ) -> None:
        """CONSUMER_SEND_MSG_BACK to the master of the queue's broker (raises on failure)."""
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": self.group,
            "delayLevel": str(delay_level),
            "originMsgId": msg.msg_id,
            "originTopic": msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": str(max_reconsume_times),
            "bname": mq.brokerName,
        }
        cmd = RemotingCommand(code=int(RequestCode.CONSUMER_SEND_MSG_BACK), ext_fields=ext)
        addr, response = await self.instance.invoke_master(mq.brokerName, mq.topic, cmd)
        if response.code != ResponseCode.SUCCESS:
            raise MQBrokerError(response.code, response.remark, addr)

    async def lock(self, broker_name: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ: the subset of ``mqs`` now locked by this client (empty on failure)."""
        try:
            body = LockBatchRequestBody(
                consumerGroup=self.group, clientId=self.instance.client_id, mqSet=mqs
            ).encode()
            cmd = RemotingCommand(code=int(RequestCode.LOCK_BATCH_MQ), body=body)
            _, response = await self.instance.invoke_master(broker_name, mqs[0].topic, cmd)
        except (RemotingError, MQClientError) as e:
            log.warning(
                "group %s: lock of %d queue(s) on %s failed: %s", self.group, len(mqs), broker_name, e
            )
            return set()
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "group %s: lock on %s answered %d: %s",
                self.group,
                broker_name,
                response.code,
                response.remark,
            )
            return set()
        return set(LockBatchResponseBody.decode(response.body_bytes).lockOKMQSet)

    async def unlock(self, broker_name: str, mqs: list[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ (failures are logged)."""
        try:
            body = UnlockBatchRequestBody(
                consumerGroup=self.group, clientId=self.instance.client_id, mqSet=mqs
            ).encode()
            cmd = RemotingCommand(code=int(RequestCode.UNLOCK_BATCH_MQ), body=body)
            _, response = await self.instance.invoke_master(broker_name, mqs[0].topic, cmd)
        except (RemotingError, MQClientError) as e:
            log.warning("group %s: unlock on %s failed: %s", self.group, broker_name, e)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "group %s: unlock on %s answered %d: %s",
                self.group,
                broker_name,
                response.code,
                response.remark,
            )

    async def unlock_all(self, mqs: Sequence[MessageQueue]) -> None:
        for broker_name, group in by_broker(mqs).items():
            await self.unlock(broker_name, group)

    async def lock_one(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Lock one queue and mark its process queue locked."""
        if mq in await self.lock(mq.brokerName, [mq]):
            pq.locked = True
            pq.last_lock_time = trio.current_time()
            return True
        return False


class ConsumeService:
    """Runs the listener over pulled messages, concurrently or in queue order."""

    def __init__(self, consumer: PushConsumer) -> None:
        self.c = consumer
        #: bounds orderly listener calls across queues (concurrent mode bounds by worker count)
        self.sem = trio.Semaphore(consumer.consume_concurrency)
        self.in_flight = 0
        self.idle = trio.Event()
        self.idle.set()
        self._send: trio.MemorySendChannel[tuple[QueueState, list[MessageExt]]] | None = None

    def start(self, nursery: trio.Nursery) -> None:
        """Concurrent mode: start ``consume_concurrency`` workers fed by one unbounded channel
        (pulling is bounded per queue by ``pull_threshold_for_queue``)."""
        if self.c.orderly:
            return
        send, receive = trio.open_memory_channel[tuple[QueueState, list[MessageExt]]](math.inf)
        self._send = send
        for _ in range(self.c.consume_concurrency):
            nursery.start_soon(self._worker, receive)

    async def _worker(self, receive: trio.MemoryReceiveChannel[tuple[QueueState, list[MessageExt]]]) -> None:
        async for qs, msgs in receive:
            if qs.pq.dropped or self.c.stopping:
                continue
            self._enter()
            try:
                status = await self.call_listener(msgs, qs.mq.topic)
                await self._process_result(qs, msgs, status is ConsumeStatus.CONSUME_SUCCESS)
            finally:
                self._leave()

    # ------------------------------------------------------------------ common

    async def wait_idle(self) -> None:
        """Return once no listener call (and its result handling) is running."""
        while self.in_flight:
            await self.idle.wait()

    def _enter(self) -> None:
        self.in_flight += 1
        if self.idle.is_set():
            self.idle = trio.Event()

    def _leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    async def call_listener(self, msgs: list[MessageExt], topic: str) -> ConsumeStatus | None:
        """The listener's verdict on ``msgs`` (pulled from a queue of ``topic``); None when it
        raised or returned nothing. Its time and outcome go into the consumer's stats."""
        listener = self.c.listener
        assert listener is not None
        started = time.perf_counter()
        r: ConsumeStatus | None = None
        try:
            got = listener(msgs)
            if inspect.isawaitable(got):
                got = await got
            r = got
        except Exception:
            log.exception("group %s: message listener raised; treating as failure", self.c.group)
        else:
            if r is None:
                log.warning("group %s: message listener returned None; treating as failure", self.c.group)
        ok = r is ConsumeStatus.CONSUME_SUCCESS
        rt_ms = (time.perf_counter() - started) * 1000
        self.c.stats.on_consume(topic, rt_ms, len(msgs) if ok else 0, 0 if ok else len(msgs))
        return r

    def submit(self, qs: QueueState, msgs: list[MessageExt]) -> None:
        """Hand freshly pulled messages (already in the process queue) to the listener."""
        if self.c.orderly:
            qs.wakeup.set()
            return
        send = self._send
        if send is None:
            return
        n = self.c.consume_batch_size
        if n == 1:
            for m in msgs:
                send.send_nowait((qs, [m]))
        else:
            for i in range(0, len(msgs), n):
                send.send_nowait((qs, msgs[i : i + n]))

    def start_queue(self, qs: QueueState) -> None:
        """A queue was assigned: orderly consumption runs one loop per queue."""
        if self.c.orderly and self.c.consume_nursery is not None:
            self.c.consume_nursery.start_soon(self._orderly_loop, qs)

    async def resend_to_retry_topic(self, msg: MessageExt, reconsume_time: int, delay_level: int) -> bool:
        """Send a copy of ``msg`` to ``%RETRY%<group>`` through the inner producer."""
        producer = self.c.inner_producer
        if producer is None:
            return False
        props = dict(msg.properties)
        for k in (PROPERTY_MIN_OFFSET, PROPERTY_MAX_OFFSET, PROPERTY_TRAN_MSG):
            props.pop(k, None)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
        props[PROPERTY_RETRY_TOPIC] = msg.topic
        props[PROPERTY_RECONSUME_TIME] = str(reconsume_time)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(self.c.max_reconsume_times)
        new = Message(
            self.c.retry_topic, msg.body, flag=msg.flag, properties=props, delay_time_level=delay_level
        )
        try:
            await producer.send(new)
        except (RemotingError, MQClientError) as e:
            log.warning(
                "group %s: re-sending %s to %s failed: %s", self.c.group, msg.msg_id, self.c.retry_topic, e
            )
            return False
        return True

    # ------------------------------------------------------------------ concurrent

    async def _consume_later(self, qs: QueueState, msgs: list[MessageExt], delay: float) -> None:
        await trio.sleep(delay)
        if self._send is not None and not qs.pq.dropped and not self.c.stopping:
            self._send.send_nowait((qs, msgs))

    async def _process_result(self, qs: QueueState, msgs: list[MessageExt], ok: bool) -> None:
        done = msgs
        if not ok:
            if self.c.clustering:
                failed = [m for m in msgs if not await self._send_back(qs.mq, m)]
                if failed:
                    for m in failed:
                        m.reconsume_times += 1
                    done = [m for m in msgs if m not in failed]
                    if self.c.consume_nursery is not None:
                        self.c.consume_nursery.start_soon(
                            self._consume_later, qs, failed, self.c.send_back_retry_delay
                        )
            else:
                for m in msgs:
                    log.warning(
                        "group %s (broadcasting): dropping message %s after consume failure",
                        self.c.group,
                        m.msg_id,
                    )
        offset = qs.pq.remove_messages(done)
        if offset >= 0 and not qs.pq.dropped:
            self.c.offset_store.update(qs.mq, offset, increase_only=True)

    async def _send_back(self, mq: MessageQueue, msg: MessageExt) -> bool:
        """CONSUMER_SEND_MSG_BACK (delay level 0); on failure re-send to the retry topic."""
        try:
            await self.c.broker_calls.send_back(mq, msg, 0, self.c.max_reconsume_times)
            return True
        except (RemotingError, MQClientError) as e:
            log.warning(
                "group %s: send back of %s failed (%s); re-sending to %s",
                self.c.group,
                msg.msg_id,
                e,
                self.c.retry_topic,
            )
        return await self.resend_to_retry_topic(msg, msg.reconsume_times + 1, 3 + msg.reconsume_times)

    # ------------------------------------------------------------------ orderly

    async def _orderly_loop(self, qs: QueueState) -> None:
        c = self.c
        mq, pq = qs.mq, qs.pq
        while not pq.dropped and not c.stopping:
            if not pq.has_pending():
                await qs.wakeup.wait()
                qs.wakeup = trio.Event()
                continue
            if c.clustering and (not pq.locked or pq.lock_expired(trio.current_time())):
                with trio.CancelScope(shield=True):  # a granted lock must not be lost to the stop
                    locked = await c.broker_calls.lock_one(mq, pq)
                    if locked and pq.dropped:
                        # handed over meanwhile: the lock may have reached the broker after the
                        # hand-over's unlock, and would hold the queue against its new owner
                        await c.broker_calls.unlock(mq.brokerName, [mq])
                        return
                if not locked:
                    await trio.sleep(c.pull_delay_on_exception)
                continue
            offset = -1
            async with self.sem:
                if pq.dropped or c.stopping:
                    return
                qs.idle = trio.Event()
                self._enter()
                try:
                    msgs = pq.take_messages(c.consume_batch_size)
                    status = await self.call_listener(msgs, mq.topic)
                    if status is ConsumeStatus.CONSUME_SUCCESS or await self._give_up(msgs):
                        offset = pq.commit()
                    else:
                        pq.make_consume_again(msgs)
                    if offset >= 0 and not pq.dropped:
                        c.offset_store.update(mq, offset)
                finally:
                    self._leave()
                    qs.idle.set()
            if offset < 0:
                await trio.sleep(c.suspend_current_queue_time)

    async def _give_up(self, msgs: Sequence[MessageExt]) -> bool:
        """Upstream ``checkReconsumeTimes``: True if every message went the DLQ way instead."""
        suspend = False
        for m in msgs:
            if m.reconsume_times >= self.c.max_reconsume_times:
                if not await self.resend_to_retry_topic(m, m.reconsume_times, 3 + m.reconsume_times):
                    suspend = True
                    m.reconsume_times += 1
            else:
                suspend = True
                m.reconsume_times += 1
        return not suspend
