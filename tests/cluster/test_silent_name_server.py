"""A name server that takes connections but never answers (a host the network cut off after the
connection was made looks the same): the broker's registration times out
(``registerBrokerTimeoutMills``) and, as upstream's ``clientCloseSocketIfTimeout`` (true by
default) says, the process's client closes that connection, so the retry connects anew instead of
queueing behind it. With the key false the retries wait on the one connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from tests.cluster.harness import ContainerProc, free_ports, silent_peer, toml_text, wait_until


@pytest.mark.parametrize("close", [True, False], ids=["closes", "keeps"])
async def test_a_registration_that_times_out_closes_the_connection_as_configured(
    tmp_path: Path, close: bool
) -> None:
    [port] = free_ports(1, pairs=True)

    def accepted_at_least(n: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return len(accepted) >= n

        return check

    async with silent_peer() as (namesrv, accepted):
        config = tmp_path / "container.toml"
        config.write_text(
            toml_text(
                {
                    "nettyServer": {"bindAddress": "127.0.0.1"},
                    "nettyClient": {"clientCloseSocketIfTimeout": close},
                },
                [
                    {
                        "brokerClusterName": "SilentNs",
                        "brokerName": "broker-a",
                        "listenPort": port,
                        "brokerIP1": "127.0.0.1",
                        "namesrvAddr": namesrv,
                        "registerBrokerTimeoutMills": 400,
                        "storePathRootDir": "${rmq.data.dir}/broker-a",
                        "mappedFileSizeCommitLog": 4 * 1024 * 1024,
                    }
                ],
            )
        )
        proc = ContainerProc("silent-ns", config, tmp_path)
        try:
            with trio.fail_after(40):
                await proc.start()
                # registration at start, timing out after 0.4 s; with the connection closed the broker
                # registers again at once on a new one (as when a name server restarts), else it
                # retries after 1 s, 2 s, ... (each timing out after 0.4 s again)
                await wait_until(accepted_at_least(1), 10, "the broker's first connection")
                if close:
                    await wait_until(accepted_at_least(3), 10, "a new connection for each retry")
                else:
                    await trio.sleep(6)
                    assert len(accepted) == 1, (
                        "the client connected anew with clientCloseSocketIfTimeout=false"
                    )
            log = proc.log_text()
        finally:
            proc.close()
    # the retries happened either way (so the count above says which connection they used)
    assert log.count("register to name server") >= 2, log[-3000:]
    assert ("closing the connection" in log) is close, log[-3000:]
