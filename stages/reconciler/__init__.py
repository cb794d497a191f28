"""``mongomem run reconciler``: candidates → versioned long-term memory (SPEC D1–D3).

The decisions are made by :mod:`mongomem.ltm` (pure planner, idempotent
store); :mod:`mongomem.stages.reconciler.stage` is the Kafka adapter and states the
delivery guarantee. The optional LLM judge is used when an LLM is configured
(``MONGOMEM_LLM_API_KEY``); without one the ambiguous band takes the
judge-less default.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from contextlib import AsyncExitStack

from aiokafka import AIOKafkaConsumer

from mongomem.kafka import CANDIDATES, dead_letter_topic, ensure_topics, make_producer
from mongomem.ltm import Judge, LLMJudge, MemoryStore, Thresholds
from mongomem.mongo import connect, database
from mongomem.progress import Progress
from mongomem.settings import Settings
from mongomem.stages.reconciler.stage import STAGE, Reconciler, consumer_options

__all__ = ["STAGE", "Reconciler", "main", "run_reconciler"]

log = logging.getLogger(__name__)


def _judge(settings: Settings) -> Judge | None:
    if settings.llm.api_key is None:
        return None
    from mongomem.llm import OpenAILLM

    return LLMJudge(OpenAILLM(settings.llm))


async def run_reconciler(
    settings: Settings,
    stop: asyncio.Event,
    *,
    group_suffix: str = "",
    judge: Judge | None = None,
) -> None:
    """Run the stage until ``stop`` is set."""
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
        producer = make_producer(kafka)
        await producer.start()
        stack.push_async_callback(producer.stop)
        consumer = AIOKafkaConsumer(topic, **consumer_options(kafka, group_suffix))
        await consumer.start()
        stack.push_async_callback(consumer.stop)
        log.info(
            "reconciler consuming %s (search: %s, judge: %s)",
            topic, store.search_backend.name, "on" if judge else "off",
        )  # fmt: skip
        progress = Progress(store.db)
        await progress.ensure_index()
        await Reconciler(kafka, store, consumer, producer, progress=progress).run(stop)


async def main(settings: Settings, args: argparse.Namespace) -> None:
    """Entry of ``mongomem run reconciler``: runs until SIGTERM/SIGINT, then returns."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await run_reconciler(
            settings, stop, group_suffix=getattr(args, "group_suffix", "") or "",
            judge=_judge(settings),
        )  # fmt: skip
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
