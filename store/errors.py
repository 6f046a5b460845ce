"""Errors with which a store refuses to open: the message says what the user must do."""

from __future__ import annotations


class StoreOpenError(RuntimeError):
    """The store cannot be opened as configured; nothing on disk was changed. Its message names the
    problem and the way out (a process hosting the store reports it as a startup error)."""
