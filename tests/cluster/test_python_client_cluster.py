"""The Python client against a real ``rmq-container`` process (two broker groups): everything a user
does — sync, oneway, ordered and batch sends; clustering push with a tag expression; orderly;
broadcasting; pull of every queue — and a restart that keeps messages and committed offsets."""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path

import pytest
import trio

from client.message import ConsumeStatus, Message, MessageExt
from client.producer import Producer
from client.pull_consumer import PullConsumer
from client.push_consumer import PushConsumer
from remoting.protocol.broker import MessageModel
from tests.cluster.harness import ContainerProc, free_ports, toml_text

TOPIC = "PyClusterTopic"


def _config(tmp: Path, *, flush: str = "ASYNC_FLUSH") -> tuple[Path, str]:
    taken: set[int] = set()
    (ns_port,) = free_ports(1, taken=taken)
    a_port, b_port = free_ports(2, pairs=True, taken=taken)  # each port + 1 is its broker's HA port
    brokers = []
    for name, port in (("broker-a", a_port), ("broker-b", b_port)):
        brokers.append(
            {
                "brokerClusterName": "PyCluster",
                "brokerName": name,
                "brokerId": 0,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": flush,
                "listenPort": port,
                "brokerIP1": "127.0.0.1",
                "brokerIP2": "127.0.0.1",
                "namesrvAddr": f"127.0.0.1:{ns_port}",
                "storePathRootDir": f"${{rmq.data.dir}}/{name}",
                "mappedFileSizeCommitLog": 4 * 1024 * 1024,
                "maxHashSlotNum": 10000,
                "maxIndexNum": 40000,
                "flushConsumerOffsetInterval": 500,
            }
        )
    text = toml_text(
        {"nettyServer": {"bindAddress": "127.0.0.1"}, "namesrv": {"listenPort": ns_port}}, brokers
    )
    path = tmp / "cluster.toml"
    path.write_text(text)
    return path, f"127.0.0.1:{ns_port}"


async def _drain(group: str, namesrv: str, expect: int, *, expression: str = "*", orderly: bool = False,
                 model: MessageModel = MessageModel.CLUSTERING, timeout: float = 20.0) -> list[MessageExt]:  # fmt: skip
    got: list[MessageExt] = []
    done = trio.Event()

    async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(msgs)
        if len(got) >= expect:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, namesrv, orderly=orderly, message_model=model, rebalance_interval=2, persist_offset_interval=1
    )
    consumer.subscribe(TOPIC, expression)
    consumer.register_listener(listener)
    async with consumer:
        with trio.move_on_after(timeout):
            await done.wait()
        await trio.sleep(0.5)  # let late duplicates show up before asserting exactness
    return got


