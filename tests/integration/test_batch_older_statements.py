"""The batch path decides older statements as one-at-a-time reconciliation does (SPEC L2).

Three users state the same project-wide term; their candidates reach one reconciler
batch newest first (each type and user is extracted on its own, so arrival is not
evidence order). The first is ADDed; the two older, equivalent statements must
REINFORCE it, as they do one at a time — not enter history as new versions because
the version they are compared with exists only in the batch's plan so far.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.mongo import MEMORIES, Document
from mongomem.ltm import MemoryStore
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryCandidate, utcnow
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


def statements() -> list[MemoryCandidate]:
    now = utcnow()
    return [
        candidate(
            "taxonomic",
            user_id=user,
            snapshot=f"snap-{user}",
            at=now - timedelta(seconds=n),  # newest first
            domain="airline",
            term="red-eye",
            definition="An overnight flight that lands the next morning.",
        )
        for n, user in enumerate(("cy", "ana", "bo"))
    ]


async def test_older_equivalent_statements_in_one_batch_reinforce_like_one_at_a_time(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    batched = MemoryStore(mongo[settings.mongodb.database])
    single = MemoryStore(mongo[f"{settings.mongodb.database}-single"])
    for store in (batched, single):
        await store.setup()
    together = await batched.reconcile_many(statements())
    alone = [await single.reconcile(c) for c in statements()]
    assert [o.action for o in alone] == [Action.ADD, Action.REINFORCE, Action.REINFORCE]
    assert [o.action for o in together] == [o.action for o in alone]
    versions = await batched.db[MEMORIES].find({"key": "airline/red-eye"}).to_list()
    assert len(versions) == 1
