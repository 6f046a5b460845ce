"""Headers and bodies of the controller API (codes 904 controller fields, 1001–1013).

Upstream: ``org.apache.rocketmq.remoting.protocol.header.controller.*``,
``...header.namesrv.BrokerHeartbeatRequestHeader``, ``...header.NotifyBrokerRoleChangedRequestHeader``
and the bodies ``SyncStateSet``, ``ElectMasterResponseBody``, ``BrokerMemberGroup``,
``BrokerReplicasInfo`` (remoting-protocol §2.12, ha-controller-container §2.4).

Header field names are the Java field names (they are the extFields keys). Java boxed types
(``Long``, ``Integer``, ``Boolean``, ``String``) are optional here (``None`` = not sent);
primitives get Java's default. Bodies are JSON with the getter names, nulls omitted, written
and read the fastjson way (``Body.encode`` / ``Body.decode``: unquoted integer map keys).

``BrokerHeartbeatRequestHeader`` (904) and ``BrokerMemberGroup`` are shared with the name server;
they live in :mod:`remoting.protocol.namesrv` and are re-exported here.
"""

from __future__ import annotations

import msgspec

from remoting import fastjson
from remoting.headers import CommandHeader
from remoting.protocol.common import Body
from remoting.protocol.namesrv import BrokerHeartbeatRequestHeader, BrokerMemberGroup

__all__ = [
    "AlterSyncStateSetRequestHeader",
    "AlterSyncStateSetResponseHeader",
    "ApplyBrokerIdRequestHeader",
    "ApplyBrokerIdResponseHeader",
    "BrokerHeartbeatRequestHeader",
    "BrokerMemberGroup",
    "BrokerReplicasInfo",
    "CleanControllerBrokerDataRequestHeader",
    "ElectMasterRequestHeader",
    "ElectMasterResponseBody",
    "ElectMasterResponseHeader",
    "GetMetaDataResponseHeader",
    "GetNextBrokerIdRequestHeader",
    "GetNextBrokerIdResponseHeader",
    "GetReplicaInfoRequestHeader",
    "GetReplicaInfoResponseHeader",
    "NotifyBrokerRoleChangedRequestHeader",
    "RegisterBrokerToControllerRequestHeader",
    "RegisterBrokerToControllerResponseHeader",
    "ReplicaIdentity",
    "ReplicasInfo",
    "SyncStateSet",
    "decode_broker_names",
]

# ---------------------------------------------------------------------------------------------
# Headers: registration (persistent broker id)
# ---------------------------------------------------------------------------------------------


class GetNextBrokerIdRequestHeader(CommandHeader, kw_only=True):
    """1012 CONTROLLER_GET_NEXT_BROKER_ID request."""

    clusterName: str | None = None
    brokerName: str | None = None


class GetNextBrokerIdResponseHeader(CommandHeader, kw_only=True):
    clusterName: str | None = None
    brokerName: str | None = None
    nextBrokerId: int | None = None


class ApplyBrokerIdRequestHeader(CommandHeader, kw_only=True):
    """1013 CONTROLLER_APPLY_BROKER_ID request; ``registerCheckCode`` = ``{brokerAddr};{millis}``."""

    clusterName: str | None = None
    brokerName: str | None = None
    appliedBrokerId: int | None = None
    registerCheckCode: str | None = None


class ApplyBrokerIdResponseHeader(CommandHeader, kw_only=True):
    clusterName: str | None = None
    brokerName: str | None = None


class RegisterBrokerToControllerRequestHeader(CommandHeader, kw_only=True):
    """1003 CONTROLLER_REGISTER_BROKER request."""

    clusterName: str | None = None
    brokerName: str | None = None
    brokerId: int | None = None
    brokerAddress: str | None = None
    invokeTime: int = 0


class RegisterBrokerToControllerResponseHeader(CommandHeader, kw_only=True):
    """Master fields are filled only when a master exists and is alive."""

    clusterName: str | None = None
    brokerName: str | None = None
    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None


# ---------------------------------------------------------------------------------------------
# Headers: replica info, election, SyncStateSet
# ---------------------------------------------------------------------------------------------


class GetReplicaInfoRequestHeader(CommandHeader, kw_only=True):
    """1004 CONTROLLER_GET_REPLICA_INFO request."""

    brokerName: str | None = None


class GetReplicaInfoResponseHeader(CommandHeader, kw_only=True):
    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None


class ElectMasterRequestHeader(CommandHeader, kw_only=True):
    """1002 CONTROLLER_ELECT_MASTER request.

    Variants (upstream factory methods): broker-triggered = own id, ``designateElect`` false;
    controller-triggered = ``brokerId`` −1, ``clusterName`` ""; admin-triggered = target id,
    ``designateElect`` true.
    """

    clusterName: str = ""
    brokerName: str = ""
    brokerId: int = -1
    designateElect: bool = False
    invokeTime: int | None = None

    @classmethod
    def of_broker_trigger(cls, clusterName: str, brokerName: str, brokerId: int) -> ElectMasterRequestHeader:
        return cls(clusterName=clusterName, brokerName=brokerName, brokerId=brokerId)

    @classmethod
    def of_controller_trigger(cls, brokerName: str) -> ElectMasterRequestHeader:
        return cls(brokerName=brokerName)

    @classmethod
    def of_admin_trigger(cls, clusterName: str, brokerName: str, brokerId: int) -> ElectMasterRequestHeader:
        return cls(clusterName=clusterName, brokerName=brokerName, brokerId=brokerId, designateElect=True)


class ElectMasterResponseHeader(CommandHeader, kw_only=True):
    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None


