"""Raft for the controller: a sans-IO core (:mod:`.core`), durable storage (:mod:`.storage`),
a trio driver (:mod:`.driver`) and an in-memory transport for tests (:mod:`.transport`).

The controller normally needs only :class:`RaftDriver`, :func:`parse_peers` and the errors.
"""

from controller.raft.core import ProposalResult, RaftNode, Ready, Role
from controller.raft.driver import RaftDriver, StateMachine, Storage, Transport
from controller.raft.errors import (
    LeadershipLostError,
    NotLeaderError,
    PeersConfigError,
    ProposalDroppedError,
    RaftError,
    RaftTimeoutError,
    StorageCorruptError,
)
from controller.raft.messages import decode_message, encode_message
from controller.raft.peers import check_self_id, parse_peers
from controller.raft.storage import FileStorage, MemoryStorage
from controller.raft.transport import MemoryNetwork, MemoryTransport

__all__ = [
    "FileStorage",
    "LeadershipLostError",
    "MemoryNetwork",
    "MemoryStorage",
    "MemoryTransport",
    "NotLeaderError",
    "PeersConfigError",
    "ProposalDroppedError",
    "ProposalResult",
    "RaftDriver",
    "RaftError",
    "RaftNode",
    "RaftTimeoutError",
    "Ready",
    "Role",
    "StateMachine",
    "Storage",
    "StorageCorruptError",
    "Transport",
    "check_self_id",
    "decode_message",
    "encode_message",
    "parse_peers",
]
