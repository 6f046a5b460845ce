"""Rules applied to a loaded :class:`~container.config.ProcessConfig` (the list is in
:mod:`container.config`'s docstring): derived ports and addresses, classic-mode broker ids, and the
checks that make a runnable process (:class:`~container.config_fields.InvalidConfig` otherwise).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from broker.config import PERIOD_KEYS
from container.config_fields import InvalidConfig
from controller.config import DLEDGER_CONTROLLER, ControllerConfig, ControllerPeersError
from remoting.client import bad_addresses
from remoting.sockets import ip_of
from store.config import BrokerRole

if TYPE_CHECKING:
    from container.config import BrokerSpec, ProcessConfig

log = logging.getLogger("container.config")


def _specific(bind: str) -> bool:
    return bind not in ("", "0.0.0.0", "::")


def finish(
    proc: ProcessConfig,
    drafts: list[tuple[BrokerSpec, set[str]]],
    container_explicit: set[str],
    *,
    standalone: bool,
    toml: bool,
) -> None:
    bind = proc.nettyServer.bindAddress
    if proc.container is not None and _specific(bind) and "brokerContainerIP" not in container_explicit:
        proc.container.brokerContainerIP = bind
    if proc.namesrv is not None and proc.namesrv.enableControllerInNamesrv and proc.controller is None:
        raise InvalidConfig(
            f"{proc.source}: enableControllerInNamesrv=true needs the controller keys"
            + (" in a [controller] table" if toml else "")
        )
    if proc.controller is not None:
        _check_controller(proc.source, proc.controller)
    if proc.namesrv is not None:
        _check_period(proc.source, "scanNotActiveBrokerInterval", proc.namesrv.scanNotActiveBrokerInterval)
    if proc.nettyClient.useTLS:
        raise InvalidConfig(f"{proc.source}: useTLS=true is not supported by rmq-container")

    local_namesrv = None
    if proc.namesrv is not None:
        local_namesrv = f"{bind if _specific(bind) else '127.0.0.1'}:{proc.namesrv.listenPort}"
    for spec, explicit in drafts:
        b = spec.broker
        if _specific(bind):
            if "brokerIP1" not in explicit:
                b.brokerIP1 = bind
            if "brokerIP2" not in explicit:
                b.brokerIP2 = bind
        if proc.container is not None and proc.container.namesrvAddr:
            if "namesrvAddr" in explicit and b.namesrvAddr != proc.container.namesrvAddr:
                log.warning(
                    "%s: namesrvAddr %s replaced by the container's %s",
                    spec.source,
                    b.namesrvAddr,
                    proc.container.namesrvAddr,
                )
            b.namesrvAddr = proc.container.namesrvAddr
        elif not b.namesrvAddr and local_namesrv is not None:
            b.namesrvAddr = local_namesrv
        _check_addresses(spec.source, "namesrvAddr", b.namesrvAddr, "127.0.0.1:9876;192.168.0.1:9876")
        _check_addresses(spec.source, "controllerAddr", b.controllerAddr, "127.0.0.1:9878;192.168.0.1:9878")
        _check_hosts(spec)
        _ha_port(spec, explicit, standalone=standalone)
        _check_broker(spec, explicit)
    proc.brokers = [spec for spec, _ in drafts]
    _check_identities(proc)
    _check_ports(proc)
    _check_store_dirs(proc)


def _ha_port(spec: BrokerSpec, explicit: set[str], *, standalone: bool) -> None:
    b, s = spec.broker, spec.store
    derived = b.listenPort + 1 if b.listenPort > 0 else 0
    if standalone:
        if "haListenPort" not in explicit or s.haListenPort <= 0:
            s.haListenPort = derived
        return
    if "haListenPort" in explicit and s.haListenPort != derived:
        log.warning(
            "%s: haListenPort %d replaced by listenPort+1 = %d (brokers in a container always use it)",
            spec.source,
            s.haListenPort,
            derived,
        )
    s.haListenPort = derived


def _check_addresses(source: str, key: str, value: str | None, example: str) -> None:
    """Every ``;``-separated entry of an address list is ``host:port`` (upstream's BrokerStartup
    refuses to start otherwise; a broker given ``127.0.0.1;9876`` would try two addresses that are
    not addresses forever)."""
    for addr in bad_addresses(value):
        raise InvalidConfig(
            f"{source}: {key} {value!r}: {addr!r} is not host:port -- set it as follows: {example!r}"
        )


def _check_hosts(spec: BrokerSpec) -> None:
    """``brokerIP1`` / ``brokerIP2`` are IP addresses or host names that resolve (upstream's
    broker resolves them at startup too); a name that does not would stop the broker later with
    a traceback."""
    for key in ("brokerIP1", "brokerIP2"):
        host = getattr(spec.broker, key)
        try:
            ip_of(host)
        except ValueError as exc:
            raise InvalidConfig(f"{spec.source}: {key}: {exc}") from None


#: store sizes that must be positive: the store cannot make files (or index slots) of the others
_POSITIVE_STORE_KEYS = (
    "mappedFileSizeCommitLog",
    "mappedFileSizeConsumeQueue",
    "maxHashSlotNum",
    "maxIndexNum",
)


def _check_broker(spec: BrokerSpec, explicit: set[str]) -> None:
    b, s = spec.broker, spec.store
    for key in _POSITIVE_STORE_KEYS:
        if getattr(s, key) <= 0:
            raise InvalidConfig(f"{spec.source}: {key} must be positive, got {getattr(s, key)}")
    for key in PERIOD_KEYS:
        _check_period(spec.source, key, getattr(b if hasattr(b, key) else s, key))
    try:
        s.delay_levels_ms  # noqa: B018 -- parsed for its errors
    except ValueError as exc:
        raise InvalidConfig(f"{spec.source}: {exc}") from None
    if s.enableDLegerCommitLog:
        raise InvalidConfig(f"{spec.source}: enableDLegerCommitLog=true is not supported by rmq-container")
    if b.aclEnable:
        # refused rather than ignored: a broker the config says checks signatures must not serve
        # every client unchecked
        raise InvalidConfig(
            f"{spec.source}: aclEnable=true is not supported by rmq-container yet (requests are not "
            "authenticated); remove the key or set it to false"
        )
    if s.duplicationEnable:
        raise InvalidConfig(f"{spec.source}: a broker with duplicationEnable=true cannot run in a container")
    if not (
        s.totalReplicas >= s.inSyncReplicas >= s.minInSyncReplicas and s.totalReplicas >= s.minInSyncReplicas
    ):
        raise InvalidConfig(
            f"{spec.source}: invalid replicas number: need totalReplicas ({s.totalReplicas}) >= "
            f"inSyncReplicas ({s.inSyncReplicas}) >= minInSyncReplicas ({s.minInSyncReplicas})"
        )
    if b.enableControllerMode:
        if not b.controller_addr_list:
            raise InvalidConfig(f"{spec.source}: enableControllerMode=true needs controllerAddr")
        return
    if s.brokerRole == BrokerRole.SLAVE:
        if b.brokerId <= 0:
            raise InvalidConfig(f"{spec.source}: slave broker id must be > 0 (brokerId={b.brokerId})")
    elif b.brokerId != 0:
        if "brokerId" in explicit:
            log.warning("%s: brokerId %d set to 0 for a %s", spec.source, b.brokerId, s.brokerRole.value)
        b.brokerId = 0


def _check_period(source: str, key: str, value: int) -> None:
    """``key`` is the period of a loop (see :data:`broker.config.PERIOD_KEYS`)."""
    if value <= 0:
        raise InvalidConfig(
            f"{source}: {key} is the period of a loop, in milliseconds: it must be positive, got {value}"
        )


def _check_controller(source: str, c: ControllerConfig) -> None:
    for key in ("scanNotActiveBrokerInterval", "scanInactiveMasterInterval"):
        _check_period(source, key, getattr(c, key))
    if c.controllerType != DLEDGER_CONTROLLER:
        raise InvalidConfig(
            f"{source}: controllerType={c.controllerType} is not supported (rmq-container's controller is "
            f"configured with the {DLEDGER_CONTROLLER} keys)"
        )
    missing = [
        k
        for k in ("controllerDLegerGroup", "controllerDLegerPeers", "controllerDLegerSelfId")
        if not getattr(c, k)
    ]
    if missing:
        raise InvalidConfig(f"{source}: a controller needs {', '.join(missing)}")
    try:
        peers = c.peers
    except ControllerPeersError as e:
        raise InvalidConfig(f"{source}: controllerDLegerPeers: {e}") from None
    if c.controllerDLegerSelfId not in peers:
        raise InvalidConfig(
            f"{source}: controllerDLegerSelfId {c.controllerDLegerSelfId!r} is not one of the peers "
            f"({', '.join(peers)})"
        )


def _check_identities(proc: ProcessConfig) -> None:
    """No two brokers of the process with one cluster, name and configured id (upstream's container
    refuses the second: "has already been added to current broker container"). In controller mode
    the controller assigns the ids, but the configured one still names the replica in the logs and
    the banner, so two replicas of a group in one process need their own."""
    seen: dict[tuple[str, str, int], str] = {}
    for spec in proc.brokers:
        ident = (spec.broker.brokerClusterName, spec.broker.brokerName, spec.broker.brokerId)
        if ident in seen:
            hint = ""
            if spec.broker.enableControllerMode:
                hint = (
                    " (in controller mode the controller assigns the ids, but the configured brokerId"
                    " names the replica in the logs: give each replica of a group in one process its"
                    " own, e.g. brokerId 0 and 1)"
                )
            raise InvalidConfig(
                f"{spec.source}: broker {spec.broker.broker_display_name} is already described by {seen[ident]}{hint}"
            )
        seen[ident] = spec.source


def _check_ports(proc: ProcessConfig) -> None:
    owners: dict[int, str] = {}

    def claim(port: int, owner: str) -> None:
        if not 0 <= port <= 65535:
            # the resolver takes a port modulo 65536: 70000 would listen on 4464
            raise InvalidConfig(
                f"{proc.source}: {owner} is given port {port}, which is not a port (0..65535)"
            )
        if port == 0:
            return
        if port in owners:
            raise InvalidConfig(f"{proc.source}: port {port} is used by both {owners[port]} and {owner}")
        owners[port] = owner

    if proc.namesrv is not None:
        claim(proc.namesrv.listenPort, "the name server")
    if proc.container is not None:
        claim(proc.container.listenPort, "the container")
    if proc.controller is not None:
        claim(int(proc.controller.self_address.rpartition(":")[2]), "the controller")
    for spec in proc.brokers:
        name = spec.broker.broker_display_name
        claim(spec.broker.listenPort, f"broker {name}")
        claim(spec.store.haListenPort, f"broker {name} (HA)")


def _check_store_dirs(proc: ProcessConfig) -> None:
    """No two brokers of the process with one store directory or one commit-log directory (a
    [[broker]] block copied for another replica with only its port changed, or two brokers left on
    the default ``~/store``): the second would stop at the store lock with a message about "another
    process", or, with only ``storePathCommitLog`` shared, write into the other's files."""
    owners: dict[str, tuple[str, str]] = {}
    for spec in proc.brokers:
        name = spec.broker.broker_display_name
        for key, path in (
            ("storePathRootDir", spec.store.storePathRootDir),
            ("storePathCommitLog", spec.store.commitlog_dir),
        ):
            real = os.path.realpath(os.path.expanduser(path))
            if real in owners:
                other, other_key = owners[real]
                raise InvalidConfig(
                    f"{spec.source}: broker {name} keeps its store in {real} ({key}), as broker "
                    f"{other} does ({other_key}): give each broker of the process its own "
                    "storePathRootDir"
                )
            owners[real] = (name, key)
