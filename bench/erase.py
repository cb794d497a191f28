"""Erasing a user (SPEC J2): ``erase`` against a raw ``delete_many`` of the same documents.

``python -m bench.erase`` starts its own MongoDB-compatible server (as the tests do)
and writes ``bench/results/erase.md``. A user with T turns, T/10 snapshots, M
memories in their own scope (with their decision-log and ledger entries) and M/10
project-scoped terms whose evidence is half theirs, half another user's (the lineage
path: pruned, not removed) — beside another user with the same amounts, who must be
left alone. Each round seeds both users afresh, then times either
:func:`mongomem.erasure.erase.erase` or the raw baseline: one ``delete_many`` per
collection of exactly the erased user's documents (the turns, snapshots, own
memories, decisions, ledger entries; the shared terms' evidence is left as is, since
the raw baseline has no lineage). Rounds alternate between the two.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.report import publish
from mongomem.adapters.mongo import DECISIONS, LEDGER, MEMORIES, SNAPSHOTS, TURNS, connect
from mongomem.erasure.erase import Target, erase
from mongomem.local.infra import start_servers
from mongomem.models import stable_id, utcnow
from mongomem.settings import MongoSettings, load_settings

RESULTS = Path(__file__).resolve().parent / "results" / "erase.md"
PROJECT = "bench"


def seed_docs(user: str, turns: int, memories: int) -> dict[str, list[dict[str, Any]]]:
    now = utcnow()
    docs: dict[str, list[dict[str, Any]]] = {
        c: [] for c in (TURNS, SNAPSHOTS, MEMORIES, DECISIONS, LEDGER)
    }
    for seq in range(1, turns + 1):
        docs[TURNS].append(
            {
                "_id": stable_id("turn", user, seq),
                "project_id": PROJECT,
                "user_id": user,
                "session_id": f"s{seq // 100}",
                "seq": seq,
                "role": "user",
                "content": "x" * 80,
                "created_at": now,
            }
        )
    for n in range(turns // 10):
        docs[SNAPSHOTS].append(
            {
                "_id": stable_id("snap", user, n),
                "project_id": PROJECT,
                "user_id": user,
                "session_id": f"s{n // 10}",
                "first_seq": n * 10 + 1,
                "last_seq": n * 10 + 10,
            }
        )
    for m in range(memories):
        cid = stable_id("cand", user, m)
        ev = {
            "source": "snapshot",
            "ref": stable_id("snap", user, m % max(1, turns // 10)),
            "session_id": "s0",
            "user_id": user,
            "at": now,
        }
        docs[MEMORIES].append(
            {
                "_id": stable_id("ver", user, m),
                "memory_id": f"mem-{user}-{m}",
                "version": 1,
                "memory_type": "semantic",
                "key": f"k{m}",
                "scope": {"project_id": PROJECT, "user_id": user},
                "status": "current",
                "text": "t",
                "evidence": [ev],
                "candidate_ids": [cid],
                "embedding": b"\0" * 1536,
            }
        )
        docs[DECISIONS].append(
            {
                "_id": cid,
                "scope": {"project_id": PROJECT, "user_id": user},
                "evidence": ev,
                "action": "ADD",
            }
        )
        docs[LEDGER].append({"_id": cid, "state": "done", "at": now})
    return docs


def shared_terms(users: tuple[str, str], count: int) -> list[dict[str, Any]]:
    now = utcnow()
    out = []
    for m in range(count):
        evs = [
            {
                "source": "direct",
                "ref": stable_id("cand", u, "t", m),
                "user_id": u,
                "session_id": "s0",
                "at": now,
            }
            for u in users
        ]
        out.append(
            {
                "_id": stable_id("ver", "term", m),
                "memory_id": f"term-{m}",
                "version": 1,
                "memory_type": "taxonomic",
                "key": f"d/t{m}",
                "scope": {"project_id": PROJECT, "user_id": None},
                "status": "current",
                "text": "t",
                "evidence": evs,
                "candidate_ids": [e["ref"] for e in evs],
                "embedding": b"\0" * 1536,
            }
        )
    return out


async def seed(db: Any, turns: int, memories: int) -> None:
    for name in (TURNS, SNAPSHOTS, MEMORIES, DECISIONS, LEDGER, "erasures"):
        await db[name].delete_many({})
    for user in ("gone", "kept"):
        for name, docs in seed_docs(user, turns, memories).items():
            if docs:
                await db[name].insert_many(docs, ordered=False)
    await db[MEMORIES].insert_many(shared_terms(("gone", "kept"), memories // 10))


async def raw(db: Any, turns: int, memories: int) -> None:
    mine = {"project_id": PROJECT, "user_id": "gone"}
    own = {"scope.project_id": PROJECT, "scope.user_id": "gone"}
    cids = [stable_id("cand", "gone", m) for m in range(memories)]
    await db[TURNS].delete_many(mine)
    await db[SNAPSHOTS].delete_many(mine)
    await db[MEMORIES].delete_many(own)
    await db[DECISIONS].delete_many({"_id": {"$in": cids}})
    await db[LEDGER].delete_many({"_id": {"$in": cids}})


async def run(args: argparse.Namespace) -> str:
    load_before = os.getloadavg()[0]
    servers = start_servers(load_settings(), for_tests=True)
    try:
        settings = MongoSettings(uri=servers.mongodb_uri, database="bench-erase")
        client = connect(settings)
        db = client["bench-erase"]
        for name in (TURNS, SNAPSHOTS):
            await db[name].create_index([("project_id", 1), ("user_id", 1), ("session_id", 1)])
        await db[MEMORIES].create_index([("scope.project_id", 1), ("scope.user_id", 1)])
        await db[MEMORIES].create_index("memory_id")
        ours: list[float] = []
        base: list[float] = []
        for r in range(args.rounds * 2):
            await seed(db, args.turns, args.memories)
            started = time.perf_counter()
            if r % 2 == 0:
                result = await erase(db, Target(project_id=PROJECT, user_id="gone"), actor="b")
                ours.append(time.perf_counter() - started)
                assert result.memories_pruned == args.memories // 10
                assert await db[TURNS].count_documents({"user_id": "kept"}) == args.turns
            else:
                await raw(db, args.turns, args.memories)
                base.append(time.perf_counter() - started)
        await client.drop_database("bench-erase")
        await client.close()
        kind = servers.mongo_kind
    finally:
        servers.stop()
    mo, mb = statistics.median(ours), statistics.median(base)
    lines = [
        "# Erasing a user — `erase` against a raw `delete_many`",
        "",
        f"Command: `.venv/bin/python -m bench.erase --turns {args.turns} "
        f"--memories {args.memories} --rounds {args.rounds}`",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other work (1-minute load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end).",
        f"MongoDB: {kind}.",
        "",
        f"A user with {args.turns} turns, {args.turns // 10} snapshots, {args.memories} "
        f"memories (+ decision-log and ledger entries) and {args.memories // 10} shared "
        "project-scoped terms half theirs; another user with the same amounts.",
        "",
        "| operation | median of rounds | all rounds (s) |",
        "|---|---|---|",
        f"| `erase` (register, lineage, every collection, second sweep) | {mo:.3f} s | "
        f"{', '.join(f'{x:.3f}' for x in ours)} |",
        f"| raw `delete_many` per collection (no lineage, no register) | {mb:.3f} s | "
        f"{', '.join(f'{x:.3f}' for x in base)} |",
        "",
        f"Ratio (erase / raw): **{mo / mb:.1f}×**. The erase does more than the baseline: "
        "it reads the decision log and memories to find the erased candidates, prunes "
        "each shared term by lineage (one read and one write each), deletes processing "
        "status and usage records, bumps scope logs, records its job steps, and sweeps "
        "everything a second time.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    publish(asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
