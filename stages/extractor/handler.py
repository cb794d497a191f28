"""One memory type's handler: snapshot record in, candidates (or a dead letter) out.

:meth:`TypeHandler.handle` returns only once the record is *handled*: its
candidates are acknowledged by Kafka, or the record is acknowledged on the
type's dead-letter topic. Only then may the consumer commit past it.

Failures follow the runtime's one retry policy
(:class:`~mongomem.stages.runtime.RetryPolicy`, from
``ExtractionSettings.max_attempts`` / ``backoff_base_s`` / ``backoff_max_s``):
a retriable failure of the LLM, the embedding provider or the publisher is
retried while attempts remain, with capped, jittered back-off that honours a
429's ``retry_after`` (which also holds back the handler's other LLM calls
for that long); a successful LLM answer is kept across retries of the later
steps, so it is paid for once. Then the record goes to
``dlq.extractor.<type>`` through :func:`~mongomem.stages.runtime.dead_letter`
with the error and the attempt count, and the stream goes on; an outage
(Kafka or MongoDB away) that outlasts the attempts is raised, for the runtime
to retry the batch until it passes. A :class:`~mongomem.errors.ConfigError`
(the endpoint rejects the key or model) is raised instead: every record would
fail the same way, so the stage stops without committing.

Before asking the LLM, a handler given :class:`KnownMemories` looks up the
scope's current memories of its type nearest to the snapshot (within
``ExtractionSettings.known_tokens``; the farthest are left out first) and
shows them to the model, so it reuses their labels (SPEC K2); the reconciler
still decides. A failed lookup only means extracting without them. The
snapshot's turns are bounded too (``ExtractionSettings.window_tokens``): over
it, the longest turns are shortened first, their middle cut and marked, and no
turn is dropped (:func:`~mongomem.stages.extractor.core.fit_contents`).

With ``results`` (:mod:`~mongomem.stages.extractor.results`), the answer is
looked up first by (snapshot, type, prompt version, schema version, model,
structured-output mode): a stored one is used as it is and no LLM call is
made (SPEC I6: replays, re-published snapshots, restarts and other consumer
groups pay nothing). A fresh answer is stored *before* any candidate is
published from it, so a crash after the answer never pays for it twice; with
``re_extract`` the lookup is skipped and the new answer replaces the old. A run that
asks records why (``new``, ``re-extract``, a changed prompt, schema, model or mode:
:func:`~mongomem.stages.extractor.results.why_asked`).

With a ``progress`` recorder, a handled snapshot is recorded in
``processing_status`` before :meth:`TypeHandler.handle` returns: its candidate
ids (none is a valid answer: the snapshot is then done for this type), or the
dead letter's error (:mod:`mongomem.operations.progress`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel

from mongomem import metrics
from mongomem.adapters.embeddings import Embedder
from mongomem.adapters.kafka import CANDIDATES
from mongomem.adapters.llm import LLM, LLMResult
from mongomem.codec import decode, encode
from mongomem.erasure.register import ErasureRegister
from mongomem.errors import ConfigError, LLMRateLimited, MongomemError, StorageError
from mongomem.models import MemoryCandidate, MemoryScope, Role, Snapshot, utcnow
from mongomem.operations.progress import Progress, until_stored
from mongomem.operations.usage import UsageKey, UsageMeter, UsageRecord, UsageRecorder
from mongomem.settings import ExtractionSettings, KafkaSettings
from mongomem.stages.extractor.core import (
    Known,
    extractable_turns,
    ground,
    known_within,
    render_messages,
    scope_of,
    snapshot_query,
    to_candidates,
)
from mongomem.stages.extractor.results import AnswerStore, ResultKey, schema_version, why_asked
from mongomem.stages.extractor.types import TypeSpec
from mongomem.stages.runtime import (
    Decision,
    PublishedDeadLetters,
    Publisher,
    Record,
    RetryPolicy,
    dead_letter,
)

__all__ = ["HandledRecord", "SourceRecord", "TypeHandler"]

log = logging.getLogger(__name__)


#: What the handler reads of a consumed record (the runtime's :class:`Record`).
SourceRecord = Record


@dataclass(frozen=True)
class HandledRecord:
    """How one record was handled."""

    snapshot_id: str | None
    candidate_ids: tuple[str, ...]
    attempts: int
    dead_lettered: bool
    error: str | None = None


class KnownMemories(Protocol):
    """Where a handler finds the scope's current memories of its type nearest to a vector."""

    async def nearest(
        self, scope: MemoryScope, memory_type: str, vector: Sequence[float], limit: int
    ) -> list[Known]: ...


