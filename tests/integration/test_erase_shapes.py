"""How an erasure asks the server (issue 28): what a sweep read is deleted by ``_id``, a
user's memories are read once per sweep, and the versions that lineage prunes are read
in one query, not one per memory (mongo-java-server answers every other shape by a scan)."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import monitoring
from service_http import EMBEDDER

from mongomem.adapters.mongo import MEMORIES, SNAPSHOTS, TURNS, connect, database
from mongomem.erasure.erase import Target, erase
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
    # per sweep (two): one read of ana's own memories, no distinct over them
    own = [f for f in commands.of(MEMORIES, "find", "distinct") if f.get("scope.user_id") == "ana"]
    assert len(own) == 2, own
    # the three pruned memories' versions: one read, by memory_id $in (the second sweep
    # finds none of ana's evidence left)
    by_memory = [f for f in commands.of(MEMORIES, "find") if "memory_id" in f]
    assert len(by_memory) == 1, by_memory
    assert len(by_memory[0]["memory_id"]["$in"]) == 3