@pytest.mark.slow
async def test_python_client_produces_and_consumes_every_way(tmp_path: Path) -> None:
    path, namesrv = _config(tmp_path)
    proc = ContainerProc("py-cluster", path, tmp_path)
    try:
        await proc.start()
        sent: dict[str, str] = {}
        async with Producer("PG_PY", namesrv) as producer:
            for i in range(20):
                tag = "TagA" if i % 2 == 0 else "TagB"
                msg = Message(TOPIC, f"sync-{i}", tags=tag, keys=f"k{i}", properties={"user": f"v{i}"})
                result = await producer.send(msg)
                sent[result.msg_id] = tag
            for i in range(5):
                await producer.send_oneway(Message(TOPIC, f"oneway-{i}", tags="TagC"))
            batch = [Message(TOPIC, f"batch-{i}", tags="TagA") for i in range(8)]
            batch_result = await producer.send_batch(batch)
            assert batch_result.msg_id.count(",") == 7

            # ordered: one key → one queue, in order
            def by_key(mqs: list, msg: Message, arg: object) -> object:
                return mqs[int(arg) % len(mqs)]  # type: ignore[call-overload]

            for i in range(10):
                await producer.send(Message(TOPIC, f"order-{i}", tags="TagO"), selector=by_key, arg=7)

        # clustering push with a tag expression: exactly the TagA/TagB sync messages and the batch
        got = await _drain("CG_PY_TAGS", namesrv, 28, expression="TagA || TagB")
        bodies = sorted(m.body.decode() for m in got)
        expected = sorted([f"sync-{i}" for i in range(20)] + [f"batch-{i}" for i in range(8)])
        assert bodies == expected
        for m in got:
            if m.body.startswith(b"sync-"):
                i = int(m.body.decode().split("-")[1])
                assert m.keys == f"k{i}"
                assert m.properties.get("user") == f"v{i}"

        # orderly: the ordered sends arrive in order
        ordered = await _drain("CG_PY_ORDER", namesrv, 10, expression="TagO", orderly=True)
        assert [m.body.decode() for m in ordered] == [f"order-{i}" for i in range(10)]
        assert len({(m.broker_name, m.queue_id) for m in ordered}) == 1

        # broadcasting starts from the max offset: send after it started
        total = 20 + 5 + 8 + 10
        seen: list[str] = []
        bcast = PushConsumer(
            "CG_PY_BCAST", namesrv, message_model=MessageModel.BROADCASTING, rebalance_interval=1
        )
        bcast.subscribe(TOPIC, "TagZ")

        async def on_bcast(msgs: list[MessageExt]) -> ConsumeStatus:
            seen.extend(m.body.decode() for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        bcast.register_listener(on_bcast)
        async with bcast:
            await trio.sleep(1.5)
            async with Producer("PG_PY2", namesrv) as producer:
                for i in range(4):
                    await producer.send(Message(TOPIC, f"bcast-{i}", tags="TagZ"))
            with trio.move_on_after(10):
                while len(seen) < 4:
                    await trio.sleep(0.05)
        assert sorted(seen) == [f"bcast-{i}" for i in range(4)]

        # pull every queue: all messages exactly once
        async with PullConsumer("CG_PY_PULL", namesrv) as puller:
            queues = await puller.fetch_subscribe_message_queues(TOPIC)
            assert {q.brokerName for q in queues} == {"broker-a", "broker-b"}
            pulled: list[str] = []
            for mq in queues:
                offset = await puller.min_offset(mq)
                end = await puller.max_offset(mq)
                while offset < end:
                    result = await puller.pull(mq, "*", offset, 32)
                    pulled.extend(m.body.decode() for m in result.messages)
                    offset = result.next_begin_offset
        assert len(pulled) == total + 4
        assert len(set(pulled)) == total + 4
    finally:
        proc.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
async def test_restart_keeps_messages_and_committed_offsets(tmp_path: Path, sig: signal.Signals) -> None:
    # SIGKILL is only safe for acknowledged messages with SYNC_FLUSH (the store's contract).
    path, namesrv = _config(tmp_path, flush="SYNC_FLUSH" if sig == signal.SIGKILL else "ASYNC_FLUSH")
    proc = ContainerProc(f"py-restart-{sig.name}", path, tmp_path)
    try:
        await proc.start()
        async with Producer("PG_RESTART", namesrv) as producer:
            for i in range(30):
                await producer.send(Message(TOPIC, f"first-{i}"))
        first = await _drain("CG_RESTART", namesrv, 30)
        assert sorted(m.body.decode() for m in first) == sorted(f"first-{i}" for i in range(30))
        # The consumer persisted its offsets at shutdown and the broker flushes them every 500 ms.
        await trio.sleep(1.2)
        if sig == signal.SIGKILL:
            proc.kill_now()
        else:
            assert await proc.stop(sig) == 0
        await proc.start()
        async with Producer("PG_RESTART", namesrv) as producer:
            for i in range(10):
                await producer.send(Message(TOPIC, f"second-{i}"))
        second = await _drain("CG_RESTART", namesrv, 10)
        bodies = [m.body.decode() for m in second]
        assert sorted(set(bodies)) == sorted(f"second-{i}" for i in range(10)), bodies
        # every first-round message is still stored
        async with PullConsumer("CG_RESTART_AUDIT", namesrv) as puller:
            counts: dict[str, int] = defaultdict(int)
            for mq in await puller.fetch_subscribe_message_queues(TOPIC):
                offset, end = await puller.min_offset(mq), await puller.max_offset(mq)
                while offset < end:
                    result = await puller.pull(mq, "*", offset, 32)
                    for m in result.messages:
                        counts[m.body.decode()] += 1
                    offset = result.next_begin_offset
        assert all(counts[f"first-{i}"] == 1 for i in range(30))
        assert all(counts[f"second-{i}"] == 1 for i in range(10))
    finally:
        proc.close()
