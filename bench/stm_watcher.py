"""P1 and P2: short-term memory writes and the watcher, each against a raw baseline.

``python -m bench.stm_watcher`` starts its own servers (as the tests do) and
writes ``bench/results/stm_watcher.md``.

* **P1** ``record_turn`` latency (validation, seq allocation, insert) against
  a raw ``insert_one`` of the same document into a collection with the same
  unique index, interleaved call by call in the same run. Two cases: the
  usual one (the process already wrote to the session, one round trip) and a
  cold cache (the first write of a process to an existing session: one read
  of the last seq, then the insert).
* **P2** sustained turns/s: the watcher draining a backlog of inserted turns
  into Kafka (acks from all replicas, checkpoints included) against a raw
  change-stream read of the same inserts from the same resume token, for
  backlogs of 10,000 and 30,000 turns by default (``--backlog``); the largest
  gives the sustained rate, with the drain's fixed costs spread thinnest. Every
  turn has its own text (:mod:`bench.prose`), so compressed batches shrink as
  conversation text does. One round of every reader runs first, unmeasured:
  the JVMs of both servers compile their hot paths then. Each reader writes
  to one topic for all its rounds, made before the first (a new topic keeps
  the broker busy for a while after it is made).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from pymongo import AsyncMongoClient

from bench.prose import texts
from mongomem.adapters.kafka import ensure_topics, pipeline_topics
from mongomem.adapters.mongo import CHECKPOINTS, TURNS, Document, connect
from mongomem.codec import encode
from mongomem.local.infra import start_servers
from mongomem.models import Role, Turn, utcnow
from mongomem.settings import KafkaSettings, MongoSettings, Settings, load_settings
from mongomem.stages.watcher import READ_BATCH, STAGE, ChangeStreamWatcher, make_watcher_producer
from mongomem.stages.watcher_logic import READ_PIPELINE, WATCH_PIPELINE, token_id
from mongomem.stm.turns import SESSION_SEQ_INDEX, ShortTermMemory, session_key, turn_document

#: How long a raw reader sleeps when the stream has nothing (the watcher's default).
POLL_S = 0.02
RESULTS = Path(__file__).resolve().parent / "results" / "stm_watcher.md"
CONTENT = "Please compare the flights to Lisbon on June 3rd by price, stops and travel time. " * 4
METADATA = {"client": "bench", "tool_calls": [{"name": "search_flights", "args": {"to": "LIS"}}]}


def tool_call(i: int) -> dict[str, Any]:
    """Metadata of the shape agents send, different for every turn."""
    to = ("LIS", "OPO", "MAD", "BCN", "CDG", "FRA", "JFK", "BOS")[i % 8]
    call = {"name": "search_flights", "args": {"to": to, "n": i}}
    return {"client": "bench", "tool_calls": [call]}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def p1(client: AsyncMongoClient[Document], n: int) -> dict[str, float]:
    db = client["bench-p1"]
    await client.drop_database(db.name)
    stm = ShortTermMemory(db)
    await stm.ensure_indexes()
    raw = db["raw_turns"]
    await raw.create_index(
        [("project_id", 1), ("user_id", 1), ("session_id", 1), ("seq", 1)],
        unique=True,
        name=SESSION_SEQ_INDEX,
    )
    warm_key = session_key("bench", "user", "warm")
    raw_seq = 0

    def raw_doc() -> Document:
        nonlocal raw_seq
        raw_seq += 1
        turn = Turn(
            turn_id=Turn.make_id("bench", "user", "raw", raw_seq),
            project_id="bench",
            user_id="user",
            session_id="raw",
            seq=raw_seq,
            role=Role.USER,
            content=CONTENT,
            metadata=METADATA,
            created_at=utcnow(),
        )
        return turn_document(turn)

    times: dict[str, list[float]] = {"raw": [], "warm": [], "cold": []}
    for i in range(n + n // 10):
        measured = i >= n // 10  # the first tenth warms up connections and caches
        doc = raw_doc()
        t0 = time.perf_counter()
        await raw.insert_one(doc)
        t1 = time.perf_counter()
        await stm.record_turn(warm_key, "user", CONTENT, METADATA)
        t2 = time.perf_counter()
        cold = ShortTermMemory(db)  # a fresh process's view: no cached seq
        cold_key = session_key("bench", "user", f"cold-{i % 100}")
        t3 = time.perf_counter()
        await cold.record_turn(cold_key, "user", CONTENT, METADATA)
        t4 = time.perf_counter()
        if measured:
            times["raw"].append(t1 - t0)
            times["warm"].append(t2 - t1)
            times["cold"].append(t4 - t3)
    out: dict[str, float] = {}
    for name, samples in times.items():
        out[f"{name}_p50_ms"] = percentile(samples, 50) * 1000
        out[f"{name}_p99_ms"] = percentile(samples, 99) * 1000
        out[f"{name}_mean_ms"] = statistics.fmean(samples) * 1000
    await client.drop_database(db.name)
    return out


async def prepare_backlog(
    client: AsyncMongoClient[Document],
    settings: Settings,
    m: int,
    sessions: int,
    records: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, Any]:
    """Insert ``m`` turns after a resume token; return that token.

    ``records`` receives each turn as the Kafka record the watcher publishes.
    """
    db = client[settings.mongodb.database]
    await client.drop_database(db.name)
    await ShortTermMemory(db).ensure_indexes()
    turns = db[TURNS]
    async with await turns.watch(WATCH_PIPELINE) as stream:
        await db["marker"].insert_one({"x": 1})
        await turns.insert_one({"_id": f"marker-{m}", "not": "a turn"})
        change = await stream.try_next()
        while change is None:
            change = await stream.try_next()
        token = dict(stream.resume_token or {})
    seqs = [0] * sessions
    batch: list[Document] = []
    now = utcnow()
    contents = texts(m)
    for i in range(m):
        s = i % sessions
        seqs[s] += 1
        turn = Turn(
            turn_id=Turn.make_id("bench", f"u{s % 10}", f"s{s}", seqs[s]),
            project_id="bench",
            user_id=f"u{s % 10}",
            session_id=f"s{s}",
            seq=seqs[s],
            role=Role.USER,
            content=contents[i],
            metadata=tool_call(i),
            created_at=now,
        )
        batch.append(turn_document(turn))
        if records is not None:
            records.append((turn.session.kafka_key(), encode(turn)))
        if len(batch) == 1000:
            await turns.insert_many(batch)
            batch = []
    if batch:
        await turns.insert_many(batch)
    return token


async def raw_read(
    client: AsyncMongoClient[Document],
    settings: Settings,
    token: dict[str, Any],
    m: int,
    *,
    as_watcher: bool = False,
) -> float:
    """A ``try_next`` loop; ``as_watcher``: with the watcher's pipeline and batch size."""
    turns = client[settings.mongodb.database][TURNS]
    options: dict[str, Any] = {}
    if as_watcher:
        options = {"batch_size": READ_BATCH}
    pipeline = READ_PIPELINE if as_watcher else WATCH_PIPELINE
    t0 = time.perf_counter()
    seen = 0
    async with await turns.watch(pipeline, resume_after=token, **options) as stream:
        while seen < m:
            change = await stream.try_next()
            if change is None:
                await asyncio.sleep(POLL_S)
                continue
            seen += 1
    return m / (time.perf_counter() - t0)


