"""Request handlers and the table that maps request codes to them.

Upstream: ``NettyRequestProcessor`` and the processor table of ``NettyRemotingAbstract``.
A handler is an ``async def`` taking the :class:`RequestContext` and the request command and
returning the response (or None when it answers later through ``ctx.respond``, or never).
Handlers that finish without blocking run inline in the connection's reader (see
:mod:`remoting.connection`), so a fast handler costs no task. Consequences for handler
authors: a handler must be an ``async def`` (its coroutine is driven directly), and it runs in
a task it may share with other requests of the same connection — do not rely on contextvars
being private to one request.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.repeats import RepeatedLog

if TYPE_CHECKING:
    from remoting.connection import Connection

__all__ = ["ConnectionCallback", "Handler", "ProcessorTable", "RequestContext"]


class RequestContext:
    """What a handler knows about the request besides the command itself."""

    __slots__ = ("connection", "listener", "received_at")

    def __init__(self, connection: Connection, listener: str, received_at: float) -> None:
        self.connection = connection
        #: name of the listener (server side) the request came in on; "client" on the client side
        self.listener = listener
        #: trio.current_time() when the frame was decoded
        self.received_at = received_at

    async def respond(self, response: RemotingCommand) -> None:
        """Send a late response (e.g. after long polling) on the request's connection."""
        await self.connection.respond(response)


Handler = Callable[["RequestContext", RemotingCommand], Awaitable[RemotingCommand | None]]
ConnectionCallback = Callable[["Connection"], Awaitable[None] | None]


_NOT_SUPPORTED_REMARK = re.compile(r"request type (-?\d+) not supported")


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """REQUEST_CODE_NOT_SUPPORTED for ``request``, with upstream's remark (leading space included)."""
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


def unsupported_request_code(remark: str | None) -> int | None:
    """The request code a REQUEST_CODE_NOT_SUPPORTED remark names (None for another remark)."""
    found = _NOT_SUPPORTED_REMARK.search(remark or "")
    return int(found.group(1)) if found is not None else None


#: requests a name server answers: sent here, the sender was most likely given this address as
#: its name server's (the C++ client then only says "No route info of this topic")
_NAMESRV_CODES = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    }
)


def _not_supported_handler() -> Handler:
    """A default handler: REQUEST_CODE_NOT_SUPPORTED with upstream's remark, and a warning once
    per listener and code every 30 s (upstream logs each such request at ERROR)."""
    unhandled = RepeatedLog(logging.getLogger("remoting"))

    async def answer(ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        where = ctx.listener
        try:
            name = RequestCode(request.code).name
        except ValueError:
            name = "unknown"
        hint = (
            " (a client given this address as its name server's?)" if request.code in _NAMESRV_CODES else ""
        )
        unhandled.log(
            f"{where}:{request.code}",
            logging.WARNING,
            f"{where}: request code {request.code} ({name}) from {ctx.connection.remote_address} is "
            f"not handled here{hint}",
            whatever_text=True,
        )
        return not_supported(request)

    return answer


class ProcessorTable:
    """Request code -> handler, plus connection open/close callbacks (for liveness tracking).

    Codes without a handler go to ``default`` (REQUEST_CODE_NOT_SUPPORTED unless replaced).
    A handler returns the response, or None when it answers later through
    ``ctx.respond`` or not at all.
    """

    def __init__(
        self,
        *,
        on_connect: ConnectionCallback | None = None,
        on_close: ConnectionCallback | None = None,
        default: Handler | None = None,
    ) -> None:
        self.handlers: dict[int, Handler] = {}
        self.on_connect = on_connect
        self.on_close = on_close
        self.default: Handler = default or _not_supported_handler()

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[int(code)] = handler

    def get(self, code: int) -> Handler:
        return self.handlers.get(code, self.default)
