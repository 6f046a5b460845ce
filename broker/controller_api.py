"""The broker's calls to the controllers (upstream: the controller half of ``BrokerOuterAPI``).

``controllerAddr`` lists every controller peer (``;``-separated). Heartbeats go to all of them
(each peer keeps its own liveness table); every other call goes to the leader:

* the leader is learned with CONTROLLER_GET_METADATA_INFO (any peer answers and names it), asked of
  all peers at once; :meth:`ControllerAPI.refresh_leader` is called every ``syncControllerMetadataPeriod``
  and whenever a call needs it;
* a CONTROLLER_NOT_LEADER answer carries the leader's address in ``controllerLeaderAddress`` when the
  peer knows it (the next attempt goes there), otherwise the peers are asked again;
* an unreachable leader is forgotten and the peers are asked again.

Each call is bounded by ``timeout``; a call that cannot reach a leader in time raises
:class:`ControllerUnavailable`, a leader's refusal raises :class:`ControllerError` with its code.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TypeVar

import msgspec
import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.fastjson import FastjsonError
from remoting.headers import CommandHeader, HeaderError, decode_header, encode_header
from remoting.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)

H = TypeVar("H", bound=CommandHeader)

#: Pause before asking the peers again while they elect a leader.
LEADER_RETRY_PAUSE = 0.05


class ControllerError(Exception):
    """The controller leader answered with a non-success code."""

    def __init__(self, code: int, remark: str | None, address: str) -> None:
        self.code = code
        self.remark = remark
        self.address = address
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"controller {address} answered {name}: {remark}")


class ControllerUnavailable(Exception):
    """No controller leader could be reached within the call's timeout."""


