"""Scale benchmark (issue 28): does mongomem stay fast as the store grows?

One run, one set of servers (a local Kafka broker and mongo-java-server in
memory), the four stages as processes (watcher, windowing, a *semantic*
extractor, reconciler). The LLM is the rule-based stand-in (NOT a model)
behind the local OpenAI-compatible server with a fixed latency per call;
embeddings are the hashing stand-in. Every measurement is taken twice in the
same run — on the empty store, and after seeding the store through the public
paths (``import_user`` for memories, historical ``record_turn(at=...)`` for
turns) — and reported as a ratio:

* end-to-end: ``record_turn`` ×3 + ``end_session`` + ``wait_until_processed``
  of a fresh user, p50;
* import rate: ``import_user`` of a user with ``--import-memories`` memories;
* idle CPU: servers + stages, summed over ``--idle-s`` seconds with the
  pipeline idle (from ``/proc``);
* erase of a user with ``--import-memories`` memories (its fixed re-sweep wait
  stated apart);
* ``save_semantic`` p50 against one embedding call;
* store-alone rows: what one empty change-stream read and one query the server
  answers by a scan cost at that size (the bound mongo-java-server sets).

The issue's sizes are the defaults (100,000 memories over 1,000 users, 200,000
turns); ``--memories``, ``--users`` and ``--turns`` run it smaller.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pymongo import AsyncMongoClient

from bench.report import publish
from bench.scale_seed import SeedShare, seed_share
from bench.threads import process_table
from mongomem.adapters.embeddings import make_embedder
from mongomem.adapters.mongo import DECISIONS, MEMORIES, SNAPSHOTS, TURNS
from mongomem.erasure.erase import _LANDING_S
from mongomem.erasure.register import NOT_ERASED_TTL_S
from mongomem.local.infra import free_port
from mongomem.local.servers import OPLOG_MAX, LocalKafka, LocalMongo
from mongomem.models import SessionKey
from mongomem.operations.progress import Progress
from mongomem.operations.status import consumer_group
from mongomem.sdk import AsyncMemory, MemoryRequestContext
from mongomem.settings import Settings, load_settings
from mongomem.stages.watcher_reader import ChangeReader
from mongomem.stm.turns import NOT_AN_EVENT
from mongomem.testing import (
    STAND_IN_MODEL,
    ChatRequest,
    FakeOpenAIServer,
    Reply,
    Slow,
    StandInResponder,
)
from mongomem.testing.harness import Pipeline, wait_until

_T = TypeVar("_T")
RESULTS = Path(__file__).resolve().parent / "results" / "scale.md"
PROJECT = "bench"
#: Turns per window in the seeded sessions (a window closes on this many messages).
WINDOW = 20
SEED_SESSION_TURNS = 20
#: Concurrent ``import_user`` and ``record_turn`` writers of the seeding, over all its
#: worker processes (``--seed-workers``).
SEED_IMPORTERS = 6
SEED_WRITERS = 24
#: Seconds each idle change-stream reader is measured alone (store-alone rows).
READER_S = 5.0
#: ``save_semantic`` calls timed one at a time per store size; the rest of a template is
#: saved :data:`SAVES_AT_ONCE` at a time (its time is not measured).
TIMED_SAVES = 200
SAVES_AT_ONCE = 16
#: Snapshots the extractor works on at once (the default is 4).
EXTRACTION_CONCURRENCY = 32
#: mongo-java-server's heap: 100,000 memories of 384 floats take more than its 1g default.
MONGO_HEAP = "4g"


# ------------------------------------------------------------------ the pipeline


@dataclass
class ScalePipeline(Pipeline):
    """The harness's pipeline with only the semantic extractor (as issue 28 measured)."""

    def env(self) -> dict[str, str]:
        env = super().env()
        env["MONGOMEM_ENABLED_EXTRACTIONS"] = "semantic"
        env["MONGOMEM_WINDOW_MAX_MESSAGES"] = str(WINDOW)
        # The product's watermark cadence (the harness's is faster, for tests), so the
        # idle row measures what `mongomem up` runs.
        env.pop("MONGOMEM_STM_WATCHER_WATERMARK_INTERVAL_S", None)
        env.pop("MONGOMEM_STM_WATCHER_WATERMARK_IDLE_INTERVAL_S", None)
        # The seeded sessions' snapshots catch up sooner (the LLM stand-in's latency is
        # fixed, so more calls at once); the end-to-end session has one snapshot anyway.
        env["MONGOMEM_EXTRACTION_CONCURRENCY"] = str(EXTRACTION_CONCURRENCY)
        return env

    @property
    def settings(self) -> Settings:
        base = super().settings
        only = base.extraction.model_copy(update={"enabled": ("semantic",)})
        return base.model_copy(update={"extraction": only})

    def groups(self) -> list[tuple[str, str]]:
        s = self.settings.kafka
        return [
            (consumer_group(s, "windowing"), s.topic("turns")),
            (consumer_group(s, "extractor.semantic"), s.topic("snapshots")),
            (consumer_group(s, "reconciler"), s.topic("candidates")),
        ]


