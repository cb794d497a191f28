"""Exporting and importing a user's memory (SPEC J4) on the real servers: lossless round
trips (same scope into a fresh database; another project and user), idempotence, all or
nothing on a bad line, re-embedding, the erasure register, HTTP, the CLI, the sync SDK."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from service_http import EMBEDDER, start
from test_service import KEY_A, with_keys

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import DECISIONS, MEMORIES, Document, connect
from mongomem.cli.main import main
from mongomem.errors import Erased, InputError
from mongomem.ltm.export_format import (
    MemoryGroup,
    canonical,
    moved_id,
    parse_header,
    parse_line,
    relocate_decision,
    relocate_group,
    rename_decision,
)
from mongomem.models import MemoryScope
from mongomem.sdk import AsyncMemory, Memory, MemoryRequestContext
from mongomem.settings import EmbeddingSettings, MongoSettings, Settings

pytestmark = pytest.mark.integration


def other_db(settings: Settings, suffix: str) -> Settings:
    """The same servers, another (fresh) database."""
    mongodb = MongoSettings(uri=settings.mongodb.uri, database=settings.mongodb.database + suffix)
    return settings.model_copy(update={"mongodb": mongodb})


async def fill(memory: AsyncMemory, user: str = "alice") -> None:
    """Adds, an update, reinforcements, a deletion, an episode, a procedure, a project term."""
    chat = memory.bind(MemoryRequestContext(user_id=user, session_id="s1"))
    for i in range(6):
        await chat.save_semantic(f"fact-{i}", f"Fact number {i} is {i * 7}.")
    await chat.save_semantic("fact-0", "Fact number 0 is now 1000.")  # UPDATE: v2
    await chat.save_semantic("fact-1", "Fact number 1 is 7.")  # REINFORCE: count 2
    await chat.save_semantic("fact-1", "Fact number 1 is 7.")  # count 3
    assert await chat.delete_semantic("fact-2", reason="wrong") is not None
    await chat.save_episode("Lisbon trip", "Planned a trip to Lisbon in May.")
    await chat.save_procedure("book a flight", "How to book", "Search, compare, pay.")
    await chat.save_taxonomic("airline", "red-eye", "An overnight flight.")  # the project's


async def export_text(memory: AsyncMemory, user: str) -> str:
    out = io.StringIO()
    await memory.export_user(user, out)
    return out.getvalue()


def body_lines(text: str) -> list[dict[str, Any]]:
    """Every line but the header, as plain JSON."""
    return [canonical(line) for line in text.splitlines()[1:]]


def in_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in export order (moved ids sort differently from the source's)."""
    rank = {"version": 0, "decision": 1, "end": 2}

    def key(row: dict[str, Any]) -> tuple[int, str, int]:
        doc = row.get("doc", {})
        if row["kind"] == "version":
            return rank["version"], doc["memory_id"], doc["version"]
        return rank[row["kind"]], str(doc.get("_id", "")), 0

    return sorted(rows, key=key)


async def count(client: AsyncMongoClient[Document], db: str, project: str, user: str) -> int:
    where = {"scope.project_id": project, "scope.user_id": user}
    memories = await client[db][MEMORIES].count_documents(where)
    return memories + await client[db][DECISIONS].count_documents(where)


