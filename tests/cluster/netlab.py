"""Network faults between ``rmq-container`` processes, made with pyroute2.

:class:`NetLab` gives each named host a network namespace of its own, with one interface (``eth0``,
an address of a private /24) joined by a veth pair to a bridge in the test's own namespace, which
holds the subnet's first address (:data:`HOST`, where the test's clients run). A process started
with :meth:`NetLab.argv_prefix` runs in its host's namespace; its listening addresses and the
addresses it advertises are the host's (:meth:`NetLab.address`).

Faults, all undone by :meth:`NetLab.heal`:

* :meth:`NetLab.cut` -- two hosts (or a host and the test's namespace) stop hearing each other:
  a blackhole route for the other's address on each side. Packets of connections already open are
  dropped silently (TCP retransmits, nothing is reset), so each side sees what a real partition
  shows: requests that time out. A new connection fails at once on either side (the kernel
  refuses to route a SYN to a blackhole: ``EINVAL``).
* :meth:`NetLab.isolate` -- a host hears nobody: its veth end on the bridge goes down (timeouts
  everywhere, also for new connections).

The kernel here has no traffic-control classifiers or netem (no modules), so the faults are routes
and links: a packet is lost or it is not; delay and partial loss are not on offer.

Names: namespaces ``rmq<pid>-<host>``, bridge ``rmqb<pid>``, veths ``rmqv<pid>.<n>`` (the test
process's pid, so a lab left behind by a killed run is recognised and removed by the next one).
Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``); :func:`unavailable` says why not, for a skip.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import sys
from collections.abc import Iterator, Sequence

from pyroute2 import IPRoute, NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

__all__ = ["HOST", "NetLab", "unavailable"]

#: the test's own namespace, as a host name for :meth:`NetLab.cut`
HOST = "host"

_OWN = re.compile(r"^rmq(\d+)-")
_OWN_LINK = re.compile(r"^rmq[bv](\d+)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale() -> None:
    """Namespaces, veths and bridges of labs whose test process is gone."""
    for name in netns.listnetns():
        m = _OWN.match(name)
        if m and not _alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                netns.remove(name)
    with IPRoute() as ipr:
        for link in ipr.get_links():
            ifname = link.get_attr("IFLA_IFNAME") or ""
            m = _OWN_LINK.match(ifname)
            if m and not _alive(int(m.group(1))):
                with contextlib.suppress(NetlinkError):
                    ipr.link("del", index=link["index"])


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    probe = f"rmq{os.getpid()}-probe"
    try:
        netns.create(probe)
    except Exception as e:  # OSError, or pyroute2's own errors: anything means "not here"
        return f"cannot create a network namespace ({type(e).__name__}: {e}); needs root"
    netns.remove(probe)
    return None


def _free_subnet(ipr: IPRoute) -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no address or route of this namespace overlaps."""
    taken = [
        ipaddress.ip_interface(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}").network
        for a in ipr.get_addr(family=2)
    ]
    start = os.getpid() % 256
    for k in range(256):
        net = ipaddress.IPv4Network(f"10.213.{(start + k) % 256}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free /24 in 10.213.0.0/16 for a network lab")


