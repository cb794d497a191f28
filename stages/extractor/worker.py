"""The consumer loop of one memory type, and the stage that runs several.

Delivery semantics: **at-least-once in, idempotent out.** Each type has its own
consumer group (``<prefix>.extractor.<type><suffix>``) on the snapshots topic,
with auto-commit off. A batch is fetched; its records run concurrently (at
most ``ExtractionSettings.concurrency`` at a time per type), except that
records with the same key (one session) run one after another, in order, so
the candidates of a session reach the reconciler in snapshot order. Offsets
are committed only when every record of the batch is handled (candidates or
dead letter acknowledged by Kafka). A crash before the commit replays the
batch: the same snapshots give the same candidate ids (same prompt version,
same answer), which the reconciler deduplicates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from pymongo import AsyncMongoClient

from mongomem import metrics
from mongomem.dlq import addressed_to
from mongomem.embeddings import Embedder, make_embedder
from mongomem.erasure_register import ErasureRegister
from mongomem.errors import BrokerError
from mongomem.kafka import CANDIDATES, SNAPSHOTS, dead_letter_topic, ensure_topics, make_producer
from mongomem.llm import LLM, make_llm
from mongomem.ltm.store import MemoryStore
from mongomem.models import MemoryScope
from mongomem.mongo import Document, connect, database
from mongomem.ops import consumer_group
from mongomem.progress import Progress, until_stored
from mongomem.settings import Settings
from mongomem.stages.extractor.core import Known
from mongomem.stages.extractor.handler import KnownMemories, Outcome, SourceRecord, TypeHandler
from mongomem.stages.extractor.types import TypeSpec
from mongomem.usage import LLM_USAGE, MongoUsageRecorder, UsageRecorder

__all__ = ["TypeConsumer", "run_extractors"]

log = logging.getLogger(__name__)


class StoredMemories:
    """:class:`KnownMemories` from the ``memories`` collection (current versions, one scope)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def nearest(
        self, scope: MemoryScope, memory_type: str, vector: Sequence[float], limit: int
    ) -> list[Known]:
        hits = await self._store.search(scope, memory_type, vector, limit)
        return [Known(key=version.key, text=version.text) for version, _ in hits]


class TypeConsumer:
    """Feeds one type's consumer group to its handler and commits handled batches."""

    def __init__(self, handler: TypeHandler, consumer: AIOKafkaConsumer, batch_size: int) -> None:
        self.handler = handler
        self._consumer = consumer
        self._batch_size = batch_size

    async def run(self) -> None:
        stage = self.handler.stage
        while True:
            batch: dict[TopicPartition, list[Any]] = await self._consumer.getmany(
                timeout_ms=500, max_records=self._batch_size
            )
            if not batch:
                continue
            started = time.perf_counter()
            await self.handle_batch(
                [r for records in batch.values() for r in records if addressed_to(r.headers, stage)]
            )  # a record requeued for another memory type's extractor is not ours
            offsets = {tp: records[-1].offset + 1 for tp, records in batch.items() if records}
            try:
                await self._consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # A rebalance took the partitions away; the new owner replays them.
                log.warning("%s: commit skipped after a rebalance: %s", stage, exc)
            except KafkaError as exc:
                raise BrokerError(f"{stage}: could not commit offsets: {exc}") from exc
            metrics.STAGE_BATCH_SECONDS.labels(stage).observe(time.perf_counter() - started)

    async def handle_batch(self, records: Sequence[SourceRecord]) -> list[Outcome]:
        """Handle records: same (partition, key) in order, the rest concurrently."""
        chains: dict[tuple[int, bytes | None], list[SourceRecord]] = defaultdict(list)
        for record in records:
            chains[(record.partition, record.key)].append(record)
        outcomes: list[Outcome] = []

        async def run_chain(chain: list[SourceRecord]) -> None:
            for record in chain:
                outcomes.append(await self.handler.handle(record))

        async with asyncio.TaskGroup() as group:
            for chain in chains.values():
                group.create_task(run_chain(chain))
        return outcomes


