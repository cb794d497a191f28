"""One memory type as a consumer stage on the runtime, and the stage that runs several.

Delivery is the runtime's (:mod:`mongomem.stages.runtime`): each type has its
own consumer group (``<prefix>.extractor.<type><suffix>``) on the snapshots
topic, and a partition's offset is committed only when every record of the
batch is handled (candidates or dead letter acknowledged). Within a batch
records run concurrently (at most ``ExtractionSettings.concurrency`` at a
time per type), except that records with the same key (one session) run one
after another, in order, so the candidates of a session reach the reconciler
in snapshot order. A crash before the commit replays the batch: the same
snapshots give the same candidate ids (same prompt version, and the same
answer, reused from ``extraction_results`` without an LLM call), which the
reconciler deduplicates.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AsyncExitStack

from mongomem.adapters.embeddings import Embedder, make_embedder
from mongomem.adapters.kafka import CANDIDATES, SNAPSHOTS, dead_letter_topic, ensure_topics
from mongomem.adapters.llm import LLM, make_llm
from mongomem.adapters.mongo import connect, database
from mongomem.erasure.register import ErasureRegister
from mongomem.ltm.store import MemoryStore
from mongomem.models import MemoryScope
from mongomem.operations.dlq import addressed_to
from mongomem.operations.progress import Progress, until_stored
from mongomem.operations.usage import LLM_USAGE, MongoUsageRecorder, UsageRecorder
from mongomem.settings import Settings
from mongomem.stages.extractor.core import Known
from mongomem.stages.extractor.handler import (
    HandledRecord,
    KnownMemories,
    SourceRecord,
    TypeHandler,
)
from mongomem.stages.extractor.results import EXTRACTIONS, ExtractionResults
from mongomem.stages.extractor.types import TypeSpec
from mongomem.stages.runtime import RetryPolicy, consume
from mongomem.stages.runtime.kafka import KafkaSource, kafka_publisher, kafka_source

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
    """One type's :class:`~mongomem.stages.runtime.ports.ConsumerStage` over its handler."""

    def __init__(self, handler: TypeHandler) -> None:
        self.handler = handler
        self.stage = handler.stage

    async def handle(self, partition: int, batch: Sequence[SourceRecord]) -> None:
        # a record requeued for another memory type's extractor is not ours
        await self.handle_batch([r for r in batch if addressed_to(r.headers, self.stage)])

    async def dead_lettered(self, record: SourceRecord, error: BaseException) -> None:
        """Nothing to add: the handler dead-letters its own failures (and notes them)."""

    async def handle_batch(self, records: Sequence[SourceRecord]) -> list[HandledRecord]:
        """Handle records: same (partition, key) in order, the rest concurrently."""
        chains: dict[tuple[int, bytes | None], list[SourceRecord]] = defaultdict(list)
        for record in records:
            chains[(record.partition, record.key)].append(record)
        outcomes: list[HandledRecord] = []

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
    stop: asyncio.Event | None = None,
    *,
    group_suffix: str = "",
    llm: LLM | None = None,
    embedder: Embedder | None = None,
    usage: UsageRecorder | None = None,
    known: KnownMemories | None = None,
    progress: Progress | None = None,
    re_extract: bool = False,
) -> None:
    """Run one consumer group per spec in this process until ``stop`` is set (or cancelled).

    ``llm``, ``embedder`` and ``usage`` default to the configured providers and
    the ``llm_usage`` collection, ``known`` to the ``memories`` collection
    (unless ``known_tokens`` is 0); tests pass their own. ``progress`` defaults to
    the ``processing_status`` collection (:mod:`mongomem.operations.progress`).
    Answers are stored in and reused from ``extraction_results``
    (:mod:`~mongomem.stages.extractor.results`); ``re_extract`` asks the LLM
    again for every snapshot and replaces the stored answers.
    """
    stop = stop or asyncio.Event()
    kafka = settings.kafka
    topics = [kafka.topic(SNAPSHOTS), kafka.topic(CANDIDATES)]
    topics += [dead_letter_topic(kafka, f"extractor.{s.name}") for s in specs]
    await ensure_topics(kafka, topics)

    own_llm = llm is None
    llm = llm or make_llm(settings.llm)
    own_embedder = embedder is None
    embedder = embedder or make_embedder(settings.embedding)
    own_progress = progress is None
    wants_known = known is None and settings.extraction.known_tokens > 0
    mongo = connect(settings.mongodb)
    db = database(mongo, settings.mongodb)
    own_usage = usage is None
    usage = usage or MongoUsageRecorder(db[LLM_USAGE])
    progress = progress or Progress(db)
    if wants_known:
        known = StoredMemories(MemoryStore(db))
    results = ExtractionResults(db[EXTRACTIONS])
    batch_size = max(1, settings.extraction.concurrency * 2)
    try:
        async with AsyncExitStack() as stack:
            if own_progress:
                await until_stored(progress.ensure_index, what="the processing_status index")
            await until_stored(results.ensure_index, what="the extraction_results index")
            if own_usage and isinstance(usage, MongoUsageRecorder):
                await until_stored(usage.ensure_index, what="the llm_usage indexes")
            publisher = await stack.enter_async_context(kafka_publisher(kafka))
            # SPEC J3: the snapshots of erased sessions are skipped (the register lives beside
            # processing_status)
            erasures = (
                ErasureRegister(progress.entries.database)
                if isinstance(progress, Progress)
                else None
            )
            consumers: list[tuple[TypeConsumer, KafkaSource]] = []
            for spec in specs:
                handler = TypeHandler(
                    spec,
                    llm=llm,
                    embedder=embedder,
                    publisher=publisher,
                    kafka=kafka,
                    extraction=settings.extraction,
                    usage=usage,
                    known=known,
                    progress=progress,
                    erasures=erasures,
                    results=results,
                    re_extract=re_extract,
                )
                source = await stack.enter_async_context(
                    kafka_source(
                        kafka,
                        kafka.topic(SNAPSHOTS),
                        handler.stage,
                        group_suffix,
                        max_poll_interval_ms=_max_poll_interval_ms(settings, batch_size),
                    )
                )
                consumers.append((TypeConsumer(handler), source))
            log.info(
                "extractor running: %s; LLM %s; embeddings %s",
                ", ".join(c.stage for c, _ in consumers),
                llm.name,
                embedder.name,
            )
            # the handler retries records itself; the runtime's policy only meets outages
            extraction = settings.extraction
            policy = RetryPolicy(
                base_s=extraction.backoff_base_s, cap_s=extraction.backoff_max_s, max_attempts=1
            )
            async with asyncio.TaskGroup() as group:
                for consumer, source in consumers:
                    group.create_task(
                        consume(
                            source,
                            consumer,
                            publisher=publisher,
                            kafka=kafka,
                            stop=stop,
                            policy=policy,
                            max_records=batch_size,
                        )
                    )
    except* Exception as failures:  # the first failure of a type, as itself (for the restarts)
        raise failures.exceptions[0] from None
    finally:
        if own_llm:
            await llm.close()
        close = getattr(embedder, "close", None)
        if own_embedder and close is not None:
            await close()
        await mongo.close()