class NetLab:
    """One namespace per name in ``hosts`` on one bridge (see the module docstring)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        if HOST in hosts or len(set(hosts)) != len(hosts):
            raise ValueError(f"host names must be unique and not {HOST!r}: {hosts}")
        _remove_stale()
        pid = os.getpid()
        self.hosts = list(hosts)
        self._ipr = IPRoute()
        self._bridge = f"rmqb{pid}"
        self._namespaces = {h: f"rmq{pid}-{h}" for h in hosts}
        self._veths = {h: f"rmqv{pid}.{i}" for i, h in enumerate(hosts)}
        self._cuts: set[tuple[str, str]] = set()
        self._isolated: set[str] = set()
        self._made: list[str] = []  # namespaces made, for close
        self._closed = False
        try:
            net = _free_subnet(self._ipr)
            addrs = list(net.hosts())
            self._addresses = {HOST: str(addrs[0])} | {h: str(addrs[10 + i]) for i, h in enumerate(hosts)}
            self._build(net.prefixlen)
        except BaseException:
            self.close()
            raise

    def _build(self, prefixlen: int) -> None:
        ipr = self._ipr
        ipr.link("add", ifname=self._bridge, kind="bridge")
        bridge = ipr.link_lookup(ifname=self._bridge)[0]
        ipr.addr("add", index=bridge, address=self._addresses[HOST], prefixlen=prefixlen)
        ipr.link("set", index=bridge, state="up")
        for host in self.hosts:
            name, veth = self._namespaces[host], self._veths[host]
            netns.create(name)
            self._made.append(name)
            peer = veth.replace("rmqv", "rmqp", 1)
            ipr.link("add", ifname=veth, kind="veth", peer=peer)
            ipr.link("set", index=ipr.link_lookup(ifname=veth)[0], master=bridge, state="up")
            ipr.link("set", index=ipr.link_lookup(ifname=peer)[0], net_ns_fd=name)
            with NetNS(name) as ns:
                index = ns.link_lookup(ifname=peer)[0]
                ns.link("set", index=index, ifname="eth0")
                ns.addr("add", index=index, address=self._addresses[host], prefixlen=prefixlen)
                ns.link("set", index=index, state="up")
                ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")

    # --- addresses and processes ---

    def address(self, host: str) -> str:
        """The host's address (``HOST``: the test's own, on the bridge)."""
        return self._addresses[host]

    def namespace(self, host: str) -> str:
        return self._namespaces[host]

    def argv_prefix(self, host: str) -> list[str]:
        """Put before a program's argv to run it in ``host``'s namespace."""
        return [sys.executable, "-m", "tests.cluster.netns_exec", self._namespaces[host]]

    # --- faults ---

    @contextlib.contextmanager
    def _routes(self, host: str) -> Iterator[IPRoute | NetNS]:
        if host == HOST:
            yield self._ipr
        else:
            with NetNS(self._namespaces[host]) as ns:
                yield ns

    def _blackhole(self, host: str, other: str, command: str) -> None:
        with self._routes(host) as r:
            r.route(command, dst=f"{self._addresses[other]}/32", type="blackhole")

    def cut(self, a: str, b: str) -> None:
        """``a`` and ``b`` (host names or :data:`HOST`) no longer reach each other, both ways."""
        if a == b:
            raise ValueError(f"cannot cut {a} from itself")
        pair = (min(a, b), max(a, b))
        if pair in self._cuts:
            return
        self._blackhole(a, b, "add")
        self._blackhole(b, a, "add")
        self._cuts.add(pair)

    def cut_off(self, host: str, others: Sequence[str]) -> None:
        """:meth:`cut` ``host`` from each of ``others``."""
        for other in others:
            self.cut(host, other)

    def isolate(self, host: str) -> None:
        """``host`` reaches nobody and nobody reaches it (its bridge port goes down)."""
        self._ipr.link("set", index=self._ipr.link_lookup(ifname=self._veths[host])[0], state="down")
        self._isolated.add(host)

    def heal(self) -> None:
        """Undo every :meth:`cut` and :meth:`isolate`."""
        for a, b in sorted(self._cuts):
            self._blackhole(a, b, "del")
            self._blackhole(b, a, "del")
        self._cuts.clear()
        for host in sorted(self._isolated):
            self._ipr.link("set", index=self._ipr.link_lookup(ifname=self._veths[host])[0], state="up")
        self._isolated.clear()

    def close(self) -> None:
        """Remove the namespaces, veths and bridge (the processes in them must be gone)."""
        if self._closed:
            return
        self._closed = True
        for name in self._made:
            with contextlib.suppress(OSError):
                netns.remove(name)
        self._made.clear()
        for ifname in [*self._veths.values(), self._bridge]:
            for index in self._ipr.link_lookup(ifname=ifname):
                with contextlib.suppress(NetlinkError):
                    self._ipr.link("del", index=index)
        self._ipr.close()
