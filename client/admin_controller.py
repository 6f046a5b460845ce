"""Admin calls against controllers (upstream ``DefaultMQAdminExt`` controller methods), trio-native.

::

    async with RemotingClient() as rc:
        ctl = ControllerAdmin(rc, "127.0.0.1:9878;127.0.0.1:9868")
        meta = await ctl.get_metadata()
        info = await ctl.get_in_sync_state_data(["broker-a"])

``controllers`` lists one or more peers of a controller group (``;``-separated, as mqadmin's ``-a``).
Leader-only requests follow the leader: ask a peer for CONTROLLER_GET_METADATA_INFO, send to the
leader it names, and when the answer is CONTROLLER_NOT_LEADER or the leader cannot be reached (an
election under way), ask again and retry — until the admin timeout. Upstream's tool asks the first
address once and gives up; following the leader is what brokers do and what an operator wants.

A non-zero final response code raises :class:`~client.admin.AdminError`; transport failures raise
:class:`remoting.errors.RemotingError` subclasses.

Also here: GET_BROKER_EPOCH_CACHE (a broker request, for ``getBrokerEpoch``) and its body
:class:`EpochEntryCache` (upstream ``EpochEntryCache`` / ``EpochEntry``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import msgspec
import trio

from client.admin import AdminError, parse_namesrv_addrs, properties_text
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.fastjson import FastjsonError
from remoting.headers import CommandHeader, HeaderError, decode_header, encode_header
from remoting.protocol.controller import (
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntry,
    EpochEntryCache,
    GetMetaDataResponseHeader,
)

__all__ = [
    "EPOCH_NOT_SUPPORTED",
    "ControllerAdmin",
    "EpochEntry",
    "EpochEntryCache",
    "get_broker_epoch_cache",
    "parse_properties_body",
]

log = logging.getLogger("client.admin")

H = TypeVar("H", bound=CommandHeader)

#: Pause between leader look-ups while the controllers elect one.
LEADER_RETRY_PAUSE = 0.1
#: Longest single request while following the leader (the overall admin timeout bounds the rest).
PER_CALL_TIMEOUT = 3.0

EPOCH_NOT_SUPPORTED = (
    "the broker does not serve GET_BROKER_EPOCH_CACHE (1007): it answered REQUEST_CODE_NOT_SUPPORTED "
    "(not a controller-mode broker of this version)"
)


def parse_properties_body(data: bytes) -> dict[str, str]:
    """A ``key=value`` per line body (GET_CONTROLLER_CONFIG / GET_BROKER_CONFIG) as a dict, in order."""
    out: dict[str, str] = {}
    for line in data.decode("utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


def _peers_of(meta: GetMetaDataResponseHeader) -> list[str]:
    """Addresses from the ``peers`` field (``n0:127.0.0.1:9878;n1:...;``)."""
    out = []
    for item in (meta.peers or "").split(";"):
        _, sep, address = item.partition(":")
        if sep and address:
            out.append(address)
    return out


class ControllerAdmin:
    """Admin operations on one controller group (see the module docstring)."""

    def __init__(self, client: RemotingClient, controllers: str | list[str], *, timeout: float = 5.0) -> None:
        self.client = client
        self.addresses = parse_namesrv_addrs(controllers)
        if not self.addresses:
            raise ValueError("no controller address given")
        self.timeout = timeout
        self._leader: str | None = None

    async def _invoke(self, address: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        return await self.client.invoke(address, cmd, max(0.05, min(timeout, PER_CALL_TIMEOUT)))

    # --- any peer -------------------------------------------------------------------------------

    async def get_metadata(self, address: str | None = None) -> GetMetaDataResponseHeader:
        """CONTROLLER_GET_METADATA_INFO from ``address``, or from the first peer of the list that answers."""
        candidates = [address] if address is not None else self.addresses
        last: Exception | None = None
        for addr in candidates:
            try:
                response = await self._invoke(
                    addr, request(RequestCode.CONTROLLER_GET_METADATA_INFO), self.timeout
                )
            except RemotingError as e:
                log.debug("controller %s unreachable: %s", addr, e)
                last = e
                continue
            if response.code != ResponseCode.SUCCESS:
                raise AdminError(response.code, response.remark, addr)
            return self._decode(response, GetMetaDataResponseHeader, addr)
        assert last is not None
        raise last

    async def get_controller_config(self) -> dict[str, dict[str, str]]:
        """GET_CONTROLLER_CONFIG from every listed peer: address → its config."""
        out: dict[str, dict[str, str]] = {}
        for addr in self.addresses:
            response = await self._invoke(addr, request(RequestCode.GET_CONTROLLER_CONFIG), self.timeout)
            if response.code != ResponseCode.SUCCESS:
                raise AdminError(response.code, response.remark, addr)
            out[addr] = parse_properties_body(response.body_bytes)
        return out

    async def update_controller_config(self, properties: dict[str, str]) -> None:
        """UPDATE_CONTROLLER_CONFIG to every listed peer (each keeps its own config).

        As upstream's ``updateControllerConfig``: every peer is asked even after one refuses (a
        black-listed key: NO_PERMISSION), then the last refusal is raised as AdminError; a peer that
        cannot be reached raises at once.
        """
        body = properties_text(properties)
        refused: AdminError | None = None
        for addr in self.addresses:
            response = await self._invoke(
                addr, request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=body), self.timeout
            )
            if response.code != ResponseCode.SUCCESS:
                refused = AdminError(response.code, response.remark, addr)
        if refused is not None:
            raise refused

    # --- following the leader -------------------------------------------------------------------

    async def leader_address(self) -> str:
        """The leader's address as the peers report it (waits, within the timeout, for an election)."""
        with trio.move_on_after(self.timeout):
            while True:
                leader = await self._find_leader()
                if leader is not None:
                    return leader
                await trio.sleep(LEADER_RETRY_PAUSE)
        raise RemotingTimeoutError(
            f"no controller leader known to {';'.join(self.addresses)} within {self.timeout}s"
        )

    async def _find_leader(self) -> str | None:
        """The leader's address as a peer names it; None while none does. ValueError when every
        address answered that it does not handle the metadata request: none is a controller (a
        name server's or a broker's address given for the controllers'), so waiting cannot help."""
        seen: list[str] = list(self.addresses)
        refusals: list[AdminError] = []
        i = 0
        while i < len(seen):
            addr = seen[i]
            i += 1
            try:
                meta = await self.get_metadata(addr)
            except (RemotingError, AdminError) as e:
                log.debug("no metadata from controller %s: %s", addr, e)
                if isinstance(e, AdminError) and e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    refusals.append(e)
                continue
            if meta.controllerLeaderAddress:
                return meta.controllerLeaderAddress
            seen.extend(a for a in _peers_of(meta) if a not in seen)
        if refusals and len(refusals) == len(seen):
            raise ValueError(f"not a controller: {refusals[0]}")
        return None

    async def call_leader(self, make: Callable[[], RemotingCommand]) -> RemotingCommand:
        """Send ``make()`` to the leader, following it across "not leader" answers and unreachable
        leaders until the timeout; returns the leader's response (any other code included)."""
        last: Exception | None = None
        hint = self._leader
        with trio.move_on_after(self.timeout) as scope:
            while True:
                leader = hint or await self._find_leader()
                hint = None
                if leader is None:
                    await trio.sleep(LEADER_RETRY_PAUSE)
                    continue
                remaining = scope.deadline - trio.current_time()
                try:
                    response = await self._invoke(leader, make(), remaining)
                except RemotingError as e:
                    log.debug("controller leader %s unreachable: %s", leader, e)
                    last = e
                    self._leader = None
                    await trio.sleep(LEADER_RETRY_PAUSE)
                    continue
                if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    self._leader = leader
                    return response
                last = AdminError(response.code, response.remark, leader)
                named = (response.ext_fields or {}).get("controllerLeaderAddress")
                hint = named if named and named != leader else None
                if hint is None:
                    await trio.sleep(LEADER_RETRY_PAUSE)
        if last is None:
            last = RemotingTimeoutError(f"no controller leader found within {self.timeout}s")
        raise last

    async def _leader_call(self, make: Callable[[], RemotingCommand]) -> RemotingCommand:
        response = await self.call_leader(make)
        if response.code != ResponseCode.SUCCESS:
            raise AdminError(response.code, response.remark, self._leader or "controller")
        return response

    # --- leader-only requests -------------------------------------------------------------------

    async def get_in_sync_state_data(self, broker_names: list[str]) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA for ``broker_names`` (upstream ``getInSyncStateData``)."""
        body = msgspec.json.encode(list(broker_names))
        response = await self._leader_call(
            lambda: request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=body)
        )
        try:
            return BrokerReplicasInfo.decode(response.body_bytes)
        except (FastjsonError, msgspec.ValidationError) as e:
            raise AdminError(
                ResponseCode.SYSTEM_ERROR, f"bad BrokerReplicasInfo body: {e}", self._leader or ""
            ) from None

    async def elect_master(
        self, cluster: str, broker_name: str, broker_id: int
    ) -> tuple[ElectMasterResponseHeader, ElectMasterResponseBody | None]:
        """Admin-triggered (designated) CONTROLLER_ELECT_MASTER of ``broker_id``."""
        ext = dict(encode_header(ElectMasterRequestHeader.of_admin_trigger(cluster, broker_name, broker_id)))
        response = await self._leader_call(lambda: request(RequestCode.CONTROLLER_ELECT_MASTER, dict(ext)))
        addr = self._leader or ""
        header = self._decode(response, ElectMasterResponseHeader, addr)
        body = None
        if response.body:
            try:
                body = ElectMasterResponseBody.decode(response.body_bytes)
            except (FastjsonError, msgspec.ValidationError) as e:
                raise AdminError(
                    ResponseCode.SYSTEM_ERROR, f"bad ElectMasterResponseBody: {e}", addr
                ) from None
        return header, body

    async def clean_broker_data(
        self, cluster: str | None, broker_name: str, broker_ids: str | None, clean_living: bool
    ) -> None:
        """CLEAN_BROKER_DATA; ``broker_ids`` is ``"1;2"`` (None: the whole broker set)."""
        ext = dict(
            encode_header(
                CleanControllerBrokerDataRequestHeader(
                    clusterName=cluster,
                    brokerName=broker_name,
                    brokerControllerIdsToClean=broker_ids,
                    isCleanLivingBroker=clean_living,
                )
            )
        )
        await self._leader_call(lambda: request(RequestCode.CLEAN_BROKER_DATA, dict(ext)))

    @staticmethod
    def _decode(response: RemotingCommand, cls: type[H], addr: str) -> H:
        try:
            return decode_header(response, cls)
        except HeaderError as e:
            raise AdminError(ResponseCode.SYSTEM_ERROR, f"bad {cls.__name__}: {e}", addr) from None


async def get_broker_epoch_cache(
    client: RemotingClient, broker_addr: str, timeout: float = 5.0
) -> EpochEntryCache:
    """GET_BROKER_EPOCH_CACHE from a broker; a broker that does not serve it raises a clear AdminError."""
    response = await client.invoke(broker_addr, request(RequestCode.GET_BROKER_EPOCH_CACHE), timeout)
    if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        raise AdminError(response.code, EPOCH_NOT_SUPPORTED, broker_addr)
    if response.code != ResponseCode.SUCCESS:
        raise AdminError(response.code, response.remark, broker_addr)
    try:
        return EpochEntryCache.decode(response.body_bytes)
    except (FastjsonError, msgspec.ValidationError) as e:
        raise AdminError(ResponseCode.SYSTEM_ERROR, f"bad EpochEntryCache body: {e}", broker_addr) from None
