"""The client instance: one remoting client, routes, broker addresses and heartbeats for the
producers and consumers that share it.

Upstream: ``MQClientInstance`` (+ the name-server half of ``MQClientAPIImpl``). Producers and
consumers create a private instance unless one is passed to them (upstream 5.x also gives each
client its own instance: the default instance name becomes ``pid#nanotime``)::

    async with ClientInstance("127.0.0.1:9876") as instance:
        async with Producer("PG", "127.0.0.1:9876", instance=instance) as p1, \\
                   PushConsumer("CG", "127.0.0.1:9876", instance=instance) as c1:
            ...

While running, the instance refreshes the route of every topic in use every
``poll_name_server_interval`` seconds (30), and at once (at most once a second) when a broker
cannot be connected to, does not answer a call in time (the connection is then closed, as
upstream's remoting client does), refuses a send as a slave, or its connection ends -- also when
the broker's kernel acknowledged nothing for ``PEER_UNACKED_TIMEOUT`` (see
:meth:`ClientInstance.route_may_be_stale`); it heartbeats every known
broker every ``heartbeat_interval`` seconds (30), at once when a route reveals a new broker, and at
once to a broker whenever it connects to it (a restarted broker knows no client; see
:meth:`ClientInstance.broker_connected`), and routes NOTIFY_CONSUMER_IDS_CHANGED from a broker to
the consumer of that group.

The background work runs in a trio system task of the instance's own: ``start()`` and
``shutdown()`` may be called from any tasks of the run, and an instance never shut down stops
when the run ends (``async with`` shuts it down for you).
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Protocol, Self, TypeVar

import trio

from client.hedge import first_answer
from client.message import AUTO_CREATE_TOPIC_KEY, MASTER_ID, MQBrokerError, MQClientError
from client.route import (
    BrokerAddrTable,
    FindBrokerResult,
    TopicPublishInfo,
    default_topic_route,
    publish_info_from_route,
    routes_equal,
    subscribe_queues_from_route,
)
from remoting.client import PEER_UNACKED_TIMEOUT, RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import ProcessorTable, RequestContext
from remoting.errors import RemotingConnectError, RemotingError
from remoting.fastjson import FastjsonError
from remoting.protocol.broker import ConsumerData, HeartbeatData, ProducerData, ResetOffsetBody
from remoting.protocol.common import MessageQueue
from remoting.protocol.namesrv import TopicRouteData

__all__ = ["ClientInstance", "ConsumerHook", "parse_namesrv_addrs"]

log = logging.getLogger("client")
T = TypeVar("T")

#: least seconds between two route refreshes asked for by unreachable brokers
UNREACHABLE_REFRESH_INTERVAL = 1.0
_instance_counter = itertools.count(1)


def parse_namesrv_addrs(addrs: str | list[str]) -> list[str]:
    """``"a:9876;b:9876"`` (or a list) -> addresses, blanks dropped."""
    parts = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    return [p.strip() for p in parts if p.strip()]


def _local_ip(namesrv_addrs: list[str]) -> str:
    """The local address used towards the first name server (no packet is sent)."""
    for addr in namesrv_addrs:
        host = addr.rpartition(":")[0].strip("[]")
        try:
            socket.inet_pton(socket.AF_INET, host)
        except OSError:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((host, 9))
                return s.getsockname()[0]
            except OSError:
                continue
    return "127.0.0.1"


class ConsumerHook(Protocol):
    """What the instance needs from a consumer registered with it."""

    group: str

    def consumer_data(self) -> ConsumerData: ...

    def subscribed_topics(self) -> set[str]: ...

    def request_rebalance(self) -> None: ...

    def master_connection_lost(self, broker_name: str) -> None: ...

    def master_moved(self, broker_name: str) -> None: ...


def _without_cancelled(exc: BaseException) -> BaseException | None:
    """``exc`` less its :class:`trio.Cancelled` parts; None when nothing else is left."""
    if isinstance(exc, trio.Cancelled):
        return None
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1]
    return exc


class ClientInstance:
    """Shared client machinery (see the module docstring)."""

    def __init__(
        self,
        namesrv_addr: str | list[str],
        *,
        instance_name: str | None = None,
        client_ip: str | None = None,
        heartbeat_interval: float = 30.0,
        poll_name_server_interval: float = 30.0,
        call_timeout: float = 3.0,
        remoting: RemotingClient | None = None,
    ) -> None:
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addr)
        if not self.namesrv_addrs:
            raise MQClientError("no name server address given")
        self.client_ip = client_ip or _local_ip(self.namesrv_addrs)
        self.instance_name = instance_name or f"{os.getpid()}#{next(_instance_counter)}"
        #: upstream ``buildMQClientId``: ``ip@instanceName``
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self.heartbeat_interval = heartbeat_interval
        self.poll_name_server_interval = poll_name_server_interval
        self.call_timeout = call_timeout
        self._external_remoting = remoting
        self.remoting: RemotingClient | None = remoting
        self.routes: dict[str, TopicRouteData] = {}
        self.publish: dict[str, TopicPublishInfo] = {}
        self.subscribe: dict[str, set[MessageQueue]] = {}
        self.brokers = BrokerAddrTable()
        self.producers: set[str] = set()
        self.consumers: dict[str, ConsumerHook] = {}
        self._route_locks: dict[str, trio.Lock] = {}
        #: set by :meth:`route_may_be_stale`: the route loop refreshes at once
        self._route_wakeup = trio.Event()
        self._unreachable_refresh_at = -math.inf
        self._namesrv_index = 0
        self._nursery: trio.Nursery | None = None
        self._host_stop: trio.Event | None = None
        self._host_done: trio.Event | None = None
        self._crash: BaseException | None = None
        self._heartbeat_lock = trio.Lock()

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._nursery is not None

    @property
    def nursery(self) -> trio.Nursery:
        """The nursery of the instance's background work (consumers run their tasks in it)."""
        if self._nursery is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        return self._nursery

    async def start(self) -> None:
        """Open the remoting client and start the heartbeat and route-refresh loops.

        The instance's background work runs in a task of its own (a trio system task), not in the
        caller's: ``start()`` and ``shutdown()`` may be called from different tasks, and an
        instance that is never shut down -- a test that failed before reaching its
        ``shutdown()`` -- is stopped when the trio run ends. (It used to open its nursery in the
        caller's task, and a run that ended with it open reported trio's "Nursery stack
        corrupted" or "internal error in Trio" instead of the error that ended it.)"""
        if self._host_stop is not None:
            raise MQClientError(f"client instance {self.client_id} is already started")
        ready, stop, done = trio.Event(), trio.Event(), trio.Event()
        failed: list[BaseException] = []
        self._host_stop, self._host_done, self._crash = stop, done, None
        trio.lowlevel.spawn_system_task(
            self._host,
            ready,
            stop,
            done,
            failed,
            name=f"client instance {self.client_id}",
            context=contextvars.copy_context(),
        )
        try:
            await ready.wait()
        except BaseException:
            stop.set()
            with trio.CancelScope(shield=True):  # one host at a time: it clears the shared state
                await done.wait()
            self._host_stop = self._host_done = None
            raise
        if failed:
            self._host_stop = self._host_done = None
            raise failed[0]
        log.info("client instance %s started (name servers %s)", self.client_id, ";".join(self.namesrv_addrs))

    async def _open(self, stack: AsyncExitStack) -> trio.Nursery:
        """The remoting client, its listeners and the nursery of the background work, entered
        on ``stack``."""
        if self._external_remoting is None:
            table = ProcessorTable()
            table.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_consumer_ids_changed)
            table.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)
            table.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
            self.remoting = await stack.enter_async_context(
                RemotingClient(
                    processors=table,
                    on_connect_failure=self.broker_unreachable,
                    close_on_timeout=True,
                    on_call_timeout=self.route_may_be_stale,
                    unacked_timeout=PEER_UNACKED_TIMEOUT,
                )
            )
        else:
            self._external_remoting.processors.register(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_consumer_ids_changed
            )
            self._external_remoting.processors.register(
                RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info
            )
            self._external_remoting.processors.register(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset
            )
        remoting = self._remoting()
        remoting.connect_listeners.append(self.broker_connected)
        stack.callback(remoting.connect_listeners.remove, self.broker_connected)
        remoting.close_listeners.append(self.broker_disconnected)
        stack.callback(remoting.close_listeners.remove, self.broker_disconnected)
        return await stack.enter_async_context(trio.open_nursery())

    async def _host(
        self, ready: trio.Event, stop: trio.Event, done: trio.Event, failed: list[BaseException]
    ) -> None:
        """The system task of a started instance: holds its remoting client and nursery until
        :meth:`shutdown` (or the end of the trio run, which cancels it). A crash of the
        background work is logged and raised by :meth:`shutdown`, never out of this task (a
        system task's exception ends the whole run)."""
        try:
            async with AsyncExitStack() as stack:
                try:
                    nursery = await self._open(stack)
                except BaseException as exc:  # handed to start()'s caller
                    failed.append(exc)
                    return
                self._nursery = nursery
                ready.set()
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._route_loop)
                await stop.wait()
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            crash = _without_cancelled(exc)
            if crash is None:
                raise  # the run is ending: cancelled
            log.error("client instance %s: background work failed: %r", self.client_id, crash)
            self._crash = crash
        finally:
            self._nursery = None
            if self._external_remoting is None:
                self.remoting = None
            ready.set()
            done.set()

    async def shutdown(self) -> None:
        """Stop background work and close connections (producers/consumers unregister first).
        Raises what made the background work fail, if anything did."""
        stop, done = self._host_stop, self._host_done
        if stop is None or done is None:
            return
        stop.set()
        with trio.CancelScope(shield=True):  # as in start(): the next start() needs it gone
            await done.wait()
        self._host_stop = self._host_done = None
        log.info("client instance %s stopped", self.client_id)
        crash, self._crash = self._crash, None
        if crash is not None:
            raise crash

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ membership

    def register_producer(self, group: str) -> None:
        if group in self.producers:
            raise MQClientError(f"producer group {group!r} is already registered in {self.client_id}")
        self.producers.add(group)

    def register_consumer(self, consumer: ConsumerHook) -> None:
        if consumer.group in self.consumers:
            raise MQClientError(
                f"consumer group {consumer.group!r} is already registered in {self.client_id}"
            )
        self.consumers[consumer.group] = consumer

    async def unregister_producer(self, group: str) -> None:
        self.producers.discard(group)
        await self._unregister_client(producer_group=group, consumer_group=None)

    async def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)
        await self._unregister_client(producer_group=None, consumer_group=group)

    async def _unregister_client(self, producer_group: str | None, consumer_group: str | None) -> None:
        ext: dict[str, object] = {"clientID": self.client_id}
        if producer_group:
            ext["producerGroup"] = producer_group
        if consumer_group:
            ext["consumerGroup"] = consumer_group
        async with trio.open_nursery() as n:
            for addr in sorted(self.brokers.all_addrs()):
                n.start_soon(
                    self._quiet_call, addr, request(RequestCode.UNREGISTER_CLIENT, ext), "unregister"
                )

    async def _quiet_call(self, addr: str, cmd: RemotingCommand, what: str) -> RemotingCommand | None:
        try:
            response = await self.invoke(addr, cmd, self.call_timeout)
        except RemotingError as e:
            log.warning("%s to %s failed: %s", what, addr, e)
            return None
        if response.code != ResponseCode.SUCCESS:
            log.warning("%s to %s answered %d: %s", what, addr, response.code, response.remark)
        return response

    # ------------------------------------------------------------------ remoting

    def _remoting(self) -> RemotingClient:
        if self.remoting is None:
            raise MQClientError(f"client instance {self.client_id} is not started")
        return self.remoting

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Request/response to ``addr`` (RemotingError on transport failure)."""
        return await self._remoting().invoke(addr, cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self._remoting().invoke_oneway(addr, cmd, self.call_timeout)

    async def invoke_namesrv(self, cmd: RemotingCommand) -> RemotingCommand:
        """Ask the current name server; when it fails -- or has not answered within
        ``NAMESRV_HEDGE_S`` -- ask the next one too, and so on (:func:`client.hedge.first_answer`).
        The first answer counts, and its name server becomes the current one. (Route queries
        only: asking twice is harmless.)"""

        async def invoke(addr: str, c: RemotingCommand) -> RemotingCommand:
            return await self.invoke(addr, c, self.call_timeout)

        idx, response = await first_answer(invoke, self.namesrv_addrs, self._namesrv_index, cmd, log)
        self._namesrv_index = idx
        return response

    # ------------------------------------------------------------------ routes

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC: the route, or None when the name server says TOPIC_NOT_EXIST."""
        response = await self.invoke_namesrv(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            addr = self.namesrv_addrs[self._namesrv_index]  # the one that answered
            remark = (response.remark or "").strip()
            if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                # e.g. a broker's address given as the name server's
                remark += f" (is {addr} a name server? it does not answer route queries)"
            raise MQBrokerError(response.code, remark, f"name server {addr}")
        return TopicRouteData.decode(response.body_bytes)

    def _apply_route(self, topic: str, route: TopicRouteData, *, from_default_topic: bool = False) -> bool:
        """Store ``route`` and derive publish/subscribe info; True if it changed."""
        old = self.routes.get(topic)
        changed = not routes_equal(old, route)
        known = topic in self.publish
        if changed or not known or self.publish[topic].from_default_topic != from_default_topic:
            self.routes[topic] = route
            self.publish[topic] = publish_info_from_route(topic, route, from_default_topic=from_default_topic)
            self.subscribe[topic] = subscribe_queues_from_route(topic, route)
            # this route's brokers only (upstream's client puts each route's brokers into its
            # table the same way); the whole table is rebuilt after every poll of all routes.
            # Rebuilding it from every route here cost a producer sending to 7,000 topics
            # 90 % of its time
            before = self.brokers.all_addrs()
            masters = {bd.brokerName: self.brokers.master_addr(bd.brokerName) for bd in route.brokerDatas}
            self.brokers.update(route.brokerDatas)
            new_addrs = self.brokers.all_addrs() - before
            for name, old_master in masters.items():
                if old_master is not None and self.brokers.master_addr(name) not in (None, old_master):
                    # a failover: requests still waiting on the old master (a consumer's long polls)
                    # may wait there until they time out -- a master the network lost never answers
                    for consumer in list(self.consumers.values()):
                        consumer.master_moved(name)
            if not self.consumers:
                new_addrs &= self.brokers.master_addrs()
            if new_addrs and self._nursery is not None:
                self._nursery.start_soon(self._heartbeat_addrs, sorted(new_addrs))
        return changed

    def _lock_for(self, topic: str) -> trio.Lock:
        lock = self._route_locks.get(topic)
        if lock is None:
            lock = self._route_locks[topic] = trio.Lock()
        return lock

    async def update_route(self, topic: str) -> bool:
        """Refresh one topic's route from the name server. Returns True if a route is now held.

        A TOPIC_NOT_EXIST answer keeps whatever was held (e.g. a TBW102-derived publish info);
        transport errors are logged and likewise keep the old route.
        """
        async with self._lock_for(topic):
            return await self._update_route_locked(topic)

    async def _update_route_locked(self, topic: str) -> bool:
        try:
            route = await self.fetch_route(topic)
        except (RemotingError, MQClientError) as e:
            log.warning("route of %s: %s", topic, e)
            return topic in self.routes
        if route is None:
            return topic in self.routes
        if self._apply_route(topic, route):
            log.info("route of %s changed: %s", topic, route)
        return True

    async def find_publish_info(self, topic: str, default_topic_queue_nums: int = 4) -> TopicPublishInfo:
        """Upstream ``tryToFindTopicPublishInfo``: held info, else the name server, else TBW102.

        Concurrent callers for the same unknown topic share one lookup. Raises
        :class:`MQClientError` (code 17) when neither the topic nor TBW102 has a route.
        """
        info = self.publish.get(topic)
        if info is not None and info.ok:
            return info
        async with self._lock_for(topic):
            info = self.publish.get(topic)
            if info is not None and info.ok:
                return info
            await self._update_route_locked(topic)
            info = self.publish.get(topic)
            if info is not None and info.ok:
                return info
            try:
                default = await self.fetch_route(AUTO_CREATE_TOPIC_KEY)
            except (RemotingError, MQClientError) as e:
                raise MQClientError(
                    f"no route info of topic {topic}: {e}", ResponseCode.TOPIC_NOT_EXIST
                ) from e
            if default is not None:
                self._apply_route(
                    topic, default_topic_route(default, default_topic_queue_nums), from_default_topic=True
                )
                info = self.publish.get(topic)
                if info is not None and info.ok:
                    log.info(
                        "topic %s has no route yet; sending through the %s route",
                        topic,
                        AUTO_CREATE_TOPIC_KEY,
                    )
                    return info
        raise MQClientError(f"no route info of topic {topic}", ResponseCode.TOPIC_NOT_EXIST)

    async def master_addr(self, broker_name: str, topic: str | None = None) -> str:
        """The master of ``broker_name``; refreshes ``topic``'s route once if it is unknown."""
        addr = self.brokers.master_addr(broker_name)
        if addr is None and topic is not None:
            await self.update_route(topic)
            addr = self.brokers.master_addr(broker_name)
        if addr is None:
            raise MQClientError(
                f"the broker {broker_name} does not exist or has no master", ResponseCode.SYSTEM_ERROR
            )
        return addr

    async def invoke_master(
        self, broker_name: str, topic: str, cmd: RemotingCommand
    ) -> tuple[str, RemotingCommand]:
        """Request/response to the master of ``broker_name`` (``topic``'s route read once if it is
        unknown): the address that answered, and the response. A master that cannot be connected
        to may have failed over (controller mode) before the route poll saw it: ``topic``'s route
        is read again at once and a new master gets ``cmd``. Upstream's clients send to the old
        address until their next poll: a consumer stopping right after a failover lost its last
        offset commits (the group then consumed those messages again), and an orderly one left
        its queues locked."""

        async def call(addr: str) -> tuple[str, RemotingCommand]:
            return addr, await self.invoke(addr, cmd, self.call_timeout)

        return await self._to_master(broker_name, topic, call)

    async def invoke_master_oneway(self, broker_name: str, topic: str, cmd: RemotingCommand) -> None:
        """:meth:`invoke_master` without waiting for a response."""
        await self._to_master(broker_name, topic, lambda addr: self.invoke_oneway(addr, cmd))

    async def _to_master(self, broker_name: str, topic: str, call: Callable[[str], Awaitable[T]]) -> T:
        addr = await self.master_addr(broker_name, topic)
        try:
            return await call(addr)
        except RemotingConnectError:
            await self.update_route(topic)
            moved = self.brokers.master_addr(broker_name)
            if moved is None or moved == addr:
                raise
            log.info("the master of %s moved from %s to %s: sending there", broker_name, addr, moved)
            return await call(moved)

    async def subscribe_addr(
        self, broker_name: str, broker_id: int, topic: str, *, only_this_broker: bool = False
    ) -> FindBrokerResult:
        """An address to read ``broker_name`` from (preferring ``broker_id``)."""
        found = self.brokers.find_subscribe(broker_name, broker_id, only_this_broker)
        if found is None:
            await self.update_route(topic)
            found = self.brokers.find_subscribe(broker_name, broker_id, only_this_broker)
        if found is None:
            raise MQClientError(f"the broker {broker_name} does not exist", ResponseCode.SYSTEM_ERROR)
        return found

    def any_broker_addr_of_topic(self, topic: str) -> str | None:
        """An address of some broker serving ``topic`` (masters first), for group-wide queries."""
        route = self.routes.get(topic)
        if route is None:
            return None
        for bd in sorted(route.brokerDatas, key=lambda b: b.brokerName):
            addr = bd.brokerAddrs.get(MASTER_ID)
            if addr:
                return addr
        for bd in route.brokerDatas:
            if bd.brokerAddrs:
                return bd.brokerAddrs[min(bd.brokerAddrs)]
        return None

    def topics_in_use(self) -> set[str]:
        topics = set(self.publish)
        for c in self.consumers.values():
            topics |= c.subscribed_topics()
        return topics

    async def update_all_routes(self) -> None:
        for topic in sorted(self.topics_in_use()):
            await self.update_route(topic)
        # brokers that no route names any more leave the table
        self.brokers.rebuild(self.routes.values())

    def broker_unreachable(self, addr: str) -> None:
        """A connection to ``addr`` could not be made. When that is a broker, its process may be
        gone and a new master elected in another one (controller mode): refresh every route in use
        now rather than at the next poll. Upstream's clients wait for the poll: after a failover
        of every master a topic has (one container held them), their sends fail for up to 30 s
        -- the C++ client's with 'No route info of this topic' -- while the new masters serve."""
        self.route_may_be_stale(addr)

    def refresh_routes_soon(self) -> None:
        """Have the route loop read every route in use now (at most once a second)."""
        self._route_wakeup.set()

    def route_may_be_stale(self, addr: str) -> None:
        """``addr`` did not act as the routes say (it cannot be reached, did not answer in time,
        or a master refused writes): refresh every route in use now (at most once a second), not
        at the next poll. A master cut off by a network partition answers nothing; the controller
        has elected another within seconds, and once the partition heals the old one refuses
        every send as a slave -- until the poll, up to 30 s later, upstream's clients keep
        sending to it."""
        if addr not in self.namesrv_addrs:
            self.refresh_routes_soon()

    async def _route_loop(self) -> None:
        interval = self.poll_name_server_interval
        next_poll = trio.current_time() + interval
        while True:
            with trio.move_on_at(next_poll):
                await self._route_wakeup.wait()
                # asked for by an unreachable broker: at most once a second
                await trio.sleep_until(self._unreachable_refresh_at + UNREACHABLE_REFRESH_INTERVAL)
            self._route_wakeup = trio.Event()
            now = trio.current_time()
            if now >= next_poll:
                next_poll = now + interval
            else:
                self._unreachable_refresh_at = now
                log.info(
                    "a broker did not act as routed (unreachable, silent, or a slave now): refreshing the routes of %s",
                    sorted(self.topics_in_use()),
                )
            await self.update_all_routes()

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            clientID=self.client_id,
            producerDataSet=[ProducerData(groupName=g) for g in sorted(self.producers)],
            consumerDataSet=[c.consumer_data() for _, c in sorted(self.consumers.items())],
        )

    def heartbeat_targets(self) -> set[str]:
        """The brokers this instance heartbeats to: every known one (masters only when there are
        no consumers)."""
        return {
            addr
            for addrs_by_id in self.brokers.table.values()
            for bid, addr in addrs_by_id.items()
            if bid == MASTER_ID or self.consumers
        }

    async def send_heartbeat_to_all(self) -> None:
        """HEART_BEAT to every known broker (masters only when there are no consumers)."""
        await self._heartbeat_addrs(sorted(self.heartbeat_targets()))

    async def _heartbeat_addrs(self, addrs: list[str]) -> None:
        if not addrs or (not self.producers and not self.consumers):
            return
        body = self.heartbeat_data().encode()
        async with trio.open_nursery() as n:
            for addr in addrs:
                n.start_soon(self._heartbeat, addr, body)

    async def _heartbeat(self, addr: str, body: bytes) -> RemotingCommand | None:
        return await self._quiet_call(addr, request(RequestCode.HEART_BEAT, body=body), "heartbeat")

    def broker_connected(self, addr: str) -> None:
        """A connection to ``addr`` was made (upstream's ``onChannelActive``). When ``addr`` is a
        broker this instance heartbeats to, it gets the heartbeat at once, not at the next period:
        a broker that restarted knows no client -- it would list no consumer of the group to the
        other members' rebalances (each then takes queues the others hold) and could not check
        back this producer's transactions -- until the heartbeat, 30 s later by default. (This
        client's pulls carry their subscription; clients whose pulls do not are answered
        SUBSCRIPTION_NOT_EXIST meanwhile.)"""
        nursery = self._nursery
        if nursery is not None and (self.producers or self.consumers) and addr in self.heartbeat_targets():
            nursery.start_soon(self._heartbeat_connected, addr)

    def broker_disconnected(self, addr: str) -> None:
        """The connection to ``addr`` ended other than by this client. Its broker may be gone --
        stopped, or lost by the network (the kernel ends a connection whose peer acknowledges
        nothing for ``PEER_UNACKED_TIMEOUT``) -- and a new master elected: the routes are read
        again now (:meth:`route_may_be_stale`), so that long polls failed with the connection are
        made again to a new master rather than to the lost one. When ``addr`` is a group's
        master, its queue locks may be gone with it (a restarted broker or a new master holds
        none): the consumers stop consuming its queues under their own locks until they lock them
        again (see ``PushConsumer.master_connection_lost``)."""
        self.route_may_be_stale(addr)
        for broker_name, addrs_by_id in list(self.brokers.table.items()):
            if addrs_by_id.get(MASTER_ID) == addr:
                for consumer in list(self.consumers.values()):
                    consumer.master_connection_lost(broker_name)

    async def _heartbeat_connected(self, addr: str) -> None:
        async with self._heartbeat_lock:
            remoting = self.remoting
            if remoting is None or remoting.connection(addr) is None:
                return  # closed again meanwhile: the next connection heartbeats
            response = await self._heartbeat(addr, self.heartbeat_data().encode())
        if response is not None and response.code == ResponseCode.SUCCESS:
            # as upstream: the group's view on that broker changed, rebalance now
            for consumer in list(self.consumers.values()):
                consumer.request_rebalance()

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval)
            async with self._heartbeat_lock:
                await self.send_heartbeat_to_all()

    # ------------------------------------------------------------------ server -> client

    async def _on_consumer_ids_changed(
        self, ctx: RequestContext, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        group = (cmd.ext_fields or {}).get("consumerGroup", "")
        consumer = self.consumers.get(group)
        log.info("broker %s: consumer ids of group %s changed", ctx.connection.remote_address, group)
        if consumer is not None:
            consumer.request_rebalance()
        return None

    async def _on_reset_offset(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        """RESET_CONSUMER_CLIENT_OFFSET (oneway, from a broker applying an admin's reset through
        its clients): the group's consumer moves its queues to the offsets of the body."""
        group = (cmd.ext_fields or {}).get("group", "")
        consumer = self.consumers.get(group)
        reset_offsets = getattr(consumer, "reset_offsets", None)
        if reset_offsets is None:
            log.info(
                "broker %s: offset reset for group %s, not consumed here",
                ctx.connection.remote_address,
                group,
            )
            return None
        try:
            body = ResetOffsetBody.decode(cmd.body_bytes)
        except (FastjsonError, ValueError) as e:
            log.warning(
                "broker %s: unreadable offset reset for group %s: %s", ctx.connection.remote_address, group, e
            )
            return None
        await reset_offsets(body.offsetTable)
        return None

    async def _on_running_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO, passed on by a broker for an admin (mqadmin ``consumerStatus``)."""
        group = (cmd.ext_fields or {}).get("consumerGroup", "")
        consumer = self.consumers.get(group)
        running_info = getattr(consumer, "running_info", None)
        if running_info is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
            )
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = running_info().encode()
        return response


def own_or_shared(instance: ClientInstance | None, namesrv_addr: str | None) -> tuple[ClientInstance, bool]:
    """The instance a producer/consumer uses, and whether it owns it (a private one, made from
    ``namesrv_addr`` -- else ``$NAMESRV_ADDR``, as upstream's clients -- that it starts and shuts
    down itself) or shares one started by the caller."""
    if instance is not None:
        return instance, False
    namesrv_addr = namesrv_addr or os.environ.get("NAMESRV_ADDR", "").strip()
    if not namesrv_addr:
        raise MQClientError(
            "a name server address or a client instance is required (or $NAMESRV_ADDR, e.g. 127.0.0.1:9876)"
        )
    return ClientInstance(namesrv_addr), True
