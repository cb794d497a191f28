"""P3 and P4: the windowing stage against a raw consume loop, and its idle-close latency.

``python -m bench.windowing`` starts its own servers (as the tests do) and
writes ``bench/results/windowing.md``.

* **P3** sustained turns/s: the windowing stage (default aiokafka engine:
  consumer group, table + changelog, snapshot upserts in MongoDB — no
  per-turn lineage write —, snapshot published with acks=all; and the faust engine for
  comparison) draining a backlog of turns, against a raw aiokafka consume
  loop over the same topic in its own group (the median of three), in the
  same run. Both are timed from their first records to their last (the stage: from its
  first batch planned to its last turn applied, :class:`DrainClock`). A third
  row measures the MongoDB server alone doing the writes the stage makes
  for this backlog (the snapshot upserts, as bare ``bulk_write`` calls, in the
  stage's shape and two others; the fastest is the row), into a collection with
  the stage's lineage index (the stage's sink creates it: the server keeps it up
  on every insert): the ceiling that the
  database sets on the stage, and issue 28's goal (the stage ≥ 0.7× of it). A
  fourth row has both servers alone do most of the stage's traffic with them at
  once (the backlog fetched, those upserts, and the snapshots published as the
  stage publishes them; not the changelog's states): on CPUs of their own, what
  bounds any stage. A fifth runs the stage's
  own work alone on the same records — windower, batch pipelines, changelog
  table and the snapshots' bytes and documents, over the runtime's in-memory
  broker, no server — the ceiling that the stage's own code sets. Its own work
  is run three times (the median), as the raw loop is, and
  the share of the stage's drain that its process spent on a CPU is reported.
  The stage's drains and the bare rows run in :data:`ROUNDS` rounds (a drain, then
  MongoDB alone and both servers alone in each shape), after :data:`WARM_UP_DRAINS`
  drains that are not counted; the goal's ratio is the median of the rounds' ratios
  (the servers' rows' likewise), and each drain
  writes into a database of its own, so that its upserts insert, as MongoDB
  alone's do. ``--cores`` (:mod:`bench.cores`): by default P3 runs with the
  servers on one half of the CPUs and this process on the other, as separate
  machines would have them (the goal's rows), then again with every CPU shared.
  ``--only p3`` runs P3 alone (``bench/results/windowing_p3.md``); ``--phases N`` puts
  the backlog's sessions at N phases instead of in step (its closings spread over the
  backlog; written beside, ``windowing_p3_phasesN.md``); ``--no-faust``
  leaves the faust engine's row out (it applies one record at a time: a minute here).
* **P4** time from a session's last turn (its ``created_at``) to its idle
  snapshot arriving on the snapshots topic, for many sessions that go quiet
  at staggered moments, with the stage live. The benchmark writes the turns
  onto the topic itself and stands in for a caught-up watcher with a
  watermark every ``--watermark-interval`` s
  (:func:`mongomem.testing.watermarks.watermarks_every`: never past a send
  not yet acknowledged).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import statistics
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple
from unittest import mock

import bson
from aiokafka import AIOKafkaConsumer, TopicPartition
from pymongo import ReplaceOne

from bench.cores import CoreSplit, core_split
from bench.prose import texts
from bench.threads import thread_ticks
from mongomem.adapters.kafka import SNAPSHOTS, TURNS, DeadLetter, ensure_topics, make_producer
from mongomem.adapters.mongo import TURNS as TURNS_COLLECTION
from mongomem.adapters.mongo import connect
from mongomem.codec import decode, encode
from mongomem.erasure.register import NOT_ERASED_TTL_S
from mongomem.local.infra import start_servers
from mongomem.models import Role, SessionKey, Snapshot, Turn, utcnow
from mongomem.settings import (
    KafkaSettings,
    MongoSettings,
    Settings,
    WindowingSettings,
    load_settings,
)
from mongomem.stages.runtime import Record, consume
from mongomem.stages.runtime.kafka import kafka_publisher
from mongomem.stages.runtime.memory import MemoryBroker, MemoryPublisher, MemorySource
from mongomem.stages.windowing import Policies, SnapshotWindower, WindowingWorker
from mongomem.stages.windowing.consumer import (
    IN_FLIGHT,
    MAX_POLL_RECORDS,
    ChangelogCommits,
    ChangelogTable,
    WindowingCore,
)
from mongomem.stages.windowing.sinks import UPSERTS_PER_WRITE, snapshot_document, snapshot_key
from mongomem.stages.windowing.snapshot_encode import snapshot_encoded, snapshot_value
from mongomem.stages.windowing.windower import PLAN_SLICE, PlannedBatch
from mongomem.stages.windowing.worker import (
    ERASED_CHECK_TTL_S,
    PRODUCER_BATCH_BYTES,
    YOUNG_OBJECTS,
    settle_heap,
)
from mongomem.stm.lineage import ensure_lineage_index
from mongomem.testing.watermarks import InFlight, watermarks_every

RESULTS = Path(__file__).resolve().parent / "results" / "windowing.md"
#: Where a run of one of P3, P4 (``--only``) writes its report, beside :data:`RESULTS`.
ONLY_RESULTS = "windowing_{}.md"
PARTITIONS = 3
#: P3's drains of the stage before the ones it counts (they warm the servers' JVMs up).
WARM_UP_DRAINS = 3
#: P3's rounds: a drain of the stage, then MongoDB alone and both servers alone in each
#: shape (:data:`MONGO_SHAPES`). Nine: one run's rounds' ratios spread from 0.3x to 0.9x (the
#: servers' JVMs collect and compile in some runs and not others), and five left the median
#: of them moving by a tenth between runs of the same code.
ROUNDS = 9
#: Turn texts (:mod:`bench.prose`): they compress as conversation text does.
CONTENTS = texts(4096)


#: The servers' processes whose CPU time P3 reports, by name (``mongo``, ``kafka``); empty
#: when they are not local processes (containers).
Pids = Mapping[str, int]


def cpu_seconds(pids: Pids) -> dict[str, float]:
    """CPU time (user + system, in s) used so far: ``"stage"`` is this process (all its
    threads), then each server of ``pids`` whose ``/proc/<pid>/stat`` can be read (Linux)."""
    out = {"stage": time.process_time()}
    hz = os.sysconf("SC_CLK_TCK")
    for name, pid in pids.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[name] = (int(fields[11]) + int(fields[12])) / hz
    return out


def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds between two :func:`cpu_seconds` readings."""
    return {name: after[name] - before[name] for name in after if name in before}