#: At most this many known memories are looked up per snapshot (the budget trims further).
KNOWN_LIMIT = 10
#: Characters per token, for the known-memory budget.
CHARS_PER_TOKEN = 4


class TypeHandler:
    """Extracts one memory type from snapshot records, with bounded retries and a DLQ."""

    def __init__(
        self,
        spec: TypeSpec,
        *,
        llm: LLM,
        embedder: Embedder,
        publisher: Publisher,
        kafka: KafkaSettings,
        extraction: ExtractionSettings,
        usage: UsageRecorder,
        known: KnownMemories | None = None,
        progress: Progress | None = None,
        erasures: ErasureRegister | None = None,
        results: AnswerStore | None = None,
        re_extract: bool = False,
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.spec = spec
        self.stage = f"extractor.{spec.name}"
        self._llm = llm
        self._embedder = embedder
        self._publisher = publisher
        self._letters = PublishedDeadLetters(publisher, kafka)
        self._policy = policy or RetryPolicy(
            base_s=extraction.backoff_base_s,
            cap_s=extraction.backoff_max_s,
            max_attempts=extraction.max_attempts,
        )
        self._kafka = kafka
        self._extraction = extraction
        self._usage = usage
        self._known_memories = known
        self._progress = progress
        self._erasures = erasures
        self._results = results
        self._re_extract = re_extract
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic
        self._limit = asyncio.Semaphore(extraction.concurrency)
        self._paused_until = 0.0  # monotonic time before which no LLM call starts (after a 429)
        self._interval = 1.0 / extraction.max_rps if extraction.max_rps else 0.0
        self._next_start = 0.0  # monotonic time of the next free slot under max_rps
        self._topic = kafka.topic(CANDIDATES)
        #: the drops of each snapshot's answer, until its progress is noted
        self._dropped: dict[str, dict[str, int]] = {}

    async def handle(self, record: SourceRecord) -> HandledRecord:
        """Handle one record: candidates acknowledged, or a dead letter acknowledged."""
        async with self._limit:
            return await self._handle(record)

    async def _handle(self, record: SourceRecord) -> HandledRecord:
        try:
            snapshot = decode(record.value, Snapshot)
        except MongomemError as exc:
            await self._dead_letter(record, exc, attempts=1)
            return HandledRecord(None, (), 1, True, str(exc))
        if self._erasures is not None and await self._erasures.is_erased(
            snapshot.project_id, snapshot.user_id, snapshot.session_id
        ):  # SPEC J3: an erased session's snapshot (a replay) leaves nothing behind
            metrics.MESSAGES.labels(self.stage, "erased").inc()
            return HandledRecord(snapshot.snapshot_id, (), 0, False)

        meter = UsageMeter(
            self._usage,
            UsageKey.snapshot(snapshot.snapshot_id, self.spec.name, snapshot.project_id),
            clock=self._clock,
        )
        roles = tuple(Role(r) for r in self._extraction.roles)
        if not extractable_turns(snapshot, roles):  # e.g. only system turns, or pasted recall
            metrics.MESSAGES.labels(self.stage, "ok").inc()
            await self._note(snapshot, [], None)  # done for this type: nothing to extract
            await self._record(snapshot, None, meter, 0, 0, "nothing-to-extract")
            return HandledRecord(snapshot.snapshot_id, (), 0, False)
        key = self.result_key(snapshot)
        answer = await self._stored_answer(key)
        reused = answer is not None
        messages: list[dict[str, str]] = []
        asked: str | None = None  # why the LLM is asked (status shows it)
        if answer is None:
            asked = await self._why_asked(key)
            known = await self._known(snapshot, roles)
            window = self._extraction.window_tokens * CHARS_PER_TOKEN
            messages = render_messages(self.spec, snapshot, roles, known, window)
        attempt = 0
        while True:
            attempt += 1
            try:
                if answer is None:
                    await self._respect_rate_limit()
                    answer = await self._llm.structured(
                        messages,
                        self.spec.output_model,
                        schema_name=self.spec.schema_name,
                        meter=meter,
                    )
                    metrics.LLM_LATENCY.labels(self.spec.name).observe(answer.latency_s)
                    answer = await self._keep_answer(key, snapshot, answer)
                candidates = await self._candidates(snapshot, answer)
                await self._publish(candidates)
            except ConfigError:
                raise
            except Exception as exc:
                if isinstance(exc, LLMRateLimited) and exc.retry_after:
                    # The endpoint asked this handler to slow down: every call waits.
                    until = self._monotonic() + exc.retry_after
                    self._paused_until = max(self._paused_until, until)
                decision = self._policy.decide(exc, attempt)
                if decision is Decision.OUTAGE and attempt >= self._extraction.max_attempts:
                    raise  # Kafka or MongoDB away: the runtime retries the batch (stop-aware)
                if decision in (Decision.RETRY, Decision.OUTAGE):
                    delay = self._policy.delay(attempt, exc)
                    log.warning(
                        "%s: snapshot %s attempt %d/%d failed (%s: %s); retrying in %.2fs",
                        self.stage,
                        snapshot.snapshot_id,
                        attempt,
                        self._extraction.max_attempts,
                        type(exc).__name__,
                        exc,
                        delay,
                    )
                    await self._sleep(delay)
                    continue
                log.error(
                    "%s: snapshot %s failed after %d attempt(s) (%s: %s); dead-lettered",
                    self.stage,
                    snapshot.snapshot_id,
                    attempt,
                    type(exc).__name__,
                    exc,
                )
                await self._dead_letter(record, exc, attempts=attempt)
                await self._note(snapshot, None, f"{type(exc).__name__}: {exc}")
                await self._record(
                    snapshot, answer, meter, attempt, 0, "dead-letter", reused, asked
                )
                return HandledRecord(snapshot.snapshot_id, (), attempt, True, str(exc))
            metrics.MESSAGES.labels(self.stage, "ok").inc()
            await self._note(snapshot, [c.candidate_id for c in candidates], None)
            await self._record(
                snapshot, answer, meter, attempt, len(candidates), "ok", reused, asked
            )
            return HandledRecord(
                snapshot.snapshot_id, tuple(c.candidate_id for c in candidates), attempt, False
            )

    def result_key(self, snapshot: Snapshot) -> ResultKey:
        """The key of this snapshot's answer in ``extraction_results`` (SPEC I6)."""
        # The model and the configured structured-output mode, for any LLM (test doubles
        # without them are keyed by their name).
        model = getattr(self._llm, "model", None) or self._llm.name
        mode = getattr(self._llm, "structured_output", None) or "-"
        return ResultKey(
            snapshot_id=snapshot.snapshot_id,
            memory_type=self.spec.name,
            prompt_version=self.spec.full_prompt_version,
            schema_version=schema_version(self.spec.output_model),
            model=str(model),
            mode=str(mode),
        )

    async def _stored_answer(self, key: ResultKey) -> LLMResult[BaseModel] | None:
        """The stored answer of ``key`` (none with ``re_extract``, or if the lookup fails)."""
        if self._results is None or self._re_extract:
            return None
        try:
            stored = await self._results.find(key, self.spec.output_model)
        except StorageError as exc:
            log.warning("%s: stored answers unavailable (%s); asking the LLM", self.stage, exc)
            return None
        if stored is None:
            return None
        metrics.EXTRACTION_RESULTS.labels(self.spec.name, "stored").inc()
        return stored.as_result()

    async def _why_asked(self, key: ResultKey) -> str:
        """Why this snapshot and type is asked again (:func:`~.results.why_asked`); ``new``
        without a store, ``unknown`` when the store cannot say."""
        if self._results is None:
            return "re-extract" if self._re_extract else "new"
        try:
            stored = await self._results.keys_of(key.snapshot_id, key.memory_type)
        except StorageError:
            return "unknown"
        return why_asked(key, stored, re_extract=self._re_extract)

    async def _keep_answer(
        self, key: ResultKey, snapshot: Snapshot, answer: LLMResult[BaseModel]
    ) -> LLMResult[BaseModel]:
        """Store a fresh answer before anything is published from it; the answer to use (the
        one stored first, if another consumer stored one meanwhile)."""
        metrics.EXTRACTION_RESULTS.labels(self.spec.name, "llm").inc()
        if self._results is None:
            return answer
        try:
            if self._re_extract:
                await self._results.replace(key, snapshot, answer, self._clock())
                return answer
            stored = await self._results.keep(key, snapshot, answer, self._clock())
        except StorageError as exc:
            log.warning("%s: answer of %s not stored: %s", self.stage, snapshot.snapshot_id, exc)
            return answer
        return LLMResult(stored.value, stored.answer_model, answer.usage, answer.latency_s)

    async def _known(self, snapshot: Snapshot, roles: Sequence[Role]) -> list[Known]:
        """The nearest known memories within the budget; none if that lookup fails (it only
        helps the model keep labels stable, so it never holds the stream up)."""
        budget = self._extraction.known_tokens * CHARS_PER_TOKEN
        if self._known_memories is None or budget == 0:
            return []
        try:
            (vector,) = await self._embedder.embed([snapshot_query(snapshot, roles)])
            found = await self._known_memories.nearest(
                scope_of(self.spec, snapshot), self.spec.name, vector, KNOWN_LIMIT
            )
        except MongomemError as exc:
            log.warning("%s: known memories unavailable (%s); extracting without", self.stage, exc)
            return []
        return known_within(found, budget)

    async def _note(
        self, snapshot: Snapshot, candidate_ids: list[str] | None, error: str | None
    ) -> None:
        """Record the snapshot as handled in ``processing_status``
        (:mod:`~mongomem.operations.progress`):
        its candidates (maybe none) and the items dropped from the answer, or the dead
        letter's error. Retried until stored."""
        dropped = self._dropped.pop(snapshot.snapshot_id, {})
        progress = self._progress
        if progress is None:
            return
        now, name = self._clock(), self.spec.name

        async def write() -> None:
            if candidate_ids is None:
                await progress.extraction_failed(snapshot, name, error or "", now)
            else:
                await progress.extracted(snapshot, name, candidate_ids, now, dropped)

        await until_stored(write, what=f"{self.stage}: progress of {snapshot.snapshot_id}")

    async def _respect_rate_limit(self) -> None:
        wait = self._paused_until - self._monotonic()
        if wait > 0:
            await self._sleep(wait)
        if self._interval:
            # Reserve a start slot before awaiting, so concurrent calls space out too.
            now = self._monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self._interval
            if start > now:
                await self._sleep(start - now)

    async def _candidates(
        self, snapshot: Snapshot, answer: LLMResult[BaseModel]
    ) -> list[MemoryCandidate]:
        roles = tuple(Role(r) for r in self._extraction.roles)
        grounded = ground(self.spec, answer.value, snapshot, roles)
        self._dropped[snapshot.snapshot_id] = grounded.dropped
        for reason, count in grounded.dropped.items():
            metrics.EXTRACTION_DROPPED.labels(self.spec.name, reason).inc(count)
        if grounded.dropped:
            log.info(
                "%s: snapshot %s: dropped %s", self.stage, snapshot.snapshot_id, grounded.dropped
            )
        items = grounded.items
        vectors = await self._embedder.embed([i.text for i in items]) if items else []
        return to_candidates(
            self.spec, snapshot, items, vectors, model=answer.model, now=self._clock()
        )

    async def _publish(self, candidates: list[MemoryCandidate]) -> None:
        """Send every candidate, then wait for every acknowledgement."""
        pending = [
            await self._publisher.send(self._topic, encode(c), key=c.scope.kafka_key())
            for c in candidates
        ]
        await asyncio.gather(*pending)

    async def _dead_letter(self, record: SourceRecord, error: BaseException, attempts: int) -> None:
        await dead_letter(self._letters, self.stage, record, error, attempts, at=self._clock())

    async def _record(
        self,
        snapshot: Snapshot,
        answer: LLMResult[BaseModel] | None,
        meter: UsageMeter,
        attempts: int,
        candidates: int,
        outcome: str,
        reused: bool = False,
        asked: str | None = None,
    ) -> None:
        """Record the run's outcome (its calls and tokens were counted as they happened);
        a storage failure is only logged."""
        meter.finished()
        record = UsageRecord(
            snapshot_id=snapshot.snapshot_id,
            memory_type=self.spec.name,
            project_id=snapshot.project_id,
            model=answer.model if answer else self._llm.name,
            prompt_version=self.spec.full_prompt_version,
            prompt_tokens=meter.prompt_tokens,
            completion_tokens=meter.completion_tokens,
            latency_s=answer.latency_s if answer else 0.0,
            calls=meter.calls,
            attempts=attempts,
            candidates=candidates,
            outcome=outcome,
            at=self._clock(),
            reused=reused,
            asked=asked,
        )
        try:
            await self._usage.record(record)
        except StorageError as exc:
            log.warning("%s: usage of %s not recorded: %s", self.stage, snapshot.snapshot_id, exc)
