"""The ``make run`` demo: two sessions of one user go through the whole pipeline.

Session 1 states a home airport, a seat preference and a domain term; session
2 changes the home airport and repeats the seat preference. Once the stages
have done their work, the demo prints what memory holds: the home airport as
an UPDATE (two versions, the old one superseded), the seat preference
REINFORCED, the ``red-eye`` term shared by the project, and the episodes.

Every run uses new session ids, so running it again reinforces and updates
the same memories further — which is what a memory system should do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from mongomem.models import MemoryStatus
from mongomem.sdk import AsyncBoundMemory, AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, Settings

__all__ = ["DEMO_PROJECT", "DEMO_USER", "SESSION_ONE", "SESSION_TWO", "run_demo"]

DEMO_PROJECT = "demo-travel"
DEMO_USER = "demo-user"

SESSION_ONE: tuple[tuple[str, str], ...] = (
    ("user", "Hi! My home airport is Boston."),
    ("assistant", "Noted: you fly out of Boston."),
    ("user", "My seat preference is aisle."),
    ("assistant", "Aisle seats it is."),
    ("user", "In airline terms, a red-eye means an overnight flight that lands the next morning."),
    ("assistant", "Understood. I will avoid red-eyes unless you ask for one."),
)
SESSION_TWO: tuple[tuple[str, str], ...] = (
    ("user", "Good news: we moved, so my home airport is Denver now."),
    ("assistant", "Updated: you now fly out of Denver."),
    ("user", "My seat preference is aisle."),
    ("assistant", "Still aisle, got it."),
)

Say = Callable[[str], None]


async def _converse(chat: AsyncBoundMemory, turns: tuple[tuple[str, str], ...], say: Say) -> None:
    for role, content in turns:
        turn = await chat.record_turn(role, content)
        say(f"    [{turn.seq}] {role:>9}: {content}")


async def _state(memory: AsyncBoundMemory) -> tuple[int, int, int, int, bool]:
    """(home-airport version, seat-preference count, red-eye count, episode evidence, Denver?).

    Episode evidence is the episodes' reinforcement counts summed: a rerun of
    the demo tells the same two episodes again, which REINFORCEs them.
    """
    airport = await memory.get_semantic("home-airport")
    seat = await memory.get_semantic("seat-preference")
    term = await memory.get_taxonomic_term("airline", "red-eye")
    episodes = await memory.list_episodes(limit=1000)
    return (
        airport.version if airport else 0,
        seat.reinforcement_count if seat else 0,
        term.reinforcement_count if term else 0,
        sum(e.reinforcement_count for e in episodes),
        airport is not None and "Denver" in airport.text,
    )


async def _wait_for(
    memory: AsyncBoundMemory,
    before: tuple[int, int, int, int, bool],
    timeout_s: float,
    say: Say,
) -> bool:
    """Wait until this run's conversation shows in memory (on top of earlier runs')."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = ""
    while loop.time() < deadline:
        version, seat, term, episodes, denver = await _state(memory)
        state = (
            f"home-airport v{version}{' (Denver)' if denver else ''}, "
            f"seat-preference ×{seat}, red-eye ×{term}, episode evidence ×{episodes}"
        )
        if state != last:
            say(f"  waiting for the pipeline: {state}")
            last = state
        if (
            denver
            and version >= before[0] + 2  # Boston (ADD or UPDATE), then Denver (UPDATE)
            and seat >= before[1] + 2  # said once per session: REINFORCE
            and term >= before[2] + 1
            and episodes >= before[3] + 2
        ):
            return True
        await asyncio.sleep(1.0)
    return False


async def _show(chat: AsyncBoundMemory, say: Say) -> None:
    say("")
    say("Long-term memory of demo-user (project demo-travel):")
    say(f"  {'type':<10} {'key':<22} {'ver':>3}  {'reinf':>5}  text")
    rows = []
    for label in ("home-airport", "seat-preference"):
        found = await chat.get_semantic(label)
        if found is not None:
            rows.append(
                ("semantic", found.key, found.version, found.reinforcement_count, found.text)
            )
    term = await chat.get_taxonomic_term("airline", "red-eye")
    if term is not None:
        rows.append(("taxonomic", term.key, term.version, term.reinforcement_count, term.text))
    for ep in await chat.list_episodes(limit=5):
        rows.append(("episodic", ep.key[:22], ep.version, ep.reinforcement_count, ep.text[:60]))
    for kind, key, version, count, text in rows:
        say(f"  {kind:<10} {key:<22} {version:>3}  {count:>5}  {text}")
    airport = await chat.get_semantic("home-airport")
    if airport is not None:
        say("")
        say("History of home-airport (every version, newest last):")
        for record in await chat.history(airport.memory_id):
            marker = "current" if record.status == MemoryStatus.CURRENT else "superseded"
            say(f"  v{record.version} {record.action.value:<9} {marker:<10} {record.text}")


async def run_demo(
    settings: Settings, *, env_overrides: Mapping[str, str], say: Say, timeout_s: float = 180.0
) -> int:
    """Record the demo conversation, wait for its memories, print them. 0 when all appeared."""
    provider = env_overrides.get("MONGOMEM_EMBEDDING_PROVIDER")
    if provider and settings.embedding.provider is None:
        embedding = EmbeddingSettings.model_validate(
            {"provider": provider, "dimensions": settings.embedding.dimensions}
        )
        settings = settings.model_copy(update={"embedding": embedding})
    run = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    async with AsyncMemory(project_id=DEMO_PROJECT, settings=settings) as memory:
        one = memory.bind(MemoryRequestContext(user_id=DEMO_USER, session_id=f"trip-{run}-1"))
        two = memory.bind(MemoryRequestContext(user_id=DEMO_USER, session_id=f"trip-{run}-2"))
        before = await _state(two)
        say("")
        say(f"Demo conversation, session {one.identity.session_id}:")
        await _converse(one, SESSION_ONE, say)
        say(f"Demo conversation, session {two.identity.session_id}:")
        await _converse(two, SESSION_TWO, say)
        say("")
        ok = await _wait_for(two, before, timeout_s, say)
        await _show(two, say)
    say("")
    if not ok:
        say(
            f"mongomem: the demo's memories did not all appear within {timeout_s:.0f}s; "
            "see the stage logs in .mongomem/stages/ and `mongomem status`."
        )
        return 1
    say("The pipeline keeps running: record more turns with the SDK, watch `mongomem status`,")
    say("and stop everything with `make stop`.")
    return 0
