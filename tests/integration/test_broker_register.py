"""Broker registration with name servers that are not there yet: the broker asks again within
seconds (not at the next 30 s period), so a master becomes routable as soon as its name server is."""

from __future__ import annotations

import logging
import os
import time

import pytest
import trio

from broker.controller import ROUTE_WAIT_S, BrokerController
from broker.outer_api import BrokerIdentity
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import RequestContext
from remoting.protocol.common import TopicConfigAndMappingSerializeWrapper
from remoting.protocol.namesrv import RegisterBrokerBody
from remoting.server import RemotingServer
from tests.cluster.harness import quiet_ports, silent_peer
from tests.integration.broker_env import BROKER_NAME, CLUSTER, broker_configs, broker_env, wait_until
from tests.integration.broker_requests import send_ok, send_request


async def test_registration_is_retried_soon_when_the_name_server_comes_up_late(
    tmp_path: os.PathLike[str],
) -> None:
    root = os.fspath(tmp_path)
    port = quiet_ports(1)  # nobody listens there yet: the first registration fails
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


async def test_a_new_topic_is_registered_alone_and_a_deletion_with_the_whole_table(
    tmp_path: os.PathLike[str],
) -> None:
    # upstream's registerIncrementBrokerData: sending the whole table for every new topic cost the
    # broker and the name servers time in proportion to the number of topics
    async with broker_env(tmp_path) as env:
        registered: list[set[str]] = []
        table = env.namesrv.processor_table
        inner = table.get(RequestCode.REGISTER_BROKER)
        assert inner is not None

        async def recording(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
            body = RegisterBrokerBody.decode(cmd.body_bytes)
            registered.append(set(body.topicConfigSerializeWrapper.topicConfigTable))
            return await inner(ctx, cmd)

        table.register(RequestCode.REGISTER_BROKER, recording)
        everything = set(env.broker.topics.table)
        for topic in ("IncrementA", "IncrementB"):
            fields = {"topic": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
            response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
            assert response.code == ResponseCode.SUCCESS, response.remark
            await wait_until(lambda t=topic: t in env.namesrv.routes.topicQueueTable, what=f"{topic} routed")
        assert registered == [{"IncrementA"}, {"IncrementB"}]
        # a burst: topics asked for while a round writes topics.json go with the next round, and
        # no round sends the whole table (it did for the wake-up those left behind)
        burst = [f"Burst{i}" for i in range(40)]
        async with trio.open_nursery() as nursery:
            for topic in burst:
                fields = {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
                nursery.start_soon(env.call, request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
        await wait_until(
            lambda: all(t in env.namesrv.routes.topicQueueTable for t in burst), what="the burst routed"
        )
        assert set().union(*registered[2:]) == set(burst)
        del registered[2:]
        response = await env.call(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "IncrementA"}))
        assert response.code == ResponseCode.SUCCESS, response.remark
        await wait_until(lambda: len(registered) == 3, what="the registration after the deletion")
        assert registered[2] == everything | {"IncrementB"} | set(burst)


async def test_a_topic_is_routed_when_the_send_that_created_it_or_its_update_is_answered(
    tmp_path: os.PathLike[str],
) -> None:
    # upstream registers a topic it creates before it answers: a test that starts a consumer as
    # soon as its first send returned must find the route (the official clients look again only
    # after their 30 s poll). Asserted without waiting: the answer itself is the moment
    async with broker_env(tmp_path) as env:
        routes = env.namesrv.routes.topicQueueTable
        for i in range(5):
            await send_ok(env, send_request(f"CreatedBySend{i}"))
            assert f"CreatedBySend{i}" in routes
            fields = {"topic": f"CreatedByAdmin{i}", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
            response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert f"CreatedByAdmin{i}" in routes
        # a second send to a routed topic does not wait for anything
        assert "CreatedBySend0" not in env.broker.unrouted


async def test_a_name_server_that_does_not_answer_holds_back_no_other(tmp_path: os.PathLike[str]) -> None:
    # the second name server takes connections and never answers (its host went dark after the
    # connection was made). Each name server has a register loop of its own: a new topic reaches
    # the one that answers while a registration with the silent one is outstanding -- with one
    # loop for both it waited for that registration's timeout -- and once a registration with the
    # silent one has failed, a send that creates a topic is answered without waiting for it
    async with (
        silent_peer() as (silent, _accepted),
        broker_env(tmp_path, more_namesrvs=[silent], registerBrokerTimeoutMills=3000) as env,
    ):
        routes = env.namesrv.routes.topicQueueTable
        registration = env.broker.registrations[silent]
        assert not registration.failing  # its first registration is still outstanding
        fields = {"topic": "WhileOutstanding", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(env.call, request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
            await wait_until(
                lambda: "WhileOutstanding" in routes, 0.5, "the topic routed by the live name server"
            )
        assert not registration.failing, "the test took longer than the silent registration's timeout"
        await wait_until(lambda: registration.failing, 5, "the silent name server's registration failing")
        began = trio.current_time()
        await send_ok(env, send_request("CreatedBySend"))
        waited = trio.current_time() - began
        assert "CreatedBySend" in routes
        assert waited < ROUTE_WAIT_S / 2, f"the send waited {waited:.3f} s for the silent name server"


async def test_a_live_broker_the_name_server_expired_is_routed_again_at_once(
    tmp_path: os.PathLike[str],
) -> None:
    # the name server's liveness clock passes the broker's last registration by more than the
    # broker channel expiry while the broker lives on (the name server's process was stopped for
    # minutes -- a paused VM -- and its scan came before it read the registrations sent meanwhile).
    # As upstream's, the name server closes the expired broker's connection, and a broker whose
    # connection to a name server ends registers again at once: routed again at once, not after
    # up to registerNameServerPeriod
    jump = 0

    def clock() -> int:
        return time.monotonic_ns() // 1_000_000 + jump

    async with broker_env(tmp_path, namesrv_clock=clock, registerNameServerPeriod=60_000) as env:
        brokers = env.namesrv.routes.brokerAddrTable
        jump = 200_000  # past the 120 s expiry
        removed = env.namesrv.scan_not_active_brokers()
        assert [r.brokerAddr for r in removed.removed] == [env.addr]
        assert not brokers.get(BROKER_NAME)
        await wait_until(lambda: bool(brokers.get(BROKER_NAME)), 3.0, "the broker registered again")


async def test_an_expired_broker_closes_no_connection_another_live_broker_registers_over(
    tmp_path: os.PathLike[str],
) -> None:
    # brokers of one process share its connection to a name server: one of them expiring (it
    # stopped registering) must not end the others' registrations with that connection
    async with broker_env(tmp_path, registerNameServerPeriod=60_000) as env:
        other = BrokerIdentity(CLUSTER, "broker-quiet", 0, "127.0.0.1:1", "127.0.0.1:2")
        outer = env.broker.outer
        table = TopicConfigAndMappingSerializeWrapper(topicConfigTable={})
        assert await outer.register_one(env.namesrv_addr, outer.register_request(other, table)) is not None
        live = env.namesrv.routes.brokerLiveTable
        (quiet,) = [k for k in live if k.brokerAddr == other.broker_addr]
        (loud,) = [k for k in live if k.brokerAddr == env.addr]
        assert live[quiet].connection_id == live[loud].connection_id  # one connection for both
        live[quiet].lastUpdateTimestamp -= 200_000
        registered_at = live[loud].lastUpdateTimestamp
        removed = env.namesrv.scan_not_active_brokers()
        assert [r.brokerAddr for r in removed.removed] == [other.broker_addr]
        await trio.sleep(0.3)
        # the connection stayed: the live broker was neither removed nor made to register again
        assert loud in live
        assert live[loud].lastUpdateTimestamp == registered_at


async def test_a_step_of_the_name_servers_wall_clock_expires_no_broker(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # broker liveness is timed on a monotonic clock: the wall clock stepped forward past the 120 s
    # expiry (NTP, a laptop resumed from a suspend) expired every broker at the next scan
    async with broker_env(tmp_path, registerNameServerPeriod=60_000) as env:
        wall_ns = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: wall_ns() + 200_000 * 1_000_000)
        assert env.namesrv.scan_not_active_brokers().removed == []
        assert env.namesrv.routes.brokerAddrTable.get(BROKER_NAME)


async def test_a_name_server_added_to_namesrvAddr_at_run_time_is_registered_with_at_once(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path, registerNameServerPeriod=60_000) as env, trio.open_nursery() as nursery:
        second = NamesrvController(NamesrvConfig(kvConfigPath=os.path.join(os.fspath(tmp_path), "kv2.json")))
        await nursery.start(second.run)
        server = RemotingServer(name="second-namesrv")
        listener = await server.add_listener("127.0.0.1", 0, second.processor_table, name="namesrv2")
        await nursery.start(server.run)
        addrs = f"{env.namesrv_addr};127.0.0.1:{listener.port}"
        body = f"namesrvAddr={addrs}\n".encode()
        response = await env.call(request(RequestCode.UPDATE_BROKER_CONFIG, body=body))
        assert response.code == ResponseCode.SUCCESS, response.remark
        await wait_until(
            lambda: bool(second.routes.brokerAddrTable.get(BROKER_NAME)), 3.0, "the added name server routing"
        )
        assert env.broker.broker_config.namesrvAddr == addrs
        # a typo is refused, the list stays
        typo = f"namesrvAddr={env.namesrv_addr};127.0.0.1\n".encode()
        response = await env.call(request(RequestCode.UPDATE_BROKER_CONFIG, body=typo))
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert "'127.0.0.1' is not host:port" in (response.remark or "")
        assert env.broker.broker_config.namesrvAddr == addrs
        nursery.cancel_scope.cancel()


async def test_the_boot_line_comes_when_one_of_two_name_servers_is_down(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    # upstream says it after its first registration round, whatever the answers; it waited here
    # for every name server to take a registration, so a cluster started while one of its name
    # servers was down never said it (scripts and fixtures wait for the line)
    down = f"127.0.0.1:{quiet_ports(1)}"  # nobody listens: the registration is refused
    with caplog.at_level(logging.INFO, logger="broker"):
        async with broker_env(tmp_path, more_namesrvs=[down]) as env:
            registration = env.broker.registrations[down]
            await wait_until(lambda: registration.failing, 5.0, "the registration with the down one failing")
            lines = [r.getMessage() for r in caplog.records if "boot success" in r.getMessage()]
            assert lines == [
                f"The broker[{BROKER_NAME}, {env.addr}] boot success. serializeType=JSON and name server is "
                f"{env.namesrv_addr};{down}"
            ]
