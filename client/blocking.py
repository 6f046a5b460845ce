"""A blocking facade over the trio client, for code that is not async.

A :class:`BlockingLoop` runs ``trio.run`` in a daemon thread; the blocking classes start their
trio counterpart inside that loop and forward calls through ``trio.from_thread.run``::

    with BlockingProducer("PG", "127.0.0.1:9876") as producer:
        result = producer.send(Message("TopicTest", b"hello"))

    consumer = BlockingPushConsumer("CG", "127.0.0.1:9876")
    consumer.subscribe("TopicTest", "*")
    consumer.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)   # runs in a worker thread
    consumer.start(); ...; consumer.shutdown()

Each object owns a loop thread unless a shared ``loop`` is passed (then closing the object
leaves the loop running; close it with :meth:`BlockingLoop.close`). Calls must not be made from
inside the loop thread itself (e.g. from a push listener); use the async API there.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Self, TypeVar

import trio

from client.message import ConsumeStatus, Message, MessageExt, MQClientError, PullResult, SendResult
from client.producer import MessageQueueSelector, Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from remoting.protocol.common import MessageQueue

__all__ = ["BlockingLoop", "BlockingProducer", "BlockingPullConsumer", "BlockingPushConsumer"]

T = TypeVar("T")


class _Hosted:
    """An async context manager kept open by a task of the loop until ``close``."""

    def __init__(self) -> None:
        self.stop = trio.Event()
        self.done = trio.Event()
        self.error: BaseException | None = None
        #: what the context manager's ``__aenter__`` returned
        self.value: Any = None


class BlockingLoop:
    """A trio loop in a background thread that hosts clients for blocking callers."""

    def __init__(self, name: str = "rmq-client-loop") -> None:
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._crash: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._crash is not None:
            raise self._crash

    def _main(self) -> None:
        try:
            trio.run(self._amain)
        except BaseException as e:  # reported to the constructor or visible as a dead loop
            self._crash = e
            self._ready.set()

    async def _amain(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def run(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await afn(*args)`` in the loop and return its result (exceptions propagate)."""
        if self._token is None or not self._thread.is_alive():
            raise MQClientError("the client loop is not running")
        if threading.current_thread() is self._thread:
            raise MQClientError("blocking client calls cannot be made from the client loop thread")
        return trio.from_thread.run(afn, *args, trio_token=self._token)

    def enter(self, cm: AbstractAsyncContextManager[Any]) -> _Hosted:
        """Enter ``cm`` in a task of the loop; it stays entered until :meth:`exit`."""

        async def start() -> _Hosted:
            assert self._nursery is not None
            return await self._nursery.start(self._host, cm)

        return self.run(start)

    async def _host(
        self, cm: AbstractAsyncContextManager[Any], *, task_status: trio.TaskStatus[_Hosted]
    ) -> None:
        hosted = _Hosted()
        entered = False
        try:
            async with cm as value:
                hosted.value = value
                entered = True
                task_status.started(hosted)
                await hosted.stop.wait()
        except Exception as e:
            if not entered:
                raise
            hosted.error = e
        finally:
            hosted.done.set()

    def exit(self, hosted: _Hosted) -> None:
        """Leave a context entered with :meth:`enter`; re-raises an error from its exit."""

        async def stop() -> None:
            hosted.stop.set()
            await hosted.done.wait()

        self.run(stop)
        if hosted.error is not None:
            raise hosted.error

    def close(self) -> None:
        """Stop the loop (cancelling whatever it still hosts) and join the thread."""
        if self._token is not None and self._thread.is_alive():

            async def stop() -> None:
                assert self._stop is not None
                self._stop.set()

            try:
                trio.from_thread.run(stop, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()


class _BlockingClient:
    def __init__(self, target: Any, loop: BlockingLoop | None) -> None:
        self._own_loop = loop is None
        self._loop = loop
        self._target = target
        self._hosted: _Hosted | None = None

    def start(self) -> None:
        if self._hosted is not None:
            return
        if self._loop is None:
            self._loop = BlockingLoop()
        try:
            self._hosted = self._loop.enter(self._target)
        except BaseException:
            if self._own_loop:
                self._loop.close()
                self._loop = None
            raise

    def shutdown(self) -> None:
        hosted, self._hosted = self._hosted, None
        if hosted is None or self._loop is None:
            return
        try:
            self._loop.exit(hosted)
        finally:
            if self._own_loop:
                self._loop.close()
                self._loop = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def _run(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._hosted is None or self._loop is None:
            raise MQClientError(f"{type(self).__name__} is not started")
        return self._loop.run(afn, *args)


class BlockingProducer(_BlockingClient):
    """:class:`~client.producer.Producer` with blocking methods (same constructor arguments)."""

    def __init__(
        self, group: str, namesrv_addr: str | None = None, *, loop: BlockingLoop | None = None, **kwargs: Any
    ) -> None:
        self.producer = Producer(group, namesrv_addr, **kwargs)
        super().__init__(self.producer, loop)

    def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        async def call() -> SendResult:
            return await self.producer.send(msg, queue=queue, selector=selector, arg=arg, timeout=timeout)

        return self._run(call)

    def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        async def call() -> None:
            await self.producer.send_oneway(msg, queue=queue, selector=selector, arg=arg)

        self._run(call)

    def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> SendResult:
        async def call() -> SendResult:
            return await self.producer.send_batch(msgs, queue=queue, timeout=timeout)

        return self._run(call)

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.producer.fetch_publish_message_queues, topic)


class BlockingPullConsumer(_BlockingClient):
    """:class:`~client.pull_consumer.PullConsumer` with blocking methods."""

    def __init__(
        self, group: str, namesrv_addr: str | None = None, *, loop: BlockingLoop | None = None, **kwargs: Any
    ) -> None:
        self.consumer = PullConsumer(group, namesrv_addr, **kwargs)
        super().__init__(self.consumer, loop)

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.consumer.fetch_subscribe_message_queues, topic)

    def pull(
        self, mq: MessageQueue, expression: str, offset: int, max_nums: int, *, timeout: float = 10.0
    ) -> PullResult:
        async def call() -> PullResult:
            return await self.consumer.pull(mq, expression, offset, max_nums, timeout=timeout)

        return self._run(call)

    def pull_block_if_not_found(
        self, mq: MessageQueue, expression: str, offset: int, max_nums: int
    ) -> PullResult:
        return self._run(self.consumer.pull_block_if_not_found, mq, expression, offset, max_nums)

    def max_offset(self, mq: MessageQueue) -> int:
        return self._run(self.consumer.max_offset, mq)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self.consumer.min_offset, mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self.consumer.search_offset, mq, timestamp_ms)

    def query_consumer_offset(self, mq: MessageQueue) -> int:
        return self._run(self.consumer.query_consumer_offset, mq)

    def update_consumer_offset(self, mq: MessageQueue, offset: int) -> None:
        self._run(self.consumer.update_consumer_offset, mq, offset)


