"""The broker's calls to name servers (upstream ``BrokerOuterAPI``): register, unregister, heartbeat.

A registration is built once (:meth:`BrokerOuterAPI.register_request`) and sent to each name server
on its own (:meth:`BrokerOuterAPI.register_one`): the broker's register loops
(:mod:`broker.controller`) run one per name server, so one that does not answer delays no other.
Results tell the broker its group's master address (a slave replicates from it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import CURRENT_VERSION, RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import decode_header, encode_header
from remoting.protocol.common import TopicConfigAndMappingSerializeWrapper
from remoting.protocol.message import crc32_masked
from remoting.protocol.namesrv import (
    BrokerHeartbeatRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)


@dataclass
class BrokerIdentity:
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str


@dataclass(frozen=True)
class RegisterRequest:
    """A REGISTER_BROKER's header fields and body (see :meth:`BrokerOuterAPI.register_request`)."""

    ext_fields: dict[str, str]
    body: bytes


@dataclass
class RegisterResult:
    namesrv: str
    master_addr: str | None
    ha_server_addr: str | None


def split_addrs(addrs: str | None) -> list[str]:
    """``namesrvAddr``/``controllerAddr`` lists are ``;``-separated."""
    return [a.strip() for a in (addrs or "").split(";") if a.strip()]


class BrokerOuterAPI:
    def __init__(
        self, client: object, *, timeout_ms: int = 24000, logger: logging.Logger | None = None
    ) -> None:
        self.client = client  # remoting.client.RemotingClient
        self.timeout = timeout_ms / 1000
        self.log = logger or logging.getLogger("broker")

    def register_request(
        self,
        me: BrokerIdentity,
        topics: TopicConfigAndMappingSerializeWrapper,
        *,
        heartbeat_timeout_ms: int | None = None,
        enable_acting_master: bool = False,
    ) -> RegisterRequest:
        """A REGISTER_BROKER of ``topics``, encoded once for every name server it goes to."""
        body = RegisterBrokerBody(topicConfigSerializeWrapper=topics).encode()
        header = RegisterBrokerRequestHeader(
            brokerName=me.broker_name,
            brokerAddr=me.broker_addr,
            clusterName=me.cluster,
            haServerAddr=me.ha_addr,
            brokerId=me.broker_id,
            heartbeatTimeoutMillis=heartbeat_timeout_ms,
            enableActingMaster=enable_acting_master,
            compressed=False,
            bodyCrc32=crc32_masked(body),
        )
        return RegisterRequest(encode_header(header), body)

    async def register_one(self, addr: str, req: RegisterRequest) -> RegisterResult | None:
        """Send ``req`` to the name server ``addr``; its answer, or None (logged) when it did not
        answer in time or refused."""
        cmd = RemotingCommand(
            code=RequestCode.REGISTER_BROKER,
            ext_fields=dict(req.ext_fields),
            body=req.body,
            version=CURRENT_VERSION,
        )
        try:
            resp = await self.client.invoke(addr, cmd, self.timeout)  # type: ignore[attr-defined]
        except RemotingError as e:
            self.log.warning("register to name server %s failed: %s", addr, e)
            return None
        if resp.code != ResponseCode.SUCCESS:
            self.log.warning("register to name server %s refused: %s %s", addr, resp.code, resp.remark)
            return None
        rh = decode_header(resp, RegisterBrokerResponseHeader)
        return RegisterResult(addr, rh.masterAddr or None, rh.haServerAddr or None)

    async def register_all(
        self,
        namesrvs: list[str],
        req: RegisterRequest,
        *,
        on_result: Callable[[RegisterResult], None] | None = None,
    ) -> list[RegisterResult]:
        """Send ``req`` to every name server of ``namesrvs`` concurrently; the answers of those
        that took it, once all answered or failed. ``on_result`` sees each answer as it comes."""
        results: list[RegisterResult] = []

        async def one(addr: str) -> None:
            result = await self.register_one(addr, req)
            if result is not None:
                results.append(result)
                if on_result is not None:
                    on_result(result)

        async with trio.open_nursery() as n:
            for addr in namesrvs:
                n.start_soon(one, addr)
        return results

    async def unregister_all(self, namesrvs: list[str], me: BrokerIdentity) -> None:
        header = UnRegisterBrokerRequestHeader(
            brokerName=me.broker_name,
            brokerAddr=me.broker_addr,
            clusterName=me.cluster,
            brokerId=me.broker_id,
        )

        async def one(addr: str) -> None:
            cmd = RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=encode_header(header))
            try:
                await self.client.invoke(addr, cmd, min(self.timeout, 3.0))  # type: ignore[attr-defined]
            except RemotingError as e:
                self.log.info("unregister from name server %s failed: %s", addr, e)

        async with trio.open_nursery() as n:
            for addr in namesrvs:
                n.start_soon(one, addr)

    async def heartbeat_all(
        self, namesrvs: list[str], me: BrokerIdentity, timeout_ms: int, heartbeat_timeout_ms: int
    ) -> None:
        header = BrokerHeartbeatRequestHeader(
            clusterName=me.cluster, brokerAddr=me.broker_addr, brokerName=me.broker_name, brokerId=me.broker_id,
            heartbeatTimeoutMills=heartbeat_timeout_ms,
        )  # fmt: skip

        async def one(addr: str) -> None:
            cmd = RemotingCommand(code=RequestCode.BROKER_HEARTBEAT, ext_fields=encode_header(header))
            try:
                await self.client.invoke_oneway(addr, cmd)  # type: ignore[attr-defined]
            except RemotingError as e:
                self.log.debug("heartbeat to name server %s failed: %s", addr, e)

        with trio.move_on_after(timeout_ms / 1000):
            async with trio.open_nursery() as n:
                for addr in namesrvs:
                    n.start_soon(one, addr)
