"""A direct save reads the erasure register beside the embedding call (issue 28), and an
erased user is still refused with nothing written."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from pymongo import AsyncMongoClient, monitoring
from service_http import EMBEDDER

from mongomem.adapters.mongo import MEMORIES, Document, database
from mongomem.erasure.register import ERASURES, erasure_id
from mongomem.errors import Erased
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration


class RegisterReads(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == ERASURES:
            self.sent += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class SlowEmbedder:
    """The test embedder, slow enough to see what is sent while it works."""

    def __init__(self, reads: RegisterReads) -> None:
        self.name, self.dimensions = EMBEDDER.name, EMBEDDER.dimensions
        self.reads = reads
        self.register_read_meanwhile: list[bool] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        before = self.reads.sent
        await asyncio.sleep(0.2)
        self.register_read_meanwhile.append(self.reads.sent > before)
        return await EMBEDDER.embed(texts)


async def test_the_register_is_read_while_the_text_is_embedded(settings: Settings) -> None:
    reads = RegisterReads()
    monitoring.register(reads)  # for the clients made from here on (the SDK's own)
    embedder = SlowEmbedder(reads)
    async with AsyncMemory(project_id="travel", settings=settings, embedder=embedder) as memory:
        ana = memory.bind(MemoryRequestContext(user_id="ana"))
        await ana.save_semantic("home", "ana lives in Porto.")
        assert embedder.register_read_meanwhile == [True]


async def test_an_erased_user_is_refused_and_nothing_is_written(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = database(mongo, settings.mongodb)
    await db[ERASURES].insert_one({"_id": erasure_id("travel", "gone")})
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        gone = memory.bind(MemoryRequestContext(user_id="gone"))
        with pytest.raises(Erased):
            await gone.save_semantic("home", "gone lives in Faro.")
    assert await db[MEMORIES].count_documents({"scope.user_id": "gone"}) == 0


class Commands(monitoring.CommandListener):
    """(command, collection) of every command sent, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        self.sent.append((event.command_name, target if isinstance(target, str) else ""))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_an_unkeyed_save_is_four_round_trips_and_no_ledger(settings: Settings) -> None:
    """Issue 28: a save without an idempotency key has a random candidate id, so the
    ledger (claim and settle) is skipped; the register and the scope log are read beside
    the embedding call, the decision log is written beside the scope-log bump, and a
    "not erased" answer is remembered for the next save."""
    commands = Commands()
    monitoring.register(commands)
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        ana = memory.bind(MemoryRequestContext(user_id="ana"))
        await ana.save_semantic("warm", "ana warms up.")
        commands.sent.clear()
        first = await ana.save_semantic("home", "ana lives in Porto.")
        sent = list(commands.sent)
        commands.sent.clear()
        again = await ana.save_semantic("home", "ana lives in Porto.")
    assert first.action == "ADD"
    assert again.action == "REINFORCE"
    assert sorted(sent) == sorted(
        [
            ("find", "memory_scope_log"),
            ("insert", MEMORIES),
            ("findAndModify", "memory_scope_log"),
            ("insert", "decision_log"),
        ]
    ), sent
    assert not any(coll in ("reconcile_ledger", ERASURES) for _, coll in commands.sent)


class SlowCountingEmbedder(SlowEmbedder):
    """Also notes whether the scope log was read while it worked."""

    def __init__(self, reads: RegisterReads, commands: Commands) -> None:
        super().__init__(reads)
        self.commands = commands
        self.scope_read_meanwhile: list[bool] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        before = len(self.commands.sent)
        vectors = await super().embed(texts)
        read = ("find", "memory_scope_log") in self.commands.sent[before:]
        self.scope_read_meanwhile.append(read)
        return vectors


async def test_a_save_sees_what_another_process_wrote_before_it(settings: Settings) -> None:
    """The scope log read beside the embedding brings in another writer's version: the
    second process reinforces it instead of adding a duplicate."""
    reads, commands = RegisterReads(), Commands()
    monitoring.register(reads)
    monitoring.register(commands)
    embedder = SlowCountingEmbedder(reads, commands)
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as one,
        AsyncMemory(project_id="travel", settings=settings, embedder=embedder) as two,
    ):
        ana_one = one.bind(MemoryRequestContext(user_id="ana"))
        ana_two = two.bind(MemoryRequestContext(user_id="ana"))
        await ana_two.save_semantic("job", "ana is a nurse.")  # two's cache is warm
        await ana_one.save_semantic("home", "ana lives in Porto.")
        seen = await ana_two.save_semantic("home", "ana lives in Porto.")
    assert seen.action == "REINFORCE"
    assert embedder.scope_read_meanwhile == [True, True]


async def test_the_first_save_of_a_new_user_reads_no_memories(settings: Settings) -> None:
    """A scope never written has no scope-log entry (every write bumps it): its index is
    empty without a read of ``memories`` (a scan of it on mongo-java-server, issue 28)."""
    commands = Commands()
    monitoring.register(commands)
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        await memory.bind(MemoryRequestContext(user_id="ana")).save_semantic("warm", "ana.")
        commands.sent.clear()
        new = memory.bind(MemoryRequestContext(user_id="newcomer"))
        saved = await new.save_semantic("home", "the newcomer lives in Braga.")
        assert saved.action == "ADD"
        assert ("find", MEMORIES) not in commands.sent, commands.sent
        again = await new.save_semantic("home", "the newcomer lives in Braga.")
    assert again.action == "REINFORCE"
