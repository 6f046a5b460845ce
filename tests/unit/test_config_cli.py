"""The rmq-container CLI's config handling (--print-config, errors, --log-level) and log setup."""

from __future__ import annotations

import io
import logging
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker.config import BrokerConfig
from container.cli import main
from container.logs import LogLevelError, broker_logger_name, parse_log_levels, setup_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("remoting").setLevel(logging.NOTSET)


def test_print_config_prints_effective_toml(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"  # the name decides: no name-server-only key
    conf.write_text("listenPort=19876\nbindAddress=127.0.0.1\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "--print-config"])
    assert result.exit_code == 0, result.output
    doc = tomllib.loads(result.stdout)
    assert doc["namesrv"]["listenPort"] == 19876
    assert doc["namesrv"]["scanNotActiveBrokerInterval"] == 5000
    assert doc["nettyServer"]["bindAddress"] == "127.0.0.1"


def test_kind_option_overrides_detection(tmp_path: Path) -> None:
    conf = tmp_path / "x.conf"
    conf.write_text("listenPort=19876\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "--kind", "namesrv", "--print-config"])
    assert result.exit_code == 0, result.output
    assert "[namesrv]" in result.stdout
    assert "[[broker]]" not in result.stdout


def test_unknown_keys_exit_2_and_list_every_key(tmp_path: Path) -> None:
    conf = tmp_path / "p.toml"
    conf.write_text("[namesrv]\nlistenPort = 1\nfoo = 2\n\n[[broker]]\nbar = 3\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "--print-config"])
    assert result.exit_code == 2
    assert f"{conf}:3: unknown key 'foo'" in result.stderr
    assert f"{conf}:6: unknown key 'bar'" in result.stderr


def test_allow_unknown_keys_warns_and_skips(tmp_path: Path) -> None:
    conf = tmp_path / "p.toml"
    conf.write_text("[namesrv]\nlistenPort = 1\nfoo = 2\n")
    result = CliRunner().invoke(main, ["-c", str(conf), "--print-config", "--allow-unknown-keys"])
    assert result.exit_code == 0, result.output
    assert f"{conf}:3: unknown key 'foo' (skipped)" in result.stderr
    assert tomllib.loads(result.stdout)["namesrv"]["listenPort"] == 1


def test_bad_log_level_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--log-level", "LOUD", "--print-config"])
    assert result.exit_code == 2
    assert "bad log level" in result.stderr


def test_parse_log_levels() -> None:
    assert parse_log_levels(["debug", "remoting=WARNING", "broker.C_a_0 = error"]) == (
        "DEBUG",
        {"remoting": "WARNING", "broker.C_a_0": "ERROR"},
    )
    with pytest.raises(LogLevelError):
        parse_log_levels(["=INFO"])


def test_log_lines_carry_time_level_and_component_name() -> None:
    out = io.StringIO()
    setup_logging("INFO", {"remoting": "WARNING"}, stream=out)
    name = broker_logger_name(BrokerConfig(brokerClusterName="DefaultCluster", brokerName="broker-a"))
    logging.getLogger(name).info("hello")
    logging.getLogger("remoting").info("hidden")
    logging.getLogger("remoting").warning("shown")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("INFO  [broker.DefaultCluster_broker-a_0] hello")
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ", lines[0])
    assert lines[1].endswith("WARNING [remoting] shown")
