"""All consume queues of one store, plus the manifest of which queues exist.

Upstream: ``ConsumeQueueStore`` / ``DefaultMessageStore.consumeQueueTable``. The manifest
(``<root>/consumeQueueManifest``, one ``topic<TAB>queueId`` line per queue ever created, this store's
own file) is what lets recovery notice a consume queue whose directory was deleted and rebuild it
from the commit log; upstream has no such file and would silently serve an empty queue.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import shutil
from collections.abc import Callable, Iterator

from store.consume_queue import ConsumeQueue, list_queue_dirs
from store.errors import StoreOpenError
from store.mapped_file import MappedFile, fsync_dir

log = logging.getLogger("store.consume_queue")

MANIFEST_NAME = "consumeQueueManifest"


class ConsumeQueueStore:
    """topic -> queue id -> :class:`ConsumeQueue`. Creating a queue object creates no file."""

    def __init__(self, root_dir: str, store_root: str, file_size: int) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self.manifest_path = os.path.join(store_root, MANIFEST_NAME)
        self.tables: dict[str, dict[int, ConsumeQueue]] = {}
        # queues whose manifest line is not yet durable
        self._unrecorded: list[tuple[str, int]] = []
        self._recorded: set[tuple[str, int]] = set()
        #: called with (topic, queue id) when a queue is created after loading (the broker makes
        #: sure its topic table routes every queue that holds messages)
        self.on_new_queue: Callable[[str, int], None] | None = None
        #: queues that may hold staged units (see store.consume_queue), each once (its
        #: ``listed``); the send path adds a queue when it stages, :meth:`dirty_files`
        #: materializes them all
        self.staging: list[ConsumeQueue] = []

    # --- lookup ----------------------------------------------------------------------------------

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        t = self.tables.get(topic)
        return t.get(queue_id) if t is not None else None

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        t = self.tables.get(topic)
        if t is None:
            t = self.tables[topic] = {}
        cq = t.get(queue_id)
        if cq is None:
            cq = t[queue_id] = ConsumeQueue(topic, queue_id, self.root_dir, self.file_size)
            if (topic, queue_id) not in self._recorded:
                self._unrecorded.append((topic, queue_id))
            if self.on_new_queue is not None:
                self.on_new_queue(topic, queue_id)
        return cq

    def reset(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Replace a queue by a fresh, empty one (its files must be gone already)."""
        t = self.tables.setdefault(topic, {})
        old = t.get(queue_id)
        if old is not None:
            old.staged = 0  # its files are gone
        cq = t[queue_id] = ConsumeQueue(topic, queue_id, self.root_dir, self.file_size)
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for t in self.tables.values():
            yield from t.values()

    def topics(self) -> list[str]:
        return sorted(self.tables)

    # --- loading ---------------------------------------------------------------------------------

    def load_sync(self) -> tuple[list[str], set[tuple[str, int]]]:
        """Load every queue directory and the manifest; blocking.

        Returns (problems, queues to rebuild): queues listed in the manifest whose directory or files
        are gone, and queues whose files have a gap.
        """
        problems: list[str] = []
        rebuild: set[tuple[str, int]] = set()
        os.makedirs(self.root_dir, exist_ok=True)
        recorded = self._read_manifest()
        on_disk = set(list_queue_dirs(self.root_dir))
        for topic, qid in sorted(on_disk):
            cq = self.get_or_create(topic, qid)
            try:
                found = cq.load_sync()
            except OSError as exc:
                if exc.errno == errno.ENOMEM:  # the process's memory maps (store.mapped_file.MapBudget)
                    raise StoreOpenError(
                        f"cannot load consume queue {topic}/{qid}: this store has {len(on_disk)} consume "
                        f"queues and {exc.strerror}"
                    ) from exc
                if exc.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                raise StoreOpenError(
                    f"cannot map the files of consume queue {topic}/{qid} in {self.root_dir}: {exc.strerror}. "
                    f"The process may open {soft} files and has no descriptor left (this store has "
                    f"{len(on_disk)} consume queues; a map holds no descriptor, but opening a file takes "
                    "one for a moment, and connections and index files hold theirs). Raise the limit "
                    "(ulimit -Hn / systemd LimitNOFILE; the process raises its soft limit to the hard one), "
                    "or delete unused topics (rmq-admin deleteTopic; with the data directory of a dev cluster, "
                    "deleting the whole directory starts it afresh)"
                ) from exc
            if any("does not follow" in p for p in found):
                rebuild.add((topic, qid))
            problems.extend(found)
        for topic, qid in sorted(recorded):
            cq = self.get(topic, qid)
            if cq is None or not cq.mfq.files:
                msg = f"consume queue {topic}/{qid} is listed in the manifest but has no files: rebuilding"
                log.warning(msg)
                problems.append(msg)
                rebuild.add((topic, qid))
                self.get_or_create(topic, qid)
        self._recorded = recorded
        self._unrecorded = [k for k in self._unrecorded if k not in recorded]
        return problems, rebuild

    def _read_manifest(self) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        try:
            with open(self.manifest_path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return out
        for line in lines:
            topic, sep, qid = line.partition("\t")
            if sep and qid.lstrip("-").isdigit():
                out.add((topic, int(qid)))
            elif line:
                log.warning("ignoring malformed manifest line %r in %s", line, self.manifest_path)
        return out

    # --- manifest --------------------------------------------------------------------------------

    def has_unrecorded(self) -> bool:
        """Whether queues wait for their manifest line."""
        return bool(self._unrecorded)

    def take_unrecorded(self) -> list[tuple[str, int]]:
        """Queues created since the last call, to append to the manifest."""
        out, self._unrecorded = self._unrecorded, []
        return out

    def restore_unrecorded(self, queues: list[tuple[str, int]]) -> None:
        """Queues taken by :meth:`take_unrecorded` whose recording failed: the next round has them."""
        self._unrecorded = queues + self._unrecorded

    def record_sync(self, queues: list[tuple[str, int]]) -> None:
        """Append queues to the manifest durably; blocking."""
        if not queues:
            return
        data = "".join(f"{t}\t{q}\n" for t, q in queues).encode()
        new = not os.path.exists(self.manifest_path)
        fd = os.open(self.manifest_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, "short write")
                os.fdatasync(fd)
            except OSError:
                # a full disk: no partial line stays (the next round appends the whole lines)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        if new:
            fsync_dir(os.path.dirname(self.manifest_path))
        self._recorded.update(queues)

    def rewrite_manifest_sync(self, queues: list[tuple[str, int]]) -> None:
        """Replace the manifest atomically (after deleting topics); blocking."""
        tmp = self.manifest_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(f"{t}\t{q}\n" for t, q in queues))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.manifest_path)
        fsync_dir(os.path.dirname(self.manifest_path))
        self._recorded = set(queues)

    # --- deletion --------------------------------------------------------------------------------

    def detach_topics(self, topics: list[str]) -> list[ConsumeQueue]:
        """Forget the topics' queues (the caller closes them and deletes their directories)."""
        gone: list[ConsumeQueue] = []
        for topic in topics:
            t = self.tables.pop(topic, None)
            if t:
                gone.extend(t.values())
        gone_keys = {(cq.topic, cq.queue_id) for cq in gone}
        self._unrecorded = [k for k in self._unrecorded if k not in gone_keys]
        return gone

    def detach_queues(self, keys: list[tuple[str, int]]) -> list[ConsumeQueue]:
        """Forget single queues (the caller closes them and deletes their files); a topic left
        without queues is forgotten too."""
        gone: list[ConsumeQueue] = []
        for topic, queue_id in keys:
            t = self.tables.get(topic)
            cq = t.pop(queue_id, None) if t is not None else None
            if cq is None:
                continue
            gone.append(cq)
            if not t:
                del self.tables[topic]
        gone_keys = {(cq.topic, cq.queue_id) for cq in gone}
        self._unrecorded = [k for k in self._unrecorded if k not in gone_keys]
        return gone

    def remove_empty_dirs_sync(self, keys: list[tuple[str, int]]) -> None:
        """Remove the directories of queues whose files were deleted, and their topics' when
        empty; a directory something was written to meanwhile stays. Blocking."""
        for topic, queue_id in keys:
            for path in (
                os.path.join(self.root_dir, topic, str(queue_id)),
                os.path.join(self.root_dir, topic),
            ):
                try:
                    os.rmdir(path)
                except OSError:  # not empty (a new file), or gone already
                    break
        fsync_dir(self.root_dir)

    def live_keys(self) -> list[tuple[str, int]]:
        return [(cq.topic, cq.queue_id) for cq in self]

    def delete_dirs_sync(self, topics: list[str]) -> None:
        for topic in topics:
            shutil.rmtree(os.path.join(self.root_dir, topic), ignore_errors=True)
        fsync_dir(self.root_dir)

    def dirty_files(self) -> list[tuple[MappedFile, int]]:
        """(file, wrote position) of every consume-queue file with unflushed bytes. One
        comprehension (no call per queue): the logics flusher runs it on the event loop every
        second, over every queue (10,000 queues: 3.5-5 ms as a call per queue, 2 ms as this).
        Staged units are copied into the maps first."""
        if self.staging:
            for cq in self.staging:
                cq.materialize()
                cq.listed = False
            self.staging.clear()
        return [
            (mf, w)
            for table in self.tables.values()
            for cq in table.values()
            for mf in cq.mfq.files
            if mf.flushed_position < (w := mf.wrote_position)
        ]

    def drop_staged(self) -> None:
        """Forget every staged unit (what a crash does; recovery rebuilds them)."""
        for cq in self.staging:
            cq.staged = 0
            cq.listed = False
        self.staging.clear()

    def close(self) -> None:
        for cq in self:
            cq.close()
