"""A controller that lost its data (a new, empty Raft log) and brokers whose epoch files already hold
higher master epochs than the new controller has ever handed out.

rmq-container safety rule (controller/replicas.py ``handle_elect_master``): a new master's epoch is
above every epoch a live replica of the set reports in its heartbeat. Without it the fresh
controller hands out master epoch 1, the broker's replication refuses an epoch older than its epoch
file, and the group stays fenced. Harness: tests/integration/test_controller_mode.py.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.headers import encode_header
from remoting.protocol.controller import CleanControllerBrokerDataRequestHeader
from tests.integration.broker_env import wait_until
from tests.integration.broker_requests import describe
from tests.integration.test_controller_mode import (
    CLUSTER,
    NAME,
    ControllerMode,
    Node,
    controller_mode,
    master_and_slave,
    send_all,
)


async def _epoch_3(env: ControllerMode) -> tuple[Node, Node, list[bytes]]:
    """Two failovers: ``a`` master of epoch 1, ``b`` of 2, ``a`` again of 3; ``b`` its slave in sync."""
    a, b = await master_and_slave(env)
    sent = [b"epoch-1"]
    await send_all(env, a, sent[-1:])
    await env.stop(a, crash=True)
    await wait_until(lambda: b.is_master, 10, "b master")
    sent.append(b"epoch-2")
    await send_all(env, b, sent[-1:])
    a = await env.start("a")
    await wait_until(lambda: a.is_slave and b.broker.replication.sync_state_set == {1, 2}, 10, "a in sync")
    await env.stop(b, crash=True)
    await wait_until(lambda: a.is_master, 10, "a master again")
    sent.append(b"epoch-3")
    await send_all(env, a, sent[-1:])
    b = await env.start("b")
    await wait_until(lambda: b.is_slave and a.broker.replication.sync_state_set == {1, 2}, 10, "b in sync")
    assert (a.epoch, b.epoch) == (3, 3)
    assert a.broker.store.epoch_file.last_epoch() == b.broker.store.epoch_file.last_epoch() == 3
    return a, b, sent


async def test_new_master_epoch_is_above_the_replicas_epoch_files(tmp_path: Path) -> None:
    async with controller_mode(tmp_path) as env:
        a, b, sent = await _epoch_3(env)
        await env.stop(b)
        await env.stop(a)
        await env.stop_controller()
        await env.start_controller(store="controller-new")

        a = await env.start("a")
        await wait_until(lambda: a.is_master, 10, "a master under the new controller")
        assert a.epoch == 4, "one above the epoch a reported"
        assert a.broker.store.epoch_file.last_epoch() == 4
        b = await env.start("b")
        await wait_until(lambda: b.is_slave, 10, "b slave of a")
        await wait_until(lambda: a.broker.replication.sync_state_set == {1, 2}, 10, "b back in sync")
        assert b.epoch == 4
        info = (await env.replicas()).replicasInfoTable[NAME]
        assert (info.masterBrokerId, info.masterEpoch) == (1, 4)

        sent.append(b"epoch-4")
        await send_all(env, a, sent[-1:])
        assert sorted(await env.pull_bodies(a)) == sorted(sent)
        await wait_until(
            lambda: b.broker.store.max_phy_offset == a.broker.store.max_phy_offset, 10, "b caught up"
        )


async def test_replicas_restarting_together_under_a_new_controller_elect_above_both(tmp_path: Path) -> None:
    """Both replicas come back at once: whichever is elected, the epoch is above both epoch files
    and the other one follows it."""
    async with controller_mode(tmp_path) as env:
        a, b, sent = await _epoch_3(env)
        await env.stop(b)
        await env.stop(a)
        await env.stop_controller()
        await env.start_controller(store="controller-new")

        a, b = await env.start("a"), await env.start("b")
        await wait_until(lambda: {a.is_master, b.is_master} == {True, False}, 10, "one master")
        master, slave = (a, b) if a.is_master else (b, a)
        await wait_until(lambda: slave.is_slave, 10, "the other one its slave")
        assert master.epoch == slave.epoch >= 4
        await wait_until(lambda: master.broker.replication.sync_state_set == {1, 2}, 10, "both in sync")
        sent.append(b"after")
        await send_all(env, master, sent[-1:])
        assert sorted(await env.pull_bodies(master)) == sorted(sent)


async def test_a_controller_store_older_than_the_epoch_files_re_elects_above_them(tmp_path: Path) -> None:
    """The controller comes back on a store older than the brokers' epoch files (restored from a
    backup, or the config pointed at another controllerStorePath for a while): it records ``a`` as
    master of epoch 1 while both epoch files end at epoch 2. ``a`` cannot act on epoch 1 (its
    replication refuses an epoch older than its epoch file; upstream stays there, the group without
    a master). rmq-container: the refusing broker asks for an election, and the controller, seeing
    a live replica report an epoch beyond its record, elects again above it -- also when the
    recorded master is the one elected."""
    async with controller_mode(tmp_path) as env:
        a, b = await master_and_slave(env)
        sent = [b"epoch-1"]
        await send_all(env, a, sent[-1:])
        await env.stop_controller()
        shutil.copytree(env.root / "controller", env.root / "controller-old")
        await env.start_controller()
        await env.heard(a, b)
        await env.stop(a, crash=True)
        await wait_until(lambda: b.is_master, 10, "b master")
        assert b.epoch == 2
        sent.append(b"epoch-2")
        await send_all(env, b, sent[-1:])
        a = await env.start("a")
        await wait_until(
            lambda: a.is_slave and b.broker.replication.sync_state_set == {1, 2}, 10, "a in sync"
        )
        assert a.broker.store.epoch_file.last_epoch() == 2
        await env.stop(b)
        await env.stop(a)
        await env.stop_controller()
        await env.start_controller(store="controller-old")
        with trio.fail_after(10):
            while True:  # until the controller leads and answers from the old store
                try:
                    info = (await env.replicas()).replicasInfoTable[NAME]
                    break
                except AssertionError:
                    await trio.sleep(0.05)
        assert (info.masterBrokerId, info.masterEpoch) == (1, 1), "the old store's record"

        a, b = await env.start("a"), await env.start("b")
        await wait_until(lambda: {a.is_master, b.is_master} == {True, False}, 10, "one master")
        master, slave = (a, b) if a.is_master else (b, a)
        await wait_until(lambda: slave.is_slave, 10, "the other one its slave")
        assert master.epoch == slave.epoch >= 3
        assert master.broker.store.epoch_file.last_epoch() == master.epoch
        await wait_until(lambda: master.broker.replication.sync_state_set == {1, 2}, 10, "both in sync")
        info = (await env.replicas()).replicasInfoTable[NAME]
        assert info.masterEpoch == master.epoch
        sent.append(b"after")
        await send_all(env, master, sent[-1:])
        assert sorted(await env.pull_bodies(master)) == sorted(sent)


async def test_replicas_keep_their_ids_when_the_higher_id_registers_first(tmp_path: Path) -> None:
    """A controller that lost its data knows no broker-set until a replica claims id 1. The replica
    with id 2 registering first used to give up its id, be handed id 1 -- the id the other replica
    has persisted -- and the two then shared one identity (both masters). It keeps id 2 (retrying)
    until the id-1 replica founds the set again."""
    async with controller_mode(tmp_path) as env:
        a, b, sent = await _epoch_3(env)
        assert (a.controller_id, b.controller_id) == (1, 2)
        await env.stop(b)
        await env.stop(a)
        await env.stop_controller()
        await env.start_controller(store="controller-new")

        b = await env.start("b")
        await wait_until(lambda: b.manager._reclaim_since is not None, 10, "b waiting to reclaim id 2")
        a = await env.start("a")
        await wait_until(lambda: {a.is_master, b.is_master} == {True, False}, 10, "one master")
        master, slave = (a, b) if a.is_master else (b, a)
        await wait_until(lambda: slave.is_slave, 10, "the other one its slave")
        assert (a.controller_id, b.controller_id) == (1, 2)
        metadata = b.manager.files.read_metadata()
        assert metadata is not None
        assert metadata.brokerId == 2, "the persisted id kept"
        await wait_until(lambda: master.broker.replication.sync_state_set == {1, 2}, 10, "both in sync")
        sent.append(b"after")
        await send_all(env, master, sent[-1:])
        assert sorted(await env.pull_bodies(master)) == sorted(sent)


async def test_replicas_whose_stores_were_deleted_are_told_why_and_recover_after_the_proposed_cleanup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The reverse case, the usual one on a dev machine: the brokers' stores are deleted, the
    controller's data is kept. The replicas come back under new ids (3, 4), outside the recorded
    SyncStateSet {1, 2}, so no election may pick them (they could lack acknowledged messages).
    The controller's answer says so and names the ways out -- once, not on every retry -- and after
    the cleanup it proposes (cleanBrokerMetadata of 1 and 2) the replicas register afresh, even
    though they had already registered and were waiting for an election."""
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="broker.TestCluster_broker-a_0.replicas")
    async with controller_mode(tmp_path) as env:
        a, b = await master_and_slave(env)
        await send_all(env, a, [b"gone with the store"])
        await env.stop(b)
        await env.stop(a)
        in_sync = sorted(r.brokerId for r in (await env.replicas()).replicasInfoTable[NAME].inSyncReplicas)
        lost = ";".join(map(str, in_sync))
        shutil.rmtree(env.root / "a")
        shutil.rmtree(env.root / "b")

        def elect_logs(level: int) -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.name == "broker.TestCluster_broker-a_0.replicas"  # both brokers' logger
                and r.levelno == level
                and r.getMessage().startswith("no master elected")
            ]

        a, b = await env.start("a"), await env.start("b")
        await wait_until(lambda: {a.controller_id, b.controller_id} == {3, 4}, 10, "new ids")
        # each broker warns once per distinct answer: the last one names both new replicas
        await wait_until(
            lambda: sum("3@" in m and "4@" in m for m in elect_logs(logging.WARNING)) >= 2, 10, "both told"
        )
        assert not a.is_master
        assert not b.is_master
        explained = elect_logs(logging.WARNING)[-1]
        assert "no replica of its SyncStateSet is alive (" in explained
        assert "alive replicas 3@" in explained
        assert f"cleanBrokerMetadata -a <controller> -c {CLUSTER} -bn {NAME} -b '{lost}'" in explained
        # the brokers keep asking (every 300 ms); the same answer is not logged again as a warning
        warned, repeated = len(elect_logs(logging.WARNING)), len(elect_logs(logging.DEBUG))
        await trio.sleep(1.0)
        # (a stalled machine could expire a heartbeat meanwhile, changing the answer once for
        # each broker: at most two new warnings then; in a quiet run none)
        assert len(elect_logs(logging.WARNING)) <= warned + 2
        assert len(elect_logs(logging.DEBUG)) >= repeated + 2

        header = CleanControllerBrokerDataRequestHeader(
            clusterName=CLUSTER, brokerName=NAME, brokerControllerIdsToClean=lost
        )
        clean = request(RequestCode.CLEAN_BROKER_DATA, dict(encode_header(header)))
        response = await env.call(env.controller_addr, clean)
        assert response.code == ResponseCode.SUCCESS, describe(response)
        await wait_until(lambda: {a.is_master, b.is_master} == {True, False}, 10, "one master")
        master, slave = (a, b) if a.is_master else (b, a)
        await wait_until(lambda: slave.is_slave, 10, "the other one its slave")
        await env.create_topic(master)
        await send_all(env, master, [b"after the cleanup"])
        assert await env.pull_bodies(master) == [b"after the cleanup"]
