"""``mongomem run reconciler``: candidates → versioned long-term memory (SPEC D1–D3).

The decisions are made by :mod:`mongomem.ltm` (pure planner, idempotent
store); :mod:`mongomem.stages.reconciler.stage` is the stage's core, run on
the stage runtime (:mod:`mongomem.stages.runtime`, which states the delivery
contract). The optional LLM judge is used when an LLM is configured
(``MONGOMEM_LLM_API_KEY``); without one the ambiguous band takes the
judge-less default. Its calls are recorded in ``llm_usage`` with purpose
``judge``, and a batch's questions of one snapshot go in one call, its types together
(:func:`mongomem.ltm.judge.prefetch`); with a judge, candidates that keep arriving (each within
``MONGOMEM_RECONCILE_JUDGE_LINGER_S`` of the one before) join their batch, so the types
of one snapshot, extracted by separate consumers, meet there.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from contextlib import AsyncExitStack

from mongomem.adapters.kafka import CANDIDATES, dead_letter_topic, ensure_topics
from mongomem.adapters.mongo import connect, database
from mongomem.ltm import Judge, LLMJudge, MemoryStore, Thresholds
from mongomem.operations.progress import Progress
from mongomem.operations.usage import LLM_USAGE, MongoUsageRecorder, judge_meters
from mongomem.settings import Settings
from mongomem.stages.reconciler.stage import STAGE, Reconciler
from mongomem.stages.runtime import RetryPolicy, consume, run_stage
from mongomem.stages.runtime.kafka import kafka_publisher, kafka_source

__all__ = ["STAGE", "Reconciler", "ReconcilerStage", "main", "run_reconciler"]

log = logging.getLogger(__name__)

#: The reconciler's retries: a write conflict is re-planned up to 3 times.
POLICY = RetryPolicy(base_s=0.2, max_attempts=3)


def _judge(settings: Settings) -> Judge | None:
    if settings.llm.api_key is None:
        return None
    from mongomem.adapters.llm import OpenAILLM

    return LLMJudge(OpenAILLM(settings.llm))


async def run_reconciler(
    settings: Settings,
    stop: asyncio.Event,
    *,
    group_suffix: str = "",
    judge: Judge | None = None,
) -> None:
    """Run the stage until ``stop`` is set (one attempt: no restarts, no signals)."""
    kafka = settings.kafka
    topic = kafka.topic(CANDIDATES)
    await ensure_topics(kafka, [topic, dead_letter_topic(kafka, STAGE)])
    async with AsyncExitStack() as stack:
        client = connect(settings.mongodb)
        stack.push_async_callback(client.close)
        store = MemoryStore(
            database(client, settings.mongodb),
            judge=judge,
            thresholds=Thresholds.from_settings(settings.reconcile),
            ledger_ttl_s=settings.reconcile.ledger_ttl_s,
        )
        await store.setup()
        if isinstance(judge, LLMJudge) and judge.meter_for is None:
            judge.meter_for = judge_meters(MongoUsageRecorder(store.db[LLM_USAGE]))
        publisher = await stack.enter_async_context(kafka_publisher(kafka))
        # Candidates carry embeddings (~8 KB as JSON): fetch enough for full batches.
        source = await stack.enter_async_context(
            kafka_source(
                kafka,
                topic,
                STAGE,
                group_suffix,
                max_partition_fetch_bytes=16 * 1024 * 1024,
                fetch_max_bytes=64 * 1024 * 1024,
            )
        )
        log.info(
            "reconciler consuming %s (search: %s, judge: %s)",
            topic,
            store.search_backend.name,
            "on" if judge else "off",
        )
        progress = Progress(store.db)
        await progress.ensure_index()
        reconciler = Reconciler(store, progress=progress)
        # With a judge, a snapshot's types (published apart by their own extractors) are
        # waited for briefly, so they share one judge call (SPEC I6).
        linger = settings.reconcile.judge_linger_s if judge is not None else 0.0
        await consume(
            source,
            reconciler,
            publisher=publisher,
            kafka=kafka,
            stop=stop,
            policy=POLICY,
            linger_s=linger,
        )


class ReconcilerStage:
    """The reconciler as a :class:`~mongomem.stages.runtime.ports.Stage`."""

    name = STAGE

    def __init__(self, settings: Settings, group_suffix: str = "") -> None:
        self.settings = settings
        self.group_suffix = group_suffix

    async def run(self, stop: asyncio.Event) -> None:
        await run_reconciler(
            self.settings, stop, group_suffix=self.group_suffix, judge=_judge(self.settings)
        )


async def main(settings: Settings, args: argparse.Namespace) -> None:
    """Entry of ``mongomem run reconciler``: runs until SIGTERM/SIGINT, then returns."""
    await run_stage(ReconcilerStage(settings, getattr(args, "group_suffix", "") or ""), settings)
