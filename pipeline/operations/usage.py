"""LLM usage accounting: one record per request, and one per extraction run.

Usage lives in the MongoDB collection ``llm_usage``, two kinds of documents:

* ``kind: "call"`` — **one per request sent to the endpoint**, ``_id`` = the
  call id the request carries as its ``X-Mongomem-Call`` header
  (:data:`~mongomem.adapters.llm.CALL_HEADER`). It is *inserted before the
  request is sent* (``state: "started"``; if that insert fails the request is
  not sent) and *completed after* (``state: "finished"``, ``outcome``
  ``answered`` or how it failed, the answer's tokens and model). A request cut
  off by a kill keeps ``state: "started"`` and is reported as *unfinished*:
  counted once, never twice, and a restarted process makes new calls with new
  ids. So every request the endpoint received has exactly one record (the
  header ties them), and a record with no request is an unfinished one whose
  process died between the insert and the send. Each record has ``purpose``
  (``extract``, ``judge``, ``eval-*``, ``answer`` …), the snapshot or query
  it was made for, ``calls: 1`` and ``answers: 0|1`` (so sums read as before).
* ``kind: "extraction"`` — one per (snapshot, memory type),
  ``_id = stable_id("usage", snapshot_id, type)``: how its runs ended
  (``runs``, ``last_outcome``, ``last_candidates`` …) and whether each run
  asked the LLM (``fresh``) or reused a stored answer (``reused``, SPEC I6).
  It carries no calls: those are the call records.

The same counts go to Prometheus: ``mongomem_llm_requests_total{purpose}``
and ``mongomem_llm_request_tokens_total{purpose,kind}`` for every purpose,
``mongomem_extraction_results_total{memory_type,source}`` for reuse, and the
older per-type series. :func:`recent_usage` sums the calls started since a
time per purpose (``mongomem status``); :func:`recent_runs` the runs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

from mongomem import metrics
from mongomem.adapters.mongo import Document
from mongomem.errors import StorageError
from mongomem.models import stable_id, utcnow
from mongomem.settings import LLMSettings

if TYPE_CHECKING:  # the LLM client (openai) loads only where calls are made
    from mongomem.adapters.llm import LLMUsage

__all__ = [
    "LLM_USAGE",
    "MemoryUsageRecorder",
    "MongoUsageRecorder",
    "RunRow",
    "UsageKey",
    "UsageMeter",
    "UsageRecord",
    "UsageRecorder",
    "UsageRow",
    "recent_runs",
    "recent_usage",
    "runs_table",
    "usage_table",
]

LLM_USAGE = "llm_usage"

log = logging.getLogger(__name__)

UsageKind = Literal["extraction", "judge", "query"]


@dataclass(frozen=True)
class UsageKey:
    """What a call is made for: a snapshot's extraction or judging of one memory type, or a
    query and its purpose."""

    kind: UsageKind
    ref: str  # the snapshot id or the query id
    name: str  # the memory type, or the query's purpose ("answer", "eval-judge" …)
    project_id: str

    @classmethod
    def snapshot(cls, snapshot_id: str, memory_type: str, project_id: str) -> UsageKey:
        return cls("extraction", snapshot_id, memory_type, project_id)

    @classmethod
    def judge(cls, snapshot_id: str, memory_type: str, project_id: str) -> UsageKey:
        """The judge's calls for one snapshot's candidates of one type."""
        return cls("judge", snapshot_id, memory_type, project_id)

    @classmethod
    def query(cls, query_id: str, purpose: str, project_id: str) -> UsageKey:
        return cls("query", query_id, purpose, project_id)

    @property
    def purpose(self) -> str:
        """``extract``, ``judge``, or the query's purpose."""
        if self.kind == "extraction":
            return "extract"
        return "judge" if self.kind == "judge" else self.name

    @property
    def doc_id(self) -> str:
        """The ``_id`` of the key's run record (extraction only)."""
        if self.kind == "extraction":
            return stable_id("usage", self.ref, self.name)
        return stable_id(f"usage-{self.kind}", self.ref, self.name)

    @property
    def label(self) -> str:
        """The row name in reports: ``extract:<type>``, ``judge:<type>`` or the purpose."""
        return self.purpose if self.kind == "query" else f"{self.purpose}:{self.name}"

    def fields(self) -> dict[str, str]:
        """The identifying fields stored on the records."""
        if self.kind == "query":
            return {"purpose": self.name, "query_id": self.ref, "project_id": self.project_id}
        return {
            "purpose": self.purpose,
            "snapshot_id": self.ref,
            "memory_type": self.name,
            "project_id": self.project_id,
        }


