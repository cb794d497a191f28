"""``mongomem serve`` and ``mongomem keys …``, ready to hang under the main CLI.

::

    mongomem serve [--host H] [--port P]         the memory service, until SIGINT/SIGTERM
    mongomem keys create --project-id P [--name N]   a managed key; printed once, stored hashed
    mongomem keys list [--project-id P]          key ids, projects, names, states
    mongomem keys revoke KEY_ID                  refused from the next request on

:func:`add_cli` adds both to an ``argparse`` sub-parser set; each handler
takes ``(args, settings)`` and returns the exit status, as the main CLI's do.
:func:`main` runs ``serve`` alone (``python -m mongomem.service``). Importing
this module is cheap: the server and MongoDB load when a command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mongomem.cli.options import add_project_id
from mongomem.errors import InputError, MongomemError
from mongomem.logs import configure_logging

if TYPE_CHECKING:
    from mongomem.service.keys import ApiKeyInfo
    from mongomem.settings import Settings

__all__ = ["add_cli", "keys_command", "main", "serve_command"]


def _add_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="address to bind (MONGOMEM_SERVICE_HOST)")
    parser.add_argument("--port", type=int, default=None, help="port (MONGOMEM_SERVICE_PORT)")
    parser.set_defaults(handler=serve_command)


def _add_keys(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="keys_action", required=True)
    create = actions.add_parser("create", help="a new key for one project (printed once)")
    add_project_id(create, required=False, help_text="the project the key opens, and only that one")
    # the older spelling `keys create PROJECT`, kept working
    create.add_argument("project", nargs="?", default=None, help=argparse.SUPPRESS)
    create.add_argument("--name", default="", help="what the key is for")
    listing = actions.add_parser("list", help="every managed key (never the secret)")
    add_project_id(listing, required=False, help_text="only this project's keys")
    revoke = actions.add_parser("revoke", help="refuse a key from the next request on")
    revoke.add_argument("key_id", help="the id shown by create/list (mmk_<key_id>_…)")
    parser.set_defaults(handler=keys_command)


def add_cli(subparsers: Any) -> None:
    """Add ``serve`` and ``keys`` to ``subparsers`` (what ``add_subparsers()`` returned)."""
    _add_serve(subparsers.add_parser("serve", help="the HTTP memory service, with API keys"))
    _add_keys(subparsers.add_parser("keys", help="create, list and revoke service API keys"))


def serve_command(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.service.app import serve  # the server loads only when it runs

    updates = {k: v for k in ("host", "port") if (v := getattr(args, k, None)) is not None}
    if updates:
        service = settings.service.model_copy(update=updates)
        settings = settings.model_copy(update={"service": service})
    configure_logging("service", settings.log_level)

    async def until_signal() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, stop)

    asyncio.run(until_signal())
    return 0


def _row(info: ApiKeyInfo) -> str:
    state = "active" if info.active else f"revoked {info.revoked_at:%Y-%m-%d %H:%M}"
    created = f"{info.created_at:%Y-%m-%d %H:%M}"
    return f"{info.key_id}  {info.project_id:<20}  {created}  {state:<24}  {info.name}"


async def _keys(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.adapters.mongo import connect, database
    from mongomem.service.keys import ApiKeyStore

    client = connect(settings.mongodb)
    try:
        store = ApiKeyStore(database(client, settings.mongodb))
        if args.keys_action == "create":
            project = args.project_id or args.project
            if project is None:
                raise InputError(
                    "say which project the key opens: --project-id P", field="project_id"
                )
            key, info = await store.create(project, args.name)
            print(f"created key {info.key_id} for project {info.project_id}")
            print(f"API key (shown only now, stored as a SHA-256 hash): {key}")
        elif args.keys_action == "list":
            rows = await store.list_keys(args.project_id)
            print(f"{'key_id':<16}  {'project':<20}  {'created (UTC)':<16}  {'state':<24}  name")
            for info in rows:
                print(_row(info))
        else:
            info = await store.revoke(args.key_id)
            print(f"revoked key {info.key_id} of project {info.project_id}")
    finally:
        await client.close()
    return 0


def keys_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_keys(args, settings))


def main(argv: Sequence[str] | None = None) -> int:
    """``mongomem serve`` on its own; errors print as one line and exit 1."""
    parser = argparse.ArgumentParser(
        prog="mongomem serve", description="The HTTP memory service, with API keys (SPEC G2)."
    )
    _add_serve(parser)
    args = parser.parse_args(argv)
    try:
        from mongomem.settings import resolve_settings

        return serve_command(args, resolve_settings())
    except MongomemError as exc:
        print(f"mongomem: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
