"""Benchmark runner: ``python -m bench [NAME ...]`` (``bin/bench``); all benchmarks without names.

Discovers ``bench/<name>.py`` modules that define ``run() -> list[dict]`` (see
:mod:`bench.common`), runs the selected ones, prints a markdown table per benchmark and writes
``bench/results/<name>.json``. Exit status 1 when a benchmark raised or a name is unknown.
"""

from __future__ import annotations

import importlib
import json
import logging
import platform
import sys
import time
import traceback
from pathlib import Path

from bench.common import markdown_table

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
NOT_BENCHMARKS = {"__init__", "__main__", "common"}


def discover() -> list[str]:
    names = []
    for path in sorted(BENCH_DIR.glob("*.py")):
        if path.stem in NOT_BENCHMARKS or path.stem.startswith("_"):
            continue
        if "\ndef run(" in path.read_text():
            names.append(path.stem)
    return names


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    available = discover()
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        print("available:", " ".join(available))
        return 0
    names = argv or available
    unknown = [n for n in names if n not in available]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available)}", file=sys.stderr
        )
        return 1
    RESULTS_DIR.mkdir(exist_ok=True)
    status = 0
    for name in names:
        print(
            f"## {name}  ({time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {platform.python_version()})"
        )
        started = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            rows = module.run()
        except Exception:
            traceback.print_exc()
            status = 1
            continue
        print(markdown_table(rows))
        print(f"\n({time.perf_counter() - started:.1f} s)\n", flush=True)
        (RESULTS_DIR / f"{name}.json").write_text(json.dumps(rows, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
