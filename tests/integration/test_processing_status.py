"""Processing status (SPEC J6) through a running pipeline (`mongomem run all`, one
process running every stage) on the real servers, with the scripted fake
OpenAI-compatible server as the LLM."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient
from service_http import start
from test_service import KEY_A, with_keys

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.kafka import CANDIDATES, dead_letter_topic, ensure_topics, make_producer
from mongomem.adapters.mongo import SNAPSHOTS, TURNS, Document, database
from mongomem.codec import encode
from mongomem.errors import InputError, NotFound, ProcessingFailed, ProcessingTimeout
from mongomem.local.supervisor import StageProcess
from mongomem.ltm.testing import candidate
from mongomem.models import Snapshot, SnapshotTurn, Turn, stable_id, utcnow
from mongomem.operations.progress import PROGRESS, type_progress
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, ExtractionSettings, Settings
from mongomem.stages.reconciler import run_reconciler
from mongomem.testing import Answer, ChatRequest, FakeOpenAIServer, Reply, ServerError, citing

pytestmark = pytest.mark.integration

TYPES = ("semantic", "episodic")


def scripted(request: ChatRequest) -> Reply:
    """Semantic finds the airport; episodic finds nothing; "poison" always fails."""
    if "poison" in request.text("user") and request.schema_name == "extract_semantic":
        return ServerError(500)
    if request.schema_name == "extract_semantic" and "airport" in request.text("user"):
        item = {"label": "home-airport", "fact": "The home airport is Boston."}
        return Answer(citing(request, [item]))
    return Answer({"items": []})


def snapshot_doc(project: str, session: str) -> dict[str, object]:
    """A snapshot document as the windowing stage stores it (one turn, seq 1)."""
    now = utcnow().replace(microsecond=0)
    turn = SnapshotTurn(
        turn_id=stable_id("turn", session, 1), seq=1, role="user", content="hi", created_at=now
    )
    snap = Snapshot(
        snapshot_id=stable_id("snap", project, "u", session, 1, 1),
        project_id=project,
        user_id="u",
        session_id=session,
        first_seq=1,
        last_seq=1,
        turns=(turn,),
        reason="idle",
        closed_at=now,
    )
    return {"_id": snap.snapshot_id, **snap.model_dump(mode="python")}


@pytest.fixture
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(scripted) as server:
        yield server


def configured(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "embedding": EmbeddingSettings(provider="stand-in"),
            "extraction": ExtractionSettings(enabled=TYPES),
        }
    )


@pytest.fixture
async def pipeline(
    subprocess_env: dict[str, str], tmp_path: Path, llm: FakeOpenAIServer
) -> AsyncIterator[StageProcess]:
    env = {
        **subprocess_env,
        "MONGOMEM_LLM_BASE_URL": llm.base_url,
        "MONGOMEM_LLM_API_KEY": "fake",
        "MONGOMEM_EMBEDDING_PROVIDER": "stand-in",
        "MONGOMEM_ENABLED_EXTRACTIONS": ",".join(TYPES),
        "MONGOMEM_EXTRACTION_MAX_ATTEMPTS": "2",
        "MONGOMEM_EXTRACTION_BACKOFF_BASE_S": "0.05",
        "MONGOMEM_WINDOW_MAX_MESSAGES": "2",
        "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.5",
        "MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S": "0.5",
    }
    stage = StageProcess(name="all", stage="all", state_dir=tmp_path, cache_dir=tmp_path, env=env)
    await asyncio.to_thread(stage.start)
    try:
        yield stage
    finally:
        await asyncio.to_thread(stage.stop)


async def test_wait_for_all_turns_after_end_session_returns(
    settings: Settings, mongo: AsyncMongoClient[Document], pipeline: StageProcess
) -> None:
    """The session end takes a seq but is never in a snapshot: waiting for all
    turns after ``end_session`` must not wait for it (it timed out before)."""
    async with AsyncMemory(project_id="p", settings=configured(settings)) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id="ended"))
        for content in ("My home airport is Boston.", "Noted.", "Bye."):
            await chat.record_turn("user", content)
        await chat.end_session()
        status = await chat.wait_until_processed(60, all_turns=True)
        assert (status.last_turn_seq, status.last_snapshot_seq) == (3, 3)
        assert status.state == "done"


async def test_wait_until_processed_returns_once_every_snapshot_is_reconciled(
    settings: Settings, mongo: AsyncMongoClient[Document], pipeline: StageProcess
) -> None:
    async with AsyncMemory(project_id="p", settings=configured(settings)) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id="good"))
        with pytest.raises(NotFound, match="'good'"):  # nothing so far: it said "done"
            await chat.processing_status()
        await chat.record_turn("user", "My home airport is Boston.")
        await chat.record_turn("assistant", "Noted.")
        await chat.record_turn("user", "Thanks, that is all.")
        await chat.record_turn("assistant", "Goodbye.")

        status = await chat.wait_until_processed(120, all_turns=True)
        assert (status.last_turn_seq, status.last_snapshot_seq) == (4, 4)
        assert status.state == "done"
        assert status.memory_types == TYPES
        first, second = status.snapshots
        assert (first.first_seq, first.last_seq, second.first_seq) == (1, 2, 3)
        by_type = {t.memory_type: t for t in first.types}
        assert (by_type["semantic"].candidates, by_type["semantic"].reconciled) == (1, 1)
        assert by_type["episodic"].candidates == 0  # nothing of its type: done all the same
        assert all(t.state == "done" for s in status.snapshots for t in s.types)
        # done means reconciled: the fact is readable now, without waiting any more
        fact = await chat.get_semantic("home-airport")
        assert fact is not None
        assert "Boston" in fact.text

        # A snapshot whose extraction is dead-lettered: waiting says so, it does not hang.
        bad = memory.bind(MemoryRequestContext(user_id="u", session_id="bad"))
        await bad.record_turn("user", "poison pill")
        await bad.record_turn("assistant", "Hm.")
        with pytest.raises(ProcessingFailed, match="semantic") as failed:
            await bad.wait_until_processed(120, all_turns=True)
        assert "LLMUnavailable" in str(failed.value)
        state = await bad.processing_status()
        assert state.state == "dead_lettered"
        [(snapshot_id, memory_type, error)] = state.where("dead_lettered")
        assert memory_type == "semantic"
        assert error is not None
        assert snapshot_id == state.snapshots[0].snapshot_id
        assert [t.state for t in state.snapshots[0].types] == ["dead_lettered", "done"]


async def test_the_timeout_names_what_is_pending_and_http_gives_the_same_status(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """No pipeline runs here: a stored snapshot stays pending for good."""
    session = MemoryRequestContext(user_id="u", session_id="stuck")
    stored = snapshot_doc("travel", "stuck")
    snap_id = str(stored["_id"])
    db = database(mongo, settings.mongodb)
    await db[SNAPSHOTS].insert_one(stored)
    async with AsyncMemory(project_id="travel", settings=configured(settings)) as memory:
        chat = memory.bind(session)
        with pytest.raises(ProcessingTimeout, match=f"{snap_id} \\(semantic\\)") as late:
            await chat.wait_until_processed(0.5, poll_s=0.1)
        assert f"{snap_id} (episodic)" in str(late.value)
        await db[TURNS].insert_many(  # shaped as record_turn writes them: ids from seqs
            [
                {
                    "_id": Turn.make_id("travel", "u", "stuck", n),
                    "project_id": "travel",
                    "user_id": "u",
                    "session_id": "stuck",
                    "seq": n,
                }
                for n in (1, 2)
            ]
        )
        with pytest.raises(ProcessingTimeout, match="turns 2-2 \\(not in a snapshot yet\\)"):
            await chat.wait_until_processed(0.3, all_turns=True, poll_s=0.1)
        assert late.value.retriable
        with pytest.raises(InputError):
            await chat.wait_until_processed(0)
        with pytest.raises(InputError) as no_session:
            await memory.bind(MemoryRequestContext(user_id="u")).processing_status()
        assert no_session.value.field == "session_id"
        direct = await chat.processing_status()
        assert direct.state == "pending"
        assert [t.candidates for t in direct.snapshots[0].types] == [None, None]

        runner, url = await start(
            with_keys(configured(settings)).model_copy(
                update={"extraction": ExtractionSettings(enabled=TYPES)}
            )
        )
        try:
            async with AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as remote:
                chat_remote = remote.bind(session)
                assert await chat_remote.processing_status() == direct
            # the reconciler's record may come before the extractor's: still pending
            await db[PROGRESS].update_one(
                {"_id": stable_id("prog", snap_id, "semantic")},
                {"$addToSet": {"reconciled": {"$each": ["c1"]}}},
                upsert=True,
            )
            assert (await chat.processing_status()).snapshots[0].types[0].state == "pending"
        finally:
            await runner.stop()


async def test_the_reconciler_records_applied_and_dead_lettered_candidates(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    """The reconciler stage's own records, as `processing_status` reads them."""
    good = candidate("semantic", label="seat", text="Aisle seats.", snapshot="snap-a")
    small = HashingEmbedder(8)  # another size than the scope's memories: refused by the store
    bad = candidate("semantic", label="meal", text="Vegetarian.", snapshot="snap-b", embedder=small)
    direct = candidate("semantic", label="pet", text="A cat.", snapshot=None)
    topics = [settings.kafka.topic(CANDIDATES), dead_letter_topic(settings.kafka, "reconciler")]
    await ensure_topics(settings.kafka, topics)
    producer = make_producer(settings.kafka)
    await producer.start()
    try:
        for c in (good, direct, bad):
            await producer.send(
                settings.kafka.topic(CANDIDATES), encode(c), key=c.scope.kafka_key()
            )
        await producer.flush()
    finally:
        await producer.stop()
    entries = database(mongo, settings.mongodb)[PROGRESS]
    stop = asyncio.Event()
    task = asyncio.create_task(run_reconciler(settings, stop))
    try:
        for _ in range(600):
            if await entries.count_documents({}) >= 2:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    applied = await entries.find_one({"_id": stable_id("prog", "snap-a", "semantic")})
    assert applied is not None
    assert applied["reconciled"] == [good.candidate_id]
    failed = await entries.find_one({"_id": stable_id("prog", "snap-b", "semantic")})
    assert failed is not None
    [failure] = failed["failed"]
    assert failure["candidate_id"] == bad.candidate_id
    assert "InputError" in failure["error"]
    assert await entries.count_documents({}) == 2  # a direct save has no snapshot to mark
    assert type_progress("semantic", {**failed, "candidates": [bad.candidate_id]}).state == (
        "dead_lettered"
    )


