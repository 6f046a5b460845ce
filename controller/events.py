"""Controller state-machine events and their Raft-log encoding.

Upstream: ``org.apache.rocketmq.controller.impl.event`` (``EventType``, ``*Event``,
``EventSerializer``, ``ListEventSerializer``). An event is the only thing that changes the
replica state machine; the leader computes events from a request (see
:class:`controller.replicas.ReplicasInfoManager`), commits them through Raft, and every peer
applies them in log order.

Encoding (ha-controller-container §2.3):

* one event: ``short eventTypeId`` (big-endian) followed by the event's JSON
  (:func:`encode_event` / :func:`decode_event`, upstream ``EventSerializer``);
* one Raft entry carries the events of one request as a batch: repeated
  ``short typeId, int len, JSON[len]`` (:func:`encode_events` / :func:`decode_events`, upstream
  ``ListEventSerializer``);
* an empty entry is a no-op (leader barrier / read barrier).

JSON field names are upstream's; null fields are omitted, sets are arrays (sorted, so that the
same event always encodes to the same bytes).
"""

from __future__ import annotations

import enum
import struct
from typing import ClassVar

import msgspec


class EventType(enum.IntEnum):
    """Event type ids as written in the log (upstream ``EventType``)."""

    ALTER_SYNC_STATE_SET = 1
    APPLY_BROKER_ID = 2
    ELECT_MASTER = 3
    READ = 4  # never written to the log
    CLEAN_BROKER_DATA = 5
    UPDATE_BROKER_ADDRESS = 6


class AlterSyncStateSetEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Replace a broker-set's SyncStateSet; apply bumps ``syncStateSetEpoch``."""

    event_type: ClassVar[EventType] = EventType.ALTER_SYNC_STATE_SET
    brokerName: str
    newSyncStateSet: frozenset[int]


class ApplyBrokerIdEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Assign ``newBrokerId`` to the broker identified by ``registerCheckCode``."""

    event_type: ClassVar[EventType] = EventType.APPLY_BROKER_ID
    clusterName: str
    brokerName: str
    brokerAddress: str
    registerCheckCode: str
    newBrokerId: int


class ElectMasterEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A new master (``newMasterElected``) or, when false, "the master is gone and nobody was elected".

    Apply bumps ``masterEpoch`` either way; with a master it also sets the SyncStateSet to
    ``{newMasterBrokerId}`` and bumps ``syncStateSetEpoch``.

    ``newMasterEpoch`` is an rmq-container addition (absent in upstream's JSON, and absent here
    unless needed): the master epoch this election starts when it must be higher than the
    previous one + 1, because a replica's epoch file already holds a higher epoch than the
    controller remembers (the controller lost its data). Apply sets ``masterEpoch`` to
    ``max(previous + 1, newMasterEpoch)``.
    """

    event_type: ClassVar[EventType] = EventType.ELECT_MASTER
    newMasterElected: bool
    brokerName: str
    newMasterBrokerId: int | None = None
    newMasterEpoch: int | None = None


class CleanBrokerDataEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Remove the listed broker ids (or, with no ids, the whole broker-set) from both tables."""

    event_type: ClassVar[EventType] = EventType.CLEAN_BROKER_DATA
    brokerName: str
    brokerIdSetToClean: frozenset[int] | None = None


class UpdateBrokerAddressEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A registered broker came back with a new address; its id and check code are kept."""

    event_type: ClassVar[EventType] = EventType.UPDATE_BROKER_ADDRESS
    clusterName: str
    brokerName: str
    brokerAddress: str
    brokerId: int


Event = (
    AlterSyncStateSetEvent
    | ApplyBrokerIdEvent
    | ElectMasterEvent
    | CleanBrokerDataEvent
    | UpdateBrokerAddressEvent
)

_TYPES: dict[int, type[Event]] = {
    EventType.ALTER_SYNC_STATE_SET: AlterSyncStateSetEvent,
    EventType.APPLY_BROKER_ID: ApplyBrokerIdEvent,
    EventType.ELECT_MASTER: ElectMasterEvent,
    EventType.CLEAN_BROKER_DATA: CleanBrokerDataEvent,
    EventType.UPDATE_BROKER_ADDRESS: UpdateBrokerAddressEvent,
}
_DECODERS = {tid: msgspec.json.Decoder(cls) for tid, cls in _TYPES.items()}
_ENCODER = msgspec.json.Encoder(order="deterministic")
_SHORT = struct.Struct(">h")
_BATCH_HEAD = struct.Struct(">hi")


class EventDecodeError(ValueError):
    """A log entry that does not hold events in the expected layout (corrupt or foreign log)."""


def event_json(event: Event) -> bytes:
    """The JSON body of one event."""
    return _ENCODER.encode(event)


def encode_event(event: Event) -> bytes:
    """One event as upstream's ``EventSerializer`` lays it out: type id, then JSON."""
    return _SHORT.pack(event.event_type) + _ENCODER.encode(event)


def decode_event(data: bytes) -> Event:
    """Inverse of :func:`encode_event`."""
    if len(data) < 2:
        raise EventDecodeError("event shorter than its type id")
    (tid,) = _SHORT.unpack_from(data, 0)
    return _decode_body(tid, memoryview(data)[2:])


def encode_events(events: list[Event]) -> bytes:
    """A batch of events for one Raft entry (upstream ``ListEventSerializer``); [] → b"" (no-op)."""
    parts: list[bytes] = []
    for event in events:
        body = _ENCODER.encode(event)
        parts.append(_BATCH_HEAD.pack(event.event_type, len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_events(data: bytes | memoryview) -> list[Event]:
    """Inverse of :func:`encode_events`; an empty entry decodes to no events."""
    view = memoryview(data)
    events: list[Event] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < _BATCH_HEAD.size:
            raise EventDecodeError(f"truncated event header at byte {pos}")
        tid, length = _BATCH_HEAD.unpack_from(view, pos)
        pos += _BATCH_HEAD.size
        if length < 0 or pos + length > len(view):
            raise EventDecodeError(f"event length {length} at byte {pos} runs past the entry")
        events.append(_decode_body(tid, view[pos : pos + length]))
        pos += length
    return events


def _decode_body(tid: int, body: memoryview) -> Event:
    decoder = _DECODERS.get(tid)
    if decoder is None:
        raise EventDecodeError(f"unknown event type id {tid}")
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"bad {EventType(tid).name} event: {exc}") from exc
