"""KVConfigManager: table semantics and the kvConfig.json image."""

from __future__ import annotations

import json

import pytest

from namesrv.kvconfig import KVConfigManager


def test_put_get_delete_and_namespace_listing() -> None:
    kv = KVConfigManager("unused.json")
    assert kv.get("ns", "k") is None
    assert kv.list_namespace("ns") is None
    kv.put("ns", "k", "v1")
    kv.put("ns", "k", "v2")
    kv.put("ns", "k2", "x")
    assert kv.get("ns", "k") == "v2"
    assert kv.list_namespace("ns").table == {"k": "v2", "k2": "x"}  # type: ignore[union-attr]
    kv.delete("ns", "k")
    kv.delete("ns", "missing")
    kv.delete("other", "k")
    assert kv.get("ns", "k") is None
    assert kv.list_namespace("ns").table == {"k2": "x"}  # type: ignore[union-attr]


def test_snapshot_round_trip_uses_upstream_file_format() -> None:
    kv = KVConfigManager("unused.json")
    kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4;broker-b:4")
    kv.put("ns", "é", "ü")
    image = kv.snapshot()
    assert json.loads(image) == {
        "configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4;broker-b:4"}, "ns": {"é": "ü"}}
    }
    other = KVConfigManager("unused.json")
    other.load_bytes(image)
    assert other.configTable == kv.configTable


def test_damaged_image_is_reported() -> None:
    kv = KVConfigManager("kv.json")
    with pytest.raises(ValueError, match=r"kv\.json"):
        kv.load_bytes(b'{"configTable":{"ns":["not","a","map"]}}')
    with pytest.raises(ValueError, match=r"kv\.json: .*char"):
        kv.load_bytes(b"{garbage")