class ControllerAPI:
    """Calls from one broker to its controller group (see the module docstring)."""

    def __init__(
        self,
        client: object,
        addresses: list[str],
        *,
        timeout: float = 3.0,
        logger: logging.Logger | None = None,
    ) -> None:
        self.client = client  # remoting.client.RemotingClient
        self.addresses = list(addresses)
        self.timeout = timeout
        self.log = logger or logging.getLogger("broker.controller_api")
        #: Address of the leader as last learned (None: unknown).
        self.leader: str | None = None

    # ------------------------------------------------------------------ leader discovery

    async def metadata(self, address: str, timeout: float) -> GetMetaDataResponseHeader | None:
        """CONTROLLER_GET_METADATA_INFO from one peer (None when it cannot be reached or refuses)."""
        cmd = RemotingCommand(code=RequestCode.CONTROLLER_GET_METADATA_INFO)
        try:
            response = await self.client.invoke(address, cmd, timeout)  # type: ignore[attr-defined]
            if response.code != ResponseCode.SUCCESS:
                self.log.debug(
                    "controller %s refused metadata: %s %s", address, response.code, response.remark
                )
                return None
            return decode_header(response, GetMetaDataResponseHeader)
        except (RemotingError, HeaderError) as e:
            self.log.debug("no metadata from controller %s: %s", address, e)
            return None

    async def refresh_leader(self, timeout: float | None = None) -> str | None:
        """Ask every peer at once who leads; remember and return the answer (None: nobody knows).

        A peer that says it leads wins; otherwise the address most peers name.
        """
        answers: dict[str, GetMetaDataResponseHeader] = {}
        per_call = self.timeout if timeout is None else timeout

        async def ask(address: str) -> None:
            meta = await self.metadata(address, per_call)
            if meta is not None:
                answers[address] = meta

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(ask, address)
        leader = pick_leader(answers)
        if leader != self.leader:
            self.log.info("controller leader is now %s (was %s)", leader, self.leader)
        self.leader = leader
        return leader

    # ------------------------------------------------------------------ leader calls

    async def call_leader(
        self, code: int, header: CommandHeader | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        """Send a leader-only request, following the leader; returns the leader's response whatever
        its code (except CONTROLLER_NOT_LEADER, which is followed). Raises ControllerUnavailable."""
        ext = encode_header(header) if header is not None else None
        last: str = "no leader known"
        with trio.move_on_after(self.timeout) as scope:
            hint: str | None = self.leader
            while True:
                leader = hint or await self.refresh_leader(min(1.0, self.timeout))
                hint = None
                if leader is None:
                    await trio.sleep(LEADER_RETRY_PAUSE)
                    continue
                cmd = RemotingCommand(code=code, ext_fields=dict(ext) if ext else None, body=body)
                remaining = max(0.05, scope.deadline - trio.current_time())
                try:
                    response = await self.client.invoke(leader, cmd, remaining)  # type: ignore[attr-defined]
                except RemotingError as e:
                    last = f"leader {leader} unreachable: {e}"
                    self.log.debug("%s", last)
                    if self.leader == leader:
                        self.leader = None
                    await trio.sleep(LEADER_RETRY_PAUSE)
                    continue
                if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    self.leader = leader
                    return response
                named = (response.ext_fields or {}).get("controllerLeaderAddress")
                last = f"{leader} is not the leader (it names {named})"
                if self.leader == leader:
                    self.leader = None
                if named and named != leader:
                    hint = named
                else:
                    await trio.sleep(LEADER_RETRY_PAUSE)
        assert scope.cancelled_caught
        raise ControllerUnavailable(f"no controller leader answered within {self.timeout}s ({last})")

    async def _ok(self, code: int, header: CommandHeader, body: bytes | None = None) -> RemotingCommand:
        response = await self.call_leader(code, header, body)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(response.code, response.remark, self.leader or "?")
        return response

    def _header(self, response: RemotingCommand, cls: type[H]) -> H:
        try:
            return decode_header(response, cls)
        except HeaderError as e:
            raise ControllerError(
                ResponseCode.SYSTEM_ERROR, f"bad {cls.__name__}: {e}", self.leader or "?"
            ) from None

    def _sync_state_set(self, response: RemotingCommand) -> SyncStateSet:
        if not response.body:
            return SyncStateSet()
        try:
            return SyncStateSet.decode(response.body_bytes)
        except (FastjsonError, msgspec.ValidationError) as e:
            raise ControllerError(
                ResponseCode.SYSTEM_ERROR, f"bad SyncStateSet body: {e}", self.leader or "?"
            ) from None

    # ------------------------------------------------------------------ the calls

    async def get_next_broker_id(self, cluster: str, broker_name: str) -> int:
        """CONTROLLER_GET_NEXT_BROKER_ID."""
        header = GetNextBrokerIdRequestHeader(clusterName=cluster, brokerName=broker_name)
        response = await self._ok(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, header)
        next_id = self._header(response, GetNextBrokerIdResponseHeader).nextBrokerId
        if next_id is None:
            raise ControllerError(
                ResponseCode.SYSTEM_ERROR, "no nextBrokerId in the answer", self.leader or "?"
            )
        return next_id

    async def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int, check_code: str) -> None:
        """CONTROLLER_APPLY_BROKER_ID; raises ControllerError (CONTROLLER_BROKER_ID_INVALID) on refusal."""
        header = ApplyBrokerIdRequestHeader(
            clusterName=cluster,
            brokerName=broker_name,
            appliedBrokerId=broker_id,
            registerCheckCode=check_code,
        )
        await self._ok(RequestCode.CONTROLLER_APPLY_BROKER_ID, header)

    async def register_broker(
        self, cluster: str, broker_name: str, broker_id: int, broker_addr: str, now_ms: int
    ) -> tuple[RegisterBrokerToControllerResponseHeader, SyncStateSet]:
        """CONTROLLER_REGISTER_BROKER: the master (when one is alive) and the SyncStateSet."""
        header = RegisterBrokerToControllerRequestHeader(
            clusterName=cluster,
            brokerName=broker_name,
            brokerId=broker_id,
            brokerAddress=broker_addr,
            invokeTime=now_ms,
        )
        response = await self._ok(RequestCode.CONTROLLER_REGISTER_BROKER, header)
        return self._header(response, RegisterBrokerToControllerResponseHeader), self._sync_state_set(
            response
        )

    async def get_replica_info(self, broker_name: str) -> tuple[GetReplicaInfoResponseHeader, SyncStateSet]:
        """CONTROLLER_GET_REPLICA_INFO: the recorded master (alive or not) and the SyncStateSet."""
        header = GetReplicaInfoRequestHeader(brokerName=broker_name)
        response = await self._ok(RequestCode.CONTROLLER_GET_REPLICA_INFO, header)
        return self._header(response, GetReplicaInfoResponseHeader), self._sync_state_set(response)

    async def elect_master(
        self, cluster: str, broker_name: str, broker_id: int, now_ms: int
    ) -> tuple[ElectMasterResponseHeader, frozenset[int]]:
        """Broker-triggered CONTROLLER_ELECT_MASTER (own id, not designated). SUCCESS and
        CONTROLLER_MASTER_STILL_EXIST both return the master; other codes raise ControllerError."""
        header = ElectMasterRequestHeader.of_broker_trigger(cluster, broker_name, broker_id)
        header = msgspec.structs.replace(header, invokeTime=now_ms)
        response = await self.call_leader(RequestCode.CONTROLLER_ELECT_MASTER, header)
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            raise ControllerError(response.code, response.remark, self.leader or "?")
        result = self._header(response, ElectMasterResponseHeader)
        members: frozenset[int] = frozenset()
        if response.body:
            try:
                members = ElectMasterResponseBody.decode(response.body_bytes).syncStateSet
            except (FastjsonError, msgspec.ValidationError) as e:
                raise ControllerError(
                    ResponseCode.SYSTEM_ERROR, f"bad ElectMasterResponseBody: {e}", self.leader or "?"
                ) from None
        return result, members

    async def alter_sync_state_set(
        self,
        broker_name: str,
        master_id: int,
        master_epoch: int,
        proposal: frozenset[int],
        sync_state_set_epoch: int,
        now_ms: int,
    ) -> SyncStateSet:
        """CONTROLLER_ALTER_SYNC_STATE_SET (body: the proposal with the *current* set epoch); returns
        the set the controller committed, with its new epoch."""
        header = AlterSyncStateSetRequestHeader(
            brokerName=broker_name, masterBrokerId=master_id, masterEpoch=master_epoch, invokeTime=now_ms
        )
        body = SyncStateSet(syncStateSet=proposal, syncStateSetEpoch=sync_state_set_epoch).encode()
        response = await self._ok(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body)
        return self._sync_state_set(response)

    # ------------------------------------------------------------------ heartbeats (every peer)

    async def heartbeat(
        self, address: str, header: BrokerHeartbeatRequestHeader, timeout: float, *, oneway: bool = True
    ) -> bool:
        """BROKER_HEARTBEAT to one peer; returns whether it was sent (oneway) or acknowledged."""
        cmd = RemotingCommand(code=RequestCode.BROKER_HEARTBEAT, ext_fields=encode_header(header))
        try:
            if oneway:
                await self.client.invoke_oneway(address, cmd, timeout)  # type: ignore[attr-defined]
                return True
            response = await self.client.invoke(address, cmd, timeout)  # type: ignore[attr-defined]
        except RemotingError as e:
            self.log.debug("heartbeat to controller %s failed: %s", address, e)
            return False
        if response.code != ResponseCode.SUCCESS:
            self.log.warning(
                "controller %s refused the heartbeat: %s %s", address, response.code, response.remark
            )
            return False
        return True

    async def heartbeat_all(
        self, header: BrokerHeartbeatRequestHeader, timeout: float, *, oneway: bool = True
    ) -> int:
        """BROKER_HEARTBEAT to every peer at once; returns how many were sent / acknowledged."""
        done = 0

        async def one(address: str) -> None:
            nonlocal done
            if await self.heartbeat(address, header, timeout, oneway=oneway):
                done += 1

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(one, address)
        return done


def pick_leader(answers: dict[str, GetMetaDataResponseHeader]) -> str | None:
    """The leader's address from GET_METADATA_INFO answers (peer address → answer): a peer that says
    it leads and names an address, else the address most peers name; None when nobody names one."""
    for address, meta in answers.items():
        if meta.isLeader:
            return meta.controllerLeaderAddress or address
    named = Counter(m.controllerLeaderAddress for m in answers.values() if m.controllerLeaderAddress)
    if not named:
        return None
    return named.most_common(1)[0][0]
