"""Warnings that a retry loop produces over and over (a broker asks for an election several times
a second while no master can be elected): the first one, and each one whose text changed, are
logged at the caller's level; identical repeats within :attr:`RepeatedLog.interval` seconds go to
DEBUG, so that the log says what is wrong once, not a thousand times, and still reminds."""

from __future__ import annotations

import logging
import time

#: repeats of the same text are logged again at full level after this many seconds
REPEAT_INTERVAL = 30.0
#: keys remembered before the table starts over (keys are broker-set or broker names)
_MAX_KEYS = 4096


class RepeatedLog:
    """Per key, the last text logged at full level and when."""

    def __init__(self, logger: logging.Logger, interval: float = REPEAT_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, tuple[str, float]] = {}
        #: keys whose last full-level message no :meth:`resolved` has answered yet
        self._open: set[str] = set()

    def log(self, key: str, level: int, message: str, *, whatever_text: bool = False) -> bool:
        """Log ``message`` at ``level`` if it is new for ``key`` or the interval passed, else at
        DEBUG; True when it was logged at ``level``. With ``whatever_text`` a key's messages
        repeat at DEBUG within the interval even when their text differs (a reason whose text
        carries numbers that change from one occurrence to the next)."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and (whatever_text or last[0] == message) and now - last[1] < self.interval:
            self.logger.debug("%s (repeated)", message)
            return False
        if last is None and len(self._last) >= _MAX_KEYS:
            self._last.clear()
            self._open.clear()
        self._last[key] = (message, now)
        self._open.add(key)
        self.logger.log(level, "%s", message)
        return True

    def forget(self, key: str) -> None:
        """The condition behind ``key`` is over: its next message is logged at full level."""
        self._last.pop(key, None)
        self._open.discard(key)

    def resolved(self, key: str, message: str) -> bool:
        """The condition behind ``key`` is over, for now: if its last message was logged at full
        level, log ``message`` at INFO (a retry loop's "works again"); True when it did. The key's
        last message is kept: a condition that comes and goes (a disk at its last bytes, a process
        at its descriptor limit) repeats at DEBUG within the interval, and its ups at all."""
        if key not in self._open:
            return False
        self._open.discard(key)
        self.logger.info("%s", message)
        return True