@dataclass(frozen=True)
class UsageRecord:
    """How one extraction run of a snapshot and memory type ended (this run only)."""

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
    #: The answer was a stored one (SPEC I6): no LLM call was made for it.
    reused: bool = False


class UsageRecorder(Protocol):
    """Stores usage; each method may raise :class:`StorageError`."""

    async def call_started(self, key: UsageKey, call_id: str, at: datetime) -> None:
        """A request is about to be sent (its record is inserted)."""
        ...

    async def call_finished(
        self,
        key: UsageKey,
        call_id: str,
        outcome: str,
        usage: LLMUsage | None,
        model: str | None,
        at: datetime,
    ) -> None:
        """The request was answered (``usage``) or failed (``usage`` is ``None``)."""
        ...

    async def record(self, usage: UsageRecord) -> None:
        """An extraction run ended (its calls were recorded as they happened)."""
        ...


class MongoUsageRecorder:
    """Writes usage to ``llm_usage`` (raises :class:`StorageError`)."""

    def __init__(self, collection: AsyncCollection[Document]) -> None:
        self._collection = collection

    async def ensure_index(self) -> None:
        """The indexes status and erasure read by."""
        try:
            await self._collection.create_index([("started_at", 1)])  # calls, by time
            await self._collection.create_index([("updated_at", 1)])  # runs, by time
            await self._collection.create_index([("snapshot_id", 1)])  # erasure
        except PyMongoError as exc:
            raise StorageError(f"could not index {LLM_USAGE}: {exc}") from exc

    async def call_started(self, key: UsageKey, call_id: str, at: datetime) -> None:
        doc = {
            "_id": call_id,
            "kind": "call",
            **key.fields(),
            "state": "started",
            "calls": 1,
            "answers": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "started_at": at,
            "updated_at": at,
        }
        try:
            await self._collection.insert_one(doc)
        except PyMongoError as exc:
            raise StorageError(f"could not record an LLM call: {exc}") from exc

    async def call_finished(
        self,
        key: UsageKey,
        call_id: str,
        outcome: str,
        usage: LLMUsage | None,
        model: str | None,
        at: datetime,
    ) -> None:
        done: Document = {"state": "finished", "outcome": outcome, "finished_at": at}
        if usage is not None:
            done |= {
                "answers": 1,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
        if model is not None:
            done["model"] = model
        try:  # only a started record is finished, and only once
            await self._collection.update_one({"_id": call_id, "state": "started"}, {"$set": done})
        except PyMongoError as exc:
            raise StorageError(f"could not record an LLM answer: {exc}") from exc

    async def record(self, usage: UsageRecord) -> None:
        key = UsageKey.snapshot(usage.snapshot_id, usage.memory_type, usage.project_id)
        try:
            await self._collection.update_one(
                {"_id": key.doc_id},
                {
                    "$inc": {"runs": 1, "reused" if usage.reused else "fresh": 1},
                    "$set": {
                        "kind": "extraction",
                        **key.fields(),
                        "model": usage.model,
                        "prompt_version": usage.prompt_version,
                        "last_latency_s": usage.latency_s,
                        "last_attempts": usage.attempts,
                        "last_calls": usage.calls,
                        "last_candidates": usage.candidates,
                        "last_outcome": usage.outcome,
                        "last_reused": usage.reused,
                        "updated_at": usage.at,
                    },
                    "$setOnInsert": {"first_at": usage.at},
                },
                upsert=True,
            )
        except PyMongoError as exc:
            raise StorageError(f"could not record LLM usage: {exc}") from exc


@dataclass
class MemoryUsageRecorder:
    """Keeps everything in lists (tests, or deployments without MongoDB)."""

    started: list[UsageKey] = field(default_factory=list)
    answers: list[tuple[UsageKey, LLMUsage, str]] = field(default_factory=list)
    failures: list[tuple[UsageKey, str]] = field(default_factory=list)
    records: list[UsageRecord] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)

    async def call_started(self, key: UsageKey, call_id: str, at: datetime) -> None:
        self.started.append(key)
        self.call_ids.append(call_id)

    async def call_finished(
        self,
        key: UsageKey,
        call_id: str,
        outcome: str,
        usage: LLMUsage | None,
        model: str | None,
        at: datetime,
    ) -> None:
        if usage is None:
            self.failures.append((key, outcome))
        else:
            self.answers.append((key, usage, model or ""))

    async def record(self, usage: UsageRecord) -> None:
        self.records.append(usage)