async def kafka_alone(settings: Settings, records: list[tuple[bytes, bytes]]) -> float:
    """Records/s of bare aiokafka producing the watcher's records, with its producer settings.

    One batch per partition at a time is filled and handed to ``send_batch``
    (the fastest way aiokafka offers), all in flight at once, acks=all; timed
    from the first record to the last acknowledgement.
    """
    topic = settings.kafka.topic("turns")
    await ensure_topics(settings.kafka, [topic])
    producer = make_watcher_producer(settings.kafka)
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        for partition in partitions:  # warm-up, as for the watcher
            await producer.send_and_wait(topic, b"warm-up", partition=partition)
        partitioner = DefaultPartitioner()
        of_key: dict[bytes, int] = {}
        t0 = time.perf_counter()
        batches: dict[int, Any] = {}
        acks = []
        for key, value in records:
            partition = of_key.get(key)
            if partition is None:
                partition = of_key[key] = partitioner(key, partitions, partitions)
            batch = batches.get(partition) or producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                acks.append(await producer.send_batch(batch, topic, partition=partition))
                batch = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None)
            batches[partition] = batch
        for partition, batch in batches.items():
            acks.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*acks)
        return len(records) / (time.perf_counter() - t0)
    finally:
        await producer.stop()


async def watcher_drain(
    client: AsyncMongoClient[Document], settings: Settings, token: dict[str, Any], m: int
) -> float:
    db = client[settings.mongodb.database]
    topic = settings.kafka.topic("turns")
    await db[CHECKPOINTS].delete_many({})
    await db[CHECKPOINTS].insert_one({"_id": token_id(topic), "token": token})
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, [STAGE]))
    producer = make_watcher_producer(settings.kafka)
    await producer.start()
    try:
        # Warm-up outside the timing: the new topic's metadata and a first
        # produce to each partition (this throw-away topic is never consumed).
        for partition in sorted(await producer.partitions_for(topic)):
            await producer.send_and_wait(topic, b"warm-up", partition=partition)
        watcher = ChangeStreamWatcher(db, producer, settings.kafka, settings.stm)
        stop = asyncio.Event()
        t0 = time.perf_counter()
        task = asyncio.create_task(watcher.run(stop))
        while not task.done():
            if watcher.published >= m:
                break
            await asyncio.sleep(0.002)
        stop.set()
        await task  # the final flush: acks and checkpoint included
        elapsed = time.perf_counter() - t0
    finally:
        await producer.stop()
    if watcher.published != m:
        raise RuntimeError(f"watcher published {watcher.published}, expected {m}")
    return m / elapsed