#: A JVM server's threads that are its own housekeeping, not its requests, by the thread
#: names :func:`~bench.threads.thread_ticks` gives: its JIT compilers and its garbage collector.
HOUSEKEEPING = {
    "C1 CompilerThre": "JIT",
    "C2 CompilerThre": "JIT",
    "GC Thread": "GC",
    "G1 Conc": "GC",
    "G1 Refine": "GC",
    "G1 Main Marker": "GC",
    "G1 Service": "GC",
    "VM Thread": "GC",  # safepoint operations: the collector's pauses among them
}


def housekeeping_seconds(pids: Pids) -> dict[str, float]:
    """CPU seconds so far of each server's JIT compiler and GC threads (:data:`HOUSEKEEPING`),
    as ``"<server> JIT"`` and ``"<server> GC"``; :func:`spent` gives what a drain used."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for name, pid in pids.items():
        out.update({f"{name} JIT": 0.0, f"{name} GC": 0.0})
        for thread, ticks in thread_ticks([pid], children=False).values():
            kind = HOUSEKEEPING.get(thread)
            if kind is not None:
                out[f"{name} {kind}"] += ticks / hz
    return out


#: A reading of :class:`DrainClock`: (wall time, CPU by process, servers' housekeeping).
_Reading = tuple[float, dict[str, float], dict[str, float]]


class DrainClock:
    """Times a drain of the stage: from when it is handed its first records to when it
    has applied the last of ``total`` turns, in wall time (``now``) and CPU time
    (:func:`cpu_seconds` of ``pids``).

    :meth:`handed` marks the first batch planned; :meth:`applied` is told the stage's
    count of turns applied, which moves only when a batch is applied (the first one's
    turns at once), so it starts the clock only when no batch was ever planned (the
    faust engine applies record by record).
    """

    def __init__(
        self, total: int, pids: Pids, now: Callable[[], float] = time.perf_counter
    ) -> None:
        self.total = total
        self._pids = pids
        self._now = now
        self.start: _Reading | None = None
        self.end: _Reading | None = None

    def _reading(self) -> _Reading:
        return self._now(), cpu_seconds(self._pids), housekeeping_seconds(self._pids)

    def handed(self) -> None:
        if self.start is None:
            self.start = self._reading()

    def applied(self, turns: int) -> bool:
        """Note the turns applied so far; whether all of them are."""
        if turns and self.start is None:
            self.start = self._reading()
        if turns >= self.total and self.end is None:
            self.end = self._reading()
        return self.end is not None

    def _span(self) -> tuple[_Reading, _Reading]:
        if self.start is None or self.end is None:
            raise RuntimeError("the drain is not over")
        return self.start, self.end

    def elapsed(self) -> float:
        start, end = self._span()
        return end[0] - start[0]

    def rate(self) -> float:
        """Turns/s over the drain."""
        return self.total / self.elapsed()

    def used(self) -> dict[str, float]:
        """CPU seconds used over the drain, by process."""
        start, end = self._span()
        return spent(start[1], end[1])

    def housekeeping(self) -> dict[str, float]:
        """CPU seconds the servers' JIT compilers and collectors used over the drain."""
        start, end = self._span()
        return spent(start[2], end[2])


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def make_turn(session: SessionKey, seq: int) -> Turn:
    return Turn(
        turn_id=Turn.make_id(session.project_id, session.user_id, session.session_id, seq),
        project_id=session.project_id,
        user_id=session.user_id,
        session_id=session.session_id,
        seq=seq,
        role=Role.USER if seq % 2 else Role.ASSISTANT,
        content=CONTENTS[zlib.crc32(f"{session.session_id}/{seq}".encode()) % len(CONTENTS)],
        created_at=utcnow(),
    )


def scoped(base: Settings, name: str, **windowing: Any) -> Settings:
    unique = f"{name}-{uuid.uuid4().hex[:6]}"
    return base.model_copy(
        update={
            "mongodb": MongoSettings(uri=base.mongodb.uri, database=f"bench-{unique}"),
            "kafka": KafkaSettings(
                bootstrap=base.kafka.bootstrap,
                topic_prefix=f"bench.{unique}",
                partitions=PARTITIONS,
            ),
            "windowing": WindowingSettings(**windowing),
        }
    )


def turn_documents(turns: list[Turn]) -> list[dict[str, Any]]:
    docs = []
    for t in turns:
        doc = {"_id": t.turn_id, **t.model_dump(mode="python", exclude={"turn_id"})}
        doc["role"] = str(doc["role"])
        docs.append(doc)
    return docs


def backlog_turns(sessions: int, per_session: int, phases: int = 1) -> Iterator[list[Turn]]:
    """P3's backlog, step by step: at step ``n`` every session whose turn of seq ``n - phase``
    exists sends it, session ``i`` at phase ``i % phases``.

    With ``phases`` = 1 (the default) the sessions move in step — every session's turn of
    seq 1, then of 2, … —, so every session closes its windows with the same turns and half
    of the backlog's snapshots close with its last turns. With more phases the closings
    spread over the backlog, as sessions that started at different times would have them.
    """
    keys = [
        SessionKey(project_id="bench", user_id=f"u{i}", session_id=f"s{i}") for i in range(sessions)
    ]
    for step in range(1, per_session + phases):
        turns = [
            make_turn(key, seq)
            for i, key in enumerate(keys)
            if 1 <= (seq := step - i % phases) <= per_session
        ]
        if turns:
            yield turns


async def backlog(
    settings: Settings, sessions: int, per_session: int, phases: int = 1
) -> list[tuple[bytes, bytes]]:
    """Write ``sessions × per_session`` turns into MongoDB and onto the turns topic, in the
    order of :func:`backlog_turns`.

    Returns the records sent, ``(key, value)`` in the order sent.
    """
    topic = settings.kafka.topic(TURNS)
    await ensure_topics(settings.kafka, [topic, settings.kafka.topic(SNAPSHOTS)])
    client = connect(settings.mongodb)
    producer = make_producer(settings.kafka, linger_ms=20)
    await producer.start()
    try:
        coll = client[settings.mongodb.database][TURNS_COLLECTION]
        records: list[tuple[bytes, bytes]] = []
        for turns in backlog_turns(sessions, per_session, phases):
            await coll.insert_many(turn_documents(turns))
            batch = [(t.session.kafka_key(), encode(t)) for t in turns]
            sent = [await producer.send(topic, value, key=key) for key, value in batch]
            await asyncio.gather(*sent)
            records += batch
    finally:
        await producer.stop()
        await client.close()
    return records


