"""DefaultElectPolicy: candidates, old-master preference, designated election, ordering."""

from __future__ import annotations

from controller.elect_policy import DefaultElectPolicy
from controller.heartbeat import BrokerLiveInfo

C, B = "c", "b"


def live(broker_id: int, epoch: int = 0, max_offset: int = 0, priority: int = 0) -> BrokerLiveInfo:
    return BrokerLiveInfo(
        clusterName=C,
        brokerName=B,
        brokerAddr=f"h{broker_id}:1",
        brokerId=broker_id,
        lastUpdateTimestamp=0,
        heartbeatTimeoutMillis=10_000,
        epoch=epoch,
        maxOffset=max_offset,
        electionPriority=priority,
    )


def policy(infos: list[BrokerLiveInfo]) -> DefaultElectPolicy:
    table = {i.brokerId: i for i in infos}
    return DefaultElectPolicy(lambda c, n, b: b in table, lambda c, n, b: table.get(b))


def test_only_alive_candidates_and_none_when_empty() -> None:
    p = policy([live(2)])
    assert p.elect(C, B, {1, 2, 3}, None, None, None) == 2
    assert p.elect(C, B, {1, 3}, None, None, None) is None
    assert p.elect(C, B, set(), None, None, None) is None
    assert p.elect(C, B, None, None, None, None) is None


def test_old_master_alive_is_kept_even_if_others_are_ahead() -> None:
    p = policy([live(1, epoch=1, max_offset=0), live(2, epoch=9, max_offset=999)])
    assert p.elect(C, B, {1, 2}, None, 1, None) == 1
    assert p.elect(C, B, {1, 2}, None, 1, 1) == 1, "preferring the old master keeps it"


def test_preferred_broker_is_chosen_only_if_a_valid_candidate() -> None:
    p = policy([live(1), live(2), live(3)])
    assert p.elect(C, B, {1, 2, 3}, None, 1, 3) == 3
    assert p.elect(C, B, {1, 2}, None, 1, 3) is None, "not in the set: no fallback"
    assert policy([live(1), live(2)]).elect(C, B, {1, 2, 3}, None, 1, 3) is None, "dead: no fallback"


def test_sorting_epoch_desc_offset_desc_priority_asc_then_id() -> None:
    infos = [
        live(1, epoch=3, max_offset=10, priority=9),
        live(2, epoch=3, max_offset=20, priority=9),
        live(3, epoch=3, max_offset=20, priority=1),
        live(4, epoch=2, max_offset=10**12, priority=0),
    ]
    assert policy(infos).elect(C, B, {1, 2, 3, 4}, None, None, None) == 3
    assert policy(infos).elect(C, B, {1, 2, 4}, None, None, None) == 2
    assert policy(infos).elect(C, B, {1, 4}, None, None, None) == 1
    ties = [live(5), live(4)]
    assert policy(ties).elect(C, B, {4, 5}, None, None, None) == 4


def test_all_replicas_are_tried_only_when_the_sync_state_set_yields_nobody() -> None:
    p = policy([live(2, max_offset=1), live(3, max_offset=100)])
    assert p.elect(C, B, {1, 2}, {1, 2, 3}, 1, None) == 2
    assert p.elect(C, B, {1}, {1, 2, 3}, 1, None) == 3
    assert p.elect(C, B, {1}, None, 1, None) is None


def test_without_getters_any_candidate_is_returned() -> None:
    assert DefaultElectPolicy().elect(C, B, {7, 5}, None, None, None) == 5
    assert DefaultElectPolicy(lambda c, n, b: b == 7).elect(C, B, {7, 5}, None, None, None) == 7