class BlockingPushConsumer(_BlockingClient):
    """:class:`~client.push_consumer.PushConsumer` whose listener is a plain function.

    The listener runs in a worker thread (at most ``consume_concurrency`` at a time) so it may
    block; it returns a :class:`~client.message.ConsumeStatus`.
    """

    def __init__(
        self, group: str, namesrv_addr: str | None = None, *, loop: BlockingLoop | None = None, **kwargs: Any
    ) -> None:
        self.consumer = PushConsumer(group, namesrv_addr, **kwargs)
        self._limiter: trio.CapacityLimiter | None = None
        super().__init__(self.consumer, loop)

    def subscribe(self, topic: str, expression: str = "*") -> None:
        if self._hosted is not None:

            async def call() -> None:
                self.consumer.subscribe(topic, expression)

            self._run(call)
        else:
            self.consumer.subscribe(topic, expression)

    def register_listener(self, listener: Callable[[list[MessageExt]], ConsumeStatus | None]) -> None:
        async def call_in_thread(msgs: list[MessageExt]) -> ConsumeStatus | None:
            if self._limiter is None:
                self._limiter = trio.CapacityLimiter(self.consumer.consume_concurrency)
            return await trio.to_thread.run_sync(listener, msgs, limiter=self._limiter)

        self.consumer.register_listener(call_in_thread)

    def assignment(self) -> list[MessageQueue]:
        async def call() -> list[MessageQueue]:
            return self.consumer.assignment()

        return self._run(call)
