"""Broker configuration (upstream ``BrokerConfig`` together with ``BrokerIdentity``).

Field names are upstream's config keys and defaults are upstream's, with one exception:
``listenPort`` defaults to 10911, the port a standalone upstream broker really listens on (upstream's
``BrokerConfig.listenPort`` field says 6888, but that value is only read for brokers inside a
container and every shipped container file sets it). A broker file's keys are split between this
struct and :class:`store.config.MessageStoreConfig`; the container loader routes them.

Keys upstream has but rmq-container gives no meaning (thread pools, queue capacities, metrics
exporters, ...) are listed in :data:`IGNORED_BROKER_KEYS`: files carrying them load, with a warning.
"""

from __future__ import annotations

import fcntl
import functools
import ipaddress
import os
import socket
import struct

import msgspec

#: ``PermName``: PRIORITY=8, READ=4, WRITE=2, INHERIT=1.
PERM_READ = 4
PERM_WRITE = 2

MASTER_ID = 0

_SIOCGIFADDR = 0x8915


def _interface_ipv4_addresses() -> list[str]:
    """IPv4 addresses of the local interfaces, in interface order (no packets are sent)."""
    found: list[str] = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # interface without an IPv4 address
            found.append(socket.inet_ntoa(packed[20:24]))
    return found


@functools.cache
def local_address() -> str:
    """The address upstream's ``NetworkUtil.getLocalAddress`` would pick.

    Non-loopback IPv4 first, preferring a public one over a private one (the last private one
    otherwise); ``127.0.0.1`` when the machine has nothing else.
    """
    candidates = [a for a in _interface_ipv4_addresses() if not ipaddress.ip_address(a).is_loopback]
    for a in candidates:
        if not ipaddress.ip_address(a).is_private:
            return a
    if candidates:
        return candidates[-1]
    return "127.0.0.1"


@functools.cache
def default_broker_name() -> str:
    """Upstream ``BrokerIdentity.defaultBrokerName``: the local host name."""
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


def _env_namesrv_addr() -> str | None:
    # Upstream reads the system property rocketmq.namesrv.addr, then the NAMESRV_ADDR variable.
    return os.environ.get("NAMESRV_ADDR")


def _env_rocketmq_home() -> str | None:
    return os.environ.get("ROCKETMQ_HOME")


#: periods (ms) of the loops of a broker and its store (broker and store keys): each must be
#: positive -- 0 ran its loop without a pause (a core at 100 %), a negative one stopped it with an
#: error; upstream's scheduled executors refuse both when the broker starts
PERIOD_KEYS = (
    "flushIntervalCommitLog",
    "flushIntervalConsumeQueue",
    "flushConsumerOffsetInterval",
    "cleanResourceInterval",
    "haSendHeartbeatInterval",
    "haHousekeepingInterval",
    "brokerHeartbeatInterval",
    "syncBrokerMetadataPeriod",
    "checkSyncStateSetPeriod",
    "syncControllerMetadataPeriod",
)


