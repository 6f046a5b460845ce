"""remoting.repeats.RepeatedLog: a retry loop's warning once per change, repeats at DEBUG."""

from __future__ import annotations

import logging

import pytest

from remoting.repeats import RepeatedLog

LOGGER = "tests.repeats"


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_same_text_is_logged_once_then_at_debug_until_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    rep = RepeatedLog(logging.getLogger(LOGGER), interval=3600)
    assert rep.log("a", logging.WARNING, "no master")
    assert not rep.log("a", logging.WARNING, "no master")
    assert rep.log("b", logging.WARNING, "no master")  # keys are independent
    assert rep.log("a", logging.WARNING, "another reason")
    assert records(caplog) == [
        (logging.WARNING, "no master"),
        (logging.DEBUG, "no master (repeated)"),
        (logging.WARNING, "no master"),
        (logging.WARNING, "another reason"),
    ]


def test_whatever_text_repeats_a_key_at_debug_even_when_the_text_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    rep = RepeatedLog(logging.getLogger(LOGGER), interval=3600)
    assert rep.log("a", logging.WARNING, "body of 1025 bytes", whatever_text=True)
    assert not rep.log("a", logging.WARNING, "body of 1026 bytes", whatever_text=True)
    assert rep.log("b", logging.WARNING, "body of 1027 bytes", whatever_text=True)
    assert records(caplog) == [
        (logging.WARNING, "body of 1025 bytes"),
        (logging.DEBUG, "body of 1026 bytes (repeated)"),
        (logging.WARNING, "body of 1027 bytes"),
    ]


def test_forget_and_the_interval_bring_the_full_level_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    rep = RepeatedLog(logging.getLogger(LOGGER), interval=3600)
    rep.log("a", logging.WARNING, "x")
    rep.forget("a")
    assert rep.log("a", logging.WARNING, "x")
    again = RepeatedLog(logging.getLogger(LOGGER), interval=0.0)
    assert again.log("a", logging.INFO, "y")
    assert again.log("a", logging.INFO, "y")
    assert [level for level, _ in records(caplog)] == [
        logging.WARNING,
        logging.WARNING,
        logging.INFO,
        logging.INFO,
    ]


def test_resolved_says_so_only_after_a_logged_failure(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    rep = RepeatedLog(logging.getLogger(LOGGER), interval=3600)
    assert not rep.resolved("disk", "works again")  # nothing was wrong: nothing to say
    rep.log("disk", logging.ERROR, "full")
    rep.log("disk", logging.ERROR, "full")
    assert rep.resolved("disk", "works again")
    assert not rep.resolved("disk", "works again")  # once
    # a condition that comes and goes: its repeats within the interval, and their ends, are quiet
    assert not rep.log("disk", logging.ERROR, "full")
    assert not rep.resolved("disk", "works again")
    assert rep.log("disk", logging.ERROR, "no inodes")  # another reason: full level
    assert rep.resolved("disk", "works again")
    rep.forget("disk")
    assert rep.log("disk", logging.ERROR, "full")
    assert records(caplog) == [
        (logging.ERROR, "full"),
        (logging.DEBUG, "full (repeated)"),
        (logging.INFO, "works again"),
        (logging.DEBUG, "full (repeated)"),
        (logging.ERROR, "no inodes"),
        (logging.INFO, "works again"),
        (logging.ERROR, "full"),
    ]
