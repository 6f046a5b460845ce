"""Events the HA state machines return to their driver (the trio layer or a simulation)."""

from __future__ import annotations

import msgspec


class Truncated(msgspec.Struct, frozen=True):
    """The local log was truncated to ``offset`` (slave handshake or role change)."""

    offset: int
    previous_max_offset: int


class PersistRequired(msgspec.Struct, frozen=True):
    """The driver must make the truncation and the epoch file durable, then call ``persisted()``
    (and handle the events it returns). After a handshake the slave does not acknowledge (so the
    master sends no data) until then; a batch that starts a new epoch is held until then."""


class EpochStarted(msgspec.Struct, frozen=True):
    """A new epoch was recorded in the local epoch file."""

    epoch: int
    start_offset: int


class Appended(msgspec.Struct, frozen=True):
    """Replicated bytes ``[offset, end_offset)`` were appended."""

    offset: int
    end_offset: int


class ConfirmOffsetChanged(msgspec.Struct, frozen=True):
    confirm_offset: int


class HandshakeDone(msgspec.Struct, frozen=True):
    """Master side: the slave identified itself."""

    slave_id: int
    is_async_learner: bool
    is_sync_from_last_file: bool


class AckReceived(msgspec.Struct, frozen=True):
    """Master side: the slave reported its max offset."""

    slave_id: int
    ack_offset: int


class CloseConnection(msgspec.Struct, frozen=True):
    """Close the connection; a slave reconnects after ``retry_after`` seconds."""

    reason: str
    retry_after: float = 5.0


Event = (
    Truncated
    | PersistRequired
    | EpochStarted
    | Appended
    | ConfirmOffsetChanged
    | HandshakeDone
    | AckReceived
    | CloseConnection
)
