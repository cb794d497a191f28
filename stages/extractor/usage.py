"""Token usage per snapshot and memory type, in the MongoDB collection ``llm_usage``.

One document per (snapshot, type), ``_id = stable_id("usage", snapshot_id, type)``.
Every LLM answer adds its tokens (``$inc``), so a snapshot handled twice
(after a crash, or a replay) shows what both runs cost. Totals per type are
also counted in Prometheus (``mongomem_llm_tokens_total``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongomem.errors import StorageError
from mongomem.models import stable_id
from mongomem.mongo import Document

__all__ = ["LLM_USAGE", "MemoryUsageRecorder", "MongoUsageRecorder", "UsageRecord", "UsageRecorder"]

LLM_USAGE = "llm_usage"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UsageRecord:
    """What one handled snapshot cost for one memory type."""

    snapshot_id: str
    memory_type: str
    project_id: str
    model: str
    prompt_version: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    calls: int
    attempts: int
    candidates: int
    outcome: str  # "ok" | "dead-letter" | "nothing-to-extract" (no LLM call)
    at: datetime


class UsageRecorder(Protocol):
    async def record(self, usage: UsageRecord) -> None: ...


class MongoUsageRecorder:
    """Adds usage to ``llm_usage`` (raises :class:`StorageError`)."""

    def __init__(self, collection: AsyncCollection[Document]) -> None:
        self._collection = collection

    async def record(self, usage: UsageRecord) -> None:
        try:
            await self._collection.update_one(
                {"_id": stable_id("usage", usage.snapshot_id, usage.memory_type)},
                {
                    "$inc": {
                        "prompt_tokens": usage.prompt_tokens,
                        "completion_tokens": usage.completion_tokens,
                        "calls": usage.calls,
                        "runs": 1,
                    },
                    "$set": {
                        "snapshot_id": usage.snapshot_id,
                        "memory_type": usage.memory_type,
                        "project_id": usage.project_id,
                        "model": usage.model,
                        "prompt_version": usage.prompt_version,
                        "last_latency_s": usage.latency_s,
                        "last_attempts": usage.attempts,
                        "last_candidates": usage.candidates,
                        "last_outcome": usage.outcome,
                        "updated_at": usage.at,
                    },
                },
                upsert=True,
            )
        except PyMongoError as exc:
            raise StorageError(f"could not record LLM usage: {exc}") from exc


class MemoryUsageRecorder:
    """Keeps records in a list (tests, or deployments without MongoDB)."""

    def __init__(self) -> None:
        self.records: list[UsageRecord] = []

    async def record(self, usage: UsageRecord) -> None:
        self.records.append(usage)
