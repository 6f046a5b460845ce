"""What one ``rmq-container`` process runs, loaded from upstream ``.properties`` files or one TOML file.

Public entry point: :func:`load_process_config` → :class:`ProcessConfig`. Every key is an upstream
key with its upstream meaning (see the config structs); unknown keys are errors listing file:line
(:class:`~container.config_fields.UnknownConfigKey`), bad values name file:line and key
(:class:`~container.config_fields.BadConfigValue`), keys upstream has but we give no meaning load
with a warning on the ``container.config`` logger.

Inputs

- ``.toml``: one file for the whole process with tables ``[namesrv]``, ``[controller]``,
  ``[container]``, ``[[broker]]`` (broker and message-store keys together), ``[nettyServer]``,
  ``[nettyClient]``. A ``[container]`` table may also name broker ``.properties`` files in
  ``brokerConfigPaths``.
- ``.properties`` / ``.conf``: one upstream file. Its kind is decided by :func:`detect_kind` unless
  given: a container file (``brokerConfigPaths``, resolved against the file's directory, each broker
  loaded as if in a container), a broker file (a standalone broker), a name server file (plus the
  controller keys when ``enableControllerInNamesrv=true``), a standalone controller file.

Rules applied after loading (upstream's unless marked as ours)

- Brokers hosted by a container (TOML, container file): ``haListenPort`` = ``listenPort + 1``; a
  standalone broker file: ``haListenPort`` unset or ≤ 0 → ``listenPort + 1``. Port 0 (ephemeral) gives 0.
- Container ``namesrvAddr`` overrides every broker's. Ours: a broker with no name server address in a
  process that runs a name server registers with that one.
- Ours: when ``bindAddress`` is a specific address, ``brokerIP1``/``brokerIP2``/``brokerContainerIP``
  not given default to it (rather than to the machine's outward address, which would not be
  reachable).
- Classic (non-controller) mode: a master's ``brokerId`` is forced to 0; a slave needs ``brokerId > 0``;
  ``totalReplicas >= inSyncReplicas >= minInSyncReplicas``.
- No two listeners of the process may share a port.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from broker.config import IGNORED_BROKER_KEYS, BrokerConfig, local_address
from container.config_fields import (
    DATA_DIR_PLACEHOLDER,
    PATH_KEYS,
    BadConfigValue,
    ConfigError,
    InvalidConfig,
    KeyLocation,
    Target,
    UnknownConfigKey,
    convert_text,
    convert_toml,
    default_data_dir,
    expand_path,
    field_kinds,
)
from container.config_rules import finish
from container.netty_config import NettyClientConfig, NettyServerConfig
from container.port_offset import shift_ports
from container.properties import (
    PropertiesSyntaxError,
    Property,
    decode_properties_bytes,
    parse_properties,
)
from container.toml_lines import TomlLines
from controller.config import (
    IGNORED_CONTROLLER_KEYS,
    ControllerConfig,
)
from namesrv.config import IGNORED_NAMESRV_KEYS, NamesrvConfig
from store.config import MessageStoreConfig

__all__ = [
    "KINDS",
    "BadConfigValue",
    "BrokerSpec",
    "ConfigError",
    "ContainerConfig",
    "InvalidConfig",
    "KeyLocation",
    "ProcessConfig",
    "UnknownConfigKey",
    "detect_kind",
    "load_process_config",
]

log = logging.getLogger("container.config")

KINDS = ("toml", "container", "broker", "namesrv", "controller")


class ContainerConfig(msgspec.Struct, kw_only=True):
    """Upstream ``BrokerContainerConfig`` plus the container's own ``listenPort`` (its Netty port).

    ``brokerContainerIP`` has no setter upstream, so upstream cannot set it from a file; here it can.
    """

    listenPort: int = 10811
    rocketmqHome: str | None = msgspec.field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME"))
    namesrvAddr: str | None = msgspec.field(default_factory=lambda: os.environ.get("NAMESRV_ADDR"))
    fetchNameSrvAddrByDnsLookup: bool = False
    fetchNamesrvAddrByAddressServer: bool = False
    brokerContainerIP: str = msgspec.field(default_factory=local_address)
    brokerConfigPaths: str | None = None
    fetchNamesrvAddrInterval: int = 10 * 1000
    updateNamesrvAddrInterval: int = 60 * 2 * 1000
    configBlackList: str = "configBlackList;brokerConfigPaths"


class BrokerSpec(msgspec.Struct, kw_only=True):
    """One hosted broker: its broker and store config and where it was described (file[:line])."""

    broker: BrokerConfig
    store: MessageStoreConfig
    source: str


class ProcessConfig(msgspec.Struct, kw_only=True):
    """Everything one process runs. ``dataDir`` is what ``${rmq.data.dir}`` meant, if the file used it;
    ``portOffset`` what every port of the file was moved by."""

    namesrv: NamesrvConfig | None = None
    controller: ControllerConfig | None = None
    container: ContainerConfig | None = None
    brokers: list[BrokerSpec] = msgspec.field(default_factory=list)
    nettyServer: NettyServerConfig = msgspec.field(default_factory=NettyServerConfig)
    nettyClient: NettyClientConfig = msgspec.field(default_factory=NettyClientConfig)
    source: str = ""
    dataDir: str | None = None
    portOffset: int = 0


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Upstream ``MessageStoreConfig`` keys this store does not have: accepted with a warning.
IGNORED_STORE_KEYS: frozenset[str] = _names(
    """
    accessMessageInMemoryHotRatio batchDispatchRequestThreadPoolNums bitMapLengthConsumeQueueExt
    bottomMostCompressionTypeForConsumeQueueStore cleanRocksDBDirtyCQIntervalMin cleanSwapedMapInterval
    coldDataFlowControlEnable coldDataScanEnable combineAssignOffsetCQType combineCQEnableCheckSelf
    combineCQLoadingCQTypes combineCQMaxExtraSearchCommitLogFiles combineCQPreferCQType
    commitCommitLogLeastPages commitCommitLogThoroughInterval commitIntervalCommitLog
    commitLogForceSwapMapInterval commitLogSwapMapInterval commitLogSwapMapReserveFileNum
    compactionCqMappedFileSize compactionMappedFileSize compactionScheduleInternal compactionThreadNum
    correctLogicMinOffsetForceInterval correctLogicMinOffsetSleepInterval dLegerGroup dLegerPeers
    dLegerSelfId dataReadAheadEnable debugLockEnable deleteFileBatchMax diskFallRecorded
    dispatchCqCacheNum dispatchCqThreads dispatchFromSenderThread enableAcceleratedRecovery
    enableAsyncReput enableBatchPush enableBuildConsumeQueueConcurrently enableCleanExpiredOffset
    enableCompaction enableConsumeQueueExt enableLmq enableLogConsumeQueueRepeatedlyBuildWhenRecover
    enableMultiDispatch enableRocksDBLog enableRunningFlagsInFlush enableScheduleAsyncDeliver
    enableScheduleMessageStats enabledAppendPropCRC fastFailIfNoBufferInStorePool
    flushDelayOffsetInterval flushLeastPagesWhenWarmMapedFile forceVerifyPropCRC
    logicQueueForceSwapMapInterval logicQueueSwapMapInterval logicQueueSwapMapReserveFileNum
    mappedFileSizeConsumeQueueExt mappedFileSizeTimerLog mappedFileSwapEnable
    mapperFileSizeBatchConsumeQueue maxAsyncPutMessageRequests maxBatchDeleteFilesNum maxChecksumRange
    maxConsumeQueueScan maxFilterMessageSize maxLmqConsumeQueueNum maxOffsetMapSize
    maxRecoveryCommitlogFiles maxSlaveResendLength maxTopicLength memTableFlushIntervalMs
    offsetCheckInSlave osPageCacheBusyTimeOutMills preferredLeaderId pullBatchMaxMessageCount
    putConsumeQueueDataByFileChannel putMessageTimeout putMsgIndexHightWater readOnlyCommitLogStorePaths
    realTimePersistRocksDBConfig recheckReputOffsetFromCq redeleteHangedFileInterval
    rocksdbCQDoubleWriteEnable rocksdbCompressionType rocksdbFlushWalFrequency
    rocksdbWalFileRollingThreshold sampleCountThreshold sampleSteps scheduleAsyncDeliverMaxPendingLimit
    scheduleAsyncDeliverMaxResendNum2Blocked searchBcqByCacheEnable
    spinLockCollisionRetreatOptimalDegree statRocksDBCQIntervalSec storePathDLedgerCommitLog storeType
    timerCheckMetricsWhen timerColdDataCheckIntervalMs timerCongestNumEachSlot timerEnableCheckMetrics
    timerEnableDisruptor timerEnableRetryUntilSuccess timerFlushIntervalMs timerGetMessageThreadNum
    timerInterceptDelayLevel timerMaxDelaySec timerMetricSmallThreshold timerPrecisionMs
    timerProgressLogIntervalMs timerPutMessageThreadNum timerRollWindowSlot timerSkipUnknownError
    timerStopDequeue timerStopEnqueue timerWarmEnable topicQueueLockNum transientStorePoolSize
    travelCqFileNumWhenGetMessage useABSLock useReentrantLockWhenPutMessage wakeCommitWhenPutMessage
    wakeFlushWhenPutMessage writeWithoutMmap haSlaveFallbehindMax maxDelayTime memTableFlushInterval
    """
)


def _keys(cls: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(field_kinds(cls))


BROKER_KEYS = _keys(BrokerConfig) | _keys(MessageStoreConfig) | IGNORED_BROKER_KEYS | IGNORED_STORE_KEYS
NAMESRV_KEYS = _keys(NamesrvConfig) | IGNORED_NAMESRV_KEYS
CONTROLLER_KEYS = _keys(ControllerConfig) | IGNORED_CONTROLLER_KEYS
CONTAINER_KEYS = _keys(ContainerConfig)
NETTY_KEYS = _keys(NettyServerConfig) | _keys(NettyClientConfig)
_ALL_KEYS = BROKER_KEYS | NAMESRV_KEYS | CONTROLLER_KEYS | CONTAINER_KEYS | NETTY_KEYS


def _only(own: frozenset[str], *others: frozenset[str]) -> frozenset[str]:
    rest: frozenset[str] = frozenset().union(*others)
    return own - rest


_CONTAINER_ONLY = _only(CONTAINER_KEYS, BROKER_KEYS, NAMESRV_KEYS, CONTROLLER_KEYS, NETTY_KEYS)
_BROKER_ONLY = _only(BROKER_KEYS, CONTAINER_KEYS, NAMESRV_KEYS, CONTROLLER_KEYS, NETTY_KEYS)
_NAMESRV_ONLY = _only(NAMESRV_KEYS, BROKER_KEYS, CONTAINER_KEYS, CONTROLLER_KEYS, NETTY_KEYS)
_CONTROLLER_ONLY = _only(CONTROLLER_KEYS, BROKER_KEYS, CONTAINER_KEYS, NAMESRV_KEYS, NETTY_KEYS)


def detect_kind(keys: set[str] | frozenset[str], path: str | os.PathLike[str]) -> str:
    """Which kind of upstream file a ``.properties``/``.conf`` file is, from its keys and name.

    In order: a container-only key (``brokerConfigPaths``, ``brokerContainerIP``, ...) → container;
    a broker or store key → broker; a name-server-only key (``kvConfigPath``, ``supportActingMaster``,
    ``enableControllerInNamesrv``, ...) → namesrv; a controller-only key (``controllerDLegerPeers``, ...)
    → controller; otherwise the file name decides (contains container / namesrv or nameserver /
    controller); otherwise broker.
    """
    if keys & _CONTAINER_ONLY:
        return "container"
    if keys & _BROKER_ONLY:
        return "broker"
    if keys & _NAMESRV_ONLY:
        return "namesrv"
    if keys & _CONTROLLER_ONLY:
        return "controller"
    stem = Path(path).name.lower()
    for word, kind in (
        ("container", "container"),
        ("namesrv", "namesrv"),
        ("nameserver", "namesrv"),
        ("controller", "controller"),
    ):
        if word in stem:
            return kind
    return "broker"


def _close_match(key: str, candidates: frozenset[str]) -> str:
    lowered = {c.lower(): c for c in candidates}
    if key.lower() in lowered:
        return f"did you mean {lowered[key.lower()]!r}?"
    near = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.8)
    return f"did you mean {near[0]!r}?" if near else ""


def _table_of(key: str) -> str:
    """The TOML table a known key belongs in (for hints)."""
    for keys, table in (
        (BROKER_KEYS, "[[broker]]"),
        (NAMESRV_KEYS, "[namesrv]"),
        (CONTROLLER_KEYS, "[controller]"),
        (CONTAINER_KEYS, "[container]"),
        (_keys(NettyServerConfig), "[nettyServer]"),
        (_keys(NettyClientConfig), "[nettyClient]"),
    ):
        if key in keys:
            return table
    return ""


class _Loader:
    def __init__(self, data_dir: str | None) -> None:
        self.data_dir = data_dir or default_data_dir()
        self.data_dir_used = False
        self.unknown: list[KeyLocation] = []
        self.container_explicit: set[str] = set()

    # --- conversion and routing ---

    def _convert(self, target: Target, file: str, line: int, key: str, value: object, text: bool) -> None:
        kind = target.kinds[key]
        try:
            converted: Any = convert_text(kind, value) if text else convert_toml(kind, value)  # type: ignore[arg-type]
        except ValueError as e:
            raise BadConfigValue(file, line, key, value, str(e)) from None
        if key in PATH_KEYS and isinstance(converted, str):
            if DATA_DIR_PLACEHOLDER in converted:
                self.data_dir_used = True
            converted = expand_path(converted, self.data_dir)
        target.values[key] = converted
        target.lines[key] = line

    def route(
        self,
        file: str,
        items: list[tuple[str, object, int]],
        targets: list[Target],
        *,
        text: bool,
        ignored: frozenset[str] = frozenset(),
        ignored_why: str = "no effect in rmq-container",
        hint_keys: frozenset[str] = frozenset(),
        toml_table: bool = False,
    ) -> None:
        """Send each (key, value, line) to every target that knows the key; collect unknown keys."""
        skipped: list[str] = []
        for key, value, line in items:
            matched = [t for t in targets if t.knows(key)]
            for t in matched:
                self._convert(t, file, line, key, value, text)
            if matched:
                continue
            if key in ignored:
                skipped.append(f"{key} (line {line})" if line else key)
                continue
            hint = ""
            if toml_table and key in _ALL_KEYS:
                hint = f"belongs in {_table_of(key)}"
            if not hint:
                hint = _close_match(key, hint_keys)
            self.unknown.append(KeyLocation(file, line, key, hint))
        if skipped:
            log.warning("%s: %s: %s", file, ignored_why, ", ".join(skipped))

    # --- .properties files ---

    def read_properties(self, path: Path) -> dict[str, Property]:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
        try:
            entries = parse_properties(decode_properties_bytes(data))
        except PropertiesSyntaxError as e:
            raise ConfigError(f"{path}:{e.line}: {e.message}") from None
        out: dict[str, Property] = {}
        for entry in entries:
            if entry.key in out:
                log.warning(
                    "%s:%d: %s given again (line %d); the later value wins",
                    path,
                    entry.line,
                    entry.key,
                    out[entry.key].line,
                )
            out[entry.key] = entry
        return out

    @staticmethod
    def _items(props: dict[str, Property]) -> list[tuple[str, object, int]]:
        return [(p.key, p.value, p.line) for p in props.values()]

    def broker_properties(
        self, path: Path, props: dict[str, Property], proc: ProcessConfig, *, in_container: bool
    ) -> tuple[BrokerSpec, set[str]]:
        broker = Target(BrokerConfig, "BrokerConfig")
        store = Target(MessageStoreConfig, "MessageStoreConfig")
        items = self._items(props)
        netty_server = Target(NettyServerConfig, "NettyServerConfig")
        netty_client = Target(NettyClientConfig, "NettyClientConfig")
        if in_container:
            # Upstream's container gives its own transport to every broker; a broker file's Netty
            # keys are not read.
            netty_items = [i for i in items if i[0] in NETTY_KEYS and i[0] not in BROKER_KEYS]
            items = [i for i in items if i not in netty_items]
            self.route(
                str(path),
                netty_items,
                [],
                text=True,
                ignored=NETTY_KEYS,
                ignored_why="transport keys in a broker file are not read inside a container",
            )
            targets = [broker, store]
        else:
            targets = [broker, store, netty_server, netty_client]
        self.route(
            str(path),
            items,
            targets,
            text=True,
            ignored=IGNORED_BROKER_KEYS | IGNORED_STORE_KEYS,
            hint_keys=BROKER_KEYS | (frozenset() if in_container else NETTY_KEYS),
        )
        if not in_container:
            proc.nettyServer = netty_server.build()
            proc.nettyClient = netty_client.build()
        spec = BrokerSpec(broker=broker.build(), store=store.build(), source=str(path))
        return spec, set(broker.values) | set(store.values)

    def namesrv_properties(self, path: Path, props: dict[str, Property], proc: ProcessConfig) -> None:
        namesrv = Target(NamesrvConfig, "NamesrvConfig")
        netty_server = Target(NettyServerConfig, "NettyServerConfig")
        netty_client = Target(NettyClientConfig, "NettyClientConfig")
        controller = Target(ControllerConfig, "ControllerConfig")
        items = self._items(props)
        embedded = props.get("enableControllerInNamesrv")
        with_controller = embedded is not None and embedded.value.strip().lower() == "true"
        targets = [namesrv, netty_server, netty_client]
        if with_controller:
            targets.append(controller)
            ignored = IGNORED_NAMESRV_KEYS | IGNORED_CONTROLLER_KEYS
        else:
            controller_items = [i for i in items if i[0] in CONTROLLER_KEYS and i[0] not in NAMESRV_KEYS]
            items = [i for i in items if i not in controller_items]
            self.route(
                str(path),
                controller_items,
                [],
                text=True,
                ignored=CONTROLLER_KEYS,
                ignored_why="controller keys are read only with enableControllerInNamesrv=true",
            )
            ignored = IGNORED_NAMESRV_KEYS
        self.route(
            str(path),
            items,
            targets,
            text=True,
            ignored=ignored,
            hint_keys=NAMESRV_KEYS | NETTY_KEYS | (CONTROLLER_KEYS if with_controller else frozenset()),
        )
        proc.namesrv = namesrv.build()
        proc.nettyServer = netty_server.build()
        proc.nettyClient = netty_client.build()
        if with_controller:
            proc.controller = controller.build()

    def controller_properties(self, path: Path, props: dict[str, Property], proc: ProcessConfig) -> None:
        controller = Target(ControllerConfig, "ControllerConfig")
        netty_server = Target(NettyServerConfig, "NettyServerConfig")
        netty_client = Target(NettyClientConfig, "NettyClientConfig")
        self.route(
            str(path),
            self._items(props),
            [controller, netty_server, netty_client],
            text=True,
            # The controller serves brokers on its controllerDLegerPeers address, as upstream's
            # DLedger controller does; the Netty listenPort of a controller file is not used.
            ignored=IGNORED_CONTROLLER_KEYS | {"listenPort"},
            hint_keys=CONTROLLER_KEYS | NETTY_KEYS,
        )
        proc.controller = controller.build()
        proc.nettyServer = netty_server.build()
        proc.nettyClient = netty_client.build()

    def container_properties(
        self, path: Path, props: dict[str, Property], proc: ProcessConfig
    ) -> list[tuple[BrokerSpec, set[str]]]:
        container = Target(ContainerConfig, "ContainerConfig")
        netty_server = Target(NettyServerConfig, "NettyServerConfig")
        netty_client = Target(NettyClientConfig, "NettyClientConfig")
        self.route(
            str(path),
            self._items(props),
            [container, netty_server, netty_client],
            text=True,
            hint_keys=CONTAINER_KEYS | NETTY_KEYS,
        )
        proc.container = container.build()
        self.container_explicit = set(container.values)
        proc.nettyServer = netty_server.build()
        proc.nettyClient = netty_client.build()
        return self.container_brokers(path, proc.container)

    def container_brokers(self, path: Path, container: ContainerConfig) -> list[tuple[BrokerSpec, set[str]]]:
        """Load the broker files a container names (``:``-separated, relative to the container file)."""
        out: list[tuple[BrokerSpec, set[str]]] = []
        for part in (container.brokerConfigPaths or "").split(":"):
            part = part.strip()
            if not part:
                continue
            expanded = os.path.expanduser(part.replace("${user.home}", os.path.expanduser("~")))
            broker_path = Path(expanded) if os.path.isabs(expanded) else path.parent / expanded
            props = self.read_properties(broker_path)
            out.append(self.broker_properties(broker_path, props, ProcessConfig(), in_container=True))
        return out

    # --- TOML ---

    def toml(self, path: Path, proc: ProcessConfig) -> list[tuple[BrokerSpec, set[str]]]:
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not UTF-8 ({e})") from None
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: {e}") from None
        lines = TomlLines(text, str(path))
        file = str(path)
        brokers: list[tuple[BrokerSpec, set[str]]] = []
        tables: dict[str, tuple[type[msgspec.Struct], frozenset[str]]] = {
            "namesrv": (NamesrvConfig, IGNORED_NAMESRV_KEYS),
            "controller": (ControllerConfig, IGNORED_CONTROLLER_KEYS),
            "container": (ContainerConfig, frozenset()),
            "nettyServer": (NettyServerConfig, frozenset()),
            "nettyClient": (NettyClientConfig, frozenset()),
        }
        built: dict[str, Any] = {}
        for name, value in doc.items():
            if name == "broker":
                if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                    raise ConfigError(f"{file}:{lines.key_line((), name)}: brokers are [[broker]] tables")
                for index, table in enumerate(value):
                    brokers.append(self._toml_broker(file, lines, index, table))
                continue
            if name not in tables:
                hint = _close_match(name, frozenset([*tables, "broker"]))
                if not hint and name in _ALL_KEYS:
                    hint = f"belongs in {_table_of(name)}"
                line = lines.table_line(name, 0) or lines.key_line((), name)
                self.unknown.append(KeyLocation(file, line, name, hint or "not a table of a process file"))
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{file}:{lines.key_line((), name)}: {name} must be a table [{name}]")
            cls, ignored = tables[name]
            target = Target(cls, cls.__name__)
            self.route(
                file,
                self._toml_items(lines, name, None, value),
                [target],
                text=False,
                ignored=ignored,
                hint_keys=_keys(cls),
                toml_table=True,
            )
            built[name] = target.build()
            if name == "container":
                self.container_explicit = set(target.values)
        proc.namesrv = built.get("namesrv")
        proc.controller = built.get("controller")
        proc.container = built.get("container")
        proc.nettyServer = built.get("nettyServer") or NettyServerConfig()
        proc.nettyClient = built.get("nettyClient") or NettyClientConfig()
        if proc.container is not None and proc.container.brokerConfigPaths:
            brokers.extend(self.container_brokers(path, proc.container))
        return brokers

    def _toml_items(
        self, lines: TomlLines, table: str, index: int | None, value: dict[str, Any]
    ) -> list[tuple[str, object, int]]:
        items: list[tuple[str, object, int]] = []
        for key, v in value.items():
            line = lines.key_line((table, index or 0), key) or lines.table_line(table, index or 0)
            if isinstance(v, dict):
                # A sub-table ([broker.x] or key = {...}) is never a config value.
                self.unknown.append(KeyLocation(lines.file, line, key, "a table, expected a value"))
                continue
            items.append((key, v, line))
        return items

    def _toml_broker(
        self, file: str, lines: TomlLines, index: int, table: dict[str, Any]
    ) -> tuple[BrokerSpec, set[str]]:
        broker = Target(BrokerConfig, "BrokerConfig")
        store = Target(MessageStoreConfig, "MessageStoreConfig")
        self.route(
            file,
            self._toml_items(lines, "broker", index, table),
            [broker, store],
            text=False,
            ignored=IGNORED_BROKER_KEYS | IGNORED_STORE_KEYS,
            hint_keys=BROKER_KEYS,
            toml_table=True,
        )
        header = lines.table_line("broker", index)
        source = f"{file}:{header}" if header else file
        return BrokerSpec(broker=broker.build(), store=store.build(), source=source), set(
            broker.values
        ) | set(store.values)


def load_process_config(
    path: str | os.PathLike[str],
    kind: str | None = None,
    *,
    data_dir: str | None = None,
    allow_unknown_keys: bool = False,
    port_offset: int = 0,
) -> ProcessConfig:
    """Load what one process runs from ``path`` (see the module docstring).

    ``kind`` is one of :data:`KINDS` or None (``.toml`` → toml, else :func:`detect_kind`).
    ``data_dir`` is what ``${rmq.data.dir}`` stands for (default: ``$RMQ_DATA_DIR`` or ``data/`` in the
    project). Unknown keys raise :class:`UnknownConfigKey` listing all of them, unless
    ``allow_unknown_keys``: then each is logged as a warning and skipped. Raises
    :class:`ConfigError` (or a subclass) on any problem. ``port_offset`` moves every port the config
    names, listening or connecting (:mod:`container.port_offset`).
    """
    p = Path(path)
    loader = _Loader(data_dir)
    proc = ProcessConfig(source=str(p))
    if kind is None:
        kind = "toml" if p.suffix.lower() == ".toml" else None
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind == "toml":
        brokers = loader.toml(p, proc)
        standalone = False
    else:
        props = loader.read_properties(p)
        kind = kind or detect_kind(set(props), p)
        log.debug("%s: loading as a %s file", p, kind)
        brokers = []
        standalone = kind == "broker"
        if kind == "container":
            brokers = loader.container_properties(p, props, proc)
        elif kind == "broker":
            brokers = [loader.broker_properties(p, props, proc, in_container=False)]
        elif kind == "namesrv":
            loader.namesrv_properties(p, props, proc)
        else:
            loader.controller_properties(p, props, proc)
    if loader.unknown:
        if not allow_unknown_keys:
            raise UnknownConfigKey(loader.unknown)
        for key in loader.unknown:
            log.warning("%s (skipped)", key)
    nothing = proc.namesrv is None and proc.controller is None and proc.container is None
    if kind == "toml" and nothing and not brokers:
        raise InvalidConfig(
            f"{p}: describes nothing to run (no [namesrv], [controller], [container], [[broker]])"
        )
    if loader.data_dir_used:
        proc.dataDir = loader.data_dir
    shift_ports(proc, brokers, loader.container_explicit, port_offset)
    proc.portOffset = port_offset
    finish(proc, brokers, loader.container_explicit, standalone=standalone, toml=kind == "toml")
    return proc
