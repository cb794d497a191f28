"""Two watcher shares (k = 0, 1 of N = 2) as real processes, windowing in this process.

Each share reads its sessions' turns (``$mod`` on the stored bucket, in the
change stream's ``$match`` on the real server) and stamps its watermarks with
its share; windowing applies them to that share's sessions only. Every turn
must end in exactly one snapshot, the snapshots must be those of an
uninterrupted one-watcher run (what the turns' own times say) — also when one
share's watcher is SIGKILLed mid-stream for longer than the idle timeout and
started again — and a replay in a new consumer group closes the identical ones.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from test_window_closes import Watcher, windowing

from mongomem.adapters.mongo import CHECKPOINTS, TURNS, Document
from mongomem.buckets import session_bucket
from mongomem.models import SessionKey, Snapshot, Turn
from mongomem.settings import Settings, WindowingSettings
from mongomem.stages.watcher_logic import read_pipeline, token_id
from mongomem.stages.windowing.logic import Window, WindowPolicy, snapshot_turn
from mongomem.stm.turns import ShortTermMemory, session_key, turn_from_document

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHARES = 2
IDLE_S = 1.5
MAX_MESSAGES = 4


class Share(Watcher):
    """``mongomem run watcher`` for share ``k`` of :data:`SHARES`, as a real process."""

    def __init__(self, env: dict[str, str], k: int, log: Path, shares: int = SHARES) -> None:
        super().__init__(
            {
                **env,
                "MONGOMEM_WATCHER_SHARDS": str(shares),
                "MONGOMEM_WATCHER_SHARD": str(k),
                "MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S": "0.3",
                "MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S": "0.3",
            },
            log,
        )
        self.k = k

    async def backfilled(self) -> None:
        """Until the first run has back-filled (it had no token) and follows the stream."""
        deadline = time.monotonic() + 60
        while not (self.log.exists() and "back-fill done" in self.log.read_text()):
            assert self.proc is not None
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the watcher never finished its back-fill"
            await asyncio.sleep(0.05)


def spans(snapshots: list[Snapshot]) -> list[tuple[str, str, int, int, str]]:
    return sorted((s.user_id, s.session_id, s.first_seq, s.last_seq, s.reason) for s in snapshots)


async def stored_turns(db: AsyncDatabase[Document]) -> list[Turn]:
    return [turn_from_document(d) async for d in db[TURNS].find({"event": {"$exists": False}})]


async def uninterrupted(db: AsyncDatabase[Document]) -> list[tuple[str, str, int, int, str]]:
    """What one uninterrupted watcher gives: the pure window logic over the stored turns."""
    by_session: dict[tuple[str, str, str], list[Turn]] = defaultdict(list)
    for turn in await stored_turns(db):
        by_session[(turn.project_id, turn.user_id, turn.session_id)].append(turn)
    policy = WindowPolicy.of(MAX_MESSAGES, IDLE_S)
    closed: list[Snapshot] = []
    for (project, user, session), turns in by_session.items():
        turns.sort(key=lambda t: t.seq)
        window = Window(SessionKey(project_id=project, user_id=user, session_id=session))
        for turn in turns:
            window.on_turn(snapshot_turn(turn), policy)
        window.on_watermark(turns[-1].created_at + timedelta(days=1), policy)
        closed.extend(window.snapshots)
    return spans(closed)


async def until(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def sessions() -> list[SessionKey]:
    keys = [session_key("proj", f"u{i % 3}", f"s{i}") for i in range(20)]
    shares = Counter(session_bucket(k.project_id, k.user_id, k.session_id) % SHARES for k in keys)
    assert set(shares) == set(range(SHARES)), shares  # both shares have sessions
    return keys


def exactly_once(snapshots: list[Snapshot], turn_ids: set[str]) -> None:
    held = Counter(t.turn_id for s in snapshots for t in s.turns)
    assert set(held) == turn_ids, f"{len(turn_ids - set(held))} turns in no snapshot"
    assert max(held.values()) == 1, [t for t, n in held.items() if n > 1][:5]


async def share_tokens(db: AsyncDatabase[Document], settings: Settings) -> list[object]:
    topic = settings.kafka.topic("turns")
    docs = [await db[CHECKPOINTS].find_one({"_id": token_id(topic, k, SHARES)}) for k in (0, 1)]
    return [None if d is None else d.get("updated_at") for d in docs]


@pytest.fixture
def window_settings(settings: Settings) -> Settings:
    windows = WindowingSettings(max_messages=MAX_MESSAGES, idle_timeout_s=IDLE_S)
    return settings.model_copy(update={"windowing": windows})


async def test_two_shares_put_every_turn_in_exactly_one_snapshot(
    mongo: AsyncMongoClient[Document],
    window_settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    settings = window_settings
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    watchers = [Share(subprocess_env, k, tmp_path / f"watcher{k}.log") for k in range(SHARES)]
    keys = sessions()
    try:
        async with windowing(settings) as live:
            for watcher in watchers:
                watcher.start()
            for watcher in watchers:
                await watcher.backfilled()
            for round_ in range(6):
                for key in keys:
                    await stm.record_turn(key, "user", f"{key.session_id} #{round_}")
                await asyncio.sleep(0.05)
            ids = {t.turn_id for t in await stored_turns(db)}
            assert len(ids) == 6 * len(keys)
            await until(
                lambda: sum(len(s.turns) for s in live) >= len(ids),
                within=90,
                what="not every turn reached a snapshot",
            )
            await asyncio.sleep(1.0)  # a duplicate snapshot would arrive now
        exactly_once(live, ids)
        assert spans(live) == await uninterrupted(db)
        assert all(t is not None for t in await share_tokens(db, settings))
        async with windowing(settings, suffix="replay") as replay:
            await until(lambda: len(replay) >= len(live), within=60, what="replay fell short")
        assert spans(replay) == spans(live)
    finally:
        codes = [await w.stop() for w in watchers]
    assert codes == [0, 0], [w.log.read_text()[-2000:] for w in watchers]


async def test_one_share_killed_mid_stream_loses_and_duplicates_nothing(
    mongo: AsyncMongoClient[Document],
    window_settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Share 1 is SIGKILLed after a checkpoint and stays down longer than the idle timeout
    plus the lateness while turns keep coming: share 0's watermarks must not close its
    windows, and the restarted share republishes, never skips."""
    settings = window_settings
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    watchers = [Share(subprocess_env, k, tmp_path / f"watcher{k}.log") for k in range(SHARES)]
    keys = sessions()
    writing = asyncio.Event()
    writing.set()
    rng = random.Random(14)

    async def writer(n: int) -> None:
        i = 0
        while writing.is_set():
            key = keys[(n * 5 + i) % len(keys)]
            await stm.record_turn(key, "user", f"w{n} #{i}")
            i += 1
            await asyncio.sleep(0.01)

    try:
        async with windowing(settings) as live:
            for watcher in watchers:
                watcher.start()
            for watcher in watchers:
                await watcher.backfilled()
            writers = [asyncio.create_task(writer(n)) for n in range(4)]
            try:
                before = (await share_tokens(db, settings))[1]
                deadline = time.monotonic() + 60
                while (await share_tokens(db, settings))[1] == before:
                    assert time.monotonic() < deadline, "share 1 never checkpointed"
                    await asyncio.sleep(0.05)
                await asyncio.sleep(rng.uniform(0.2, 0.8))
                await watchers[1].kill()
                await asyncio.sleep(IDLE_S + 2.0 + 2.0)  # idle timeout + lateness, and more
                watchers[1].start()
                await asyncio.sleep(2.0)
            finally:
                writing.clear()
                await asyncio.gather(*writers)
            ids = {t.turn_id for t in await stored_turns(db)}
            await until(
                lambda: sum(len(s.turns) for s in live) >= len(ids),
                within=90,
                what="not every turn reached a snapshot",
            )
            await asyncio.sleep(1.0)
        exactly_once(live, ids)
        assert spans(live) == await uninterrupted(db)
    finally:
        codes = [await w.stop() for w in watchers]
    assert codes == [0, 0], [w.log.read_text()[-2000:] for w in watchers]