async def p2(
    client: AsyncMongoClient[Document], base: Settings, m: int, rounds: int
) -> dict[str, Any]:
    settings = base.model_copy(
        update={"mongodb": base.mongodb.model_copy(update={"database": f"bench-p2-{m}"})}
    )
    records: list[tuple[bytes, bytes]] = []
    token = await prepare_backlog(client, settings, m, sessions=200, records=records)
    raw_rates: list[float] = []
    projected_rates: list[float] = []
    kafka_rates: list[float] = []
    watcher_rates: list[float] = []
    kafka_settings = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"topic_prefix": "bench.p2.kafka"})}
    )
    watcher_settings = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"topic_prefix": "bench.p2.watcher"})}
    )
    for settings_ in (kafka_settings, watcher_settings):
        await ensure_topics(settings_.kafka, pipeline_topics(settings_.kafka, [STAGE]))
    for r in range(rounds + 1):  # round 0 warms both servers up and is not counted
        rates = (
            await raw_read(client, settings, token, m),
            await raw_read(client, settings, token, m, as_watcher=True),
            await kafka_alone(kafka_settings, records),
            await watcher_drain(client, watcher_settings, token, m),
        )
        if r:
            for rates_, rate in zip(
                (raw_rates, projected_rates, kafka_rates, watcher_rates), rates, strict=True
            ):
                rates_.append(rate)
    await client.drop_database(settings.mongodb.database)
    return {
        "raw": raw_rates,
        "projected": projected_rates,
        "kafka": kafka_rates,
        "watcher": watcher_rates,
        "batch_max": settings.stm.watcher_batch_max,
        "m": m,
        "rounds": rounds,
    }


async def p2_live(client: AsyncMongoClient[Document], base: Settings, m: int) -> dict[str, float]:
    """Both readers at once on live traffic: 8 writers ``record_turn`` as fast as they can.

    Rate = turns / (first write → the reader has everything; for the watcher:
    published and acknowledged, checkpoint stored).
    """
    settings = base.model_copy(
        update={
            "mongodb": base.mongodb.model_copy(update={"database": "bench-p2-live"}),
            "kafka": base.kafka.model_copy(update={"topic_prefix": "bench.p2.live"}),
        }
    )
    db = client[settings.mongodb.database]
    await client.drop_database(db.name)
    stm = ShortTermMemory(db)
    await stm.ensure_indexes()
    contents = texts(m, seed=8)
    topic = settings.kafka.topic("turns")
    await ensure_topics(settings.kafka, pipeline_topics(settings.kafka, [STAGE]))
    producer = make_watcher_producer(settings.kafka)
    await producer.start()
    done: dict[str, float] = {}
    try:
        for partition in sorted(await producer.partitions_for(topic)):
            await producer.send_and_wait(topic, b"warm-up", partition=partition)
        watcher = ChangeStreamWatcher(db, producer, settings.kafka, settings.stm)
        stop = asyncio.Event()
        watching = asyncio.create_task(watcher.run(stop))
        stream = await db[TURNS].watch(WATCH_PIPELINE)
        marker = session_key("bench", "user", "marker")
        await stm.record_turn(marker, "user", "marker")  # both readers are live once seen
        # Polling counters owned by the watcher; an Event would need a hook in it.
        while watcher.published < 1 or await stream.try_next() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.005)

        async def raw_reader() -> None:
            seen = 0
            while seen < m:
                change = await stream.try_next()
                if change is None:
                    await asyncio.sleep(POLL_S)
                    continue
                seen += 1
            done["raw"] = time.perf_counter()

        async def watcher_done() -> None:
            while watcher.published < m + 1:  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            stop.set()
            await watching
            done["watcher"] = time.perf_counter()

        async def writer(w: int) -> None:
            for i in range(m // 8):
                key = session_key("bench", f"u{w}", f"s{i % 5}")  # 40 sessions in all
                n = w * (m // 8) + i
                await stm.record_turn(key, "user", contents[n], tool_call(n))

        t0 = time.perf_counter()
        readers = [asyncio.create_task(raw_reader()), asyncio.create_task(watcher_done())]
        await asyncio.gather(*(writer(w) for w in range(8)))
        written = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*readers), 120)
        await stream.close()
    finally:
        await producer.stop()
    await client.drop_database(db.name)
    return {
        "write": m / (written - t0),
        "raw": m / (done["raw"] - t0),
        "watcher": m / (done["watcher"] - t0),
    }