@contextmanager
def servers(root: Path) -> Iterator[tuple[LocalKafka, LocalMongo]]:
    cache = load_settings().infra.state_dir.resolve() / "cache"
    kafka = LocalKafka(port=free_port(), state_dir=root / "kafka", cache_dir=cache)
    mongo = LocalMongo(port=free_port(), state_dir=root / "mongo", cache_dir=cache, heap=MONGO_HEAP)
    for server in (kafka, mongo):
        server.state_dir.mkdir(parents=True, exist_ok=True)
    kafka.start()
    try:
        mongo.start()
        try:
            yield kafka, mongo
        finally:
            mongo.stop()
    finally:
        kafka.stop()


@contextmanager
def stand_in_pipeline(name: str, llm_latency: float) -> Iterator[ScalePipeline]:
    """A run's servers, the rule-based LLM stand-in (NOT a model) answering after
    ``llm_latency`` seconds, and its pipeline of stages (not started yet)."""
    stand_in = StandInResponder()

    def slow_stand_in(request: ChatRequest) -> Reply:
        return Slow(llm_latency, stand_in(request))

    root = Path(tempfile.mkdtemp(prefix=f"mongomem-bench-{name}-"))
    with (
        servers(root) as (kafka, mongo),
        FakeOpenAIServer(slow_stand_in, model=STAND_IN_MODEL) as llm,
    ):
        yield ScalePipeline(
            root=root, kafka=kafka, mongo=mongo, llm=llm, prefix="bench", database="b"
        )


# ------------------------------------------------------------------ CPU from /proc


def _tree_ticks(roots: Sequence[int], table: dict[int, tuple[int, int]]) -> int:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    total, todo, seen = 0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def _own_ticks(pid: int) -> int:
    """utime + stime of ``pid`` itself plus those of its children it has waited for."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(x) for x in fields[11:15])


async def cpu_during(
    groups: dict[str, list[int]], work: Awaitable[_T]
) -> tuple[_T, dict[str, float]]:
    """``work``'s result, and the cores each group of process trees used while it ran;
    ``"bench"`` is this process and the seed workers it ran (and reaped) meanwhile."""
    hz = os.sysconf("SC_CLK_TCK")
    before, own = process_table(), _own_ticks(os.getpid())
    started = time.monotonic()
    result = await work
    after, own = process_table(), _own_ticks(os.getpid()) - own
    elapsed = time.monotonic() - started
    cores = {
        name: (_tree_ticks(pids, after) - _tree_ticks(pids, before)) / hz / elapsed
        for name, pids in groups.items()
    }
    cores["bench"] = own / hz / elapsed
    return result, cores


async def idle_cpu(groups: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """Cores used per group of process trees over ``seconds`` (1.0 = one core busy)."""
    hz = os.sysconf("SC_CLK_TCK")
    before = process_table()
    started = time.monotonic()
    await asyncio.sleep(seconds)
    after = process_table()
    elapsed = time.monotonic() - started
    return {
        name: (_tree_ticks(pids, after) - _tree_ticks(pids, before)) / hz / elapsed
        for name, pids in groups.items()
    }


# ------------------------------------------------------------------ measurements


def p50(values: Sequence[float]) -> float:
    return statistics.median(values)


@dataclass
class Row:
    """One store size's measurements."""

    memories: int = 0
    turns: int = 0
    oplog: int = 0
    e2e_s: list[float] = field(default_factory=list)
    import_rate: float = 0.0
    erase_s: float = 0.0
    #: What the store allows an erase: its own reads and deletes issued raw, the first
    #: sweep within the fixed wait, then the second; and one scan of each collection a
    #: sweep reads by the user.
    erase_alone_s: float = 0.0
    erase_scans_s: dict[str, float] = field(default_factory=dict)
    save_s: list[float] = field(default_factory=list)
    embed_s: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    #: The servers alone (no stage running), idle.
    servers_cpu: dict[str, float] = field(default_factory=dict)
    getmore_s: float = 0.0
    scan_s: float = 0.0
    #: An idle change-stream reader alone: (server cores, getMores/s), polling vs probing.
    reader_polling: tuple[float, float] = (0.0, 0.0)
    reader_probing: tuple[float, float] = (0.0, 0.0)
    #: Oplog entries ever appended (what a count of it answers) and held now (capped).
    oplog_held: int = 0
    #: ``save_semantic``'s own commands issued raw through pymongo, in the same shape.
    save_alone_s: list[float] = field(default_factory=list)
    #: One processing-status read as now (``_id`` probes + an aggregate on snapshots),
    #: and as it was (one aggregate on ``turns`` sorted by seq: a scan of every turn).
    status_s: float = 0.0
    status_before_s: float = 0.0


async def _lines(memory: AsyncMemory, user: str) -> list[str]:
    return [line async for line in memory.export_lines(user)]


