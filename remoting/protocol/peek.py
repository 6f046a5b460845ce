"""Looks into metadata bodies without decoding them whole (no I/O here).

A slave asks its master for each whole metadata table every 10 s (GET_ALL_TOPIC_CONFIG,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET) and mostly finds it as it was. fastjson
writes a wrapper's fields by name, so the DataVersion comes first and the rest can often stay
undecoded. Each function returns None for a body not laid out as expected: the caller then decodes
it whole.
"""

from __future__ import annotations

import re

import msgspec

from remoting.fastjson import JSON_STRING, FastjsonError
from remoting.protocol.common import DataVersion

_VERSION_FIRST = b'{"dataVersion":'
_DELETED_NEXT = b',"deletedTopicOffsets":'


def _flat_object(body: bytes, start: int) -> bytes | None:
    """The text of the JSON object at ``start`` when nothing is nested in it (it ends at the first
    ``}``; a ``}`` inside a string would cut it short, and the cut text not decode)."""
    if body[start : start + 1] != b"{":
        return None
    end = body.find(b"}", start)
    return body[start : end + 1] if end > 0 else None


def leading_data_version(body: bytes) -> DataVersion | None:
    """The DataVersion a metadata table's body starts with, None when it does not start with one.
    fastjson writes a wrapper's fields by name, so ``dataVersion`` comes first (upstream's and
    ours), and a DataVersion holds numbers only. A slave asks for each whole table every 10 s and
    takes it only when the version differs; decoding 20,000 groups (6.7 MB) or topics (3.3 MB)
    to find that out held its event loop for tens of ms."""
    text = _flat_object(body, len(_VERSION_FIRST)) if body.startswith(_VERSION_FIRST) else None
    return data_version_of(text) if text is not None else None


def data_version_of(text: bytes) -> DataVersion | None:
    """A DataVersion's JSON text decoded (as :func:`offset_table_entries` cuts it out), None when
    it does not decode."""
    try:
        return DataVersion.decode(text)
    except (FastjsonError, ValueError):
        return None


def leading_topic_fields(body: bytes) -> tuple[DataVersion, dict[str, int]] | None:
    """A GET_ALL_TOPIC_CONFIG body's DataVersion and the ``deletedTopicOffsets`` after it (by name
    order the next field; absent from upstream's bodies and from ours when nothing was deleted
    lately: empty), None when the body does not start so."""
    version = leading_data_version(body)
    if version is None:
        return None
    at = body.find(b"}", len(_VERSION_FIRST)) + 1
    if not body.startswith(_DELETED_NEXT, at):
        return version, {}
    text = _flat_object(body, at + len(_DELETED_NEXT))
    try:
        return (version, msgspec.json.decode(text, type=dict[str, int])) if text is not None else None
    except msgspec.DecodeError:  # ValidationError included
        return None


#: a GET_ALL_CONSUMER_OFFSET body's start, up to its entries (fields by name, as fastjson writes)
_OFFSETS_HEAD = re.compile(rb'\{"dataVersion":(\{[^{}]*\}),"offsetTable":\{')
#: one entry's value: a flat map of queue ids to offsets
_QUEUE_OFFSETS = rb'\{[^{}"]*\}'
#: the entries: ``topic@group`` strings, each with its queue offsets, comma-separated
_OFFSET_ENTRY = JSON_STRING + b":" + _QUEUE_OFFSETS
_OFFSET_ENTRIES = re.compile(b"(?:" + _OFFSET_ENTRY + b"(?:," + _OFFSET_ENTRY + b")*)?")
#: one entry, its key text and value text captured
_OFFSET_ENTRY_PARTS = re.compile(b"(" + JSON_STRING + b"):(" + _QUEUE_OFFSETS + b")")


def offset_table_entries(body: bytes) -> tuple[bytes, dict[bytes, bytes]] | None:
    """A GET_ALL_CONSUMER_OFFSET body cut in its DataVersion's text and each entry's (key text ->
    value text), without decoding them; None when the body is not laid out like that. A master
    holding 20,000 groups' offsets sends 1.6 MB every 10 s, most of it as it was at the previous
    sync (the groups nobody consumes); decoding all of it took a slave ~70 ms of its event loop."""
    head = _OFFSETS_HEAD.match(body)
    if head is None or not body.endswith(b"}}"):
        return None
    region = body[head.end() : -2]
    if _OFFSET_ENTRIES.fullmatch(region) is None:
        return None
    return head.group(1), dict(_OFFSET_ENTRY_PARTS.findall(region))