def report(
    command: str,
    servers: str,
    n: int,
    live_m: int,
    r1: dict[str, float],
    r2s: list[dict[str, Any]],
    live: dict[str, float],
) -> str:
    raw50, raw99 = r1["raw_p50_ms"], r1["raw_p99_ms"]
    live_ratio = live["watcher"] / live["raw"]
    ratios = {
        r2["m"]: statistics.median(r2["watcher"]) / statistics.median(r2["raw"]) for r2 in r2s
    }
    sustained = max(ratios)  # the largest backlog

    def row(name: str, key: str) -> str:
        p50, p99 = r1[f"{key}_p50_ms"], r1[f"{key}_p99_ms"]
        return (
            f"| {name} | {p50:.3f} | {p99:.3f} | {r1[f'{key}_mean_ms']:.3f} "
            f"| {p50 / raw50:.2f}× | {p99 / raw99:.2f}× |"
        )

    warm50, warm99 = r1["warm_p50_ms"] / raw50, r1["warm_p99_ms"] / raw99
    summary = "\n".join(
        f"| {m:,} | {ratio:.2f}× | {_ok(ratio >= 0.8)} |" for m, ratio in sorted(ratios.items())
    )
    sections = "\n".join(_p2_section(r2) for r2 in r2s)
    return f"""# Benchmark: short-term memory and the watcher (P1, P2)

Command (from the repository root):

    {command}

Run {datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")} on {platform.machine()},
{platform.python_version()}, {_cpus()} CPUs shared with other work (load average
at the end: {_load()}).
Servers (started by the benchmark, loopback): {servers}.

## P1 — `record_turn` latency vs raw `insert_one` (n = {n} each, interleaved)

| write | p50 ms | p99 ms | mean ms | p50 / raw | p99 / raw |
|---|---|---|---|---|---|
{row("raw `insert_one` of the same document", "raw")}
{row("`record_turn`, session known to the process", "warm")}
{row("`record_turn`, cold cache (reads last seq first)", "cold")}

Goal p50 ≤ 1.3×, p99 ≤ 2× (usual case): p50 {warm50:.2f}× {_ok(warm50 <= 1.3)},
p99 {warm99:.2f}× {_ok(warm99 <= 2.0)}. The cold-cache case (the first write of a process to
an existing session, sessions of ~{n // 100} turns) costs a second round trip by
design: the last seq is read, then the insert allocates the next.
mongo-java-server does not use the compound index for that sorted read and
scans the collection, so it grows with the collection; MongoDB answers it
with one seek in the unique index.

## P2 — watcher turns/s into Kafka vs raw change-stream read

| backlog (turns, 200 sessions) | watcher / raw (medians) | goal ≥ 0.8× |
|---|---|---|
{summary}

P2 asks for the *sustained* rate: on the largest backlog, **{ratios[sustained]:.2f}×**.
Each backlog is drained from the same resume token by every reader in turn,
{r2s[0]["rounds"]} measured rounds after one unmeasured warm-up round. The watcher pays
costs the raw reader does not, once per drain: the stream opens with a first
batch of {READ_BATCH} changes before anything is published, and the drain ends with a
final flush — Kafka acknowledging the last batches, then one checkpoint with
every session's mark. Those weigh on a short drain and fade on a long one.
The raw reader sets no batch size, and mongo-java-server answers its first
request with the whole backlog in one batch: one pass of the server, then one
decode, with nothing to overlap.

{sections}
Backlog drain is the watcher's ceiling. The watcher reads ahead in its own
task (the next server batch of {READ_BATCH} changes is requested while the current
one is published) and asks only for the resume token and the turn. Each
turn is checked and encoded (the fast path of `mongomem.stages.watcher_encode`) into
one open batch per partition; a flush (acks=all, then the checkpoint) is due
after {r2s[0]["batch_max"]} turns, but waits while Kafka has not acknowledged the previous
flush, so a backlog leaves in few large requests, compressed with zstd
(`MONGOMEM_KAFKA_COMPRESSION`). What remains is CPU: the Python process
(BSON decode, the per-turn check and JSON encoding, compression, aiokafka's
batches), the Kafka broker and mongo-java-server share the machine's cores,
while the raw reader needs only the first and the last.

### P2, live: both readers at once while 8 writers call `record_turn` (40 sessions)

| | turns/s (first write → reader has all {live_m}) |
|---|---|
| writers (`record_turn`, 8 concurrent) | {live["write"]:,.0f} |
| raw change stream | {live["raw"]:,.0f} |
| watcher (published, acknowledged, checkpointed) | {live["watcher"]:,.0f} |

Ratio watcher / raw on live traffic = **{live_ratio:.2f}×** (goal ≥ 0.8×:
{_ok(live_ratio >= 0.8)}): the watcher keeps up with the write rate. Writers,
both readers and the watcher share one Python process here (in production
the watcher is its own process), so the absolute write rate is CPU-bound and
lower than P1 suggests.
"""


