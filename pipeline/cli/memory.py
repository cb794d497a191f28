"""``mongomem memory …``: an operator's view of one user's long-term memory, on MongoDB.

::

    mongomem memory delete MEMORY_ID --project-id P --user-id U [--reason R] --yes
    mongomem memory delete --type semantic --key home-airport --project-id P --user-id U --yes
    mongomem memory list  --project-id P --user-id U [--type T] [--status current|superseded|
                          deleted|expired] [--since ISO] [--prefix K] [--limit N] [--cursor C]
    mongomem memory count --project-id P --user-id U [--type T] [--status S] [--since] [--prefix]
    mongomem memory get     MEMORY_ID --project-id P --user-id U   its latest version
    mongomem memory history MEMORY_ID --project-id P --user-id U   every version
    mongomem memory sessions --project-id P --user-id U [--since ISO] [--limit N] [--cursor C]
    mongomem memory turns    --project-id P --user-id U --session-id S [--limit N] [--cursor C]
    mongomem memory status   --project-id P --user-id U --session-id S [--wait SECONDS]

Lists print one JSON object per line on stdout; when there is a next page,
``next page: --cursor C`` goes to stderr.

Like ``mongomem spaces``, this acts on MongoDB with the process's settings
through the SDK's direct transport, for the user ``--user-id`` names (over
HTTP the API key decides the project). Deletions are recorded with the actor
``cli:<login name>``. No embedding provider is needed.

:func:`add_cli` adds ``memory`` to the main CLI's sub-parsers.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mongomem.cli.options import add_project_id, add_user_id, aware_time
from mongomem.errors import InputError, NotReady

if TYPE_CHECKING:
    from pydantic import BaseModel

    from mongomem.settings import Settings

__all__ = ["add_cli", "memory_command"]


class _NoEmbedder:
    """Stands in where no vector is made: using it is an error."""

    name = "none"
    dimensions = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise NotReady("this command needs an embedding provider: set MONGOMEM_EMBEDDING_PROVIDER")


def add_cli(subparsers: Any) -> None:
    """Add ``memory`` to ``subparsers`` (what ``add_subparsers()`` returned)."""
    parser = subparsers.add_parser("memory", help="browse and delete a user's memories")
    actions = parser.add_subparsers(dest="memory_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        add_project_id(sub, help_text="the project the user belongs to")
        add_user_id(sub, help_text="whose memory (taxonomic: any user)")
        return sub

    delete = action("delete", "delete one memory: by id, or by --type and --key")
    delete.add_argument(
        "memory_id", nargs="?", default=None, help="the memory's id (or use --type and --key)"
    )
    delete.add_argument("--type", dest="memory_type", default=None, help="with --key")
    delete.add_argument("--key", default=None, help="label, title, name or domain/term")
    delete.add_argument("--reason", default=None, help="kept in the memory's history")
    delete.add_argument("--yes", action="store_true", help="really delete (required)")

    def filters(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--type", dest="memory_type", default=None, help="default: every type")
        sub.add_argument(
            "--status",
            default="current",
            choices=["current", "superseded", "deleted", "expired"],
            help="which versions (default: current)",
        )
        sub.add_argument("--since", type=aware_time, default=None, help="updated at or after")
        sub.add_argument("--prefix", default=None, help="keys starting with this")

    def paged(sub: argparse.ArgumentParser, default: int) -> None:
        sub.add_argument(
            "--limit", type=int, default=default, help=f"most items per page (default {default})"
        )
        sub.add_argument("--cursor", default=None, help="from the previous page's stderr")

    listing = action("list", "memory versions, newest first, a page at a time")
    filters(listing)
    paged(listing, 50)
    filters(action("count", "how many versions match"))
    action("get", "one memory's latest version").add_argument("memory_id", help="the memory's id")
    action("history", "every version of one memory").add_argument(
        "memory_id", help="the memory's id"
    )
    sessions = action("sessions", "the user's sessions by id, a page at a time")
    sessions.add_argument("--since", type=aware_time, default=None, help="active at or after")
    paged(sessions, 100)
    turns = action("turns", "one session's turns, oldest first, a page at a time")
    turns.add_argument("--session-id", required=True, help="the session whose turns to list")
    paged(turns, 100)
    status = action("status", "extraction progress of one session (pending, done, dead letters)")
    status.add_argument("--session-id", required=True, help="the session to report on")
    status.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wait until every turn so far is processed (exit 1 on timeout)",
    )
    parser.set_defaults(handler=memory_command)


def _lines(items: Sequence[BaseModel], cursor: str | None = None) -> None:
    for item in items:
        sys.stdout.write(item.model_dump_json() + "\n")
    if cursor is not None:
        print(f"next page: --cursor {cursor}", file=sys.stderr)


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.sdk import AsyncMemory, DirectTransport, MemoryRequestContext

    transport = DirectTransport(settings, embedder=_NoEmbedder(), actor=f"cli:{getpass.getuser()}")
    async with AsyncMemory(project_id=args.project_id, transport=transport) as memory:
        session = getattr(args, "session_id", None)
        chat = memory.bind(MemoryRequestContext(user_id=args.user_id, session_id=session))
        match args.memory_action:
            case "list":
                page = await chat.browse_memories(
                    args.memory_type,
                    status=args.status,
                    updated_since=args.since,
                    key_prefix=args.prefix,
                    limit=args.limit,
                    cursor=args.cursor,
                )
                _lines(page.items, page.next_cursor)
            case "count":
                print(
                    await chat.count_memories(
                        args.memory_type,
                        status=args.status,
                        updated_since=args.since,
                        key_prefix=args.prefix,
                    )
                )
            case "get":
                found = await chat.get_memory(args.memory_id)
                if found is None:
                    print("mongomem: no such memory for this user", file=sys.stderr)
                    return 1
                _lines([found])
            case "history":
                versions = await chat.history(args.memory_id)
                if not versions:
                    print("mongomem: no such memory for this user", file=sys.stderr)
                    return 1
                _lines(versions)
            case "sessions":
                sessions = await chat.browse_sessions(
                    limit=args.limit, cursor=args.cursor, active_since=args.since
                )
                _lines(sessions.items, sessions.next_cursor)
            case "status":
                if args.wait is None:
                    progress = await chat.processing_status()
                else:
                    progress = await chat.wait_until_processed(args.wait, all_turns=True)
                print(progress.model_dump_json(indent=2))
            case "turns":
                turns = await chat.browse_turns(limit=args.limit, cursor=args.cursor)
                _lines(turns.items, turns.next_cursor)
            case _:  # delete
                by_key = args.memory_type is not None or args.key is not None
                if by_key == (args.memory_id is not None) or (
                    by_key and (args.memory_type is None or args.key is None)
                ):
                    raise InputError("give a MEMORY_ID, or --type and --key", field="memory_id")
                if not args.yes:
                    print("mongomem: would delete a memory; add --yes", file=sys.stderr)
                    return 2
                if by_key:
                    done = await chat.delete_by_key(args.memory_type, args.key, reason=args.reason)
                else:
                    done = await chat.delete_memory(args.memory_id, reason=args.reason)
                if done is None:
                    print("mongomem: no such memory for this user", file=sys.stderr)
                    return 1
                state = "was already deleted" if done.already_deleted else "deleted"
                at = done.deleted_at.isoformat()
                print(
                    f"{done.memory_type} {done.key!r} ({done.memory_id}) {state}: "
                    f"version {done.version} at {at} by {done.actor}"
                )
    return 0


def memory_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))
