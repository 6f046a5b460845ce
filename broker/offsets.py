"""Committed consumer offsets (upstream ``ConsumerOffsetManager``), persisted as ``config/consumerOffset.json``.

Keys are ``topic@group`` as upstream; the DataVersion counter is bumped every
``consumerOffsetUpdateVersionStep`` commits (pre-online compares versions to decide which side is newer).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from broker.persist import EntryTexts, atomic_write, load_json
from remoting.protocol.broker import ConsumerOffsetWrapper
from remoting.protocol.common import DataVersion

TOPIC_GROUP_SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


class ConsumerOffsetManager:
    def __init__(self, *, config_dir: str, now_ms: Callable[[], int], version_step: int = 500) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.now_ms = now_ms
        self.version_step = max(1, version_step)
        self.table: dict[str, dict[int, int]] = {}
        #: offsets reset by an admin (INVOKE_BROKER_TO_RESET_OFFSET) that the group's consumers have
        #: not pulled since: the next pull of the queue is answered with the offset (upstream
        #: ``resetOffsetTable``, ``useServerSideResetOffset``); in memory, as upstream
        self.resets: dict[str, dict[int, int]] = {}
        self.data_version = DataVersion()
        self._commits_since_bump = 0
        self.dirty = False
        #: changes made to the table (or its version) since start: a slave's sync that gets the
        #: very table it merged last, with nothing changed here since, has nothing to do
        self.changes = 0
        self._texts: EntryTexts[dict[int, int]] = EntryTexts(dict)

    def load(self) -> None:
        wrapper = load_json(self.path, ConsumerOffsetWrapper, ConsumerOffsetWrapper)
        self.table = wrapper.offsetTable
        self.data_version = wrapper.dataVersion
        self.changes += 1

    def wrapper(self) -> ConsumerOffsetWrapper:
        return ConsumerOffsetWrapper(
            offsetTable={k: dict(v) for k, v in self.table.items()}, dataVersion=self.data_version
        )

    def encode(self) -> bytes:
        """``consumerOffset.json``, also the GET_ALL_CONSUMER_OFFSET body: the bytes of
        ``self.wrapper().encode()``, each ``topic@group`` written again only when its offsets
        changed (see :class:`EntryTexts`: most of a dev cluster's groups commit nothing any more,
        the table is written every 5 s while one does and asked for by each slave every 10 s)."""
        table = self._texts.text_of(self.table)
        return ConsumerOffsetWrapper(offsetTable=table, dataVersion=self.data_version).encode()  # type: ignore[arg-type]

    def persist(self) -> None:
        atomic_write(self.path, self.encode())
        self.dirty = False

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(offset_key(topic, group), {})[queue_id] = offset
        self.dirty = True
        self.changes += 1
        self._commits_since_bump += 1
        if self._commits_since_bump >= self.version_step:
            self._commits_since_bump = 0
            self.data_version = self.data_version.next_version(self.now_ms())

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The offset a consumer starts from: a pending reset, else the committed offset, else -1
        (never committed)."""
        key = offset_key(topic, group)
        reset = self.resets.get(key)
        if reset is not None and queue_id in reset:
            return reset[queue_id]
        return self.table.get(key, {}).get(queue_id, -1)

    def assign_reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An admin's reset: committed now (consumers that are offline start there) and kept as
        pending until a consumer of the group pulls the queue (:meth:`take_reset`)."""
        self.resets.setdefault(offset_key(topic, group), {})[queue_id] = offset
        self.commit(group, topic, queue_id, offset)

    def has_reset(self, group: str, topic: str, queue_id: int) -> bool:
        return queue_id in self.resets.get(offset_key(topic, group), {})

    def take_reset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The pending reset of the queue, now no longer pending (None when there is none)."""
        key = offset_key(topic, group)
        reset = self.resets.get(key)
        if reset is None or queue_id not in reset:
            return None
        offset = reset.pop(queue_id)
        if not reset:
            del self.resets[key]
        return offset

    def queues_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(offset_key(topic, group), {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return {k[len(prefix) :] for k in self.table if k.startswith(prefix)}

    def topics_of_group(self, group: str) -> set[str]:
        suffix = TOPIC_GROUP_SEPARATOR + group
        return {k[: -len(suffix)] for k in self.table if k.endswith(suffix)}

    def remove_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        for k in [k for k in self.table if k.startswith(prefix)]:
            del self.table[k]
        for k in [k for k in self.resets if k.startswith(prefix)]:
            del self.resets[k]
        self.dirty = True
        self.changes += 1

    def remove_group(self, group: str) -> None:
        suffix = TOPIC_GROUP_SEPARATOR + group
        for k in [k for k in self.table if k.endswith(suffix)]:
            del self.table[k]
        for k in [k for k in self.resets if k.endswith(suffix)]:
            del self.resets[k]
        self.dirty = True
        self.changes += 1

    def replace_all(self, wrapper: ConsumerOffsetWrapper) -> None:
        """Adopt another replica's table with its DataVersion (slave sync, pre-online)."""
        self.table = {k: dict(v) for k, v in wrapper.offsetTable.items()}
        self.data_version = wrapper.dataVersion
        self.dirty = True
        self.changes += 1

    def merge(self, wrapper: ConsumerOffsetWrapper) -> None:
        """Take over the master's offsets (a slave's sync: upstream ``putAll``, the slave's other
        entries kept) and its DataVersion."""
        table = self.table
        for key, queues in wrapper.offsetTable.items():
            table[key] = dict(queues)
        self.data_version = wrapper.dataVersion
        self.dirty = True
        self.changes += 1
