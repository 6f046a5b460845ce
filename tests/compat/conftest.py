"""Fixtures for the C++ client compatibility tests: a real ``rmq-container`` per test, client scenarios
in their own processes (see :mod:`tests.compat.cluster`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import BrokerSpec, ClientProcess, Container, run_client

pytest.importorskip("rocketmq.client")


@pytest.fixture
def make_container(tmp_path: Path) -> Iterator[Callable[..., Container]]:
    """``make_container(*names, **extra)`` → a started container with master broker groups ``names``
    (default broker-a and broker-b), each with the ``[[broker]]`` keys in ``extra``.

    The process is stopped at teardown; its log is printed there (pytest shows it for failures)."""
    made: list[Container] = []

    def make(*names: str, **extra: object) -> Container:
        brokers = [BrokerSpec(name, dict(extra)) for name in (names or ("broker-a", "broker-b"))]
        container = Container(tmp_path / f"container{len(made)}", brokers)
        made.append(container)
        container.start()
        return container

    yield make
    for container in made:
        container.close()
        print(f"=== container {container.directory} (started {container.starts}x)")
        print(container.output())


class Clients:
    """Runs C++ client scenarios in fresh processes, all with ``$HOME`` = ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.started: list[ClientProcess] = []

    def __call__(self, spec: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Run ``spec`` to its end and return the report (with ``_log``, the client's log)."""
        return run_client(spec, home=self.home, timeout=timeout)

    def start(self, spec: dict[str, Any]) -> ClientProcess:
        """Start ``spec`` in the background; call ``.report(timeout)`` on the result."""
        proc = ClientProcess(spec, home=self.home)
        self.started.append(proc)
        return proc


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Clients]:
    clients = Clients(tmp_path / "client-home")
    yield clients
    for proc in clients.started:
        proc.kill()
