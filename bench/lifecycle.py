"""Memory lifecycle (SPEC J1, J6): processing status, wait_until_processed, delete.

``python -m bench.lifecycle`` starts its own MongoDB-compatible server (as the
tests do) and writes ``bench/results/lifecycle.md``.

* **processing_status** latency for a session with S snapshots × 4 memory
  types (rows seeded as the extractor and reconciler write them), against a
  raw indexed ``find_one`` on the same collection, interleaved.
* **wait_until_processed** latency after the last snapshot is reconciled:
  a waiter polls (``poll_s``) while the session's last (snapshot, type) is
  pending; the clock starts when the reconciler's record of it is written and
  stops when the wait returns.
* **delete_memory** latency in a scope of M memories, against a raw
  ``update_one`` by ``_id`` of the same collection, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.report import publish
from mongomem.adapters.embeddings import HashingEmbedder
from mongomem.adapters.mongo import MEMORIES, SNAPSHOTS, connect
from mongomem.local.infra import start_servers
from mongomem.models import Snapshot, SnapshotTurn, stable_id, utcnow
from mongomem.operations.progress import Progress
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import ExtractionSettings, MongoSettings, load_settings
from mongomem.stm.turns import ShortTermMemory

RESULTS = Path(__file__).resolve().parent / "results" / "lifecycle.md"
TYPES = ("semantic", "episodic", "procedural", "taxonomic")


def snapshot(session: str, n: int) -> Snapshot:
    at = utcnow() - timedelta(hours=1)
    seq = n * 2 + 1
    turns = tuple(
        SnapshotTurn(
            turn_id=stable_id("turn", session, s), seq=s, role="user", content="hi", created_at=at
        )
        for s in (seq, seq + 1)
    )
    return Snapshot(
        snapshot_id=stable_id("snap", "bench", "u", session, seq, seq + 1),
        project_id="bench",
        user_id="u",
        session_id=session,
        first_seq=seq,
        last_seq=seq + 1,
        turns=turns,
        reason="count",
        closed_at=at,
    )


async def seed_session(db: Any, progress: Progress, session: str, count: int) -> list[Snapshot]:
    """``count`` snapshots, every type extracted with one candidate and reconciled."""
    snaps = [snapshot(session, n) for n in range(count)]
    await db[SNAPSHOTS].insert_many([{"_id": s.snapshot_id, **s.model_dump()} for s in snaps])
    now = utcnow()
    docs = []
    for s in snaps:
        for t in TYPES:
            cid = stable_id("cand", s.snapshot_id, t)
            docs.append(
                {
                    "_id": stable_id("prog", s.snapshot_id, t),
                    "project_id": "bench",
                    "user_id": "u",
                    "session_id": session,
                    "snapshot_id": s.snapshot_id,
                    "memory_type": t,
                    "first_seq": s.first_seq,
                    "last_seq": s.last_seq,
                    "at": now,
                    "candidates": [cid],
                    "reconciled": [cid],
                    "dead_letter": None,
                }
            )
    await progress.entries.insert_many(docs)
    return snaps


def stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, "
        f"mean {statistics.fmean(ordered):.2f} ms"
    )


async def status_latency(
    memory: AsyncMemory, db: Any, progress: Progress, sizes: list[int], queries: int
) -> list[tuple[int, str, str]]:
    rows = []
    for size in sizes:
        session = f"status-{size}"
        await seed_session(db, progress, session, size)
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id=session))
        await chat.processing_status()  # warm the connection pool
        ours, raw = [], []
        for _ in range(queries):
            t0 = time.perf_counter()
            status = await chat.processing_status()
            ours.append((time.perf_counter() - t0) * 1000)
            assert status.state == "done"
            assert len(status.snapshots) == size
            t0 = time.perf_counter()
            await progress.entries.find_one(
                {"project_id": "bench", "user_id": "u", "session_id": session}
            )
            raw.append((time.perf_counter() - t0) * 1000)
        rows.append((size, stats(ours), stats(raw)))
    return rows


async def wait_latency(
    memory: AsyncMemory, db: Any, progress: Progress, poll_s: float, rounds: int, size: int
) -> str:
    samples = []
    for r in range(rounds):
        session = f"wait-{poll_s}-{r}"
        snaps = await seed_session(db, progress, session, size)
        last = progress.entries
        key = stable_id("prog", snaps[-1].snapshot_id, "taxonomic")
        cid = stable_id("cand", snaps[-1].snapshot_id, "taxonomic")
        await last.update_one({"_id": key}, {"$set": {"reconciled": []}})  # pending again
        chat = memory.bind(MemoryRequestContext(user_id="u", session_id=session))
        waiter = asyncio.create_task(chat.wait_until_processed(60, poll_s=poll_s))
        await asyncio.sleep(poll_s * (1.3 + (r % 7) / 7))  # land anywhere in a poll cycle
        assert not waiter.done()
        await last.update_one({"_id": key}, {"$addToSet": {"reconciled": cid}})
        done_at = time.perf_counter()
        await waiter
        samples.append((time.perf_counter() - done_at) * 1000)
    return stats(samples)


async def delete_latency(settings: Any, db: Any, memories: int) -> tuple[str, str]:
    embedder = HashingEmbedder(384)
    async with AsyncMemory(project_id="bench", settings=settings, embedder=embedder) as memory:
        chat = memory.bind(MemoryRequestContext(user_id="deleter", session_id="s"))
        saved = [
            await chat.save_semantic(f"fact-{i}", f"Fact number {i} about the user.")
            for i in range(memories)
        ]
        await chat.search_semantic("fact")  # a warm index, as in a serving process
        ours, raw = [], []
        for i, s in enumerate(saved[: memories // 2]):
            t0 = time.perf_counter()
            await chat.delete_memory(s.memory_id, reason="bench")
            ours.append((time.perf_counter() - t0) * 1000)
            other = saved[memories // 2 + i]
            t0 = time.perf_counter()
            await db[MEMORIES].update_one(
                {"_id": other.version_id}, {"$set": {"updated_at": utcnow()}}
            )
            raw.append((time.perf_counter() - t0) * 1000)
        return stats(ours), stats(raw)


async def run(args: argparse.Namespace) -> str:
    load_before = os.getloadavg()[0]
    servers = start_servers(load_settings(), for_tests=True)
    try:
        settings = load_settings(
            mongodb=MongoSettings(uri=servers.mongodb_uri, database="bench-lifecycle"),
            extraction=ExtractionSettings(enabled=TYPES),
        )
        client = connect(settings.mongodb)
        db = client["bench-lifecycle"]
        progress = Progress(db)
        await progress.ensure_index()
        await db[SNAPSHOTS].create_index(
            [("project_id", 1), ("user_id", 1), ("session_id", 1), ("last_seq", -1)],
            name="session_last_seq",
        )
        await ShortTermMemory(db).ensure_indexes()
        embedder = HashingEmbedder(384)
        async with AsyncMemory(project_id="bench", settings=settings, embedder=embedder) as memory:
            status_rows = await status_latency(memory, db, progress, args.snapshots, args.queries)
            waits = [
                (p, await wait_latency(memory, db, progress, p, args.rounds, 20))
                for p in (0.05, 0.25)
            ]
        deletes = await delete_latency(settings, db, args.memories)
        await client.drop_database("bench-lifecycle")
        await client.close()
        kind = servers.mongo_kind
    finally:
        servers.stop()
    sizes = " ".join(f"--snapshots {s}" for s in args.snapshots)
    lines = [
        "# Memory lifecycle — processing status, wait_until_processed, delete",
        "",
        f"Command: `.venv/bin/python -m bench.lifecycle {sizes} --queries {args.queries} "
        f"--rounds {args.rounds} --memories {args.memories}`",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other work (1-minute load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end).",
        f"MongoDB: {kind}. Direct transport (no HTTP).",
        "",
        "## processing_status (4 memory types per snapshot)",
        "",
        "| snapshots in the session | `chat.processing_status()` | raw `find_one` (indexed) |",
        "|---|---|---|",
        *[f"| {size} | {ours} | {raw} |" for size, ours, raw in status_rows],
        "",
        f"{args.queries} calls each, interleaved. A call is three indexed reads sent "
        "together (snapshots, progress entries, last turn); no Kafka call. The raw "
        "baseline fetches one document; the call reads S snapshots and 4·S entries and "
        "builds the status from them, so it grows with the session's length.",
        "",
        "## wait_until_processed, after the last (snapshot, type) is reconciled",
        "",
        "| poll_s | latency from the reconciler's record to the wait returning |",
        "|---|---|",
        *[f"| {p} | {s} |" for p, s in waits],
        "",
        f"{args.rounds} rounds each, a session of 20 snapshots; the record lands at a "
        "different point of the poll cycle each round: the wait returns at the next poll, "
        "so between zero and one poll interval after the record, plus one "
        "processing_status call.",
        "",
        f"## delete_memory in a scope of {args.memories} memories",
        "",
        "| operation | latency |",
        "|---|---|",
        f"| `chat.delete_memory` (find latest, insert the DELETE version, supersede, "
        f"scope-log bump, decision log) | {deletes[0]} |",
        f"| raw `update_one` by `_id` | {deletes[1]} |",
        "",
        f"{args.memories // 2} deletes, interleaved with as many raw updates. The machine "
        "is shared with other engineers' test runs (load average above); the raw "
        "baselines, measured in the same run, are the yardstick.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--snapshots", type=int, action="append", default=None)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--memories", type=int, default=400)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.snapshots = args.snapshots or [1, 100, 1000]
    publish(asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
