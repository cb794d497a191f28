"""The seeding of ``bench.scale`` in worker processes (the public paths, in parallel).

Each worker is its own process with its own :class:`~mongomem.sdk.AsyncMemory`:
the SDK's writes of one process are bound by that process's interpreter, so the
seeding spreads them over several. A user's import and a session's turns are each
written by exactly one worker (sessions are split by number), as separate writers
of one deployment would.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings


@dataclass(frozen=True)
class SeedShare:
    """What one worker writes: users ``u ≡ worker (mod workers)``, sessions likewise."""

    settings: Settings
    project_id: str
    lines: list[str]
    users: int
    sessions: int
    session_turns: int
    worker: int
    workers: int
    importers: int
    writers: int
    base: datetime


def seed_share(share: SeedShare) -> tuple[float, float]:
    """Run one worker's share; the :func:`time.monotonic` times its memories and its
    turns were done (one clock for every process of the machine)."""
    return asyncio.run(_seed(share))


async def _seed(share: SeedShare) -> tuple[float, float]:
    memory = AsyncMemory(project_id=share.project_id, settings=share.settings)
    try:
        users = iter(range(share.worker, share.users, share.workers))
        sessions = iter(range(share.worker, share.sessions, share.workers))

        async def importer() -> None:
            for u in users:
                await memory.import_user(share.lines, user_id=f"u{u}")

        async def writer() -> None:
            for s in sessions:
                chat = memory.bind(
                    MemoryRequestContext(user_id=f"u{s % share.users}", session_id=f"hist-{s}")
                )
                for t in range(share.session_turns):
                    role = "user" if t % 2 == 0 else "assistant"
                    at = share.base + timedelta(seconds=s * 60 + t)
                    await chat.record_turn(role, f"historical turn {t} of session {s}", at=at)

        async def timed(work: list[asyncio.Future[None]]) -> float:
            await asyncio.gather(*work)
            return time.monotonic()

        memories_done, turns_done = await asyncio.gather(
            timed([asyncio.ensure_future(importer()) for _ in range(share.importers)]),
            timed([asyncio.ensure_future(writer()) for _ in range(share.writers)]),
        )
        return memories_done, turns_done
    finally:
        await memory.close()