class BrokerConfig(msgspec.Struct, kw_only=True):
    # --- identity (BrokerIdentity) ---
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = msgspec.field(default_factory=default_broker_name)
    brokerId: int = MASTER_ID

    # --- network ---
    rocketmqHome: str | None = msgspec.field(default_factory=_env_rocketmq_home)
    namesrvAddr: str | None = msgspec.field(default_factory=_env_namesrv_addr)
    listenPort: int = 10911
    brokerIP1: str = msgspec.field(default_factory=local_address)
    brokerIP2: str = msgspec.field(default_factory=local_address)
    fetchNameSrvAddrByDnsLookup: bool = False
    fetchNamesrvAddrByAddressServer: bool = False
    fetchNamesrvAddrInterval: int = 10 * 1000
    updateNameServerAddrPeriod: int = 1000 * 120
    aclEnable: bool = False

    # --- topics and subscription groups ---
    brokerPermission: int = PERM_READ | PERM_WRITE
    defaultTopicQueueNums: int = 8
    autoCreateTopicEnable: bool = True
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    validateSystemTopicWhenUpdateTopic: bool = True
    traceTopicEnable: bool = False
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    regionId: str = "DefaultRegion"
    traceOn: bool = True
    clearRetryTopicWhenDeleteTopic: bool = True
    enableMixedMessageType: bool = False

    # --- name server registration and liveness ---
    registerNameServerPeriod: int = 1000 * 30
    registerBrokerTimeoutMills: int = 24000
    forceRegister: bool = True
    compressedRegister: bool = False
    enableSingleTopicRegister: bool = False
    enableSplitRegistration: bool = False
    splitRegistrationSize: int = 800
    brokerHeartbeatInterval: int = 1000
    brokerNotActiveTimeoutMillis: int = 10 * 1000
    sendHeartbeatTimeoutMillis: int = 1000
    compatibleWithOldNameSrv: bool = True
    syncBrokerMemberGroupPeriod: int = 1000

    # --- slave acting master, escape, pre-online, quorum lock ---
    enableSlaveActingMaster: bool = False
    enableRemoteEscape: bool = False
    skipPreOnline: bool = False
    lockInStrictMode: bool = False
    consumerOffsetUpdateVersionStep: int = 500
    delayOffsetUpdateVersionStep: int = 200
    forwardTimeout: int = 3 * 1000

    # --- controller mode ---
    enableControllerMode: bool = False
    controllerAddr: str = ""
    fetchControllerAddrByDnsLookup: bool = False
    syncBrokerMetadataPeriod: int = 5 * 1000
    checkSyncStateSetPeriod: int = 5 * 1000
    syncControllerMetadataPeriod: int = 10 * 1000
    controllerHeartBeatTimeoutMills: int = 10 * 1000
    brokerElectionPriority: int = 2**31 - 1

    # --- pulling, offsets, clients ---
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    slaveReadEnable: bool = False
    litePullMessageEnable: bool = True
    flushConsumerOffsetInterval: int = 1000 * 5
    flushConsumerOffsetHistoryInterval: int = 1000 * 60
    notifyConsumerIdsChangedEnable: bool = True
    realTimeNotifyConsumerChange: bool = True
    channelExpiredTimeout: int = 1000 * 120
    subscriptionExpiredTimeout: int = 1000 * 60 * 10
    disableConsumeIfConsumerReadSlowly: bool = False
    consumerFallbehindThreshold: int = 1024 * 1024 * 1024 * 16
    rejectPullConsumerEnable: bool = False
    useServerSideResetOffset: bool = True
    enableBroadcastOffsetStore: bool = True
    broadcastOffsetExpireSecond: int = 2 * 60
    broadcastOffsetExpireMaxSecond: int = 5 * 60
    estimateAccumulation: bool = True
    storeReplyMessageEnable: bool = True

    # --- filtering ---
    enablePropertyFilter: bool = False
    filterSupportRetry: bool = False
    enableCalcFilterBitMap: bool = False
    expectConsumerNumUseFilter: int = 32
    maxErrorRateOfBloomFilter: int = 20
    filterDataCleanTimeSpan: int = 24 * 3600 * 1000

    # --- transactions ---
    rejectTransactionMessage: bool = False
    transactionTimeOut: int = 6 * 1000
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 30 * 1000
    transactionOpMsgMaxSize: int = 4096
    transactionOpBatchInterval: int = 3000

    # --- pop consumption and revive ---
    reviveQueueNum: int = 8
    reviveInterval: int = 1000
    reviveMaxSlow: int = 3
    reviveScanTime: int = 10000
    reviveAckWaitMs: int = 3 * 60 * 1000
    enableSkipLongAwaitingAck: bool = False
    popPollingSize: int = 1024
    popPollingMapSize: int = 100000
    maxPopPollingSize: int = 100000
    enablePopBufferMerge: bool = False
    popCkStayBufferTime: int = 10 * 1000
    popCkStayBufferTimeOut: int = 3 * 1000
    popCkMaxBufferSize: int = 200000
    popCkOffsetMaxQueueSize: int = 20000
    enablePopBatchAck: bool = False
    enablePopLog: bool = False
    enableRetryTopicV2: bool = False
    retrieveMessageFromPopRetryTopicV1: bool = True
    popFromRetryProbability: int = 20
    defaultPopShareQueueNum: int = -1

    # --- misc ---
    startAcceptSendRequestTimeStamp: int = 0
    brokerFastFailureEnable: bool = True
    waitTimeMillsInSendQueue: int = 200
    waitTimeMillsInPullQueue: int = 5 * 1000
    isolateLogEnable: bool = False
    configBlackList: str = "configBlackList;brokerConfigPath"

    @property
    def broker_display_name(self) -> str:
        """``cluster_brokerName_brokerId``: the name logs and the banner use for this broker."""
        return f"{self.brokerClusterName}_{self.brokerName}_{self.brokerId}"

    @property
    def broker_addr(self) -> str:
        """``brokerIP1:listenPort``, the address registered with the name server."""
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def namesrv_addr_list(self) -> list[str]:
        """``namesrvAddr`` split on ``;`` (empty entries dropped)."""
        if not self.namesrvAddr:
            return []
        return [a.strip() for a in self.namesrvAddr.split(";") if a.strip()]

    @property
    def controller_addr_list(self) -> list[str]:
        """``controllerAddr`` split on ``;`` (empty entries dropped)."""
        return [a.strip() for a in self.controllerAddr.split(";") if a.strip()]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Upstream ``BrokerConfig`` keys that have no effect in rmq-container: accepted with a warning.
