"""Embedding providers: retrieval quality and speed, the local model vs the hashing stand-in.

Each query is a paraphrase of one stored memory, mostly without shared words,
so word overlap (what the stand-in measures) does not find it; some queries
are in another language than the memory. Reported: top-1 accuracy and mean
reciprocal rank of the right memory, and throughput on this machine.

    .venv/bin/python -m bench.embeddings
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.report import publish
from mongomem.adapters.embeddings import (
    Embedder,
    HashingEmbedder,
    LocalE5Embedder,
    cosine,
    embed_queries,
)

MEMORIES = [
    "The user's home airport is Boston Logan.",
    "The user is vegetarian and never eats meat.",
    "The user prefers an aisle seat on long flights.",
    "The user's daughter is called Maya and is seven years old.",
    "A red-eye is an overnight flight that lands the next morning.",
    "To compare flights, rank them by price, then stops, then total travel time.",
    "The user works as a nurse on night shifts.",
    "The user is allergic to penicillin.",
    "The user planned a summer trip to Lisbon with two friends.",
    "The user's favourite football club is Benfica.",
    "An open-jaw ticket flies into one city and out of another.",
    "The user wants invoices sent as PDF at the end of each month.",
    "The user's laptop runs Linux and they dislike Windows.",
    "The user is learning Japanese and practises every morning.",
    "A layover is a stop between two flights of one journey.",
    "The user drives an electric car and needs charging stations on road trips.",
]

QUERIES = [
    ("Which airport does the user usually fly out of?", 0),
    ("dietary restrictions", 1),
    ("where they like to sit on a plane", 2),
    ("how old is the user's kid", 3),
    ("night-time flight arriving at dawn", 4),
    ("how should flight options be evaluated", 5),
    ("what is the user's job", 6),
    ("medication the user must avoid", 7),
    ("holiday in Portugal", 8),
    ("which soccer team does the user support", 9),
    ("arriving in one place and departing from a different one", 10),
    ("billing document format", 11),
    ("operating system of the user's computer", 12),
    ("language studies", 13),
    ("connection between two legs of a trip", 14),
    ("vehicle needs for long drives", 15),
    ("Von welchem Flughafen fliegt der Nutzer ab?", 0),
    ("¿El usuario come carne?", 1),
    ("Qual é o clube de futebol preferido?", 9),
    ("Quel médicament le patient ne supporte-t-il pas ?", 7),
]


async def measure(embedder: Embedder) -> dict[str, float]:
    started = time.perf_counter()
    memories = await embedder.embed(MEMORIES)
    store_s = time.perf_counter() - started
    started = time.perf_counter()
    queries = await embed_queries(embedder, [q for q, _ in QUERIES])
    query_s = time.perf_counter() - started
    hits = 0
    reciprocal = 0.0
    for (_, want), query in zip(QUERIES, queries, strict=True):
        scores = [cosine(query, m) for m in memories]
        ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
        rank = ranked.index(want) + 1
        hits += rank == 1
        reciprocal += 1 / rank
    singles = []
    for text in MEMORIES[:8]:
        started = time.perf_counter()
        await embedder.embed([text])
        singles.append(time.perf_counter() - started)
    return {
        "top1": hits / len(QUERIES),
        "mrr": reciprocal / len(QUERIES),
        "batch_per_s": (len(MEMORIES) + len(QUERIES)) / (store_s + query_s),
        "single_ms": 1000 * sorted(singles)[len(singles) // 2],
    }


async def run() -> str:
    started = time.perf_counter()
    local = LocalE5Embedder()
    load_s = time.perf_counter() - started
    rows = [("hashing stand-in (NOT a model)", HashingEmbedder(384)), (local.name, local)]
    lines = [
        "# Benchmark: embedding providers (retrieval of paraphrased memories)",
        "",
        "Command (from the repository root):",
        "",
        "    .venv/bin/python -m bench.embeddings",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"Python {platform.python_version()}, 2 CPUs shared with other work "
        f"(load average {os.getloadavg()[0]:.1f} at the start: speed figures are noisy).",
        f"{len(MEMORIES)} memories, {len(QUERIES)} paraphrased queries "
        f"({sum(1 for q in QUERIES[16:])} in German, Spanish, Portuguese, French).",
        f"Local model load time: {load_s * 1000:.0f} ms.",
        "",
        "| provider | top-1 | MRR | texts/s (batch) | ms per single text (p50) |",
        "|---|---|---|---|---|",
    ]
    for name, embedder in rows:
        m = await measure(embedder)
        lines.append(
            f"| {name} | {m['top1']:.2f} | {m['mrr']:.2f} | {m['batch_per_s']:.0f} "
            f"| {m['single_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embeddings", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results/embeddings.md"))
    args = parser.parse_args()
    publish(asyncio.run(run()), args.out)


if __name__ == "__main__":
    main()
