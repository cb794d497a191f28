"""The watcher as a real process, SIGKILLed again and again while turns keep arriving (I1)."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from mongomem.adapters.mongo import CHECKPOINTS, TURNS, Document
from mongomem.codec import decode, peek_kind
from mongomem.models import Turn
from mongomem.settings import Settings
from mongomem.stages.watcher import COMMITS_IN_FLIGHT
from mongomem.stages.watcher_logic import token_id
from mongomem.stm.turns import ShortTermMemory, session_key

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BATCH_MAX = 40
KILLS = 4


def start_watcher(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "mongomem.cli", "run", "watcher"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


async def checkpoint_time(db: AsyncDatabase[Document], settings: Settings) -> object:
    doc = await db[CHECKPOINTS].find_one({"_id": token_id(settings.kafka.topic("turns"))})
    return None if doc is None else doc.get("updated_at")


async def read_all(settings: Settings, want: set[str], timeout_s: float) -> list[tuple[int, Turn]]:
    """Every record of the turns topic, once all of ``want`` have been seen."""
    consumer = AIOKafkaConsumer(
        settings.kafka.topic("turns"),
        bootstrap_servers=settings.kafka.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    out: list[tuple[int, Turn]] = []
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                for record in records:
                    if peek_kind(record.value) == "watermark":
                        continue  # the watcher's, into every partition
                    turn = decode(record.value, Turn)
                    out.append((tp.partition, turn))
                    seen.add(turn.turn_id)
            if want <= seen and not batch:
                break
    finally:
        await consumer.stop()
    return out


async def test_sigkill_mid_stream_loses_no_turn(
    mongo: AsyncMongoClient[Document],
    settings: Settings,
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    env = {**subprocess_env, "MONGOMEM_STM_WATCHER_BATCH_MAX": str(BATCH_MAX)}
    db = mongo[settings.mongodb.database]
    stm = ShortTermMemory(db, settings.stm)
    await stm.ensure_indexes()
    sessions = [session_key("proj", f"u{i % 3}", f"s{i}") for i in range(10)]
    writing = asyncio.Event()
    writing.set()

    async def writer(n: int) -> None:
        i = 0
        while writing.is_set():
            await stm.record_turn(sessions[(n + i) % len(sessions)], "user", f"w{n} #{i}")
            i += 1
            await asyncio.sleep(0.004)

    writers = [asyncio.create_task(writer(n)) for n in range(4)]
    log = tmp_path / "watcher.log"
    rng = random.Random(7)
    try:
        for _ in range(KILLS):
            before = await checkpoint_time(db, settings)
            proc = start_watcher(env, log)
            # Mid-stream: this run has stored a checkpoint and is publishing more.
            deadline = time.monotonic() + 60
            while await checkpoint_time(db, settings) == before:
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, "the watcher never checkpointed"
                await asyncio.sleep(0.05)
            await asyncio.sleep(rng.uniform(0.2, 1.2))
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 10)
        proc = start_watcher(env, log)
        await asyncio.sleep(2.0)
    finally:
        writing.clear()
        await asyncio.gather(*writers)

    in_mongo = {d["_id"] for d in await db[TURNS].find({}, {"_id": 1}).to_list()}
    try:
        records = await read_all(settings, in_mongo, timeout_s=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 20)
    assert returncode == 0, log.read_text()[-2000:]

    published = Counter(t.turn_id for _, t in records)
    missing = in_mongo - set(published)
    assert not missing, f"{len(missing)} of {len(in_mongo)} turns never reached Kafka"
    assert set(published) == in_mongo
    # Duplicates come only from the batches each killed run had not checkpointed.
    duplicates = sum(published.values()) - len(published)
    assert duplicates <= KILLS * (COMMITS_IN_FLIGHT + 1) * BATCH_MAX, duplicates
    first_seen: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for _, turn in records:
        slot = (turn.project_id, turn.user_id, turn.session_id)
        if turn.seq not in first_seen[slot]:
            first_seen[slot].append(turn.seq)
    for slot, seqs in first_seen.items():
        assert seqs == list(range(1, len(seqs) + 1)), slot
    checkpoint = await db[CHECKPOINTS].find_one({"_id": token_id(settings.kafka.topic("turns"))})
    assert checkpoint is not None
    assert "_data" in checkpoint["token"]
    print(f"{len(in_mongo)} turns, {KILLS} SIGKILLs, {duplicates} duplicates in Kafka")