#: Includes 4.x keys removed since (``commercial*``, ``filterServerNums``) and
#: ``controllerDeployedStandAlone`` from upstream's controller deploy guide, so old files still load.
IGNORED_BROKER_KEYS: frozenset[str] = _names(
    """
    brokerConfigPath recoverConcurrently messageStorePlugIn
    sendMessageThreadPoolNums putMessageFutureThreadPoolNums pullMessageThreadPoolNums
    litePullMessageThreadPoolNums ackMessageThreadPoolNums processReplyMessageThreadPoolNums
    queryMessageThreadPoolNums adminBrokerThreadPoolNums clientManageThreadPoolNums
    consumerManageThreadPoolNums loadBalanceProcessorThreadPoolNums heartbeatThreadPoolNums
    recoverThreadPoolNums endTransactionThreadPoolNums
    sendThreadPoolQueueCapacity putThreadPoolQueueCapacity pullThreadPoolQueueCapacity
    litePullThreadPoolQueueCapacity ackThreadPoolQueueCapacity replyThreadPoolQueueCapacity
    queryThreadPoolQueueCapacity clientManagerThreadPoolQueueCapacity
    consumerManagerThreadPoolQueueCapacity heartbeatThreadPoolQueueCapacity
    endTransactionPoolQueueCapacity adminBrokerThreadPoolQueueCapacity loadBalanceThreadPoolQueueCapacity
    waitTimeMillsInLitePullQueue waitTimeMillsInHeartbeatQueue waitTimeMillsInTransactionQueue
    waitTimeMillsInAckQueue waitTimeMillsInAdminBrokerQueue
    highSpeedMode commercialBaseCount commercialSizePerMsg accountStatsEnable accountStatsPrintZeroValues
    maxStatsIdleTimeInMinutes transferMsgByHeap enableNetWorkFlowControl
    popPollingMapExpireTimeSeconds popLongPollingForceNotifyInterval enableNotifyBeforePopCalculateLag
    enableNotifyAfterPopOrderLockRelease initPopOffsetByCheckMsgInMem popConsumerFSServiceInit
    popConsumerKVServiceLog popConsumerKVServiceInit popConsumerKVServiceEnable
    popReviveMaxReturnSizePerRead popReviveMaxAttemptTimes popResponseReturnActualRetryTopic
    popInflightMessageThreshold enablePopMessageThreshold skipWhenCKRePutReachMaxTimes
    appendAckAsync appendCkAsync
    loadBalancePollNameServerInterval cleanOfflineBrokerInterval serverLoadBalancerEnable
    defaultMessageRequestMode transactionMetricFlushInterval enableDetailStat autoDeleteUnusedStats
    asyncSendEnable useStaticSubscription
    metricsExporterType metricsOtelCardinalityLimit metricsGrpcExporterTarget metricsGrpcExporterHeader
    metricGrpcExporterTimeOutInMills metricGrpcExporterIntervalInMills metricLoggingExporterIntervalInMills
    metricsPromExporterPort metricsPromExporterHost metricsLabel metricsInDelta enableRemotingMetrics
    enableMessageStoreMetrics enablePopMetrics enableConnectionMetrics enableTransactionMetrics
    enableStatsMetrics enableRequestMetrics enableLagAndDlqMetrics
    coldCtrStrategyEnable usePIDColdCtrStrategy cgColdReadThreshold globalColdReadThreshold
    enableSplitMetadata splitMetadataSize enableFastChannelEventProcess printChannelGroups
    printChannelGroupsMinNum enableLmqStats configManagerVersion
    allowRecallWhenBrokerNotWriteable recallMessageEnable enableRegisterProducer enableCreateSysGroup
    commercialEnable commercialTimerCount commercialTransCount commercialBigCount filterServerNums
    controllerDeployedStandAlone
    """
)