async def make_template(
    memory: AsyncMemory, user: str, count: int, row: Row | None, settings: Settings
) -> list[str]:
    """``count`` facts saved through ``save_semantic``; their export. With ``row``, the
    first :data:`TIMED_SAVES` are saved one at a time and timed into it (beside one
    embedding call each); the rest :data:`SAVES_AT_ONCE` at a time, untimed."""
    chat = memory.bind(MemoryRequestContext(user_id=user))
    embedder = make_embedder(settings.embedding)

    def fact(i: int) -> tuple[str, str]:
        return f"attribute {i}", f"{user} fact {i}: the value of attribute {i} is {i * 7 % 1000}."

    timed = min(count, TIMED_SAVES) if row is not None else 0
    for i in range(timed):
        key, text = fact(i)
        started = time.perf_counter()
        await chat.save_semantic(key, text)
        took = time.perf_counter() - started
        assert row is not None
        row.save_s.append(took)
        started = time.perf_counter()
        await embedder.embed([text])
        row.embed_s.append(time.perf_counter() - started)
    rest = iter(range(timed, count))

    async def saver() -> None:
        for i in rest:
            await chat.save_semantic(*fact(i))

    await asyncio.gather(*(saver() for _ in range(SAVES_AT_ONCE)))
    return await _lines(memory, user)