class UsageMeter:
    """The :class:`~mongomem.adapters.llm.CallMeter` of one key: records, counts and exports.

    The record of a call must be stored before the call is made: if that
    fails, :meth:`call_started` raises :class:`StorageError` and the request
    is not sent (the caller's retry policy treats it as an outage). A failure
    to store how a call *ended* is only logged (the record then stays
    unfinished): accounting never fails work that was already paid for.
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

    async def call_started(self) -> str:
        call_id = uuid.uuid4().hex
        await self._recorder.call_started(self.key, call_id, self._clock())
        self.calls += 1
        metrics.LLM_REQUESTS.labels(self.key.purpose).inc()
        if self.key.kind == "extraction":
            metrics.LLM_CALLS.labels(self.key.name).inc()
        elif self.key.kind == "query":
            metrics.LLM_QUERY_CALLS.labels(self.key.name).inc()
        return call_id

    async def answered(self, call_id: str, usage: LLMUsage, model: str) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        purpose = self.key.purpose
        metrics.LLM_REQUEST_TOKENS.labels(purpose, "prompt").inc(usage.prompt_tokens)
        metrics.LLM_REQUEST_TOKENS.labels(purpose, "completion").inc(usage.completion_tokens)
        if self.key.kind == "extraction":
            metrics.LLM_TOKENS.labels(self.key.name, "prompt").inc(usage.prompt_tokens)
            metrics.LLM_TOKENS.labels(self.key.name, "completion").inc(usage.completion_tokens)
        await self._finish(call_id, "answered", usage, model)

    async def failed(self, call_id: str, error: str) -> None:
        await self._finish(call_id, error, None, None)

    def finished(self) -> None:
        """The snapshot or query is done: observe what it cost in total."""
        if self.key.kind == "extraction":
            metrics.LLM_SNAPSHOT_TOKENS.labels(self.key.name).observe(self.total_tokens)
        elif self.key.kind == "query":
            metrics.LLM_QUERY_TOKENS.labels(self.key.name).observe(self.total_tokens)

    async def _finish(
        self, call_id: str, outcome: str, usage: LLMUsage | None, model: str | None
    ) -> None:
        try:
            await self._recorder.call_finished(
                self.key, call_id, outcome, usage, model, self._clock()
            )
        except StorageError as exc:
            log.warning(
                "LLM call %s of %s %s not completed in %s: %s",
                call_id,
                self.key.kind,
                self.key.ref,
                LLM_USAGE,
                exc,
            )


@dataclass(frozen=True)
class UsageRow:
    """The calls of one purpose (``extract:<type>``, ``judge:<type>``, ``eval-answer`` …)
    started over a period."""

    name: str
    calls: int
    unfinished: int  # started, never finished: cut off by a kill (or still in flight)
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # None: no price for some model used


@dataclass(frozen=True)
class RunRow:
    """The extraction runs of one memory type over a period: fresh calls vs reused answers."""

    memory_type: str
    runs: int
    fresh: int  # runs that asked the LLM
    reused: int  # runs that reused a stored answer (SPEC I6)
    dead_letters: int


def _label(doc: Document) -> str:
    purpose = str(doc.get("purpose", "?"))
    memory_type = doc.get("memory_type")
    return f"{purpose}:{memory_type}" if memory_type else purpose


async def recent_usage(
    collection: AsyncCollection[Document], since: datetime, llm: LLMSettings
) -> list[UsageRow]:
    """Calls, unfinished calls, tokens and cost per purpose of the calls started since ``since``.

    Each request is one record, so every request counts exactly once. Cost is
    priced with ``llm.prices`` by the model each call records; it is ``None``
    when no price table is set or a model is missing from it.
    """
    rows: dict[str, dict[str, Any]] = {}
    try:
        cursor = collection.find(
            {"kind": "call", "started_at": {"$gte": since}},
            {
                "purpose": 1,
                "memory_type": 1,
                "model": 1,
                "state": 1,
                "prompt_tokens": 1,
                "completion_tokens": 1,
            },
        )
        docs = await cursor.to_list()
    except PyMongoError as exc:
        raise StorageError(f"could not read LLM usage: {exc}") from exc
    for doc in docs:
        row = rows.setdefault(
            _label(doc),
            {
                "calls": 0,
                "open": 0,
                "prompt": 0,
                "completion": 0,
                "cost": 0.0 if llm.prices else None,
            },
        )
        prompt = int(doc.get("prompt_tokens", 0))
        completion = int(doc.get("completion_tokens", 0))
        row["calls"] += 1
        row["open"] += 1 if doc.get("state") == "started" else 0
        row["prompt"] += prompt
        row["completion"] += completion
        if row["cost"] is not None and prompt + completion:
            price = llm.price_of(str(doc.get("model", "")))
            row["cost"] = None if price is None else row["cost"] + price.cost(prompt, completion)
    return [
        UsageRow(
            name=name,
            calls=row["calls"],
            unfinished=row["open"],
            prompt_tokens=row["prompt"],
            completion_tokens=row["completion"],
            cost=row["cost"],
        )
        for name, row in sorted(rows.items())
    ]


async def recent_runs(collection: AsyncCollection[Document], since: datetime) -> list[RunRow]:
    """Per memory type, the snapshots whose extraction last ran since ``since``: how many asked
    the LLM and how many reused a stored answer (their last run), and the dead letters."""
    rows: dict[str, list[int]] = {}
    try:
        cursor = collection.find(
            {"kind": "extraction", "updated_at": {"$gte": since}},
            {"memory_type": 1, "last_reused": 1, "last_outcome": 1, "last_calls": 1},
        )
        docs = await cursor.to_list()
    except PyMongoError as exc:
        raise StorageError(f"could not read LLM usage: {exc}") from exc
    for doc in docs:
        row = rows.setdefault(str(doc.get("memory_type", "?")), [0, 0, 0, 0])
        row[0] += 1
        if doc.get("last_reused"):
            row[2] += 1
        elif doc.get("last_calls", 1):
            row[1] += 1
        row[3] += 1 if doc.get("last_outcome") == "dead-letter" else 0
    return [
        RunRow(memory_type=name, runs=r[0], fresh=r[1], reused=r[2], dead_letters=r[3])
        for name, r in sorted(rows.items())
    ]


def usage_table(rows: list[UsageRow], *, title: str, priced: bool) -> list[str]:
    """``rows`` as the lines ``mongomem status`` prints (cost only with a price table)."""
    if not rows:
        return [f"{title}: no LLM calls"]
    lines = [
        f"{title}:",
        f"  {'purpose':<24} {'calls':>7} {'unfinished':>10} {'prompt tokens':>14} "
        f"{'completion tokens':>18} {'cost':>10}",
    ]
    for row in rows:
        if not priced:
            cost = "-"
        elif row.cost is None:
            cost = "no price"
        else:
            cost = f"{row.cost:.6f}"
        lines.append(
            f"  {row.name:<24} {row.calls:>7} {row.unfinished:>10} {row.prompt_tokens:>14} "
            f"{row.completion_tokens:>18} {cost:>10}"
        )
    if any(row.unfinished for row in rows):
        lines.append("  (unfinished: sent or about to be sent when the process died, or in flight)")
    if not priced:
        lines.append("  (set MONGOMEM_LLM_PRICES to see the cost)")
    return lines


def runs_table(rows: list[RunRow]) -> list[str]:
    """``rows`` as ``mongomem status`` prints them: LLM answers asked for vs reused."""
    if not rows:
        return []
    lines = [
        "  extraction (by snapshot)   asked LLM     reused  dead letters",
    ]
    for row in rows:
        lines.append(
            f"  {row.memory_type:<24} {row.fresh:>11} {row.reused:>10} {row.dead_letters:>13}"
        )
    return lines
