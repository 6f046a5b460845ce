"""Listening sockets, peer addresses and host names, as upstream's Java servers have them.

- ``bindAddress = "::"`` is every address, IPv4 and IPv6 (Java binds a dual-stack socket there);
  trio's own listeners set ``IPV6_V6ONLY``, which left a process bound to ``::`` unreachable for
  every IPv4 client -- its own brokers registering with its name server at 127.0.0.1 among them.
- An IPv4 peer of a dual-stack socket arrives as ``::ffff:a.b.c.d``; Java hands it over as the
  IPv4 address, so that is what a peer address says here too (a stored message's BORNHOST then
  has 4 address bytes, as upstream's).
- A broker's ``brokerIP1`` may be a host name (:func:`ip_of` gives the address its records store).
"""

from __future__ import annotations

import errno
import socket

import trio

__all__ = ["ip_of", "open_tcp_listeners", "peer_text", "unmapped"]

#: how ``bindAddress`` spells every IPv6 (and, dual-stack, IPv4) address
_V6_WILDCARDS = frozenset({"::", "[::]"})
_MAPPED_PREFIX = "::ffff:"
#: trio's listen backlog (its ``open_tcp_listeners`` default: the system's maximum)
_BACKLOG = 0xFFFF


async def open_tcp_listeners(port: int, host: str | None) -> list[trio.SocketListener]:
    """trio's listeners of ``host:port``, but one dual-stack socket for ``::``; an IPv4-only
    system gets the IPv4 wildcard there instead."""
    if host not in _V6_WILDCARDS:
        return await trio.open_tcp_listeners(port, host=host)
    try:
        sock = trio.socket.socket(trio.socket.AF_INET6, trio.socket.SOCK_STREAM)
    except OSError as exc:
        if exc.errno != errno.EAFNOSUPPORT:
            raise
        return await trio.open_tcp_listeners(port, host="0.0.0.0")
    try:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
        sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 0)
        await sock.bind(("::", port))
        sock.listen(_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return [trio.SocketListener(sock)]


def unmapped(ip: str) -> str:
    """``ip``, or the IPv4 address an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) carries."""
    if ip.startswith(_MAPPED_PREFIX) and "." in ip:
        return ip[len(_MAPPED_PREFIX) :]
    return ip


def peer_text(peer: tuple[str, int] | tuple[str, int, int, int]) -> str:
    """``"ip:port"`` of a socket address (IPv4-mapped peers as their IPv4 address)."""
    return f"{unmapped(peer[0])}:{peer[1]}"


def ip_of(host: str) -> str:
    """``host`` itself when it is an IP address (brackets dropped), else the address it resolves
    to, IPv4 first (as Java's ``InetAddress.getByName`` orders them). A broker's ``brokerIP1`` may
    be a host name, as upstream's may: the name is what the broker registers, the address what
    its stored records carry as STOREHOST. Raises ValueError naming the host when it does not
    resolve. Resolving may block: call it at startup, not on a request."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, bare)
        except OSError:
            continue
        return bare
    try:
        found = socket.getaddrinfo(bare, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"{host!r} is neither an IP address nor a host name that resolves ({exc})") from None
    found.sort(key=lambda info: info[0] != socket.AF_INET)
    return unmapped(str(found[0][4][0]))
