"""``mongomem spaces …``: inspect, back up and move memory spaces, on MongoDB directly.

::

    mongomem spaces list   --project-id P              one line per space
    mongomem spaces create SPACE --project-id P --key ARG[=WEIGHT] ...
                                 [--name N] [--description D] [--kind escalation]
                                 [--threshold X] [--top-k N] [--mode meaning]
                                 [--encrypted]         a new, empty space
    mongomem spaces show   SPACE --project-id P        the space as JSON (settings, agents, count)
    mongomem spaces delete SPACE --project-id P --yes  the space and all of its items
    mongomem spaces export SPACE --project-id P        JSON lines to stdout (plain text!)
    mongomem spaces import FILE  --project-id P [--space-id S] [--encrypted | --plain]
                                 [--reembed always]    a new space from an export (``-``: stdin)
    mongomem spaces rekey  SPACE --project-id P        re-seal its items under the current
                                                       MONGOMEM_SPACES_ENCRYPTION_KEY

The project is the one ``--project-id`` names (this acts on MongoDB with the
process's settings, as the other operator commands do; over HTTP the API key
decides the project). ``list``, ``show``, ``delete`` and ``export`` need no
embedding provider; ``import`` needs the one of the importing process (it
keeps the file's vectors when they were made by the same one, SPEC H9).
``rekey`` needs none: it re-seals payloads and leaves vectors alone; it can
be run again after an interruption (:mod:`mongomem.spaces.rekey`).
``create`` needs none either: a space takes its embedder with its first item.

:func:`add_cli` adds ``spaces`` to the main CLI's sub-parsers; each handler
takes ``(args, settings)`` and returns the exit status. :func:`main` runs the
same commands alone (``python -m mongomem.cli.spaces``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mongomem.errors import InputError, MongomemError, NotReady

if TYPE_CHECKING:
    from mongomem.settings import Settings

__all__ = ["add_cli", "main", "spaces_command"]


class _NoEmbedder:
    """Stands in where no vector is made (every command but import): using it is an error."""

    name = "none"
    dimensions = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise NotReady("this command needs an embedding provider: set MONGOMEM_EMBEDDING_PROVIDER")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="spaces_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text)
        sub.add_argument("--project-id", required=True, help="the project whose spaces these are")
        return sub

    action("list", "every space of the project")
    create = action("create", "a new, empty space")
    create.add_argument("space_id", help="the space's id")
    create.add_argument(
        "--key",
        dest="keys",
        action="append",
        required=True,
        type=_search_key,
        metavar="ARG[=WEIGHT]",
        help="an input argument that takes part in matching (repeatable)",
    )
    create.add_argument("--name", default=None, help="display name (default: the id)")
    create.add_argument("--description", default="", help="what the space holds")
    create.add_argument(
        "--kind",
        choices=["episodic", "escalation"],
        default="episodic",
        help="episodic: past runs and their outcomes; escalation: resolved escalations",
    )
    create.add_argument("--threshold", type=float, default=None, help="recall score threshold")
    create.add_argument("--top-k", type=int, default=None, help="cases recall returns at most")
    create.add_argument("--mode", choices=["hybrid", "meaning"], default=None, help="recall mode")
    create.add_argument(
        "--encrypted",
        action="store_true",
        help="encrypt the items (MONGOMEM_SPACES_ENCRYPTION_KEY); fixed for good",
    )
    action("show", "one space as JSON").add_argument("space_id", help="the space's id")
    delete = action("delete", "delete a space and all of its items")
    delete.add_argument("space_id", help="the space's id")
    delete.add_argument("--yes", action="store_true", help="really delete (required)")
    action("export", "a space as JSON lines, to stdout").add_argument(
        "space_id", help="the space's id"
    )
    imp = action("import", "a new space from an export file")
    imp.add_argument("file", help="the export (JSON lines); '-' reads stdin")
    imp.add_argument("--space-id", default=None, help="the new space's id (default: the file's)")
    secret = imp.add_mutually_exclusive_group()
    secret.add_argument(
        "--encrypted",
        dest="encrypted",
        action="store_true",
        default=None,
        help="encrypt the new space (MONGOMEM_SPACES_ENCRYPTION_KEY)",
    )
    secret.add_argument(
        "--plain", dest="encrypted", action="store_false", help="do not encrypt the new space"
    )
    imp.add_argument(
        "--reembed",
        choices=["auto", "always"],
        default="auto",
        help="re-embed every item even when the embedder is the same",
    )
    rekey = action("rekey", "re-seal an encrypted space's items under the current key")
    rekey.add_argument("space_id", help="the space's id")
    parser.set_defaults(handler=spaces_command)


def add_cli(subparsers: Any) -> None:
    """Add ``spaces`` to ``subparsers`` (what ``add_subparsers()`` returned)."""
    _add_arguments(
        subparsers.add_parser(
            "spaces", help="list, create, show, delete, export, import, rekey spaces"
        )
    )


def _search_key(text: str) -> dict[str, Any]:
    """``--key`` ``question`` or ``question=2.5``: a search key (checked by the space)."""
    argument, sep, weight = text.partition("=")
    if not sep:
        return {"argument": argument}
    try:
        return {"argument": argument, "weight": float(weight)}
    except ValueError:
        raise argparse.ArgumentTypeError(f"weight of {argument!r} is not a number") from None


def _read_lines(name: str) -> list[str]:
    if name == "-":
        return sys.stdin.read().splitlines()
    try:
        return Path(name).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {name}: {exc}", field="file") from exc


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.spaces.api import AsyncSpaces  # MongoDB loads when a command runs

    lines = _read_lines(args.file) if args.spaces_action == "import" else []
    embedder = None if args.spaces_action == "import" else _NoEmbedder()  # import: the settings'
    async with AsyncSpaces(settings, project_id=args.project_id, embedder=embedder) as spaces:
        match args.spaces_action:
            case "list":
                found = await spaces.list_spaces()  # a failure prints no header
                print(f"{'space_id':<24}  {'kind':<10}  {'items':>6}  {'encrypted':<9}  name")
                for s in found:
                    secret = "yes" if s.encrypted else "no"
                    print(
                        f"{s.space_id:<24}  {s.kind:<10}  {s.item_count:>6}  {secret:<9}  {s.name}"
                    )
            case "create":
                asked = {"threshold": args.threshold, "top_k": args.top_k, "mode": args.mode}
                recall = {name: value for name, value in asked.items() if value is not None}
                space = await spaces.create_space(
                    args.space_id,
                    keys=args.keys,
                    name=args.name,
                    description=args.description,
                    kind=args.kind,
                    recall=recall,
                    encrypted=args.encrypted,
                )
                secret = ", encrypted" if space.encrypted else ""
                print(
                    f"created {space.kind} space {space.space_id} in project "
                    f"{spaces.project_id}{secret}"
                )
            case "show":
                print((await spaces.get_space(args.space_id)).model_dump_json(indent=2))
            case "delete":
                space = await spaces.get_space(args.space_id)
                if not args.yes:
                    what = f"space {space.space_id!r} and its {space.item_count} items"
                    print(f"mongomem: would delete {what}; add --yes", file=sys.stderr)
                    return 2
                gone = await spaces.delete_space(space.space_id)
                print(f"deleted space {space.space_id} and {gone} items")
            case "export":
                for line in await spaces.export_space(args.space_id):
                    sys.stdout.write(line + "\n")
            case "rekey":
                done = await spaces.rekey_space(args.space_id)
                print(
                    f"re-sealed {done.resealed} of {done.space.item_count} items of space "
                    f"{done.space.space_id} under key {done.space.key_id}"
                )
            case _:
                space = await spaces.import_space(
                    lines, space_id=args.space_id, encrypted=args.encrypted, reembed=args.reembed
                )
                print(
                    f"imported space {space.space_id} with {space.item_count} items "
                    f"into project {spaces.project_id}"
                )
    return 0


def spaces_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))


def main(argv: Sequence[str] | None = None) -> int:
    """``mongomem spaces …`` on its own; errors print as one line and exit 1."""
    parser = argparse.ArgumentParser(
        prog="mongomem spaces", description="Memory spaces on MongoDB (SPEC H)."
    )
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        from mongomem.settings import resolve_settings

        return spaces_command(args, resolve_settings())
    except MongomemError as exc:
        print(f"mongomem: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
