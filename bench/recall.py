"""M1–M3: recall quality and cost of hybrid retrieval, with its single-retriever baselines.

``python -m bench.recall`` starts its own servers (as the tests do) and writes
``bench/results/recall.md``.

* **Quality.** The synthetic set of ``tests/data/recall/`` (``bench.recall_data``:
  48 sessions of varied small talk with facts said in passing, 180 questions
  with gold turn ids) is recorded through the SDK (turns with their own times
  and speakers); every question asks turn search for 20 turns in the same run:
  dense only (cosine of the whole question), BM25 only, the product's hybrid
  (weighted reciprocal-rank fusion of both, its time boost and its speaker
  field: :func:`mongomem.stm.search.named_speakers`), and the hybrid without
  its speaker field. Reported: recall@5/10/20 (share of questions with a gold
  turn in the top k) and MRR, per kind and overall, on the tuning part;
  ``--split holdout`` (or ``both``) runs the part held out by hash. The
  time-expression questions (``time_questions.json``: a recurring subject of
  small talk, each asked at its own ``as_of``) are a table of their own, with
  the hybrid also run without its time boost. Also reported: how many
  questions share no word (after tokenising) with any of their gold turns —
  BM25 cannot find those.
* **Turn search cost** at ``--turns`` turns of one user (default 20,000):
  ``TurnSearch.search`` top-10, dense only against hybrid, interleaved query
  by query; the one-off build of the user's index from stored vectors (what a
  restart pays on the first search) is timed apart. Vectors are random (the
  cost does not depend on what they mean) and the query vectors are fixed, so
  the numbers are the ranker's and MongoDB's, not the model's.
* **Index rebuild** (``--rebuild N``): the one-off build of one user's index
  from ``N`` stored turns and vectors, timed once.
* **Memory search cost** at 2,000 and 20,000 memories in one scope: today's
  dense path (``MemoryStore.search``) against the hybrid one
  (``MemoryStore.rank``), interleaved, the same query vectors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from pymongo import AsyncMongoClient

from bench.report import publish
from mongomem.adapters.embeddings import Embedder, LocalE5Embedder, local_model_installed
from mongomem.adapters.lexical import tokenize
from mongomem.adapters.mongo import MEMORIES, TURN_VECTORS, TURNS, Document, connect
from mongomem.evaluation.retrieval import KS, recall_summary
from mongomem.local.infra import free_port, start_servers
from mongomem.local.servers import LocalMongo
from mongomem.ltm import MemoryStore, memory_id_for
from mongomem.ltm.documents import to_document
from mongomem.ltm.index import SCOPE_LOG, bump_scope
from mongomem.models import (
    Action,
    Evidence,
    MemoryScope,
    MemoryStatus,
    MemoryVersion,
    Role,
    Turn,
    utcnow,
)
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import MongoSettings, load_settings
from mongomem.stm.search import TurnQuery, TurnSearch
from mongomem.stm.turns import turn_document

RESULTS = Path(__file__).resolve().parent / "results" / "recall.md"
DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "recall"
DIMS = 384
#: name: (lexical, dense, time-aware, speaker-aware). The product's turn search is "hybrid".
ARMS = {
    "dense only": (False, True, False, False),
    "BM25 only": (True, False, False, False),
    "hybrid": (True, True, True, True),
    "hybrid, no speaker field": (True, True, True, False),
    "dense + speaker field": (False, True, False, True),
}
#: The time-expression questions also run the product without its time boost.
TIME_ARMS = {**ARMS, "hybrid, no time boost": (True, True, False, True)}
HYBRID = "hybrid"


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def stats(ms: Sequence[float]) -> str:
    return f"p50 {percentile(ms, 50):.2f} ms, p90 {percentile(ms, 90):.2f} ms"


class FixedEmbedder:
    """Random unit vectors, the same for the same text (a cost stand-in: NOT a model)."""

    def __init__(self) -> None:
        self._seen: dict[str, list[float]] = {}

    @property
    def name(self) -> str:
        return "bench:random-384 (NOT a model)"

    @property
    def dimensions(self) -> int:
        return DIMS

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            if text not in self._seen:
                rng = np.random.default_rng(abs(hash(text)) % 2**32)
                v = rng.standard_normal(DIMS).astype(np.float32)
                self._seen[text] = [float(x) for x in v / np.linalg.norm(v)]
            out.append(self._seen[text])
        return out


# --------------------------------------------------------------------------- quality


async def quality(settings: Any, embedder: Embedder, split: str) -> dict[str, Any]:
    sessions = json.loads((DATA / "sessions.json").read_text())
    questions = json.loads((DATA / "questions.json").read_text())
    parts = ["train", "holdout"] if split == "both" else [split]
    questions = [q for q in questions if ("holdout" if q["held_out"] else "train") in parts]
    timed = json.loads((DATA / "time_questions.json").read_text())
    timed = [q for q in timed if ("holdout" if q["held_out"] else "train") in parts]
    text_of = {t["id"]: t["text"] for s in sessions for t in s["turns"]}
    no_shared_word = {
        part: sum(
            1
            for q in questions
            if ("holdout" if q["held_out"] else "train") == part
            and not any(set(tokenize(q["question"])) & set(tokenize(text_of[g])) for g in q["gold"])
        )
        for part in parts
    }
    started = time.perf_counter()
    async with AsyncMemory(project_id="bench-recall", settings=settings, embedder=embedder) as m:
        for s in sessions:
            chat = m.bind(MemoryRequestContext(user_id=s["user"], session_id=s["session"]))
            at = datetime.fromisoformat(s["date"])
            for i, t in enumerate(s["turns"]):
                role = Role.USER if i % 2 == 0 else Role.ASSISTANT
                meta = {"dataset_id": t["id"], "speaker": t["speaker"]}
                await chat.record_turn(role, t["text"], meta, at=at + timedelta(seconds=i))
        recorded = time.perf_counter() - started
        search = await m.transport.turn_search()  # type: ignore[attr-defined]
        started = time.perf_counter()
        for user in sorted({s["user"] for s in sessions}):
            await search.fresh("bench-recall", user)  # embeds every turn once
        embedded = time.perf_counter() - started
        rows: dict[str, dict[str, list[dict[str, Any]]]] = {
            part: {arm: [] for arm in ARMS} for part in parts
        }
        time_rows: dict[str, dict[str, list[dict[str, Any]]]] = {
            part: {arm: [] for arm in TIME_ARMS} for part in parts
        }
        for into, arms, items in ((rows, ARMS, questions), (time_rows, TIME_ARMS, timed)):
            for q in items:
                part = "holdout" if q["held_out"] else "train"
                as_of = datetime.fromisoformat(q["as_of"]) if "as_of" in q else None
                for arm, (lexical, dense, timely, named) in arms.items():
                    query = TurnQuery(
                        query=q["question"],
                        limit=max(KS),
                        as_of=as_of,
                        time_aware=timely,
                        speaker_aware=named,
                    )
                    hits = await search.search(
                        "bench-recall", q["user"], query, lexical=lexical, dense=dense
                    )
                    found = [h.turn.metadata.get("dataset_id") for h in hits]
                    row = {"category": q["kind"], "gold": q["gold"], "found": found}
                    into[part][arm].append(row)
    turns = sum(len(s["turns"]) for s in sessions)
    return {
        "questions": len(questions),
        "sessions": len(sessions),
        "turns": turns,
        "record_s": recorded,
        "embed_s": embedded,
        "no_shared_word": no_shared_word,
        "kinds": {
            part: Counter(q["kind"] for q in questions if _part(q) == part) for part in parts
        },
        "summary": {
            part: {arm: recall_summary(r) for arm, r in by_arm.items()}
            for part, by_arm in rows.items()
        },
        "time": {
            part: {arm: recall_summary(r) for arm, r in by_arm.items()}
            for part, by_arm in time_rows.items()
        },
        "time_r1": {
            part: {arm: _at_1(r) for arm, r in by_arm.items()} for part, by_arm in time_rows.items()
        },
    }


def _part(q: dict[str, Any]) -> str:
    return "holdout" if q["held_out"] else "train"


# --------------------------------------------------------------------------- turn cost

WORDS = sorted(
    {
        w
        for t in json.loads((DATA / "sessions.json").read_text())
        for x in t["turns"]
        for w in x["text"].replace(",", " ").replace(".", " ").split()
    }
)


async def seed_turns(db: Any, n: int, embedder: FixedEmbedder) -> None:
    rng = random.Random(5)
    vrng = np.random.default_rng(5)
    now = datetime(2023, 1, 1, tzinfo=UTC)
    turns, vectors = [], []
    per_session = 50
    for i in range(n):
        session, seq = f"s{i // per_session:04d}", i % per_session + 1
        text = " ".join(rng.choices(WORDS, k=rng.randint(6, 18)))
        turn = Turn(
            turn_id=Turn.make_id("bench", "user-1", session, seq),
            project_id="bench",
            user_id="user-1",
            session_id=session,
            seq=seq,
            role=Role.USER if seq % 2 else Role.ASSISTANT,
            content=text,
            metadata={"speaker": "Maya" if seq % 2 else "Theo"},
            created_at=now + timedelta(minutes=i),
        )
        turns.append(turn_document(turn))
        v = vrng.standard_normal(DIMS).astype(np.float32)
        vectors.append(
            {
                "_id": turn.turn_id,
                "project_id": "bench",
                "user_id": "user-1",
                "session_id": session,
                "model": embedder.name,
                "embedding": (v / np.linalg.norm(v)).tobytes(),
            }
        )
        if len(turns) == 2000:
            await db[TURNS].insert_many(turns, ordered=False)
            await db[TURN_VECTORS].insert_many(vectors, ordered=False)
            turns, vectors = [], []
    if turns:
        await db[TURNS].insert_many(turns, ordered=False)
        await db[TURN_VECTORS].insert_many(vectors, ordered=False)


async def turn_cost(db: Any, n: int, queries: int) -> dict[str, Any]:
    embedder = FixedEmbedder()
    started = time.perf_counter()
    await seed_turns(db, n, embedder)
    seeded = time.perf_counter() - started
    search = TurnSearch(db, embedder)
    started = time.perf_counter()
    index = await search.fresh("bench", "user-1")
    build = time.perf_counter() - started
    assert len(index) == n, len(index)
    rng = random.Random(9)
    dense, hybrid = [], []
    for _ in range(queries):
        q = TurnQuery(query=" ".join(rng.choices(WORDS, k=rng.randint(4, 9))), limit=10)
        await embedder.embed([q.query])  # the query's vector is not the thing measured
        t0 = time.perf_counter()
        await search.search("bench", "user-1", q, lexical=False)
        dense.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await search.search("bench", "user-1", q)
        hybrid.append((time.perf_counter() - t0) * 1000)
    return {"seed_s": seeded, "build_s": build, "dense": dense, "hybrid": hybrid}


async def rebuild_cost(db: Any, n: int) -> dict[str, Any]:
    """The one-off in-process index build of a user with ``n`` stored turns and vectors
    (what the first turn search after a restart pays), and one warm search after it."""
    embedder = FixedEmbedder()
    started = time.perf_counter()
    await seed_turns(db, n, embedder)
    seeded = time.perf_counter() - started
    builds: dict[str, list[float]] = {"owner": [], "id": []}
    for way in ("owner", "id", "owner", "id"):  # interleaved: the server warms for both
        search = TurnSearch(db, embedder)
        if way == "id":  # the read before issue 28: the user's turns by id, 2,000 at a time
            search.by_id_max = n
        started = time.perf_counter()
        index = await search.fresh("bench", "user-1")
        builds[way].append(time.perf_counter() - started)
        assert len(index) == n, len(index)
    q = TurnQuery(query="weather train late again", limit=10)
    await embedder.embed([q.query])
    t0 = time.perf_counter()
    await search.search("bench", "user-1", q)
    return {
        "n": n,
        "seed_s": seeded,
        "build_s": min(builds["owner"]),
        "build_by_id_s": min(builds["id"]),
        "search_ms": (time.perf_counter() - t0) * 1000,
    }


#: mongo-java-server's heap for the rebuild run: 100,000 turns and their vectors take more
#: than its 1g default.
REBUILD_HEAP = "3g"


async def rebuild_on_own_server(n: int) -> dict[str, Any]:
    """:func:`rebuild_cost` against a mongo-java-server of its own, with a larger heap."""
    cache = load_settings().infra.state_dir.resolve() / "cache"
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as root:
        mongo = LocalMongo(
            port=free_port(), state_dir=Path(root) / "mongo", cache_dir=cache, heap=REBUILD_HEAP
        )
        mongo.state_dir.mkdir(parents=True, exist_ok=True)
        mongo.start()
        try:
            client: AsyncMongoClient[Document] = AsyncMongoClient(mongo.uri, tz_aware=True)
            try:
                return await rebuild_cost(client["br"], n)
            finally:
                await client.close()
        finally:
            mongo.stop()


# --------------------------------------------------------------------------- memory cost

SCOPE = MemoryScope(project_id="bench", user_id="mem-user")


async def seed_memories(db: Any, n: int) -> None:
    rng = random.Random(3)
    vrng = np.random.default_rng(3)
    now = utcnow()
    batch: list[Document] = []
    for i in range(n):
        label = f"fact-{i}"
        text = " ".join(rng.choices(WORDS, k=rng.randint(6, 14)))
        memory_id = memory_id_for(SCOPE, "semantic", label)
        v = vrng.standard_normal(DIMS).astype(np.float32)
        version = MemoryVersion(
            version_id=MemoryVersion.make_version_id(memory_id, 1),
            memory_id=memory_id,
            version=1,
            memory_type="semantic",
            scope=SCOPE,
            key=label,
            fields={"label": label, "text": text},
            text=text,
            embedding=tuple(float(x) for x in v / np.linalg.norm(v)),
            status=MemoryStatus.CURRENT,
            action=Action.ADD,
            reinforcement_count=1,
            evidence=(Evidence(source="direct", ref=f"seed-{i}", at=now),),
            created_at=now,
            updated_at=now,
        )
        batch.append(to_document(version, f"seed-{i}"))
        if len(batch) == 1000:
            await db[MEMORIES].insert_many(batch, ordered=False)
            batch = []
    if batch:
        await db[MEMORIES].insert_many(batch, ordered=False)
    await bump_scope(db[SCOPE_LOG], SCOPE, "semantic", [])


async def memory_cost(db: Any, n: int, queries: int) -> dict[str, Any]:
    await seed_memories(db, n)
    store = MemoryStore(db)
    await store.setup()
    started = time.perf_counter()
    await store.cache.fresh(SCOPE, "semantic")
    cold = time.perf_counter() - started
    rng = random.Random(4)
    vrng = np.random.default_rng(4)
    dense, hybrid = [], []
    for _ in range(queries):
        text = " ".join(rng.choices(WORDS, k=rng.randint(4, 9)))
        v = vrng.standard_normal(DIMS).astype(np.float32)
        vector = [float(x) for x in v / np.linalg.norm(v)]
        t0 = time.perf_counter()
        await store.search(SCOPE, "semantic", vector, limit=10)
        dense.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await store.rank(SCOPE, "semantic", text, vector, limit=10)
        hybrid.append((time.perf_counter() - t0) * 1000)
    return {"cold_s": cold, "dense": dense, "hybrid": hybrid}


# --------------------------------------------------------------------------- report


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def quality_table(summary: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines = ["| retriever | kind | questions | " + " | ".join(f"R@{k}" for k in KS) + " | MRR |"]
    lines.append("|---|---|---|" + "---|" * len(KS) + "---|")
    kinds = sorted(next(iter(summary.values())), key=lambda k: (k != "all", k))
    for kind in kinds:
        for arm, s in summary.items():
            row = s[kind]
            cells = " | ".join(_pct(row[f"recall@{k}"]) for k in KS)
            lines.append(f"| {arm} | {kind} | {row['questions']} | {cells} | {row['mrr']:.3f} |")
    return lines


def _at_1(rows: Sequence[dict[str, Any]]) -> float:
    """Share of ``rows`` whose first hit is a gold turn."""
    return sum(1 for r in rows if r["found"][:1] and r["found"][0] in r["gold"]) / len(rows)


def time_table(at_1: dict[str, float], summary: dict[str, dict[str, Any]]) -> list[str]:
    """R@1, R@5 and MRR per arm: the same words recur, so only the top places differ."""
    lines = ["| retriever | questions | R@1 | R@5 | R@10 | MRR |", "|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        row = s["all"]
        lines.append(
            f"| {arm} | {row['questions']} | {_pct(at_1[arm])} | {_pct(row['recall@5'])} | "
            f"{_pct(row['recall@10'])} | {row['mrr']:.3f} |"
        )
    return lines


async def run(args: argparse.Namespace) -> str:
    load_before = os.getloadavg()[0]
    servers = start_servers(load_settings(), for_tests=True)
    local = local_model_installed() and not args.stand_in
    embedder: Embedder = LocalE5Embedder() if local else FixedEmbedder()
    try:
        settings = load_settings(mongodb=MongoSettings(uri=servers.mongodb_uri, database="bq"))
        client = connect(settings.mongodb)
        q = await quality(settings, embedder, args.split)
        await client.drop_database("bq")
        t: dict[str, Any] = {}
        mem: dict[int, dict[str, Any]] = {}
        if args.turns:
            t = await turn_cost(client["bt"], args.turns, args.queries)
            await client.drop_database("bt")
        for n in (2_000, 20_000) if args.memories else ():
            mem[n] = await memory_cost(client[f"bm{n}"], n, args.queries)
            await client.drop_database(f"bm{n}")
        await client.close()
        kind = servers.mongo_kind
    finally:
        servers.stop()
    rebuild: dict[str, Any] = {}
    if args.rebuild:
        rebuild = await rebuild_on_own_server(args.rebuild)
    quality_lines: list[str] = []
    for part, summary in q["summary"].items():
        r10 = {arm: s["all"]["recall@10"] for arm, s in summary.items()}
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(q["kinds"][part].items()))
        best_single = max(r10["dense only"], r10["BM25 only"])
        gain = 100 * (r10[HYBRID] - best_single)
        title = "tuning part" if part == "train" else "held-out part (run once, at the end)"
        n_part = summary[HYBRID]["all"]["questions"]
        quality_lines += [
            f"### {title}",
            "",
            f"Questions: {kinds}.",
            "",
            *quality_table(summary),
            "",
            f"Goal: hybrid R@10 ≥ best single retriever + 5 points: hybrid "
            f"{_pct(r10[HYBRID])} vs best single {_pct(best_single)} "
            f"({gain:+.1f} points): **{'met' if gain >= 5 else 'NOT met'}**.",
            "",
            "Ablation, not a baseline of the goal: against dense with the speaker field "
            f"(no BM25), hybrid {_pct(r10[HYBRID])} vs {_pct(r10['dense + speaker field'])} "
            f"({100 * (r10[HYBRID] - r10['dense + speaker field']):+.1f} points); without "
            f"its speaker field, hybrid {_pct(r10['hybrid, no speaker field'])} "
            f"({100 * (r10['hybrid, no speaker field'] - best_single):+.1f} over the best "
            "single retriever).",
            "",
            f"{q['no_shared_word'][part]} of these {n_part} questions share no word (after "
            "tokenising: stop words out, stemmed) with any of their gold turns: BM25 cannot "
            "rank those at all, at any k.",
            "",
            f"Time expressions ({title}): recurring small talk, asked at the question's "
            "`as_of` (later turns left out in every arm).",
            "",
            *time_table(q["time_r1"][part], q["time"][part]),
            "",
        ]
    lines = [
        "# Recall — hybrid retrieval, turn search and their cost (SPEC M1–M3)",
        "",
        f"Command: `.venv/bin/python -m bench.recall --split {args.split} --turns {args.turns} "
        f"--queries {args.queries}{'' if args.memories else ' --no-memories'}"
        f"{f' --rebuild {args.rebuild}' if args.rebuild else ''}"
        f"{' --stand-in' if args.stand_in else ''}`",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs **shared with other engineers' work** (1-minute load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end). MongoDB: {kind} "
        "(no Atlas Search: the in-process indexes answer).",
        f"Embedder for quality: `{embedder.name}`.",
        "",
        f"## Quality: evidence recall of turn search ({args.split})",
        "",
        f"{q['sessions']} sessions, {q['turns']} turns, {q['questions']} questions "
        f"(`tests/data/recall/`, written by `bench/recall_data.py`). Recording the turns: "
        f"{q['record_s']:.1f} s (no embedding on that path); embedding them on the first "
        f"search: {q['embed_s']:.1f} s. R@k: % of questions with a gold turn in the top k.",
        "",
        *quality_lines,
    ]
    if t:
        lines += cost_lines(args, t)
    if rebuild:
        lines += rebuild_lines(rebuild)
    if mem:
        lines += memory_lines(mem)
    lines += notes()
    return "\n".join(lines)


def cost_lines(args: argparse.Namespace, t: dict[str, Any]) -> list[str]:
    t_ratio = percentile(t["hybrid"], 50) / percentile(t["dense"], 50)
    return [
        f"## Turn search cost at {args.turns:,} turns of one user",
        "",
        f"Seeding (bulk insert of turns and stored vectors): {t['seed_s']:.1f} s. Building the "
        f"user's index from them (first search after a start): **{t['build_s']:.2f} s**.",
        "",
        "| ranker | `TurnSearch.search` top-10 |",
        "|---|---|",
        f"| dense only | {stats(t['dense'])} |",
        f"| hybrid | {stats(t['hybrid'])} |",
        "",
        f"{args.queries} queries, interleaved. Goal p50 ≤ 1.5× dense only: {t_ratio:.2f}× — "
        f"**{'met' if t_ratio <= 1.5 else 'NOT met'}**.",
        "",
    ]


def memory_lines(mem: dict[int, dict[str, Any]]) -> list[str]:
    lines = [
        "## Memory search cost",
        "",
        "| memories | cold index load | today's dense path (`search`) | hybrid (`rank`) | ratio |",
        "|---|---|---|---|---|",
    ]
    verdicts = []
    for n, r in mem.items():
        ratio = percentile(r["hybrid"], 50) / percentile(r["dense"], 50)
        verdicts.append(ratio <= 1.2)
        lines.append(
            f"| {n:,} | {r['cold_s']:.2f} s | {stats(r['dense'])} | {stats(r['hybrid'])} | "
            f"{ratio:.2f}× |"
        )
    lines += [
        "",
        f"Goal p50 ≤ 1.2× today's dense path at 2,000 and 20,000: "
        f"**{'met' if all(verdicts) else 'NOT met'}**.",
        "",
    ]
    return lines


def notes() -> list[str]:
    return [
        "## How to read this",
        "",
        "- One machine shared with other engineers' runs: expect the absolute numbers to "
        "move by 2× between runs; the ratios are measured in the same run, query by query.",
        "- The cost runs use random vectors and fixed query vectors, so they time the "
        "ranker and MongoDB, not the embedding model (which is the same for every arm).",
        "- Tokens per turn in the cost runs: 6–18 words drawn from the quality set's "
        f"vocabulary ({len(WORDS)} words, e.g. {tokenize(' '.join(WORDS[:6]))}), so common "
        "terms have long posting lists (a pessimistic case for BM25).",
        "- Turn search p90 includes the catch-up a user's index makes at most once a second "
        "(it lists the user's turn ids: on mongo-java-server a scan of 20,000 ids); p50 is "
        "the warm search.",
        "- The index build happens on a user's first turn search after a start (lazily), "
        "not at start-up: readiness does not wait for it. See the rebuild row for 100,000 "
        "turns when the run had `--rebuild`.",
        "- The set (v2, `bench/recall_data.py`): small talk composed from about 70 "
        "templates and their slots, seeded, no line said twice by one user; turns of one "
        "to three sentences, facts often said in passing beside small talk. The held-out "
        "part is a fresh split (salted hash of the question id, its digest written in the "
        "generator and committed before the first measurement). The first v2 draft had "
        "one-sentence turns; it was measured on the tuning part only (dense 85.6, BM25 "
        "63.7, hybrid 85.6 R@10) before turns got their mixed sentences.",
        "- Quality: turn search's fusion is weighted RRF with k 10, BM25 weight 0.5, "
        "40 candidates per retriever, time list weight 1 and speaker list weight 1 (dense "
        "1), chosen on the tuning part only: a grid over k 2-60, weight 0.25-1.0, pool "
        "10-40, speaker weight 0.5-2 gave 89.0-90.4 R@10 over a broad plateau (textbook "
        "RRF, k 60 and weight 1, gave 87.7 with the speaker field). Memory search keeps "
        "its k 5 and weight 0.35.",
        "- The speaker field: a speaker's name in the question (\"What is Maya's "
        'occupation?") is left out of what the query embedding reads, and the turns that '
        "speaker said form a boost list. Without it the e5 embedding of a question that "
        "names a person is pulled to every turn of that person (the embedded turn text "
        "starts with the speaker's name), so the name crowds out what is asked. It is a "
        "boost, not a filter. On this set every answer is said by the person the question "
        "names, so it cannot show the case where the other person said it (in real "
        "conversations that happens; how often is not measured here).",
        "- Where the gain comes from, honestly (this run; the set and the model are "
        "deterministic): on the tuning part the gain over the "
        "single retrievers is the speaker field. Fusing BM25 without it lifts R@10 by "
        "1.4 points there (the 'no speaker field' row; on the held-out part, 34 "
        "questions where one question is 2.9 points, by 5.9), and dense with the "
        "speaker field and no BM25 does as well as the hybrid at R@10 on both parts "
        "(90.4 vs 89.7, 88.2 vs 88.2). BM25 reaches few questions the dense retriever "
        "misses: it finds only turns that share a term with the question, the "
        "paraphrase and most two-speaker questions share none (counted above), and the "
        "questions that do share one the dense retriever mostly finds too. So the +5 "
        "goal is met on both parts against the single retrievers the issue names, but "
        "on this set by treating names as a field, not by the fusion with BM25 as such. "
        "On the held-out part the speaker field cost one of the four two-speaker "
        "questions (75 to 50 R@10).",
        "- Time expressions: a subject of small talk recurs in many sessions in other "
        "words; the gold is every turn on that subject inside the expression's window. "
        "R@1 shows whether a turn of the right session comes first.",
        "",
    ]


def rebuild_lines(rebuild: dict[str, Any]) -> list[str]:
    ratio = rebuild["build_s"] / rebuild["build_by_id_s"]
    return [
        f"## Index rebuild at {rebuild['n']:,} turns of one user",
        "",
        f"Seeding {rebuild['n']:,} turns with stored vectors: {rebuild['seed_s']:.1f} s. "
        f"Building the user's in-process index from them (the first turn search after a "
        f"start; readiness does not wait for it), reading the user's vectors and turns by "
        f"owner: **{rebuild['build_s']:.1f} s**; reading them by id, 2,000 at a time (the "
        f"build before issue 28's fix), in the same run: {rebuild['build_by_id_s']:.1f} s "
        f"(by owner / by id = {ratio:.2f}×; the faster of two interleaved builds each). The "
        f"first search after it: {rebuild['search_ms']:.0f} ms (it also catches up, listing "
        f"the user's {rebuild['n']:,} turn ids, since more than a second had passed). A "
        "bench row, not a timed test.",
        "",
    ]


REBUILD_RESULTS = RESULTS.with_name("turn_index_rebuild.md")


def publish_rebuild(rebuild: dict[str, Any], command: str) -> None:
    text = "\n".join(
        [
            "# Benchmark: building one user's in-process turn index",
            "",
            f"Command (from the repository root): `{command}`",
            "",
            f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python "
            f"{platform.python_version()}, 2 CPUs shared with other work (load average at "
            f"the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}); a mongo-java-server "
            "of its own (in memory). Vectors: random unit vectors, stored (NOT a model: "
            "nothing is embedded while building).",
            "",
            *rebuild_lines(rebuild),
        ]
    )
    REBUILD_RESULTS.write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("train", "holdout", "both"), default="train")
    parser.add_argument("--turns", type=int, default=20_000, help="0: no turn cost run")
    parser.add_argument(
        "--no-memories", dest="memories", action="store_false", help="no memory cost run"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--rebuild", type=int, default=0, help="also time the index build at this many turns"
    )
    parser.add_argument(
        "--stand-in", action="store_true", help="random vectors for quality too (NOT a model)"
    )
    parser.add_argument(
        "--rebuild-only",
        action="store_true",
        help=f"only the --rebuild row, written to bench/results/{REBUILD_RESULTS.name}",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.rebuild_only:
        n = args.rebuild or 100_000
        rebuild = asyncio.run(rebuild_on_own_server(n))
        command = f"python -m bench.recall --rebuild-only --rebuild {n}"
        publish_rebuild(rebuild, command)
        return
    publish(asyncio.run(run(args)), None if args.no_write else RESULTS)


if __name__ == "__main__":
    main()
