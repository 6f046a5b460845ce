"""The controller-mode requests a broker serves (upstream: the controller parts of
``AdminBrokerProcessor``), and the creation of its :class:`~broker.replicas_manager.ReplicasManager`.

* GET_BROKER_EPOCH_CACHE (1007): the epoch file's entries and the commit log's max offset
  (:class:`EpochEntryCache`); SYSTEM_ERROR ``this request only for controllerMode `` otherwise.
* NOTIFY_BROKER_ROLE_CHANGED (1008, oneway from the controller leader): header
  ``{masterAddress, masterEpoch, syncStateSetEpoch, masterBrokerId}``, body the SyncStateSet; the
  manager acts on it in the background. Answered SUCCESS (as upstream) whether or not it changed
  anything; a broker without a manager ignores it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from broker.replicas_manager import ReplicasManager
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.fastjson import FastjsonError
from remoting.headers import HeaderError, decode_header
from remoting.processor import RequestContext
from remoting.protocol.controller import (
    EpochEntry,
    EpochEntryCache,
    NotifyBrokerRoleChangedRequestHeader,
    SyncStateSet,
)

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from remoting.connection import ProcessorTable

CONTROLLER_MODE_ONLY = "this request only for controllerMode "


def epoch_entry_cache(broker: BrokerController) -> EpochEntryCache:
    """What GET_BROKER_EPOCH_CACHE answers for ``broker`` (``brokerId`` is its current role id)."""
    bc = broker.broker_config
    return EpochEntryCache(
        clusterName=bc.brokerClusterName,
        brokerName=bc.brokerName,
        brokerId=bc.brokerId,
        epochList=[
            EpochEntry(epoch=e.epoch, startOffset=e.start_offset, endOffset=e.end_offset)
            for e in broker.store.epoch_file.entries()
        ],
        maxOffset=broker.store.max_phy_offset,
    )


def register(broker: BrokerController, table: ProcessorTable) -> None:
    """Create ``broker.replicas_manager`` (controller mode with ``controllerAddr``; without one the
    roles are set by hand, see broker/replication.py) and serve 1007 and 1008 on ``table``."""
    bc = broker.broker_config
    manager = ReplicasManager(broker) if bc.enableControllerMode and bc.controller_addr_list else None
    broker.replicas_manager = manager

    async def get_broker_epoch_cache(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        if not bc.enableControllerMode:
            return cmd.response(ResponseCode.SYSTEM_ERROR, CONTROLLER_MODE_ONLY)
        response = cmd.response(ResponseCode.SUCCESS)
        response.body = epoch_entry_cache(broker).encode()
        return response

    async def notify_broker_role_changed(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        if manager is None:
            return cmd.response(ResponseCode.SUCCESS)
        try:
            header = decode_header(cmd, NotifyBrokerRoleChangedRequestHeader)
            sss = SyncStateSet.decode(cmd.body_bytes) if cmd.body else SyncStateSet()
        except (HeaderError, FastjsonError, msgspec.ValidationError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad NOTIFY_BROKER_ROLE_CHANGED: {e}")
        if not manager.role_changed_notified(header, sss):
            return cmd.response(ResponseCode.SYSTEM_ERROR, "the broker's replicas manager is not running")
        return cmd.response(ResponseCode.SUCCESS)

    table.register(RequestCode.GET_BROKER_EPOCH_CACHE, get_broker_epoch_cache)
    table.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, notify_broker_role_changed)
