"""How an erasure asks the server (issue 28): what a sweep read is deleted by ``_id``, a
user's memories are read once per sweep (its own and those lineage prunes in one read),
whether there is anything to erase is asked by ``_id`` first, a step's deletes overlap,
and the versions that lineage prunes are read in one query, not one per memory
(mongo-java-server answers every other shape by a scan)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from pymongo import monitoring
from service_http import EMBEDDER

from mongomem.adapters.mongo import DECISIONS, MEMORIES, SNAPSHOTS, TURNS, connect, database
from mongomem.erasure.erase import DELETE_BATCH, DELETES_AT_ONCE, Target, _Erasure, erase
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        c = event.command
        name = event.command_name
        coll = c.get(name)
        if not isinstance(coll, str):
            return
        if name == "delete":
            for d in c.get("deletes", ()):
                self.seen.append((name, coll, dict(d.get("q", {}))))
        elif name in ("find", "distinct"):
            self.seen.append((name, coll, dict(c.get("filter") or c.get("query") or {})))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def of(self, coll: str, *names: str) -> list[dict[str, Any]]:
        return [f for n, c, f in self.seen if c == coll and n in names]


async def test_an_erasure_deletes_by_id_and_reads_versions_in_batches(settings: Settings) -> None:
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        ana, ben = (
            memory.bind(MemoryRequestContext(user_id=u, session_id="s1")) for u in ("ana", "ben")
        )
        await ana.record_turn("user", "I am ana.")
        for i in range(5):
            await ana.save_semantic(f"fact {i}", f"ana fact number {i}.")
        for term in ("ETOPS", "MEL", "QNH"):  # project-scoped, with ana's evidence
            await ana.save_taxonomic("aviation", term, f"{term} is a term of aviation.")
            await ben.save_taxonomic("aviation", term, f"{term} is a term of aviation.")
    commands = Commands()
    client = connect(settings.mongodb, event_listeners=[commands])
    try:
        result = await erase(
            database(client, settings.mongodb),
            Target(project_id="travel", user_id="ana"),
            actor="t",
        )
    finally:
        await client.close()
    assert result.erased
    assert result.removed[MEMORIES] == 5
    assert result.memories_pruned == 3
    for coll in (MEMORIES, TURNS, SNAPSHOTS):
        deletes = [f for n, c, f in commands.seen if n == "delete" and c == coll]
        assert all(set(f) == {"_id"} for f in deletes), (coll, deletes)
    # per sweep (two): one read of every memory it touches (ana's own and those lineage
    # prunes, in one $or), no distinct; and none to learn whether ana has data at all
    # (her scope log says so, by _id)
    scans = [
        f for f in commands.of(MEMORIES, "find", "distinct") if not {"_id", "memory_id"} & set(f)
    ]
    assert len(scans) == 2, scans
    assert all({"scope.user_id": "ana"} in f["$or"] for f in scans), scans
    assert not commands.of(MEMORIES, "distinct")
    # snapshots, turns and decisions: one read each per sweep, none before the register
    for coll in (SNAPSHOTS, TURNS, DECISIONS):
        assert len(commands.of(coll, "find")) == 2, (coll, commands.of(coll, "find"))
    # the three pruned memories' versions: one read, by memory_id $in (the second sweep
    # finds none of ana's evidence left)
    by_memory = [f for f in commands.of(MEMORIES, "find") if "memory_id" in f]
    assert len(by_memory) == 1, by_memory
    assert len(by_memory[0]["memory_id"]["$in"]) == 3


class InFlight:
    """``db``, counting the most ``delete_many`` calls of its collections awaiting at once.

    Each delete waits a moment before it goes to the server, so deletes sent one
    after another never overlap and deletes sent together always do, however fast
    the server answers (counting what the server had in flight depended on how
    fast the pool opened its connections: a slow machine saw one at a time).
    """

    def __init__(self, db: Any) -> None:
        self.db, self.now, self.most = db, 0, 0

    def __getitem__(self, name: str) -> Counted:
        return Counted(self.db[name], self)


class Counted:
    def __init__(self, coll: Any, counter: InFlight) -> None:
        self.coll, self.counter = coll, counter

    async def delete_many(self, *args: Any, **kwargs: Any) -> Any:
        c = self.counter
        c.now += 1
        c.most = max(c.most, c.now)
        try:
            await asyncio.sleep(0.05)
            return await self.coll.delete_many(*args, **kwargs)
        finally:
            c.now -= 1


async def test_the_delete_batches_of_a_step_are_in_flight_together(settings: Settings) -> None:
    client = connect(settings.mongodb)
    try:
        db = database(client, settings.mongodb)
        ids = [f"d{i}" for i in range(3 * DELETE_BATCH + 1)]
        await db["erase_batches"].insert_many([{"_id": i} for i in ids])
        counted = InFlight(db)
        run = _Erasure(cast(Any, counted), Target(project_id="p", user_id="u"), None)
        await run.delete_ids("erase_batches", ids)
        assert await db["erase_batches"].count_documents({}) == 0
        assert run.removed == {"erase_batches": len(ids)}
    finally:
        await client.close()
    batches = -(-len(ids) // DELETE_BATCH)
    assert counted.most == min(DELETES_AT_ONCE, batches), counted.most  # not one after another
