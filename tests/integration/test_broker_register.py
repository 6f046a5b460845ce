"""Broker registration with name servers that are not there yet: the broker asks again within
seconds (not at the next 30 s period), so a master becomes routable as soon as its name server is."""

from __future__ import annotations

import os
import socket

import trio

from broker.controller import BrokerController
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.server import RemotingServer
from tests.integration.broker_env import BROKER_NAME, broker_configs, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_registration_is_retried_soon_when_the_name_server_comes_up_late(
    tmp_path: os.PathLike[str],
) -> None:
    root = os.fspath(tmp_path)
    port = _free_port()  # nobody listens there yet: the first registration fails
    async with trio.open_nursery() as nursery, RemotingClient(name="register-test") as broker_client:
        server = RemotingServer(name="register-test")
        await nursery.start(server.run)
        bc, sc = broker_configs(root, f"127.0.0.1:{port}", registerNameServerPeriod=30_000)
        broker = BrokerController(bc, sc, client=broker_client)
        await nursery.start(broker.run, server)
        await trio.sleep(0.3)  # the first attempt has failed by now (connection refused)
        namesrv = NamesrvController(NamesrvConfig(kvConfigPath=os.path.join(root, "kvConfig.json")))
        await nursery.start(namesrv.run)
        await server.add_listener("127.0.0.1", port, namesrv.processor_table, name="namesrv")
        # registered by a retry well before the 30 s period
        await wait_until(
            lambda: bool(namesrv.routes.brokerAddrTable.get(BROKER_NAME)), 8.0, "a retried registration"
        )
        nursery.cancel_scope.cancel()
