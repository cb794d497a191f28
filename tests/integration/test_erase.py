"""Erasing a user, a session or a project (SPEC J2) on the real servers: lineage,
the register every writer consults, confirmation, another project's key, an erasure
killed mid-way that completes when run again, an unknown user."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, call, start
from test_service import KEY_A, KEY_B, with_keys

from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, TURNS, Document, database
from mongomem.cli.main import main
from mongomem.erasure import erase as erasure
from mongomem.erasure.erase import Target, erase
from mongomem.erasure.register import ERASURES, NOT_ERASED_TTL_S, ErasureRegister
from mongomem.errors import Erased, InputError, ScopeError
from mongomem.models import Role, SessionKey
from mongomem.sdk import AsyncMemory, Memory, MemoryRequestContext
from mongomem.settings import Settings
from mongomem.stm.turns import ShortTermMemory

pytestmark = pytest.mark.integration

ALL = (TURNS, MEMORIES, DECISIONS, LEDGER)


def ctx(user: str, session: str = "s1") -> MemoryRequestContext:
    return MemoryRequestContext(user_id=user, session_id=session)


@pytest.fixture
async def memory(settings: Settings) -> AsyncIterator[AsyncMemory]:
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as m:
        yield m


async def fill(memory: AsyncMemory, user: str, session: str = "s1") -> None:
    chat = memory.bind(ctx(user, session))
    await chat.record_turn("user", f"I am {user} and I live in Porto.")
    await chat.record_turn("assistant", "Noted.")
    await chat.save_semantic("home", f"{user} lives in Porto.")
    await chat.save_episode(f"{user} trip", f"{user} planned a trip to Lisbon.")


async def user_docs(mongo: AsyncMongoClient[Document], settings: Settings, user: str) -> int:
    """Every document that names ``user`` in any collection the pipeline writes."""
    db = database(mongo, settings.mongodb)
    total = 0
    for name in await db.list_collection_names():
        if name == ERASURES:
            continue
        for doc in await db[name].find({}).to_list():
            if user in repr(doc):
                total += 1
    return total


async def snapshot_of(mongo: AsyncMongoClient[Document], settings: Settings) -> dict[str, Any]:
    db = database(mongo, settings.mongodb)
    out: dict[str, Any] = {}
    for name in ALL:
        out[name] = sorted(repr(sorted(d.items())) for d in await db[name].find({}).to_list())
    return out


async def test_erase_user_removes_everything_of_theirs_and_keeps_shared_terms_by_lineage(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    await fill(memory, "ana")
    await fill(memory, "ben")
    ana, ben = memory.bind(ctx("ana")), memory.bind(ctx("ben"))
    # a project-scoped term from both users (reinforced), and one from ana only
    await ana.save_taxonomic("aviation", "ETOPS", "Twin-engine overwater flight rules.")
    await ben.save_taxonomic("aviation", "ETOPS", "Twin-engine overwater flight rules.")
    only = await ana.save_taxonomic("aviation", "MEL", "The minimum equipment list.")
    shared = await ben.get_taxonomic_term("aviation", "ETOPS")
    assert shared is not None
    assert shared.reinforcement_count == 2
    before_ben = await user_docs(mongo, settings, "ben")
    hits = await ben.search_taxonomic("minimum equipment list", limit=10)
    assert "MEL" in [h.memory.term for h in hits]  # the in-memory index holds it now

    result = await memory.erase_user("ana", confirm=True)

    assert result.erased
    assert result.removed[TURNS] == 2
    assert result.memories_pruned == 1  # ETOPS lost ana's evidence, kept ben's
    assert await user_docs(mongo, settings, "ana") == 0
    assert await user_docs(mongo, settings, "ben") == before_ben - 0  # unchanged (ETOPS below)
    term = await ben.get_taxonomic_term("aviation", "ETOPS")
    assert term is not None
    assert term.reinforcement_count == 1
    [version] = await ben.history(term.memory_id)
    assert [e.user_id for e in version.evidence] == ["ben"]
    assert await ben.get_taxonomic_term("aviation", "MEL") is None  # only ana's evidence
    assert await ben.get_memory(only.memory_id) is None
    # searches (served by the in-memory index, reloaded through the scope log) agree
    hits = await ben.search_taxonomic("minimum equipment list", limit=10)
    assert [h.memory.term for h in hits if h.memory.term == "MEL"] == []
    assert [h.memory.label for h in await ben.search_semantic("Porto")] == ["home"]
    assert await ben.get_semantic("home") is not None
    # the id is retired: nothing is written for ana again
    with pytest.raises(Erased):
        await ana.record_turn("user", "I am back.")
    with pytest.raises(Erased):
        await ana.save_semantic("home", "ana lives in Faro.")
    with pytest.raises(Erased):
        await ana.end_session()
    assert await user_docs(mongo, settings, "ana") == 0
    # again: nothing left, the erasure answers as done
    again = await memory.erase_user("ana", confirm=True)
    assert again.erased
    assert sum(again.removed.values()) == 0


async def test_erase_session_keeps_the_users_other_sessions(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    await fill(memory, "ana", "s1")
    chat2 = memory.bind(ctx("ana", "s2"))
    await chat2.record_turn("user", "Second session.")
    await chat2.save_procedure("pack", "How to pack", "Roll the clothes.")
    result = await memory.erase_session("ana", "s2", confirm=True)
    assert result.erased
    assert result.kind == "session"
    db = database(mongo, settings.mongodb)
    assert await db[TURNS].count_documents({"user_id": "ana", "session_id": "s2"}) == 0
    assert await db[TURNS].count_documents({"user_id": "ana", "session_id": "s1"}) == 2
    assert await chat2.get_procedure("pack") is None  # its evidence was only session s2
    assert await memory.bind(ctx("ana", "s1")).get_semantic("home") is not None
    with pytest.raises(Erased):
        await chat2.record_turn("user", "more")
    await memory.bind(ctx("ana", "s3")).record_turn("user", "a new session is fine")


async def test_erasing_needs_confirmation_and_an_unknown_user_is_a_no_op(
    memory: AsyncMemory,
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await fill(memory, "ana")
    before = await snapshot_of(mongo, settings)
    for attempt in (
        memory.erase_user("ana"),
        memory.erase_session("ana", "s1"),
        memory.erase_project(),
        memory.erase_user("ana", confirm="yes"),  # type: ignore[arg-type]
    ):
        with pytest.raises(InputError) as refused:
            await attempt
        assert refused.value.field == "confirm"
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    assert main(["erase", "user", "--project-id", "travel", "--user-id", "ana"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert await snapshot_of(mongo, settings) == before
    assert not await ErasureRegister(database(mongo, settings.mongodb)).is_erased("travel", "ana")

    nobody = await memory.erase_user("nobody", confirm=True)
    assert not nobody.erased
    assert "nothing to erase" in nobody.message
    assert await snapshot_of(mongo, settings) == before
    assert not await ErasureRegister(database(mongo, settings.mongodb)).is_erased(
        "travel", "nobody"
    )


async def test_erase_over_http_and_a_key_of_another_project_changes_nothing(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    runner, url = await start(with_keys(settings))
    try:
        async with (
            AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as remote,
            AsyncMemory(project_id="travel", api_key=KEY_B, base_url=url) as intruder,
        ):
            await fill(remote, "ana")
            before = await snapshot_of(mongo, settings)
            with pytest.raises(ScopeError):
                await intruder.erase_user("ana", confirm=True)
            body = {"project_id": "travel", "user_id": "ana", "confirm": True}
            assert (await call(url, "erase_user", body, KEY_B)).status_code == 403
            refused = await call(url, "erase_user", {"user_id": "ana"}, KEY_A)
            assert refused.status_code == 422  # no confirm
            with pytest.raises(ScopeError):
                await remote.erase_project(confirm=True)  # not over HTTP
            assert await snapshot_of(mongo, settings) == before

            done = await remote.erase_session("ana", "s1", confirm=True)
            assert done.erased
            assert done.removed[TURNS] == 2
            gone = await remote.erase_user("ana", confirm=True)
            assert gone.erased
            assert await user_docs(mongo, settings, "ana") == 0
            with pytest.raises(Erased):  # the error travels as itself (403)
                await remote.bind(ctx("ana", "s9")).record_turn("user", "back again")
            body = {"user_id": "ana", "session_id": "s9", "role": "user", "content": "hi"}
            assert (await call(url, "record_turn", body, KEY_A)).status_code == 403
            assert await user_docs(mongo, settings, "ana") == 0
    finally:
        await runner.stop()


async def test_an_erasure_that_fails_between_steps_completes_when_run_again(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    await fill(memory, "ana")
    await fill(memory, "ben")
    db = database(mongo, settings.mongodb)

    async def crash(step: str) -> None:
        if step == "memories":
            raise RuntimeError("injected crash")

    with pytest.raises(RuntimeError):
        await erase(db, Target(project_id="travel", user_id="ana"), actor="t", on_step=crash)
    job = await db[ERASURES].find_one({})
    assert job is not None
    assert job["state"] == "running"
    assert await db[TURNS].count_documents({"user_id": "ana"}) == 2  # not reached yet
    # but already refused: the register is written first (by a writer that has not relied
    # on a "not erased" answer in the last NOT_ERASED_TTL_S; `memory` just wrote ana's turns)
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as fresh:
        with pytest.raises(Erased):
            await fresh.bind(ctx("ana")).record_turn("user", "hello")
    done = await erase(db, Target(project_id="travel", user_id="ana"), actor="t")
    assert done.erased
    assert await user_docs(mongo, settings, "ana") == 0
    job = await db[ERASURES].find_one({})
    assert job is not None
    assert job["state"] == "done"


def test_a_cli_erasure_killed_mid_way_is_completed_by_resume(
    settings: Settings, subprocess_env: dict[str, str]
) -> None:
    with Memory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        for user in ("ana", "ben"):
            chat = memory.bind(ctx(user))
            chat.record_turn("user", f"I am {user}.")
            chat.save_semantic("home", f"{user} lives in Porto.")
        who = ["--project-id", "travel", "--user-id", "ana", "--yes"]
        cmd = [
            sys.executable,
            "-m",
            "mongomem.cli",
            "erase",
            "user",
            *who,
            "--no-changelog",
            "--pause-after",
            "memories",
        ]
        proc = subprocess.Popen(cmd, env=subprocess_env, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip() == "step memories done":
                    break
            os.kill(proc.pid, signal.SIGKILL)  # mid-erase: memories gone, turns not yet
        finally:
            proc.wait(timeout=60)
            if proc.stdout is not None:
                proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL

        async def state() -> tuple[str, int]:
            client: AsyncMongoClient[Document] = AsyncMongoClient(settings.mongodb.uri)
            try:
                db = database(client, settings.mongodb)
                job = await db[ERASURES].find_one({})
                assert job is not None
                return job["state"], await db[TURNS].count_documents({"user_id": "ana"})
            finally:
                await client.close()

        assert asyncio.run(state()) == ("running", 1)
        assert memory.bind(ctx("ana")).get_semantic("home") is None
        resumed = subprocess.run(
            [sys.executable, "-m", "mongomem.cli", "erase", "resume", "--no-changelog"],
            env=subprocess_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert resumed.returncode == 0, resumed.stderr
        assert "erased user 'ana'" in resumed.stdout
        assert asyncio.run(state()) == ("done", 0)
        assert memory.bind(ctx("ben")).get_semantic("home") is not None


async def test_erase_project_removes_every_user(
    memory: AsyncMemory, settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    await fill(memory, "ana")
    await fill(memory, "ben")
    async with AsyncMemory(project_id="other", settings=settings, embedder=EMBEDDER) as other:
        await fill(other, "cyd")
        result = await memory.erase_project(confirm=True)
        assert result.erased
        assert await user_docs(mongo, settings, "ana") == 0
        assert await user_docs(mongo, settings, "ben") == 0
        assert await other.bind(ctx("cyd")).get_semantic("home") is not None
        with pytest.raises(Erased):
            await memory.bind(ctx("dan")).record_turn("user", "hi")


async def test_a_turn_sent_on_a_remembered_answer_during_an_erasure_is_swept(
    memory: AsyncMemory,
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Short-term memory relies on a "not erased" answer for up to NOT_ERASED_TTL_S: a
    turn it writes on one after the first sweep is removed by the second."""
    db = database(mongo, settings.mongodb)
    stm = ShortTermMemory(db, settings.stm)
    key = SessionKey(project_id="travel", user_id="ana", session_id="s1")
    await fill(memory, "ana")
    await stm.record_turn(key, Role.USER, "the store now remembers: not erased")
    wait = erasure.relied_answers_expired
    sent: list[int] = []

    async def write_then_wait(registered: float) -> None:
        turn = await stm.record_turn(key, Role.USER, "sent on the remembered answer")
        sent.append(turn.seq)
        assert await db[TURNS].count_documents({"user_id": "ana"}) == 1  # after sweep one
        await wait(registered)

    monkeypatch.setattr(erasure, "relied_answers_expired", write_then_wait)
    assert (await memory.erase_user("ana", confirm=True)).erased
    assert sent == [4]
    assert await user_docs(mongo, settings, "ana") == 0


