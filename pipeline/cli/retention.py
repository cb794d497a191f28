"""``mongomem expire``: one bounded, idempotent retention sweep (SPEC J8).

::

    mongomem expire [--limit N]     expire memories not reinforced within their type's
                                    retention (``memory.retention`` of project-config.yaml)

Prints the result as JSON; exit status 0, also when nothing had a retention or
nothing expired. Run it periodically (cron, a Kubernetes CronJob); ``more: true``
says the limit stopped it and the next run goes on. See :mod:`mongomem.ltm.retention`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mongomem.settings import Settings

__all__ = ["add_cli", "expire_command"]


def add_cli(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "expire", help="expire memories not reinforced within their type's retention"
    )
    parser.add_argument("--limit", type=int, default=1000, help="at most this many per run")
    parser.set_defaults(handler=expire_command)


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    from mongomem.adapters.mongo import connect, database
    from mongomem.ltm import MemoryStore
    from mongomem.ltm.retention import expire_unreinforced, retention_rules

    rules = retention_rules(settings)
    client = connect(settings.mongodb)  # a missing URI fails here, before any report
    if not rules:
        print(
            "mongomem: no memory type has a retention (memory.retention in the project "
            "config); nothing expires",
            file=sys.stderr,
        )
    try:
        store = MemoryStore(database(client, settings.mongodb))
        await store.setup(probe=False)
        result = await expire_unreinforced(store, rules, limit=args.limit)
    finally:
        await client.close()
    print(result.model_dump_json())
    return 0


def expire_command(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_run(args, settings))
