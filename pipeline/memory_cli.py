"""``mongomem memory …``: an operator's view of one user's long-term memory, on MongoDB.

::

    mongomem memory delete MEMORY_ID --project-id P --user-id U [--reason R] --yes
    mongomem memory delete --type semantic --key home-airport --project-id P --user-id U --yes

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
from typing import Any

from mongomem.errors import InputError, NotReady
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
    parser = subparsers.add_parser("memory", help="delete a user's memories")
    actions = parser.add_subparsers(dest="memory_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        sub.add_argument("--project-id", required=True)
        sub.add_argument("--user-id", required=True, help="whose memory (taxonomic: any user)")
        return sub

    delete = action("delete", "delete one memory: by id, or by --type and --key")
    delete.add_argument("memory_id", nargs="?", default=None)
    delete.add_argument("--type", dest="memory_type", default=None, help="with --key")
    delete.add_argument("--key", default=None, help="label, title, name or domain/term")
    delete.add_argument("--reason", default=None, help="kept in the memory's history")
    delete.add_argument("--yes", action="store_true", help="really delete (required)")
    parser.set_defaults(handler=memory_command)


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.sdk import AsyncMemory, DirectTransport, MemoryRequestContext

    transport = DirectTransport(settings, embedder=_NoEmbedder(), actor=f"cli:{getpass.getuser()}")
    async with AsyncMemory(project_id=args.project_id, transport=transport) as memory:
        chat = memory.bind(MemoryRequestContext(user_id=args.user_id))
        match args.memory_action:
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
                print(f"{done.memory_type} {done.key!r} ({done.memory_id}) {state}: "
                      f"version {done.version} at {at} by {done.actor}")  # fmt: skip
    return 0


def memory_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))
