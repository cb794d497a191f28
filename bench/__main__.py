"""``python -m bench`` (``make bench``): run every benchmark, then collect bench/RESULTS.md.

Each benchmark starts its own servers, compares against a raw baseline in the
same run, and writes ``bench/results/<name>.md`` with the command that made
it. ``python -m bench --collect`` only rebuilds RESULTS.md from those files.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = [
    "stm_watcher",
    "watchers",
    "windowing",
    "windowing_floor",
    "embeddings",
    "reconciler",
    "pipeline_e2e",
    "decisions",
    "replay",
    "lifecycle",
    "service",
    "erase",
    "export",
    "cli",
    "scale",
    "scale_idle",
]


def collect() -> Path:
    parts = [
        "# Benchmark results\n",
        "Every number below comes from the command printed with it, run on the machine it",
        "names. Ratios against a raw baseline measured in the same run are the yardstick;",
        "absolute numbers move with the machine's load. `make bench` reruns them all.\n",
    ]
    for name in ORDER:
        path = HERE / "results" / f"{name}.md"
        if path.exists():
            parts.append(path.read_text().rstrip() + "\n")
    target = HERE / "RESULTS.md"
    target.write_text("\n".join(parts))
    return target


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--collect", action="store_true", help="only rebuild RESULTS.md")
    parser.add_argument("--only", action="append", choices=ORDER, help="run just these")
    args = parser.parse_args()
    if not args.collect:
        for name in args.only or ORDER:
            if not (HERE / f"{name}.py").exists():
                continue
            print(f"== bench.{name}", flush=True)
            module = importlib.import_module(f"bench.{name}")
            sys.argv = [f"bench.{name}"]  # each benchmark runs with its own defaults
            code = module.main()
            if code:
                return int(code)
    print(f"wrote {collect()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
