"""Logging setup for the ``rmq-container`` process and the canonical component logger names.

Every component logs through ``logging.getLogger(<canonical name>)``:

====================  ==========================================
``container``          the process itself (startup, banner, stop)
``container.config``   config loading (ignored keys, overrides)
``namesrv``            the name server
``controller.<id>``    the controller peer, e.g. ``controller.n0``
``broker.<display>``   a broker, e.g. ``broker.DefaultCluster_broker-a_0``
``remoting``           the shared transport
====================  ==========================================

One line per record: time with milliseconds, level, logger name (followed by the broker or
listener the record belongs to when the name does not say it: ``[store.recovery
DefaultCluster_broker-a_0]``, see :mod:`remoting.log_owner`), message.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import TextIO

from broker.config import BrokerConfig
from remoting.log_owner import LogOwnerFilter

LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-5s [%(name)s%(owner)s] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

PROCESS_LOGGER = "container"
NAMESRV_LOGGER = "namesrv"
REMOTING_LOGGER = "remoting"

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def controller_logger_name(self_id: str) -> str:
    """``controller.<controllerDLegerSelfId>``."""
    return f"controller.{self_id}"


def broker_logger_name(broker: BrokerConfig) -> str:
    """``broker.<cluster>_<brokerName>_<brokerId>``."""
    return f"broker.{broker.broker_display_name}"


class LogLevelError(ValueError):
    """A ``--log-level`` value that is neither ``LEVEL`` nor ``logger=LEVEL``."""


def parse_log_levels(specs: Iterable[str]) -> tuple[str | None, dict[str, str]]:
    """Split ``["DEBUG", "remoting=WARNING"]`` into a root level and per-logger levels."""
    root: str | None = None
    per_logger: dict[str, str] = {}
    for spec in specs:
        name, sep, level = spec.rpartition("=")
        level = level.strip().upper()
        if level not in LEVELS or (sep and not name.strip()):
            raise LogLevelError(
                f"bad log level {spec!r}: expected LEVEL or logger=LEVEL, LEVEL one of {LEVELS}"
            )
        if sep:
            per_logger[name.strip()] = level
        else:
            root = level
    return root, per_logger


def setup_logging(
    level: str = "INFO", per_logger: dict[str, str] | None = None, *, stream: TextIO | None = None
) -> None:
    """Send every record at ``level`` or above to ``stream`` (stderr) in :data:`LOG_FORMAT`.

    Replaces handlers installed by an earlier call, so it may be called again (tests do).
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
    handler.addFilter(LogOwnerFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_rmq_container", False):
            root.removeHandler(old)
    handler._rmq_container = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for name, lvl in (per_logger or {}).items():
        logging.getLogger(name).setLevel(lvl)