async def e2e(memory: AsyncMemory, tag: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        chat = memory.bind(MemoryRequestContext(user_id=f"e2e-{tag}-{i}", session_id="s"))
        started = time.perf_counter()
        await chat.record_turn("user", f"My favorite city is City{i}{tag}.")
        await chat.record_turn("assistant", "Noted.")
        await chat.record_turn("user", "Thanks.")
        await chat.end_session()
        await chat.wait_until_processed(timeout=120, all_turns=True)
        out.append(time.perf_counter() - started)
    return out


async def timed_import(memory: AsyncMemory, lines: list[str], user: str) -> float:
    started = time.perf_counter()
    result = await memory.import_user(lines, user_id=user)
    took = time.perf_counter() - started
    return result.memories / took


async def timed_erase(memory: AsyncMemory, user: str) -> float:
    started = time.perf_counter()
    result = await memory.erase_user(user, confirm=True)
    assert result.erased
    return time.perf_counter() - started


async def erase_alone(db: Any, user: str) -> tuple[float, dict[str, float]]:
    """What an erase of ``user`` must ask the server, issued raw through pymongo: per
    sweep (two), the reads by the user (its snapshots and turns; its decisions and
    memories, the same filters as the product's), then the deletes of what they found
    by ``_id`` in batches of 100, four in flight, and the user's derived documents by
    filter. No register. The bound: ``max(fixed wait, first sweep) + second sweep``
    (an erase's first sweep runs within its wait). Also one scan of each collection
    timed alone."""
    whose = {"project_id": PROJECT, "user_id": user}
    mine = {
        "scope.project_id": PROJECT,
        "$or": [{"scope.user_id": user}, {"evidence.user_id": user}],
    }
    reads: dict[str, tuple[str, dict[str, Any]]] = {
        SNAPSHOTS: (SNAPSHOTS, whose),
        "turns": (TURNS, whose),
        DECISIONS: (DECISIONS, mine),
        "memories": (MEMORIES, mine),
    }
    scans = {}
    for name, (coll, f) in reads.items():
        started = time.perf_counter()
        await db[coll].find(f, {"_id": 1}).to_list()
        scans[name] = time.perf_counter() - started
    gate = asyncio.Semaphore(4)

    async def delete(coll: str, ids: list[Any]) -> None:
        async def one(batch: list[Any]) -> None:
            async with gate:
                await db[coll].delete_many({"_id": {"$in": batch}})

        await asyncio.gather(*(one(ids[i : i + 100]) for i in range(0, len(ids), 100)))

    sweeps = []
    for _ in range(2):
        started = time.perf_counter()
        snaps, turns = await asyncio.gather(
            db[SNAPSHOTS].find(whose, {"_id": 1}).to_list(),
            db[TURNS].find(whose, {"_id": 1}).to_list(),
        )
        decisions, memories = await asyncio.gather(
            db[DECISIONS].find(mine, {"_id": 1}).to_list(),
            db[MEMORIES].find(mine, {"_id": 1}).to_list(),
        )
        await delete(MEMORIES, [m["_id"] for m in memories])
        await asyncio.gather(
            delete(DECISIONS, [d["_id"] for d in decisions]),
            *(db[c].delete_many(whose) for c in ("processing_status", "extraction_results")),
        )
        await delete(SNAPSHOTS, [d["_id"] for d in snaps])
        await delete(TURNS, [d["_id"] for d in turns])
        sweeps.append(time.perf_counter() - started)
    # what the store allows an erase: its first sweep within the fixed wait, then one more
    bound = max(NOT_ERASED_TTL_S + _LANDING_S, sweeps[0]) + sweeps[1]
    return bound, scans


async def save_alone(db: Any, n: int = 100) -> list[float]:
    """``save_semantic``'s commands, raw: the scope-log read (beside the embedding call),
    the version's insert, then the scope-log bump beside the decision-log insert — on
    side collections, with a copy of a real memory document."""
    model = await db[MEMORIES].find_one({})
    assert model is not None
    log, versions, decisions = db["alone_scope_log"], db["alone_memories"], db["alone_decisions"]
    out = []
    for i in range(n):
        started = time.perf_counter()
        await log.find_one({"_id": "scope"})
        await versions.insert_one({**model, "_id": f"v{i}-{time.monotonic_ns()}"})
        await asyncio.gather(
            log.find_one_and_update(
                {"_id": "scope"},
                {"$inc": {"rev": 1}, "$push": {"log": {"$each": [{"ids": [i]}], "$slice": -256}}},
                upsert=True,
            ),
            decisions.insert_one({"_id": f"d{i}-{time.monotonic_ns()}", "action": "ADD"}),
        )
        out.append(time.perf_counter() - started)
    await asyncio.gather(log.drop(), versions.drop(), decisions.drop())
    return out


async def status_reads(db: Any, tag: str) -> tuple[float, float]:
    """One processing-status read of the last end-to-end session, p50 of 5: as it is now,
    and the one aggregate anchored on ``turns`` it replaced (issue 28)."""
    key = SessionKey(project_id=PROJECT, user_id=f"e2e-{tag}-0", session_id="s")
    progress = Progress(db)
    now, before = [], []
    query = {"project_id": key.project_id, "user_id": key.user_id, "session_id": key.session_id}
    old_shape = [
        {"$match": {**query, **NOT_AN_EVENT}},
        {"$sort": {"seq": -1}},
        {"$limit": 1},
        {"$project": {"seq": 1}},
        {"$lookup": {"from": "snapshots", "as": "s", "pipeline": [{"$match": query}]}},
        {"$lookup": {"from": "processing_status", "as": "e", "pipeline": [{"$match": query}]}},
    ]
    for _ in range(5):
        started = time.perf_counter()
        await progress.session_status(key, ["semantic"])
        now.append(time.perf_counter() - started)
        started = time.perf_counter()
        await (await db[TURNS].aggregate(old_shape)).to_list()
        before.append(time.perf_counter() - started)
    return p50(now), p50(before)


async def store_alone(mongo_uri: str, db_name: str, row: Row, mongo_pid: int, tag: str) -> None:
    """The server alone: one empty change-stream read, one query it answers by a scan,
    an idle change-stream reader (polling, probing)."""
    c: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri, tz_aware=True)
    try:
        db = c[db_name]
        row.oplog = await c.local["oplog.rs"].estimated_document_count()
        row.memories = await db[MEMORIES].estimated_document_count()
        row.turns = await db[TURNS].estimated_document_count()
        async with await db[TURNS].watch([{"$match": {"operationType": "insert"}}]) as s:
            await s.try_next()
            times = []
            for _ in range(5):
                started = time.perf_counter()
                await s.try_next()
                times.append(time.perf_counter() - started)
        row.getmore_s = p50(times)
        times = []
        for _ in range(3):
            started = time.perf_counter()
            await db[MEMORIES].find_one({"scope.user_id": "nobody", "status": "current"})
            times.append(time.perf_counter() - started)
        row.scan_s = p50(times)
        row.oplog_held = await c.local["oplog.rs"].count_documents({})
        row.save_alone_s = await save_alone(db)
        # the second imported user (the first was erased through the SDK)
        row.erase_alone_s, row.erase_scans_s = await erase_alone(db, f"imp-{tag}-1")
        row.status_s, row.status_before_s = await status_reads(db, tag)
        for probing in (False, True):
            measured = await idle_reader(c, db, mongo_pid, probing)
            if probing:
                row.reader_probing = measured
            else:
                row.reader_polling = measured
    finally:
        await c.close()


async def idle_reader(
    c: AsyncMongoClient[dict[str, Any]], db: Any, mongo_pid: int, probing: bool
) -> tuple[float, float]:
    """The watcher's reader alone on an idle stream for :data:`READER_S`: the server's
    cores and the getMores per second, polling every ``poll_s`` (what the watcher did
    before issue 28) or probing the oplog's size."""
    oplog = c.local["oplog.rs"]

    async def probe() -> tuple[int, int] | None:
        log, turns = await asyncio.gather(
            oplog.estimated_document_count(), db[TURNS].estimated_document_count()
        )
        return int(log), int(turns)

    async def size() -> int | None:
        return int(await oplog.estimated_document_count())

    stream = await db[TURNS].watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=50)
    poll_s = load_settings().stm.watcher_poll_interval_s
    reader = ChangeReader(
        stream,
        asyncio.Event(),
        limit=100,
        poll_s=poll_s,
        probe=probe if probing else None,
        log_size=size if probing else None,
    )
    try:
        await asyncio.sleep(1.0)
        reads = reader.empty_reads
        cores = await idle_cpu({"mongo": [mongo_pid]}, READER_S)
        return cores["mongo"], (reader.empty_reads - reads) / READER_S
    finally:
        await reader.close()
        await stream.close()


