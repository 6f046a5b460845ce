"""The data-directory lock of one config file (container/data_dir_lock.py), on real files: flock
locks belong to an open file, so two locks of one process conflict as two processes' do."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

import pytest

from container.data_dir_lock import DataDirInUse, DataDirLock


def test_the_same_config_on_the_same_data_dir_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = DataDirLock(str(tmp_path / "data"), "/etc/x/dev-cluster.toml")
    first.acquire()
    assert (tmp_path / "data" / "dev-cluster.toml.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirInUse) as refused:
        DataDirLock(str(tmp_path / "data"), "/elsewhere/dev-cluster.toml").acquire()
    assert str(refused.value) == (
        f"data directory {tmp_path / 'data'} is in use by another rmq-container running dev-cluster.toml "
        f"(pid {os.getpid()}): stop that one, or give this one its own --data-dir (or $RMQ_DATA_DIR)"
    )


def test_the_files_of_one_layout_share_a_data_dir(tmp_path: Path) -> None:
    for name in ("core.toml", "node-1.toml", "node-2.toml"):
        DataDirLock(str(tmp_path), f"conf/failover/{name}").acquire()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "core.toml.lock",
        "node-1.toml.lock",
        "node-2.toml.lock",
    ]


def test_a_data_dir_that_cannot_be_made_is_left_to_the_components(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    DataDirLock(str(tmp_path / "afile" / "data"), "dev-cluster.toml").acquire()  # no exception


def test_a_file_system_without_flock_goes_on_unlocked_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # some network mounts answer flock with ENOLCK; none can be mounted here, so flock says it
    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, "container"):
        DataDirLock(str(tmp_path), "dev-cluster.toml").acquire()
    assert f"cannot lock the data directory {tmp_path}" in caplog.text
    assert "a second copy on it is not refused" in caplog.text
