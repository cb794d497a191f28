"""How an import asks the server about its target (issue 28): a user whose scope never
wrote the file's memory types (no scope-log entry) is known empty without a read of
``memories`` (a scan of the whole collection on mongo-java-server), and a user who did
write them is still read, so a current key it holds refuses the import as before."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import monitoring
from service_http import EMBEDDER

from mongomem.adapters.mongo import MEMORIES, connect
from mongomem.errors import InputError
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.sdk.transport import DirectTransport
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


class Reads(monitoring.CommandListener):
    """The filters of every read of ``memories``."""

    def __init__(self) -> None:
        self.filters: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        c = event.command
        if (
            event.command_name in ("find", "aggregate", "distinct")
            and c.get(event.command_name) == MEMORIES
        ):
            self.filters.append(dict(c.get("filter") or c.get("query") or {}))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def scans(self) -> list[dict[str, Any]]:
        """Reads by a filter other than ``_id`` (mongo-java-server scans for them; the
        store's one-document probe of the collection, an empty filter, is not one)."""
        return [f for f in self.filters if f and set(f) != {"_id"}]


async def test_a_never_written_user_is_not_read_and_a_written_one_still_refuses_a_clash(
    settings: Settings,
) -> None:
    async with AsyncMemory(project_id="imp", settings=settings, embedder=EMBEDDER) as source:
        chat = source.bind(MemoryRequestContext(user_id="src"))
        for i in range(3):
            await chat.save_semantic(f"k{i}", f"value number {i}.")
        lines = [line async for line in source.export_lines("src")]
    reads = Reads()
    client = connect(settings.mongodb, event_listeners=[reads])
    try:
        transport = DirectTransport(settings, embedder=EMBEDDER, client=client)
        async with AsyncMemory(project_id="imp", transport=transport) as memory:
            result = await memory.import_user(lines, user_id="fresh")
            assert result.memories == 3
            assert reads.scans() == []  # no entry in fresh's scope logs: nothing to read
            assert [line async for line in memory.export_lines("fresh")][1:] != []
            # dave wrote a semantic memory: his scope is read, and his key refuses the file
            await memory.bind(MemoryRequestContext(user_id="dave")).save_semantic(
                "k1", "Dave's own value."
            )
            reads.filters.clear()
            with pytest.raises(InputError, match="already has a current semantic memory"):
                await memory.import_user(lines, user_id="dave")
            assert reads.scans() != []
    finally:
        await client.close()
