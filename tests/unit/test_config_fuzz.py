"""Hand-edited config files, at random (hypothesis): the shipped dev cluster's TOML with a few edits
a person could make -- a key of a table set to a value of another type or out of range, a key
removed, an unknown key, a table that is not a table, brokers that are not a list of tables. Each
must load or be refused with a :class:`~container.config_fields.ConfigError` (the one-line message
``rmq-container`` prints, exit 2), never another exception (a traceback)."""

from __future__ import annotations

import copy
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig
from container.config import load_process_config
from container.config_fields import ConfigError
from container.config_render import toml_value
from controller.config import ControllerConfig
from namesrv.config import NamesrvConfig
from store.config import MessageStoreConfig

DEV = Path(__file__).resolve().parents[2] / "conf" / "dev-cluster.toml"
BASE: dict[str, Any] = tomllib.loads(DEV.read_text())


def _names(*classes: type[msgspec.Struct]) -> list[str]:
    return sorted({f.encode_name for cls in classes for f in msgspec.structs.fields(cls)})


KEYS = {
    "nettyServer": ["listenPort", "bindAddress", "serverWorkerThreads", "serverSocketSndBufSize"],
    "namesrv": _names(NamesrvConfig),
    "controller": _names(ControllerConfig),
    "broker": _names(BrokerConfig, MessageStoreConfig),
}
VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 1, 65535, 65536, 2**31, -(2**31) - 1]),
    st.floats(allow_nan=False, allow_infinity=True),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "true",
            "ASYNC_FLUSH",
            "SYNC_MASTER",
            "SLAVE",
            "127.0.0.1:0",
            "127.0.0.1:9876;",
            "n0-127.0.0.1:9878;n1-",
            "${rmq.data.dir}/x",
            "${user.home}/x",
            "${nothing}/x",
            "~/x",
            "/dev/null/x",
            "1s 5s 10x",
        ]
    ),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "listenPort"]), st.integers(-5, 5), max_size=2),
)


@st.composite
def edits(draw: st.DrawFn) -> dict[str, Any]:
    """The dev cluster's document after one to three edits."""
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(sorted(KEYS)))
        if table == "broker":
            brokers = doc.get("broker")
            if not isinstance(brokers, list) or not brokers or not isinstance(brokers[0], dict):
                continue
            target = brokers[draw(st.integers(0, len(brokers) - 1))]
        else:
            target = doc.get(table)
            if not isinstance(target, dict):
                continue
        what = draw(st.integers(0, 9))
        if what <= 5:  # a known key, another value
            target[draw(st.sampled_from(KEYS[table]))] = draw(VALUES)
        elif what == 6 and target:  # a key gone
            del target[draw(st.sampled_from(sorted(target)))]
        elif what == 7:  # a key nobody knows
            target[draw(st.sampled_from(["listenPrt", "brokerNme", "x", "NAMESRV_ADDR"]))] = draw(VALUES)
        elif what == 8:  # a table that is not one
            doc[table] = draw(VALUES)
        else:  # the brokers as something else
            doc["broker"] = draw(st.sampled_from([[], {}, [1], "broker-a"]) | VALUES)
    return doc


def _value(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {_value(v)}' for k, v in value.items()) + "}"
    return toml_value(value)


def _toml(doc: dict[str, Any]) -> str:
    """``doc`` as TOML: scalars first, then tables and arrays of tables."""
    lines: list[str] = []
    later: list[str] = []
    for key, value in doc.items():
        if isinstance(value, dict):
            later.append(f"[{key}]")
            later += [f'"{k}" = {_value(v)}' for k, v in value.items()]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                later.append(f"[[{key}]]")
                later += [f'"{k}" = {_value(v)}' for k, v in item.items()]
        else:
            lines.append(f'"{key}" = {_value(value)}')
    return "\n".join(lines + later) + "\n"


@settings(
    max_examples=int(os.environ.get("CONFIG_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(doc=edits())
def test_an_edited_dev_config_loads_or_is_refused_with_a_config_error(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="config-fuzz-") as root:
        path = Path(root) / "edited.toml"
        path.write_text(_toml(doc))
        assert tomllib.loads(path.read_text()) == doc  # the file says what was drawn
        refusal = ""
        try:
            load_process_config(path, data_dir=os.path.join(root, "data"))
        except ConfigError as e:
            refusal = str(e).strip() or f"{type(e).__name__} without a message"
            event(f"refused: {type(e).__name__}")
        else:
            event("loaded")
        assert "without a message" not in refusal


def test_the_unedited_dev_config_round_trips_and_loads() -> None:
    """The writer of this test reproduces the shipped file's document, which loads."""
    assert tomllib.loads(_toml(BASE)) == BASE
    with tempfile.TemporaryDirectory(prefix="config-fuzz-") as root:
        path = Path(root) / "dev.toml"
        path.write_text(_toml(BASE))
        cfg = load_process_config(path, data_dir=os.path.join(root, "data"))
        assert len(cfg.brokers) == 4
