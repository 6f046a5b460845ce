"""The pure decisions of the broker's ReplicasManager: which controller answer changes the role, which
notification wins, when a SyncStateSet is adopted (broker/replica_view.py)."""

from __future__ import annotations

import pytest

from broker.replica_view import (
    AdoptSyncStateSet,
    ChangeToMaster,
    ChangeToSlave,
    ElectSelf,
    ReplicaView,
    on_master_info,
    on_replica_info,
    record,
)

ME, OTHER = 2, 1


def fresh() -> ReplicaView:
    return ReplicaView(broker_controller_id=ME)


def slave_of_other(epoch: int = 3) -> ReplicaView:
    return ReplicaView(
        broker_controller_id=ME, master_broker_id=OTHER, master_address="a:1", master_epoch=epoch
    )


def master(epoch: int = 3, sss_epoch: int = 4) -> ReplicaView:
    return ReplicaView(
        broker_controller_id=ME,
        master_broker_id=ME,
        master_address="me:1",
        master_epoch=epoch,
        sync_state_set=frozenset({ME, OTHER}),
        sync_state_set_epoch=sss_epoch,
    )


def test_first_answer_naming_me_makes_me_master_with_the_set() -> None:
    d = on_master_info(fresh(), ME, "me:1", 1, frozenset({ME}), 1)
    assert d == ChangeToMaster(epoch=1, sync_state_set=frozenset({ME}), sync_state_set_epoch=1)


def test_answer_naming_another_master_makes_me_its_slave() -> None:
    d = on_master_info(fresh(), OTHER, "a:1", 1)
    assert d == ChangeToSlave(master_address="a:1", epoch=1, master_id=OTHER, same_master=False)


@pytest.mark.parametrize("epoch", [1, 3])
def test_notification_with_an_older_or_equal_epoch_is_ignored(epoch: int) -> None:
    assert on_master_info(slave_of_other(3), ME, "me:1", epoch) is None
    assert on_master_info(master(3), OTHER, "a:1", epoch) is None


def test_answer_without_master_id_or_epoch_changes_nothing() -> None:
    assert on_master_info(fresh(), None, "a:1", 5) is None
    assert on_master_info(fresh(), OTHER, "a:1", None) is None
    assert on_master_info(fresh(), OTHER, "", 5) is None  # nowhere to replicate from


def test_newer_epoch_for_the_same_master_only_moves_the_epoch() -> None:
    d = on_master_info(slave_of_other(3), OTHER, "a:1", 4)
    assert d == ChangeToSlave(master_address="a:1", epoch=4, master_id=OTHER, same_master=True)
    d = on_master_info(master(3), ME, "me:1", 4, frozenset({ME}), 5)
    assert isinstance(d, ChangeToMaster)
    assert d.already_master


def test_master_demoted_by_a_newer_epoch() -> None:
    d = on_master_info(master(3), OTHER, "a:1", 4)
    assert d == ChangeToSlave(master_address="a:1", epoch=4, master_id=OTHER, same_master=False)


def test_the_newest_of_two_notifications_wins_in_either_order() -> None:
    elect_me = (ME, "me:1", 5, frozenset({ME}), 6)
    elect_other = (OTHER, "a:1", 6, frozenset({OTHER}), 7)
    for first, second in ((elect_me, elect_other), (elect_other, elect_me)):
        view = fresh()
        for answer in (first, second):
            d = on_master_info(view, *answer)
            if d is not None:
                view = record(view, d, "me:1")
        assert view.master_broker_id == OTHER
        assert view.master_epoch == 6


def test_master_set_always_contains_the_master() -> None:
    d = on_master_info(fresh(), ME, "me:1", 2, frozenset({OTHER}), 3)
    assert isinstance(d, ChangeToMaster)
    assert ME in d.sync_state_set


def test_poll_with_newer_epoch_and_no_master_asks_for_an_election() -> None:
    assert on_replica_info(slave_of_other(3), None, None, 4, frozenset({OTHER}), 5) == ElectSelf()
    assert on_replica_info(slave_of_other(3), None, "", 3, frozenset(), 5) is None


def test_poll_with_newer_epoch_and_a_master_changes_role() -> None:
    d = on_replica_info(slave_of_other(3), ME, "me:1", 4, frozenset({ME}), 9)
    assert d == ChangeToMaster(epoch=4, sync_state_set=frozenset({ME}), sync_state_set_epoch=9)


def test_poll_with_same_epoch_adopts_only_a_newer_set_on_the_master() -> None:
    assert on_replica_info(master(3, 4), ME, "me:1", 3, frozenset({ME}), 5) == AdoptSyncStateSet(
        frozenset({ME}), 5
    )
    assert on_replica_info(master(3, 4), ME, "me:1", 3, frozenset({ME}), 4) is None
    assert on_replica_info(slave_of_other(3), OTHER, "a:1", 3, frozenset({OTHER}), 9) is None


def test_poll_with_same_epoch_follows_the_master_to_a_new_address() -> None:
    # the master restarted on another port before an election: the slave re-points at once
    assert on_replica_info(slave_of_other(3), OTHER, "a:2", 3, frozenset({OTHER}), 5) == ChangeToSlave(
        master_address="a:2", epoch=3, master_id=OTHER, same_master=True
    )
    # the same address, another master id (not this epoch's master), or the master itself: nothing
    assert on_replica_info(slave_of_other(3), OTHER, "a:1", 3, frozenset({OTHER}), 5) is None
    assert on_replica_info(slave_of_other(3), 3, "c:1", 3, frozenset({3}), 5) is None
    assert on_replica_info(master(3, 4), ME, "me:2", 3, frozenset({ME}), 4) is None


def test_poll_with_an_older_epoch_changes_nothing() -> None:
    assert on_replica_info(master(3), OTHER, "a:1", 2, frozenset({OTHER}), 9) is None


def test_record_keeps_the_newer_set_epoch() -> None:
    view = master(3, 8)
    after = record(
        view, ChangeToMaster(epoch=4, sync_state_set=frozenset({ME}), sync_state_set_epoch=5), "me:1"
    )
    assert after.master_epoch == 4
    assert after.sync_state_set_epoch == 8
    assert after.sync_state_set == frozenset({ME, OTHER})
    after = record(view, AdoptSyncStateSet(frozenset({ME}), 7))
    assert after == view
    after = record(view, AdoptSyncStateSet(frozenset({ME}), 9))
    assert after.sync_state_set == frozenset({ME})
    assert after.sync_state_set_epoch == 9


def test_record_slave_and_master() -> None:
    view = record(fresh(), ChangeToSlave("a:1", 2, OTHER))
    assert (view.master_broker_id, view.master_address, view.master_epoch, view.is_master) == (
        OTHER,
        "a:1",
        2,
        False,
    )
    view = record(view, ChangeToMaster(3, frozenset({ME}), 4), "me:1")
    assert (view.master_broker_id, view.master_address, view.is_master) == (ME, "me:1", True)
    assert view.sync_state_set == frozenset({ME})
    assert view.sync_state_set_epoch == 4
