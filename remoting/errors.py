"""Errors of the remoting transport (upstream ``RemotingException`` family).

Every message names the peer address so that a log line alone says which connection failed.
"""

from __future__ import annotations

__all__ = [
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendError",
    "RemotingTimeoutError",
]


class RemotingError(Exception):
    """Base class: a request could not be completed over the wire."""


class RemotingConnectError(RemotingError):
    """Connecting to the peer failed or timed out (upstream ``RemotingConnectException``)."""


class RemotingSendError(RemotingError):
    """Writing the request failed (upstream ``RemotingSendRequestException``)."""


class RemotingTimeoutError(RemotingError):
    """No response within the timeout (upstream ``RemotingTimeoutException``)."""


class RemotingClosedError(RemotingError):
    """The connection closed after the request was written, before its response arrived."""
