"""Render a :class:`~container.config.ProcessConfig` as TOML (``rmq-container --print-config``).

Every key of every component is written, defaults included, grouped in the tables the TOML loader
reads, so the output can be fed back to ``rmq-container -c``. Keys whose value is unset (None) are
written as comments. A container's ``brokerConfigPaths`` is written as a comment too, because its
brokers are written out as ``[[broker]]`` tables.
"""

from __future__ import annotations

import enum
import json
import math

import msgspec

from container.config import ProcessConfig
from container.config_fields import field_kinds


def toml_value(value: object) -> str:
    """One scalar as TOML (str, bool, int, float, enum)."""
    if isinstance(value, enum.Enum):
        value = value.name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are valid TOML basic-string escapes; DEL must be escaped in TOML.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    raise TypeError(f"cannot render {type(value).__name__} as a TOML value")


def _struct_lines(obj: msgspec.Struct, skip: frozenset[str] = frozenset()) -> list[str]:
    lines: list[str] = []
    for name in field_kinds(type(obj)):
        value = getattr(obj, name)
        if name in skip:
            continue
        if value is None:
            lines.append(f"# {name} =   (not set)")
        else:
            lines.append(f"{name} = {toml_value(value)}")
    return lines


def render_toml(cfg: ProcessConfig) -> str:
    """The effective configuration of ``cfg`` as a TOML process file."""
    out: list[str] = [f"# Effective configuration of {cfg.source or 'rmq-container'}"]
    if cfg.dataDir:
        out.append(f"# data dir (${{rmq.data.dir}}): {cfg.dataDir}")
    if cfg.portOffset:
        out.append(
            f"# ports moved by {cfg.portOffset:+d} (--port-offset): the values below are the moved ones"
        )
    if cfg.namesrv is not None:
        out += ["", "[namesrv]", *_struct_lines(cfg.namesrv)]
    if cfg.controller is not None:
        out += ["", "[controller]", *_struct_lines(cfg.controller)]
    if cfg.container is not None:
        out += ["", "[container]", *_struct_lines(cfg.container, frozenset({"brokerConfigPaths"}))]
        if cfg.container.brokerConfigPaths:
            out.append(
                f"# brokerConfigPaths = {toml_value(cfg.container.brokerConfigPaths)}"
                "   (its brokers are the [[broker]] tables below)"
            )
    for spec in cfg.brokers:
        out += [
            "",
            "[[broker]]",
            f"# {spec.broker.broker_display_name}, from {spec.source}",
            "# -- BrokerConfig --",
            *_struct_lines(spec.broker),
            "# -- MessageStoreConfig --",
            *_struct_lines(spec.store),
        ]
    out += ["", "[nettyServer]", *_struct_lines(cfg.nettyServer)]
    out += ["", "[nettyClient]", *_struct_lines(cfg.nettyClient)]
    return "\n".join(out) + "\n"