class AlterSyncStateSetRequestHeader(CommandHeader, kw_only=True):
    """1001 CONTROLLER_ALTER_SYNC_STATE_SET request; the body is the proposed :class:`SyncStateSet`
    carrying the *current* ``syncStateSetEpoch``."""

    brokerName: str | None = None
    masterBrokerId: int | None = None
    masterEpoch: int | None = None
    invokeTime: int = 0


class AlterSyncStateSetResponseHeader(CommandHeader, kw_only=True):
    newSyncStateSetEpoch: int = 0


# ---------------------------------------------------------------------------------------------
# Headers: metadata, admin, heartbeat, notification
# ---------------------------------------------------------------------------------------------


class GetMetaDataResponseHeader(CommandHeader, kw_only=True):
    """1005 CONTROLLER_GET_METADATA_INFO response; ``peers`` = ``"n0:addr;n1:addr;"``."""

    group: str | None = None
    controllerLeaderId: str | None = None
    controllerLeaderAddress: str | None = None
    isLeader: bool = False
    peers: str | None = None


class CleanControllerBrokerDataRequestHeader(CommandHeader, kw_only=True):
    """1011 CLEAN_BROKER_DATA request; ``brokerControllerIdsToClean`` = ``"1;2"`` (blank = whole set)."""

    clusterName: str | None = None
    brokerName: str
    brokerControllerIdsToClean: str | None = None
    isCleanLivingBroker: bool = False
    invokeTime: int = 0


class NotifyBrokerRoleChangedRequestHeader(CommandHeader, kw_only=True):
    """1008 NOTIFY_BROKER_ROLE_CHANGED (controller → broker, oneway); body :class:`SyncStateSet`."""

    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None
    masterBrokerId: int | None = None


# ---------------------------------------------------------------------------------------------
# Bodies (fastjson encoding / lenient decoding through :class:`remoting.protocol.common.Body`)
# ---------------------------------------------------------------------------------------------


class SyncStateSet(Body, kw_only=True):
    """``{"syncStateSet":[ids],"syncStateSetEpoch":n}``."""

    syncStateSet: frozenset[int] = frozenset()
    syncStateSetEpoch: int = 0


class ElectMasterResponseBody(Body, kw_only=True):
    """``{"brokerMemberGroup":{...},"syncStateSet":[ids]}``; no member group when the master stays."""

    brokerMemberGroup: BrokerMemberGroup | None = None
    syncStateSet: frozenset[int] = frozenset()


class ReplicaIdentity(Body, kw_only=True):
    """One replica in :class:`BrokerReplicasInfo` (upstream ``BrokerReplicasInfo.ReplicaIdentity``)."""

    brokerName: str | None = None
    brokerId: int | None = None
    brokerAddress: str | None = None
    alive: bool | None = None


class ReplicasInfo(Body, kw_only=True):
    """One broker-set in :class:`BrokerReplicasInfo` (upstream ``BrokerReplicasInfo.ReplicasInfo``)."""

    masterBrokerId: int | None = None
    masterAddress: str | None = None
    masterEpoch: int | None = None
    syncStateSetEpoch: int | None = None
    inSyncReplicas: list[ReplicaIdentity] = msgspec.field(default_factory=list)
    notInSyncReplicas: list[ReplicaIdentity] = msgspec.field(default_factory=list)


class BrokerReplicasInfo(Body, kw_only=True):
    """1006 CONTROLLER_GET_SYNC_STATE_DATA response body: ``{"replicasInfoTable":{brokerName:{...}}}``."""

    replicasInfoTable: dict[str, ReplicasInfo] = msgspec.field(default_factory=dict)


def decode_broker_names(data: bytes | memoryview | None) -> list[str]:
    """The GET_SYNC_STATE_DATA request body: a JSON array of broker names.

    Raises :class:`remoting.fastjson.FastjsonError` / ``msgspec.ValidationError`` when it is not.
    """
    return fastjson.decode(bytes(data or b""), list[str])


#: How an rmq-container controller's CONTROLLER_ELECT_MASTER_FAILED remark begins when it defers a
#: broker's election to give the recorded master, or the replicas of a set that had none left, time
#: to report (``ControllerManager.election_wait_ms``): the broker retries, and logs it as the
#: expected wait it is.
ELECT_WAIT_REMARK = "election deferred"
#: upstream's remark for an alter-SyncStateSet proposal equal to the current set
#: (CONTROLLER_ALTER_SYNC_STATE_SET_FAILED): a master whose earlier proposal's answer was lost reads
#: it as "the controller's set is this proposal already"
EQUAL_SYNC_STATE_SET_REMARK = (
    "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet"
)

#: Upstream ``MixAll.FIRST_BROKER_CONTROLLER_ID``: the first id a controller hands out in a broker-set
#: (the only one that may found a set the controller does not know).
FIRST_BROKER_CONTROLLER_ID = 1

#: Java Long.MAX_VALUE: the end offset of the open (last) epoch.
JAVA_LONG_MAX = 2**63 - 1


class EpochEntry(Body, kw_only=True):
    """One epoch of a broker's epoch file as GET_BROKER_EPOCH_CACHE reports it (upstream ``EpochEntry``)."""

    epoch: int = 0
    startOffset: int = 0
    endOffset: int = JAVA_LONG_MAX

    def __str__(self) -> str:
        return f"EpochEntry{{epoch={self.epoch}, startOffset={self.startOffset}, endOffset={self.endOffset}}}"


class EpochEntryCache(Body, kw_only=True):
    """GET_BROKER_EPOCH_CACHE (1007) response body (upstream ``EpochEntryCache``)."""

    clusterName: str | None = None
    brokerName: str | None = None
    brokerId: int = 0
    epochList: list[EpochEntry] = msgspec.field(default_factory=list)
    maxOffset: int = 0
