"""One broker (upstream ``BrokerController``): its store, metadata, processors and periodic services.

The broker does not own a socket: it registers a :class:`ProcessorTable` on a listener of the
process's shared :class:`RemotingServer` (that is how a container hosts many brokers on one
transport) and talks to name servers through the process's shared :class:`RemotingClient`.

Processors live in sibling modules and are registered by ``register(broker, table)`` functions;
they read the broker's public attributes listed in ``__init__``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec
import trio

from broker.clients import ConsumerManager, ProducerManager
from broker.config import BrokerConfig
from broker.groups import SubscriptionGroupManager
from broker.locks import RebalanceLockManager
from broker.long_polling import PullRequestHoldService
from broker.offsets import ConsumerOffsetManager
from broker.outer_api import BrokerIdentity, BrokerOuterAPI, split_addrs
from broker.persist import MetadataWriter, PersistedFile
from broker.replication import Replication
from broker.stats import BrokerStats
from broker.topics import DeletedTopics, TopicConfigManager
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.connection import Connection, ProcessorTable
from remoting.headers import encode_header
from remoting.log_owner import set_log_owner
from remoting.protocol.broker import NotifyConsumerIdsChangedRequestHeader
from remoting.protocol.common import DataVersion, PermName, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.message import UniqIdGenerator
from store.config import BrokerRole, MessageStoreConfig
from store.message_store import DefaultMessageStore

if TYPE_CHECKING:
    from broker.replicas_manager import ReplicasManager

#: first retry of a failed name-server registration (doubling up to registerNameServerPeriod)
REGISTER_RETRY_MIN_S = 1.0
#: how long a send that created its topic (or an admin topic update) waits for the name servers
#: to have the topic's route before it is answered: long enough for a live name server, short
#: enough that a dead one does not make the client's send (3 s by default) time out
ROUTE_WAIT_S = 1.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerController:
    """One broker replica. Start with ``await nursery.start(broker.run, server)``."""

    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: MessageStoreConfig,
        *,
        client: object,
        now_ms: Callable[[], int] = wall_clock_ms,
        transport_configs: Sequence[msgspec.Struct] = (),
    ) -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        #: the process's NettyServerConfig and NettyClientConfig (container.netty_config): shown
        #: and updated by GET/UPDATE_BROKER_CONFIG with the broker's own, as upstream's broker does
        self.transport_configs = tuple(transport_configs)
        self.client = client  # remoting.client.RemotingClient shared by the process
        self.now_ms = now_ms
        bc = broker_config
        if store_config.brokerRole == BrokerRole.SLAVE and bc.brokerId <= 0 and not bc.enableControllerMode:
            raise ValueError(f"broker {bc.brokerName}: slave broker id must be > 0 (got {bc.brokerId})")
        if store_config.brokerRole != BrokerRole.SLAVE and not bc.enableControllerMode:
            bc.brokerId = 0
        self.name = f"{bc.brokerClusterName}_{bc.brokerName}_{bc.brokerId}"
        self.log = logging.getLogger(f"broker.{self.name}")
        self.addr = f"{bc.brokerIP1}:{bc.listenPort}"
        self.ha_port = store_config.haListenPort if store_config.haListenPort > 0 else bc.listenPort + 1
        self.ha_addr = f"{bc.brokerIP2}:{self.ha_port}"
        config_dir = store_config.config_dir
        self.store = DefaultMessageStore(
            store_config,
            store_host=(bc.brokerIP1, bc.listenPort),
            now_ms=now_ms,
            controller_mode=bc.enableControllerMode,
        )
        self.topics = TopicConfigManager(
            config_dir=config_dir,
            cluster_name=bc.brokerClusterName,
            broker_name=bc.brokerName,
            auto_create_topic_enable=bc.autoCreateTopicEnable,
            default_topic_queue_nums=bc.defaultTopicQueueNums,
            cluster_topic_enable=bc.clusterTopicEnable,
            broker_topic_enable=bc.brokerTopicEnable,
            trace_topic=bc.msgTraceTopicName if bc.traceTopicEnable else None,
            broker_permission=bc.brokerPermission,
            now_ms=now_ms,
            on_change=self.request_register,
            logger=self.log,
        )
        #: topics deleted here lately, for the slaves (GET_ALL_TOPIC_CONFIG)
        self.deleted_topics = DeletedTopics(config_dir)
        self.groups = SubscriptionGroupManager(
            config_dir=config_dir, auto_create=bc.autoCreateSubscriptionGroup, now_ms=now_ms
        )
        self.offsets = ConsumerOffsetManager(
            config_dir=config_dir, now_ms=now_ms, version_step=bc.consumerOffsetUpdateVersionStep
        )
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.locks = RebalanceLockManager()
        self.stats = BrokerStats(now_ms, bc.brokerClusterName)
        self.uniq_ids = UniqIdGenerator(bc.brokerIP1, now_ms=now_ms)
        self.outer = BrokerOuterAPI(client, timeout_ms=bc.registerBrokerTimeoutMills, logger=self.log)
        self.hold = PullRequestHoldService(self._rerun_held_pull)
        self.processor_table = ProcessorTable(on_close=self._on_connection_closed)
        self.config_data_version = DataVersion(timestamp=now_ms())
        self.boot_timestamp = now_ms()
        self.master_addr: str | None = None
        self.listener: object | None = None
        self.server: object | None = None
        self._register_wanted = trio.Event()
        #: topics asked for and not yet registered with the name servers, each with the round of
        #: the register loop that carries it: the next round takes those above ``_rounds_taken``
        #: (the whole table instead when ``_register_full``, and at every period)
        self.unrouted: dict[str, int] = {}
        self._register_full = False
        #: the register loop's last round failed (a name server refused or did not answer)
        self._register_failed = False
        #: rounds of the register loop that took their topics, and that ended (registered or not)
        self._rounds_taken = 0
        self._rounds_done = 0
        self._round_done = trio.Event()
        #: writes topics.json, subscriptionGroup.json and consumerOffset.json; a refusing disk is
        #: logged, and the table stays dirty until a write succeeds
        self.metadata = MetadataWriter(self.log)
        self.topics_file = PersistedFile(self.topics.path, self.topics.encode, self.metadata)
        self.groups_file = PersistedFile(self.groups.path, self.groups.encode, self.metadata)
        self.offsets_file = PersistedFile(self.offsets.path, self.offsets.encode, self.metadata)
        self.deleted_topics_file = PersistedFile(
            self.deleted_topics.path, self.deleted_topics.encode, self.metadata
        )
        self._rerun_pull: Callable[[object, RemotingCommand], object] | None = None
        #: HA service, send gate, role switch, slave metadata sync (broker/replication.py)
        self.replication = Replication(self)
        #: controller mode: not registered with the name servers until the controller gave a role
        #: (upstream ``isIsolated``); broker/replicas_manager.py ends it. Without controllerAddr the
        #: roles are set by hand (broker/replication.py) and there is no isolation.
        self.isolated = bc.enableControllerMode and bool(bc.controller_addr_list)
        #: the broker is stopping (:meth:`prepare_stop`): it no longer registers with name servers
        self.stopping = False
        self._unregistered = False
        #: upstream's "boot success" line was logged (at the first registration every name server took)
        self._boot_said = False
        #: controller-mode membership (broker/replicas_manager.py), set by broker/replicas_processor.py
        self.replicas_manager: ReplicasManager | None = None

        from broker import admin, client_processor, pull, query, replicas_processor, send

        for module in (send, pull, query, client_processor, admin, replicas_processor):
            module.register(self, self.processor_table)

    # --- identity and role ---

    @property
    def role(self) -> BrokerRole:
        return self.store_config.brokerRole

    @property
    def is_slave(self) -> bool:
        return self.store_config.brokerRole == BrokerRole.SLAVE

    @property
    def identity(self) -> BrokerIdentity:
        bc = self.broker_config
        return BrokerIdentity(bc.brokerClusterName, bc.brokerName, bc.brokerId, self.addr, self.ha_addr)

    def is_writeable(self) -> bool:
        return PermName.is_writeable(self.broker_config.brokerPermission) and not self.is_slave

    def is_readable(self) -> bool:
        return PermName.is_readable(self.broker_config.brokerPermission)

    # --- hooks used by processors ---

    def request_register(self, topic: str | None = None) -> None:
        """The topic table changed: persist it and re-register with the name servers soon -- with
        ``topic`` only when it is given (created or changed: upstream's
        ``registerIncrementBrokerData``), else with the whole table. Sending the whole table for
        every new topic cost the broker, the name servers and the slaves time in proportion to the
        number of topics: a dev cluster given 7,000 topics took 13 new ones a second."""
        self.topics_file.changed()
        if topic is None:
            self._register_full = True
        else:
            self.unrouted[topic] = self._rounds_taken + 1
        self._register_wanted.set()

    async def wait_routed(self, *topics: str) -> None:
        """Return once the name servers were told of ``topics`` (or were asked and refused, or
        ``ROUTE_WAIT_S`` passed). Upstream registers a topic created by a send before it answers
        the send: a client that starts a consumer as soon as its first send returned -- a test --
        finds the topic's route (without it the official clients look again only after their
        30 s route poll and consume nothing until then)."""
        target = max((self.unrouted.get(t, 0) for t in topics), default=0)
        with trio.move_on_after(ROUTE_WAIT_S):
            while self._rounds_done < target:
                await self._round_done.wait()

    def groups_changed(self) -> None:
        self.groups_file.changed()

    def set_pull_rerun(self, rerun: Callable[[object, RemotingCommand], object]) -> None:
        self._rerun_pull = rerun

    async def _rerun_held_pull(self, ctx: object, request: RemotingCommand) -> None:
        assert self._rerun_pull is not None
        await self._rerun_pull(ctx, request)  # type: ignore[misc]

    async def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance now (oneway NOTIFY_CONSUMER_IDS_CHANGED)."""
        info = self.consumers.get(group)
        config = self.groups.table.get(group)
        if info is None or (config is not None and not config.notifyConsumerIdsChangedEnable):
            return
        header = encode_header(NotifyConsumerIdsChangedRequestHeader(consumerGroup=group))
        for ch in list(info.channels.values()):
            conn: Connection = ch.connection
            if conn.closed:
                continue
            try:
                await conn.oneway(
                    RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields=dict(header))
                )
            except Exception as e:  # a dying connection must not break the others
                self.log.debug("notify %s of group %s failed: %s", ch.client_id, group, e)

    async def _on_connection_closed(self, conn: Connection) -> None:
        self.producers.connection_closed(conn.id)
        for group in self.consumers.connection_closed(conn.id):
            await self.notify_consumer_ids_changed(group)

    # --- lifecycle ---

    def topic_wrapper(
        self, only: set[str] | None = None, *, to_encode: bool = False
    ) -> TopicConfigAndMappingSerializeWrapper:
        """The topic table as registered (``only`` these topics, when given): with a broker-level
        read/write ban applied (upstream ``registerBrokerAll`` masks each topic's perm by
        ``brokerPermission``). ``to_encode``: the wrapper is only encoded, so the whole table,
        unmasked, may be the topic manager's kept text (``TopicConfigManager.table_text``)."""
        perm = self.broker_config.brokerPermission
        masked = not (PermName.is_writeable(perm) and PermName.is_readable(perm))
        if to_encode and only is None and not masked:
            return TopicConfigAndMappingSerializeWrapper(
                topicConfigTable=self.topics.table_text(),  # type: ignore[arg-type]
                dataVersion=self.topics.data_version,
            )
        w = self.topics.wrapper()
        table = w.topicConfigTable
        if only is not None:
            table = {name: table[name] for name in only if name in table}
        if masked:
            table = {name: msgspec.structs.replace(tc, perm=tc.perm & perm) for name, tc in table.items()}
        return TopicConfigAndMappingSerializeWrapper(topicConfigTable=table, dataVersion=w.dataVersion)

    async def register_to_namesrvs(self, only: set[str] | None = None) -> bool:
        """Register with every name server (``only`` these topics: an incremental registration);
        False when one of them did not accept it (the register loop then retries within seconds,
        not at the next period, with the whole table)."""
        namesrvs = split_addrs(self.broker_config.namesrvAddr)
        if not namesrvs or self.isolated or self.stopping:
            return True
        bc = self.broker_config
        results = await self.outer.register_all(
            namesrvs,
            self.identity,
            self.topic_wrapper(only, to_encode=True),
            heartbeat_timeout_ms=bc.brokerNotActiveTimeoutMillis if bc.enableSlaveActingMaster else None,
            enable_acting_master=bc.enableSlaveActingMaster,
        )
        # a slave learns its master's addresses there (in controller mode only from an answer naming
        # the master the controller chose)
        self.replication.on_register_results(results)
        ok = len(results) == len(namesrvs)
        if ok and not self._boot_said:
            # upstream BrokerStartup's line (scripts and test fixtures wait for it), said once the
            # broker is routed -- in controller mode after the controller gave it a role
            self._boot_said = True
            self.log.info(
                "The broker[%s, %s] boot success. serializeType=JSON and name server is %s",
                bc.brokerName,
                self.addr,
                bc.namesrvAddr,
            )
        return ok

    def attach(self, server: object, listener: object) -> None:
        """Use ``listener`` (already bound on ``server`` with this broker's processor table)."""
        bc = self.broker_config
        self.server = server
        self.listener = listener
        port = listener.port  # type: ignore[attr-defined]
        if port != bc.listenPort:  # an ephemeral port was asked for (tests)
            bc.listenPort = port
            self.addr = f"{bc.brokerIP1}:{port}"
            if self.store_config.haListenPort <= 0:
                self.ha_port = port + 1
                self.ha_addr = f"{bc.brokerIP2}:{self.ha_port}"
            # The store host (in every stored record and offset message id) is the real port.
            self.store = DefaultMessageStore(
                self.store_config,
                store_host=(bc.brokerIP1, port),
                now_ms=self.now_ms,
                controller_mode=bc.enableControllerMode,
            )
            self.uniq_ids = UniqIdGenerator(bc.brokerIP1, now_ms=self.now_ms)

    async def bind(self, server: object, host: str | None = None) -> object:
        """Add this broker's listener on ``listenPort`` of ``server`` and attach it."""
        bc = self.broker_config
        listener = await server.add_listener(
            host or bc.brokerIP1, bc.listenPort, self.processor_table, name=self.name
        )  # type: ignore[attr-defined]
        self.attach(server, listener)
        return listener

    async def run(
        self, server: object | None = None, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Recover the store, serve on the attached listener (binding one on ``server`` if given), register.

        Runs until cancelled; on the way out it unregisters, persists metadata and closes the store.
        """
        set_log_owner(self.name)  # the store's and replication's records name this broker
        if self.listener is None:
            if server is None:
                raise RuntimeError(f"broker {self.name}: no listener attached and no server given")
            await self.bind(server)
        os.makedirs(self.store_config.config_dir, exist_ok=True)
        await trio.to_thread.run_sync(self._load_metadata)
        await self.store.start()
        self.store.add_arrival_listener(self.hold.notify_message_arriving)
        self.store.queues.on_new_queue = self._queue_created
        self.replication.role_listeners.append(self._role_changed)
        self.client.close_listeners.append(self._connection_lost)
        self.client.connect_listeners.append(self._connection_made)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.store.run)
                await nursery.start(self.hold.run)
                await nursery.start(self.replication.run)
                if self.replicas_manager is not None:
                    await nursery.start(self.replicas_manager.run)
                nursery.start_soon(self._register_loop)
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._persist_loop)
                nursery.start_soon(self._housekeeping_loop)
                nursery.start_soon(self.stats.run_sampling)
                nursery.start_soon(self.stats.items.run_sampling, self.now_ms)
                self.log.info(
                    "broker %s up at %s (%s), store %s",
                    self.name,
                    self.addr,
                    "role from the controller" if self.replicas_manager is not None else self.role.value,
                    self.store_config.storePathRootDir,
                )
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.client.close_listeners.remove(self._connection_lost)
            self.client.connect_listeners.remove(self._connection_made)
            with trio.CancelScope(shield=True):
                await self._shutdown()

    def _connection_made(self, addr: str) -> None:
        """A connection of the process's client was made: if it is to one of this broker's name
        servers and the last registration failed, register now -- the name server was out of
        reach (down, or cut off by the network) and the heartbeat that just connected is the
        first sign it is back; the next retry may be up to ``registerNameServerPeriod`` away, and
        a name server that expired this broker meanwhile routes none of its topics until then."""
        if self._register_failed:
            self._register_all_now(addr, "made again: registering now")

    def _connection_lost(self, addr: str) -> None:
        """A connection of the process's client ended: if it was to one of this broker's name
        servers, register again now (the name server may be restarting, without this broker's
        routes; retried after 1 s, 2 s, ... while it is down) -- not at the next period (30 s), as
        upstream, during which clients that ask it for routes find none."""
        self._register_all_now(addr, "lost: registering again")

    def _register_all_now(self, addr: str, what: str) -> None:
        """When ``addr`` is one of this broker's name servers (and the broker is not stopping):
        have the register loop send the whole table now, saying so in the log."""
        if addr in split_addrs(self.broker_config.namesrvAddr) and not self.stopping:
            self.log.info("connection to name server %s %s", addr, what)
            self._register_full = True
            self._register_wanted.set()

    # --- topics of stored messages ---

    def _queue_created(self, topic: str, queue_id: int) -> None:
        if not self.is_slave:
            self._adopt_stored(topic)
            return
        config = self.topics.get(topic)
        if config is None or queue_id >= max(config.readQueueNums, config.writeQueueNums):
            # the master created or widened the topic after our last metadata sync
            self.replication.slave_sync.topics_behind()

    def _role_changed(self, is_master: bool) -> None:
        """A new master routes every topic it holds messages of, including ones replicated to it
        before their config was (see :meth:`TopicConfigManager.adopt_stored`)."""
        if is_master:
            for topic in self.store.topics():
                self._adopt_stored(topic)

    def _adopt_stored(self, topic: str) -> None:
        queue_ids = self.store.queue_ids(topic)
        if queue_ids:
            self.topics.adopt_stored(topic, queue_ids[-1])

    def _load_metadata(self) -> None:
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.deleted_topics.load()

    async def prepare_stop(self) -> None:
        """The hosting process begins a graceful stop: unregister from the name servers now, while
        the transport -- and a name server hosted in the same process -- still serves, as
        upstream's shutdown unregisters before it closes its server. Clients then stop routing
        to this broker before its connections close."""
        self.stopping = True
        await self._unregister()

    async def _unregister(self) -> None:
        if self._unregistered:
            return
        self._unregistered = True
        namesrvs = split_addrs(self.broker_config.namesrvAddr)
        with trio.move_on_after(3):
            await self.outer.unregister_all(namesrvs, self.identity)

    async def _shutdown(self) -> None:
        self.stopping = True
        await self._unregister()
        if self.listener is not None and self.server is not None:
            await self.server.remove_listener(self.listener)  # type: ignore[attr-defined]
        await self._persist_all()
        await self.store.shutdown()
        self.log.info("broker %s stopped", self.name)

    async def persist_offsets(self) -> None:
        """Write ``consumerOffset.json`` now: every ``flushConsumerOffsetInterval``, at shutdown,
        and when a topic's or a group's offsets were removed -- a crash before the next period
        would bring them back, and a consumer of the topic created again would start at the old
        offset, past the new topic's first messages (upstream waits for the period)."""
        self.offsets.dirty = False  # set again by the next commit
        self.offsets_file.changed()
        await self.offsets_file.persist()

    async def _persist_all(self) -> None:
        await self.persist_offsets()
        await self.topics_file.persist()
        await self.groups_file.persist()

    async def _register_loop(self) -> None:
        period = min(max(self.broker_config.registerNameServerPeriod, 10_000), 60_000) / 1000
        # a name server that refused or did not answer (not up yet, restarting, a timeout under
        # load) is asked again after 1 s, 2 s, 4 s ... up to the period: a master that is not
        # routed cannot take sends, so waiting a whole period (30 s) for the retry is too long
        retry = REGISTER_RETRY_MIN_S
        ok = await self.register_to_namesrvs()
        self._register_failed = not ok
        while True:
            with trio.move_on_after(period if ok else retry) as waited:
                await self._register_wanted.wait()
            self._register_wanted = trio.Event()
            if self.topics_file.due:
                await self.topics_file.persist()
            # the topics asked for alone; the whole table at every period, after a failure and
            # after a deletion. (A wake-up whose topics the round before took -- asked for while
            # it wrote topics.json -- has nothing to send: it used to send the whole table.)
            taken = self._rounds_taken
            topics = {t for t, r in self.unrouted.items() if r > taken}
            self._rounds_taken = taken + 1
            full, self._register_full = self._register_full or not ok or waited.cancelled_caught, False
            if full or topics:
                ok = await self.register_to_namesrvs(None if full else topics)
                self._register_failed = not ok
                retry = REGISTER_RETRY_MIN_S if ok else min(2 * retry, period)
            self._round_ended()

    def _round_ended(self) -> None:
        done = self._rounds_done = self._rounds_taken
        self.unrouted = {t: r for t, r in self.unrouted.items() if r > done}
        self._round_done.set()
        self._round_done = trio.Event()

    async def _heartbeat_loop(self) -> None:
        bc = self.broker_config
        if bc.compatibleWithOldNameSrv and not bc.enableSlaveActingMaster:
            return  # old-style: the periodic registration is the heartbeat
        while True:
            await trio.sleep(bc.brokerHeartbeatInterval / 1000)
            if self.isolated or self.stopping:
                continue
            await self.outer.heartbeat_all(
                split_addrs(bc.namesrvAddr),
                self.identity,
                bc.sendHeartbeatTimeoutMillis,
                bc.brokerNotActiveTimeoutMillis,
            )

    async def _persist_loop(self) -> None:
        interval = self.broker_config.flushConsumerOffsetInterval / 1000
        while True:
            await trio.sleep(interval)
            if self.offsets.dirty or self.offsets_file.due:
                await self.persist_offsets()
            if self.groups_file.due:
                await self.groups_file.persist()

    async def _housekeeping_loop(self) -> None:
        timeout = self.broker_config.channelExpiredTimeout
        while True:
            await trio.sleep(10)
            now = self.now_ms()
            self.producers.expire(now, timeout)
            for group in self.consumers.expire(now, timeout):
                await self.notify_consumer_ids_changed(group)
