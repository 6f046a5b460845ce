"""trio-native push consumer: rebalance, long-poll pulling, concurrent or orderly consumption,
retry via send-back, and offset commits.

Upstream: ``DefaultMQPushConsumer`` / ``DefaultMQPushConsumerImpl``, ``RebalancePushImpl``,
``ConsumeMessageConcurrentlyService`` and ``ConsumeMessageOrderlyService``::

    async def on_messages(msgs: list[MessageExt]) -> ConsumeStatus:
        ...
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("CG", "127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")
    consumer.register_listener(on_messages)
    async with consumer:
        await trio.sleep_forever()

Behaviour (Java semantics):

* Clustering (default): the group's queues are divided among its live consumers with
  :func:`~client.rebalance.allocate_averagely` (GET_CONSUMER_LIST_BY_GROUP per topic) every
  ``rebalance_interval`` (20 s) and at once on NOTIFY_CONSUMER_IDS_CHANGED. ``%RETRY%<group>``
  is subscribed automatically. Offsets live on the broker: QUERY_CONSUMER_OFFSET when a queue
  is assigned (none → ``consume_from_where``: last offset = GET_MAX_OFFSET, retry topic = 0,
  first offset = 0, timestamp = SEARCH_OFFSET_BY_TIMESTAMP), UPDATE_CONSUMER_OFFSET for every
  assigned queue every ``persist_offset_interval`` (5 s), when a queue is taken away and at
  shutdown. Broadcasting: every consumer takes every queue, offsets are kept locally (in
  memory, or in a file under ``offset_store_dir``), there is no retry topic.
* Each assigned queue has one long-poll pull loop (suspend + subscription + commit flags,
  broker hold ``broker_suspend_max_time`` 15 s, client timeout 30 s), re-pulling right after
  each answer; errors back off ``pull_delay_on_exception`` (3 s). A poll still unanswered 3 s
  past the hold has the routes read again, and a route that names another master of the
  queue's broker moves the waiting polls there (:meth:`PushConsumer.master_moved`; upstream
  waits out the 30 s). Pulled messages wait in a
  :class:`~client.rebalance.ProcessQueue`; the committed offset is always the lowest unconsumed
  one. Pulling pauses while a queue holds ``pull_threshold_for_queue`` messages.
* Concurrent listeners get batches of up to ``consume_batch_size`` messages, at most
  ``consume_concurrency`` batches at a time. RECONSUME_LATER (or an exception) sends each
  message back (CONSUMER_SEND_MSG_BACK, delay level 0 = broker's choice); if that fails it is
  re-sent to ``%RETRY%<group>`` through an inner producer; if that fails too it is consumed
  again locally after ``send_back_retry_delay``. Messages pulled from the retry topic get their
  original topic back (property RETRY_TOPIC).
* Orderly listeners see one queue's messages in order, one batch at a time. In clustering mode
  a queue is locked on the broker (LOCK_BATCH_MQ) before it is pulled, all locks are renewed
  every ``lock_interval`` (20 s) -- every ``pull_delay_on_exception`` while a queue is not
  locked, and at once when the connection to a master ends (its locks may be gone) -- and
  released (UNLOCK_BATCH_MQ) when the queue is taken away or at shutdown.
  SUSPEND_CURRENT_QUEUE_A_MOMENT redelivers the same batch after
  ``suspend_current_queue_time``; after ``max_reconsume_times`` (unlimited by default for
  orderly, 16 for concurrent) the message goes to the DLQ via the retry topic.
* Shutdown: stop pulling, give running listeners ``await_termination_when_shutdown`` seconds,
  commit offsets, unlock, UNREGISTER_CLIENT.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from client.consumer import ConsumerBrokerCalls, ConsumeService, QueueState, by_broker
from client.instance import ClientInstance, own_or_shared
from client.lifecycle import StartStop
from client.message import (
    ConsumeStatus,
    MessageExt,
    MQClientError,
    PullStatus,
    build_subscription,
    retry_topic,
    validate_group,
    validate_topic,
)
from client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from client.producer import Producer
from client.pull_consumer import PullAPI
from client.rebalance import ProcessQueue, allocate_averagely, mq_sort_key
from client.stats import ConsumerStats
from remoting.codes import ResponseCode
from remoting.command import CURRENT_VERSION, version_desc
from remoting.errors import RemotingError
from remoting.protocol.broker import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumerRunningInfo,
    ConsumeType,
    MessageModel,
    ProcessQueueInfo,
    PullSysFlag,
    SubscriptionData,
)
from remoting.protocol.common import MessageQueue
from remoting.protocol.message import (
    PROPERTY_RETRY_TOPIC,
)

__all__ = ["MessageListener", "PushConsumer"]

log = logging.getLogger("client.consumer")

#: ``async def listener(msgs) -> ConsumeStatus`` (a plain function returning a status also works).
MessageListener = Callable[[list[MessageExt]], Awaitable[ConsumeStatus | None] | ConsumeStatus | None]

INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
CONSUME_CONCURRENTLY_MAX_SPAN = 2000
FLOW_CONTROL_DELAY = 0.05
#: seconds past ``broker_suspend_max_time`` after which an unanswered long poll makes the consumer
#: read its routes again (:meth:`PushConsumer._stalled_pull_loop`)
STALLED_PULL_GRACE = 3.0


class PushConsumer(StartStop):
    """A push consumer (see the module docstring)."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        orderly: bool = False,
        consume_batch_size: int = 1,
        pull_batch_size: int = 32,
        max_reconsume_times: int | None = None,
        consume_concurrency: int = 20,
        pull_threshold_for_queue: int = 1000,
        pull_interval: float = 0.0,
        rebalance_interval: float = 20.0,
        persist_offset_interval: float = 5.0,
        lock_interval: float = 20.0,
        suspend_current_queue_time: float = 1.0,
        broker_suspend_max_time: float = 15.0,
        consumer_timeout_when_suspend: float = 30.0,
        pull_delay_on_exception: float = 3.0,
        send_back_retry_delay: float = 5.0,
        await_termination_when_shutdown: float = 5.0,
        offset_store_dir: str | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        validate_group(group)
        if consume_batch_size < 1 or pull_batch_size < 1 or consume_concurrency < 1:
            raise MQClientError(
                "batch sizes and consume_concurrency must be >= 1", ResponseCode.INVALID_PARAMETER
            )
        instance, self._owns_instance = own_or_shared(instance, namesrv_addr)
        self.group = group
        self.instance = instance
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.orderly = orderly
        self.consume_batch_size = consume_batch_size
        self.pull_batch_size = pull_batch_size
        if max_reconsume_times is None:
            max_reconsume_times = sys.maxsize if orderly else 16
        self.max_reconsume_times = max_reconsume_times
        self.consume_concurrency = consume_concurrency
        self._started_at_ms = 0
        #: pull and consume figures per topic (the running info's "Consumer RT&TPS")
        self.stats = ConsumerStats()
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_interval = pull_interval
        self.rebalance_interval = rebalance_interval
        self.persist_offset_interval = persist_offset_interval
        self.lock_interval = lock_interval
        self.suspend_current_queue_time = suspend_current_queue_time
        self.broker_suspend_max_time = broker_suspend_max_time
        self.consumer_timeout_when_suspend = consumer_timeout_when_suspend
        self.pull_delay_on_exception = pull_delay_on_exception
        self.send_back_retry_delay = send_back_retry_delay
        self.await_termination_when_shutdown = await_termination_when_shutdown
        self.offset_store_dir = offset_store_dir
        self.api = PullAPI(instance, group)
        self.broker_calls = ConsumerBrokerCalls(instance, group)
        self.service = ConsumeService(self)
        self.offset_store: OffsetStore = (
            RemoteOffsetStore(instance, group)
            if message_model is MessageModel.CLUSTERING
            else LocalOffsetStore(group, instance.client_id, offset_store_dir)
        )
        self.retry_topic = retry_topic(group)
        self._subs: dict[str, SubscriptionData] = {}
        self.listener: MessageListener | None = None
        self._queues: dict[MessageQueue, QueueState] = {}
        self._rebalance_event = trio.Event()
        self._rebalance_lock = trio.Lock()
        #: set to renew the locks now (see :meth:`master_connection_lost`)
        self._relock_event = trio.Event()
        self._stop = trio.Event()
        self._done = trio.Event()
        self.stopping = False
        self._started = False
        self._main: trio.Nursery | None = None
        #: where listener calls run (cancelled last at shutdown, after the grace period)
        self.consume_nursery: trio.Nursery | None = None
        self.inner_producer: Producer | None = None

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    # ------------------------------------------------------------------ configuration

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to ``topic`` with a TAG expression (``*`` or ``TagA || TagB``)."""
        validate_topic(topic)
        self._subs[topic] = build_subscription(topic, expression)
        if self._started:
            self.instance.nursery.start_soon(self.instance.send_heartbeat_to_all)
            self.request_rebalance()

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self._started:
            self.request_rebalance()

    def register_listener(self, listener: MessageListener) -> None:
        self.listener = listener

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer currently pulls, sorted."""
        return sorted(self._queues, key=mq_sort_key)

    # ------------------------------------------------------------------ ConsumerHook

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            groupName=self.group,
            consumeType=ConsumeType.CONSUME_PASSIVELY.name,
            messageModel=self.message_model.name,
            consumeFromWhere=self.consume_from_where.name,
            subscriptionDataSet=list(self._subs.values()),
            unitMode=False,
        )

    def subscribed_topics(self) -> set[str]:
        return set(self._subs)

    def request_rebalance(self) -> None:
        """Rebalance now (called on NOTIFY_CONSUMER_IDS_CHANGED)."""
        self._rebalance_event.set()

    def master_moved(self, broker_name: str) -> None:
        """A route names another master of ``broker_name`` (called by the instance): pulls still
        waiting on the old one are given up and made again, to the new master. A master that the
        network lost answers nothing, and a long poll waits ``consumer_timeout_when_suspend`` (30 s)
        before it fails (upstream's consumer waits it out)."""
        moved = [qs for qs in self._queues.values() if qs.mq.brokerName == broker_name and qs.pull_call]
        for qs in moved:
            assert qs.pull_call is not None
            qs.pull_call.cancel()
        if moved:
            log.info(
                "group %s: the master of %s moved: pulling its queues %s from the new one",
                self.group,
                broker_name,
                sorted(qs.mq.queueId for qs in moved),
            )

    def master_connection_lost(self, broker_name: str) -> None:
        """The connection to ``broker_name``'s master ended (called by the instance). An orderly
        consumer's locks on its queues may have ended with it: a restarted broker, or the replica
        that took over, holds no lock, and another member may lock and consume those queues as soon
        as the broker hears it -- while this one, whose own locks have not expired (30 s), would
        go on consuming them too. So they count as unlocked: pulling and consuming them wait until
        they are locked again (the lock loop asks at once, then every ``pull_delay_on_exception``;
        upstream keeps consuming until its locks expire)."""
        if not (self.orderly and self.clustering):
            return
        theirs = [qs for qs in self._queues.values() if qs.mq.brokerName == broker_name]
        if not theirs:
            return
        dropped = [qs.mq.queueId for qs in theirs if qs.pq.locked]
        for qs in theirs:
            qs.pq.locked = False
        self._relock_event.set()
        if dropped:
            log.info(
                "group %s: connection to the master of %s lost: consuming its queues %s again once "
                "they are locked again",
                self.group,
                broker_name,
                sorted(dropped),
            )

    def running_info(self) -> ConsumerRunningInfo:
        """The answer to GET_CONSUMER_RUNNING_INFO (mqadmin ``consumerStatus``): configuration,
        subscriptions, the state of every queue it pulls and its pull / consume figures per topic."""
        now_wall, now = time.time() * 1000, trio.current_time()

        def wall_ms(t: float) -> int:  # a trio-clock time as epoch milliseconds
            return int(now_wall - (now - t) * 1000)

        props = {
            "consumerGroup": self.group,
            "messageModel": self.message_model.name,
            "consumeFromWhere": self.consume_from_where.name,
            "consumeMessageBatchMaxSize": str(self.consume_batch_size),
            "pullBatchSize": str(self.pull_batch_size),
            "pullThresholdForQueue": str(self.pull_threshold_for_queue),
            "maxReconsumeTimes": str(self.max_reconsume_times),
            "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
            "PROP_CONSUME_TYPE": ConsumeType.CONSUME_PASSIVELY.name,
            "PROP_CLIENT_VERSION": version_desc(CURRENT_VERSION),
            "PROP_CONSUMER_START_TIMESTAMP": str(self._started_at_ms),
            "PROP_NAMESERVER_ADDR": ";".join(self.instance.namesrv_addrs),
            "PROP_THREADPOOL_CORE_SIZE": str(self.consume_concurrency),
        }
        table: dict[MessageQueue, ProcessQueueInfo] = {}
        for mq, qs in self._queues.items():
            pq = qs.pq
            table[mq] = ProcessQueueInfo(
                commitOffset=self.offset_store.read_memory(mq),
                cachedMsgMinOffset=max(pq.min_offset, 0),
                cachedMsgMaxOffset=max(pq.queue_offset_max, 0) if pq.msg_count else 0,
                cachedMsgCount=pq.msg_count,
                cachedMsgSizeInMiB=pq.msg_size >> 20,
                locked=pq.locked,
                lastLockTimestamp=wall_ms(pq.last_lock_time),
                droped=pq.dropped,
                lastPullTimestamp=wall_ms(pq.last_pull_time),
                lastConsumeTimestamp=wall_ms(pq.last_consume_time),
            )
        return ConsumerRunningInfo(
            properties=props,
            subscriptionSet=sorted(self._subs.values(), key=lambda s: s.topic),
            mqTable=table,
            statusTable=self.stats.status_table(),
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start consuming. See :class:`~client.instance.ClientInstance` about task nesting."""
        if self._started:
            return
        if self.listener is None:
            raise MQClientError("register a message listener before starting the consumer")
        if not self._subs:
            raise MQClientError("subscribe to at least one topic before starting the consumer")
        if self._owns_instance:
            await self.instance.start()
        elif not self.instance.running:
            raise MQClientError("the shared client instance must be started before the consumer")
        try:
            if self.clustering:
                self._subs.setdefault(self.retry_topic, build_subscription(self.retry_topic, "*"))
            await self.offset_store.load()
            self.instance.register_consumer(self)
            try:
                if self.clustering:
                    self.inner_producer = Producer(
                        INNER_PRODUCER_GROUP, instance=self.instance, internal=True
                    )
                    await self.inner_producer.start()
                for topic in sorted(self._subs):
                    await self.instance.update_route(topic)
                await self.instance.send_heartbeat_to_all()
                self._stop = trio.Event()
                self._done = trio.Event()
                self.stopping = False
                await self.instance.nursery.start(self._run)
            except BaseException:
                self.instance.consumers.pop(self.group, None)
                raise
        except BaseException:
            if self._owns_instance:
                await self.instance.shutdown()
            raise
        self._started = True
        self._started_at_ms = int(time.time() * 1000)

    async def shutdown(self) -> None:
        """Stop pulling, finish running listeners (bounded), commit offsets, unlock, unregister."""
        if not self._started:
            return
        self._started = False
        try:
            # shielded: offsets must be committed even when shutdown happens during cancellation
            with trio.CancelScope(shield=True):
                self._stop.set()
                await self._done.wait()
                mqs = list(self._queues)
                await self.offset_store.persist_all(mqs, oneway=False)
                if self.orderly and self.clustering:
                    await self.broker_calls.unlock_all(mqs)
                self._queues.clear()
                if self.inner_producer is not None:
                    await self.inner_producer.shutdown()
                    self.inner_producer = None
                await self.instance.unregister_consumer(self.group)
        finally:
            # outside the shield: the instance's nursery was opened outside it
            if self._owns_instance:
                await self.instance.shutdown()

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as consume:
                self.consume_nursery = consume
                self.service.start(consume)
                async with trio.open_nursery() as main:
                    self._main = main
                    main.start_soon(self._rebalance_loop)
                    main.start_soon(self._persist_loop)
                    main.start_soon(self._stalled_pull_loop)
                    if self.orderly and self.clustering:
                        main.start_soon(self._lock_loop)
                    task_status.started()
                    await self._stop.wait()
                    self.stopping = True
                    main.cancel_scope.cancel()
                # pulls have stopped; running listeners get a grace period to finish
                with trio.move_on_after(self.await_termination_when_shutdown):
                    await self.service.wait_idle()
                consume.cancel_scope.cancel()
        finally:
            self._main = None
            self.consume_nursery = None
            self._done.set()

    # ------------------------------------------------------------------ rebalance

    async def _rebalance_loop(self) -> None:
        while True:
            self._rebalance_event = trio.Event()
            await self.do_rebalance()
            with trio.move_on_after(self.rebalance_interval):
                await self._rebalance_event.wait()

    async def do_rebalance(self) -> None:
        """One rebalance round over every subscribed topic (upstream ``RebalanceImpl.doRebalance``)."""
        async with self._rebalance_lock:
            for topic in sorted(self._subs):
                try:
                    await self._rebalance_topic(topic)
                except (RemotingError, MQClientError) as e:
                    log.warning("rebalance of %s for group %s: %s", topic, self.group, e)
            for mq in [m for m in self._queues if m.topic not in self._subs]:
                await self._remove_queue(mq)

    async def _rebalance_topic(self, topic: str) -> None:
        mqs = self.instance.subscribe.get(topic)
        if mqs is None:
            await self.instance.update_route(topic)
            mqs = self.instance.subscribe.get(topic)
        if not mqs:
            if topic != self.retry_topic:
                log.warning("group %s: no route for subscribed topic %s", self.group, topic)
            return
        if self.clustering:
            cids = await self.broker_calls.find_consumer_ids(topic)
            if cids is None:
                return
            allocated = set(allocate_averagely(mqs, cids, self.instance.client_id))
        else:
            allocated = set(mqs)
        await self._update_process_queues(topic, allocated)

    async def _update_process_queues(self, topic: str, allocated: set[MessageQueue]) -> None:
        for mq in [m for m in self._queues if m.topic == topic and m not in allocated]:
            await self._remove_queue(mq)
        for mq in sorted(allocated - self._queues.keys(), key=mq_sort_key):
            if self.stopping or self._main is None:
                return
            pq = ProcessQueue(trio.current_time())
            if self.orderly and self.clustering:
                # shielded: the stop cancels this task, and a lock the broker granted behind a
                # cancelled call would hold the queue against the whole group for 60 s
                with trio.CancelScope(shield=True):
                    locked = await self.broker_calls.lock_one(mq, pq)
                if not locked:
                    log.warning("group %s: could not lock %s; not pulling it this round", self.group, mq)
                    continue
            installed = False
            try:
                self.offset_store.remove(mq)
                try:
                    offset = await self._compute_pull_from_where(mq)
                except (RemotingError, MQClientError) as e:
                    log.warning(
                        "group %s: no start offset for %s (%s); retrying at the next rebalance",
                        self.group,
                        mq,
                        e,
                    )
                    continue
                if self._main is None:
                    return
                qs = QueueState(mq, pq)
                qs.next_offset = offset
                self._queues[mq] = qs
                installed = True
                log.info("group %s: now pulling %s from offset %d", self.group, mq, offset)
                self._main.start_soon(self._pull_task, qs)
                self.service.start_queue(qs)
            finally:
                if pq.locked and not installed:
                    with trio.CancelScope(shield=True):
                        await self.broker_calls.unlock(mq.brokerName, [mq])

    async def _remove_queue(self, mq: MessageQueue) -> bool:
        """Stop pulling ``mq`` and hand it back: commit its offset and (orderly) unlock it."""
        qs = self._queues.get(mq)
        if qs is None:
            return True
        qs.pq.dropped = True
        qs.pull_scope.cancel()
        qs.wakeup.set()
        if self.orderly and self.clustering:
            with trio.move_on_after(1.0):
                await qs.idle.wait()
            if not qs.idle.is_set():
                log.info("group %s: %s is still being consumed; releasing it later", self.group, mq)
                return False
        del self._queues[mq]
        # shielded: out of the table, the queue is no longer committed or unlocked by the stop,
        # which cancels this rebalance -- a lock left here holds the queue against the group
        # for 60 s, and the offset would go back to the last periodic commit
        with trio.CancelScope(shield=True):
            await self.offset_store.persist(mq)
            self.offset_store.remove(mq)
            if self.orderly and self.clustering:
                await self.broker_calls.unlock(mq.brokerName, [mq])
        log.info("group %s: stopped pulling %s", self.group, mq)
        return True

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET from a broker: an admin reset the group's offsets on a
        broker that leaves applying them to the clients (``useServerSideResetOffset=false``, and
        every RocketMQ 4.x broker). Each of our queues in ``offsets`` starts over there."""
        for mq, offset in offsets.items():
            qs = self._queues.get(mq)
            if qs is None or offset < 0:
                continue
            log.info("group %s: %s reset to offset %d by an admin", self.group, mq, offset)
            qs.pull_scope.cancel()  # its pull may be held at the broker for seconds
            await self._start_over(qs, offset)

    async def _start_over(self, qs: QueueState, offset: int) -> None:
        """The broker moved the queue's offset (PULL_OFFSET_MOVED: an admin reset it, or the
        messages at ours are gone). As upstream, the queue's messages in flight are dropped -- a
        listener call still running on them no longer moves the offset, which would otherwise
        jump back past a reset to an earlier point -- and the queue is pulled again from
        ``offset`` with a new process queue (upstream waits 10 s and a rebalance for that)."""
        mq, old = qs.mq, qs.pq
        old.dropped = True
        qs.wakeup.set()
        self.offset_store.update(mq, offset)
        await self.offset_store.persist(mq)
        if self.orderly:
            await qs.idle.wait()  # one listener call at a time per queue, also across the swap
        if self._queues.get(mq) is not qs or self._main is None or self.stopping:
            return  # handed back meanwhile
        pq = ProcessQueue(trio.current_time())
        pq.locked, pq.last_lock_time = old.locked, old.last_lock_time
        fresh = QueueState(mq, pq)
        fresh.next_offset = offset
        self._queues[mq] = fresh
        self._main.start_soon(self._pull_task, fresh)
        self.service.start_queue(fresh)

    async def _compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Upstream ``computePullFromWhereWithException``."""
        last = await self.offset_store.read_store(mq)
        if last >= 0:
            return last
        cfw = self.consume_from_where
        is_retry = mq.topic.startswith("%RETRY%")
        if cfw is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if cfw is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            if is_retry:
                return await self.api.max_offset(mq)
            ts = self.consume_timestamp_ms
            if ts is None:
                ts = int(time.time() * 1000) - 30 * 60 * 1000
            return await self.api.search_offset(mq, ts)
        # LAST_OFFSET and its deprecated variants
        if is_retry:
            return 0
        return await self.api.max_offset(mq)

    # ------------------------------------------------------------------ pulling

    async def _pull_task(self, qs: QueueState) -> None:
        with qs.pull_scope:
            await self._pull_loop(qs)

    async def _pull_loop(self, qs: QueueState) -> None:
        mq, pq = qs.mq, qs.pq
        suspend_ms = int(self.broker_suspend_max_time * 1000)
        while not pq.dropped:
            sub = self._subs.get(mq.topic)
            if sub is None:
                return
            if pq.msg_count >= self.pull_threshold_for_queue or (
                not self.orderly and pq.max_span > CONSUME_CONCURRENTLY_MAX_SPAN
            ):
                await trio.sleep(FLOW_CONTROL_DELAY)
                continue
            if self.orderly and self.clustering and not pq.locked:
                await trio.sleep(self.pull_delay_on_exception)
                continue
            sys_flag = PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION
            commit_offset = 0
            if self.clustering:
                commit_offset = self.offset_store.read_memory(mq)
                if commit_offset > 0:
                    sys_flag |= PullSysFlag.COMMIT_OFFSET
                else:
                    commit_offset = 0
            pull_started = time.perf_counter()
            call = qs.pull_call = trio.CancelScope()
            qs.pull_since = trio.current_time()
            failed = False
            try:
                with call:
                    try:
                        result = await self.api.pull(
                            mq,
                            sub,
                            qs.next_offset,
                            self.pull_batch_size,
                            sys_flag=sys_flag,
                            commit_offset=commit_offset,
                            suspend_timeout_ms=suspend_ms,
                            timeout=self.consumer_timeout_when_suspend,
                        )
                    except (RemotingError, MQClientError) as e:
                        log.warning("group %s: pull of %s failed: %s", self.group, mq, e)
                        failed = True
                        # the back-off ends early when the queue's master moves meanwhile: a pull
                        # failed with the connection to a master the network lost is made again
                        # to the new master as soon as the routes name it
                        await trio.sleep(self.pull_delay_on_exception)
            finally:
                qs.pull_call = None
            if failed or call.cancelled_caught:
                continue  # after the back-off, or the queue's master moved (master_moved): pull again
            if pq.dropped:
                return
            pq.last_pull_time = trio.current_time()
            status = result.status
            self.stats.on_pull(
                mq.topic,
                (time.perf_counter() - pull_started) * 1000,
                len(result.messages) if status is PullStatus.FOUND else 0,
            )
            if status is PullStatus.FOUND:
                qs.next_offset = result.next_begin_offset
                if result.messages:
                    self._restore_retry_topic(result.messages)
                    pq.put_messages(result.messages)
                    self.service.submit(qs, result.messages)
                else:
                    self._correct_offset(qs)
            elif status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "group %s: offset %d of %s is illegal; moving to %d",
                    self.group,
                    qs.next_offset,
                    mq,
                    result.next_begin_offset,
                )
                await self._start_over(qs, result.next_begin_offset)
                return
            else:
                qs.next_offset = result.next_begin_offset
                self._correct_offset(qs)
            if self.pull_interval > 0:
                await trio.sleep(self.pull_interval)

    def _correct_offset(self, qs: QueueState) -> None:
        """Nothing outstanding: the offset may follow the pull position (filtered-out messages)."""
        if qs.pq.is_empty():
            self.offset_store.update(qs.mq, qs.next_offset, increase_only=True)

    def _restore_retry_topic(self, msgs: list[MessageExt]) -> None:
        rt = self.retry_topic
        for m in msgs:
            if m.topic == rt:
                original = m.properties.get(PROPERTY_RETRY_TOPIC)
                if original:
                    m.topic = original

    # ------------------------------------------------------------------ consuming

    async def lock_all(self) -> None:
        """Renew the locks of every assigned queue (upstream ``RebalanceImpl.lockAll``).

        Under the rebalance lock: a renewal that reached the broker after a rebalance had taken
        the queue away and unlocked it would lock it again for a client that no longer pulls it
        -- and the queue's new owner could not lock it for the lock's 60 s."""
        async with self._rebalance_lock:
            for broker_name, mqs in by_broker(list(self._queues)).items():
                locked = await self.broker_calls.lock(broker_name, mqs)
                now = trio.current_time()
                for mq in mqs:
                    qs = self._queues.get(mq)
                    if qs is None:
                        continue
                    if mq in locked:
                        qs.pq.locked = True
                        qs.pq.last_lock_time = now
                    else:
                        qs.pq.locked = False

    async def _lock_loop(self) -> None:
        delay = self.lock_interval
        while True:
            with trio.move_on_after(delay):
                await self._relock_event.wait()
            self._relock_event = trio.Event()
            await self.lock_all()
            # a queue left unlocked (its lock held by another client, or the broker unreachable)
            # neither pulls nor consumes: ask again soon, not a whole interval later
            unlocked = any(not qs.pq.locked for qs in self._queues.values())
            delay = self.pull_delay_on_exception if unlocked else self.lock_interval

    # ------------------------------------------------------------------ offsets

    async def _stalled_pull_loop(self) -> None:
        """Every second: a long poll the broker should have answered by now (it holds one at most
        ``broker_suspend_max_time``, plus :data:`STALLED_PULL_GRACE`) suggests the broker went
        silent (a network partition): the routes are read again, and where a new master serves
        the queue, :meth:`master_moved` moves the pull there."""
        limit = self.broker_suspend_max_time + STALLED_PULL_GRACE
        while True:
            await trio.sleep(1.0)
            now = trio.current_time()
            if any(qs.pull_call is not None and now - qs.pull_since > limit for qs in self._queues.values()):
                self.instance.refresh_routes_soon()

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.persist_offset_interval)
            await self.offset_store.persist_all(list(self._queues), oneway=True)
