"""Role changes of a replica, the log side (upstream ``AutoSwitchHAService.changeToMaster/ToSlave``).

Pure functions over a ``ReplicaLog``; the caller persists afterwards (``PersistRequired`` semantics):
a new master must have its epoch entry durable before it accepts writes.
"""

from __future__ import annotations

import logging

from store.ha.replica_log import ReplicaLog

log = logging.getLogger("store.ha.role")


class RoleChangeError(ValueError):
    """A role change with an epoch older than the local history (a fenced, stale order)."""


def truncate_invalid_tail(rlog: ReplicaLog) -> int:
    """Cut a trailing partial message and trim epoch entries that start at or after the cut.

    Upstream ``truncateInvalidMsg`` + ``truncateSuffixByOffset``; runs before every (re)connect of a
    slave and in both role changes. Returns the new max offset.
    """
    boundary = rlog.last_message_boundary_at_or_below(rlog.max_offset)
    if boundary < rlog.max_offset:
        log.info("truncating partial message tail %d..%d", boundary, rlog.max_offset)
        rlog.truncate_to(boundary)
    rlog.epoch_file.truncate_suffix(boundary)
    if rlog.confirm_offset > boundary:
        rlog.confirm_offset = boundary
    return boundary


def _check_epoch(rlog: ReplicaLog, new_epoch: int) -> None:
    last = rlog.epoch_file.last_epoch()
    if new_epoch < last:
        raise RoleChangeError(f"new epoch {new_epoch} is older than the local last epoch {last}")


def become_master(rlog: ReplicaLog, new_epoch: int) -> int:
    """Truncate to the last message boundary and start ``new_epoch`` at the max offset.

    Re-becoming master in the epoch already last in the file keeps that entry (its start is where the
    epoch's data began). Returns the max offset (= the new epoch's start for a new epoch).
    Raises ``RoleChangeError`` if ``new_epoch`` is older than the local last epoch.
    """
    _check_epoch(rlog, new_epoch)
    max_offset = truncate_invalid_tail(rlog)
    ef = rlog.epoch_file
    if ef.last_epoch() != new_epoch:
        ef.truncate_suffix_by_epoch(new_epoch)
        ef.append(new_epoch, max_offset)
    log.info("became master of epoch %d at offset %d", new_epoch, max_offset)
    return max_offset


def become_slave(rlog: ReplicaLog, new_epoch: int) -> int:
    """Truncate to the last message boundary before handshaking with the master of ``new_epoch``.
    Returns the max offset. Raises ``RoleChangeError`` for an epoch older than the local history."""
    _check_epoch(rlog, new_epoch)
    max_offset = truncate_invalid_tail(rlog)
    log.info("became slave for epoch %d at offset %d", new_epoch, max_offset)
    return max_offset
