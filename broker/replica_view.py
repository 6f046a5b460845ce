"""What a controller-mode broker believes about its replica group, and the decisions an answer from
the controller leads to (the pure part of upstream ``ReplicasManager``; no I/O here).

:class:`ReplicaView` holds the broker's controller id, the master it follows (or is), the master
epoch it last acted on, and the SyncStateSet with its epoch. Each function takes the view and what
the controller said and returns the one action to carry out, or None:

* :func:`on_master_info` — an answer that names a master: CONTROLLER_REGISTER_BROKER,
  CONTROLLER_ELECT_MASTER, NOTIFY_BROKER_ROLE_CHANGED (upstream ``changeBrokerRole``): acted on only
  when it carries a master id and a master epoch newer than the one last acted on, so a late or
  duplicated notification never undoes a newer role;
* :func:`on_replica_info` — the periodic CONTROLLER_GET_REPLICA_INFO poll (upstream
  ``schedulingSyncBrokerMetadata``): a newer epoch with a master changes the role, a newer epoch
  without one asks for an election, the same epoch lets the master adopt a newer SyncStateSet and
  a slave follow its master to a new address (not upstream: it waits for a name-server
  registration);
* :func:`newer_sync_state_set` — whether a SyncStateSet (from an accepted
  CONTROLLER_ALTER_SYNC_STATE_SET or a poll) replaces the local one: only with a newer set epoch.

After carrying out an action successfully the caller records it with :func:`record`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class ReplicaView:
    """The broker's view of its group (upstream ``ReplicasManager`` fields)."""

    #: Controller-assigned id (``brokerControllerId``); None until registered.
    broker_controller_id: int | None = None
    master_broker_id: int | None = None
    master_address: str = ""
    #: Master epoch of the last role change carried out (0: none yet).
    master_epoch: int = 0
    sync_state_set: frozenset[int] = field(default_factory=frozenset)
    sync_state_set_epoch: int = 0

    @property
    def is_master(self) -> bool:
        return self.broker_controller_id is not None and self.master_broker_id == self.broker_controller_id


@dataclass(frozen=True)
class ChangeToMaster:
    """Become (or stay, with ``already_master``) master of ``epoch`` with this SyncStateSet."""

    epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    already_master: bool = False


@dataclass(frozen=True)
class ChangeToSlave:
    """Follow master ``master_id`` at ``master_address`` in ``epoch`` (``same_master``: the master did
    not change -- a newer epoch, or the same epoch at a new address)."""

    master_address: str
    epoch: int
    master_id: int
    same_master: bool = False


@dataclass(frozen=True)
class AdoptSyncStateSet:
    """The master keeps its role; its SyncStateSet is replaced by a newer one."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class ElectSelf:
    """The controller records no master for a newer epoch: ask it to elect (broker-triggered)."""


Decision = ChangeToMaster | ChangeToSlave | AdoptSyncStateSet | ElectSelf


def on_master_info(
    view: ReplicaView,
    master_id: int | None,
    master_address: str | None,
    master_epoch: int | None,
    sync_state_set: frozenset[int] = frozenset(),
    sync_state_set_epoch: int = 0,
) -> ChangeToMaster | ChangeToSlave | None:
    """The role to take after an answer naming a master (see the module docstring)."""
    if master_id is None or master_epoch is None or master_epoch <= view.master_epoch:
        return None
    if view.broker_controller_id is not None and master_id == view.broker_controller_id:
        return ChangeToMaster(
            epoch=master_epoch,
            sync_state_set=frozenset(sync_state_set) | {master_id},
            sync_state_set_epoch=sync_state_set_epoch,
            already_master=view.is_master,
        )
    if not master_address:
        return None
    return ChangeToSlave(
        master_address=master_address,
        epoch=master_epoch,
        master_id=master_id,
        same_master=master_id == view.master_broker_id,
    )


def on_replica_info(
    view: ReplicaView,
    master_id: int | None,
    master_address: str | None,
    master_epoch: int | None,
    sync_state_set: frozenset[int],
    sync_state_set_epoch: int,
) -> Decision | None:
    """The action after a CONTROLLER_GET_REPLICA_INFO answer (see the module docstring)."""
    if master_epoch is None:
        return None
    if master_epoch > view.master_epoch:
        if master_id is not None and master_address:
            return on_master_info(
                view, master_id, master_address, master_epoch, sync_state_set, sync_state_set_epoch
            )
        return ElectSelf()
    if (
        master_epoch == view.master_epoch
        and view.is_master
        and master_id == view.broker_controller_id
        and newer_sync_state_set(view, sync_state_set_epoch)
    ):
        return AdoptSyncStateSet(frozenset(sync_state_set), sync_state_set_epoch)
    if (
        master_epoch == view.master_epoch
        and not view.is_master
        and master_id is not None
        and master_id == view.master_broker_id
        and master_address
        and master_address != view.master_address
    ):
        # the master of this epoch restarted on another address before any election (its death
        # unnoticed, or no other replica electable): follow it there now, not at the next
        # name-server registration (upstream's only way, up to registerNameServerPeriod later)
        return ChangeToSlave(
            master_address=master_address, epoch=master_epoch, master_id=master_id, same_master=True
        )
    return None


def newer_sync_state_set(view: ReplicaView, sync_state_set_epoch: int) -> bool:
    """Whether a SyncStateSet of ``sync_state_set_epoch`` replaces the local one (upstream
    ``changeSyncStateSet``: strictly newer only)."""
    return sync_state_set_epoch > view.sync_state_set_epoch


def record(view: ReplicaView, decision: Decision, own_address: str = "") -> ReplicaView:
    """The view after ``decision`` was carried out."""
    if isinstance(decision, ChangeToMaster):
        sss_changed = newer_sync_state_set(view, decision.sync_state_set_epoch)
        return replace(
            view,
            master_broker_id=view.broker_controller_id,
            master_address=own_address,
            master_epoch=decision.epoch,
            sync_state_set=decision.sync_state_set if sss_changed else view.sync_state_set,
            sync_state_set_epoch=decision.sync_state_set_epoch if sss_changed else view.sync_state_set_epoch,
        )
    if isinstance(decision, ChangeToSlave):
        return replace(
            view,
            master_broker_id=decision.master_id,
            master_address=decision.master_address,
            master_epoch=decision.epoch,
        )
    if isinstance(decision, AdoptSyncStateSet):
        if not newer_sync_state_set(view, decision.sync_state_set_epoch):
            return view
        return replace(
            view, sync_state_set=decision.sync_state_set, sync_state_set_epoch=decision.sync_state_set_epoch
        )
    return view
