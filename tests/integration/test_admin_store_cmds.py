"""Store maintenance on request against a real broker and name server: CLEAN_EXPIRED_CONSUMEQUEUE,
DELETE_EXPIRED_COMMITLOG and CLEAN_UNUSED_TOPIC, and mqadmin's ``cleanExpiredCQ``,
``deleteExpiredCommitLog`` and ``cleanUnusedTopic`` that send them."""

from __future__ import annotations

import os

import click
import trio
from click.testing import CliRunner, Result

from client.admin_store_cli import COMMANDS
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from store.checkpoint import CheckpointData, decode_checkpoint
from store.config import BrokerRole
from tests.integration.broker_env import CLUSTER, BrokerEnv, broker_env
from tests.integration.broker_requests import describe, pull_all, send_ok, send_request, send_text

TOPIC = "StoreCmdTopic"
OTHER = "StoreCmdOther"
COMMAND = {c.name: c for c in COMMANDS}
BIG = b"x" * (100 * 1024)  # ten of these and a bit fill one 1 MiB commit-log file of the env


async def cli(name: str, *args: str) -> Result:
    """Run one of the commands in a worker thread (it starts its own trio loop)."""
    command: click.Command = COMMAND[name]
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(command, list(args)))


async def create_topic(env: BrokerEnv, topic: str, queues: int = 2) -> None:
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
    response = await env.call(request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
    assert response.code == ResponseCode.SUCCESS, describe(response)


async def fill_files(env: BrokerEnv, topic: str, queue_id: int, files: int) -> None:
    """Send big messages to one queue until the commit log has ``files`` more files."""
    mfq = env.broker.store.commit_log.mfq
    target = len(mfq.files) + files
    while len(mfq.files) < target:
        await send_ok(env, send_request(topic, BIG, queue_id=queue_id))


def on_disk(*parts: str) -> bool:
    return os.path.exists(os.path.join(*parts))


def manifest(env: BrokerEnv) -> set[tuple[str, int]]:
    store = env.broker.store
    with open(store.queues.manifest_path, encoding="utf-8") as f:
        return {(t, int(q)) for t, q in (line.split("\t") for line in f.read().splitlines())}


async def test_clean_expired_cq_drops_only_queues_whose_messages_retention_deleted(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        store = env.broker.store
        await create_topic(env, TOPIC)
        for i in range(3):
            await send_text(env, TOPIC, f"early {i}", queue_id=0)
        await fill_files(env, TOPIC, 1, 2)
        # nothing has expired yet: the command changes nothing
        response = await env.call(request(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert store.queues.get(TOPIC, 0) is not None

        # retention deletes the first commit-log file: queue 0's messages are all gone, queue 1
        # still has its later ones
        await store.delete_oldest_commit_log_files(1)
        await store.delete_expired_logics()
        queue_dir = (store.config.consumequeue_dir, TOPIC, "0")
        assert on_disk(*queue_dir)
        result = await cli("cleanExpiredCQ", "-n", env.namesrv_addr, "-b", env.addr)
        assert result.exit_code == 0, result.output + result.stderr
        assert result.stdout == "success"  # no newline, as mqadmin's printf
        assert store.queues.get(TOPIC, 0) is None
        assert not on_disk(*queue_dir)
        assert store.queues.get(TOPIC, 1) is not None
        assert (TOPIC, 0) not in manifest(env)
        assert (TOPIC, 1) in manifest(env)
        queue_1 = store.queues.get(TOPIC, 1)
        assert queue_1 is not None
        assert queue_1.min_offset > 0
        assert len(await pull_all(env, "StoreCmdReader", TOPIC, 1, queue_1.min_offset)) > 0

        # a new message starts the queue again at offset 0 (as upstream, where the queue's
        # offset lives in the queue table the clean drops it from)
        sent = await send_text(env, TOPIC, "after the clean", queue_id=0)
        assert sent.queueOffset == 0
        assert [m.body for m in await pull_all(env, "StoreCmdReader", TOPIC, 0)] == [b"after the clean"]


async def test_delete_expired_commit_log_deletes_old_files_whatever_the_hour(
    tmp_path: os.PathLike[str],
) -> None:
    # every file but the current one is older than fileReservedTime (0 hours); deleteWhen names
    # no hour, and the disk is far from full: only a manual request makes retention delete
    async with broker_env(tmp_path, fileReservedTime=0, deleteWhen="", diskMaxUsedSpaceRatio=95) as env:
        store = env.broker.store
        # a partition 10 % used, whatever this machine's is (above diskSpaceCleanForciblyRatio,
        # 85 %, retention deletes on its own: it did when the machine's was 86 % used)
        store.clean_service.disk_space = lambda path: (100 * 2**30, 90 * 2**30)
        await create_topic(env, TOPIC)
        await fill_files(env, TOPIC, 0, 2)
        files = len(store.commit_log.mfq.files)
        assert await store.run_clean_once() == []
        assert len(store.commit_log.mfq.files) == files

        result = await cli("deleteExpiredCommitLog", "-n", env.namesrv_addr, "-c", CLUSTER)
        assert result.exit_code == 0, result.output + result.stderr
        assert result.stdout == "success"
        deleted = await store.run_clean_once()
        assert len(deleted) == files - 1
        assert len(store.commit_log.mfq.files) == 1
        # the queue now starts at what is left; the last message is still readable
        queue = store.queues.get(TOPIC, 0)
        assert queue is not None
        assert queue.min_offset > 0
        messages = await pull_all(env, "StoreCmdReader", TOPIC, 0, queue.min_offset)
        assert messages
        assert messages[-1].body == BIG


async def test_clean_unused_topic_drops_queues_of_topics_without_config(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        store = env.broker.store
        await create_topic(env, TOPIC)
        await create_topic(env, OTHER)
        await send_text(env, TOPIC, "kept")
        await send_text(env, OTHER, "orphaned", queue_id=1)
        await send_text(env, TOPIC, "delayed", DELAY="3")  # parked in SCHEDULE_TOPIC_XXXX
        schedule_topics = [t for t in store.queues.topics() if t.startswith("SCHEDULE_TOPIC")]
        assert schedule_topics
        # the config goes, the queues stay (a topic deleted while the broker was down, a config
        # file restored from an older backup...)
        assert env.broker.topics.delete(OTHER) is not None
        assert store.queues.get(OTHER, 1) is not None

        response = await env.call(request(RequestCode.CLEAN_UNUSED_TOPIC))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert OTHER not in store.queues.topics()
        assert not on_disk(store.config.consumequeue_dir, OTHER)
        assert all((OTHER, q) not in manifest(env) for q in range(2))
        assert TOPIC in store.queues.topics()
        for topic in schedule_topics:  # system topics stay whatever their config
            assert topic in store.queues.topics()
        assert [m.body for m in await pull_all(env, "StoreCmdReader", TOPIC, 0)] == [b"kept"]


async def test_a_slave_keeps_unconfigured_topics_that_still_have_messages(tmp_path: os.PathLike[str]) -> None:
    # a topic created on the master reaches a slave's store before its config: dropping its
    # queues there would lose its messages at the next failover
    async with broker_env(tmp_path) as env:
        store = env.broker.store
        await create_topic(env, OTHER)
        await send_text(env, OTHER, "replicated before its config")
        assert env.broker.topics.delete(OTHER) is not None
        store.config.brokerRole = BrokerRole.SLAVE  # what a replica that was demoted is
        try:
            response = await env.call(request(RequestCode.CLEAN_UNUSED_TOPIC))
            assert response.code == ResponseCode.SUCCESS, describe(response)
            assert OTHER in store.queues.topics()
        finally:
            store.config.brokerRole = BrokerRole.ASYNC_MASTER


async def test_commands_without_target_ask_every_broker_and_report_failures(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        result = await cli("cleanUnusedTopic", "-n", env.namesrv_addr)
        assert result.exit_code == 0, result.output + result.stderr
        assert result.stdout == "success"
        result = await cli("cleanExpiredCQ", "-n", env.namesrv_addr, "-c", "NoSuchCluster")
        assert result.exit_code == 1
        assert "clusterName exists" in result.stderr
        # a broker that is not there: named on stderr, "false" printed
        result = await cli("cleanExpiredCQ", "-n", env.namesrv_addr, "-b", "127.0.0.1:1", "--timeout", "2")
        assert result.exit_code == 1
        assert result.stdout == "false"
        assert "127.0.0.1:1" in result.stderr


def checkpoint_on_disk(env: BrokerEnv) -> CheckpointData:
    with open(env.broker.store.checkpoint.path, "rb") as f:
        return decode_checkpoint(f.read())


async def test_reset_master_flush_offset_is_recorded_by_a_slave_and_ignored_by_a_master(
    tmp_path: os.PathLike[str],
) -> None:
    async with broker_env(tmp_path) as env:
        store = env.broker.store
        result = await cli("resetMasterFlushOffset", "-n", env.namesrv_addr, "-b", env.addr, "-o", "4096")
        assert result.exit_code == 0, result.output + result.stderr
        assert result.stdout == "reset master flush offset to 4096 success\n"
        assert store.checkpoint.data.masterFlushedOffset == 0  # a master: ignored, as upstream
        store.config.brokerRole = BrokerRole.SLAVE
        try:
            result = await cli("resetMasterFlushOffset", "-n", env.namesrv_addr, "-b", env.addr, "-o", "4096")
            assert result.exit_code == 0, result.output + result.stderr
            assert store.checkpoint.data.masterFlushedOffset == 4096
            assert checkpoint_on_disk(env).masterFlushedOffset == 4096  # written at once
            # the offset is required
            response = await env.call(request(RequestCode.RESET_MASTER_FLUSH_OFFSET))
            assert response.code != ResponseCode.SUCCESS
            assert store.checkpoint.data.masterFlushedOffset == 4096
        finally:
            store.config.brokerRole = BrokerRole.ASYNC_MASTER
