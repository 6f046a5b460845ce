"""``HAService``: the trio edge of auto-switch replication (upstream ``AutoSwitchHAService``).

Moves bytes between the sans-IO objects (``HAConnection``, ``HAClient``, ``HAMasterState``) and trio
streams; all protocol decisions live in those objects.

* ``run()`` (start it in a nursery) listens on ``listen_port`` (``haListenPort``) when given, and hosts
  the tasks of the current role.
* ``change_to_master(epoch)``: truncate to the last message boundary, start ``epoch`` at the max offset,
  persist the epoch file (before any write is accepted), close every connection, accept slaves.
* ``change_to_slave(master_ha_address, epoch)``: truncate to the last boundary, then keep a session to
  the master (reconnecting after failures); the address may be set later (``set_master_address``),
  upstream learns it from the name server.
* ``notify_appended()``: the store calls it after each append (wakes the streaming connections that
  would send now, refreshes the confirm offset when it follows the max offset).
* ``check_before_put()`` / ``wait_for_replication(end_offset, timeout)``: send gating of a
  SYNC_MASTER (PutMessageStatus results).
* ``ack_listeners``: callables run (synchronously) whenever what is acknowledged may have changed —
  an ack, a SyncStateSet change, a closed connection, a role change. A broker that keeps its own
  waiters (``store.ha.ack_waiters.AckWaiters``) hooks their ``notify`` in here.
* SyncStateSet changes go through ``alter_sync_state_set(proposal) -> (new_set, epoch) | None |
  NOT_ANSWERED`` (the controller round trip, supplied by the broker; None = refused), every
  ``check_period`` seconds and right after an ack or close that calls for one.

``connect(address)`` opens a stream to a master (default: TCP); tests pass in-memory streams and call
``handle_connection`` themselves.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Final, Literal

import trio

from remoting.repeats import RepeatedLog
from store.config import MessageStoreConfig
from store.ha.client import RECONNECT_RETRY, HAClient
from store.ha.connection import MAX_SEND_BYTES, HAConnection
from store.ha.events import CloseConnection, PersistRequired
from store.ha.master import HAMasterState
from store.ha.replica_log import ReplicaLog
from store.ha.role import become_master, become_slave
from store.ha.streams import Link, ReadAhead, peer_address, send_buffers
from store.results import PutMessageStatus

log = logging.getLogger("store.ha.service")

RECEIVE_SIZE = 256 * 1024
#: seconds before a slave reconnects after its store refused replicated bytes (a full disk)
STORE_REFUSED_RETRY_S = 1.0
#: what an :data:`AlterSyncStateSet` returns when no controller decided on the proposal (none
#: reachable, a stale view of the group, the role changed meanwhile): proposed again later, and
#: nothing is held back as after a refusal (``None``)
NOT_ANSWERED: Final = "not answered"
AlterSyncStateSet = Callable[[set[int]], Awaitable[tuple[set[int], int] | Literal["not answered"] | None]]


class _Signal:
    """A level-triggered wake-up: take ``event`` *before* checking a condition, then wait on it.
    The event is created only when somebody takes it, so notifying nobody costs nothing."""

    __slots__ = ("_event", "until")

    def __init__(self) -> None:
        self._event: trio.Event | None = None
        #: a connection writer's next timed wake-up (it needs no notify for what happens by then)
        self.until = math.inf

    @property
    def event(self) -> trio.Event:
        if self._event is None:
            self._event = trio.Event()
        return self._event

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None


async def tcp_connect(address: str) -> trio.abc.Stream:
    host, _, port = address.rpartition(":")
    return await trio.open_tcp_stream(host, int(port))


class HAService:
    """Replication for one broker's log. Roles change only through ``change_to_*``."""

    def __init__(
        self,
        rlog: ReplicaLog,
        config: MessageStoreConfig,
        *,
        broker_id: int,
        listen_port: int | None = None,
        listen_host: str = "127.0.0.1",
        connect: Callable[[str], Awaitable[trio.abc.Stream]] = tcp_connect,
        persist: Callable[[], Awaitable[None]] | None = None,
        alter_sync_state_set: AlterSyncStateSet | None = None,
        check_period: float = 5.0,
    ) -> None:
        self.log = rlog
        self.config = config
        self.broker_id = broker_id
        #: the local store refusing replicated bytes (a full disk): said once per reason
        self._store_repeats = RepeatedLog(log)
        #: connections refused while not master: said once per peer host every 30 s
        self._not_master_repeats = RepeatedLog(log)
        self.listen_port = listen_port
        self.listen_host = listen_host
        self._connect = connect
        self._persist_fn = persist
        self._alter = alter_sync_state_set
        self.check_period = check_period
        self.role: str | None = None
        self.epoch = -1
        self.group: HAMasterState | None = None
        self.client: HAClient | None = None
        self.master_address: str | None = None
        #: Bound port after ``run`` started listening.
        self.bound_port: int | None = None
        self._nursery: trio.Nursery | None = None
        self._role_scope: trio.CancelScope | None = None
        self._connection_scopes: set[trio.CancelScope] = set()
        self._writers: dict[HAConnection, _Signal] = {}
        #: master: every slave's connection with its address and send rate (``haStatus``)
        self.links: dict[HAConnection, Link] = {}
        #: slave: the current or last connection to the master
        self.client_link: Link | None = None
        #: run whenever what is acknowledged may have changed (see the module docstring)
        self.ack_listeners: list[Callable[[], None]] = []
        self._acked = _Signal()
        self._sss = _Signal()
        self._address = _Signal()

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.listen_port is not None:
                listeners = await nursery.start(
                    functools.partial(
                        trio.serve_tcp, self.handle_connection, self.listen_port, host=self.listen_host
                    )
                )
                self.bound_port = listeners[0].socket.getsockname()[1]
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def _persist(self) -> None:
        if self._persist_fn is not None:
            await self._persist_fn()
        else:
            await trio.to_thread.run_sync(self.log.epoch_file.persist)

    async def _check_running(self) -> None:
        """Before a role change is carried out: a service whose :meth:`run` has ended cannot
        start a role. Ended by a stop that cancels the caller too (a role change under way when
        the broker stops: an fsync in a worker thread finishes after the cancel), the change ends
        as cancelled, so the stop stays clean; otherwise it is refused with RuntimeError."""
        if self._nursery is None:
            await trio.lowlevel.checkpoint_if_cancelled()
            raise RuntimeError("HAService.run() is not running")

    def _start_role(self, role: str, epoch: int, task: Callable[[], Awaitable[None]]) -> None:
        if self._nursery is None:
            raise RuntimeError("HAService.run() is not running")
        if self._role_scope is not None:
            self._role_scope.cancel()
        for scope in list(self._connection_scopes):
            scope.cancel()
        self.role, self.epoch = role, epoch
        scope = self._role_scope = trio.CancelScope()

        async def runner() -> None:
            with scope:
                await task()

        self._nursery.start_soon(runner)

    async def change_to_master(self, epoch: int, sync_state_set: set[int] | None = None) -> None:
        """Become master of ``epoch`` (raises ``RoleChangeError`` for a stale epoch)."""
        await self._check_running()
        become_master(self.log, epoch)
        await self._persist()
        await self._check_running()
        self.client = None
        self.group = HAMasterState(
            self.log,
            self.config,
            self_id=self.broker_id,
            sync_state_set=sync_state_set or {self.broker_id},
            sync_state_set_epoch=0,
        )
        self._start_role("master", epoch, self._sync_state_set_loop)
        self._acks_changed()
        log.info("broker %d is master of epoch %d", self.broker_id, epoch)

    async def change_to_slave(self, master_ha_address: str | None, epoch: int) -> None:
        """Follow the master of ``epoch`` at ``master_ha_address`` (may be None until known)."""
        await self._check_running()
        become_slave(self.log, epoch)
        self.group = None
        self.master_address = master_ha_address
        self.client = HAClient(self.log, self.config, broker_id=self.broker_id, now=trio.current_time())
        self._start_role("slave", epoch, self._slave_loop)
        self._acks_changed()
        log.info(
            "broker %d follows %s in epoch %d",
            self.broker_id,
            master_ha_address or "the master (HA address not known yet)",
            epoch,
        )

    def stop_role(self) -> None:
        """Leave the current role: close every connection, stop following/serving (role None)."""
        if self._role_scope is not None:
            self._role_scope.cancel()
            self._role_scope = None
        for scope in list(self._connection_scopes):
            scope.cancel()
        self.role = None
        self.group = None
        self.client = None
        self._acks_changed()

    def set_master_address(self, address: str | None) -> None:
        if address != self.master_address:
            self.master_address = address
            self._address.notify()
            for scope in list(self._connection_scopes):
                if self.role == "slave":
                    scope.cancel()

    # ------------------------------------------------------------------ store hooks and gating

    def _acks_changed(self) -> None:
        self._acked.notify()
        for listener in self.ack_listeners:
            listener()

    def notify_appended(self) -> None:
        """New bytes in the log: wake the connections that would send them now (one holding data
        for an ack wakes at its own deadline), and refresh the confirm offset when it follows the
        max offset (otherwise only acks and SyncStateSet changes move it)."""
        group = self.group
        if group is not None and group.confirm_follows_appends:
            group.refresh_confirm_offset()
        for conn, wake in self._writers.items():
            if not (conn.holding() and conn.hold_deadline() >= wake.until):
                wake.notify()

    def confirm_offset(self) -> int:
        return self.group.confirm_offset() if self.group is not None else self.log.confirm_offset

    def check_before_put(self) -> PutMessageStatus | None:
        if self.group is None:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        return self.group.check_before_put()

    async def wait_for_replication(self, end_offset: int, timeout: float) -> PutMessageStatus:
        """Wait until a message ending at ``end_offset`` has the acks the config asks for."""
        with trio.move_on_after(timeout):
            while True:
                event = self._acked.event
                group = self.group
                if group is None:
                    return PutMessageStatus.SLAVE_NOT_AVAILABLE
                need = group.need_ack_nums()
                if 0 <= need <= 1 or group.is_acked(end_offset, need):
                    return PutMessageStatus.PUT_OK
                await event.wait()
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    # ------------------------------------------------------------------ master side

    async def _sync_state_set_loop(self) -> None:
        group = self.group
        assert group is not None
        if self._alter is None:
            await trio.sleep_forever()
        next_check = trio.current_time() + self.check_period
        while True:
            event = self._sss.event
            if not group.wants_proposal:
                with trio.move_on_at(next_check):
                    await event.wait()
            now = trio.current_time()
            if now >= next_check:
                next_check = now + self.check_period
            elif not group.wants_proposal:
                continue
            proposal = group.propose_sync_state_set(now)
            if proposal is None:
                continue
            result = await self._alter(proposal)
            if result is None:
                group.on_sync_state_set_rejected(trio.current_time())
            elif result == NOT_ANSWERED:
                group.on_sync_state_set_rejected()
            else:
                group.on_sync_state_set_accepted(result[0], result[1])
            self._acks_changed()

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        """Serve one slave on ``stream`` while this broker is master (else close it)."""
        group = self.group
        peer = peer_address(stream)
        if self.role != "master" or group is None:
            # a replica that takes this one for its master (a stale route or controller answer):
            # it logs only that the connection closed, so say why here, once per peer and 30 s
            self._not_master_repeats.log(
                peer.rpartition(":")[0],
                logging.INFO,
                f"closing the HA connection from {peer}: this replica is not the master "
                f"(role {self.role or 'none yet'})",
                whatever_text=True,
            )
            await trio.aclose_forcefully(stream)
            return
        conn = HAConnection(self.log, self.config, now=trio.current_time(), group=group, peer=peer)
        wake = _Signal()
        scope = trio.CancelScope()
        self._connection_scopes.add(scope)
        self._writers[conn] = wake
        link = self.links[conn] = Link(peer)

        async def reader() -> None:
            while not conn.closed:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                confirm = group.confirm_offset()
                conn.receive_data(data, trio.current_time())
                wake.notify()
                if group.confirm_offset() != confirm:
                    # the other slaves' connections push the new confirm offset too (CONFIRM_PUSH_DELAY)
                    for other, other_wake in self._writers.items():
                        if other is not conn:
                            other_wake.notify()
                self._acks_changed()
                if group.wants_proposal:
                    self._sss.notify()

        ahead = ReadAhead(self.log)

        async def writer() -> None:
            while not conn.closed:
                wake.until = -math.inf  # awake: every notify counts until the next sleep
                event = wake.event
                now = trio.current_time()
                conn.tick(now)
                while not conn.closed:
                    await ahead.before_send(conn.sending_from(), MAX_SEND_BYTES)
                    bufs = conn.poll_send(now)
                    if not bufs:
                        break
                    await send_buffers(stream, bufs)
                    link.meter.add(sum(map(len, bufs)), trio.current_time())
                if conn.closed:
                    return
                wake.until = conn.next_deadline()
                with trio.move_on_at(wake.until):
                    await event.wait()

        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_run_then_cancel, reader, nursery.cancel_scope)
                    nursery.start_soon(_run_then_cancel, writer, nursery.cancel_scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.info("HA connection of slave %d ended: %r", conn.slave_id, exc)
        finally:
            self._connection_scopes.discard(scope)
            self._writers.pop(conn, None)
            self.links.pop(conn, None)
            conn.connection_lost()
            self._acks_changed()
            self._sss.notify()
            await trio.aclose_forcefully(stream)

    # ------------------------------------------------------------------ slave side

    async def _slave_loop(self) -> None:
        client = self.client
        assert client is not None
        while True:
            address = self.master_address
            if address is None:
                await self._address.event.wait()
                continue
            client.prepare_connect()
            try:
                stream = await self._connect(address)
            except OSError as exc:
                log.warning("cannot connect to master %s: %s", address, exc)
                await trio.sleep(RECONNECT_RETRY)
                continue
            retry = await self._client_session(stream, client)
            client.connection_lost()
            await trio.sleep(retry)

    async def _client_session(self, stream: trio.abc.Stream, client: HAClient) -> float:
        """One connection to the master; returns how long to wait before reconnecting."""
        scope = trio.CancelScope()
        self._connection_scopes.add(scope)
        retry = RECONNECT_RETRY
        link = self.client_link = Link(self.master_address or "?")
        try:
            with scope:
                client.connection_made(trio.current_time())
                while True:
                    out = client.data_to_send()
                    if out:
                        await stream.send_all(out)
                        link.last_write = trio.current_time()
                    data: bytes | bytearray | None = None
                    deadline = client.next_deadline()
                    with trio.move_on_at(deadline if math.isfinite(deadline) else math.inf):
                        data = await stream.receive_some(RECEIVE_SIZE)
                    now = trio.current_time()
                    if data is None:
                        events = client.tick(now)
                    elif not data:
                        log.info("master %s closed the HA connection", self.master_address)
                        return retry
                    else:
                        link.last_read = now
                        link.meter.add(len(data), now)
                        events = client.receive_data(data, now)
                    while events:
                        event = events.pop(0)
                        if isinstance(event, PersistRequired):
                            await self._persist()
                            events.extend(client.persisted(trio.current_time()))
                        elif isinstance(event, CloseConnection):
                            return event.retry_after
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.info("HA connection to master %s ended: %r", self.master_address, exc)
        except OSError as exc:  # the store's: socket errors arrive as BrokenResourceError
            self._store_repeats.log(
                "store",
                logging.ERROR,
                f"replication from {self.master_address} paused: the local store refused the master's "
                f"bytes ({exc}); reconnecting in {STORE_REFUSED_RETRY_S:g} s",
            )
            return STORE_REFUSED_RETRY_S
        finally:
            self._connection_scopes.discard(scope)
            await trio.aclose_forcefully(stream)
        return retry if not scope.cancelled_caught else 0.0


async def _run_then_cancel(fn: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
    """Run one half of a connection; when it ends (EOF, broken socket, close) end the other half."""
    try:
        await fn()
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("HA connection ended: %r", exc)
    finally:
        scope.cancel()