async def test_the_second_sweep_waits_out_every_remembered_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("mongomem.erasure.erase.asyncio.sleep", sleep)
    await erasure.relied_answers_expired(time.monotonic())
    [waited] = slept
    assert waited > NOT_ERASED_TTL_S  # every answer read before the register has expired
    await erasure.relied_answers_expired(time.monotonic() - 10 * NOT_ERASED_TTL_S)
    assert slept == [waited]  # a long first sweep: no wait at all


class GatedEmbedder:
    """The test embedder, held inside ``embed`` until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    @property
    def name(self) -> str:
        return EMBEDDER.name

    @property
    def dimensions(self) -> int:
        return EMBEDDER.dimensions

    async def embed(self, texts: Any) -> list[list[float]]:
        self.entered.set()
        await self.gate.wait()
        return await EMBEDDER.embed(texts)


async def test_a_save_whose_embedding_outlasts_an_erasure_is_refused(
    settings: Settings, mongo: AsyncMongoClient[Document], memory: AsyncMemory
) -> None:
    """The register is read beside the embedding call; a save whose embedding takes longer
    than the erasure's second sweep waits (an erasure ran meanwhile) asks again before it
    writes, and is refused: nothing of the user survives."""
    await fill(memory, "eve")
    slow = GatedEmbedder()
    async with AsyncMemory(project_id="travel", settings=settings, embedder=slow) as saver:
        chat = saver.bind(ctx("eve"))
        save = asyncio.ensure_future(chat.save_semantic("seat", "eve prefers the aisle."))
        await asyncio.wait_for(slow.entered.wait(), 30)
        assert (await memory.erase_user("eve", confirm=True)).erased  # waits > TTL itself
        slow.gate.set()
        with pytest.raises(Erased):
            await save
    assert await user_docs(mongo, settings, "eve") == 0
