"""``--port-offset N`` (``$RMQ_PORT_OFFSET``): one layout, several copies on one machine.

A test suite run in parallel (pytest-xdist workers, two CI jobs on one host) or a second dev
cluster beside the first needs the same layout on other ports. The offset moves every port the
config names by ``N``: what the process listens on (the name server's, the container's and each
broker's ``listenPort``, an explicit ``haListenPort``, this controller peer's address) and the
ports of the addresses it connects to (``namesrvAddr``, ``controllerAddr``, every peer of
``controllerDLegerPeers``, ``haMasterAddress``). Give each process of a multi-process layout the
same offset and the copies stay apart. Port 0 (ephemeral) stays 0. A ``namesrvAddr`` that comes
from ``$NAMESRV_ADDR`` rather than from the file is the user's own address and is not moved.

Upstream has no such switch; the effective ports are upstream's keys, shown by ``--print-config``.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from broker.outer_api import split_addrs
from container.config_fields import InvalidConfig

if TYPE_CHECKING:
    from container.config import BrokerSpec, ProcessConfig

#: the environment variable ``--port-offset`` defaults to
PORT_OFFSET_ENV = "RMQ_PORT_OFFSET"


def port_taken_hint(error: OSError) -> str:
    """What to add to a "cannot listen" message: for a port another process holds, how to run a
    second copy of a layout beside the first."""
    if error.errno != errno.EADDRINUSE:
        return ""
    return (
        " (another process listens there: to run a second copy of this layout, start it with --port-offset N)"
    )


def default_port_offset() -> int:
    """``$RMQ_PORT_OFFSET`` as an int (0 when unset or empty); InvalidConfig when it is not one."""
    text = os.environ.get(PORT_OFFSET_ENV, "").strip()
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise InvalidConfig(f"${PORT_OFFSET_ENV}={text!r} is not a whole number of ports") from None


def shift_ports(
    proc: ProcessConfig,
    drafts: list[tuple[BrokerSpec, set[str]]],
    container_explicit: set[str],
    offset: int,
) -> None:
    """Move every port ``proc`` and its brokers' drafts name by ``offset``, in place (before the
    rules of :func:`container.config_rules.finish` derive HA ports and local addresses)."""
    if not offset:
        return
    move = _Shifter(offset, proc.source)
    if proc.namesrv is not None:
        proc.namesrv.listenPort = move.port(proc.namesrv.listenPort, "listenPort")
    if proc.controller is not None and proc.controller.controllerDLegerPeers:
        proc.controller.controllerDLegerPeers = move.peers(proc.controller.controllerDLegerPeers)
    if proc.container is not None:
        c = proc.container
        c.listenPort = move.port(c.listenPort, "listenPort")
        if c.namesrvAddr and "namesrvAddr" in container_explicit:
            c.namesrvAddr = move.address_list(c.namesrvAddr, "namesrvAddr")
    for spec, explicit in drafts:
        b, s = spec.broker, spec.store
        b.listenPort = move.port(b.listenPort, "listenPort")
        if b.namesrvAddr and "namesrvAddr" in explicit:
            b.namesrvAddr = move.address_list(b.namesrvAddr, "namesrvAddr")
        if b.controllerAddr:
            b.controllerAddr = move.address_list(b.controllerAddr, "controllerAddr")
        if "haListenPort" in explicit:
            s.haListenPort = move.port(s.haListenPort, "haListenPort")
        if s.haMasterAddress:
            s.haMasterAddress = move.address(s.haMasterAddress, "haMasterAddress")


class _Shifter:
    def __init__(self, offset: int, source: str) -> None:
        self.offset = offset
        self.source = source

    def port(self, port: int, key: str) -> int:
        if port <= 0:
            return port
        moved = port + self.offset
        if not 1 <= moved <= 65535:
            raise InvalidConfig(
                f"{self.source}: port offset {self.offset:+d} moves {key} {port} to {moved}, outside 1-65535"
            )
        return moved

    def address(self, address: str, key: str) -> str:
        """``host:port`` with its port moved (one without a numeric port is left as it is)."""
        host, sep, port = address.strip().rpartition(":")
        if not sep or not port.isdigit():
            return address
        return f"{host}:{self.port(int(port), key)}"

    def address_list(self, addresses: str, key: str) -> str:
        """A ``;``-separated list (``namesrvAddr``, ``controllerAddr``) moved entry by entry."""
        return ";".join(self.address(a, key) for a in split_addrs(addresses))

    def peers(self, peers: str) -> str:
        """``controllerDLegerPeers`` (``id-host:port;…``) with every peer's port moved."""
        out = []
        for entry in peers.split(";"):
            entry = entry.strip()
            peer_id, dash, address = entry.partition("-")
            if dash:
                entry = f"{peer_id}-{self.address(address, 'controllerDLegerPeers')}"
            if entry:
                out.append(entry)  # a malformed one as it was, for the peers check to name
        return ";".join(out)
