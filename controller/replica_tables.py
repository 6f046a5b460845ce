"""The two tables of the controller state machine and their snapshot encoding.

Upstream: ``BrokerReplicaInfo``, ``SyncStateInfo`` and ``ReplicasInfoManager.serialize`` /
``deserializeFrom`` (ha-controller-container §2.2, §2.3). :mod:`controller.replicas` owns the
tables and the rules; this module holds their shape.

Snapshot layout (§2.3's framing): ``int n, n×(int nameLen, name UTF-8, int len, blob)`` for the
replica table, then the same for the SyncStateSet table; big-endian ints. The blob is the
entry's JSON (upstream writes Hessian2 there, which nothing outside a JVM reads).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import msgspec

from remoting.protocol.controller import FIRST_BROKER_CONTROLLER_ID


class BrokerIdEntry(msgspec.Struct, kw_only=True):
    """What the controller remembers of one broker id (upstream ``Pair<address, checkCode>``)."""

    brokerAddress: str
    registerCheckCode: str | None = None


class BrokerReplicaInfo(msgspec.Struct, kw_only=True):
    """Registered replicas of one broker-set (upstream ``BrokerReplicaInfo``)."""

    clusterName: str
    brokerName: str
    nextAssignBrokerId: int = FIRST_BROKER_CONTROLLER_ID
    brokerIdInfo: dict[int, BrokerIdEntry] = msgspec.field(default_factory=dict)

    def add_broker(self, broker_id: int, address: str, register_check_code: str | None) -> None:
        self.brokerIdInfo[broker_id] = BrokerIdEntry(
            brokerAddress=address, registerCheckCode=register_check_code
        )
        self.nextAssignBrokerId += 1  # upstream: one up per added id, whatever the id

    def next_free_id(self) -> int:
        """The id GET_NEXT_BROKER_ID hands out: ``nextAssignBrokerId``, or one above every
        registered id when that one is taken. Deviation: upstream hands out
        ``nextAssignBrokerId`` as it is, which after ids were applied out of order or a set was
        cleaned and founded again can be an id in use -- every replica asking for it is then
        refused, forever (seen on a dev cluster whose broker stores were deleted twice)."""
        if self.nextAssignBrokerId in self.brokerIdInfo:
            return max(self.brokerIdInfo) + 1
        return self.nextAssignBrokerId

    def is_broker_exist(self, broker_id: int | None) -> bool:
        return broker_id in self.brokerIdInfo

    def broker_address(self, broker_id: int | None) -> str | None:
        entry = self.brokerIdInfo.get(broker_id) if broker_id is not None else None
        return entry.brokerAddress if entry is not None else None

    def register_check_code(self, broker_id: int | None) -> str | None:
        entry = self.brokerIdInfo.get(broker_id) if broker_id is not None else None
        return entry.registerCheckCode if entry is not None else None

    def broker_id_table(self) -> dict[int, str]:
        """brokerId → address, ordered by id."""
        return {bid: self.brokerIdInfo[bid].brokerAddress for bid in sorted(self.brokerIdInfo)}

    def all_brokers(self) -> set[int]:
        return set(self.brokerIdInfo)


class SyncStateInfo(msgspec.Struct, kw_only=True):
    """Master and SyncStateSet of one broker-set (upstream ``SyncStateInfo``)."""

    clusterName: str
    brokerName: str
    masterEpoch: int = 0
    syncStateSetEpoch: int = 0
    syncStateSet: set[int] = msgspec.field(default_factory=set)
    masterBrokerId: int | None = None
    #: rmq-container addition: the last master this set had, kept when an election finds nobody
    #: (``masterBrokerId`` None); the election policy prefers it, alive and in the SyncStateSet,
    #: as upstream prefers a live recorded master
    lastMasterBrokerId: int | None = None

    def update_master_info(self, master_broker_id: int | None) -> None:
        self.masterBrokerId = master_broker_id
        if master_broker_id is not None:
            self.lastMasterBrokerId = master_broker_id
        self.masterEpoch += 1

    def update_sync_state_set_info(self, new_set: Iterable[int]) -> None:
        self.syncStateSet = set(new_set)
        self.syncStateSetEpoch += 1

    def is_first_time_for_elect(self) -> bool:
        return self.masterEpoch == 0

    def is_master_exist(self) -> bool:
        return self.masterBrokerId is not None


def _normalized(entry: msgspec.Struct) -> msgspec.Struct:
    """A copy with ids sorted, so equal states snapshot to equal bytes."""
    if isinstance(entry, BrokerReplicaInfo):
        return msgspec.structs.replace(
            entry, brokerIdInfo={k: entry.brokerIdInfo[k] for k in sorted(entry.brokerIdInfo)}
        )
    if isinstance(entry, SyncStateInfo):
        return msgspec.structs.replace(entry, syncStateSet=sorted(entry.syncStateSet))  # type: ignore[arg-type]
    return entry


_INT = struct.Struct(">i")


def encode_snapshot(
    replica_info: dict[str, BrokerReplicaInfo], sync_state: dict[str, SyncStateInfo]
) -> bytes:
    """Both tables as snapshot bytes (names sorted, ids sorted: equal states give equal bytes)."""
    parts: list[bytes] = []
    tables: tuple[dict[str, BrokerReplicaInfo] | dict[str, SyncStateInfo], ...] = (replica_info, sync_state)
    for table in tables:
        parts.append(_INT.pack(len(table)))
        for name in sorted(table):
            raw_name = name.encode()
            blob = msgspec.json.encode(_normalized(table[name]))
            parts += [_INT.pack(len(raw_name)), raw_name, _INT.pack(len(blob)), blob]
    return b"".join(parts)


def decode_snapshot(data: bytes) -> tuple[dict[str, BrokerReplicaInfo], dict[str, SyncStateInfo]]:
    """Inverse of :func:`encode_snapshot`; raises ValueError (or a msgspec error) on bad input."""
    view = memoryview(data)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(view):
            raise ValueError(f"truncated controller snapshot at byte {pos}")
        chunk = view[pos : pos + n]
        pos += n
        return chunk

    def table(cls: type) -> dict:
        out = {}
        (count,) = _INT.unpack(take(4))
        for _ in range(count):
            (name_len,) = _INT.unpack(take(4))
            name = bytes(take(name_len)).decode()
            (blob_len,) = _INT.unpack(take(4))
            out[name] = msgspec.json.decode(take(blob_len), type=cls)
        return out

    replica_info = table(BrokerReplicaInfo)
    sync_state = table(SyncStateInfo)
    if pos != len(view):
        raise ValueError(f"{len(view) - pos} trailing bytes after the controller snapshot")
    return replica_info, sync_state
