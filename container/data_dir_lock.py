"""One process per config file and data directory: ``<data dir>/<config file name>.lock``.

A second copy of a layout started beside the first (``--port-offset``) without its own
``--data-dir`` would otherwise get as far as a component's own lock -- the controller's raft log,
a broker's store -- and stop there with a message about that component, after binding its ports.
The process takes an exclusive ``flock`` on this file before anything starts and writes its pid
into it; the kernel drops the lock when the process ends, however it ends. The lock is the config
file's because the processes of one layout (``conf/failover/``: core, node-1, node-2) share a data
directory, each under its own paths; one file run twice on one data directory puts both copies on
the same paths.
"""

from __future__ import annotations

import fcntl
import logging
import os

log = logging.getLogger("container")


class DataDirInUse(Exception):
    """Another live process holds the data directory's lock."""


class DataDirLock:
    """The lock of one config file's use of a data directory, held from :meth:`acquire` until the
    process exits."""

    def __init__(self, data_dir: str, config_path: str) -> None:
        self.data_dir = data_dir
        self.config_name = os.path.basename(config_path)
        self.path = os.path.join(data_dir, f"{self.config_name}.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; :class:`DataDirInUse` naming the holder's pid when another process has it.

        A directory that cannot be made or a lock file that cannot be written is left to the
        components, which say what they cannot do with their own paths."""
        try:
            os.makedirs(self.data_dir, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            log.debug("no lock on the data directory %s: %s", self.data_dir, e)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise DataDirInUse(
                f"data directory {self.data_dir} is in use by another rmq-container running "
                f"{self.config_name}{pid}: stop that one, or give this one its own --data-dir "
                "(or $RMQ_DATA_DIR)"
            ) from None
        except OSError as e:  # a file system without flock (some network mounts): go on unlocked
            os.close(fd)
            log.warning(
                "cannot lock the data directory %s (%s): a second copy on it is not refused", self.data_dir, e
            )
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd  # never closed: the flock lasts as long as the process