async def test_the_server_evaluates_each_share_match_in_the_change_stream(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    """mongo-java-server (and MongoDB) apply ``$mod`` in a change stream's ``$match``."""
    collection = mongo[settings.mongodb.database]["share_probe"]
    await collection.insert_one({"_id": "warm"})
    seen: dict[int, list[str]] = {}
    for k in range(SHARES):
        async with await collection.watch(read_pipeline(k, SHARES), max_await_time_ms=200) as s:
            docs = [{"_id": f"b{b}", "bucket": b} for b in range(6)] + [{"_id": f"none{k}"}]
            await collection.insert_many([{**d, "_id": f"{d['_id']}-{k}"} for d in docs])
            got: list[str] = []
            deadline = time.monotonic() + 20
            while len(got) < (4 if k == 0 else 3) and time.monotonic() < deadline:
                change = await s.try_next()
                if change is not None:
                    got.append(change["fullDocument"]["_id"])
            assert await s.try_next() is None
            seen[k] = sorted(got)
    assert seen == {
        0: ["b0-0", "b2-0", "b4-0", "none0-0"],
        1: ["b1-1", "b3-1", "b5-1"],
    }


async def test_changing_the_number_of_shares_republishes_nothing_after_a_graceful_stop(
    mongo: AsyncMongoClient[Document],
    window_settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """One watcher, stopped with SIGTERM, then two shares: each has no token of its own,
    back-fills its share above the marks the single watcher stored, so republishes
    nothing, and then follows the stream; every turn is in exactly one snapshot."""
    settings = window_settings
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    keys = sessions()
    one = Share(subprocess_env, 0, tmp_path / "one.log", shares=1)
    watchers = [Share(subprocess_env, k, tmp_path / f"watcher{k}.log") for k in range(SHARES)]
    try:
        async with windowing(settings) as live:
            one.start()
            await one.backfilled()
            for round_ in range(3):
                for key in keys:
                    await stm.record_turn(key, "user", f"{key.session_id} #{round_}")
            await until(lambda: sum(len(s.turns) for s in live) >= 2 * len(keys), 60, "one")
            assert await one.stop() == 0, one.log.read_text()[-2000:]
            for watcher in watchers:
                watcher.start()
            for watcher in watchers:
                await watcher.backfilled()
                assert "back-fill done: published 0 turns" in watcher.log.read_text()
            for round_ in range(3, 6):
                for key in keys:
                    await stm.record_turn(key, "user", f"{key.session_id} #{round_}")
            ids = {t.turn_id for t in await stored_turns(db)}
            await until(lambda: sum(len(s.turns) for s in live) >= len(ids), 90, "not all")
            await asyncio.sleep(1.0)
        exactly_once(live, ids)
        assert spans(live) == await uninterrupted(db)
    finally:
        codes = [await w.stop() for w in watchers]
        await one.stop()
    assert codes == [0, 0], [w.log.read_text()[-2000:] for w in watchers]
