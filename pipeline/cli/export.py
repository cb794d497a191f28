"""``mongomem export`` and ``mongomem import``: move one user's memory (SPEC J4).

::

    mongomem export --project-id P --user-id U [--out FILE]   JSON lines; stdout without --out
    mongomem import FILE --project-id P --user-id U           all or nothing; prints the result

Both act on MongoDB with the process's settings through the SDK's direct
transport. An import embeds the versions again when the configured embedder
(``MONGOMEM_EMBEDDING_*``) is not the one named in the export's header, so it
needs an embedding provider; an export does not (its header then names none,
and an import of it embeds again).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from mongomem.cli.options import add_project_id, add_user_id

if TYPE_CHECKING:
    from mongomem.settings import Settings

__all__ = ["add_cli", "export_command", "import_command"]


def add_cli(subparsers: Any) -> None:
    """Add ``export`` and ``import`` to ``subparsers``."""
    export = subparsers.add_parser("export", help="export a user's memory as JSON lines")
    add_project_id(export, help_text="the project the user belongs to")
    add_user_id(export, help_text="whose memory to export")
    export.add_argument("--out", default=None, help="file to write (default: stdout)")
    export.set_defaults(handler=export_command)
    imp = subparsers.add_parser("import", help="import a user's memory from an export")
    imp.add_argument("file", help="the export (JSON lines); '-' reads stdin")
    add_project_id(imp, help_text="the project it goes to (may differ from the export's)")
    add_user_id(imp, help_text="the user it goes to (may differ from the export's)")
    imp.set_defaults(handler=import_command)


async def _export(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.sdk import AsyncMemory, DirectTransport

    transport = DirectTransport(settings)
    async with AsyncMemory(project_id=args.project_id, transport=transport) as memory:
        out = args.out if args.out is not None else sys.stdout
        done = await memory.export_user(args.user_id, out)
    print(
        f"exported {done.versions} versions and {done.decisions} decision-log entries of "
        f"user {args.user_id!r}",
        file=sys.stderr,
    )
    return 0


async def _import(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.sdk import AsyncMemory, DirectTransport

    transport = DirectTransport(settings, actor="cli")
    async with AsyncMemory(project_id=args.project_id, transport=transport) as memory:
        source = sys.stdin.buffer if args.file == "-" else args.file
        done = await memory.import_user(source, user_id=args.user_id)
    print(done.model_dump_json())
    return 0


def export_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_export(args, settings))


def import_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_import(args, settings))