async def raw_consume(settings: Settings, total: int) -> float:
    """Turns/s of a bare aiokafka loop (``getmany``, no decoding) over the same topic.

    Timed from the ``getmany`` call that returned the first records to the last record.
    """
    consumer = AIOKafkaConsumer(
        settings.kafka.topic(TURNS),
        bootstrap_servers=settings.kafka.bootstrap,
        group_id=f"{settings.kafka.topic_prefix}.raw-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        enable_auto_commit=True,
    )
    await consumer.start()
    seen, first = 0, 0.0
    try:
        while seen < total:
            asked = time.perf_counter()
            batch = await consumer.getmany(timeout_ms=500, max_records=500)
            got = sum(len(records) for records in batch.values())
            if got and not first:
                first = asked  # the first fetch's latency counts
            seen += got
        return total / (time.perf_counter() - first)
    finally:
        await consumer.stop()


#: How the "MongoDB alone" row sends the stage's upserts: (upserts per bulk write, writes
#: side by side). The first is how the stage sends them (:data:`UPSERTS_PER_WRITE` a write,
#: a delivery's writes at once, about two partitions' deliveries at a time); the others are
#: shapes that this server may apply faster. The row is the fastest of them.
MONGO_SHAPES: tuple[tuple[int, int], ...] = (
    (UPSERTS_PER_WRITE, 2 * PARTITIONS),
    (33, PARTITIONS),
    (UPSERTS_PER_WRITE, 4 * PARTITIONS),
)


async def _upserts(db: Any, snapshots: list[Snapshot], shape: tuple[int, int]) -> None:
    """The stage's upserts for ``snapshots`` in ``shape``: (upserts per bulk write, writes
    side by side; the next ones start when those are answered)."""
    per_write, side_by_side = shape
    ops = [ReplaceOne({"_id": s.snapshot_id}, snapshot_document(s), upsert=True) for s in snapshots]
    chunks = [ops[i : i + per_write] for i in range(0, len(ops), per_write)]
    for i in range(0, len(chunks), side_by_side):
        await asyncio.gather(
            *(db["snapshots"].bulk_write(c, ordered=False) for c in chunks[i : i + side_by_side])
        )


async def _ready(db: Any) -> None:
    """A new database for bare writes: connected, its ``snapshots`` with the stage's
    lineage index (the server keeps it up on each insert, as it does for the stage's)."""
    await db.command("ping")
    await ensure_lineage_index(db)


async def raw_mongo_writes(
    settings: Settings,
    snapshots: list[Snapshot],
    total: int,
    shape: tuple[int, int],
    pids: Pids | None = None,
) -> tuple[float, dict[str, float]]:
    """Turns/s of bare ``bulk_write`` calls doing the stage's MongoDB writes for the backlog,
    and the CPU seconds used meanwhile (:func:`cpu_seconds`: this client's process as
    ``"stage"``, and the servers of ``pids``; with their JIT compilers' and collectors',
    :func:`housekeeping_seconds`).

    The stage writes one snapshot upsert per snapshot and nothing to the turns
    (lineage is the snapshot's seq range, :mod:`mongomem.stm.lineage`), in
    ``shape`` (:func:`_upserts`) into a database of their own, whose ``snapshots`` have the
    lineage index the stage's sink creates (:func:`_ready`). The client is
    connected before the clock starts; timed from the first write to the last reply.
    """
    client = connect(settings.mongodb)
    name = f"{settings.mongodb.database}-raw"
    try:
        await _ready(client[name])
        before = cpu_seconds(pids or {}) | housekeeping_seconds(pids or {})
        started = time.perf_counter()
        await _upserts(client[name], snapshots, shape)
        elapsed = time.perf_counter() - started
        after = cpu_seconds(pids or {}) | housekeeping_seconds(pids or {})
        return total / elapsed, spent(before, after)
    finally:
        await client.drop_database(name)
        await client.close()


