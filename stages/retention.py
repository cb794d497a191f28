"""``mongomem run retention``: the retention sweep, run for good (SPEC J8).

Every ``MONGOMEM_RECONCILE_RETENTION_SWEEP_S`` seconds (default 3600; ``none``:
never) it expires the memories not reinforced within their type's retention
(``memory.retention`` of ``project-config.yaml``), as ``mongomem expire`` does once:
:func:`mongomem.ltm.retention.expire_unreinforced`, at most :data:`BATCH` memories a
sweep, and straight on while a sweep says there is more. The rules are read again
at each sweep, so a configuration applied later takes effect without a restart;
with none, a sweep does nothing.

A sweep is idempotent and checks each memory again just before it writes, so a
sweep cut short by a crash or a SIGTERM, or two of these processes at once, expire
each memory once (the EXPIRE version has a deterministic id). It runs on the stage
runtime (:func:`~mongomem.stages.runtime.run_stage`): SIGTERM and SIGINT stop it
between sweeps; a retriable failure (MongoDB away) restarts it with back-off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

from mongomem.adapters.mongo import connect, database
from mongomem.ltm import MemoryStore
from mongomem.ltm.retention import expire_unreinforced, retention_rules
from mongomem.settings import Settings
from mongomem.stages.runtime import run_stage

__all__ = ["BATCH", "STAGE", "RetentionStage", "main"]

log = logging.getLogger(__name__)

STAGE = "retention"
#: Memories expired at most per sweep (the next sweep follows at once when there is more).
BATCH = 1000


class RetentionStage:
    """The periodic retention sweep as a :class:`~mongomem.stages.runtime.ports.Stage`."""

    name = STAGE

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def run(self, stop: asyncio.Event) -> None:
        interval = self.settings.reconcile.retention_sweep_s
        client = connect(self.settings.mongodb)
        try:
            store = MemoryStore(database(client, self.settings.mongodb))
            await store.setup(probe=False)
            while not stop.is_set():
                more = await self.sweep(store) if interval is not None else False
                if more:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
        finally:
            await client.close()

    async def sweep(self, store: MemoryStore) -> bool:
        """One bounded sweep; whether it left more to expire."""
        rules = retention_rules(self.settings)
        if not rules:
            return False
        result = await expire_unreinforced(store, rules, limit=BATCH)
        if result.expired:
            log.info("retention: expired %d memories %s", result.expired, result.by_type)
        return result.more


async def main(settings: Settings, args: argparse.Namespace) -> None:
    """Entry of ``mongomem run retention``: runs until SIGTERM/SIGINT, then returns."""
    await run_stage(RetentionStage(settings), settings)
