"""Bad input from a peer: an error response where the protocol allows one, otherwise the
connection is closed and logged; the server keeps serving every other connection."""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from remoting.client import RemotingClient
from remoting.codec import FrameDecoder, encode
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand, request
from remoting.connection import RequestContext
from remoting.headers import CommandHeader, decode_header
from remoting.server import Listener, ProcessorTable, RemotingServer


class SendHeader(CommandHeader):
    producerGroup: str
    topic: str
    queueId: int


async def send_message(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
    h = decode_header(req, SendHeader)
    return req.response(ResponseCode.SUCCESS, topic=h.topic, queueId=h.queueId)


async def ping(ctx: RequestContext, req: RemotingCommand) -> RemotingCommand:
    return req.response(ResponseCode.SUCCESS, remark="pong")


@asynccontextmanager
async def server(**kw: object) -> AsyncIterator[Listener]:
    table = ProcessorTable()
    table.register(10, send_message)
    table.register(1, ping)
    srv = RemotingServer(**kw)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.run)
        yield await srv.add_listener("127.0.0.1", 0, table)
        nursery.cancel_scope.cancel()


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def wire(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) for p in encode(cmd))


async def read_until_eof(stream: trio.SocketStream) -> list[RemotingCommand]:
    """Every frame the server sends until it closes the connection (fails if it never does)."""
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    with trio.fail_after(5):
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:  # reset by the server: also a close
                return out
            if not data:
                return out
            out += dec.feed(data)


async def read_frame(stream: trio.SocketStream, dec: FrameDecoder) -> RemotingCommand:
    with trio.fail_after(5):
        while True:
            data = await stream.receive_some(65536)
            assert data, "server closed the connection"
            got = dec.feed(data)
            if got:
                assert len(got) == 1
                return got[0]


async def assert_still_serving(lst: Listener, other: trio.SocketStream) -> None:
    """A fresh client and an already open connection both still get answers."""
    async with RemotingClient() as client:
        resp = await client.invoke(lst.address, request(1), 3)
        assert resp.remark == "pong"
    await other.send_all(wire(RemotingCommand(code=1, opaque=4242)))
    resp = await read_frame(other, FrameDecoder())
    assert resp.opaque == 4242


@asynccontextmanager
async def bystander_and_attacker(lst: Listener) -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    other = await trio.open_tcp_stream("127.0.0.1", lst.port)
    bad = await trio.open_tcp_stream("127.0.0.1", lst.port)
    async with other, bad:
        yield other, bad


CLOSE_CASES = [
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "the text 'GET '", id="garbage-http"),
    pytest.param(b"\xff\xff\xff\xfe" + b"\x00" * 12, "negative frame length", id="garbage-negative-length"),
    pytest.param(
        struct.pack(">i", 17 * 1024 * 1024) + b"\x00" * 16, "exceeds the limit", id="length-over-limit"
    ),
    pytest.param(frame(b"this is not json"), "not valid JSON", id="header-not-json"),
    pytest.param(frame(b'["code", 10]'), "not a JSON object", id="header-not-object"),
    pytest.param(frame(b'{"opaque":1}'), "no 'code'", id="header-without-code"),
    pytest.param(frame(b'{"code":1}', stype=7), "unknown serialize type 7", id="unknown-serialize-type"),
    pytest.param(
        struct.pack(">iI", 8, 100) + b"\x00" * 4, "header length 100", id="header-longer-than-frame"
    ),
]


@pytest.mark.parametrize(("data", "logged"), CLOSE_CASES)
async def test_undecodable_input_closes_only_that_connection(
    data: bytes, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remoting")
    async with server() as lst, bystander_and_attacker(lst) as (other, bad):
        local = bad.socket.getsockname()
        await bad.send_all(data)
        assert await read_until_eof(bad) == []  # no response: the protocol has none for this
        assert any(
            logged in r.getMessage() and f"{local[0]}:{local[1]}" in r.getMessage() for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
        await assert_still_serving(lst, other)


async def test_good_frames_before_garbage_are_answered_then_closed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="remoting")
    async with server() as lst, bystander_and_attacker(lst) as (other, bad):
        await bad.send_all(wire(RemotingCommand(code=1, opaque=1)) + b"\x00\x00\x00\x01garbage")
        frames = await read_until_eof(bad)
        assert [f.opaque for f in frames] == [1]
        await assert_still_serving(lst, other)


async def test_truncated_frame_then_eof_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="remoting")
    async with server() as lst, bystander_and_attacker(lst) as (other, bad):
        full = wire(RemotingCommand(code=1, opaque=3, body=b"x" * 100))
        await bad.send_all(full[:50])
        await bad.send_eof()
        assert await read_until_eof(bad) == []
        assert any("in the middle of a frame" in r.getMessage() for r in caplog.records)
        await assert_still_serving(lst, other)


