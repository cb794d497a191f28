"""Export and import keep the two clocks, subjects and world-ordered history (SPEC L1, L2)."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime, timedelta

import pytest
from pymongo import AsyncMongoClient
from service_http import EMBEDDER
from test_export_import import _decisions_moved, body_lines, export_text, in_order, other_db

from mongomem.adapters.mongo import Document, connect
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import EventTime, Evidence, MemoryCandidate, MemoryScope, stable_id
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def said(label: str, text: str, day: int, n: int, **extra: object) -> MemoryCandidate:
    made = candidate(
        "semantic",
        project_id="travel",
        user_id="alice",
        snapshot=f"s-{n}",
        label=label,
        text=text,
        embedder=EMBEDDER,
    )
    evidence = Evidence(
        source="snapshot",
        ref=f"s-{n}",
        session_id="s1",
        user_id="alice",
        at=T0 + timedelta(days=day),
        seqs=(n,),
    )
    return made.model_copy(
        update={"evidence": evidence, "candidate_id": stable_id("cand", n), **extra}
    )


async def test_dates_subjects_and_a_late_older_statement_round_trip(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    store = MemoryStore(mongo[settings.mongodb.database])
    await store.setup(probe=False)
    race = EventTime(valid_from=date(2023, 5, 7), valid_to=date(2023, 5, 7), phrase="yesterday")
    await store.reconcile(said("seat", "The user's seat is window.", 2, 1))
    await store.reconcile(said("seat", "The user's seat is aisle.", 1, 2))  # older, arrives late
    await store.reconcile(
        said("mel-race", "Melanie ran a race.", 0, 3, subject="Melanie", event=race)
    )
    fresh = other_db(settings, "-t")
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as source,
        AsyncMemory(project_id="travel", settings=fresh, embedder=EMBEDDER) as target,
    ):
        first = await export_text(source, "alice")
        done = await target.import_user(io.StringIO(first), user_id="alice")
        assert (done.memories, done.versions) == (2, 3)
        # every version line (dates, subject, world-ordered history) comes back as exported;
        # decision-log ids are re-derived for the target (moved_id; see export_format's doc)
        alice = MemoryScope(project_id="travel", user_id="alice")
        assert body_lines(await export_text(target, "alice")) == in_order(
            _decisions_moved(first, alice)
        )
        chat = target.bind(MemoryRequestContext(user_id="alice"))
        (hit,) = [h.memory for h in await chat.search_semantic("race", subject="Melanie")]
        assert (hit.subject, hit.event, hit.observed_at) == ("Melanie", race, T0)
        seat = await chat.get_semantic("seat")
        assert seat is not None
        assert seat.text == "The user's seat is window."
        history = await chat.history(seat.memory_id)
        assert [(v.version, v.text, v.status) for v in history] == [
            (2, "The user's seat is aisle.", "superseded"),
            (1, "The user's seat is window.", "current"),
        ]
        assert [v.observed_at for v in history] == [T0 + timedelta(days=1), T0 + timedelta(days=2)]
    client = connect(fresh.mongodb)
    await client.drop_database(fresh.mongodb.database)
    await client.close()
