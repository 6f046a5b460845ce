"""The page helper process (store/page_helper.py): it faults a file's pages into the page cache
from another process at SCHED_IDLE (this process maps none of them), answers failures with an
errno, is started again after it died, exits when this process's end of its pipe closes, and a
mapped file falls back to populating itself where no helper can start."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import mapped_file
from store.mapped_file import PAGE_SIZE, MappedFile
from store.page_helper import PageHelper
from tests.integration.storekit import cached_pages, mapped_pages

MIB = 1024 * 1024


@pytest.fixture
def helper() -> Iterator[PageHelper]:
    h = PageHelper()
    yield h
    h.close()


def _file(tmp_path: Path, size: int) -> MappedFile:
    return MappedFile.open_sync(str(tmp_path / "f"), 0, size, create=True, prefault=True)


def test_the_helper_caches_pages_from_its_own_process_at_idle_priority(
    tmp_path: Path, helper: PageHelper
) -> None:
    mf = _file(tmp_path, 4 * MIB)
    try:
        assert not any(cached_pages(mf.path, MIB, 3 * MIB))  # reserved blocks, nothing read
        assert helper.populate(mf.path, MIB, 3 * MIB) == 0
        assert all(cached_pages(mf.path, MIB, 3 * MIB))
        # page by page, no readahead around them (which locks a window of pages a writer may wait on)
        assert not any(cached_pages(mf.path, 3 * MIB, 4 * MIB))
        assert not any(mapped_pages(mf, 0, 4 * MIB))  # none of it mapped by this process
        pid = helper.pid
        assert pid is not None
        assert pid != os.getpid()
        if hasattr(os, "SCHED_IDLE"):
            assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        assert os.sched_getscheduler(0) != getattr(os, "SCHED_IDLE", -1)  # this process untouched
    finally:
        assert mf.close()


def test_failures_come_back_as_errno_and_the_helper_goes_on(tmp_path: Path, helper: PageHelper) -> None:
    assert helper.populate(str(tmp_path / "missing"), 0, PAGE_SIZE) == -errno.ENOENT
    mf = _file(tmp_path, MIB)
    try:
        assert helper.populate(mf.path, 0, 2 * MIB) == -errno.EINVAL  # past the file's end
        assert helper.populate(mf.path, 0, MIB) == 0
    finally:
        assert mf.close()


def test_a_helper_that_died_is_started_again(tmp_path: Path, helper: PageHelper) -> None:
    mf = _file(tmp_path, MIB)
    try:
        assert helper.populate(mf.path, 0, PAGE_SIZE) == 0
        first = helper.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert helper.populate(mf.path, 0, MIB) == 0
        assert helper.pid not in (None, first)
    finally:
        assert mf.close()


def test_the_helper_exits_when_its_owner_does(tmp_path: Path) -> None:
    # a process that starts a helper and is then SIGKILLed: the helper sees its stdin end and exits
    code = (
        "import os, sys\n"
        "from store.page_helper import PAGE_HELPER\n"
        f"assert PAGE_HELPER.populate({str(tmp_path / 'f')!r}, 0, 4096) == 0\n"
        "print(PAGE_HELPER.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    (tmp_path / "f").write_bytes(bytes(4096))
    with subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    ) as owner:
        try:
            assert owner.stdout is not None
            pid = int(owner.stdout.readline())
            os.kill(pid, 0)  # running
        finally:
            owner.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return  # gone (and reaped by init: it was the owner's child)
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                return  # exited, a zombie until init reaps it
        time.sleep(0.02)
    pytest.fail(f"the page helper {pid} outlived its owner")


def test_without_a_helper_a_file_populates_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = PageHelper()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    assert broken.populate(str(tmp_path / "x"), 0, PAGE_SIZE) is None  # cannot start: says so
    monkeypatch.setattr(mapped_file, "PAGE_HELPER", broken)
    mf = _file(tmp_path, 2 * MIB)
    try:
        assert mf.populate_read_sync(0, 2 * MIB, lambda: True) == 2 * MIB
        assert all(mapped_pages(mf, 0, 2 * MIB))  # by this process's own madvise
    finally:
        assert mf.close()


def test_a_forked_child_starts_its_own_helper_and_leaves_the_parents(
    tmp_path: Path, helper: PageHelper
) -> None:
    mf = _file(tmp_path, MIB)
    try:
        assert helper.populate(mf.path, 0, PAGE_SIZE) == 0
        parent_helper = helper.pid
        with helper._lock:  # a fork while a request is in flight copies the lock held
            pid = os.fork()
            if pid == 0:  # the child: must not wait for the copied lock, nor use the parent's helper
                code = 1
                try:
                    ok = helper.populate(mf.path, 0, MIB) == 0
                    code = 0 if ok and helper.pid not in (None, parent_helper) else 2
                    helper.close()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert helper.pid == parent_helper  # the parent's helper untouched and still serving
        assert helper.populate(mf.path, 0, MIB) == 0
    finally:
        assert mf.close()
