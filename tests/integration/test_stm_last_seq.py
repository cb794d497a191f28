"""A session's last seq is found by ``_id`` alone (issue 28): mongo-java-server answers a
filter on (project, user, session) sorted by seq by scanning every turn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from mongomem.adapters.mongo import TURNS, Document, connect, database
from mongomem.models import Role, SessionKey, Turn
from mongomem.settings import Settings
from mongomem.stm.turns import ShortTermMemory

pytestmark = pytest.mark.integration

START = datetime(2026, 1, 1, tzinfo=UTC)


def _session(n: int) -> SessionKey:
    return SessionKey(project_id="proj", user_id="u", session_id=f"s{n}")


async def _store_turns(db: Any, key: SessionKey, count: int) -> None:
    docs = [
        {
            "_id": Turn.make_id(key.project_id, key.user_id, key.session_id, seq),
            "project_id": key.project_id,
            "user_id": key.user_id,
            "session_id": key.session_id,
            "seq": seq,
            "role": "user",
            "content": f"turn {seq}",
            "metadata": {},
            "created_at": START + timedelta(seconds=seq),
        }
        for seq in range(1, count + 1)
    ]
    for i in range(0, len(docs), 1000):
        await db[TURNS].insert_many(docs[i : i + 1000])


@pytest.mark.parametrize("count", [0, 1, 63, 64, 65, 129, 1000, 4097])
async def test_a_new_process_continues_a_session_at_its_next_seq(
    mongo: AsyncMongoClient[Document], settings: Settings, count: int
) -> None:
    db = mongo[settings.mongodb.database]
    key = _session(count)
    await _store_turns(db, key, count)
    fresh = ShortTermMemory(db, settings.stm)  # nothing cached: it reads the last seq
    turn = await fresh.record_turn(key, Role.USER, "next", at=START + timedelta(days=1))
    assert turn.seq == count + 1
    if count:  # the order check saw the last turn's time
        with pytest.raises(Exception, match="earlier than the session's previous turn"):
            await ShortTermMemory(db, settings.stm).record_turn(
                key, Role.USER, "too early", at=START
            )


async def test_the_last_seq_is_read_by_id_only(settings: Settings) -> None:
    filters: list[dict[str, Any]] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "find" and event.command.get("find") == TURNS:
                filters.append(dict(event.command.get("filter", {})))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    watched = connect(settings.mongodb, event_listeners=[Listener()])
    try:
        db = database(watched, settings.mongodb)
        key = _session(300)
        await _store_turns(db, key, 300)
        stm = ShortTermMemory(db, settings.stm)
        await stm.ensure_indexes()
        assert (await stm.record_turn(key, Role.USER, "the 301st")).seq == 301
    finally:
        await watched.close()
    assert filters, "the last seq was not read"
    assert all(set(f) == {"_id"} for f in filters), filters  # the _id index serves each
    assert len(filters) <= 4  # 300 turns: found in a few round trips