def test_cli_status_prints_the_progress_and_waits(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from pymongo import MongoClient

    from mongomem.cli.main import main

    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_ENABLED_EXTRACTIONS", "semantic")
    who = ["--project-id", "p", "--user-id", "u", "--session-id", "cli"]
    assert main(["memory", "status", *who]) == 1  # nothing yet: it said "done"
    assert "no session 'cli'" in capsys.readouterr().err
    snap = snapshot_doc("p", "cli")
    with MongoClient[Document](settings.mongodb.uri, tz_aware=True) as sync:
        sync[settings.mongodb.database][SNAPSHOTS].insert_one(snap)
    assert main(["memory", "status", *who]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["state"] == "pending"
    assert printed["snapshots"][0]["types"][0]["memory_type"] == "semantic"
    assert main(["memory", "status", *who, "--wait", "0.3"]) == 1
    assert f"{snap['_id']} (semantic)" in capsys.readouterr().err


async def test_the_status_is_an_id_probe_of_turns_and_one_aggregate(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    from pymongo import monitoring

    from mongomem.adapters.mongo import connect
    from mongomem.models import SessionKey
    from mongomem.operations.progress import Progress
    from mongomem.stm.turns import ShortTermMemory

    db = database(mongo, settings.mongodb)
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    session = SessionKey(project_id="p", user_id="u", session_id="s1")
    await stm.record_turn(session, "user", "hi", None)
    await stm.record_turn(session, "user", "the airport is Boston", None)
    snap = snapshot_doc("p", "s1")
    await db[SNAPSHOTS].insert_one(snap)
    await db[PROGRESS].insert_one(
        {
            "_id": stable_id("prog", snap["_id"], "semantic"),
            "project_id": "p",
            "user_id": "u",
            "session_id": "s1",
            "snapshot_id": snap["_id"],
            "memory_type": "semantic",
            "candidates": ["c1"],
            "reconciled": ["c1"],
        }
    )
    names: list[str] = []
    filters: list[Document] = []

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            names.append(event.command_name)
            if event.command_name == "find":
                filters.append(event.command.get("filter", {}))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    watched = connect(settings.mongodb, event_listeners=[Listener()])
    try:
        progress = Progress(database(watched, settings.mongodb))
        await watched.admin.command("ping")  # the connection handshake is not the read
        names.clear()
        status = await progress.session_status(session, TYPES)
        # the last turn by _id (never a sort over the session: a scan of every turn on
        # mongo-java-server, issue 28), then one aggregate on snapshots; no getMore
        assert names == ["find", "aggregate"]
        assert list(filters[0]) == ["_id"]
        with pytest.raises(NotFound, match="'s9'"):  # it answered "done"
            await progress.session_status(session.model_copy(update={"session_id": "s9"}), TYPES)
    finally:
        await watched.close()
    assert (status.last_turn_seq, status.last_snapshot_seq) == (2, 1)
    [one] = status.snapshots
    assert one.snapshot_id == snap["_id"]
    assert [(t.memory_type, t.state) for t in one.types] == [
        ("semantic", "done"),
        ("episodic", "pending"),
    ]
