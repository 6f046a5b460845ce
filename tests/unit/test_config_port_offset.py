"""``--port-offset`` (container/port_offset.py): every port a config names, listening or
connecting, moved by the offset; the shipped layouts stay consistent; errors name key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from container.config import InvalidConfig, ProcessConfig, load_process_config
from container.config_fields import PROJECT_ROOT
from container.config_render import render_toml
from container.port_offset import default_port_offset

CONF = PROJECT_ROOT / "conf"


def _ports(cfg: ProcessConfig) -> dict[str, object]:
    """Every port-bearing value of ``cfg``, by a readable name."""
    out: dict[str, object] = {}
    if cfg.namesrv is not None:
        out["namesrv.listenPort"] = cfg.namesrv.listenPort
    if cfg.controller is not None:
        out["controller.peers"] = cfg.controller.controllerDLegerPeers
    if cfg.container is not None:
        out["container.listenPort"] = cfg.container.listenPort
        out["container.namesrvAddr"] = cfg.container.namesrvAddr
    for spec in cfg.brokers:
        name = spec.broker.broker_display_name
        out[f"{name}.listenPort"] = spec.broker.listenPort
        out[f"{name}.haListenPort"] = spec.store.haListenPort
        out[f"{name}.namesrvAddr"] = spec.broker.namesrvAddr
        out[f"{name}.controllerAddr"] = spec.broker.controllerAddr
        out[f"{name}.haMasterAddress"] = spec.store.haMasterAddress
    return out


def _moved(value: object, offset: int) -> object:
    """``value`` with every port in it moved: an int port, or ``[id-]host:port`` lists."""
    if isinstance(value, int):
        return value + offset if value > 0 else value
    if not value:
        return value
    assert isinstance(value, str)
    entries = []
    for entry in value.split(";"):
        head, _, port = entry.rpartition(":")
        entries.append(f"{head}:{int(port) + offset}")
    return ";".join(entries)


@pytest.mark.parametrize(
    "name",
    [
        "dev-cluster.toml",
        "failover/core.toml",
        "failover/node-1.toml",
        "failover/node-2.toml",
        "container.properties",
        "namesrv.properties",
        "controller.properties",
        "broker-a.properties",
        "controller-cluster/controller-n1.properties",
    ],
)
def test_every_port_of_a_shipped_file_moves_by_the_offset(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    plain = _ports(load_process_config(CONF / name, data_dir=str(tmp_path)))
    moved = _ports(load_process_config(CONF / name, data_dir=str(tmp_path), port_offset=1000))
    assert plain, f"{name} names no port"
    assert moved == {key: _moved(value, 1000) for key, value in plain.items()}


def test_the_failover_layout_moved_as_a_whole_still_points_at_itself(tmp_path: Path) -> None:
    core, node1, node2 = (
        load_process_config(CONF / "failover" / f, data_dir=str(tmp_path), port_offset=-500)
        for f in ("core.toml", "node-1.toml", "node-2.toml")
    )
    assert core.namesrv is not None
    assert core.controller is not None
    namesrv = f"127.0.0.1:{core.namesrv.listenPort}"
    assert namesrv == "127.0.0.1:9376"
    for node in (node1, node2):
        for spec in node.brokers:
            assert spec.broker.namesrvAddr == namesrv
            assert spec.broker.controllerAddr == core.controller.self_address == "127.0.0.1:9378"
            assert spec.store.haListenPort == spec.broker.listenPort + 1


def test_a_name_server_address_from_the_environment_is_not_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # $NAMESRV_ADDR is the user's own address, not part of the layout in the file
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.5:9876")
    f = tmp_path / "b.properties"
    f.write_text("brokerName=broker-x\nlistenPort=20911\nstorePathRootDir=" + str(tmp_path / "s") + "\n")
    cfg = load_process_config(f, port_offset=7)
    (spec,) = cfg.brokers
    assert spec.broker.namesrvAddr == "10.0.0.5:9876"
    assert (spec.broker.listenPort, spec.store.haListenPort) == (20918, 20919)


def test_ephemeral_ports_stay_ephemeral(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    f = tmp_path / "p.toml"
    f.write_text(
        "[nettyServer]\nbindAddress='127.0.0.1'\n[namesrv]\nlistenPort=19876\n[[broker]]\nlistenPort=0\n"
    )
    cfg = load_process_config(f, port_offset=10)
    (spec,) = cfg.brokers
    assert (spec.broker.listenPort, spec.store.haListenPort) == (0, 0)
    assert spec.broker.namesrvAddr == "127.0.0.1:19886"  # derived from the moved local name server


@pytest.mark.parametrize("offset", [60000, -9877])
def test_an_offset_beyond_the_port_range_is_refused_naming_key_and_file(offset: int, tmp_path: Path) -> None:
    with pytest.raises(
        InvalidConfig,
        match=r"dev-cluster\.toml: port offset [-+]\d+ moves listenPort 9876 to -?\d+, outside 1-65535",
    ):
        load_process_config(CONF / "dev-cluster.toml", data_dir=str(tmp_path), port_offset=offset)


def test_a_malformed_peer_is_left_for_the_peers_check_to_name(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        "[controller]\ncontrollerDLegerGroup='g'\ncontrollerDLegerPeers='n0-127.0.0.1:9878;garbage'\n"
        "controllerDLegerSelfId='n0'\ncontrollerStorePath='" + str(tmp_path / "c") + "'\n"
    )
    with pytest.raises(InvalidConfig, match="garbage"):
        load_process_config(f, port_offset=3)


def test_print_config_says_the_ports_were_moved(tmp_path: Path) -> None:
    text = render_toml(
        load_process_config(CONF / "dev-cluster.toml", data_dir=str(tmp_path), port_offset=100)
    )
    assert "# ports moved by +100 (--port-offset)" in text
    assert "listenPort = 9976" in text
    assert "# ports moved" not in render_toml(
        load_process_config(CONF / "dev-cluster.toml", data_dir=str(tmp_path))
    )


@pytest.mark.parametrize(("env", "offset"), [(None, 0), ("", 0), (" 250 ", 250), ("-40", -40)])
def test_the_default_offset_comes_from_the_environment(
    env: str | None, offset: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is None:
        monkeypatch.delenv("RMQ_PORT_OFFSET", raising=False)
    else:
        monkeypatch.setenv("RMQ_PORT_OFFSET", env)
    assert default_port_offset() == offset


def test_a_malformed_offset_in_the_environment_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_PORT_OFFSET", "ten")
    with pytest.raises(InvalidConfig, match=r"\$RMQ_PORT_OFFSET='ten' is not a whole number of ports"):
        default_port_offset()
