"""rmq-admin message commands (sendMessage, consumeMessage, queryMsgById, queryMsgByKey) against a real broker."""

from __future__ import annotations

import os
import re
from functools import partial

import trio
from click.testing import CliRunner, Result

from client.admin_cli import main
from tests.cluster.harness import free_ports
from tests.integration.broker_env import CLUSTER, broker_env, wait_until

TOPIC = "AdminMsgTopic"


async def cli(*args: str) -> Result:
    return await trio.to_thread.run_sync(lambda: CliRunner().invoke(main, list(args)))


async def test_send_then_consume_query_by_id_and_by_key(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        sent = await cli(
            "sendMessage", "-n", ns, "-t", TOPIC, "-p", "hello admin", "-k", "order-42", "-c", "TagX"
        )
        assert sent.exit_code == 0, sent.output
        row = sent.output.strip().splitlines()[-1].split()
        assert row[0] == "broker-a"
        assert row[2] == "SEND_OK"
        await wait_until(lambda: TOPIC in env.namesrv.routes.topicQueueTable, what="topic route")

        consumed = await cli("consumeMessage", "-n", ns, "-t", TOPIC)
        assert consumed.exit_code == 0, consumed.output
        assert "BODY hello admin" in consumed.output
        assert "KEYS order-42" in consumed.output
        assert "Consumed 1 message(s)" in consumed.output

        by_key = await cli("queryMsgByKey", "-n", ns, "-t", TOPIC, "-k", "order-42")
        assert by_key.exit_code == 0, by_key.output
        lines = by_key.output.strip().splitlines()
        assert len(lines) == 2, by_key.output  # header + one message
        assert lines[1].split()[0] == row[3]  # the unique key the producer reported

        # The offset message id comes from the broker's own record (store host + physical offset).
        offset_id = re.search(
            r"OffsetID:\s+(\S+)", (await cli("queryMsgById", "-n", ns, "-i", row[3], "-t", TOPIC)).output
        )
        assert offset_id is not None
        shown = await cli("queryMsgById", "-n", ns, "-i", offset_id.group(1))
        assert shown.exit_code == 0, shown.output
        assert "hello admin" in shown.output
        assert "[TagX]" in shown.output

        missing = await cli("queryMsgByKey", "-n", ns, "-t", TOPIC, "-k", "no-such-key")
        assert missing.exit_code == 0
        assert len(missing.output.strip().splitlines()) == 1


async def test_query_by_id_of_garbage_id_fails_with_a_clear_message(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        bad = await cli("queryMsgById", "-n", env.namesrv_addr, "-i", "not-an-id")
        assert bad.exit_code == 1
        assert "not an offset message id" in bad.output


async def test_query_by_id_naming_an_unreachable_broker_suggests_a_unique_key_lookup(
    tmp_path: os.PathLike[str],
) -> None:
    """A client message id (what producers print as msgId) reads as an offset message id of some
    made-up address: the failure says so and how to look it up instead, not only "connection
    refused" (a C++ producer's ids begin 0100007F: broker 1.0.0.127)."""
    async with broker_env(tmp_path) as env:
        (port,) = free_ports(1)  # nothing listens there
        msg_id = f"7F000001{port:08X}{1234:016X}"
        bad = await cli("queryMsgById", "-n", env.namesrv_addr, "-i", msg_id)
        assert bad.exit_code == 1
        assert f"names the broker 127.0.0.1:{port}, which cannot be reached" in bad.output
        assert "give -t TOPIC to look it up as a unique key" in bad.output


async def test_query_by_id_naming_a_non_broker_suggests_a_unique_key_lookup(
    tmp_path: os.PathLike[str],
) -> None:
    """The made-up address of a client message id may be taken by something else (seen: a proxy
    that accepted the connection to 1.0.0.127 and answered HTTP): the same advice, not only
    "connection closed before the response arrived"."""

    async def http_server(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some(4096)
            await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    async with broker_env(tmp_path) as env, trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, http_server, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        msg_id = f"7F000001{port:08X}{1234:016X}"
        bad = await cli("queryMsgById", "-n", env.namesrv_addr, "-i", msg_id)
        nursery.cancel_scope.cancel()
    assert bad.exit_code == 1
    assert f"names the broker 127.0.0.1:{port}, which cannot be reached or did not answer" in bad.output
    assert "the text 'HTTP'" in bad.output
    assert "give -t TOPIC to look it up as a unique key" in bad.output


async def test_query_by_unique_key_and_by_offset(tmp_path: os.PathLike[str]) -> None:
    async with broker_env(tmp_path) as env:
        ns = env.namesrv_addr
        ids = []
        for body in ("first", "second"):
            sent = await cli("sendMessage", "-n", ns, "-t", TOPIC, "-p", body, "-b", "broker-a", "-i", "2")
            assert sent.exit_code == 0, sent.output
            ids.append(sent.output.strip().splitlines()[-1].split()[3])
        await wait_until(lambda: TOPIC in env.namesrv.routes.topicQueueTable, what="topic route")

        by_uniq = await cli("queryMsgByUniqueKey", "-n", ns, "-i", ids[1], "-t", TOPIC)
        assert by_uniq.exit_code == 0, by_uniq.output
        assert re.search(r"^Queue Offset:\s+1$", by_uniq.output, re.M), by_uniq.output
        assert re.search(r"^Message Body:\s+second$", by_uniq.output, re.M), by_uniq.output
        assert f"UNIQ_KEY={ids[1]}" in by_uniq.output
        # routed by a cluster name (mqadmin's -c), and every copy with -a (here: one)
        by_cluster = await cli(
            "queryMsgByUniqueKey", "-n", ns, "-i", ids[0], "-t", TOPIC, "-c", CLUSTER, "-a"
        )
        assert by_cluster.exit_code == 0, by_cluster.output
        assert by_cluster.output.count("Topic:") == 1
        assert re.search(r"^Message Body:\s+first$", by_cluster.output, re.M), by_cluster.output

        unknown = await cli(
            "queryMsgByUniqueKey", "-n", ns, "-i", "0A0A0A0A0000000000000000000000AA", "-t", TOPIC
        )
        assert unknown.exit_code == 1
        assert (
            f"no message of topic {TOPIC} has the unique key 0A0A0A0A0000000000000000000000AA"
            in unknown.output
        )

        at = await cli("queryMsgByOffset", "-n", ns, "-t", TOPIC, "-b", "broker-a", "-i", "2", "-o", "0")
        assert at.exit_code == 0, at.output
        assert re.search(r"^Message Body:\s+first$", at.output, re.M), at.output
        assert re.search(r"^Queue ID:\s+2$", at.output, re.M), at.output
        latin = await cli(
            "queryMsgByOffset",
            "-n",
            ns,
            "-t",
            TOPIC,
            "-b",
            "broker-a",
            "-i",
            "2",
            "-o",
            "1",
            "-f",
            "ISO-8859-1",
        )
        assert latin.exit_code == 0, latin.output
        assert latin.output.count("Message Body:") == 1
        assert re.search(r"^Message Body:\s+second$", latin.output, re.M), latin.output

        beyond = await cli("queryMsgByOffset", "-n", ns, "-t", TOPIC, "-b", "broker-a", "-i", "2", "-o", "7")
        assert beyond.exit_code == 1
        assert "no message at offset 7 of AdminMsgTopic queue 2 on broker-a: OFFSET_ILLEGAL" in beyond.output
        assert "queue min offset 0, max offset 2" in beyond.output
        elsewhere = await cli(
            "queryMsgByOffset", "-n", ns, "-t", TOPIC, "-b", "broker-z", "-i", "2", "-o", "0"
        )
        assert elsewhere.exit_code == 1
        assert f"topic {TOPIC} has no queue 2 on broker broker-z (its route: broker-a (" in elsewhere.output
        charset = await cli(
            "queryMsgByOffset", "-n", ns, "-t", TOPIC, "-b", "broker-a", "-i", "2", "-o", "0", "-f", "no-such"
        )
        assert charset.exit_code == 2
        assert "unknown charset 'no-such'" in charset.output
