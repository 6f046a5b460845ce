"""The response to a send: the store's result as upstream's response code, remark and
``SendMessageResponseHeader`` (upstream ``SendMessageProcessor.handlePutMessageResult``)."""

from __future__ import annotations

import struct

from remoting.codes import ResponseCode
from remoting.command import FLAG_RESPONSE, RemotingCommand
from store.results import Placed, PutMessageResult, PutMessageStatus

__all__ = ["STATUS_CODES", "offset_msg_ids", "placed_response", "send_response"]

_PUT_OK = PutMessageStatus.PUT_OK
_SUCCESS = ResponseCode.SUCCESS

#: Codes of a send whose message was stored (the Java client treats them as sent, with a status).
_STORED_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)

#: The remarks of the three stored-but-not-confirmed codes are ours (upstream sends none; clients
#: read only the code there, a person reading a log or a test failure needs the words).
STATUS_CODES: dict[PutMessageStatus, tuple[int, str | None]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (
        ResponseCode.FLUSH_DISK_TIMEOUT,
        "the message is stored, but was not flushed to disk within syncFlushTimeout",
    ),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        "the message is stored on the master, but its slaves did not confirm it within slaveTimeout",
    ),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (
        ResponseCode.SLAVE_NOT_AVAILABLE,
        "the message is stored on the master, but no slave is in sync to take it",
    ),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg properties length limit 32k.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: the broker's disk is full, "
        "messages are put to the slave, message store has been shut down, etc.",
    ),
    PutMessageStatus.OS_PAGE_CACHE_BUSY: (
        ResponseCode.SYSTEM_BUSY,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


def _offset_msg_id(host: bytes, offset: int) -> str:
    return (host + offset.to_bytes(8, "big")).hex().upper()


def offset_msg_ids(result: PutMessageResult) -> str:
    """``result.msg_id`` from bytes: for a batch, the offsets packed in one call and written out by
    ``bytes.hex`` with a comma every 8 bytes, each comma then followed by the store host's hex."""
    host = result.store_host
    if result.wrote_offset < 0 or not host:
        return ""
    offsets = result.offsets
    if offsets is None:
        return _offset_msg_id(host, result.wrote_offset)
    if not offsets:
        return ""
    prefix = host.hex().upper()
    packed = struct.pack(f">{len(offsets)}q", *offsets)
    return prefix + packed.hex(",", 8).upper().replace(",", "," + prefix)


def send_response(
    cmd: RemotingCommand, result: PutMessageResult, queue_id: int, uniq: str | None, ext_ok: dict[str, str]
) -> RemotingCommand:
    """The response to the send ``cmd`` whose store result is ``result``; ``ext_ok`` holds the
    fields every send response carries (MSG_REGION, TRACE_ON). The header is built as a plain dict
    (this runs once per request)."""
    status = result.status
    if status is _PUT_OK:
        code, remark = _SUCCESS, None
    else:
        code, remark = STATUS_CODES.get(status, (ResponseCode.SYSTEM_ERROR, status.name))
        if result.remark and code != ResponseCode.SUCCESS:
            remark = f"{remark} ({result.remark})" if remark else result.remark
    if code in _STORED_CODES:
        ext = _stored_fields(ext_ok, offset_msg_ids(result), queue_id, result.logics_offset, uniq)
    else:
        ext = dict(ext_ok)
    return _response(cmd, code, remark, ext)


def placed_response(
    cmd: RemotingCommand,
    placed: Placed,
    queue_id: int,
    uniq: str | None,
    ext_ok: dict[str, str],
    store_host: bytes,
) -> RemotingCommand:
    """:func:`send_response` for a message the store's plain send path stored (``placed``, store
    host IP + port bytes ``store_host``): SUCCESS, without a :class:`PutMessageResult` between."""
    msg_id = _offset_msg_id(store_host, placed[0])
    return _response(cmd, _SUCCESS, None, _stored_fields(ext_ok, msg_id, queue_id, placed[2], uniq))


def _stored_fields(
    ext_ok: dict[str, str], msg_id: str, queue_id: int, queue_offset: int, uniq: str | None
) -> dict[str, str]:
    """The header of a send whose message was stored (``SendMessageResponseHeader``: msgId,
    queueId, queueOffset, transactionId, strings on the wire) after the fields of ``ext_ok``."""
    ext = {**ext_ok, "msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset)}
    if uniq:
        ext["transactionId"] = uniq
    return ext


def _response(cmd: RemotingCommand, code: int, remark: str | None, ext: dict[str, str]) -> RemotingCommand:
    # what cmd.response(code, remark) gives, with the header in place
    return RemotingCommand(
        code=code,
        opaque=cmd.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=ext,
        serialize_type=cmd.serialize_type,
    )
