"""A slave's connection to its master's HA port: the connect gives up after a timeout (upstream's HA
clients: 5 s) instead of riding the kernel's SYN retries for minutes, and the connection carries
the unacknowledged-data timeout the process's other connections have."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from broker.replication import ha_connect
from remoting.client import PEER_UNACKED_TIMEOUT


@contextmanager
def unanswering_port() -> Iterator[str]:
    """An address whose SYNs go unanswered, as a host the network drops packets of: a listener that
    never accepts, its queue (backlog 0) filled by one connection -- the kernel drops further SYNs."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        filler.connect(listener.getsockname())
        host, port = listener.getsockname()
        yield f"{host}:{port}"


async def test_a_connect_nobody_answers_fails_after_the_timeout() -> None:
    with unanswering_port() as address:
        started = trio.current_time()
        with trio.fail_after(10), pytest.raises(TimeoutError, match=r"no answer within 0\.5 s"):
            await ha_connect(address, timeout=0.5)
        assert trio.current_time() - started >= 0.5


@pytest.mark.skipif(not hasattr(socket, "TCP_USER_TIMEOUT"), reason="no TCP_USER_TIMEOUT on this system")
async def test_the_connection_ends_when_what_it_sends_goes_unacknowledged() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        host, port = listener.getsockname()
        stream = await ha_connect(f"{host}:{port}")
        async with stream:
            got = stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
    assert got == round(PEER_UNACKED_TIMEOUT * 1000)
