"""The ``mongomem`` command.

::

    mongomem infra up|down|status    local Kafka + MongoDB-compatible servers
    mongomem run <stage> [...]       run one stage in this process
    mongomem up [--no-demo]          servers + every stage, supervised, + demo (make run)
    mongomem down                    stop the stages and the servers (make stop)
    mongomem env                     the local pipeline's settings: eval "$(mongomem env)"
    mongomem status                  extractions, readiness, LLM usage, lag, dead letters
    mongomem configure FILE          check project-config.yaml; write the env it implies
    mongomem apply FILE              configure, restart extractors, wait until ready
    mongomem replay <stage> ...      re-run a stage from an offset/time in a new group
    mongomem mcp --project-id P --user-id U   serve memory to an MCP client
    mongomem serve [--host H] [--port P]          the HTTP memory service, with API keys
    mongomem keys create|list|revoke ...          the service's API keys
    mongomem spaces list|create|show|delete|export|import|rekey --project-id P
    mongomem memory delete|list|count|get|history|sessions|turns|status --project-id P ...
    mongomem export --project-id P --user-id U [--out F]   one user's memory as JSON lines
    mongomem import FILE --project-id P --user-id U        … and back, all or nothing
    mongomem erase user|session|project|resume ... --yes   erase for good
    mongomem expire [--limit N]      one retention sweep
    mongomem eval locomo|longmemeval --data PATH [--out DIR]   memory quality vs full context
    mongomem dlq list|show|requeue [--stage S] [--since T]   dead letters: inspect, re-drive

Every command resolves its settings the same way
(:func:`mongomem.settings.resolve_settings`): the environment (``MONGOMEM_*``,
``.env``) first, then the settings the local pipeline (``make run``) saved in
this folder. ``up``, ``down``, ``infra`` and ``env`` read the environment only:
they make the local pipeline's settings rather than follow them.

Errors print as one line saying what to do, and exit with status 1; a usage
error prints the subcommand's usage and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mongomem.cli.options import aware_time, parse
from mongomem.errors import MongomemError

if TYPE_CHECKING:
    from mongomem.settings import Settings

__all__ = ["STAGES", "main"]

log = logging.getLogger("mongomem")

#: Stage name → "module:function". The function takes (Settings, argv-namespace)
#: and returns a coroutine that runs the stage until it is cancelled.
STAGES: dict[str, str] = {
    "watcher": "mongomem.stages.watcher:main",
    "windowing": "mongomem.stages.windowing:main",
    "extractor": "mongomem.stages.extractor:main",
    "reconciler": "mongomem.stages.reconciler:main",
    "retention": "mongomem.stages.retention:main",
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
    from mongomem.local import infra

    if args.action == "up":
        persistent = settings.infra.model_copy(update={"persistent": True})
        settings = settings.model_copy(update={"infra": persistent})
        status = infra.local_servers_status(settings)
        if all(s.startswith("running") for s in status.values()):
            print("local servers already running:")
            for name, state in status.items():
                print(f"  {name}: {state}")
            return 0
        from mongomem.local.servers import jars_cached

        cache = settings.infra.state_dir.resolve() / "cache"
        fetching = "" if jars_cached(cache) else " (first start downloads jars from Maven Central)"
        print(f"starting the missing local servers{fetching} …")
        servers = infra.start_missing_servers(settings)
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


async def run_all(settings: Settings, args: argparse.Namespace) -> None:
    """Every stage in this one process (development mode).

    Each stage runs on the stage runtime (:func:`mongomem.stages.runtime.run_stage`:
    its own restarts), and SIGTERM/SIGINT stop them all gracefully. A stage that
    ends on a final error ends the others.
    """
    import asyncio

    tasks = [asyncio.create_task(_load_stage(name)(settings, args), name=name) for name in STAGES]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            failure = None if task.cancelled() else task.exception()
            if failure is not None:
                raise failure
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from mongomem.logs import configure_logging
    from mongomem.metrics import serve_metrics

    configure_logging(args.stage, settings.log_level)

    serve_metrics(settings.metrics_port, settings.metrics_host)
    if args.stage == "all":
        coro = run_all(settings, args)
    else:
        # the stage's entry runs it on the stage runtime: signals, drain, the one restart loop
        coro = _load_stage(args.stage)(settings, args)
    try:
        asyncio.run(coro)
    except KeyboardInterrupt:
        return 130
    return 0


def _up(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.local.runner import up

    return up(settings, demo=not args.no_demo)


def _down(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.local.runner import down

    return down(settings)


def _env(args: argparse.Namespace, settings: Settings) -> int:
    """Print the local pipeline's settings as shell exports: ``eval "$(mongomem env)"``."""
    import shlex

    from mongomem.settings import local_pipeline_env

    env = local_pipeline_env(settings)
    if env is None:
        where = settings.infra.state_dir.resolve()
        message = f"no local pipeline runs here (nothing in {where}); start one with `make run`"
        print(f"mongomem: {message}", file=sys.stderr)
        return 1
    for name, value in sorted(env.items()):
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _status(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from mongomem.cli.operate import print_status

    return asyncio.run(print_status(settings))


def _configure(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.cli.operate import configure

    configure(settings, args.file)
    return 0


def _apply(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.local.runner import apply

    return apply(settings, args.file, timeout_s=args.timeout)


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from mongomem.cli.operate import replay

    return asyncio.run(replay(settings, args, _load_stage(args.stage)))


def _mcp(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.mcp_server import run_from_args

    return run_from_args(args, settings)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mongomem",
        description="mongomem: long-term memory for LLM agents.",
        epilog=(
            "Settings come from the environment (MONGOMEM_*), then from the local pipeline "
            'that `make run` started in this folder; elsewhere, eval "$(mongomem env)" there '
            "first. `mongomem COMMAND --help` shows a command's options."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    infra_p = sub.add_parser("infra", help="start, stop or show the local Kafka and MongoDB")
    infra_p.add_argument(
        "action",
        choices=["up", "down", "status"],
        help="up: start the missing servers (kept running); down: stop them; status: show them",
    )
    infra_p.set_defaults(handler=_infra, local_pipeline=False)

    run_p = sub.add_parser("run", help="run one stage in this process")
    run_p.add_argument(
        "stage",
        choices=[*sorted(STAGES), "all"],
        help="a stage, or all of them in one process (development mode)",
    )
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

    up_p = sub.add_parser("up", help="servers + every stage as processes, then the demo")
    up_p.add_argument("--no-demo", action="store_true", help="start everything, skip the demo")
    up_p.set_defaults(handler=_up, local_pipeline=False)
    sub.add_parser("down", help="stop the stage processes and the servers").set_defaults(
        handler=_down, local_pipeline=False
    )
    sub.add_parser(
        "env", help='the local pipeline\'s settings as shell exports: eval "$(mongomem env)"'
    ).set_defaults(handler=_env, local_pipeline=False)
    sub.add_parser(
        "status", help="extractions, readiness, LLM usage, lag, dead letters, restarts"
    ).set_defaults(handler=_status)
    conf_p = sub.add_parser("configure", help="check project-config.yaml and save its settings")
    conf_p.add_argument("file", type=Path, help="the project-config.yaml to check")
    conf_p.set_defaults(handler=_configure)
    apply_p = sub.add_parser("apply", help="configure, restart extractors, wait until ready")
    apply_p.add_argument("file", type=Path, help="the project-config.yaml to apply")
    apply_p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for ready")
    apply_p.set_defaults(handler=_apply)

    replay_p = sub.add_parser("replay", help="re-run a stage from an offset/time in a new group")
    replay_p.add_argument(
        "stage", choices=["windowing", "extractor", "reconciler"], help="the stage to re-run"
    )
    start = replay_p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-offset",
        type=int,
        default=None,
        help="start every partition at this offset (default: the beginning)",
    )
    start.add_argument(
        "--since",
        type=aware_time,
        default=None,
        help="start at the first record at or after this ISO time (UTC if naive)",
    )
    replay_p.add_argument(
        "--group-suffix",
        required=True,
        help="the new consumer group's suffix, e.g. -backfill-2026-11",
    )
    replay_p.add_argument(
        "--type",
        dest="types",
        action="append",
        default=None,
        help="extractor: memory type to replay (repeatable)",
    )
    replay_p.add_argument(
        "--follow",
        action="store_true",
        help="keep running after catching up (default: stop when caught up)",
    )
    replay_p.add_argument(
        "--re-extract",
        action="store_true",
        help="extractor: ask the LLM again for every snapshot, replacing the stored answers "
        "(default: reuse them, no LLM call)",
    )
    replay_p.set_defaults(handler=_replay)

    from mongomem.mcp_server.options import add_arguments as add_mcp_arguments  # argparse only

    mcp_p = sub.add_parser("mcp", help="serve memory to an MCP client (stdio by default)")
    add_mcp_arguments(mcp_p)
    mcp_p.set_defaults(handler=_mcp)

    from mongomem.service import add_cli as add_service_cli  # cheap: the server loads on run

    add_service_cli(sub)  # `serve` and `keys create|list|revoke`

    from mongomem.cli.spaces import add_cli as add_spaces_cli  # cheap: MongoDB loads on run

    add_spaces_cli(sub)  # `spaces list|create|show|delete|export|import|rekey`

    from mongomem.cli.memory import add_cli as add_memory_cli  # cheap: MongoDB loads on run

    add_memory_cli(sub)  # `memory delete|list|get|history|sessions|turns|status`

    from mongomem.cli.erase import add_cli as add_erase_cli  # cheap: MongoDB loads on run

    add_erase_cli(sub)  # `erase user|session|project|resume` (needs --yes)

    from mongomem.cli.export import add_cli as add_export_cli  # cheap: MongoDB loads on run

    add_export_cli(sub)  # `export --user U [--out F]`, `import F --user U`

    from mongomem.cli.retention import add_cli as add_retention_cli  # cheap: loads on run

    add_retention_cli(sub)  # `expire [--limit N]`

    from mongomem.cli.eval import add_cli as add_eval_cli  # cheap: the harness loads on run

    add_eval_cli(sub)  # `eval locomo|longmemeval --data PATH`

    from mongomem.cli.dlq import add_cli as add_dlq_cli  # cheap: Kafka loads on run

    add_dlq_cli(sub)  # `dlq list|show|requeue`
    return parser


def _say(line: str) -> None:
    print(f"mongomem: {line}", file=sys.stderr)


def settings_for(args: argparse.Namespace) -> Settings:
    """The command's settings: the environment, then the local pipeline's saved settings.

    The commands that make the local pipeline (``up``, ``down``, ``infra``,
    ``env``: ``local_pipeline=False``) read the environment alone. Either way an
    unknown ``MONGOMEM_*`` variable is reported once, on stderr.
    """
    from mongomem.settings import load_settings, resolve_settings, unknown_variables

    if getattr(args, "local_pipeline", True):
        return resolve_settings(say=_say)

    for line in unknown_variables(os.environ):
        _say(line)
    return load_settings()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(_parser(), argv)
    # The driver's own reconnect errors: a failure prints as one line of ours instead.
    # (Commands that run servers or stages set up their logs, aiokafka's included.)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    settings: Settings | None = None
    try:
        settings = settings_for(args)
        handler: Callable[[argparse.Namespace, Settings], int] = args.handler
        return handler(args, settings)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the flush at exit
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from mongomem.cli.failures import describe

        line = describe(exc, settings)
        if line is None:
            raise  # a defect: keep its traceback
        _say(line)
        return 1


if __name__ == "__main__":
    sys.exit(main())