async def test_truncated_length_prefix_then_eof_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="remoting")
    async with server() as lst, bystander_and_attacker(lst) as (other, bad):
        await bad.send_all(b"\x00\x00")
        await bad.send_eof()
        assert await read_until_eof(bad) == []
        assert any("in the middle of a frame (2 bytes" in r.getMessage() for r in caplog.records)
        await assert_still_serving(lst, other)


async def test_unknown_request_code_gets_error_response_and_connection_stays() -> None:
    async with server() as lst, bystander_and_attacker(lst) as (other, bad):
        dec = FrameDecoder()
        await bad.send_all(wire(RemotingCommand(code=31337, opaque=8)))
        resp = await read_frame(bad, dec)
        assert (resp.opaque, resp.code) == (8, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        assert resp.remark == " request type 31337 not supported"
        await bad.send_all(wire(RemotingCommand(code=1, opaque=9)))
        assert (await read_frame(bad, dec)).opaque == 9
        await assert_still_serving(lst, other)


@pytest.mark.parametrize(
    ("ext", "remark"),
    [
        ({"producerGroup": "PG", "queueId": "1"}, "missing required header field 'topic'"),
        (None, "missing required header field 'producerGroup'"),
        (
            {"producerGroup": "PG", "topic": "T", "queueId": "one"},
            "header field 'queueId': expected int, got 'one'",
        ),
    ],
)
async def test_header_missing_or_bad_fields_gets_system_error(
    ext: dict[str, str] | None, remark: str
) -> None:
    async with server() as lst, bystander_and_attacker(lst) as (other, bad):
        dec = FrameDecoder()
        await bad.send_all(wire(RemotingCommand(code=10, opaque=5, ext_fields=ext)))
        resp = await read_frame(bad, dec)
        assert (resp.opaque, resp.code, resp.remark) == (5, ResponseCode.SYSTEM_ERROR, remark)
        good = {"producerGroup": "PG", "topic": "T", "queueId": 2}
        await bad.send_all(wire(RemotingCommand(code=10, opaque=6, ext_fields=good)))  # type: ignore[arg-type]
        resp = await read_frame(bad, dec)
        assert (resp.opaque, resp.code, resp.ext_fields) == (
            6,
            ResponseCode.SUCCESS,
            {"topic": "T", "queueId": "2"},
        )
        await assert_still_serving(lst, other)


async def test_cpp_style_header_with_number_values_is_accepted() -> None:
    header = (
        b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"x",'
        b'"producerGroup":"PG","queueId":3,"topic":"T"},"flag":0,"language":"CPP","opaque":0,'
        b'"remark":"","version":63}\n'
    )
    async with server() as lst, bystander_and_attacker(lst) as (_, bad):
        await bad.send_all(frame(header, b"body"))
        resp = await read_frame(bad, FrameDecoder())
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields == {"topic": "T", "queueId": "3"}


async def test_frame_limit_is_configurable(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="remoting")
    async with server(max_frame_size=1024) as lst, bystander_and_attacker(lst) as (other, bad):
        await bad.send_all(wire(RemotingCommand(code=1, opaque=1, body=b"x" * 2000)))
        assert await read_until_eof(bad) == []
        assert any("exceeds the limit of 1024" in r.getMessage() for r in caplog.records)
        await assert_still_serving(lst, other)


async def test_peer_reset_mid_request_does_not_disturb_others() -> None:
    async with server() as lst:
        other = await trio.open_tcp_stream("127.0.0.1", lst.port)
        async with other:
            raw = socket.create_connection(("127.0.0.1", lst.port))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.sendall(wire(RemotingCommand(code=1, opaque=1))[:10])
            raw.close()  # RST
            await assert_still_serving(lst, other)