def _max_poll_interval_ms(settings: Settings, batch_size: int) -> int:
    """Long enough for a batch whose records all exhaust their retries (capped at 30 min)."""
    extraction = settings.extraction
    per_record = extraction.max_attempts * (settings.llm.timeout_s + extraction.backoff_max_s)
    return int(min(1_800_000, max(300_000, per_record * batch_size * 1000 / 2)))


async def run_extractors(
    settings: Settings,
    specs: Sequence[TypeSpec],
    *,
    group_suffix: str = "",
    llm: LLM | None = None,
    embedder: Embedder | None = None,
    usage: UsageRecorder | None = None,
    known: KnownMemories | None = None,
    progress: Progress | None = None,
) -> None:
    """Run one consumer group per spec in this process until cancelled.

    ``llm``, ``embedder`` and ``usage`` default to the configured providers and
    the ``llm_usage`` collection, ``known`` to the ``memories`` collection
    (unless ``known_tokens`` is 0); tests pass their own. ``progress`` defaults to
    the ``processing_status`` collection (:mod:`mongomem.progress`).
    """
    kafka = settings.kafka
    topics = [kafka.topic(SNAPSHOTS), kafka.topic(CANDIDATES)]
    topics += [dead_letter_topic(kafka, f"extractor.{s.name}") for s in specs]
    await ensure_topics(kafka, topics)

    own_llm = llm is None
    llm = llm or make_llm(settings.llm)
    own_embedder = embedder is None
    embedder = embedder or make_embedder(settings.embedding)
    mongo: AsyncMongoClient[Document] | None = None
    own_progress = progress is None
    wants_known = known is None and settings.extraction.known_tokens > 0
    if usage is None or progress is None or wants_known:
        mongo = connect(settings.mongodb)
        db = database(mongo, settings.mongodb)
        usage = usage or MongoUsageRecorder(db[LLM_USAGE])
        progress = progress or Progress(db)
        if wants_known:
            known = StoredMemories(MemoryStore(db))
    producer: AIOKafkaProducer = make_producer(kafka)
    consumers: list[AIOKafkaConsumer] = []
    batch_size = max(1, settings.extraction.concurrency * 2)
    try:
        if own_progress:
            await until_stored(progress.ensure_index, what="the processing_status index")
        await producer.start()
        workers: list[TypeConsumer] = []
        # SPEC J3: the snapshots of erased sessions are skipped (the register lives beside
        # processing_status)
        erasures = (ErasureRegister(progress.entries.database)
                    if isinstance(progress, Progress) else None)  # fmt: skip
        for spec in specs:
            handler = TypeHandler(
                spec,
                llm=llm,
                embedder=embedder,
                producer=producer,
                kafka=kafka,
                extraction=settings.extraction,
                usage=usage,
                known=known,
                progress=progress,
                erasures=erasures,
            )
            consumer = AIOKafkaConsumer(
                kafka.topic(SNAPSHOTS),
                bootstrap_servers=kafka.bootstrap,
                group_id=consumer_group(kafka, handler.stage, group_suffix),
                client_id=f"mongomem-{handler.stage}",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_poll_interval_ms=_max_poll_interval_ms(settings, batch_size),
                request_timeout_ms=int(kafka.request_timeout_s * 1000),
            )
            await consumer.start()
            consumers.append(consumer)
            workers.append(TypeConsumer(handler, consumer, batch_size))
        log.info(
            "extractor running: %s; LLM %s; embeddings %s",
            ", ".join(w.handler.stage for w in workers),
            llm.name,
            embedder.name,
        )
        async with asyncio.TaskGroup() as group:
            for worker in workers:
                group.create_task(worker.run())
    except KafkaError as exc:
        raise BrokerError(f"extractor: Kafka failed: {exc}") from exc
    finally:
        for consumer in consumers:
            await consumer.stop()
        await producer.stop()
        if own_llm:
            await llm.close()
        close = getattr(embedder, "close", None)
        if own_embedder and close is not None:
            await close()
        if mongo is not None:
            await mongo.close()
