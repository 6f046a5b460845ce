"""Controller configuration (upstream ``ControllerConfig``; also read by a controller embedded next to
a name server).

Field names are upstream's config keys, defaults upstream's. Upstream's Java field
``isProcessReadEvent`` is set through ``setProcessReadEvent``, so its key is ``processReadEvent``.

The three ``controllerDLeger*`` keys (upstream's spelling) are required wherever a controller runs;
they configure rmq-container's own Raft, which plays the part of upstream's DLedger group: the
controller of peer ``controllerDLegerSelfId`` serves brokers on its address in
``controllerDLegerPeers``. ``controllerType=jRaft`` is not supported.

rmq-container extensions (no upstream equivalent; prefixed ``rmqRaft``) tune that Raft. Their defaults
are DLedger's own defaults (``heartBeatTimeIntervalMs`` = 2000, ``maxHeartBeatLeak`` = 3, so a leader
is presumed dead after 6 s without heartbeats).
"""

from __future__ import annotations

import os

import msgspec

DLEDGER_CONTROLLER = "DLedger"
JRAFT_CONTROLLER = "jRaft"


def _env_rocketmq_home() -> str | None:
    return os.environ.get("ROCKETMQ_HOME")


class ControllerPeersError(ValueError):
    """``controllerDLegerPeers`` is not ``id-host:port;id-host:port;...``."""


def parse_peers(peers: str) -> dict[str, str]:
    """Parse ``n0-127.0.0.1:9878;n1-127.0.0.1:9868`` into ``{"n0": "127.0.0.1:9878", ...}`` (ordered)."""
    out: dict[str, str] = {}
    for item in peers.split(";"):
        item = item.strip()
        if not item:
            continue
        peer_id, sep, addr = item.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not peer_id or not colon or not host or not port.isdigit():
            raise ControllerPeersError(f"bad peer {item!r}: expected id-host:port")
        if peer_id in out:
            raise ControllerPeersError(f"peer id {peer_id!r} appears twice")
        out[peer_id.strip()] = f"{host.strip()}:{int(port)}"
    if not out:
        raise ControllerPeersError("no peers")
    return out


class ControllerConfig(msgspec.Struct, kw_only=True):
    rocketmqHome: str | None = msgspec.field(default_factory=_env_rocketmq_home)
    configStorePath: str = msgspec.field(
        default_factory=lambda: os.path.join(os.path.expanduser("~"), "controller", "controller.properties")
    )
    controllerType: str = DLEDGER_CONTROLLER
    scanNotActiveBrokerInterval: int = 5 * 1000
    controllerThreadPoolNums: int = 16
    controllerRequestThreadPoolQueueCapacity: int = 50000
    controllerDLegerGroup: str | None = None
    controllerDLegerPeers: str | None = None
    controllerDLegerSelfId: str | None = None
    mappedFileSize: int = 1024 * 1024 * 1024
    #: Empty means ``~/{controllerType}Controller`` (see :attr:`store_path`).
    controllerStorePath: str = ""
    electMasterMaxRetryCount: int = 3
    enableElectUncleanMaster: bool = False
    processReadEvent: bool = False
    notifyBrokerRoleChanged: bool = True
    scanInactiveMasterInterval: int = 5 * 1000
    configBlackList: str = "configBlackList;configStorePath"

    # --- rmq-container extensions (our Raft; see the module docstring) ---
    #: Leader heartbeat (AppendEntries) period.
    rmqRaftHeartbeatIntervalMillis: int = 2000
    #: A follower that hears no leader for this long (randomized up to 2x) starts an election.
    rmqRaftElectionTimeoutMillis: int = 6000

    @property
    def store_path(self) -> str:
        """Where the Raft log and snapshots live (upstream ``getControllerStorePath``)."""
        if self.controllerStorePath:
            return self.controllerStorePath
        return os.path.join(os.path.expanduser("~"), f"{self.controllerType}Controller")

    @property
    def peers(self) -> dict[str, str]:
        """``controllerDLegerPeers`` parsed: peer id → ``host:port``, in file order."""
        return parse_peers(self.controllerDLegerPeers or "")

    @property
    def self_address(self) -> str:
        """This peer's ``host:port``: where brokers and the other peers reach this controller."""
        return self.peers[self.controllerDLegerSelfId or ""]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Upstream ``ControllerConfig``/``JraftConfig`` keys without effect here (accepted with a warning).
IGNORED_CONTROLLER_KEYS: frozenset[str] = _names(
    """
    metricsExporterType metricsGrpcExporterTarget metricsGrpcExporterHeader metricGrpcExporterTimeOutInMills
    metricGrpcExporterIntervalInMills metricLoggingExporterIntervalInMills metricsPromExporterPort
    metricsPromExporterHost metricsLabel metricsInDelta
    jRaftGroupId jRaftServerId jRaftInitConf jRaftControllerRPCAddr jRaftElectionTimeoutMs
    jRaftSnapshotIntervalSecs
    """
)
