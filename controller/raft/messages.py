"""Raft wire and disk structures: log entries, hard state, snapshots and peer messages.

Everything here is a ``msgspec.Struct`` encoded as a msgpack array (``array_like``), so a
message costs a few bytes of framing plus its payloads. Messages form a tagged union: the
first array element is a small integer tag naming the message type (etcd's ``MessageType``).

Entries are addressed by ``(index, term)``; an entry with empty ``data`` is a no-op (the
barrier a new leader appends on election, or an empty proposal).
"""

from __future__ import annotations

import msgspec


class Entry(msgspec.Struct, array_like=True, frozen=True):
    """One log entry. ``data`` is opaque to Raft; ``b""`` is a no-op."""

    term: int
    index: int
    data: bytes = b""


class HardState(msgspec.Struct, array_like=True, frozen=True):
    """State that must be durable before any message depending on it is sent."""

    term: int = 0
    vote: str | None = None
    commit: int = 0


class SnapshotMeta(msgspec.Struct, array_like=True, frozen=True):
    """Position of a snapshot: the last entry it includes."""

    index: int = 0
    term: int = 0


class Snapshot(msgspec.Struct, array_like=True, frozen=True):
    """A state-machine image covering every entry up to and including ``meta.index``."""

    meta: SnapshotMeta = SnapshotMeta()
    data: bytes = b""


class ReadState(msgspec.Struct, frozen=True):
    """A released linearizable read: reading the state machine once it has applied ``index``
    is linearizable with respect to the ``read_index(context)`` call that produced it."""

    index: int
    context: bytes


# --- peer messages ---------------------------------------------------------------------------
# ``frm`` is the sender, ``to`` the recipient, ``term`` the sender's term (for a granted pre-vote
# response: the term the pre-vote was asked for).


class MsgApp(msgspec.Struct, array_like=True, frozen=True, tag=1):
    """AppendEntries: ``entries`` follow the entry at (``index``, ``logTerm``)."""

    to: str
    frm: str
    term: int
    logTerm: int
    index: int
    entries: list[Entry]
    commit: int


class MsgAppResp(msgspec.Struct, array_like=True, frozen=True, tag=2):
    """AppendEntries answer. Accepted: ``index`` is the last index known to match. Rejected:
    ``index`` is the rejected probe's index and (``rejectHint``, ``logTerm``) the follower's
    hint for fast backtracking (its largest index <= the probe whose term <= the probe's)."""

    to: str
    frm: str
    term: int
    index: int
    reject: bool = False
    rejectHint: int = 0
    logTerm: int = 0


class MsgVote(msgspec.Struct, array_like=True, frozen=True, tag=3):
    """RequestVote; (``index``, ``logTerm``) is the candidate's last entry."""

    to: str
    frm: str
    term: int
    logTerm: int
    index: int


class MsgVoteResp(msgspec.Struct, array_like=True, frozen=True, tag=4):
    to: str
    frm: str
    term: int
    reject: bool


class MsgPreVote(msgspec.Struct, array_like=True, frozen=True, tag=5):
    """Pre-vote: "would you vote for me in ``term``?" — changes nobody's term."""

    to: str
    frm: str
    term: int
    logTerm: int
    index: int


class MsgPreVoteResp(msgspec.Struct, array_like=True, frozen=True, tag=6):
    to: str
    frm: str
    term: int
    reject: bool


class MsgHeartbeat(msgspec.Struct, array_like=True, frozen=True, tag=7):
    """Leader heartbeat; ``commit`` is capped at what the recipient is known to hold;
    ``context`` is the newest pending read-index context (``b""`` when none)."""

    to: str
    frm: str
    term: int
    commit: int
    context: bytes = b""


class MsgHeartbeatResp(msgspec.Struct, array_like=True, frozen=True, tag=8):
    to: str
    frm: str
    term: int
    context: bytes = b""


class MsgSnap(msgspec.Struct, array_like=True, frozen=True, tag=9):
    """InstallSnapshot: the whole snapshot in one message (controller state is small)."""

    to: str
    frm: str
    term: int
    snapshot: Snapshot


Message = (
    MsgApp
    | MsgAppResp
    | MsgVote
    | MsgVoteResp
    | MsgPreVote
    | MsgPreVoteResp
    | MsgHeartbeat
    | MsgHeartbeatResp
    | MsgSnap
)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def encode_message(msg: Message) -> bytes:
    """Compact binary (msgpack) form of a peer message."""
    return _encoder.encode(msg)


def decode_message(data: bytes) -> Message:
    """Inverse of :func:`encode_message`; raises ``msgspec.ValidationError`` /
    ``msgspec.DecodeError`` on malformed input (a peer's fault: drop the message)."""
    return _decoder.decode(data)


class PersistentState(msgspec.Struct, frozen=True):
    """What a node restarts from: the durable hard state, latest snapshot and the entries after it."""

    hard_state: HardState = HardState()
    snapshot: Snapshot = Snapshot()
    entries: list[Entry] = msgspec.field(default_factory=list)
