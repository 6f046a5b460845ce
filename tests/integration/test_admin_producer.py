"""GET_ALL_PRODUCER_INFO (328) and ``rmq-admin producer`` with a real Python producer connected to
a real broker."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from click.testing import CliRunner, Result

from client import Message, Producer
from client.admin_cli import main
from remoting.codes import RequestCode, ResponseCode
from remoting.command import request
from remoting.protocol.broker import ProducerTableInfo
from tests.integration.broker_env import broker_env, wait_until
from tests.integration.broker_requests import describe


async def cli(*args: str) -> Result:
    """Run rmq-admin in a worker thread (it starts its own trio loop)."""
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def test_every_producer_group_with_its_instances(tmp_path: Path) -> None:
    async with broker_env(tmp_path) as env:
        response = await env.call(request(RequestCode.GET_ALL_PRODUCER_INFO))
        assert response.code == ResponseCode.SUCCESS, describe(response)
        assert ProducerTableInfo.decode(response.body_bytes).data == {}

        async with Producer("PG_SHOWN", env.namesrv_addr) as producer:
            await producer.send(Message("ProducerShownTopic", b"hello"))
            await wait_until(
                lambda: "PG_SHOWN" in env.broker.producers.groups, what="the producer's heartbeat"
            )
            response = await env.call(request(RequestCode.GET_ALL_PRODUCER_INFO))
            assert response.code == ResponseCode.SUCCESS, describe(response)
            (info,) = ProducerTableInfo.decode(response.body_bytes).data["PG_SHOWN"]
            assert info.clientId == producer.instance.client_id
            assert info.language == "PYTHON"
            assert re.fullmatch(r"/127\.0\.0\.1:\d+", info.remoteIP), info.remoteIP
            assert info.lastUpdateTimestamp > 0

            result = await cli("producer", "-n", env.namesrv_addr, "-b", env.addr)
            assert result.exit_code == 0, result.output
            line = (
                f"producer group (PG_SHOWN) instance : clientId={info.clientId},remoteIP={info.remoteIP}, "
                f"language=PYTHON, version={info.version}, lastUpdateTimestamp={info.lastUpdateTimestamp}"
            )
            assert result.output.splitlines() == [line]

        # the producer unregistered at shutdown: no group left
        await wait_until(lambda: "PG_SHOWN" not in env.broker.producers.groups, what="the unregistration")
        result = await cli("producer", "-n", env.namesrv_addr, "-b", env.addr)
        assert (result.exit_code, result.output) == (0, "")

        result = await cli("producer", "-n", env.namesrv_addr)
        assert result.exit_code == 2, result.output
