"""Atomic JSON config files under ``<storePathRootDir>/config`` (upstream ``ConfigManager``).

Upstream writes ``file.tmp``, keeps the previous content as ``file.bak`` and renames; on load it
falls back to ``.bak`` when the main file is missing or unreadable. We do the same, with an fsync
before the rename so a crash never leaves a half-written file under the real name.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import msgspec
import trio

from remoting import fastjson
from remoting.repeats import RepeatedLog

T = TypeVar("T")
V = TypeVar("V")
C = TypeVar("C", bound=msgspec.Struct)
log = logging.getLogger("broker.config")


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new content, never a mix."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        # a full disk, say: the real file keeps its last content; the partial copy goes
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if os.path.exists(path):
        try:
            os.replace(path, path + ".bak")
        except OSError as e:
            log.warning("could not keep backup of %s: %s", path, e)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def load_json(path: str, type_: type[T], default: Callable[[], T]) -> T:
    """Load ``path`` (or its ``.bak``) as ``type_``; ``default()`` when neither is readable."""
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        if not data.strip():
            continue
        try:
            return fastjson.decode(data, type_)
        except (ValueError, msgspec.ValidationError) as e:
            log.error("config file %s is unreadable (%s); trying the backup", candidate, e)
    return default()


async def write_async(path: str, data: bytes) -> None:
    """:func:`atomic_write` in a worker thread (fsync must not block the event loop)."""
    await trio.to_thread.run_sync(atomic_write, path, data)


class EntryTexts(Generic[V]):
    """The fastjson text of a name-keyed metadata table (topics, subscription groups, consumer
    offsets), kept entry by entry from one encoding to the next: an entry is written again only
    when it differs from the ``snapshot`` taken of it when it was last written, so code that
    changes an entry in place is seen too. The tables are encoded whole often -- the file after
    every change (a dev cluster's test suite creates a topic and a group per test), a slave's
    sync every 10 s, the registration every 30 s -- and writing 20,000 entries afresh took
    70-100 ms of the event loop each time."""

    def __init__(self, snapshot: Callable[[V], V]) -> None:
        self._snapshot = snapshot
        self._texts: dict[str, tuple[V, bytes]] = {}

    def text_of(self, table: Mapping[str, V]) -> msgspec.Raw:
        """``table`` as ``fastjson.dumps(table)`` writes it (a :class:`msgspec.Raw`, which the
        writer puts in a wrapper's encoding as it is)."""
        texts = self._texts
        parts = []
        for name, value in table.items():
            hit = texts.get(name)
            if hit is None or hit[0] != value:
                hit = texts[name] = (self._snapshot(value), fastjson.dumps({name: value})[1:-1])
            parts.append(hit[1])
        if len(texts) > 2 * len(table) + 64:  # entries deleted since
            self._texts = {name: texts[name] for name in table}
        return msgspec.Raw(b"{" + b",".join(parts) + b"}")


def with_own_attributes(config: C) -> C:
    """A copy of a topic or subscription-group config with its own ``attributes`` map: the
    snapshot :class:`EntryTexts` compares the config with (a change in place shows)."""
    return msgspec.structs.replace(config, attributes=dict(config.attributes))  # type: ignore[attr-defined]


class MetadataWriter:
    """Writes a broker's metadata files (:func:`write_async`) without letting a refusing disk stop
    the broker: a failed write (a full disk, a read-only remount) leaves the file's previous
    content in place, is logged at ERROR once per file and reason (repeats at DEBUG, a reminder
    every 30 s), and :meth:`write` returns False so that the caller keeps the table dirty and
    writes it again at its next period; the first write that succeeds again says so."""

    def __init__(self, logger: logging.Logger) -> None:
        self._repeats = RepeatedLog(logger)

    async def write(self, path: str, data: bytes) -> bool:
        try:
            await write_async(path, data)
        except OSError as exc:
            self._repeats.log(
                path,
                logging.ERROR,
                f"could not write {path}: {exc.strerror or exc}; it keeps its previous content and is "
                "written again later",
            )
            return False
        self._repeats.resolved(path, f"wrote {path} again")
        return True


class PersistedFile:
    """One metadata file (topics, subscription groups, consumer offsets), written whole from its
    table's encoder by a :class:`MetadataWriter`. Changes are counted (:meth:`changed`);
    :meth:`persist` returns once a write that began after the latest change has succeeded --
    callers of a burst share one write, and two writes of the file never overlap -- or False when
    the write failed (the file keeps its previous content and stays :attr:`due`).

    A request that changed the table awaits :meth:`persist` before it answers, as upstream's
    ``ConfigManager.persist`` runs inside the request: an acknowledged topic creation or deletion
    survives a crash right after it."""

    def __init__(self, path: str, encode: Callable[[], bytes], writer: MetadataWriter) -> None:
        self.path = path
        self.encode = encode
        self.writer = writer
        self._changes = 0
        self._written = 0
        #: held while the file is written (a test's crash copy holds it to see no write half done)
        self.lock = trio.Lock()

    def changed(self) -> None:
        self._changes += 1

    @property
    def due(self) -> bool:
        return self._written < self._changes

    async def persist(self) -> bool:
        wanted = self._changes
        async with self.lock:
            if self._written >= wanted:
                return True  # a write that began after our change has finished meanwhile
            covers = self._changes
            if not await self.writer.write(self.path, self.encode()):
                return False
            self._written = max(self._written, covers)
            return True
