"""Wire a master ``HAConnection`` and a slave ``HAClient`` back to back, no sockets (h11-style tests).

Used by unit tests, simulations and broker tests that need replication without the network.
"""

from __future__ import annotations

from collections.abc import Callable

from store.ha.client import HAClient
from store.ha.connection import HAConnection
from store.ha.events import CloseConnection, Event, PersistRequired


class Loopback:
    """Moves bytes between ``conn`` (master side) and ``client`` (slave side) until both are idle.

    ``on_persist`` is called for ``PersistRequired`` before ``client.persisted`` (default: persist the
    slave's epoch file). ``tap`` sees every master→slave chunk (e.g. to inspect headers).
    """

    def __init__(
        self,
        conn: HAConnection,
        client: HAClient,
        *,
        on_persist: Callable[[], None] | None = None,
        tap: Callable[[bytes], None] | None = None,
    ) -> None:
        self.conn = conn
        self.client = client
        self.on_persist = on_persist or client.log.epoch_file.persist
        self.tap = tap
        self.closed: CloseConnection | None = None
        self.events: list[Event] = []

    def _handle(self, events: list[Event], now: float) -> None:
        for event in events:
            self.events.append(event)
            if isinstance(event, PersistRequired):
                self.on_persist()
                self._handle(self.client.persisted(now), now)
            elif isinstance(event, CloseConnection) and self.closed is None:
                self.closed = event
        if self.closed is not None:
            self.conn.connection_lost()
            self.client.connection_lost()

    def pump(self, now: float, max_rounds: int = 1_000_000) -> list[Event]:
        """Exchange bytes until nothing moves (or the connection closed). Returns the new events."""
        start = len(self.events)
        for _ in range(max_rounds):
            if self.closed is not None:
                break
            moved = False
            up = self.client.data_to_send()
            if up:
                moved = True
                self._handle(self.conn.receive_data(up, now), now)
                if self.closed is not None:
                    break
            bufs = self.conn.poll_send(now)
            if self.conn.closed and self.closed is None:
                self._handle([CloseConnection(self.conn.close_reason or "master closed")], now)
                break
            if bufs:
                moved = True
                chunk = b"".join(bytes(b) for b in bufs)
                if self.tap is not None:
                    self.tap(chunk)
                self._handle(self.client.receive_data(chunk, now), now)
            if not moved:
                break
        return self.events[start:]

    def tick(self, now: float) -> list[Event]:
        """Run both sides' timers, then pump."""
        start = len(self.events)
        self._handle(self.conn.tick(now), now)
        if self.closed is None:
            self._handle(self.client.tick(now), now)
        self.pump(now)
        return self.events[start:]


def connect(conn: HAConnection, client: HAClient, now: float, **kwargs: object) -> Loopback:
    """Start a session: ``client.prepare_connect()``, ``client.connection_made(now)``, then pump."""
    client.prepare_connect()
    client.connection_made(now)
    lb = Loopback(conn, client, **kwargs)  # type: ignore[arg-type]
    lb.pump(now)
    return lb
