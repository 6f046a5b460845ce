"""Run a program inside a network namespace: ``python -m tests.cluster.netns_exec NS PROGRAM ARGS...``.

Enters the namespace ``NS`` (one of ``ip netns list``, made by :class:`tests.cluster.netlab.NetLab`)
with pyroute2, then replaces itself with ``PROGRAM`` (same pid: a signal to the child reaches the
program). What ``ip netns exec`` does, without the mount namespace it also sets up.
"""

from __future__ import annotations

import os
import sys

from pyroute2 import netns


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: python -m tests.cluster.netns_exec NAMESPACE PROGRAM [ARGS...]")
    netns.setns(argv[0])
    os.execv(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
