"""The ``mongomem`` command.

::

    mongomem infra up|down|status    local Kafka + MongoDB-compatible servers
    mongomem run <stage> [...]       run one stage in this process
    mongomem up                      servers + every stage as processes (make run)
    mongomem down                    stop the stages and the servers (make stop)

Errors print as one line saying what to do, and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.errors import MongomemError
from pipeline.settings import Settings, load_settings

__all__ = ["STAGES", "main"]

#: Stage name → "module:function". The function takes (Settings, argv-namespace)
#: and returns a coroutine that runs the stage until it is cancelled.
STAGES: dict[str, str] = {
    "watcher": "stages.watcher:main",
    "windowing": "stages.windowing:main",
    "extractor": "stages.extractor:main",
    "reconciler": "stages.reconciler:main",
}


def _load_stage(name: str) -> Callable[..., Any]:
    target = STAGES[name]
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise MongomemError(f"stage {name!r} is not available in this build ({exc})") from exc
    entry: Callable[..., Any] = getattr(module, attr)
    return entry


def _infra(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline import infra

    if args.action == "up":
        persistent = settings.infra.model_copy(update={"persistent": True})
        settings = settings.model_copy(update={"infra": persistent})
        status = infra.local_servers_status(settings)
        if all(s.startswith("running") for s in status.values()):
            print("local servers already running:")
            for name, state in status.items():
                print(f"  {name}: {state}")
            return 0
        print("starting local servers (first start downloads jars from Maven Central) …")
        servers = infra.start_servers(settings)
        print(servers.describe())
        print(f"logs and data: {settings.infra.state_dir.resolve()}")
        return 0
    if args.action == "down":
        stopped = infra.stop_local_servers(settings)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    for name, state in infra.local_servers_status(settings).items():
        print(f"{name}: {state}")
    return 0


def _run(args: argparse.Namespace, settings: Settings) -> int:
    entry = _load_stage(args.stage)
    try:
        asyncio.run(entry(settings, args))
    except KeyboardInterrupt:
        return 130
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mongomem", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    infra_p = sub.add_parser("infra", help="local Kafka and MongoDB-compatible servers")
    infra_p.add_argument("action", choices=["up", "down", "status"])
    infra_p.set_defaults(handler=_infra)

    run_p = sub.add_parser("run", help="run one stage in this process")
    run_p.add_argument("stage", choices=sorted(STAGES))
    run_p.add_argument(
        "--type",
        dest="types",
        action="append",
        default=None,
        help="extractor: memory type to run (repeatable; default: all enabled)",
    )
    run_p.add_argument(
        "--group-suffix", default="", help="consumer-group suffix (replays run in a new group)"
    )
    run_p.set_defaults(handler=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
        handler: Callable[[argparse.Namespace, Settings], int] = args.handler
        return handler(args, settings)
    except MongomemError as exc:
        print(f"mongomem: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
