"""LLM usage accounting: calls and tokens per snapshot and type, and per query.

Usage lives in the MongoDB collection ``llm_usage``, one document per
:class:`UsageKey`: per (snapshot, memory type) for extraction
(``_id = stable_id("usage", snapshot_id, type)``, as before) and per
(query, purpose) for LLM calls made to answer a query. A
:class:`UsageMeter` is the :class:`~mongomem.adapters.llm.CallMeter` of one key:

* every request is counted (``calls``) *before* it is sent, so a call cut
  short by a timeout or a crash of the process is still counted;
* every answer adds its tokens (``prompt_tokens``, ``completion_tokens``,
  ``answers``) as it arrives, also one then rejected as invalid;
* when an extraction run ends, :meth:`UsageRecorder.record` adds ``runs``
  and sets the ``last_*`` outcome fields.

Everything is added (``$inc``), so a snapshot handled twice (after a crash,
or a replay) shows what both runs cost. The same counts go to Prometheus
(``mongomem_llm_calls_total``, ``mongomem_llm_tokens_total``,
``mongomem_llm_snapshot_tokens``, ``mongomem_llm_query_calls_total``,
``mongomem_llm_query_tokens``). :func:`recent_usage` sums the documents
touched since a time, per type or query purpose (``mongomem status``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongomem import metrics
from mongomem.adapters.llm import LLMUsage
from mongomem.adapters.mongo import Document
from mongomem.errors import StorageError
from mongomem.models import stable_id, utcnow
from mongomem.settings import LLMSettings

__all__ = [
    "LLM_USAGE",
    "MemoryUsageRecorder",
    "MongoUsageRecorder",
    "UsageKey",
    "UsageMeter",
    "UsageRecord",
    "UsageRecorder",
    "UsageRow",
    "recent_usage",
    "usage_table",
]

LLM_USAGE = "llm_usage"

log = logging.getLogger(__name__)

UsageKind = Literal["extraction", "query"]


@dataclass(frozen=True)
class UsageKey:
    """What a call is accounted to: a snapshot and memory type, or a query and purpose."""

    kind: UsageKind
    ref: str  # the snapshot id or the query id
    name: str  # the memory type or the query's purpose ("answer", "judge" …)
    project_id: str

    @classmethod
    def snapshot(cls, snapshot_id: str, memory_type: str, project_id: str) -> UsageKey:
        return cls("extraction", snapshot_id, memory_type, project_id)

    @classmethod
    def query(cls, query_id: str, purpose: str, project_id: str) -> UsageKey:
        return cls("query", query_id, purpose, project_id)

    @property
    def doc_id(self) -> str:
        if self.kind == "extraction":
            return stable_id("usage", self.ref, self.name)
        return stable_id("usage-query", self.ref, self.name)

    @property
    def label(self) -> str:
        """The row name in reports: the memory type, or ``query:<purpose>``."""
        return self.name if self.kind == "extraction" else f"query:{self.name}"

    def fields(self) -> dict[str, str]:
        """The identifying fields stored on the document."""
        if self.kind == "extraction":
            return {
                "kind": "extraction",
                "snapshot_id": self.ref,
                "memory_type": self.name,
                "project_id": self.project_id,
            }
        return {
            "kind": "query",
            "query_id": self.ref,
            "purpose": self.name,
            "project_id": self.project_id,
        }


@dataclass(frozen=True)
class UsageRecord:
    """What one handled snapshot cost for one memory type (this run only)."""

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
    """Stores usage; each method may raise :class:`StorageError`."""

    async def call_started(self, key: UsageKey, at: datetime) -> None:
        """A request is about to be sent."""
        ...

    async def answered(self, key: UsageKey, usage: LLMUsage, model: str, at: datetime) -> None:
        """An answer arrived with this usage."""
        ...

    async def record(self, usage: UsageRecord) -> None:
        """An extraction run ended (its calls and tokens were already counted)."""
        ...


class MongoUsageRecorder:
    """Adds usage to ``llm_usage`` (raises :class:`StorageError`)."""

    def __init__(self, collection: AsyncCollection[Document]) -> None:
        self._collection = collection

    async def _update(self, doc_id: str, update: Document) -> None:
        try:
            await self._collection.update_one({"_id": doc_id}, update, upsert=True)
        except PyMongoError as exc:
            raise StorageError(f"could not record LLM usage: {exc}") from exc

    async def call_started(self, key: UsageKey, at: datetime) -> None:
        await self._update(
            key.doc_id,
            {
                "$inc": {"calls": 1},
                "$set": {**key.fields(), "updated_at": at},
                "$setOnInsert": {"first_at": at},
            },
        )

    async def answered(self, key: UsageKey, usage: LLMUsage, model: str, at: datetime) -> None:
        await self._update(
            key.doc_id,
            {
                "$inc": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "answers": 1,
                },
                "$set": {**key.fields(), "model": model, "updated_at": at},
            },
        )

    async def record(self, usage: UsageRecord) -> None:
        key = UsageKey.snapshot(usage.snapshot_id, usage.memory_type, usage.project_id)
        await self._update(
            key.doc_id,
            {
                "$inc": {"runs": 1},
                "$set": {
                    **key.fields(),
                    "prompt_version": usage.prompt_version,
                    "last_latency_s": usage.latency_s,
                    "last_attempts": usage.attempts,
                    "last_candidates": usage.candidates,
                    "last_outcome": usage.outcome,
                    "updated_at": usage.at,
                },
                "$setOnInsert": {"model": usage.model, "first_at": usage.at},
            },
        )


@dataclass
class MemoryUsageRecorder:
    """Keeps everything in lists (tests, or deployments without MongoDB)."""

    started: list[UsageKey] = field(default_factory=list)
    answers: list[tuple[UsageKey, LLMUsage, str]] = field(default_factory=list)
    records: list[UsageRecord] = field(default_factory=list)

    async def call_started(self, key: UsageKey, at: datetime) -> None:
        self.started.append(key)

    async def answered(self, key: UsageKey, usage: LLMUsage, model: str, at: datetime) -> None:
        self.answers.append((key, usage, model))

    async def record(self, usage: UsageRecord) -> None:
        self.records.append(usage)


class UsageMeter:
    """The :class:`~mongomem.adapters.llm.CallMeter` of one key: counts, stores and exports usage.

    A storage failure is logged and the call goes on: accounting never fails
    the work it accounts for.
    """

    def __init__(
        self,
        recorder: UsageRecorder,
        key: UsageKey,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._recorder = recorder
        self.key = key
        self._clock = clock
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    async def call_started(self) -> None:
        self.calls += 1
        if self.key.kind == "extraction":
            metrics.LLM_CALLS.labels(self.key.name).inc()
        else:
            metrics.LLM_QUERY_CALLS.labels(self.key.name).inc()
        await self._store(self._recorder.call_started(self.key, self._clock()))

    async def answered(self, usage: LLMUsage, model: str) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        if self.key.kind == "extraction":
            metrics.LLM_TOKENS.labels(self.key.name, "prompt").inc(usage.prompt_tokens)
            metrics.LLM_TOKENS.labels(self.key.name, "completion").inc(usage.completion_tokens)
        await self._store(self._recorder.answered(self.key, usage, model, self._clock()))

    def finished(self) -> None:
        """The snapshot or query is done: observe what it cost in total."""
        if self.key.kind == "extraction":
            metrics.LLM_SNAPSHOT_TOKENS.labels(self.key.name).observe(self.total_tokens)
        else:
            metrics.LLM_QUERY_TOKENS.labels(self.key.name).observe(self.total_tokens)

    async def _store(self, write: Any) -> None:
        try:
            await write
        except StorageError as exc:
            log.warning("LLM usage of %s %s not recorded: %s", self.key.kind, self.key.ref, exc)


@dataclass(frozen=True)
class UsageRow:
    """Usage of one memory type (or ``query:<purpose>``) over a period."""

    name: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    dead_letters: int
    cost: float | None  # None: no price for some model used


async def recent_usage(
    collection: AsyncCollection[Document], since: datetime, llm: LLMSettings
) -> list[UsageRow]:
    """Calls, tokens, dead letters and cost per type of the documents touched since ``since``.

    A document counts whole: a snapshot handled again within the period
    brings its earlier runs along. Cost is priced with ``llm.prices`` by the
    model each document records; it is ``None`` when no price table is set
    or a model is missing from it.
    """
    rows: dict[str, dict[str, Any]] = {}
    try:
        cursor = collection.find(
            {"updated_at": {"$gte": since}},
            {
                "kind": 1,
                "memory_type": 1,
                "purpose": 1,
                "model": 1,
                "calls": 1,
                "prompt_tokens": 1,
                "completion_tokens": 1,
                "last_outcome": 1,
            },
        )
        docs = await cursor.to_list()
    except PyMongoError as exc:
        raise StorageError(f"could not read LLM usage: {exc}") from exc
    for doc in docs:
        if doc.get("kind") == "query":
            name = f"query:{doc.get('purpose', '?')}"
        else:
            name = str(doc.get("memory_type", "?"))
        row = rows.setdefault(
            name,
            {
                "calls": 0,
                "prompt": 0,
                "completion": 0,
                "dead": 0,
                "cost": 0.0 if llm.prices else None,
            },
        )
        prompt = int(doc.get("prompt_tokens", 0))
        completion = int(doc.get("completion_tokens", 0))
        row["calls"] += int(doc.get("calls", 0))
        row["prompt"] += prompt
        row["completion"] += completion
        row["dead"] += 1 if doc.get("last_outcome") == "dead-letter" else 0
        if row["cost"] is not None and prompt + completion:
            price = llm.price_of(str(doc.get("model", "")))
            row["cost"] = None if price is None else row["cost"] + price.cost(prompt, completion)
    return [
        UsageRow(
            name=name,
            calls=row["calls"],
            prompt_tokens=row["prompt"],
            completion_tokens=row["completion"],
            dead_letters=row["dead"],
            cost=row["cost"],
        )
        for name, row in sorted(rows.items())
    ]


def usage_table(rows: list[UsageRow], *, title: str, priced: bool) -> list[str]:
    """``rows`` as the lines ``mongomem status`` prints (cost only with a price table)."""
    if not rows:
        return [f"{title}: no LLM calls"]
    lines = [
        f"{title}:",
        f"  {'type':<24} {'calls':>7} {'prompt tokens':>14} {'completion tokens':>18} "
        f"{'dead letters':>13} {'cost':>10}",
    ]
    for row in rows:
        if not priced:
            cost = "-"
        elif row.cost is None:
            cost = "no price"
        else:
            cost = f"{row.cost:.6f}"
        lines.append(
            f"  {row.name:<24} {row.calls:>7} {row.prompt_tokens:>14} "
            f"{row.completion_tokens:>18} {row.dead_letters:>13} {cost:>10}"
        )
    if not priced:
        lines.append("  (set MONGOMEM_LLM_PRICES to see the cost)")
    return lines
