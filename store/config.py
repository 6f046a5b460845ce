"""Message store configuration (upstream ``MessageStoreConfig``, ``BrokerRole``, ``FlushDiskType``).

Field names are upstream's config keys; defaults are upstream's. Dev-profile deviations (small
mapped files, short timings) live in config files under ``conf/``, never here. Paths left as
``None`` are derived from ``storePathRootDir`` the way upstream's ``StorePathConfigHelper`` does.
"""

from __future__ import annotations

import enum
import os

import msgspec


class BrokerRole(enum.StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class FlushDiskType(enum.StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class MessageStoreConfig(msgspec.Struct, kw_only=True):
    # --- paths ---
    storePathRootDir: str = os.path.join(os.path.expanduser("~"), "store")
    storePathCommitLog: str | None = None
    storePathEpochFile: str | None = None
    storePathBrokerIdentity: str | None = None

    # --- file sizes ---
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    messageIndexEnable: bool = True
    messageIndexSafe: bool = False

    # --- messages ---
    maxMessageSize: int = 1024 * 1024 * 4
    autoMessageVersionOnTopicLen: bool = True
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    defaultQueryMaxNum: int = 32
    maxMsgsNumBatch: int = 64

    # --- flush ---
    flushDiskType: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 1000 * 10
    flushCommitLogTimed: bool = True
    flushIntervalConsumeQueue: int = 1000
    flushConsumeQueueLeastPages: int = 2
    flushConsumeQueueThoroughInterval: int = 1000 * 60
    syncFlushTimeout: int = 1000 * 5
    checkCRCOnRecover: bool = True
    osPageCacheBusyTimeOutMills: int = 1000
    warmMapedFileEnable: bool = False
    #: rmq-container extension: flushed commit-log bytes further than this behind the log's end
    #: are dropped from the page cache (0: never, the kernel alone decides, as upstream). Recycles
    #: the writer's memory (a VM that hands free memory back to its host charges ~10 us a page at
    #: the first touch of memory it has not used lately, ~1 us for memory just freed) and bounds
    #: each broker's share of the cache in a container of many; readers of older bytes (pulls,
    #: replication, lookups by offset) bring them back in a worker thread first.
    rmqCommitLogPageCacheBytes: int = 1024 * 1024 * 1024

    # --- reading ---
    accessMessageInMemoryMaxRatio: int = 40
    maxTransferBytesOnMessageInMemory: int = 1024 * 256
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInDisk: int = 1024 * 64
    maxTransferCountOnMessageInDisk: int = 8
    readUnCommitted: bool = False
    maxFilterMessageSize: int = 16000
    travelCqFileNumWhenGetMessage: int = 1
    offsetCheckInSlave: bool = False

    # --- retention and disk space ---
    fileReservedTime: int = 72
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    diskSpaceWarningLevelRatio: float = 0.90
    diskSpaceCleanForciblyRatio: float = 0.85
    cleanFileForciblyEnable: bool = True
    cleanResourceInterval: int = 10000
    deleteCommitLogFilesInterval: int = 100
    deleteConsumeQueueFilesInterval: int = 100
    destroyMapedFileIntervalForcibly: int = 1000 * 120
    replicasPerDiskPartition: int = 1
    logicalDiskSpaceCleanForciblyThreshold: float = 0.8

    # --- HA ---
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    haListenPort: int = 10912
    haSendHeartbeatInterval: int = 1000 * 5
    haHousekeepingInterval: int = 1000 * 20
    haTransferBatchSize: int = 1024 * 32
    haMasterAddress: str | None = None
    haMaxGapNotInSync: int = 1024 * 1024 * 256
    haFlowControlEnable: bool = False
    maxHaTransferByteInSecond: int = 100 * 1024 * 1024
    slaveTimeout: int = 3000
    totalReplicas: int = 1
    inSyncReplicas: int = 1
    minInSyncReplicas: int = 1
    enableAutoInSyncReplicas: bool = False
    allAckInSyncStateSet: bool = False
    haMaxTimeSlaveNotCatchup: int = 1000 * 15
    syncFromLastFile: bool = False
    asyncLearner: bool = False
    syncMasterFlushOffsetWhenStartup: bool = False

    # --- features this store does not implement but whose keys users carry over ---
    enableDLegerCommitLog: bool = False
    duplicationEnable: bool = False
    timerWheelEnable: bool = True
    transientStorePoolEnable: bool = False
    disappearTimeAfterStart: int = -1

    # --- derived paths ---
    @property
    def commitlog_dir(self) -> str:
        return self.storePathCommitLog or os.path.join(self.storePathRootDir, "commitlog")

    @property
    def consumequeue_dir(self) -> str:
        return os.path.join(self.storePathRootDir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.storePathRootDir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.storePathRootDir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.storePathRootDir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.storePathRootDir, "lock")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.storePathRootDir, "config")

    @property
    def epoch_file_path(self) -> str:
        return self.storePathEpochFile or os.path.join(self.storePathRootDir, "epochFileCheckpoint")

    @property
    def broker_identity_path(self) -> str:
        return self.storePathBrokerIdentity or os.path.join(self.storePathRootDir, "brokerIdentity")

    @property
    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` parsed to milliseconds per level (level N is index N - 1).
        Raises ValueError naming the first token that is not a number with a unit of s, m, h or d,
        or when there is no level (upstream's broker does not start then either)."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        levels = []
        for tok in self.messageDelayLevel.split():
            unit = units.get(tok[-1])
            if unit is None or not tok[:-1].isdigit():
                raise ValueError(
                    f"messageDelayLevel {self.messageDelayLevel!r}: {tok!r} is not a delay such as 5s, 2m, 1h or 1d"
                )
            levels.append(int(tok[:-1]) * unit)
        if not levels:
            raise ValueError("messageDelayLevel is empty: it needs at least one delay level, such as 1s")
        return levels
