"""M1–M3: recall quality and cost of hybrid retrieval, with its single-retriever baselines.

``python -m bench.recall`` starts its own servers (as the tests do) and writes
``bench/results/recall.md``.

* **Quality.** The synthetic set of ``tests/data/recall/`` (``bench.recall_data``:
  48 sessions, 152 questions with gold turn ids) is recorded through the SDK
  (turns with their own times and speakers); every question asks turn search
  for 20 turns three ways in the same run: dense only (cosine), BM25 only,
  and the product's hybrid (weighted reciprocal-rank fusion of both, and its
  time boost). Reported:
  recall@5/10/20 (share of questions with a gold turn in the top k) and MRR,
  per kind and overall, on the tuning part; ``--split holdout`` (or ``both``)
  runs the part held out by hash. The time-expression questions
  (``time_questions.json``: recurring small talk, each asked at its own
  ``as_of``) are a row of their own, with the hybrid also run without its
  time boost. Also reported: how many questions share no word (after
  tokenising) with any of their gold turns — BM25 cannot find those.
* **Turn search cost** at ``--turns`` turns of one user (default 20,000):
  ``TurnSearch.search`` top-10, dense only against hybrid, interleaved query
  by query; the one-off build of the user's index from stored vectors (what a
  restart pays on the first search) is timed apart. Vectors are random (the
  cost does not depend on what they mean) and the query vectors are fixed, so
  the numbers are the ranker's and MongoDB's, not the model's.
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
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import publish
from mongomem.adapters.embeddings import Embedder, LocalE5Embedder, local_model_installed
from mongomem.adapters.lexical import tokenize
from mongomem.adapters.mongo import MEMORIES, TURN_VECTORS, TURNS, Document, connect
from mongomem.evaluation.retrieval import KS, recall_summary
from mongomem.local.infra import start_servers
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
#: name: (lexical, dense, time-aware). The product's turn search is "hybrid".
ARMS = {
    "dense only": (False, True, False),
    "BM25 only": (True, False, False),
    "hybrid": (True, True, True),
}
#: The time-expression questions also run the product without its time boost.
TIME_ARMS = {**ARMS, "hybrid, no time boost": (True, True, False)}
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
                for arm, (lexical, dense, timely) in arms.items():
                    query = TurnQuery(
                        query=q["question"], limit=max(KS), as_of=as_of, time_aware=timely
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
    quality_lines: list[str] = []
    for part, summary in q["summary"].items():
        r10 = {arm: s["all"]["recall@10"] for arm, s in summary.items()}
        best_single = max(r10["dense only"], r10["BM25 only"])
        gain = 100 * (r10[HYBRID] - best_single)
        title = "tuning part" if part == "train" else "held-out part (run once, at the end)"
        n_part = summary[HYBRID]["all"]["questions"]
        quality_lines += [
            f"### {title}",
            "",
            *quality_table(summary),
            "",
            f"Goal: hybrid R@10 ≥ best single retriever + 5 points: hybrid "
            f"{_pct(r10[HYBRID])} vs best single {_pct(best_single)} "
            f"({gain:+.1f} points): **{'met' if gain >= 5 else 'NOT met'}**.",
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
        "- The index build above happens on a user's first turn search after a start "
        "(lazily), not at start-up: readiness does not wait for it. It grows linearly with "
        "the user's turns; at 100,000 turns expect about five times the 20,000 figure (not "
        "measured here).",
        "- Quality: the fusion is weighted RRF (k 5, lexical weight 0.35; dense 1), chosen "
        "on the tuning part only (a grid over k 5-100, weight 0.2-1.0, pool 10-100: the "
        "best R@10 there was 80.3, reached by several neighbouring settings; textbook RRF "
        "(60, 1.0) gave 78.7). BM25 is flat across k because it returns only turns sharing "
        "a term with the question, and for the questions above that share none it returns "
        "no gold turn at any depth (its match is OR-like, stemmed, stop words out; the "
        'tokens now drop possessive endings: "Jonas\'s" once made a term "s").',
        "- Why +5 is not reached honestly here: the dense retriever misses mostly paraphrase "
        "and two-speaker questions whose gold turn shares no word with the question, where "
        "BM25 has nothing to add; fusion lifts two-speaker (+10.7 R@10) and R@5 (+6.6). The "
        "set's small talk recurs verbatim across sessions (each filler line about 7 times "
        "per user) while every planted fact is said once: a prior against repeated text "
        "(or collapsing duplicates) reaches 90-100 R@10 on this set, but that exploits how "
        "the set was written, not how people talk, so it is not in the product. A future "
        "set should vary its small talk.",
        "- Time expressions: the same sentence recurs in many sessions, so every retriever "
        "finds a copy in the top 10; R@1 shows whether the right session's copy is first.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("train", "holdout", "both"), default="train")
    parser.add_argument("--turns", type=int, default=20_000, help="0: no turn cost run")
    parser.add_argument(
        "--no-memories", dest="memories", action="store_false", help="no memory cost run"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--stand-in", action="store_true", help="random vectors for quality too (NOT a model)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    publish(asyncio.run(run(args)), None if args.no_write else RESULTS)


if __name__ == "__main__":
    main()
