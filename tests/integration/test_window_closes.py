"""Windows close where the turns stream says, live and in a replay (issue 14 item 2, 13 item 6).

Idle closes follow the source's progress, not a clock of their own: the
watcher runs as a real process and is SIGKILLed while turns keep being
written; windowing runs in this process. The snapshots must be those of an
uninterrupted run (what the turns' own times say), and a replay of the turns
topic in a new consumer group must produce the identical ones.

``end_session`` closes a window at once, as an event of the same stream: the
SDK writes it, the watcher carries it, windowing closes on it — and a replay
closes the identical snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import SNAPSHOTS, TURNS, Document
from mongomem.models import SessionKey, Snapshot, Turn
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings, WindowingSettings
from mongomem.stages.watcher import run_watcher
from mongomem.stages.windowing import WindowingWorker
from mongomem.stages.windowing.logic import Window, WindowPolicy, snapshot_turn
from mongomem.stm.turns import ShortTermMemory, session_key, turn_from_document

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def with_windows(settings: Settings, **values: Any) -> Settings:
    return settings.model_copy(update={"windowing": WindowingSettings(**values)})


class Watcher:
    """``mongomem run watcher`` as a real process that can be SIGKILLed and started again."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mongomem.cli", "run", "watcher"],
                cwd=ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    async def kill(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, self.log.read_text()[-2000:]
        self.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.proc.wait, 10)
        self.proc = None

    async def stop(self) -> int | None:
        """SIGTERM, and the exit status (``None``: it was not running)."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(self.proc.wait, 20)
        self.proc = None
        return code


@contextlib.asynccontextmanager
async def windowing(settings: Settings, suffix: str = "") -> AsyncIterator[list[Snapshot]]:
    """A windowing worker in this process; yields the snapshots it closes, in order."""
    closed: list[Snapshot] = []
    worker = WindowingWorker(settings, group_suffix=suffix, on_snapshot=closed.append)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(60):
            while not worker.started.is_set():
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield closed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(check: Any, within: float) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - a condition on another task's list
            await asyncio.sleep(0.1)


def spans(snapshots: list[Snapshot]) -> list[tuple[str, int, int, str]]:
    return sorted((s.session_id, s.first_seq, s.last_seq, s.reason) for s in snapshots)


async def uninterrupted(
    mongo: AsyncMongoClient[Document], settings: Settings, session: SessionKey
) -> list[tuple[str, int, int, str]]:
    """What an uninterrupted run closes: the pure window logic over the stored turns."""
    docs = mongo[settings.mongodb.database][TURNS].find(
        {"session_id": session.session_id}, {"snapshot_id": 0}
    )
    turns: list[Turn] = sorted([turn_from_document(d) async for d in docs], key=lambda t: t.seq)
    policy = WindowPolicy.of(settings.windowing.max_messages, settings.windowing.idle_timeout_s)
    window = Window(session)
    for turn in turns:
        window.on_turn(snapshot_turn(turn), policy)
    window.on_watermark(turns[-1].created_at + timedelta(days=1), policy)
    return spans(window.snapshots)


async def write(stm: ShortTermMemory, session: SessionKey, seqs: range, gap_s: float) -> None:
    for seq in seqs:
        turn = await stm.record_turn(session, "user" if seq % 2 else "assistant", f"turn {seq}")
        assert turn.seq == seq
        await asyncio.sleep(gap_s)


async def test_a_watcher_outage_does_not_split_a_window(
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """The reproduction: turns 1 s apart, idle timeout 3 s, the watcher killed for 5 s."""
    settings = with_windows(settings, max_messages=50, idle_timeout_s=3.0)
    stm = ShortTermMemory(mongo[settings.mongodb.database], settings.stm)
    await stm.ensure_indexes()
    session = session_key("proj", "alice", "outage")
    watcher = Watcher(subprocess_env, tmp_path / "watcher.log")
    try:
        async with windowing(settings) as live:
            watcher.start()
            await write(stm, session, range(1, 5), 1.0)
            await watcher.kill()
            await write(stm, session, range(5, 10), 1.0)  # 5 s without a watcher
            watcher.start()
            await write(stm, session, range(10, 15), 1.0)
            await until(lambda: any(s.last_seq == 14 for s in live), within=60)
        assert spans(live) == [("outage", 1, 14, "idle")]
        assert spans(live) == await uninterrupted(mongo, settings, session)
        async with windowing(settings, suffix="replay") as replay:
            await until(lambda: len(replay) >= len(live), within=60)
        assert [s.model_dump() for s in replay] == [s.model_dump() for s in live]
    finally:
        await watcher.stop()


async def test_a_watcher_down_for_three_idle_timeouts_closes_what_an_uninterrupted_run_does(
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Count closes and a real pause during the outage: all where the turns' times put them."""
    idle = 2.0
    settings = with_windows(settings, max_messages=4, idle_timeout_s=idle)
    stm = ShortTermMemory(mongo[settings.mongodb.database], settings.stm)
    await stm.ensure_indexes()
    session = session_key("proj", "bob", "long-outage")
    watcher = Watcher(subprocess_env, tmp_path / "watcher.log")
    loop = asyncio.get_running_loop()
    try:
        async with windowing(settings) as live:
            watcher.start()
            await write(stm, session, range(1, 4), 0.5)
            await watcher.kill()
            down_at = loop.time()
            await write(stm, session, range(4, 10), 0.5)
            await asyncio.sleep(idle + 0.5)  # the session really pauses, watcher still down
            await write(stm, session, range(10, 14), 0.5)
            assert loop.time() - down_at >= 3 * idle
            watcher.start()
            await write(stm, session, range(14, 17), 0.5)
            await until(lambda: any(s.last_seq == 16 for s in live), within=60)
        expected = await uninterrupted(mongo, settings, session)
        assert ("long-outage", 9, "idle") in {(s, last, why) for s, _, last, why in expected}
        assert spans(live) == expected
        async with windowing(settings, suffix="replay") as replay:
            await until(lambda: len(replay) >= len(live), within=60)
        assert [s.model_dump() for s in replay] == [s.model_dump() for s in live]
    finally:
        await watcher.stop()


