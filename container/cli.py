"""``rmq-container``: run a name server, controller and brokers in one process.

    rmq-container                       # the dev cluster, conf/dev-cluster.toml
    rmq-container -c broker-container.conf
    rmq-container -c process.toml --print-config > effective.toml

Exit codes: 0 after a clean stop (SIGINT/SIGTERM/SIGHUP) or ``--print-config``; 2 for a config problem
(each unknown key is listed with file:line); 1 when the process could not start or failed.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import click
import trio

from container.config import KINDS, ConfigError, load_process_config
from container.config_fields import PROJECT_ROOT
from container.config_render import render_toml
from container.data_dir_lock import DataDirInUse, DataDirLock
from container.logs import PROCESS_LOGGER, LogLevelError, parse_log_levels, setup_logging
from container.port_offset import default_port_offset
from container.process import StartupError, raise_open_file_limit, run_process, shorten_gil_switch_interval

DEFAULT_CONFIG = PROJECT_ROOT / "conf" / "dev-cluster.toml"

log = logging.getLogger(PROCESS_LOGGER)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _print_banner(lines: list[str]) -> None:
    for line in lines:
        click.echo(line)
    sys.stdout.flush()
    # Everything allocated at startup (configs, tables, maps) lives as long as the process: move it out
    # of the collector's generations so the request path does not pay for scanning it.
    gc.collect()
    gc.freeze()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"TOML process file or upstream .properties/.conf file (default: {DEFAULT_CONFIG}).",
)
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default=None,
    help="What the file is; by default .toml is TOML and a .properties/.conf file's keys decide.",
)
@click.option("--print-config", is_flag=True, help="Print the effective config as TOML and exit.")
@click.option(
    "--allow-unknown-keys",
    is_flag=True,
    help="Warn about unknown config keys and skip them instead of refusing to start.",
)
@click.option(
    "--log-level",
    "log_levels",
    multiple=True,
    metavar="[LOGGER=]LEVEL",
    help="Root level (default INFO) or one logger's level, e.g. remoting=DEBUG; repeatable.",
)
@click.option("-v", "--verbose", count=True, help="Same as --log-level DEBUG.")
@click.option(
    "--data-dir",
    default=None,
    help="What ${rmq.data.dir} in the config means (default: $RMQ_DATA_DIR, else data/ in the project).",
)
@click.option(
    "--port-offset",
    type=int,
    default=None,
    help="Move every port of the config by N, listening and connecting alike (default: "
    "$RMQ_PORT_OFFSET, else 0): another copy of a layout beside the first. Give every process of a "
    "layout the same offset, and each copy its own --data-dir.",
)
def main(
    config_path: Path | None,
    kind: str | None,
    print_config: bool,
    allow_unknown_keys: bool,
    log_levels: tuple[str, ...],
    verbose: int,
    data_dir: str | None,
    port_offset: int | None,
) -> None:
    """Run a RocketMQ name server, controller and brokers in one process."""
    try:
        root_level, per_logger = parse_log_levels(log_levels)
    except LogLevelError as e:
        raise click.BadParameter(str(e), param_hint="--log-level") from None
    setup_logging("DEBUG" if verbose else (root_level or "INFO"), per_logger)

    path = config_path or DEFAULT_CONFIG
    try:
        if port_offset is None:
            port_offset = default_port_offset()
        config = load_process_config(
            path, kind, data_dir=data_dir, allow_unknown_keys=allow_unknown_keys, port_offset=port_offset
        )
    except ConfigError as e:
        click.echo(f"rmq-container: {e}", err=True)
        sys.exit(2)

    if print_config:
        click.echo(render_toml(config), nl=False)
        return

    lock = DataDirLock(config.dataDir, str(path)) if config.dataDir else None
    if lock is not None:
        try:
            lock.acquire()
        except DataDirInUse as e:
            click.echo(f"rmq-container: {e}", err=True)
            sys.exit(1)
    raise_open_file_limit()
    shorten_gil_switch_interval()
    try:
        code = trio.run(lambda: run_process(config, on_started=_print_banner))
    except* StartupError as group:
        for exc in _leaves(group):
            click.echo(f"rmq-container: {exc}", err=True)
        sys.exit(1)
    except* Exception:
        log.exception("rmq-container failed")
        sys.exit(1)
    sys.exit(code)


if __name__ == "__main__":
    main(prog_name="rmq-container")