async def raw_servers(
    settings: Settings,
    snapshots: list[Snapshot],
    total: int,
    shape: tuple[int, int],
    pids: Pids | None = None,
) -> tuple[float, dict[str, float]]:
    """Turns/s of both servers alone doing the stage's traffic with them, at once: the
    backlog fetched (a bare consumer, partitions assigned, no group; polls of the stage's
    size), the MongoDB upserts (``shape``) and the snapshots published as the stage
    publishes them (its producer settings; acks=all). Not done: the changelog's states
    (a fifth of the stage's produced bytes here). No stage work: the snapshots' bytes are
    built before the clock starts. Timed from the first request to the last reply; also
    returns the CPU seconds used meanwhile (as :func:`raw_mongo_writes` does).
    """
    topic = settings.kafka.topic(SNAPSHOTS)
    values = [(snapshot_value(s), snapshot_key(s)) for s in snapshots]
    client = connect(settings.mongodb)
    name = f"{settings.mongodb.database}-raw"
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka.bootstrap, enable_auto_commit=False
    )
    try:
        await consumer.start()
        turns = settings.kafka.topic(TURNS)
        consumer.assign([TopicPartition(turns, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        async with kafka_publisher(
            settings.kafka, linger_ms=0, max_batch_size=PRODUCER_BATCH_BYTES
        ) as publisher:
            await _ready(client[name])
            await (await publisher.send(topic, b"warm-up", key=b"bench"))  # connected, metadata

            async def publish() -> None:
                sent = [await publisher.send(topic, value, key=key) for value, key in values]
                await asyncio.gather(*sent)

            async def fetch() -> None:
                seen = 0
                while seen < total:
                    batch = await consumer.getmany(timeout_ms=500, max_records=MAX_POLL_RECORDS)
                    seen += sum(len(records) for records in batch.values())

            before = cpu_seconds(pids or {})
            started = time.perf_counter()
            await asyncio.gather(fetch(), publish(), _upserts(client[name], snapshots, shape))
            elapsed = time.perf_counter() - started
            return total / elapsed, spent(before, cpu_seconds(pids or {}))
    finally:
        await consumer.stop()
        await client.drop_database(name)
        await client.close()


class _BuiltSnapshots:
    """The snapshot sink's own work without a server: each snapshot's MongoDB document
    (as BSON, which the driver would send) and its bytes, published to the in-memory broker."""

    def __init__(self, publisher: MemoryPublisher, topic: str) -> None:
        self._publisher = publisher
        self._topic = topic

    async def deliver(self, snapshot: Snapshot) -> None:
        await self.deliver_many([snapshot])

    async def deliver_many(self, snapshots: Sequence[Snapshot]) -> None:
        encoded = [snapshot_encoded(s) for s in snapshots]  # as the sink does
        for _, document in encoded:
            bson.encode(document)
        sent = [
            await self._publisher.send(self._topic, value, key=snapshot_key(s))
            for s, (value, _) in zip(snapshots, encoded, strict=True)
        ]
        await asyncio.gather(*sent)


class _NoDeadLetters:
    async def send(self, letter: DeadLetter, key: bytes | None) -> None:
        raise AssertionError(f"the backlog holds no poison message: {letter}")


class _CommittedToEnd:
    """A record source that tells (:attr:`ended`) when every partition is committed to
    ``ends``."""

    def __init__(self, source: MemorySource, ends: dict[int, int]) -> None:
        self._source = source
        self.topic = source.topic
        self._left = {p: end for p, end in ends.items() if end > 0}
        self.ended = asyncio.Event()
        if not self._left:
            self.ended.set()

    async def poll(self, max_records: int, timeout_s: float) -> Mapping[int, Sequence[Record]]:
        return await self._source.poll(max_records, timeout_s)

    def lag(self) -> Mapping[int, int]:
        return self._source.lag()

    async def commit(self, offsets: Mapping[int, int]) -> bool:
        committed = await self._source.commit(offsets)
        for p, offset in offsets.items():
            if self._left.get(p, offset + 1) <= offset:
                del self._left[p]
        if not self._left:
            self.ended.set()
        return committed


async def own_work(settings: Settings, records: list[tuple[bytes, bytes]]) -> float:
    """Turns/s of the stage's own work on the backlog, with no server and no client library.

    The same windower, batch pipelines (one per partition, batches of up to
    ``MAX_POLL_RECORDS`` per poll), changelog table and loop (the runtime's
    ``consume()`` with the windowing core) as the default engine, over the
    same records held in the runtime's in-memory broker
    (:mod:`mongomem.stages.runtime.memory`, a stand-in for Kafka); the sink
    builds each snapshot's document (BSON) and bytes and publishes them there.
    Not done: the erasure-register reads, the network, the Kafka and MongoDB
    clients' work. Timed from the start to the commit of the last record (which
    follows its changelog write).
    """
    broker = MemoryBroker(PARTITIONS)
    for key, value in records:
        broker.append("turns", value, key=key)
    publisher = broker.publisher()
    table = ChangelogTable(publisher, "changelog", broker)
    windower = SnapshotWindower(
        store=table,
        sink=_BuiltSnapshots(publisher, "snapshots"),
        policies=Policies(settings.windowing),
        dead_letters=_NoDeadLetters(),
        topic="turns",
    )
    core = WindowingCore(windower, table)
    await core.assign(list(range(PARTITIONS)))
    ends = broker.end_offsets("turns")
    watched = _CommittedToEnd(broker.source("turns", "bench"), ends)
    source = ChangelogCommits(watched, table, interval_s=1.0, ends=ends.__getitem__)
    stop = asyncio.Event()
    settle_heap()  # as `mongomem run windowing` does before the stage starts
    started = time.perf_counter()
    loop = asyncio.create_task(
        consume(
            source,
            core,
            publisher=publisher,
            kafka=settings.kafka,
            stop=stop,
            max_records=MAX_POLL_RECORDS,
            poll_timeout_s=0,
            in_flight=IN_FLIGHT,
        )
    )

    # committed up to the end: every batch applied and the changelog acknowledged
    ended = asyncio.ensure_future(watched.ended.wait())
    await asyncio.wait([ended, loop], return_when=asyncio.FIRST_COMPLETED)
    elapsed = time.perf_counter() - started
    stop.set()
    await loop
    assert windower.stats.turns == len(records), windower.stats
    return len(records) / elapsed


#: Bare runs per shape: (turns/s, CPU seconds used meanwhile), one per round.
Runs = dict[tuple[int, int], list[tuple[float, dict[str, float]]]]
#: A drain of the stage: (turns/s, snapshots, share on a CPU, CPU seconds, the servers'
#: housekeeping CPU seconds: :meth:`DrainClock.housekeeping`).
Drain = tuple[float, list[Snapshot], float, dict[str, float], dict[str, float]]


async def windowing_drain(
    settings: Settings,
    total: int,
    engine: Literal["aiokafka", "faust"],
    pids: Pids | None = None,
) -> Drain:
    """Turns/s of the stage over the backlog, in a consumer group and a MongoDB database of
    its own (dropped after).

    The clock starts when the stage is handed its first records (its first batch planned;
    the faust engine's first record applied) and stops when the stage has applied the last.
    Counting from the first batch *applied* instead left that batch's work out of the time
    but not its turns out of the count: with polls of a third of the backlog, the rate
    came out 1.6 times as high.

    Also returns the snapshots closed, the share of that time the process
    was on a CPU (:func:`time.process_time`; the servers are other processes),
    the CPU seconds of that time (:func:`cpu_seconds`: the stage's process, and
    the servers of ``pids``), and how much of the servers' were their JIT compilers and
    collectors (:func:`housekeeping_seconds`).
    """
    suffix = f".bench-{engine}-{uuid.uuid4().hex[:6]}"
    # a database of its own: its upserts insert, as MongoDB alone's do (not replace)
    database = f"{settings.mongodb.database}{suffix.replace('.', '-')}"
    settings = settings.model_copy(
        update={"mongodb": MongoSettings(uri=settings.mongodb.uri, database=database)}
    )
    closed: list[Snapshot] = []
    settle_heap()  # as `mongomem run windowing` does before the stage starts
    worker = WindowingWorker(
        settings, group_suffix=suffix, engine=engine, on_snapshot=closed.append
    )
    clock = DrainClock(total, pids or {})
    plan_batch = SnapshotWindower.plan_batch

    async def planned(windower: SnapshotWindower, *args: Any, **kwargs: Any) -> PlannedBatch:
        clock.handed()
        return await plan_batch(windower, *args, **kwargs)

    task = asyncio.create_task(worker.run())
    try:
        with mock.patch.object(SnapshotWindower, "plan_batch", planned):
            while not clock.applied(worker.windower.stats.turns if worker.windower else 0):
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
        used = clock.used()
        return clock.rate(), closed, used["stage"] / clock.elapsed(), used, clock.housekeeping()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        client = connect(settings.mongodb)
        try:
            await client.drop_database(database)
        finally:
            await client.close()


class Row(NamedTuple):
    """A row of bare runs: the fastest shape by its median."""

    rate: float  # that shape's median turns/s
    shapes: dict[tuple[int, int], float]  # every shape's median
    runs: list[tuple[float, dict[str, float]]]  # that shape's runs, round by round
    paired: list[float]  # the rounds' ratios stage / that shape, sorted
    cpu: dict[str, float]  # the CPU seconds of its median run


def _fastest(runs: Runs, drains: list[Drain]) -> Row:
    shapes = {shape: statistics.median(r for r, _ in done) for shape, done in runs.items()}
    best = max(shapes, key=shapes.__getitem__)
    paired = sorted(d[0] / w[0] for d, w in zip(drains, runs[best], strict=True))
    _, used = sorted(runs[best], key=lambda run: run[0])[len(runs[best]) // 2]
    return Row(shapes[best], shapes, runs[best], paired, used)


async def p3(
    base: Settings,
    sessions: int,
    per_session: int,
    *,
    phases: int = 1,
    faust: bool = True,
    pids: Pids | None = None,
    split: CoreSplit | None = None,
) -> dict[str, Any]:
    """P3's rows (see the module docstring); ``faust=False`` leaves the faust engine's out;
    ``pids``: the servers whose CPU time is reported beside the stage's; ``split``: the
    CPU split in force while it runs (the caller's to apply), named in the report."""
    settings = scoped(base, "p3", max_messages=20, idle_timeout_s=3600)
    records = await backlog(settings, sessions, per_session, phases)
    total = len(records)
    raws = sorted([await raw_consume(settings, total) for _ in range(3)])
    # Drains not counted warm the servers up first: the JVMs compile their write paths as they
    # go (mongo-java-server's CPU time for the same upserts falls about fourfold over the
    # first three drains), and the MongoDB-alone rows below run after the drains.
    for _ in range(WARM_UP_DRAINS):
        await windowing_drain(settings, total, "aiokafka", pids)
    # Rounds, each a drain of the stage, then MongoDB alone and both servers alone in each
    # shape, so that a round's rows are measured seconds apart, on a machine whose speed
    # drifts (each drain is a new group that reads the whole backlog again, into a new
    # database).
    drains = []
    mongo_runs: Runs = {s: [] for s in MONGO_SHAPES}
    servers_runs: Runs = {s: [] for s in MONGO_SHAPES}
    for _ in range(ROUNDS):
        drain = await windowing_drain(settings, total, "aiokafka", pids)
        drains.append(drain)
        for shape in MONGO_SHAPES:
            mongo_runs[shape].append(await raw_mongo_writes(settings, drain[1], total, shape, pids))
            servers_runs[shape].append(await raw_servers(settings, drain[1], total, shape, pids))
    mongo, servers = _fastest(mongo_runs, drains), _fastest(servers_runs, drains)
    drains.sort(key=lambda drain: drain[0])
    stage, snapshots, cpu, stage_cpu, housekeeping = drains[len(drains) // 2]
    alones = sorted([await own_work(settings, records) for _ in range(3)])
    on_faust = await windowing_drain(settings, total, "faust", pids) if faust else None
    return {
        "turns": total,
        "phases": phases,
        "raw": raws[1],
        "raws": raws,
        "mongo": mongo.rate,
        "shapes": mongo.shapes,
        "paired": mongo.paired,
        "servers": servers.rate,
        "paired_servers": servers.paired,
        "servers_to_mongo": sorted(
            b[0] / m[0] for b, m in zip(servers.runs, mongo.runs, strict=True)
        ),
        "servers_cpu": servers.cpu,
        "alone": alones[1],
        "alones": alones,
        "stage": stage,
        "stages": [d[0] for d in drains],
        "cpu": cpu,
        "stage_cpu": stage_cpu,
        "housekeeping": housekeeping,
        "mongo_cpu": mongo.cpu,
        "faust": on_faust[0] if on_faust is not None else None,
        "snapshots": len(snapshots),
        "placement": split.describe() if split is not None else None,
        "stage_cores": len(split.own_cpus) if split is not None else None,
        "server_cores": len(split.servers_cpus) if split is not None else None,
    }


async def p4(base: Settings, sessions: int, idle: float, tick: float) -> dict[str, Any]:
    settings = scoped(base, "p4", max_messages=1000, idle_timeout_s=idle)
    topic = settings.kafka.topic(TURNS)
    await ensure_topics(settings.kafka, [topic, settings.kafka.topic(SNAPSHOTS)])
    last_turn: dict[str, datetime] = {}
    arrived: dict[str, float] = {}
    consumer = AIOKafkaConsumer(
        settings.kafka.topic(SNAPSHOTS),
        bootstrap_servers=settings.kafka.bootstrap,
        group_id=f"{settings.kafka.topic_prefix}.observer",
        auto_offset_reset="earliest",
    )
    await consumer.start()

    async def observe() -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for record in records:
                    snap = decode(record.value, Snapshot)
                    arrived.setdefault(snap.session_id, now)

    producer = make_producer(settings.kafka)
    await producer.start()
    worker = WindowingWorker(settings)
    task = asyncio.create_task(worker.run())
    observer = asyncio.create_task(observe())
    rng = random.Random(7)
    in_flight = InFlight()  # a watermark follows every turn created before it
    try:
        await asyncio.wait_for(worker.started.wait(), 60)
        await asyncio.sleep(2)  # partitions assigned

        async def session_life(i: int) -> None:
            key = SessionKey(project_id="bench", user_id=f"u{i}", session_id=f"s{i}")
            await asyncio.sleep(rng.uniform(0, 2 * idle))
            for seq in range(1, 4):
                with in_flight.sending():
                    turn = make_turn(key, seq)
                    await producer.send_and_wait(topic, encode(turn), key=key.kafka_key())
                last_turn[key.session_id] = turn.created_at
                await asyncio.sleep(rng.uniform(0, idle / 4))

        async with watermarks_every(producer, topic, tick, in_flight):
            await asyncio.gather(*(session_life(i) for i in range(sessions)))
            for _ in range(int((idle + tick + 30) / 0.1)):
                if len(arrived) >= sessions:
                    break
                await asyncio.sleep(0.1)
    finally:
        for t in (observer, task):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await producer.stop()
        await consumer.stop()
    delays = [arrived[s] - last_turn[s].timestamp() for s in last_turn if s in arrived]
    return {
        "sessions": sessions,
        "closed": len(delays),
        "p50": percentile(delays, 50),
        "p95": percentile(delays, 95),
        "p99": percentile(delays, 99),
        "max": max(delays),
        "min": min(delays),
    }


def _runs(rates: list[float]) -> str:
    return ", ".join(f"{r:,.0f}" for r in rates)


def _shape(shape: tuple[int, int]) -> str:
    return f"{shape[0]} upserts a write, {shape[1]} writes at a time"


def housekeeping_text(
    used: Mapping[str, float], housekeeping: Mapping[str, float], alone: Mapping[str, float]
) -> str:
    """What each server's CPU in the stage's drain went to: its JIT compilers, its collector
    and the rest (its requests); for MongoDB, beside the same split of MongoDB alone's."""
    named = {"mongo": "mongo-java-server", "kafka": "the broker"}
    parts = []
    for server in ("mongo", "kafka"):
        if server not in used or f"{server} JIT" not in housekeeping:
            continue
        jit, gc = housekeeping[f"{server} JIT"], housekeeping[f"{server} GC"]
        rest = max(0.0, used[server] - jit - gc)
        part = (
            f"{named[server]} {used[server]:.2f} s: its JIT compilers {jit:.2f} s, its "
            f"collector {gc:.2f} s, the rest (its requests) {rest:.2f} s"
        )
        if server == "mongo" and "mongo" in alone and "mongo JIT" in alone:
            a_jit, a_gc = alone["mongo JIT"], alone["mongo GC"]
            part += (
                f" (MongoDB alone, for the same upserts: {alone['mongo']:.2f} s, {a_jit:.2f} s, "
                f"{a_gc:.2f} s, {max(0.0, alone['mongo'] - a_jit - a_gc):.2f} s)"
            )
        parts.append(part)
    if not parts:
        return ""
    return (
        " The servers' CPU in this drain, by thread (`/proc/<pid>/task`): " + "; ".join(parts) + "."
    )


def _phases(phases: int) -> str:
    if phases == 1:
        return "moving in step (half the snapshots close with the backlog's last turns)"
    return f"at {phases} phases (`--phases`: the closings spread over the backlog)"


def p3_section(r3: dict[str, Any]) -> str:
    """P3's part of the report (also what ``bench.scale`` may quote)."""
    ratio = r3["stage"] / r3["raw"]
    to_store = statistics.median(r3["paired"])
    to_servers = statistics.median(r3["paired_servers"])
    per_turn_us, alone_us = 1e6 / r3["stage"], 1e6 / r3["alone"]
    shapes = "; ".join(f"{_shape(k)}: {v:,.0f}" for k, v in r3["shapes"].items())
    faust = f"{r3['faust']:,.0f}" if r3["faust"] is not None else "not run (`--no-faust`)"
    faust_ratio = (
        f"; faust engine / raw = {r3['faust'] / r3['raw']:.3f}×" if r3["faust"] is not None else ""
    )
    used, alone_used = r3["stage_cpu"], r3["mongo_cpu"]
    stage_s = used["stage"]
    cpu_bound = r3["turns"] / stage_s
    cores = os.cpu_count() or 1
    all_s = sum(used.values())
    cores_bound = r3["turns"] * cores / all_s
    turns = r3["turns"]
    named = {"stage": "the stage's process", "mongo": "the MongoDB server", "kafka": "the broker"}
    parts = ", ".join(f"{named.get(k, k)} {v:.2f} s" for k, v in used.items())
    alone_parts = ", ".join(
        f"{'the client' if k == 'stage' else named.get(k, k)} {v:.2f} s"
        for k, v in alone_used.items()
        if k in ("stage", "mongo")
    )
    goal_s = r3["turns"] / (0.7 * r3["mongo"])
    servers_s = all_s - stage_s
    left_us = max(0.0, cores * goal_s - servers_s) / r3["turns"] * 1e6
    own, theirs = r3["stage_cores"], r3["server_cores"]
    if theirs is not None:
        waiting = "a core (its own: the servers are on other CPUs)"
        budget = (
            f"CPU time of the median drain ({turns / r3['stage']:.2f} s): {parts}. The stage's "
            f"process has {own} CPU of its own: at most {turns * own / stage_s:,.0f} turns/s "
            f"({turns * own / stage_s / r3['mongo']:.2f}× MongoDB alone) if it never waited; "
            f"the servers have {theirs}: at most {turns * theirs / servers_s:,.0f} turns/s for "
            f"what they did in this drain. MongoDB alone used {alone_parts} for the same "
            f"upserts. For 0.7× the drain must take at most {goal_s:.2f} s: the stage's process "
            f"may then use {own * goal_s / turns * 1e6:.1f} µs a turn (it used "
            f"{stage_s / turns * 1e6:.1f}), the servers {theirs * goal_s / turns * 1e6:.1f} µs a "
            f"turn between them (they used {servers_s / turns * 1e6:.1f})."
        )
    else:
        waiting = "a core (shared with both servers and other work: see the load average above)"
        budget = (
            f"CPU time of the median drain ({r3['turns'] / r3['stage']:.2f} s): {parts}; "
            f"{all_s:.2f} s in all, which {cores} cores cannot run in less than "
            f"{all_s / cores:.2f} s — at most {cores_bound:,.0f} turns/s "
            f"({cores_bound / r3['mongo']:.2f}× MongoDB alone) if nothing else ran and nothing "
            f"waited. MongoDB alone used {alone_parts} for the same upserts. "
            f"For 0.7× the drain must take at most {goal_s:.2f} s: {cores} cores give "
            f"{cores * goal_s:.2f} CPU-seconds in that time, the servers took {servers_s:.2f} s of "
            f"them in this drain, which leaves {left_us:.1f} µs a turn for the stage's process "
            f"(it used {stage_s / r3['turns'] * 1e6:.1f})."
        )
    budget += housekeeping_text(used, r3.get("housekeeping", {}), alone_used)
    servers_own = sum(v for k, v in r3["servers_cpu"].items() if k != "stage")
    servers_wall = r3["turns"] / r3["servers"]
    servers_ratio = statistics.median(r3["servers_to_mongo"])
    servers_text = (
        f"Both servers alone reach {servers_ratio:.2f}× MongoDB alone (the median of the rounds' "
        f"ratios: {', '.join(f'{x:.2f}×' for x in r3['servers_to_mongo'])}), the servers on a CPU "
        f"{servers_own:.2f} s of their {servers_wall:.2f} s"
        + (f" ({servers_own / (servers_wall * theirs):.0%} of their {theirs})" if theirs else "")
        + (
            ". With no stage work at all, and only part of the stage's traffic (no changelog, no "
            "erasure-register reads), the servers stay below 0.7× of MongoDB alone on their "
            "CPUs: no stage meets the goal in this placement, and this row is what bounds it."
            if servers_ratio < 0.7
            else "."
        )
    )
    if to_store >= 0.8:
        bound_text = (
            f"MongoDB — the stage reaches {to_store:.2f}× of what the server alone does with "
            "the stage's writes."
        )
    else:
        bound_text = (
            f"the stage reaches {to_store:.2f}× of MongoDB alone and {to_servers:.2f}× of both "
            f"servers alone (the fetch, the upserts and the snapshot publishes at once, no stage "
            "work). "
            f"Its process was on a CPU {r3['cpu']:.0%} of the drain, for "
            f"{stage_s / r3['turns'] * 1e6:.1f} µs a turn: one process of it cannot go past "
            f"{cpu_bound:,.0f} turns/s ({cpu_bound / r3['mongo']:.2f}× MongoDB alone) "
            "however well it overlaps its waits. Its own work alone "
            "(decoding, the window logic, the snapshots' bytes and documents, the changelog "
            f"states; no server, no client library) takes {alone_us:.1f} µs a turn of the "
            f"stage's {per_turn_us:.1f} µs; the other {per_turn_us - alone_us:.1f} µs are the "
            "Kafka and MongoDB clients' work in the same process (aiokafka's fetch parsing, "
            "producer batching and zstd of the snapshots and of the changelog states, "
            "pymongo's BSON) and time off the CPU: waiting for the servers' replies, or for "
            f"{waiting}. " + budget
        )
    return f"""## P3 — windowing turns/s vs a raw aiokafka consume loop and the servers alone

Backlog: {r3["turns"]:,} turns (different texts of {statistics.mean(map(len, CONTENTS)):.0f}
characters on average) in sessions of equal length, {_phases(r3["phases"])},
`max_messages` = 20, so the stage closes {r3["snapshots"]:,} count snapshots while draining. CPUs: \
{r3["placement"] or "shared by the servers and the benchmark's process"}. Each row but the raw
loop runs after {WARM_UP_DRAINS} drains of the stage that are not counted (they warm the
servers' JVMs up).

| reader | turns/s (first record → last) |
|---|---|
| raw aiokafka `getmany` loop (no decoding, own group; median of {_runs(r3["raws"])}) \
| {r3["raw"]:,.0f} |
| **MongoDB alone**: the stage's writes for this backlog as bare `bulk_write`s \
(one snapshot upsert per snapshot, into a collection with the stage's lineage index; \
no write to the turns), the fastest of these shapes (medians of {ROUNDS}): \
{shapes} | {r3["mongo"]:,.0f} |
| both servers alone, at once: the backlog fetched (a bare consumer, no group), those \
upserts, and the snapshots published with the stage's producer settings (acks=all); not the \
changelog's states; the fastest shape, median of {ROUNDS} | {r3["servers"]:,.0f} |
| the stage's own work alone: the same windower, batch pipelines, changelog table and loop \
(the runtime's `consume()`) over the same records in the in-memory broker \
(a stand-in; no server, no client library), \
snapshot documents (BSON) and bytes built; median of {_runs(r3["alones"])} | {r3["alone"]:,.0f} |
| **the stage's CPU bound**: the backlog's turns over the CPU time of the stage's process \
in its median drain ({stage_s:.2f} s) — its rate if it never waited for a server or a \
core | {cpu_bound:,.0f} |
| **windowing stage**, default engine (aiokafka group + changelog table, MongoDB upserts, \
publish acks=all; median of {_runs(r3["stages"])}) | {r3["stage"]:,.0f} |
| windowing stage, `engine="faust"` (faust agent + table, same sinks) | {faust} |

**Goal (issue 28): stage / MongoDB alone = {to_store:.2f}× (≥ 0.7×: \
{"met" if to_store >= 0.7 else "not met"})**: the median of the rounds' ratios \
({", ".join(f"{x:.2f}×" for x in r3["paired"])}; each round a drain of the stage, then MongoDB
alone, in the fastest shape). Stage / both servers alone = {to_servers:.2f}× (the median of
the rounds' ratios likewise). {servers_text}
Stage / raw consume loop = {ratio:.3f}× (goal ≥ 0.5×: \
{"met" if ratio >= 0.5 else "not met"}){faust_ratio}; stage / its own work alone =
{r3["stage"] / r3["alone"]:.2f}×; the stage's process was on a CPU {r3["cpu"]:.0%} of its drain.
**Stage's CPU bound / MongoDB alone = {cpu_bound / r3["mongo"]:.2f}×**: what one stage process
could reach if it never waited.

What bounds the stage: {bound_text}

What the stage sends: one snapshot upsert per snapshot (one per
{r3["turns"] // max(1, r3["snapshots"])} turns here) — lineage costs no write per turn: a
snapshot records its session and first and last seq, and
`mongomem.stm.lineage.snapshot_holding` answers "which snapshot holds turn X" with one read
on the `(project, user, session, last_seq)` index —, each snapshot published once, and each
changed session's window state once per checkpoint to the changelog. A fetched partition
batch is applied to one working window per session; its snapshots go out as unordered
bulk writes of {UPSERTS_PER_WRITE} upserts side by side (this server applies one large
write in series: see the shapes above) with the publishes pipelined in producer batches of
{PRODUCER_BATCH_BYTES:,} bytes; the changelog's states go through a producer of their own (a
producer keeps one request in flight per broker). A batch's planning yields to the event
loop every {PLAN_SLICE} records, so the deliveries in flight read their replies meanwhile.
A checkpoint due while the partitions are behind (the changelog's states sent and
acknowledged, then the offsets committed) runs beside the loop instead of stopping it. The
erasure register (SPEC J3) is read once for a batch's sessions when it is planned; its
delivery, and the next batches of the same sessions, rely on that "not erased" answer for
{ERASED_CHECK_TTL_S} s (an erasure sweeps again
{NOT_ERASED_TTL_S} s + a landing time after writing the register). Turns are read by a
checked fast path (orjson, a session's ids validated once); a snapshot is closed without
re-validating what its turns already passed, and its bytes and document are written
straight from its fields in one pass (orjson: the codec's bytes exactly, property-tested).
The stage's process freezes its startup heap and collects its youngest generation every
{YOUNG_OBJECTS:,} new objects (`settle_heap`). The faust engine still applies one
record at a time.

What a real MongoDB would change: mongo-java-server keeps documents in memory
with no journal; a real `mongod` (WiredTiger, a replica set, which change
streams need) makes each upsert durable, so its "MongoDB alone" row would be
different — not measured here. The stage's own work does not depend on it.
"""


def shared_section(r3: dict[str, Any]) -> str:
    """P3's main rows again with every process on every CPU (after the split run)."""
    stage_s = r3["stage_cpu"]["stage"]
    servers_s = sum(r3["stage_cpu"].values()) - stage_s
    return f"""## P3 with the CPUs shared

The same rows in the same run, with the servers and the benchmark's process all on every CPU
(as P3 ran before the split; a new backlog, {WARM_UP_DRAINS} drains not counted first). Here a
"MongoDB alone" row has the whole machine, which the server never has while the stage runs
beside it.

| row | turns/s |
|---|---|
| MongoDB alone (fastest shape) | {r3["mongo"]:,.0f} |
| the stage's own work alone (no server) | {r3["alone"]:,.0f} |
| the stage's CPU bound (its drain's CPU time, {stage_s:.2f} s) | {r3["turns"] / stage_s:,.0f} |
| windowing stage (median of {_runs(r3["stages"])}) | {r3["stage"]:,.0f} |

Stage / MongoDB alone = {statistics.median(r3["paired"]):.2f}× (the median of the rounds'
ratios); the stage's process was on a CPU \
{r3["cpu"]:.0%} of its drain; the servers used {servers_s:.2f} CPU-s in it.
"""


def p4_section(r4: dict[str, Any], idle: float, tick: float) -> str:
    bound = idle + 1.0
    return f"""## P4 — last turn → idle snapshot on the snapshots topic

{r4["sessions"]} sessions of 3 turns each go quiet at staggered moments;
`idle_timeout_s` = {idle}, a watermark every {tick} s (standing in for a caught-up
watcher, lateness 0). Measured from the last
turn's `created_at` to the snapshot's arrival at a consumer of the snapshots
topic; {r4["closed"]} of {r4["sessions"]} sessions closed.

| min s | p50 s | p95 s | p99 s | max s |
|---|---|---|---|---|
| {r4["min"]:.2f} | {r4["p50"]:.2f} | {r4["p95"]:.2f} | {r4["p99"]:.2f} | {r4["max"]:.2f} |

p99 − idle timeout = {r4["p99"] - idle:.2f} s (goal p99 ≤ idle timeout + 1 s = {bound:.1f} s:
**{"met" if r4["p99"] <= bound else "not met"}**). The floor is the idle timeout
itself; the watermark interval adds up to {tick} s, plus the stage's processing lag (the
watcher's lateness, 2 s by default, adds to this in a deployment).
"""


def report(
    command: str,
    servers: str,
    r3: dict[str, Any] | None,
    r4: dict[str, Any] | None,
    idle: float,
    tick: float,
    shared: dict[str, Any] | None = None,
) -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    parts = [
        p3_section(r3) if r3 is not None else "",
        shared_section(shared) if shared is not None else "",
        p4_section(r4, idle, tick) if r4 else "",
    ]
    which = " and ".join(n for n, r in (("P3", r3), ("P4", r4)) if r is not None)
    return f"""# Benchmark: the windowing stage ({which})

Command (from the repository root):

    {command}

Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python
{platform.python_version()}, {os.cpu_count()} CPUs shared with other work (load
average at the end: {load}).
Servers (started by the benchmark, loopback): {servers}.
Topics have 3 partitions; one windowing worker.

""" + "\n".join(part for part in parts if part)


async def run(
    args: argparse.Namespace, settings: Settings, servers: str, pids: Pids | None = None
) -> str:
    r3 = r4 = shared = None
    split = core_split(pids or {}) if args.cores != "shared" else None
    if args.only in (None, "p3"):
        if split is not None:
            split.apply()
        try:
            r3 = await p3(
                settings,
                args.sessions,
                args.per_session,
                phases=args.phases,
                faust=args.faust,
                pids=pids,
                split=split,
            )
        finally:
            if split is not None:
                split.share()
        if split is not None and args.cores == "both":
            shared = await p3(
                settings,
                args.sessions,
                args.per_session,
                phases=args.phases,
                faust=False,
                pids=pids,
            )
    if args.only in (None, "p4"):
        r4 = await p4(settings, args.idle_sessions, args.idle, args.tick)
    command = (
        f".venv/bin/python -m bench.windowing --sessions {args.sessions} "
        f"--per-session {args.per_session} --idle-sessions {args.idle_sessions} "
        + (f"--phases {args.phases} " if args.phases != 1 else "")
        + f"--idle {args.idle} --watermark-interval {args.tick}"
        + (f" --only {args.only}" if args.only else "")
        + ("" if args.faust else " --no-faust")
        + ("" if args.cores == "both" else f" --cores {args.cores}")
    )
    return report(command, servers, r3, r4, args.idle, args.tick, shared)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500, help="P3 sessions in the backlog")
    parser.add_argument("--per-session", type=int, default=40, help="P3 turns per session")
    parser.add_argument(
        "--phases",
        type=_positive,
        default=1,
        help="P3 sessions at this many phases (1: all in step; 20: closings spread)",
    )
    parser.add_argument("--idle-sessions", type=int, default=200, help="P4 sessions")
    parser.add_argument("--idle", type=float, default=2.0, help="P4 idle timeout (s)")
    parser.add_argument(
        "--watermark-interval", dest="tick", type=float, default=0.5, help="P4 watermarks every (s)"
    )
    parser.add_argument(
        "--only", choices=("p3", "p4"), help=f"run one of them (written to {ONLY_RESULTS})"
    )
    parser.add_argument(
        "--no-faust", dest="faust", action="store_false", help="P3 without the faust engine's row"
    )
    parser.add_argument(
        "--cores",
        choices=("both", "split", "shared"),
        default="both",
        help="P3 with the servers and the stage on CPUs of their own (split), all on every CPU "
        "(shared), or split then shared (both, the default; split needs local servers and "
        "two CPUs, else shared)",
    )
    args = parser.parse_args(argv)
    base = load_settings()
    servers = start_servers(base, for_tests=True)
    try:
        settings = base.model_copy(
            update={
                "mongodb": MongoSettings(uri=servers.mongodb_uri),
                "kafka": KafkaSettings(bootstrap=servers.kafka_bootstrap),
            }
        )
        pids = {
            name: pid
            for name, server in (("mongo", servers.mongo), ("kafka", servers.kafka))
            if server is not None and (pid := server.running_pid()) is not None
        }
        text = asyncio.run(run(args, settings, servers.describe().replace("\n", "; "), pids))
    finally:
        servers.stop()
    results = RESULTS if args.only is None else RESULTS.with_name(ONLY_RESULTS.format(args.only))
    if args.phases != 1:  # beside the backlog in step, not over it
        results = results.with_name(f"{results.stem}_phases{args.phases}.md")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
