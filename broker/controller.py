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
from broker.outer_api import BrokerIdentity, BrokerOuterAPI, RegisterRequest, RegisterResult, split_addrs
from broker.persist import MetadataWriter, PersistedFile
from broker.replication import Replication
from broker.stats import BrokerStats
from broker.topics import DeletedTopics, TopicConfigManager
from remoting.clock import AwakeClock, monotonic_ms, wall_clock_ms
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.connection import Connection, ProcessorTable
from remoting.headers import encode_header
from remoting.log_owner import set_log_owner
from remoting.protocol.broker import NotifyConsumerIdsChangedRequestHeader
from remoting.protocol.common import DataVersion, PermName, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.message import UniqIdGenerator
from remoting.sockets import ip_of
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


class NamesrvRegistration:
    """The registration of a broker with one name server, kept by a loop of its own."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        #: set to have the loop register now
        self.wanted = trio.Event()
        #: the next round sends the whole table (the first, and when asked for)
        self.full = True
        #: the last request (``BrokerController._register_seq``) its current or last round took,
        #: and the one its last ended round took
        self.taken = 0
        self.done = 0
        #: the last round failed (the name server refused or did not answer); the next round
        #: sends the whole table
        self.failing = False
        #: it took a registration at least once
        self.accepted = False
        self.scope = trio.CancelScope()


class BrokerController:
    """One broker replica. Start with ``await nursery.start(broker.run, server)``."""

    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: MessageStoreConfig,
        *,
        client: object,
        now_ms: Callable[[], int] = wall_clock_ms,
        liveness_ms: Callable[[], float] | None = None,
        transport_configs: Sequence[msgspec.Struct] = (),
        store_ip: str | None = None,
        join_after: trio.Event | None = None,
    ) -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        #: the process's NettyServerConfig and NettyClientConfig (container.netty_config): shown
        #: and updated by GET/UPDATE_BROKER_CONFIG with the broker's own, as upstream's broker does
        self.transport_configs = tuple(transport_configs)
        #: controller mode: the replica group is joined (registered with the controller) once this
        #: is set -- a container sets it when all its brokers have started, so that a process
        #: restarted on large stores does not have a replica that loaded first elected in place of
        #: its recorded master still loading (a needless master change and epoch)
        self.join_after = join_after
        self.client = client  # remoting.client.RemotingClient shared by the process
        self.now_ms = now_ms
        #: the clock of the clients' heartbeats and the rebalance locks' renewals: a lock or a
        #: client expires when this much time passed, whatever the wall clock did meanwhile
        #: (upstream measures it on the wall clock: a step forward -- NTP, a laptop resumed --
        #: expired every client at once, a step back kept a dead client's queue locks for as long);
        #: by default the monotonic clock less the spells this process did not run (a Ctrl-Z of
        #: minutes expired every client and lock at once, see remoting.clock.AwakeClock; run()
        #: keeps it read)
        self.awake: AwakeClock | None = None
        if liveness_ms is None:
            self.awake = liveness_ms = AwakeClock(monotonic_ms)
        self.liveness_ms: Callable[[], float] = liveness_ms
        bc = broker_config
        if store_config.brokerRole == BrokerRole.SLAVE and bc.brokerId <= 0 and not bc.enableControllerMode:
            raise ValueError(f"broker {bc.brokerName}: slave broker id must be > 0 (got {bc.brokerId})")
        if store_config.brokerRole != BrokerRole.SLAVE and not bc.enableControllerMode:
            bc.brokerId = 0
        self.name = f"{bc.brokerClusterName}_{bc.brokerName}_{bc.brokerId}"
        self.log = logging.getLogger(f"broker.{self.name}")
        self.addr = f"{bc.brokerIP1}:{bc.listenPort}"
        #: brokerIP1's address (it may be a host name, as upstream's may: the name is registered,
        #: the address is the STOREHOST of every stored record and in every offset message id);
        #: resolved here unless given (a host process resolves it off its event loop)
        self.store_ip = store_ip or ip_of(bc.brokerIP1)
        self.ha_port = store_config.haListenPort if store_config.haListenPort > 0 else bc.listenPort + 1
        self.ha_addr = f"{bc.brokerIP2}:{self.ha_port}"
        config_dir = store_config.config_dir
        self.store = DefaultMessageStore(
            store_config,
            store_host=(self.store_ip, bc.listenPort),
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
        self.uniq_ids = UniqIdGenerator(self.store_ip, now_ms=now_ms)
        self.outer = BrokerOuterAPI(client, timeout_ms=bc.registerBrokerTimeoutMills, logger=self.log)
        self.hold = PullRequestHoldService(self._rerun_held_pull)
        self.processor_table = ProcessorTable(on_close=self._on_connection_closed)
        self.config_data_version = DataVersion(timestamp=now_ms())
        self.boot_timestamp = now_ms()
        self.master_addr: str | None = None
        self.listener: object | None = None
        self.server: object | None = None
        #: registration with each name server of ``namesrvAddr``: a loop of its own (see
        #: :class:`NamesrvRegistration`), so that one that does not answer delays no other
        self.registrations: dict[str, NamesrvRegistration] = {}
        #: wakes the loop that keeps one register loop per name server (a request, a stop)
        self._registrations_wanted = trio.Event()
        #: numbers the requests for a registration; each register loop remembers the last it took
        self._register_seq = 0
        #: topics asked for and not yet registered with every name server, each with the number of
        #: its request: a name server's next round takes those above the number its last round took
        #: (the whole table instead after a failure, on request, and at every period)
        self.unrouted: dict[str, int] = {}
        #: set (and replaced) whenever a register loop ends a round
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
        #: upstream's "boot success" line was logged (see :meth:`_maybe_say_booted`)
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
        self._register_seq += 1
        if topic is not None:
            self.unrouted[topic] = self._register_seq
        for reg in self.registrations.values():
            if topic is None:
                reg.full = True
            reg.wanted.set()
        self._registrations_wanted.set()

    def namesrvs_changed(self) -> None:
        """``namesrvAddr`` was updated: a name server added is registered with now (not at the
        next period), one removed is no longer registered with (it expires the broker)."""
        self._registrations_wanted.set()

    async def wait_routed(self, *topics: str) -> None:
        """Return once the name servers were told of ``topics`` -- every one that answers: one
        whose last registration failed is not waited for -- or were asked and refused, or
        ``ROUTE_WAIT_S`` passed. Upstream registers a topic created by a send before it answers
        the send: a client that starts a consumer as soon as its first send returned -- a test --
        finds the topic's route (without it the official clients look again only after their
        30 s route poll and consume nothing until then)."""
        target = max((self.unrouted.get(t, 0) for t in topics), default=0)

        def told() -> bool:
            return all(r.done >= target or r.failing for r in self.registrations.values())

        with trio.move_on_after(ROUTE_WAIT_S):
            while not told():
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
        """Register with every name server at once, outside the register loops (``only`` these
        topics: an incremental registration) -- a slave looking for its master asks this way;
        False when one of them did not accept it. Each answer is read as it comes."""
        namesrvs = split_addrs(self.broker_config.namesrvAddr)
        if not namesrvs or self.isolated or self.stopping:
            return True
        results = await self.outer.register_all(
            namesrvs, self._register_request(only), on_result=self._registered
        )
        return len(results) == len(namesrvs)

    async def _register_with(self, addr: str, only: set[str] | None) -> bool:
        """Register with the name server ``addr`` (``only`` these topics, else the whole table);
        whether it accepted (trivially true while the broker may not register)."""
        if self.isolated or self.stopping:
            return True
        result = await self.outer.register_one(addr, self._register_request(only))
        if result is not None:
            self._registered(result)
        return result is not None

    def _register_request(self, only: set[str] | None) -> RegisterRequest:
        bc = self.broker_config
        return self.outer.register_request(
            self.identity,
            self.topic_wrapper(only, to_encode=True),
            heartbeat_timeout_ms=bc.brokerNotActiveTimeoutMillis if bc.enableSlaveActingMaster else None,
            enable_acting_master=bc.enableSlaveActingMaster,
        )

    def _registered(self, result: RegisterResult) -> None:
        """A name server took a registration: a slave learns its master's addresses from the
        answer (and the boot line may be due)."""
        self.replication.on_register_results([result])
        reg = self.registrations.get(result.namesrv)
        if reg is not None:
            reg.accepted = True
        self._maybe_say_booted()

    def _maybe_say_booted(self) -> None:
        """Upstream BrokerStartup's line (scripts and test fixtures wait for it), said once the
        broker is routed -- in controller mode after the controller gave it a role: when every
        name server answered or failed a registration and one of them took it. (Upstream says it
        after its first registration round, whatever the answers; waiting for every name server to
        take one left a cluster started with one of its name servers down without the line.)"""
        if self._boot_said:
            return
        regs = [self.registrations.get(a) for a in split_addrs(self.broker_config.namesrvAddr)]
        if all(r is not None and (r.accepted or r.failing) for r in regs) and any(
            r is not None and r.accepted for r in regs
        ):
            self._boot_said = True
            bc = self.broker_config
            self.log.info(
                "The broker[%s, %s] boot success. serializeType=JSON and name server is %s",
                bc.brokerName,
                self.addr,
                bc.namesrvAddr,
            )

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
                store_host=(self.store_ip, port),
                now_ms=self.now_ms,
                controller_mode=bc.enableControllerMode,
            )
            self.uniq_ids = UniqIdGenerator(self.store_ip, now_ms=self.now_ms)

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
                if self.awake is not None:
                    nursery.start_soon(self.awake.run)
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
        reg = self.registrations.get(addr)
        if reg is not None and reg.failing:
            self._register_all_now(addr, "made again: registering now")

    def _connection_lost(self, addr: str) -> None:
        """A connection of the process's client ended: if it was to one of this broker's name
        servers, register again now (the name server may be restarting, without this broker's
        routes; retried after 1 s, 2 s, ... while it is down) -- not at the next period (30 s), as
        upstream, during which clients that ask it for routes find none."""
        self._register_all_now(addr, "lost: registering again")

    def _register_all_now(self, addr: str, what: str) -> None:
        """When ``addr`` is one of this broker's name servers (and the broker is not stopping):
        have its register loop send the whole table now, saying so in the log."""
        reg = self.registrations.get(addr)
        if reg is not None and not self.stopping:
            self.log.info("connection to name server %s %s", addr, what)
            reg.full = True
            reg.wanted.set()

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
        """Keep one register loop per name server of ``namesrvAddr`` (read again at every request
        and period: an updated ``namesrvAddr`` takes effect without a restart)."""
        period = self._register_period()
        async with trio.open_nursery() as nursery:
            while True:
                addrs = split_addrs(self.broker_config.namesrvAddr)
                for addr in addrs:
                    if addr not in self.registrations:
                        reg = self.registrations[addr] = NamesrvRegistration(addr)
                        nursery.start_soon(self._register_namesrv, reg)
                for addr in [a for a in self.registrations if a not in addrs]:
                    self.registrations.pop(addr).scope.cancel()
                self._round_ended()
                with trio.move_on_after(period):
                    await self._registrations_wanted.wait()
                self._registrations_wanted = trio.Event()

    def _register_period(self) -> float:
        return min(max(self.broker_config.registerNameServerPeriod, 10_000), 60_000) / 1000

    async def _register_namesrv(self, reg: NamesrvRegistration) -> None:
        """Register with one name server: at start, when asked (the topics asked for alone, or the
        whole table), and the whole table every period. One that refused or did not answer (not up
        yet, restarting, cut off, a timeout under load) is asked again after 1 s, 2 s, 4 s ... up to
        the period: a master that is not routed cannot take sends, so waiting a whole period
        (30 s) for the retry is too long. The other name servers' loops go on meanwhile: one
        loop for all (upstream's, and this project's before) waits for every name server's
        answer, so one that went silent (its host down) held back a failover's new master, and
        each new topic's route, at the others for up to the request's timeout."""
        period = self._register_period()
        retry = REGISTER_RETRY_MIN_S
        with reg.scope:
            while True:
                reg.wanted = trio.Event()
                if self.topics_file.due:
                    await self.topics_file.persist()
                # the topics asked for alone; the whole table at every period, after a failure,
                # and when asked for. (A wake-up whose topics the round before took -- asked for
                # while it wrote topics.json -- has nothing to send.)
                seq = self._register_seq
                topics = {t for t, r in self.unrouted.items() if r > reg.taken}
                reg.taken = seq
                full, reg.full = reg.full or reg.failing, False
                if full or topics:
                    ok = await self._register_with(reg.addr, None if full else topics)
                    reg.failing = not ok
                    retry = REGISTER_RETRY_MIN_S if ok else min(2 * retry, period)
                    if not ok:
                        self._maybe_say_booted()
                reg.done = seq
                self._round_ended()
                with trio.move_on_after(retry if reg.failing else period) as waited:
                    await reg.wanted.wait()
                if waited.cancelled_caught:
                    reg.full = True

    def _round_ended(self) -> None:
        """A register loop ended a round: forget the topics every name server that answers was
        sent (one whose last registration failed sends the whole table next)."""
        answering = [r.done for r in self.registrations.values() if not r.failing]
        done = min(answering) if answering else self._register_seq
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
        while True:
            await trio.sleep(10)
            await self.expire_clients()

    async def expire_clients(self) -> None:
        """Drop the producers and consumers silent for ``channelExpiredTimeout``; tell the
        changed groups' members."""
        timeout = self.broker_config.channelExpiredTimeout
        now = self.liveness_ms()
        self.producers.expire(now, timeout)
        for group in self.consumers.expire(now, timeout):
            await self.notify_consumer_ids_changed(group)
