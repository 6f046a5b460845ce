"""Static Raft membership from upstream's ``controllerDLegerPeers`` setting."""

from __future__ import annotations

import re

from controller.raft.errors import PeersConfigError

_ID_RE = re.compile(r"^[A-Za-z0-9_.]+$")


def parse_peers(spec: str) -> dict[str, str]:
    """Parse ``n0-127.0.0.1:9878;n1-127.0.0.1:9879;...`` into ``{"n0": "127.0.0.1:9878", ...}``.

    The id is everything before the first ``-`` (DLedger's rule); the address is ``host:port``
    with a numeric port. Blank items (a trailing ``;``) are ignored. Raises
    :class:`PeersConfigError` naming the offending item on any malformed entry, duplicate id,
    duplicate address or an empty list.
    """
    peers: dict[str, str] = {}
    seen_addrs: dict[str, str] = {}
    for raw in spec.split(";"):
        item = raw.strip()
        if not item:
            continue
        peer_id, sep, addr = item.partition("-")
        if not sep or not peer_id or not addr:
            raise PeersConfigError(f"controllerDLegerPeers item {item!r} is not 'id-host:port'")
        if not _ID_RE.match(peer_id):
            raise PeersConfigError(f"controllerDLegerPeers item {item!r}: bad peer id {peer_id!r}")
        host, colon, port = addr.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise PeersConfigError(f"controllerDLegerPeers item {item!r}: address must be host:port")
        if peer_id in peers:
            raise PeersConfigError(f"controllerDLegerPeers: duplicate peer id {peer_id!r}")
        if addr in seen_addrs:
            raise PeersConfigError(
                f"controllerDLegerPeers: address {addr} used by both {seen_addrs[addr]!r} and {peer_id!r}"
            )
        peers[peer_id] = addr
        seen_addrs[addr] = peer_id
    if not peers:
        raise PeersConfigError(f"controllerDLegerPeers is empty: {spec!r}")
    return peers


def check_self_id(self_id: str, peers: dict[str, str]) -> None:
    """Raise :class:`PeersConfigError` unless ``controllerDLegerSelfId`` is one of the peers."""
    if self_id not in peers:
        raise PeersConfigError(
            f"controllerDLegerSelfId {self_id!r} is not in controllerDLegerPeers ({', '.join(peers)})"
        )
