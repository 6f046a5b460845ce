"""Controller events on the Raft log: upstream layout, round trips, and corrupt input."""

from __future__ import annotations

import json
import struct

import pytest

from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    EventDecodeError,
    EventType,
    UpdateBrokerAddressEvent,
    decode_event,
    decode_events,
    encode_event,
    encode_events,
)

ALL_EVENTS = [
    AlterSyncStateSetEvent(brokerName="broker-a", newSyncStateSet=frozenset({1, 2, 3})),
    ApplyBrokerIdEvent(
        clusterName="c",
        brokerName="broker-a",
        brokerAddress="127.0.0.1:10911",
        registerCheckCode="127.0.0.1:10911;1",
        newBrokerId=1,
    ),
    ElectMasterEvent(newMasterElected=True, brokerName="broker-a", newMasterBrokerId=2),
    ElectMasterEvent(newMasterElected=False, brokerName="broker-a"),
    CleanBrokerDataEvent(brokerName="broker-a", brokerIdSetToClean=frozenset({4})),
    CleanBrokerDataEvent(brokerName="broker-a"),
    UpdateBrokerAddressEvent(
        clusterName="c", brokerName="broker-a", brokerAddress="10.0.0.1:10911", brokerId=3
    ),
]


@pytest.mark.parametrize("event", ALL_EVENTS)
def test_single_event_round_trip(event) -> None:
    assert decode_event(encode_event(event)) == event


def test_type_ids_are_upstreams() -> None:
    assert [int(e.event_type) for e in ALL_EVENTS] == [1, 2, 3, 3, 5, 5, 6]
    assert EventType.READ == 4


def test_single_event_layout_is_short_type_then_upstream_json_fields() -> None:
    data = encode_event(ElectMasterEvent(newMasterElected=True, brokerName="b", newMasterBrokerId=2))
    assert data[:2] == b"\x00\x03"
    assert json.loads(data[2:]) == {"newMasterElected": True, "brokerName": "b", "newMasterBrokerId": 2}
    data = encode_event(ElectMasterEvent(newMasterElected=False, brokerName="b"))
    assert json.loads(data[2:]) == {"newMasterElected": False, "brokerName": "b"}, "null omitted"
    data = encode_event(AlterSyncStateSetEvent(brokerName="b", newSyncStateSet=frozenset({3, 1})))
    assert data[:2] == b"\x00\x01"
    assert data[2:] == b'{"brokerName":"b","newSyncStateSet":[1,3]}'
    data = encode_event(ALL_EVENTS[1])
    assert set(json.loads(data[2:])) == {
        "clusterName",
        "brokerName",
        "brokerAddress",
        "registerCheckCode",
        "newBrokerId",
    }
    data = encode_event(ALL_EVENTS[-1])
    assert set(json.loads(data[2:])) == {"clusterName", "brokerName", "brokerAddress", "brokerId"}


def test_batch_layout_is_repeated_type_length_json() -> None:
    events = ALL_EVENTS[:2]
    data = encode_events(events)
    type_id, length = struct.unpack_from(">hi", data, 0)
    assert type_id == 1
    assert json.loads(data[6 : 6 + length]) == {"brokerName": "broker-a", "newSyncStateSet": [1, 2, 3]}
    type_id2, length2 = struct.unpack_from(">hi", data, 6 + length)
    assert type_id2 == 2
    assert len(data) == 6 + length + 6 + length2


def test_batch_round_trip_and_empty_entry_is_no_op() -> None:
    assert decode_events(encode_events(ALL_EVENTS)) == ALL_EVENTS
    assert encode_events([]) == b""
    assert decode_events(b"") == []


@pytest.mark.parametrize(
    "bad",
    [
        b"\x00",  # truncated header
        struct.pack(">hi", 3, 50) + b"{}",  # length past the end
        struct.pack(">hi", 9, 2) + b"{}",  # unknown type
        struct.pack(">hi", 4, 2) + b"{}",  # READ is never on the log
        struct.pack(">hi", 3, 2) + b"{}",  # missing required fields
        struct.pack(">hi", 1, 3) + b"{x}",  # not JSON
    ],
)
def test_corrupt_entries_raise_event_decode_error(bad: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_events(bad)


def test_decode_single_event_rejects_short_input() -> None:
    with pytest.raises(EventDecodeError):
        decode_event(b"\x00")
