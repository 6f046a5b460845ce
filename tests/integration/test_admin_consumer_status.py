"""``rmq-admin consumerStatus``: GET_CONSUMER_RUNNING_INFO through a real broker to a running Python
push consumer (the C++ client's answer: tests/compat/test_cpp_reset_offset.py)."""

from __future__ import annotations

from pathlib import Path

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from tests.integration.broker_env import BROKER_NAME, broker_env, wait_until
from tests.integration.test_client_real_broker import (
    TOPIC,
    collecting_listener,
    fast_instance,
    fast_push_consumer,
    send_bodies,
)

GROUP = "StatusCG"


async def cli(*args: str) -> Result:
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def test_consumer_status_shows_the_clients_subscriptions_and_queues(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        await send_bodies(env.namesrv_addr, [b"s%d" % i for i in range(4)])
        got, listener = collecting_listener()

        async with (
            fast_instance(env.namesrv_addr) as instance,
            fast_push_consumer(GROUP, instance, listener),
        ):
            await wait_until(lambda: len(got) == 4, timeout=20, what="the four messages")
            ns, client_id = env.namesrv_addr, instance.client_id

            one = await cli("consumerStatus", "-n", ns, "-g", GROUP, "-i", client_id)
            assert one.exit_code == 0, one.output
            text = one.stdout
            assert text.startswith("#Consumer Properties#\n")
            assert f"{'consumerGroup':<40}: {GROUP}\n" in text
            assert f"{'PROP_CONSUMEORDERLY':<40}: false\n" in text
            subscriptions = text.split("#Consumer Subscription#\n")[1].split("\n\n")[0]
            assert subscriptions == (
                f"001 Topic: {'%RETRY%' + GROUP:<40} ClassFilter: false    SubExpression: *\n"
                f"002 Topic: {TOPIC:<40} ClassFilter: false    SubExpression: *"
            )
            offsets = text.split("#Consumer Offset#\n")[1].split("\n\n")[0].splitlines()[1:]
            rows = [line.split() for line in offsets if line.startswith(TOPIC)]
            assert [(r[1], r[2]) for r in rows] == [(BROKER_NAME, str(q)) for q in range(len(rows))]
            assert rows
            assert sum(int(r[3]) for r in rows) == 4  # every message consumed and committed here
            detail = text.split("#Consumer MQ Detail#\n")[1]
            assert "ProcessQueueInfo [commitOffset=" in detail
            assert "droped=false" in detail
            rates = text.split("#Consumer RT&TPS#\n")[1].splitlines()[1:]
            topic_rates = [r.split() for r in rates if r.startswith(TOPIC)]
            # pulled and consumed 4 messages within the last minute: 4/60 a second
            assert [(r[2], r[4], r[5], r[6]) for r in topic_rates] == [("0.07", "0.07", "0.00", "0")]

            table = await cli("consumerStatus", "-n", ns, "-g", GROUP)
            assert table.exit_code == 0, table.output
            lines = table.stdout.splitlines()
            assert lines[0].split() == ["#Index", "#ClientId", "#Version", "#ConsumerRunningInfoFile"]
            index, cid, version, path = lines[1].split()
            assert (index, cid, version) == ("1", client_id, "V5_3_3")
            assert (await trio.Path(path).read_text()).startswith("#Consumer Properties#\n")
            assert lines[-3:] == ["Same subscription in the same group of consumer", "", "Rebalance OK"]

            missing = await cli("consumerStatus", "-n", ns, "-g", GROUP, "-i", "127.0.0.1@nobody")
            assert missing.exit_code == 1
            assert f"The Consumer <{GROUP}> <127.0.0.1@nobody> not online" in missing.stderr
