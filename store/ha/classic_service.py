"""``ClassicHAService``: the trio edge of classic master/slave replication (upstream ``DefaultHAService``).

Moves bytes between the sans-IO ``ClassicHAConnection`` / ``ClassicHAClient`` (``store.ha.classic``)
and trio streams; the protocol decisions live there. The role is fixed at construction (classic
roles come from ``brokerRole`` and do not change at runtime; the auto-switch ``HAService`` is the one
with role changes).

* master: the owner accepts TCP connections on ``haListenPort`` and hands each to
  :meth:`handle_connection`; every connected slave is streamed to from the offset it reports;
  :meth:`notify_appended` wakes the streams after each append; :meth:`wait_for_replication` is the
  SYNC_MASTER send gate (``GroupTransferService``).
* slave: :meth:`run` keeps one session with the master at ``master_address`` (which may be learned
  later, :meth:`set_master_address`), reconnecting ``reconnect_interval`` seconds after a failure.

``connect(address)`` opens a stream to a master; the broker passes one that wraps the socket in a
``DrainingStream`` so that reports never run ahead of the store.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import trio

from remoting.repeats import RepeatedLog
from store.config import MessageStoreConfig
from store.ha.ack_waiters import AckWaiters
from store.ha.classic import ClassicHAClient, ClassicHAConnection
from store.ha.events import CloseConnection
from store.ha.gating import acked_by_count, classic_slave_available
from store.ha.replica_log import ReplicaLog
from store.ha.streams import Link, ReadAhead, peer_address, send_buffers
from store.results import PutMessageStatus

log = logging.getLogger("store.ha.classic_service")

RECEIVE_SIZE = 256 * 1024
#: Upstream's classic slave waits 5 s after a failed connection.
RECONNECT_INTERVAL = 5.0


async def tcp_connect(address: str) -> trio.abc.Stream:
    host, _, port = address.rpartition(":")
    return await trio.open_tcp_stream(host, int(port))


class ClassicHAService:
    """Classic replication of one broker's log, as ``role`` ("master" or "slave")."""

    def __init__(
        self,
        rlog: ReplicaLog,
        config: MessageStoreConfig,
        *,
        role: str,
        master_address: str | None = None,
        connect: Callable[[str], Awaitable[trio.abc.Stream]] = tcp_connect,
        reconnect_interval: float = RECONNECT_INTERVAL,
    ) -> None:
        if role not in ("master", "slave"):
            raise ValueError(f"classic HA role must be master or slave, not {role!r}")
        self.log = rlog
        self.config = config
        self.role = role
        #: the local store refusing replicated bytes (a full disk): said once per reason
        self._store_repeats = RepeatedLog(log)
        self.master_address = master_address
        self.reconnect_interval = reconnect_interval
        self._connect = connect
        self.connections: set[ClassicHAConnection] = set()
        #: master: every slave's connection with its address and send rate (``haStatus``)
        self.links: dict[ClassicHAConnection, Link] = {}
        #: slave: the current or last connection to the master
        self.client_link: Link | None = None
        self.client: ClassicHAClient | None = None
        #: sessions with a master that ended (slave side; tests and status)
        self.sessions = 0
        self._wakes: set[trio.Event] = set()
        self._waiters = AckWaiters(lambda end, need: acked_by_count(end, need, self.slave_acks))
        self._address_changed = trio.Event()
        self._session_scope: trio.CancelScope | None = None

    # ------------------------------------------------------------------ shared

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Slave: follow the master until cancelled. Master: nothing to do besides connections."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._waiters.run)
            task_status.started()
            if self.role == "slave":
                await self._slave_loop()
            else:
                await trio.sleep_forever()

    # ------------------------------------------------------------------ master side

    @property
    def slave_acks(self) -> list[int]:
        """The latest offset every connected slave reported (-1 before its first report)."""
        return [c.ack_offset for c in self.connections]

    def notify_appended(self) -> None:
        """New bytes in the log: wake every streaming connection."""
        for wake in list(self._wakes):
            wake.set()

    def _notify_acked(self) -> None:
        self._waiters.notify()

    def slave_available(self) -> bool:
        """Upstream ``isSlaveOK``: a slave is connected and within ``haMaxGapNotInSync`` of our end."""
        acks = self.slave_acks
        return classic_slave_available(
            len(acks), self.log.max_offset, max(acks, default=-1), self.config.haMaxGapNotInSync
        )

    async def wait_for_replication(
        self, end_offset: int, need_ack_nums: int, timeout: float
    ) -> PutMessageStatus:
        """Wait until ``need_ack_nums`` replicas (the master included) hold ``end_offset``:
        PUT_OK, SLAVE_NOT_AVAILABLE (no usable slave, the message is stored anyway) or
        FLUSH_SLAVE_TIMEOUT after ``timeout`` seconds."""
        if need_ack_nums <= 1:
            return PutMessageStatus.PUT_OK
        if not self.slave_available():
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if await self._waiters.wait(end_offset, need_ack_nums, timeout):
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        """Serve one slave on ``stream`` (master only; a slave closes it)."""
        if self.role != "master":
            await trio.aclose_forcefully(stream)
            return
        peer = peer_address(stream)
        conn = ClassicHAConnection(self.log, self.config, now=trio.current_time(), peer=peer)
        link = Link(peer)
        wake = trio.Event()
        wakes = self._wakes
        holder = [wake]
        wakes.add(wake)

        def rearm() -> trio.Event:
            wakes.discard(holder[0])
            holder[0] = trio.Event()
            wakes.add(holder[0])
            return holder[0]

        async def reader() -> None:
            while not conn.closed:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                events = conn.receive_data(data, trio.current_time())
                holder[0].set()
                if events:
                    self._notify_acked()
                if any(isinstance(e, CloseConnection) for e in events):
                    return

        ahead = ReadAhead(self.log)

        async def writer() -> None:
            while not conn.closed:
                event = rearm()
                now = trio.current_time()
                if conn.tick(now):
                    return
                while not conn.closed:
                    await ahead.before_send(conn.sending_from(), conn.batch_size)
                    bufs = conn.poll_send(now)
                    if not bufs:
                        break
                    await send_buffers(stream, bufs)
                    link.meter.add(sum(map(len, bufs)), trio.current_time())
                if conn.closed:
                    return
                with trio.move_on_at(conn.next_deadline()):
                    await event.wait()

        self.connections.add(conn)
        self.links[conn] = link
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_run_then_cancel, reader, nursery.cancel_scope)
                nursery.start_soon(_run_then_cancel, writer, nursery.cancel_scope)
        finally:
            self.connections.discard(conn)
            self.links.pop(conn, None)
            wakes.discard(holder[0])
            conn.connection_lost()
            self._notify_acked()
            log.info(
                "classic HA connection of a slave ended (acked %d): %s", conn.ack_offset, conn.close_reason
            )
            await trio.aclose_forcefully(stream)

    # ------------------------------------------------------------------ slave side

    def set_master_address(self, address: str | None) -> None:
        """Follow the master at ``address`` (a different address ends the current session)."""
        if address == self.master_address:
            return
        log.info("classic HA master address %s -> %s", self.master_address, address)
        self.master_address = address
        self._address_changed.set()
        self._address_changed = trio.Event()
        if self._session_scope is not None:
            self._session_scope.cancel()

    async def _slave_loop(self) -> None:
        client = self.client = ClassicHAClient(self.log, self.config, now=trio.current_time())
        while True:
            address = self.master_address
            if address is None:
                await self._address_changed.wait()
                continue
            try:
                stream = await self._connect(address)
            except OSError as exc:
                log.warning("cannot connect to master HA address %s: %s", address, exc)
                with trio.move_on_after(self.reconnect_interval):
                    await self._address_changed.wait()
                continue
            await self._session(stream, client, address)
            self.sessions += 1
            with trio.move_on_after(self.reconnect_interval):
                await self._address_changed.wait()

    async def _session(self, stream: trio.abc.Stream, client: ClassicHAClient, address: str) -> None:
        scope = self._session_scope = trio.CancelScope()
        link = self.client_link = Link(address)
        try:
            with scope:
                client.connection_made(trio.current_time())
                log.info("classic HA: following master %s from offset %d", address, self.log.max_offset)
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
                        log.info("master %s closed the classic HA connection", address)
                        return
                    else:
                        link.last_read = now
                        link.meter.add(len(data), now)
                        events = client.receive_data(data, now)
                    if any(isinstance(e, CloseConnection) for e in events):
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.info("classic HA connection to master %s ended: %r", address, exc)
        except OSError as exc:  # the store's: socket errors arrive as BrokenResourceError
            self._store_repeats.log(
                "store",
                logging.ERROR,
                f"classic replication from {address} paused: the local store refused the master's bytes "
                f"({exc}); reconnecting",
            )
        finally:
            self._session_scope = None
            client.connection_lost()
            await trio.aclose_forcefully(stream)


async def _run_then_cancel(fn: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
    """Run one half of a connection; when it ends (EOF, broken socket, close) end the other half."""
    try:
        await fn()
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("classic HA connection ended: %r", exc)
    finally:
        scope.cancel()