async def test_end_session_closes_the_window_at_once_and_a_replay_closes_the_same(
    mongo: AsyncMongoClient[Document], settings: Settings
) -> None:
    """``end_session`` closes the window at once; a replay closes the same one (SPEC J5)."""
    settings = with_windows(settings, max_messages=50, idle_timeout_s=600)
    stop = asyncio.Event()
    watching = asyncio.create_task(run_watcher(settings, stop))
    embedder = HashingEmbedder(64)
    try:
        async with (
            AsyncMemory(project_id="proj", settings=settings, embedder=embedder) as memory,
            windowing(settings) as live,
        ):
            chat = memory.bind(MemoryRequestContext(user_id="carol", session_id="ending"))
            for text in ("Book the 9am flight", "Booked, seat 12A.", "Thanks"):
                await chat.record_turn("user", text)
            ended = await chat.end_session()
            # Far sooner than the idle timeout (600 s) could close it.
            await until(lambda: len(live) == 1, within=60)
            await chat.record_turn("user", "One more thing: a hotel.")
            await chat.end_session()
            await until(lambda: len(live) == 2, within=60)
            assert [t.content for t in await chat.recent_turns(10)] == [
                "Book the 9am flight",
                "Booked, seat 12A.",
                "Thanks",
                "One more thing: a hotel.",
            ]
        assert spans(live) == [("ending", 1, 3, "end"), ("ending", 5, 5, "end")]
        assert [t.seq for t in live[0].turns] == [1, 2, 3], "the end is in no snapshot"
        assert live[0].closed_at == live[0].turns[-1].created_at <= ended.created_at
        async with windowing(settings, suffix="replay") as replay:
            await until(lambda: len(replay) >= len(live), within=60)
        assert [s.model_dump() for s in replay] == [s.model_dump() for s in live]
        stored = mongo[settings.mongodb.database][SNAPSHOTS].find({}, {"_id": 1})
        assert {d["_id"] async for d in stored} == {s.snapshot_id for s in live}
    finally:
        stop.set()
        await asyncio.wait_for(watching, 30)