def _p2_section(r2: dict[str, Any]) -> str:
    m = r2["m"]
    raw_rate = statistics.median(r2["raw"])
    watcher_rate = statistics.median(r2["watcher"])
    projected_rate = statistics.median(r2["projected"])
    kafka_rate = statistics.median(r2["kafka"])
    # If reading and publishing cost the machine what they cost apart, and the one
    # has to wait for the other, their times add up:
    added = 1 / (1 / raw_rate + 1 / kafka_rate)

    def rounds(key: str) -> str:
        return ", ".join(f"{x:,.0f}" for x in r2[key])

    return f"""### Backlog of {m:,} turns

| reader | rounds (turns/s) | median turns/s |
|---|---|---|
| raw change stream (`try_next` loop, from the same token) | {rounds("raw")} | {raw_rate:,.0f} |
| watcher (decode, publish acks=all, checkpoint) | {rounds("watcher")} | {watcher_rate:,.0f} |
| *extra row, not the goal's baseline:* raw `try_next` loop with the watcher's pipeline \
(`$project` to `_id` + `fullDocument`) and batch size ({READ_BATCH}) | {rounds("projected")} \
| {projected_rate:,.0f} |
| *extra row:* Kafka alone — bare aiokafka `send_batch` of the watcher's {m} records \
(same bytes, keys and producer settings, acks=all) | {rounds("kafka")} | {kafka_rate:,.0f} |

Ratio watcher / raw = **{watcher_rate / raw_rate:.2f}×**; against the extra read row
{watcher_rate / projected_rate:.2f}×. Reading the backlog (first row) and publishing it
(Kafka alone) take {m / raw_rate:.2f} s and {m / kafka_rate:.2f} s apart; done one after the
other they would give {added:,.0f} turns/s, and the watcher reaches
{watcher_rate / added:.2f}× of that.
"""


def _ok(good: bool) -> str:
    return "met" if good else "**not met**"


def _cpus() -> int:
    return os.cpu_count() or 0


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


async def run(
    n: int, sizes: list[int], rounds: int, live: int, servers_desc: str, settings: Settings
) -> str:
    client = connect(settings.mongodb)
    try:
        # Live first: mongo-java-server's change streams scan its oplog, which
        # only grows during the run (it never truncates it).
        live_rates = await p2_live(client, settings, live)
        r1 = await p1(client, n)
        r2s = [await p2(client, settings, m, rounds) for m in sizes]
    finally:
        await client.close()
    command = (
        f".venv/bin/python -m bench.stm_watcher --turns {n} "
        f"--backlog {','.join(map(str, sizes))} --rounds {rounds} --live {live}"
    )
    return report(command, servers_desc, n, live, r1, r2s, live_rates)


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",")]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("backlog sizes are positive integers")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="P1 writes per variant")
    parser.add_argument(
        "--backlog", type=_sizes, default=[10_000, 30_000], help="P2 backlog sizes, comma list"
    )
    parser.add_argument("--rounds", type=int, default=5, help="P2 measured rounds per reader")
    parser.add_argument("--live", type=int, default=2400, help="P2 live turns (8 writers)")
    args = parser.parse_args(argv)
    base = load_settings()
    servers = start_servers(base, for_tests=True)
    try:
        settings = load_settings(
            mongodb=MongoSettings(uri=servers.mongodb_uri, database="bench"),
            kafka=KafkaSettings(
                bootstrap=servers.kafka_bootstrap, topic_prefix="bench", partitions=6
            ),
        )
        text = asyncio.run(
            run(
                args.turns,
                args.backlog,
                args.rounds,
                args.live - args.live % 8,
                servers.describe().replace("\n", "; "),
                settings,
            )
        )
    finally:
        servers.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