async def measure(
    memory: AsyncMemory,
    pipe: ScalePipeline,
    kafka: LocalKafka,
    mongo: LocalMongo,
    args: argparse.Namespace,
    tag: str,
    big_lines: list[str],
    row: Row,
    phases: Phases,
) -> None:
    with phases.timed(f"{tag}: catching up"):
        await caught_up(pipe, args)
    with phases.timed(f"{tag}: end-to-end"):
        row.e2e_s = await e2e(memory, tag, args.e2e)
    with phases.timed(f"{tag}: imports"):
        rates = [
            await timed_import(memory, big_lines, f"imp-{tag}-{k}") for k in range(args.imports)
        ]
    row.import_rate = p50(rates)
    with phases.timed(f"{tag}: erase"):
        row.erase_s = await timed_erase(memory, f"imp-{tag}-0")
    with phases.timed(f"{tag}: idle CPU"):
        await caught_up(pipe, args)
        await asyncio.sleep(3)  # let the last polls settle
        groups = process_groups(pipe, kafka, mongo)
        row.cpu = await idle_cpu(groups, args.idle_s)
    with phases.timed(f"{tag}: store alone"):
        pid = mongo.process.pid if mongo.process else 0
        await store_alone(mongo.uri, pipe.database, row, pid, tag)


def server_pids(kafka: LocalKafka, mongo: LocalMongo) -> dict[str, list[int]]:
    return {
        "mongo-java-server": [mongo.process.pid] if mongo.process else [],
        "kafka": [kafka.process.pid] if kafka.process else [],
    }


async def caught_up(pipe: ScalePipeline, args: argparse.Namespace) -> None:
    async def lag_zero() -> bool:
        return await pipe.lag() == 0

    await wait_until(lag_zero, args.timeout, "every consumer group to catch up", every=1.0)


