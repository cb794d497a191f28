"""``mongomem dlq list|show|requeue``: the dead letters of the pipeline's stages.

::

    mongomem dlq list [--stage S] [--since T]          one line per dead letter
    mongomem dlq show ID                               one dead letter, original bytes decoded
    mongomem dlq requeue (ID ... | --stage S | --since T)   re-drive after fixing the cause

``ID`` is ``<dead-letter topic>:<partition>:<offset>`` as ``list`` prints it.
A dead letter is requeued at most once (see :mod:`mongomem.operations.dlq`); the
output says which ones were skipped because they were requeued before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mongomem.errors import InputError

if TYPE_CHECKING:
    from mongomem.settings import Settings

__all__ = ["add_cli"]


def _aware_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO time: {text!r}") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def add_cli(subparsers: Any) -> None:
    parser = subparsers.add_parser("dlq", help="list, show and requeue dead letters")
    actions = parser.add_subparsers(dest="dlq_action", required=True)
    listing = actions.add_parser("list", help="one line per dead letter")
    again = actions.add_parser("requeue", help="republish originals to their source, once")
    again.add_argument("ids", nargs="*", metavar="ID", help="dead letters to requeue")
    for sub in (listing, again):
        sub.add_argument(
            "--stage",
            action="append",
            default=None,
            help="only this stage (repeatable), e.g. reconciler, extractor.semantic",
        )
        sub.add_argument(
            "--since",
            type=_aware_time,
            default=None,
            help="only dead letters that failed at or after this ISO time (UTC if naive)",
        )
        sub.set_defaults(handler=_run)
    show = actions.add_parser("show", help="one dead letter with its original bytes decoded")
    show.add_argument("id", metavar="ID", help="TOPIC:PARTITION:OFFSET, as `dlq list` prints it")
    show.set_defaults(handler=_run, stage=None, since=None)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_dlq(args, settings))


async def _dlq(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.cli.operate import dead_letter_stages, with_local_defaults
    from mongomem.operations.dlq import list_dead_letters, requeue

    settings = with_local_defaults(settings)
    known = dead_letter_stages(settings)
    stages: list[str] = args.stage or known
    unknown = [s for s in stages if s not in known]
    if unknown:
        raise InputError(f"unknown stage {', '.join(unknown)}; stages: {', '.join(known)}")
    action = args.dlq_action
    if action == "show":
        stages = [s for s in known if args.id.startswith(settings.kafka.topic(f"dlq.{s}:"))]
        if not stages:
            raise InputError(f"{args.id!r} is not a dead-letter id (see `mongomem dlq list`)")
    entries = await list_dead_letters(settings, stages, since=args.since)
    if action == "list":
        for entry in entries:
            row = entry.summary()
            requeued = f"  requeued {row['requeued_at']}" if row["requeued_at"] else ""
            print(f"{row['id']}  {row['failed_at']}  {row['source']}  {row['error']}{requeued}")
        print(f"{len(entries)} dead letter(s)")
        return 0
    if action == "show":
        match = [e for e in entries if e.id == args.id]
        if not match:
            raise InputError(f"no dead letter {args.id!r} (see `mongomem dlq list`)")
        print(json.dumps(match[0].detail(), indent=2, ensure_ascii=False))
        return 0
    if args.ids:
        by_id = {e.id: e for e in entries}
        missing = [i for i in args.ids if i not in by_id]
        if missing:
            raise InputError(f"no dead letter {', '.join(missing)} (see `mongomem dlq list`)")
        entries = [by_id[i] for i in args.ids]
    elif args.stage is None and args.since is None:
        raise InputError("say what to requeue: dead-letter IDs, --stage or --since")
    report = await requeue(settings, entries)
    for ident in report.requeued:
        print(f"requeued {ident}")
    for ident in report.skipped:
        print(f"skipped {ident} (requeued before)")
    print(f"{len(report.requeued)} requeued, {len(report.skipped)} already requeued")
    return 0
