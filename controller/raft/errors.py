"""Errors raised by the Raft core and driver."""

from __future__ import annotations

from store.errors import StoreOpenError


class RaftError(Exception):
    """Base class of every Raft error."""


class NotLeaderError(RaftError):
    """The request needs the leader and this peer is not it.

    ``leader_id`` / ``leader_addr`` name the leader this peer currently knows (``None`` when it
    knows none, e.g. during an election). Upstream answers with CONTROLLER_NOT_LEADER and the
    leader's address.
    """

    def __init__(self, leader_id: str | None, leader_addr: str | None = None) -> None:
        super().__init__(
            f"not leader (leader: {leader_id or 'unknown'}{f' at {leader_addr}' if leader_addr else ''})"
        )
        self.leader_id = leader_id
        self.leader_addr = leader_addr


class LeadershipLostError(RaftError):
    """This peer stopped being leader while the request was pending. For a proposal the
    outcome is unknown: the entry may still commit under the next leader."""


class ProposalDroppedError(RaftError):
    """The proposal's log slot was taken by another leader's entry: it will never apply."""


class RaftTimeoutError(RaftError, TimeoutError):
    """The proposal or read did not complete within its timeout (outcome of a proposal unknown)."""


class StorageCorruptError(RaftError):
    """The durable Raft state is inconsistent beyond a torn tail (refuse to start)."""


class StorageLockedError(RaftError, StoreOpenError):
    """Another live process (or another driver of this one) uses the Raft log directory: two
    peers appending to one log would corrupt it, so the second refuses to start (a hosting
    process reports it as a startup error, like a store that refuses to open)."""


class PeersConfigError(RaftError, ValueError):
    """``controllerDLegerPeers`` / ``controllerDLegerSelfId`` are malformed."""
