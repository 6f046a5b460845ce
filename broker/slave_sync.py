"""A slave copies its master's metadata (upstream ``SlaveSynchronize``).

Every ``tick`` seconds (upstream 3 s) a slave that knows its master's broker address runs a full
sync when ``interval`` seconds (upstream 10 s) have passed since the last one, or at once after the
master changed. A full sync asks the master, over the remoting client, for:

* GET_ALL_TOPIC_CONFIG (21): when the master's DataVersion differs (read before the body is
  decoded), the topic table becomes the master's (topics the master lacks are removed) with the
  master's DataVersion; the slave re-registers.
  Topics that the same master had at the previous sync and has no more were deleted there: their
  consume queues and consumer offsets are deleted here too (kept, they would come back with a
  failover);
* GET_ALL_CONSUMER_OFFSET (43): the master's offsets are merged over the slave's (upstream
  ``putAll``) and its DataVersion adopted -- while the slave's table has not changed since the
  last merge, only the entries that differ from the last merged table's are decoded and merged;
* GET_ALL_DELAY_OFFSET (45): the body is written to ``config/delayOffset.json`` when it differs (the
  schedule service, once it exists as ``broker.delay_offsets``, reloads it);
* GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): like topics (the version is read before the body is
  decoded).

Between full syncs the topic table alone is copied as soon as replicated messages reach a consume
queue that the slave's table does not cover (:meth:`SlaveSynchronize.topics_behind`: a topic created
or widened on the master), at most every ``catch_up_gap`` seconds. Upstream waits for the period;
a failover inside it left such a topic unrouted, or its new queues unreadable, on the new master.

A failed request leaves that table as it was and is logged; the next round tries again.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import trio

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand, request
from remoting.errors import RemotingError
from remoting.fastjson import FastjsonError
from remoting.protocol.broker import ConsumerOffsetWrapper, DelayOffsetWrapper, SubscriptionGroupWrapper
from remoting.protocol.common import TopicConfigAndMappingSerializeWrapper
from remoting.protocol.peek import (
    data_version_of,
    leading_data_version,
    leading_topic_fields,
    offset_table_entries,
)

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = logging.getLogger("broker.slave_sync")

#: Upstream runs the slave-sync task every 3 s and a full sync at most every 10 s.
TICK = 3.0
INTERVAL = 10.0
TIMEOUT = 3.0
#: least time between two topic-table catch-ups: a slave replaying a backlog, or following a burst
#: of topic creations, meets many new queues, and each catch-up copies the whole table
CATCH_UP_GAP = 1.0


class SlaveSyncError(Exception):
    """The master did not answer a metadata request usefully (the message says which and why)."""


class SlaveSynchronize:
    """Metadata copying of one slave broker (idle while the broker is a master)."""

    def __init__(
        self,
        broker: BrokerController,
        *,
        tick: float = TICK,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        catch_up_gap: float = CATCH_UP_GAP,
    ) -> None:
        self.broker = broker
        self.tick = tick
        self.interval = interval
        self.timeout = timeout
        self.catch_up_gap = catch_up_gap
        #: copy the topic table when replicated messages outrun it (off: full syncs only)
        self.catch_up = True
        self._topics_due = False
        self._last_topics = -float("inf")
        #: topic-table catch-ups run between full syncs (status and tests)
        self.catch_ups = 0
        #: master broker address of the last full sync, and when it ran (trio clock)
        self.synced_from: str | None = None
        self.last_sync = -float("inf")
        #: completed full syncs (status and tests)
        self.rounds = 0
        self._wake = trio.Event()
        #: the master's deletions (DeletedTopics) applied here: topic -> commit-log offset
        self.deletions_applied: dict[str, int] = {}
        #: one sync at a time: two interleaved ones could apply an older topic table after a
        #: newer one, and take the topics created in between for deleted on the master
        self._lock = trio.Lock()
        #: the entries of the offset table merged last (see :func:`remoting.protocol.peek.offset_table_entries`), and the
        #: slave's change count after the merge
        self._offsets_merged: tuple[dict[bytes, bytes], int] | None = None

    def master_changed(self) -> None:
        """Sync at the next opportunity (a new master, or the broker just became a slave)."""
        self.last_sync = -float("inf")
        self._wake.set()

    def topics_behind(self) -> None:
        """Replicated messages reached a consume queue that the topic table does not cover:
        copy the master's table soon rather than at the next full sync."""
        if self.catch_up and not self._topics_due:
            self._topics_due = True
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            with trio.move_on_after(self.tick):
                await self._wake.wait()
            self._wake = trio.Event()
            b = self.broker
            master = b.master_addr
            if not b.is_slave or not master:
                continue
            now = trio.current_time()
            if master != self.synced_from or now - self.last_sync >= self.interval:
                self._topics_due = False
                try:
                    await self.sync_all(master)
                except (SlaveSyncError, OSError) as exc:  # OSError: local files (a full disk, ...)
                    log.warning("slave sync from %s: %s", master, exc)
            elif self._topics_due:
                await trio.sleep(max(0.0, self._last_topics + self.catch_up_gap - now))
                if not b.is_slave or b.master_addr != master:
                    continue  # the next round handles the new master (a full sync)
                self._topics_due = False
                self._last_topics = trio.current_time()
                try:
                    async with self._lock:
                        await self.sync_topic_config(master)
                except (SlaveSyncError, OSError) as exc:
                    log.warning("slave topic catch-up from %s: %s", master, exc)
                else:
                    self.catch_ups += 1

    async def sync_all(self, master: str | None = None) -> None:
        """One full sync from ``master`` (default: the broker's master address)."""
        master = master or self.broker.master_addr
        if not master:
            raise SlaveSyncError("no master address known")
        errors: list[str] = []
        async with self._lock:
            for step in (
                self.sync_topic_config,
                self.sync_consumer_offset,
                self.sync_delay_offset,
                self.sync_subscription_groups,
            ):
                try:
                    await step(master)
                except SlaveSyncError as exc:
                    errors.append(str(exc))
        self.synced_from = master
        self.last_sync = trio.current_time()
        self.rounds += 1
        if errors:
            raise SlaveSyncError("; ".join(errors))

    async def _call(self, master: str, code: int, what: str) -> RemotingCommand:
        try:
            response = await self.broker.client.invoke(master, request(code), self.timeout)  # type: ignore[attr-defined]
        except RemotingError as exc:
            raise SlaveSyncError(f"{what}: {exc}") from exc
        if response.code != ResponseCode.SUCCESS:
            raise SlaveSyncError(f"{what}: code {response.code} {response.remark or ''}".rstrip())
        return response

    async def sync_topic_config(self, master: str) -> None:
        response = await self._call(master, RequestCode.GET_ALL_TOPIC_CONFIG, "GET_ALL_TOPIC_CONFIG")
        body = response.body_bytes
        topics = self.broker.topics
        head = leading_topic_fields(body)
        if head is not None and head[0] == topics.data_version:
            # unchanged: the lately deleted topics are all there is to take (the table not decoded)
            await self._apply_deletions(head[1])
            return
        try:
            wrapper = TopicConfigAndMappingSerializeWrapper.decode(body)
        except (FastjsonError, ValueError) as exc:
            raise SlaveSyncError(f"GET_ALL_TOPIC_CONFIG: bad body: {exc}") from exc
        await self._apply_deletions(wrapper.deletedTopicOffsets or {})
        if topics.data_version == wrapper.dataVersion:
            return
        # topics this master dropped since the last sync from it were deleted there, consume queues
        # and all: drop ours too, or a failover would bring them back (the new master routes every
        # topic it holds messages of). After a change of master nothing is dropped: the new one
        # may not have taken over the topics of its stored messages yet.
        deleted = (
            [t for t in topics.table if t not in wrapper.topicConfigTable]
            if master == self.synced_from
            else []
        )
        old = topics.table
        topics.replace_all(wrapper.topicConfigTable, wrapper.dataVersion)
        log.info(
            "slave sync: %d topic configs from %s (version %s)",
            len(topics.table),
            master,
            wrapper.dataVersion,
        )
        # persists the table and registers what changed (the whole table when a topic went away)
        changed = [name for name, config in topics.table.items() if old.get(name) != config]
        if not changed or old.keys() - topics.table.keys():
            self.broker.request_register()
        for name in changed:
            self.broker.request_register(name)
        if deleted:
            log.info(
                "slave sync: topics %s deleted on the master, deleting their consume queues and offsets",
                deleted,
            )
            for topic in deleted:
                self.broker.offsets.remove_topic(topic)  # as the master did (merges keep ours otherwise)
            await self.broker.persist_offsets()
            await self.broker.store.delete_topics(deleted)

    async def _apply_deletions(self, deleted: dict[str, int]) -> None:
        """The master's lately deleted topics (``broker.topics.DeletedTopics``): consume queues
        of a topic that end below its deletion offset hold the deleted topic's messages --
        the topic was created again before a sync could notice it missing -- and are emptied
        (with the topic's consumer offsets), once per deletion. Waits (for a later sync) until this
        store has dispatched up to the offset: a unit of the old topic dispatched afterwards
        would come back."""
        store, applied = self.broker.store, self.deletions_applied
        removed = False
        for topic, end in deleted.items():
            if applied.get(topic) == end:
                continue
            emptied = await store.empty_queues_ending_by(topic, end)
            if emptied is None:
                continue  # not dispatched that far yet: the next sync
            applied[topic] = end
            # the old topic's offsets, also where its queues were empty (a consumer of the new one
            # commits over them; where none has yet, they point past the new queues' ends); the
            # offset sync that follows brings back those the master holds for the new topic
            self.broker.offsets.remove_topic(topic)
            removed = True
            if emptied:
                log.info(
                    "slave sync: topic %s was deleted on the master (at offset %d) and created again; "
                    "emptied its consume queues %s here and removed its consumer offsets",
                    topic,
                    end,
                    emptied,
                )
        if removed:
            await self.broker.persist_offsets()  # once (a restarted slave applies them all again)
        for topic in [t for t in applied if t not in deleted]:
            del applied[topic]  # out of the master's table: never sent again

    async def sync_consumer_offset(self, master: str) -> None:
        response = await self._call(master, RequestCode.GET_ALL_CONSUMER_OFFSET, "GET_ALL_CONSUMER_OFFSET")
        body = response.body_bytes
        offsets = self.broker.offsets
        split = offset_table_entries(body)
        last = self._offsets_merged
        if split is not None and last is not None and last[1] == offsets.changes:
            # nothing changed here since the last merge: the entries the master left as they were
            # would set nothing again; only the others are decoded and merged
            version, entries = split
            changed = entries.items() - last[0].items()
            if not changed and data_version_of(version) == offsets.data_version:
                return  # the very table merged last (an idle group's commits leave it so)
            body = b"".join(
                (
                    b'{"dataVersion":',
                    version,
                    b',"offsetTable":{',
                    b",".join(k + b":" + v for k, v in changed),
                    b"}}",
                )
            )
        try:
            wrapper = ConsumerOffsetWrapper.decode(body)
        except (FastjsonError, ValueError) as exc:
            raise SlaveSyncError(f"GET_ALL_CONSUMER_OFFSET: bad body: {exc}") from exc
        offsets.merge(wrapper)
        self._offsets_merged = (split[1], offsets.changes) if split is not None else None

    async def sync_delay_offset(self, master: str) -> None:
        response = await self._call(master, RequestCode.GET_ALL_DELAY_OFFSET, "GET_ALL_DELAY_OFFSET")
        body = response.body_bytes
        try:
            DelayOffsetWrapper.decode(body)
        except (FastjsonError, ValueError) as exc:
            raise SlaveSyncError(f"GET_ALL_DELAY_OFFSET: bad body: {exc}") from exc
        path = os.path.join(self.broker.store_config.config_dir, "delayOffset.json")
        old = await trio.to_thread.run_sync(_read_or_none, path)
        if old == bytes(body):
            return
        if not await self.broker.metadata.write(path, bytes(body)):
            return  # logged; the next sync writes it
        service = getattr(self.broker, "delay_offsets", None)  # the schedule service, once it exists
        if service is not None and hasattr(service, "load"):
            service.load()

    async def sync_subscription_groups(self, master: str) -> None:
        response = await self._call(
            master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG"
        )
        body = response.body_bytes
        groups = self.broker.groups
        if leading_data_version(body) == groups.data_version:
            return  # unchanged: what the decoded table's version would say, without decoding it
        try:
            wrapper = SubscriptionGroupWrapper.decode(body)
        except (FastjsonError, ValueError) as exc:
            raise SlaveSyncError(f"GET_ALL_SUBSCRIPTIONGROUP_CONFIG: bad body: {exc}") from exc
        if groups.data_version == wrapper.dataVersion:
            return
        groups.replace_all(wrapper)
        self.broker.groups_changed()


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
