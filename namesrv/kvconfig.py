"""Namespaced key/value settings of the name server (upstream ``KVConfigManager``).

The table lives in memory; :meth:`KVConfigManager.persist` writes it as upstream's
``kvConfig.json`` (``{"configTable":{namespace:{key:value}}}``) atomically (temp file, fsync,
rename, fsync of the directory) in a worker thread, and :meth:`KVConfigManager.load` reads it
back. Writes are serialized so the file always holds the latest complete snapshot.
"""

from __future__ import annotations

import logging
import os

import msgspec
import trio

from remoting import fastjson
from remoting.protocol.common import KVTable

log = logging.getLogger("namesrv")


class KVConfigSerializeWrapper(msgspec.Struct, kw_only=True):
    """The kvConfig.json file format (upstream ``KVConfigSerializeWrapper``)."""

    configTable: dict[str, dict[str, str]] = {}


class KVConfigManager:
    """PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE over an in-memory table."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.configTable: dict[str, dict[str, str]] = {}
        self._persist_lock = trio.Lock()

    # --- table -----------------------------------------------------------------------------

    def put(self, namespace: str, key: str, value: str) -> None:
        table = self.configTable.setdefault(namespace, {})
        prev = table.get(key)
        table[key] = value
        log.info(
            "KV config %s: %s/%s = %s", "updated" if prev is not None else "created", namespace, key, value
        )

    def get(self, namespace: str, key: str) -> str | None:
        table = self.configTable.get(namespace)
        return table.get(key) if table is not None else None

    def delete(self, namespace: str, key: str) -> None:
        table = self.configTable.get(namespace)
        if table is not None and key in table:
            value = table.pop(key)
            log.info("KV config deleted: %s/%s (was %s)", namespace, key, value)

    def list_namespace(self, namespace: str) -> KVTable | None:
        """The namespace's table, or None when the namespace was never written."""
        table = self.configTable.get(namespace)
        return KVTable(table=dict(table)) if table is not None else None

    # --- file ------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return fastjson.dumps(KVConfigSerializeWrapper(configTable=self.configTable))

    def load_bytes(self, data: bytes) -> None:
        """Merge a kvConfig.json image into the table; raises ``ValueError`` on a damaged file."""
        try:
            wrapper = fastjson.decode(data, KVConfigSerializeWrapper)
        except (msgspec.ValidationError, ValueError) as e:
            raise ValueError(f"{self.path}: {e}") from None
        for namespace, table in wrapper.configTable.items():
            self.configTable.setdefault(namespace, {}).update(table)

    async def load(self) -> None:
        """Read the file if it exists (a missing file is an empty table)."""
        data = await trio.to_thread.run_sync(_read_if_exists, self.path)
        if data is None:
            log.info("no KV config file at %s", self.path)
            return
        self.load_bytes(data)
        log.info("loaded KV config from %s: %d namespaces", self.path, len(self.configTable))

    async def persist(self) -> None:
        """Write the current table to the file atomically."""
        async with self._persist_lock:
            data = self.snapshot()
            await trio.to_thread.run_sync(atomic_write, self.path, data)


def _read_if_exists(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory. Blocking."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