async def test_a_round_trip_into_a_fresh_database_exports_the_same_lines(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    fresh = other_db(settings, "-b")
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as source,
        AsyncMemory(project_id="travel", settings=fresh, embedder=EMBEDDER) as target,
    ):
        await fill(source)
        first = await export_text(source, "alice")
        lines = first.splitlines()
        header = canonical(lines[0])
        assert (header["project_id"], header["user_id"]) == ("travel", "alice")
        assert header["embedder"] == {"name": EMBEDDER.name, "dimensions": 64}
        end = canonical(lines[-1])
        versions = [canonical(x) for x in lines if canonical(x)["kind"] == "version"]
        # 6 facts + v2 of fact-0 + the DELETE version of fact-2 + episode + procedure
        assert end == {"kind": "end", "versions": 10, "decisions": len(lines) - 12}
        assert len(versions) == 10
        assert not any(v["doc"]["memory_type"] == "taxonomic" for v in versions)
        counts = {v["doc"]["key"]: v["reinforcement_count"] for v in versions}
        assert counts["fact-1"] == 3
        assert {v["doc"]["status"] for v in versions} == {"current", "superseded", "deleted"}

        done = await target.import_user(io.StringIO(first), user_id="alice")
        assert (done.memories, done.versions, done.skipped, done.re_embedded) == (8, 10, 0, False)
        assert done.decisions == end["decisions"]
        second = await export_text(target, "alice")
        # every memory and version id stays; decision-log ids are re-derived for the target
        # (an import never keeps an id another tenant could hold: see export_format's doc)
        alice = MemoryScope(project_id="travel", user_id="alice")
        assert body_lines(second) == in_order(_decisions_moved(first, alice))

        chat = target.bind(MemoryRequestContext(user_id="alice"))
        fact = await chat.get_semantic("fact-0")
        assert fact is not None
        assert fact.text == "Fact number 0 is now 1000."
        assert await chat.get_semantic("fact-2") is None  # still deleted
        [hit, *_] = await chat.search_semantic("Fact number 3")
        assert hit.memory.key == "fact-3"
        # a later save of the deleted key is a fresh memory, not the deleted one again
        again = await chat.save_semantic("fact-2", "Fact number 2 is 14.")
        deleted_id = next(v["doc"]["memory_id"] for v in versions if v["doc"]["key"] == "fact-2")
        assert again.action.value == "ADD"
        assert again.memory_id != deleted_id
    client = connect(fresh.mongodb)
    await client.drop_database(fresh.mongodb.database)
    await client.close()


async def test_into_another_project_and_user_ids_move_history_stays_and_twice_is_once(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as source,
        AsyncMemory(project_id="other", settings=settings, embedder=EMBEDDER) as target,
    ):
        await fill(source)
        first = await export_text(source, "alice")
        done = await target.import_user(first.splitlines(), user_id="bob")
        assert (done.source_project_id, done.source_user_id) == ("travel", "alice")
        second = await export_text(target, "bob")

        # what must differ: the scope, and the ids derived from it (moved_id); the rest is equal
        src, dst = (
            MemoryScope(project_id="travel", user_id="alice"),
            MemoryScope(project_id="other", user_id="bob"),
        )
        expected = _relocated(first, src, dst)
        assert body_lines(second) == in_order(expected)
        chat = target.bind(MemoryRequestContext(user_id="bob"))
        history = await chat.history((await chat.get_semantic("fact-0")).memory_id)  # type: ignore[union-attr]
        assert [v.text for v in history] == ["Fact number 0 is 0.", "Fact number 0 is now 1000."]
        # the source is untouched; the target's own next UPDATE follows the moved ids
        again = await chat.save_semantic("fact-0", "Fact number 0 is now 2000.")
        assert (again.action.value, again.version) == ("UPDATE", 3)

        before = await count(mongo, settings.mongodb.database, "other", "bob")
        repeat = await target.import_user(first.splitlines(), user_id="bob")
        assert (repeat.memories, repeat.versions, repeat.decisions) == (0, 0, 0)
        assert repeat.skipped == done.memories
        assert await count(mongo, settings.mongodb.database, "other", "bob") == before


def _relocated(text: str, source: MemoryScope, target: MemoryScope) -> list[dict[str, Any]]:
    """The body of ``text`` as it must read once imported into ``target``."""
    out: list[dict[str, Any]] = []
    group: MemoryGroup | None = None
    rows: list[dict[str, Any]] = []

    def close() -> None:
        if group is not None:
            for moved, row in zip(relocate_group(group, source, target), rows, strict=True):
                out.append(canonical(_dump({**row, "doc": moved})))

    for number, line in enumerate(text.splitlines()[1:], start=2):
        kind, obj = parse_line(line, number)
        if kind == "version":
            if group is None or group.memory_id != obj["doc"]["memory_id"]:
                close()
                group, rows = MemoryGroup(obj["doc"]["memory_id"], number), []
            group.docs.append(obj["doc"])
            rows.append(obj)
            continue
        close()
        group = None
        if kind == "decision":
            obj = {**obj, "doc": relocate_decision(obj["doc"], source, target)}
        out.append(canonical(_dump(obj)))
    return out


def _decisions_moved(text: str, scope: MemoryScope) -> list[dict[str, Any]]:
    """The body of ``text`` as it must read once imported into a fresh database's ``scope``
    (its own): the same lines, each decision-log entry under ``moved_id(scope, id)``."""
    out = []
    for number, line in enumerate(text.splitlines()[1:], start=2):
        kind, obj = parse_line(line, number)
        if kind == "decision":
            new_id = moved_id(scope, obj["doc"]["_id"])
            obj = {**obj, "doc": rename_decision(obj["doc"], new_id, lambda m: m)}
        out.append(canonical(_dump(obj)))
    return out


