"""``as_of`` is strict on observed time (SPEC L5), for direct saves too.

MongoDB keeps a time to the millisecond. A direct save's evidence time used to
be stored cut down to its millisecond, so a save made *after* a moment taken
within the same millisecond read as said by then, and ``value_as_of`` answered
the newer value (seen once in the docs' example). Evidence times of direct
saves are now rounded up, and a save returns only once its stored time has
passed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.models import ceil_millisecond, utcnow
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

AISLE, WINDOW = "The user prefers aisle seats.", "The user prefers window seats."


def test_rounding_up_keeps_whole_milliseconds_and_never_goes_back() -> None:
    at = datetime(2031, 1, 1, 0, 0, 0, 400, tzinfo=UTC)
    assert ceil_millisecond(at) == datetime(2031, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)
    whole = datetime(2031, 1, 1, 0, 0, 0, 2000, tzinfo=UTC)
    assert ceil_millisecond(whole) == whole


async def test_a_save_within_the_millisecond_after_as_of_is_not_shown_then(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failing case made exact: two saves 0.4 ms apart, ``as_of`` between them."""
    base = datetime(2031, 1, 1, 9, 0, tzinfo=UTC)
    first, second = base + timedelta(microseconds=400), base + timedelta(microseconds=800)
    between = base + timedelta(microseconds=600)
    ticks: Iterator[datetime] = iter([first, first, second, second])
    monkeypatch.setattr("mongomem.sdk.transport.utcnow", lambda: next(ticks, None) or utcnow())
    project = f"strict-{uuid.uuid4().hex[:8]}"
    async with AsyncMemory(
        project_id=project, settings=settings, embedder=HashingEmbedder(64)
    ) as m:
        chat = m.bind(MemoryRequestContext(user_id="u1"))
        saved = await chat.save_semantic(label="seat", text=AISLE)
        await chat.save_semantic(label="seat", text=WINDOW)
        then = await chat.value_as_of(saved.memory_id, between)
        assert then is None or then.text == AISLE, "a later save is never shown as of before it"
        assert [h.memory.text for h in await chat.search_semantic("seat", as_of=between)] in (
            [],
            [AISLE],
        )
        later = await chat.value_as_of(saved.memory_id, base + timedelta(milliseconds=1))
        assert later is not None
        assert later.text == WINDOW


async def test_a_moment_between_two_saves_reads_the_first(settings: Settings) -> None:
    """The docs' example, on the real clock, many times: save, take a moment, save again."""
    project = f"strict-{uuid.uuid4().hex[:8]}"
    async with AsyncMemory(
        project_id=project, settings=settings, embedder=HashingEmbedder(64)
    ) as m:
        for i in range(15):
            chat = m.bind(MemoryRequestContext(user_id=f"u{i}"))
            saved = await chat.save_semantic(label="seat", text=AISLE)
            between = utcnow()
            await chat.save_semantic(label="seat", text=WINDOW)
            then = await chat.value_as_of(saved.memory_id, between)
            assert then is not None, i
            assert then.text == AISLE, (i, then)
