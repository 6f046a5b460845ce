"""Fixtures for the C++ client compatibility tests: a real ``rmq-container`` per test, client scenarios
in their own processes (see :mod:`tests.compat.cluster`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.compat.cluster import BrokerSpec, Clients, Container


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


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Clients]:
    clients = Clients(tmp_path / "client-home")
    yield clients
    for proc in clients.started:
        proc.kill()