def _dump(obj: dict[str, Any]) -> str:
    from mongomem.ltm.export_format import dump_line

    return dump_line(obj)


async def test_a_bad_line_names_its_number_and_stores_nothing(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    db = settings.mongodb.database
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        await fill(memory)
        lines = (await export_text(memory, "alice")).splitlines(keepends=True)
        last_decision = len(lines) - 1  # 1-based number of the last decision line
        broken = [*lines[:-2], '{"kind": "decision", "doc": []}\n', lines[-1]]
        with pytest.raises(InputError, match=f"line {last_decision}: a decision line"):
            await memory.import_user(broken, user_id="carol")  # every version written by then
        assert await count(mongo, db, "travel", "carol") == 0
        assert await mongo[db][MEMORIES].count_documents({"import_id": {"$exists": True}}) == 0

        with pytest.raises(InputError, match="without its end line"):
            await memory.import_user(lines[:-1], user_id="carol")  # cut short
        with pytest.raises(InputError, match="line 1: the first line must be the export's header"):
            await memory.import_user(lines[1:], user_id="carol")
        bad_status = lines[3].replace('"status": "', '"status": "x')
        with pytest.raises(InputError, match="line 4: status"):
            await memory.import_user([*lines[:3], bad_status, *lines[4:]], user_id="carol")
        with pytest.raises(InputError, match="line 2: not a JSON object"):
            await memory.import_user([lines[0], "{oops\n", *lines[1:]], user_id="carol")
        assert await count(mongo, db, "travel", "carol") == 0

        # a key the target already holds as a current memory of its own is refused, whole
        await memory.bind(MemoryRequestContext(user_id="dave")).save_semantic(
            "fact-3", "Dave's own fact three."
        )
        with pytest.raises(InputError, match="already has a current semantic memory with key"):
            await memory.import_user(lines, user_id="dave")
        assert await count(mongo, db, "travel", "dave") == 2  # the save and its decision


async def test_another_embedder_re_embeds_and_an_erased_user_is_refused(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    small = HashingEmbedder(32)
    async with (
        AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as source,
        AsyncMemory(project_id="travel", settings=settings, embedder=small) as target,
    ):
        await fill(source)
        lines = (await export_text(source, "alice")).splitlines()
        done = await target.import_user(lines, user_id="erin")
        assert done.re_embedded
        chat = target.bind(MemoryRequestContext(user_id="erin"))
        [hit, *_] = await chat.search_semantic("Fact number 4")
        assert hit.memory.key == "fact-4"
        header = canonical((await export_text(target, "erin")).splitlines()[0])
        assert header["embedder"]["dimensions"] == 32

        await target.erase_user("erin", confirm=True)
        with pytest.raises(Erased):
            await target.import_user(lines, user_id="erin")
        assert await count(mongo, settings.mongodb.database, "travel", "erin") == 0


async def test_over_http_the_export_streams_and_the_import_is_the_same(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    served = with_keys(settings)
    running, url = await start(served)
    try:
        async with (
            AsyncMemory(project_id="travel", settings=served, embedder=EMBEDDER) as direct,
            AsyncMemory(project_id="travel", api_key=KEY_A, base_url=url) as http,
        ):
            await fill(direct)
            direct_text = await export_text(direct, "alice")
            http_text = await export_text(http, "alice")
            assert body_lines(http_text) == body_lines(direct_text)
            done = await http.import_user(io.StringIO(http_text), user_id="frank")
            assert done.memories == 8
            assert body_lines(await export_text(direct, "frank")) == in_order(
                _relocated(
                    direct_text,
                    MemoryScope(project_id="travel", user_id="alice"),
                    MemoryScope(project_id="travel", user_id="frank"),
                )
            )
            with pytest.raises(InputError, match="line 2"):
                await http.import_user([http_text.splitlines()[0], "[]"], user_id="gina")
            assert await count(mongo, settings.mongodb.database, "travel", "gina") == 0
    finally:
        await running.stop()


def test_the_cli_and_the_sync_sdk(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def filled() -> None:
        async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as m:
            await fill(m)

    asyncio.run(filled())
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_EMBEDDING_PROVIDER", "stand-in")
    monkeypatch.setenv("MONGOMEM_EMBEDDING_DIMENSIONS", "64")
    out = tmp_path / "alice.jsonl"
    assert main(["export", "--project-id", "travel", "--user", "alice", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["import", str(out), "--project-id", "travel", "--user", "hal"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["memories"], printed["re_embedded"]) == (8, False)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(out.read_text().replace('"kind": "end"', '"kind": "fin"'))
    assert main(["import", str(broken), "--project-id", "travel", "--user", "ivy"]) == 1
    assert "unknown kind 'fin'" in capsys.readouterr().err

    embedding = EmbeddingSettings(provider="stand-in", dimensions=64)
    with Memory(
        project_id="travel", settings=settings.model_copy(update={"embedding": embedding})
    ) as sync:
        copy = tmp_path / "hal.jsonl"
        written = sync.export_user("hal", copy)
        assert written.versions == 10
        again = sync.import_user(copy, user_id="hal")
        assert (again.memories, again.skipped) == (0, 8)
    header = parse_header(canonical(out.read_text().splitlines()[0]), 1)
    assert header.user_id == "alice"

    async def drop() -> None:
        client = connect(settings.mongodb)
        await client.drop_database(settings.mongodb.database)
        await client.close()

    asyncio.run(drop())


async def test_an_import_a_crash_interrupted_is_rolled_back_or_completed_by_the_next(
    settings: Settings, mongo: AsyncMongoClient[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash while reading leaves hidden documents only (nothing visible), which the next
    import of the user rolls back; a crash during the commit is completed by the next."""
    from mongomem.ltm import export as export_module

    db = settings.mongodb.database
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        await fill(memory)
        text = await export_text(memory, "alice")
        lines = text.splitlines(keepends=True)

        async def died(*args: object) -> None:  # the process is gone: no rollback happens
            raise SystemExit("killed")

        monkeypatch.setattr(export_module, "_roll_back", died)
        with pytest.raises(SystemExit):  # killed while it was rolling back a bad line
            await memory.import_user([*lines[:-2], "[]\n"], user_id="kim")
        monkeypatch.undo()
        hidden = await mongo[db][MEMORIES].count_documents({"import_id": {"$exists": True}})
        assert hidden > 0  # written, under the hidden scope
        assert await count(mongo, db, "travel", "kim") == 0  # nothing visible to the user
        assert await memory.bind(MemoryRequestContext(user_id="kim")).get_semantic("fact-3") is None

        done = await memory.import_user(lines, user_id="kim")  # rolls the first back, then runs
        assert (done.memories, done.skipped) == (8, 0)
        assert await mongo[db][MEMORIES].count_documents({"import_id": {"$exists": True}}) == 0

        commit = export_module._commit

        async def half_commit(database_: Any, job: dict[str, Any]) -> None:
            await database_[export_module.IMPORTS].update_one(
                {"_id": job["_id"]}, {"$set": {"state": "committing"}}
            )
            move = {
                "$set": {"scope": {"project_id": "travel", "user_id": "lee"}},
                "$unset": {"import_id": ""},
            }
            await database_[MEMORIES].update_many({"import_id": job["_id"]}, move)
            raise SystemExit("killed between the two moves")

        monkeypatch.setattr(export_module, "_commit", half_commit)
        with pytest.raises(SystemExit):
            await memory.import_user(lines, user_id="lee")
        monkeypatch.setattr(export_module, "_commit", commit)
        again = await memory.import_user(lines, user_id="lee")  # finishes that commit first
        assert (again.memories, again.skipped) == (0, 8)
        alice, lee = (MemoryScope(project_id="travel", user_id=u) for u in ("alice", "lee"))
        assert body_lines(await export_text(memory, "lee")) == in_order(
            _relocated(text, alice, lee)
        )


async def test_a_second_import_of_the_same_user_rolls_the_first_back_and_it_says_so(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    from mongomem.errors import StorageError

    db = settings.mongodb.database
    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        await fill(memory)
        text = await export_text(memory, "alice")
        lines = text.splitlines(keepends=True)

        async def interrupted() -> Any:
            for number, line in enumerate(lines, start=1):
                if number == len(lines) - 1:  # the first import is half read: a second runs
                    assert (await memory.import_user(lines, user_id="max")).memories == 8
                yield line

        with pytest.raises(StorageError, match="another import of this user rolled this one"):
            await memory.import_user(interrupted(), user_id="max")
        assert await mongo[db][MEMORIES].count_documents({"import_id": {"$exists": True}}) == 0
        alice, max_ = (MemoryScope(project_id="travel", user_id=u) for u in ("alice", "max"))
        assert body_lines(await export_text(memory, "max")) == in_order(
            _relocated(text, alice, max_)
        )
