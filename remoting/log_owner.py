"""Which broker (or other component) a log record belongs to, for the process log.

One ``rmq-container`` process hosts several brokers that share the store, replication and
remoting modules, whose loggers are named after the module (``store.recovery``,
``store.ha.connection``, ``remoting``): without help, "slave 2 handshake" or "recovery done" could
come from any of them. Each broker's task sets :data:`LOG_OWNER` to its display name
(``DefaultCluster_broker-a_0``) before it starts its store and services, and the server sets it to
the listener's name for each accepted connection; trio tasks and ``trio.to_thread`` calls inherit
it from the task that started them (not a client's connection tasks: one client may serve every
broker of the process; nor trio's system tasks, which start from the run's context).
:class:`LogOwnerFilter`, installed on the process's handler, puts it in the record
(``%(owner)s``) unless the logger's name already says it.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

#: display name of the component the current task works for ("" when none)
LOG_OWNER: ContextVar[str] = ContextVar("rmq_log_owner", default="")


def set_log_owner(name: str) -> None:
    """The current task (and the tasks and threads it starts from now on) work for ``name``."""
    LOG_OWNER.set(name)


class LogOwnerFilter(logging.Filter):
    """Sets ``record.owner`` to ``" <owner>"``, or ``""`` when there is none or the logger's name
    already contains it (``broker.DefaultCluster_broker-a_0``, ``namesrv``). Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        owner = LOG_OWNER.get()
        record.owner = f" {owner}" if owner and owner not in record.name else ""
        return True