async def seed(
    settings: Settings, small_lines: list[str], args: argparse.Namespace
) -> tuple[float, float]:
    """Memories through ``import_user``, turns through historical ``record_turn``, both at
    once, by ``--seed-workers`` processes (:mod:`bench.scale_seed`); seconds until the
    memories and until the turns were all written."""
    started = time.monotonic()
    base = datetime.now(UTC) - timedelta(days=30)
    workers = args.seed_workers
    shares = [
        SeedShare(
            settings=settings,
            project_id=PROJECT,
            lines=small_lines,
            users=args.users,
            sessions=max(1, args.turns // SEED_SESSION_TURNS),
            session_turns=SEED_SESSION_TURNS,
            worker=k,
            workers=workers,
            importers=max(1, SEED_IMPORTERS // workers),
            writers=max(1, SEED_WRITERS // workers),
            base=base,
        )
        for k in range(workers)
    ]
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = await asyncio.gather(*(loop.run_in_executor(pool, seed_share, s) for s in shares))
    return max(m for m, _ in done) - started, max(t for _, t in done) - started


@dataclass
class Phases:
    """Wall time of each phase of the run (where the run's minutes go), in order."""

    seconds: dict[str, float] = field(default_factory=dict)
    #: Cores used per process group during the seeding (what it is bound by).
    seed_cpu: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        print(f"{name} ...", flush=True)
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.seconds[name] = self.seconds.get(name, 0.0) + took
            print(f"{name}: {took:.1f} s", flush=True)


def process_groups(
    pipe: ScalePipeline, kafka: LocalKafka, mongo: LocalMongo
) -> dict[str, list[int]]:
    """The servers and each stage (by process tree)."""
    groups = server_pids(kafka, mongo)
    for name, process in pipe.processes.items():
        groups[name] = [process.process.pid] if process.process else []
    return groups


async def run(args: argparse.Namespace) -> str:
    started = time.monotonic()
    with stand_in_pipeline("scale", args.llm_latency) as pipe:
        kafka, mongo = pipe.kafka, pipe.mongo
        empty, big, phases = Row(), Row(), Phases()
        with phases.timed("servers alone, empty"):
            empty.servers_cpu = await idle_cpu(server_pids(kafka, mongo), args.servers_idle_s)
        pipe.start_all()
        try:
            memory = AsyncMemory(project_id=PROJECT, settings=pipe.settings)
            try:
                with phases.timed("templates"):
                    big_lines = await make_template(
                        memory, "tpl-big", args.import_memories, empty, pipe.settings
                    )
                    per_user = max(1, args.memories // args.users)
                    small_lines = await make_template(
                        memory, "tpl-small", per_user, None, pipe.settings
                    )
                await measure(memory, pipe, kafka, mongo, args, "empty", big_lines, empty, phases)
                with phases.timed("seeding"):
                    groups = process_groups(pipe, kafka, mongo)
                    (seed_memories_s, seed_turns_s), phases.seed_cpu = await cpu_during(
                        groups, seed(pipe.settings, small_lines, args)
                    )
                with phases.timed("big store: save_semantic"):
                    big.save_s, big.embed_s = await _saves(memory, "tpl-late", pipe.settings)
                await measure(memory, pipe, kafka, mongo, args, "big", big_lines, big, phases)
            finally:
                await memory.close()
        finally:
            pipe.stop_all()
        with phases.timed("servers alone, seeded"):
            big.servers_cpu = await idle_cpu(server_pids(kafka, mongo), args.servers_idle_s)
    total_s = time.monotonic() - started
    return report(args, empty, big, seed_memories_s, seed_turns_s, total_s, phases)


async def _saves(
    memory: AsyncMemory, user: str, settings: Settings
) -> tuple[list[float], list[float]]:
    row = Row()
    await make_template(memory, user, TIMED_SAVES, row, settings)
    return row.save_s, row.embed_s


# ------------------------------------------------------------------ the report


def _cpu_total(cpu: dict[str, float]) -> float:
    return sum(cpu.values())


def report(
    args: argparse.Namespace,
    empty: Row,
    big: Row,
    seed_memories_s: float,
    seed_turns_s: float,
    total_s: float,
    phases: Phases,
) -> str:
    command = (
        f"python -m bench.scale --memories {args.memories} --users {args.users} "
        f"--turns {args.turns} --import-memories {args.import_memories} "
        f"--idle-s {args.idle_s:g} --servers-idle-s {args.servers_idle_s:g} --e2e {args.e2e} "
        f"--llm-latency {args.llm_latency:g} --imports {args.imports} "
        f"--seed-workers {args.seed_workers}"
    )
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    e2e_ratio = p50(big.e2e_s) / p50(empty.e2e_s)
    import_ratio = big.import_rate / empty.import_rate
    fixed_wait = NOT_ERASED_TTL_S + _LANDING_S
    save_big = p50(big.save_s)
    erase_ratio = big.erase_s / max(big.erase_alone_s, 1e-9)
    embed_big = p50(big.embed_s)

    def ok(met: bool) -> str:
        return "met" if met else "NOT met"

    def row(*cells: str) -> str:
        return "| " + " | ".join(cells) + " |"

    def pct(x: float) -> str:
        return f"{x * 100:.1f}%"

    def ms(x: float) -> str:
        return f"{x * 1000:.1f} ms"

    idle_empty, idle_big = _cpu_total(empty.cpu), _cpu_total(big.cpu)
    goals = "\n".join(
        [
            row(
                f"turn → retrievable p50 (N = {args.e2e}) ≤ 1.5×",
                f"{p50(empty.e2e_s):.2f} s",
                f"{p50(big.e2e_s):.2f} s",
                f"{e2e_ratio:.2f}×",
                ok(e2e_ratio <= 1.5),
            ),
            row(
                "import rate ≥ 0.8×",
                f"{empty.import_rate:,.0f} memories/s",
                f"{big.import_rate:,.0f} memories/s",
                f"{import_ratio:.2f}×",
                ok(import_ratio >= 0.8),
            ),
            row(
                f"idle CPU, servers + stages, {args.idle_s:g} s, < 5% of a core",
                pct(idle_empty),
                pct(idle_big),
                "",
                ok(idle_big < 0.05),
            ),
            row(
                f"erase of a {args.import_memories:,}-memory user ≤ 5 s",
                f"{empty.erase_s:.2f} s",
                f"{big.erase_s:.2f} s",
                f"of which {fixed_wait:.1f} s fixed wait; {erase_ratio:.2f}× the store-alone "
                f"bound ({big.erase_alone_s:.2f} s)",
                "met"
                if big.erase_s <= 5
                else "NOT met (store-bound)"
                if erase_ratio <= 1.5
                else "NOT met",
            ),
            row(
                "`save_semantic` p50 ≤ one embedding call + 15 ms",
                ms(p50(empty.save_s)),
                ms(save_big),
                f"embedding call {embed_big * 1000:.2f} ms",
                ok(save_big <= embed_big + 0.015),
            ),
        ]
    )
    cpu_rows = "\n".join(
        [
            *(
                row(name, pct(empty.cpu.get(name, 0)), pct(big.cpu.get(name, 0)))
                for name in big.cpu
            ),
            row("**total**", f"**{pct(idle_empty)}**", f"**{pct(idle_big)}**"),
            *(
                row(
                    f"servers alone (no stage running): {name}",
                    pct(empty.servers_cpu.get(name, 0)),
                    pct(big.servers_cpu.get(name, 0)),
                )
                for name in ("mongo-java-server", "kafka")
            ),
        ]
    )
    alone = "\n".join(
        [
            row(
                "one empty change-stream read (getMore: a pass over the whole oplog)",
                ms(empty.getmore_s),
                ms(big.getmore_s),
                f"{big.getmore_s / max(empty.getmore_s, 1e-9):.1f}×",
            ),
            row(
                "an idle change-stream reader polling every `poll_s` (the watcher before "
                "issue 28): server CPU, getMores/s",
                f"{pct(empty.reader_polling[0])}, {empty.reader_polling[1]:.1f}/s",
                f"{pct(big.reader_polling[0])}, {big.reader_polling[1]:.1f}/s",
                "",
            ),
            row(
                "the same reader probing the oplog's size (now): server CPU, getMores/s",
                f"{pct(empty.reader_probing[0])}, {empty.reader_probing[1]:.1f}/s",
                f"{pct(big.reader_probing[0])}, {big.reader_probing[1]:.1f}/s",
                "",
            ),
            row(
                "one `find_one` on `memories` that no index serves there (a scan)",
                ms(empty.scan_s),
                ms(big.scan_s),
                f"{big.scan_s / max(empty.scan_s, 1e-9):.1f}×",
            ),
            row(
                f"an erase of a {args.import_memories:,}-memory user, its reads and deletes "
                "issued raw: max(fixed wait, first sweep) + second sweep",
                f"{empty.erase_alone_s:.2f} s",
                f"{big.erase_alone_s:.2f} s",
                f"the erase: {empty.erase_s / max(empty.erase_alone_s, 1e-9):.2f}× and "
                f"{erase_ratio:.2f}×",
            ),
            *(
                row(
                    f"one read of that user's {name} (a scan here)",
                    ms(empty.erase_scans_s.get(name, 0)),
                    ms(secs),
                    f"{secs / max(empty.erase_scans_s.get(name, 0), 1e-9):.1f}×",
                )
                for name, secs in big.erase_scans_s.items()
            ),
            row(
                "`save_semantic`'s own commands raw (scope-log read; insert; bump beside "
                "the decision-log insert), p50 of 100",
                ms(p50(empty.save_alone_s)),
                ms(p50(big.save_alone_s)),
                f"{p50(big.save_alone_s) / max(p50(empty.save_alone_s), 1e-9):.2f}×",
            ),
            row(
                "one processing-status read now (`_id` probes of `turns` + one aggregate "
                "on `snapshots`)",
                ms(empty.status_s),
                ms(big.status_s),
                f"{big.status_s / max(empty.status_s, 1e-9):.1f}×",
            ),
            row(
                "the same read as before issue 28 (one aggregate on `turns` sorted by seq: "
                "a scan of every turn here)",
                ms(empty.status_before_s),
                ms(big.status_before_s),
                f"{big.status_before_s / max(empty.status_before_s, 1e-9):.1f}×",
            ),
        ]
    )
    phase_rows = "\n".join(
        [
            *(
                row(name, f"{secs:.0f} s", pct(secs / total_s))
                for name, secs in phases.seconds.items()
            ),
            row("**whole run**", f"**{total_s:.0f} s**", ""),
        ]
    )
    seed_cpu = ", ".join(f"{name} {x * 100:.0f}%" for name, x in phases.seed_cpu.items())
    return f"""# Benchmark: staying fast as the store grows (issue 28)

Command (from the repository root): `{command}`

Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python
{platform.python_version()}, **2 CPUs shared with other engineers' work** (load
average at the end: {load}); the whole run took {total_s / 60:.1f} min. Servers: a
local Kafka broker and mongo-java-server in memory. Stages as processes: watcher,
windowing, a semantic extractor, reconciler. LLM: the rule-based stand-in (NOT a
model) over HTTP, a fixed {args.llm_latency * 1000:.0f} ms per call; embeddings: the
hashing stand-in (not e5-small: an embedding call here is local and fast).

Seeded through the public paths: {args.users} users × {args.memories // args.users}
memories by `import_user` in {seed_memories_s:.0f} s, {args.turns:,} historical turns by
`record_turn(at=...)` in {seed_turns_s:.0f} s (sessions of {SEED_SESSION_TURNS} turns,
windows of {WINDOW}), and the pipeline caught up before each measurement.

| store | memories | turns | oplog entries ever appended | held (capped at about {OPLOG_MAX:,}) |
|---|---|---|---|---|
| empty | {empty.memories:,} | {empty.turns:,} | {empty.oplog:,} | {empty.oplog_held:,} |
| seeded | {big.memories:,} | {big.turns:,} | {big.oplog:,} | {big.oplog_held:,} |

Cores used during the seeding (100% = one core busy; the machine has 2): {seed_cpu}.

## Goals (same-run ratios)

| goal | empty store | seeded store | ratio / bound | |
|---|---|---|---|---|
{goals}

The erase's fixed wait is the re-sweep wait: `NOT_ERASED_TTL_S` ({NOT_ERASED_TTL_S:g} s,
how long a writer relies on a "not erased" answer) plus {_LANDING_S:g} s for a write sent
on such an answer to land, counted from the register write; the first sweep runs within
it, so an erase takes at least {fixed_wait:.1f} s and the rest is the second sweep (and
any first sweep longer than the wait).

P3 (windowing ≥ 0.7× the store-alone row of the same run) does not depend on the store's
size and runs on servers of its own: `python -m bench.windowing --only p3 --no-faust`
writes it, with its store-alone row, to `bench/results/windowing_p3.md`.

## Idle CPU per process (share of one core over {args.idle_s:g} s)

| process | empty store | seeded store |
|---|---|---|
{cpu_rows}

## Store alone (mongo-java-server's own cost at each size)

| what | empty store | seeded store | ratio |
|---|---|---|---|
{alone}

mongo-java-server serves a query from an index only when its fields are exactly
those of the `_id` index or of a *unique* index (equality or `$in`); it ignores
every other index, and it answers a change stream's getMore at once (no
`maxAwaitTimeMS`) after a pass over its whole oplog, which the local launcher now
caps at about {OPLOG_MAX:,} entries (`deploy/local/MongoServerMain.java`,
`--oplog-max`), as a replica set caps its oplog. MongoDB serves the same shapes from
the indexes `MemoryStore.setup` creates and holds an idle getMore on the server.

## Where the run's time goes

| phase | wall time | share |
|---|---|---|
{phase_rows}

## Findings (root causes; docs/operations/scaling.md has the detail)

* **Turn → retrievable.** Three costs grew with the store on mongo-java-server: every
  change-stream getMore is a pass over the whole oplog (it only grew: the "empty
  change-stream read" row); `wait_until_processed` read processing status every
  `poll_s` with one aggregate anchored on `turns` sorted by seq, a scan of every turn
  (the "before" status row); and the reconciler's and extractor's first read of a new
  user's scope loaded it with a filter no index serves there (the scan row). Now the
  local oplog is capped (a live stream keeps what it has not read; a resume from a
  dropped point is `ChangeStreamHistoryLost`, which the watcher answers with its
  back-fill), the status read is `_id` probes plus one aggregate on `snapshots`, and a
  scope never written (no scope-log entry) is known empty without a read.
* **Idle CPU.** The watcher's reader probes the oplog's size instead of a getMore per
  poll (the two "idle reader" rows); watermarks back off from
  `watcher_watermark_interval_s` to `watcher_watermark_idle_interval_s` (10 s) while
  no turn is read; consumers hold an idle fetch 2 s on the broker (aiokafka: 500 ms);
  the local broker runs fewer threads (`deploy/local/kafka.properties.template`). The
  broker alone is the floor (the "servers alone" rows).
* **`save_semantic`.** Seven sequential round trips before: the register read, the
  ledger claim, the scope-log read, the version insert, the scope-log bump, the
  decision-log insert, the ledger settle. Now an unkeyed save (a random candidate id
  no retry can repeat) uses no ledger, the register (remembered for
  `NOT_ERASED_TTL_S`) and the scope log are read beside the embedding call, and the
  decision log is written beside the bump: three sequential round trips, the same
  commands as the raw row.
* **Import**: one read of the target, none for a user whose scope logs of the file's
  types do not exist (a user never written: the seeding's imports), `_id $in` for what
  is there and what is deleted (scans before).
* **Erase**: profiled at 56,000 memories and 102,000 turns (pymongo command
  monitoring, load 12): 138 commands, 10.8 s of server time, of which the user-filter
  reads were 8.2 s — the lineage `distinct` over `memories` 2.3 s (two), `turns` 1.7 s
  (three: one to learn whether there is anything to erase), `decision_log` 1.7 s
  (two), a `memories` `$or` read to learn whether there is anything 1.7 s, the user's
  own memories 0.85 s (two) — and delete batches of 100 ids one after another (the 36
  slowest: 1.8 s). Now a sweep reads the user's memories once (own and lineage in
  one `$or`), asks snapshots with turns and decisions with memories at once, keeps
  a step's delete batches in flight together (four at a time), and "is there anything
  to erase" is asked of the register and the user's scope logs by `_id` first. What
  is left is one scan per collection per sweep on this server (the "one read of that
  user's …" rows) and the fixed re-sweep wait ({fixed_wait:.1f} s); on MongoDB each
  read is an index prefix scan (`scope_type_status_key`, `session_seq_unique`,
  `session_last_seq`, `memory_id`).
* **Run time**: the seeding is the run's longest phase (the table above); it runs in
  `--seed-workers` processes (each user's import and each session's turns written by
  one), the templates' untimed saves {SAVES_AT_ONCE} at a time.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=200_000)
    parser.add_argument("--import-memories", type=int, default=2_000)
    parser.add_argument("--imports", type=int, default=2, help="timed imports per store size")
    parser.add_argument("--e2e", type=int, default=9, help="end-to-end sessions per size")
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument(
        "--servers-idle-s", type=float, default=30.0, help="the servers alone, idle (a side row)"
    )
    parser.add_argument(
        "--seed-workers", type=int, default=3, help="processes writing the seed at once"
    )
    parser.add_argument("--llm-latency", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.imports < 2:
        parser.error(
            "--imports must be at least 2 (the second user is the erase's store-alone row)"
        )
    publish(asyncio.run(run(args)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
