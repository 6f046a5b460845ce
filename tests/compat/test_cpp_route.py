"""The real C++ client (``rocketmq`` 0.4.4) resolves routes through our name server.

A scripted broker stands in for the broker issue's real one: it only records SEND_MESSAGE and
answers it. What is proved here is the name-server side: the C++ client parses our
GET_ROUTEINFO_BY_TOPIC body (fastjson style: it sends version 63 < 401), connects to the address it
found for broker id 0 and writes to one of the routed queues; an unknown topic ends in the
client's "No route info" error.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import trio

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import ProcessorTable, RequestContext
from remoting.headers import encode_header
from remoting.protocol.common import DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper
from remoting.protocol.namesrv import RegisterBrokerBody, RegisterBrokerRequestHeader
from remoting.server import RemotingServer

rocketmq_client = pytest.importorskip("rocketmq.client")
rocketmq_exceptions = pytest.importorskip("rocketmq.exceptions")

pytestmark = pytest.mark.compat


@dataclass
class FakeBroker:
    sends: list[dict[str, str]] = field(default_factory=list)
    route_versions: list[int] = field(default_factory=list)


@pytest.fixture
async def setup(nursery: trio.Nursery, tmp_path: os.PathLike[str]) -> AsyncIterator[tuple[str, FakeBroker]]:
    controller = NamesrvController(NamesrvConfig(kvConfigPath=os.path.join(tmp_path, "kv.json")))
    await nursery.start(controller.run)
    fake = FakeBroker()
    route_handler = controller.processor_table.get(RequestCode.GET_ROUTEINFO_BY_TOPIC)

    async def route_spy(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        fake.route_versions.append(cmd.version)
        return await route_handler(ctx, cmd)

    controller.processor_table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_spy)

    broker_table = ProcessorTable()

    async def on_send(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        fields = {k: str(v) for k, v in (cmd.ext_fields or {}).items()}
        fake.sends.append(fields)
        return cmd.response(
            ResponseCode.SUCCESS,
            msgId="7F00000100002A9F0000000000000000",
            queueId=fields.get("queueId", "0"),
            queueOffset=str(len(fake.sends) - 1),
            MSG_REGION="DefaultRegion",
            TRACE_ON="true",
        )

    async def ok(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    broker_table.register(RequestCode.SEND_MESSAGE, on_send)
    broker_table.register(RequestCode.HEART_BEAT, ok)
    broker_table.register(RequestCode.UNREGISTER_CLIENT, ok)
    server = RemotingServer(name="compat")
    ns_listener = await server.add_listener("127.0.0.1", 0, controller.processor_table, name="namesrv")
    broker_listener = await server.add_listener("127.0.0.1", 0, broker_table, name="broker")
    await nursery.start(server.run)
    namesrv = f"127.0.0.1:{ns_listener.port}"
    broker_addr = f"127.0.0.1:{broker_listener.port}"

    table = {
        t: TopicConfig(topicName=t, readQueueNums=4, writeQueueNums=4) for t in ("broker-a", "TopicTest")
    }
    body = RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigAndMappingSerializeWrapper(
            topicConfigTable=table, dataVersion=DataVersion(counter=1)
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        brokerName="broker-a",
        brokerAddr=broker_addr,
        clusterName="DefaultCluster",
        haServerAddr="",
        brokerId=0,
    )
    async with RemotingClient() as client:
        reply = await client.invoke(
            namesrv, request(RequestCode.REGISTER_BROKER, dict(encode_header(header)), body), 5
        )
        assert reply.code == ResponseCode.SUCCESS
        yield namesrv, fake


def _produce(namesrv: str, topic: str) -> object:
    producer = rocketmq_client.Producer("PG_COMPAT_ROUTE")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        msg = rocketmq_client.Message(topic)
        msg.set_body(b"hello")
        return producer.send_sync(msg)
    finally:
        producer.shutdown()


async def test_cpp_producer_follows_our_route_to_the_broker(setup: tuple[str, FakeBroker]) -> None:
    namesrv, fake = setup
    with trio.fail_after(60):
        result = await trio.to_thread.run_sync(_produce, namesrv, "TopicTest")
    assert getattr(result, "status", None) == rocketmq_client.SendStatus.OK
    # It asked with an old version (63), so it got and parsed the fastjson body (unquoted ids).
    assert fake.route_versions
    assert all(v < 401 for v in fake.route_versions)
    assert len(fake.sends) == 1
    assert fake.sends[0]["topic"] == "TopicTest"
    assert fake.sends[0]["queueId"] in {"0", "1", "2", "3"}


async def test_cpp_producer_reports_unknown_topic(setup: tuple[str, FakeBroker]) -> None:
    namesrv, fake = setup
    with trio.fail_after(60), pytest.raises(rocketmq_exceptions.ProducerException, match="No route info"):
        await trio.to_thread.run_sync(_produce, namesrv, "NoSuchTopic")
    assert fake.sends == []
