"""Retention (SPEC J8) on the real servers: memories not reinforced within their type's
retention expire into an EXPIRE version (kept in history), bounded and idempotent sweeps,
a late reinforcement keeps a memory, a later extraction is a fresh ADD; the CLI."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient
from service_http import EMBEDDER

from mongomem.adapters.mongo import Document, connect, database
from mongomem.cli.main import main
from mongomem.ltm import MemoryStore
from mongomem.ltm.deletes import delete_memory
from mongomem.ltm.retention import expire_unreinforced
from mongomem.ltm.testing import candidate
from mongomem.models import Action, MemoryScope, MemoryStatus, utcnow
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)


async def seeded(store: MemoryStore) -> None:
    """Two facts last confirmed 100 days ago, one confirmed again yesterday, an old episode."""
    now = utcnow()
    for position, (label, text) in enumerate(
        [("old-a", "A is 1."), ("old-b", "B is 2."), ("kept", "K is 3.")]
    ):
        await store.reconcile(
            candidate(
                "semantic",
                project_id="travel",
                user_id="alice",
                snapshot="snap-old",
                position=position,
                at=now - 100 * DAY,
                label=label,
                text=text,
            )
        )
    await store.reconcile(
        candidate(
            "semantic",
            project_id="travel",
            user_id="alice",
            snapshot="snap-new",
            at=now - DAY,
            label="kept",
            text="K is 3.",
        )
    )
    await store.reconcile(
        candidate(
            "episodic",
            project_id="travel",
            user_id="alice",
            snapshot="snap-old",
            position=9,
            at=now - 100 * DAY,
            title="Old trip",
            content="A trip long ago.",
        )
    )


async def test_unreinforced_memories_expire_into_history_bounded_and_once(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    store = MemoryStore(database(mongo, settings.mongodb))
    await store.setup(probe=False)
    await seeded(store)
    rules = {"semantic": 30.0}  # episodic has none: it never expires

    first = await expire_unreinforced(store, rules, limit=1)
    assert (first.expired, first.more) == (1, True)
    second = await expire_unreinforced(store, rules, limit=10)
    assert (second.expired, second.by_type, second.more) == (1, {"semantic": 1}, False)
    again = await expire_unreinforced(store, rules, limit=10)
    assert (again.expired, again.more) == (0, False)  # idempotent

    async with AsyncMemory(project_id="travel", settings=settings, embedder=EMBEDDER) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="alice"))
        assert await chat.get_semantic("old-a") is None
        assert await chat.get_semantic("old-b") is None
        kept = await chat.get_semantic("kept")
        assert kept is not None  # reinforced yesterday
        assert await chat.get_memory((await chat.list_episodes())[0].memory_id) is not None
        page = await chat.browse_memories("semantic", status="expired")
        assert sorted(item.key for item in page.items) == ["old-a", "old-b"]
        gone = page.items[0]
        history = await chat.history(gone.memory_id)
        assert [(v.status, v.action) for v in history] == [
            (MemoryStatus.SUPERSEDED, Action.ADD),
            (MemoryStatus.EXPIRED, Action.EXPIRE),
        ]
        assert history[-1].actor == "retention"
        assert "not reinforced for 30 days" in (history[-1].reason or "")
        # the key extracted again later is a fresh memory, not the expired one back
        fresh = await chat.save_semantic(gone.key, "A is 1 again.")
        assert fresh.action is Action.ADD
        assert fresh.memory_id != gone.memory_id


async def test_a_memory_reinforced_after_it_was_chosen_is_kept(
    settings: Settings, mongo: AsyncMongoClient[Document]
) -> None:
    store = MemoryStore(database(mongo, settings.mongodb))
    await store.setup(probe=False)
    await seeded(store)
    scope = MemoryScope(project_id="travel", user_id="alice")
    old = await store.get(scope, "semantic", "old-a")
    assert old is not None
    kept = await delete_memory(
        store,
        old.memory_id,
        [scope],
        actor="retention",
        reason="x",
        now=utcnow(),
        expire=True,
        still=lambda latest: False,
    )
    assert kept is None
    assert await store.get(scope, "semantic", "old-a") is not None  # nothing was written


def test_the_cli_runs_one_sweep_from_the_project_config(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def seed() -> None:
        client = connect(settings.mongodb)
        store = MemoryStore(database(client, settings.mongodb))
        await store.setup(probe=False)
        await seeded(store)
        await client.close()

    asyncio.run(seed())
    config = tmp_path / "project-config.yaml"
    config.write_text("memory:\n  retention:\n    episodic: {expire_after_days: 7}\n")
    monkeypatch.setenv("MONGOMEM_MONGODB_URI", settings.mongodb.uri or "")
    monkeypatch.setenv("MONGOMEM_MONGODB_DATABASE", settings.mongodb.database)
    monkeypatch.setenv("MONGOMEM_PROJECT_CONFIG", str(config))
    assert main(["expire", "--limit", "5"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "expired": 1,
        "by_type": {"episodic": 1},
        "more": False,
    }
    config.write_text("memory:\n  retention:\n    episodes: {expire_after_days: 7}\n")
    assert main(["expire"]) == 1
    assert "retention names unknown memory types ['episodes']" in capsys.readouterr().err

    async def drop() -> None:
        client = connect(settings.mongodb)
        await client.drop_database(settings.mongodb.database)
        await client.close()

    asyncio.run(drop())


async def test_the_retention_stage_sweeps_for_good_and_reads_the_rules_each_time(
    settings: Settings,
    mongo: AsyncMongoClient[Document],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """`mongomem run retention` (started by `mongomem up`): a process that sweeps every
    MONGOMEM_RECONCILE_RETENTION_SWEEP_S, picks up a retention configured after it
    started, and stops on SIGTERM."""
    store = MemoryStore(database(mongo, settings.mongodb))
    await store.setup(probe=False)
    await seeded(store)
    config = tmp_path / "project-config.yaml"
    config.write_text("memory: {}\n")  # no retention yet: sweeps expire nothing
    env = subprocess_env | {
        "MONGOMEM_PROJECT_CONFIG": str(config),
        "MONGOMEM_RECONCILE_RETENTION_SWEEP_S": "0.2",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mongomem.cli", "run", "retention", env=env
    )
    scope = MemoryScope(project_id="travel", user_id="alice")

    async def current(key: str) -> bool:
        return await store.get(scope, "semantic", key) is not None

    try:
        await asyncio.sleep(1.5)  # several sweeps with no rule
        assert process.returncode is None
        assert await current("old-a")
        assert await current("old-b")
        config.write_text("memory:\n  retention:\n    semantic: {expire_after_days: 30}\n")
        for _ in range(300):
            if not await current("old-a") and not await current("old-b"):
                break
            await asyncio.sleep(0.1)
        assert not await current("old-a")
        assert not await current("old-b")
        assert await current("kept")  # reinforced yesterday
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
