"""An import never crosses a tenant's scope (SPEC F3, issue 25): its existence checks read
the target's own scope only, so another tenant's ids behave exactly as fresh ids, and what
one tenant imports can never make another tenant's import skip anything."""

from __future__ import annotations

import io
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from service_http import EMBEDDER
from test_export_import import body_lines, export_text, fill, other_db

from mongomem.adapters.mongo import DECISIONS, MEMORIES, Document
from mongomem.ltm.export import ImportResult
from mongomem.ltm.export_format import dump_line, parse_line
from mongomem.sdk import AsyncMemory
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


def claimed(text: str, project_id: str, user_id: str) -> list[str]:
    """``text`` (an export) rewritten as if it were ``project_id``/``user_id``'s own export,
    every id left as it was: a file that claims another tenant's ids."""
    scope = {"project_id": project_id, "user_id": user_id}
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        kind, obj = parse_line(line, number)
        if kind == "header":
            obj = {**obj, **scope}
        elif kind in ("version", "decision"):
            obj = {**obj, "doc": {**obj["doc"], "scope": scope}}
        out.append(dump_line(obj))
    return out


def counts(result: ImportResult) -> dict[str, Any]:
    return result.model_dump(exclude={"import_id"})


async def test_another_tenants_ids_behave_exactly_like_fresh_ids(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """Old code: the claimed ids were found in the victim's scope and ``skipped``."""
    fresh = other_db(settings, "-fresh")
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as victim,
        AsyncMemory(project_id="evil", settings=settings, embedder=EMBEDDER) as attacker,
        AsyncMemory(project_id="evil", settings=fresh, embedder=EMBEDDER) as alone,
    ):
        await fill(victim, "vera")
        probe = claimed(await export_text(victim, "vera"), "evil", "mallory")

        there = await attacker.import_user(probe, user_id="mallory")  # vera's ids exist here
        nowhere = await alone.import_user(probe, user_id="mallory")  # and not at all here
        assert counts(there) == counts(nowhere)
        assert there.skipped == 0
        assert there.memories > 0
        assert there.decisions > 0
        # what was stored is the same too, ids included: nothing says vera's ids exist
        assert body_lines(await export_text(attacker, "mallory")) == body_lines(
            await export_text(alone, "mallory")
        )
        # and none of vera's ids is now held by mallory's scope
        vera_ids = await mongo[settings.mongodb.database][MEMORIES].distinct(
            "memory_id", {"scope.project_id": "travel", "scope.user_id": "vera"}
        )
        held = await mongo[settings.mongodb.database][MEMORIES].count_documents(
            {"scope.project_id": "evil", "memory_id": {"$in": vera_ids}}
        )
        assert held == 0


async def test_one_tenants_import_never_makes_anothers_skip_anything(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """Old code: the victim's own later import ``skipped`` every memory the attacker claimed."""
    source, clean = other_db(settings, "-source"), other_db(settings, "-clean")
    async with (
        AsyncMemory(project_id="travel", settings=source, embedder=EMBEDDER) as elsewhere,
        AsyncMemory(project_id="evil", settings=settings, embedder=EMBEDDER) as attacker,
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as victim,
        AsyncMemory(project_id="travel", settings=clean, embedder=EMBEDDER) as control,
    ):
        await fill(elsewhere, "wendy")
        backup = await export_text(elsewhere, "wendy")  # wendy's backup, ids derived for her

        await attacker.import_user(claimed(backup, "evil", "mallory"), user_id="mallory")
        restored = await victim.import_user(io.StringIO(backup), user_id="wendy")
        expected = await control.import_user(io.StringIO(backup), user_id="wendy")
        assert counts(restored) == counts(expected)
        assert (restored.skipped, restored.decisions_skipped) == (0, 0)
        assert body_lines(await export_text(victim, "wendy")) == body_lines(
            await export_text(control, "wendy")
        )
        db = mongo[settings.mongodb.database]
        where = {"scope.project_id": "travel", "scope.user_id": "wendy"}
        assert await db[MEMORIES].count_documents(where) == restored.versions
        assert await db[DECISIONS].count_documents(where) == restored.decisions
