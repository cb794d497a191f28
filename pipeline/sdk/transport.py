"""The SDK's one seam to wherever memory lives.

:class:`MemoryTransport` is what :class:`~mongomem.sdk.AsyncMemory` calls;
:class:`DirectTransport` fills it by reaching MongoDB directly (URI from
settings) through the same :class:`~mongomem.ltm.MemoryStore` the reconciler
stage uses, so direct saves are reconciled like extracted memories (SPEC E2)
and readable as soon as the call returns. The HTTP memory service (G2) fills
the same protocol with a client that sends these calls and an API key.

A save with an ``idempotency_key`` is applied at most once: its candidate id
comes from the key (:mod:`mongomem.sdk.idempotency`), so a retry is answered
from the reconciler's ledger with the first call's outcome.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from datetime import datetime
from typing import Any, Protocol

from pymongo import AsyncMongoClient

from mongomem.adapters.embeddings import (
    Embedder,
    embed_queries,
    embedder_identity,
    local_model_installed,
    make_embedder,
)
from mongomem.adapters.mongo import Document, connect, database, reachable
from mongomem.adapters.rerank import http_reranker, rerank
from mongomem.deadlines import check_deadline
from mongomem.erasure.erase import ErasureResult, Target, erase, require_confirmation
from mongomem.erasure.register import NOT_ERASED_TTL_S, ErasureRegister
from mongomem.errors import InputError
from mongomem.ltm import (
    KINDS,
    Judge,
    LLMJudge,
    MemoryStore,
    Thresholds,
    make_candidate,
)
from mongomem.ltm.browse import MemoryFilter, browse, count
from mongomem.ltm.export import ImportResult, export_lines, import_lines
from mongomem.ltm.kinds import Kind, custom_kind
from mongomem.models import (
    Evidence,
    MemoryScope,
    MemoryType,
    Role,
    SessionEnd,
    Turn,
    ceil_millisecond,
    stable_id,
    utcnow,
)
from mongomem.operations.progress import ProcessingStatus, Progress
from mongomem.operations.usage import LLM_USAGE, MongoUsageRecorder, judge_meters
from mongomem.project_config import CustomTypeConfig, enabled_types, load_project_config
from mongomem.ranking import MAX_QUERY_CHARS
from mongomem.sdk.context import compose_context
from mongomem.sdk.idempotency import (
    check_idempotency_key,
    keyed_candidate_id,
    request_fingerprint,
)
from mongomem.sdk.identity import Identity
from mongomem.sdk.models import (
    DeleteResult,
    MemoryContext,
    MemoryItem,
    MemoryPage,
    MemoryRecord,
    SaveResult,
    SearchHit,
    VersionRecord,
    check_memory_id,
    check_reason,
    delete_result,
    hit_ranks,
    item_of,
    record_of,
    version_record,
)
from mongomem.settings import EmbeddingSettings, Settings
from mongomem.stm.search import TurnHit, TurnQuery, TurnSearch
from mongomem.stm.turns import SessionPage, SessionSummary, ShortTermMemory, TurnPage

__all__ = ["DirectTransport", "MemoryTransport", "check_query", "default_embedder"]


def check_query(query: str) -> None:
    """A search query must have text and at most :data:`~mongomem.ranking.MAX_QUERY_CHARS`."""
    if not isinstance(query, str) or not query.strip():
        raise InputError("the search query is empty", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InputError(
            f"the search query has {len(query)} characters; at most {MAX_QUERY_CHARS}",
            field="query",
        )


class MemoryTransport(Protocol):
    """Every operation of the SDK, for one resolved identity."""

    async def save(
        self,
        who: Identity,
        memory_type: str,
        fields: dict[str, str],
        idempotency_key: str | None = None,
    ) -> SaveResult:
        """Save one memory; with ``idempotency_key``, a repeat answers the first outcome.

        Callers pass ``idempotency_key`` only when there is one, so a transport
        written before keys existed keeps working for saves without one.
        """
        ...

    async def get(self, who: Identity, memory_type: str, key: str) -> MemoryRecord | None: ...

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]: ...

    async def list_memories(
        self, who: Identity, memory_type: str, limit: int, domain: str | None
    ) -> list[MemoryRecord]: ...

    async def list_domains(self, who: Identity) -> list[str]: ...

    async def build_context(
        self,
        who: Identity,
        query: str,
        include: Sequence[str],
        limit_per_type: int,
        max_chars: int,
        min_score: float | None,
        include_turns: int = 0,
    ) -> MemoryContext:
        """The memories relevant to ``query`` (and ``include_turns`` best turns), rendered
        within ``max_chars`` (:func:`~mongomem.sdk.context.compose_context`: every transport
        answers the same). Callers pass ``include_turns`` only when it is not 0."""
        ...

    async def search_turns(self, who: Identity, q: TurnQuery) -> list[TurnHit]:
        """The caller's turns (every session) best for ``q`` (:mod:`mongomem.stm.search`)."""
        ...

    async def history(self, who: Identity, memory_id: str) -> list[VersionRecord]: ...

    async def delete(
        self, who: Identity, memory_id: str, reason: str | None
    ) -> DeleteResult | None:
        """Delete one of the caller's memories (``None``: no such memory in its scopes)."""
        ...

    async def delete_by_key(
        self, who: Identity, memory_type: str, key: str, reason: str | None
    ) -> DeleteResult | None:
        """Delete the caller's current memory of ``memory_type`` with ``key`` (``None``: none)."""
        ...

    async def processing_status(self, who: Identity) -> ProcessingStatus:
        """The extraction progress of the caller's session (:mod:`mongomem.operations.progress`)."""
        ...

    async def browse_memories(
        self, who: Identity, f: MemoryFilter, limit: int, cursor: str | None
    ) -> MemoryPage:
        """A page of the caller's memory versions (:mod:`mongomem.ltm.browse`)."""
        ...

    async def count_memories(self, who: Identity, f: MemoryFilter) -> int: ...

    async def get_memory(self, who: Identity, memory_id: str) -> MemoryItem | None:
        """The memory's latest version (``None``: not one of the caller's)."""
        ...

    async def browse_sessions(
        self, who: Identity, limit: int, cursor: str | None, active_since: datetime | None
    ) -> SessionPage: ...

    async def browse_turns(self, who: Identity, limit: int, cursor: str | None) -> TurnPage: ...

    async def record_turn(
        self,
        who: Identity,
        role: Role | str,
        content: str,
        metadata: dict[str, Any] | None,
        at: datetime | None = None,
        speaker: str | None = None,
    ) -> Turn:
        """Record a turn; ``at`` (passed only when given) is a historical turn's own time,
        ``speaker`` (passed only when given) who spoke besides the role (SPEC L3)."""
        ...

    async def recent_turns(self, who: Identity, limit: int) -> list[Turn]: ...

    async def end_session(self, who: Identity) -> SessionEnd:
        """Close the session's window now: a session end in the turns stream."""
        ...

    async def list_sessions(self, who: Identity, limit: int) -> list[SessionSummary]: ...

    async def erase(
        self, project_id: str, user_id: str | None, session_id: str | None, *, confirm: bool
    ) -> ErasureResult:
        """Erase a project, a user or a session (:mod:`mongomem.erasure.erase`); ``confirm`` must
        be ``True``."""
        ...

    def export_user(self, project_id: str, user_id: str) -> AsyncIterator[str]:
        """The export of the user's memory, line by line (:mod:`mongomem.ltm.export`)."""
        ...

    async def import_user(
        self, project_id: str, user_id: str, lines: AsyncIterable[bytes | str]
    ) -> ImportResult:
        """Import an export into the user, all or nothing (:mod:`mongomem.ltm.export`)."""
        ...

    async def close(self) -> None: ...


def default_settings(settings: EmbeddingSettings) -> EmbeddingSettings:
    """``settings``, with the local model as the provider when none is set and it is
    installed."""
    if settings.provider is None and local_model_installed():
        return settings.model_copy(update={"provider": "local"})
    return settings


def default_embedder(settings: EmbeddingSettings) -> Embedder:
    """The configured embedder; with no provider set, the local model if it is installed."""
    return make_embedder(default_settings(settings))


def _metered(judge: Judge | None, db: Any) -> Judge | None:
    """``judge``, with an :class:`~mongomem.ltm.LLMJudge` that has no meter of its own
    accounted in ``llm_usage`` (purpose ``judge``, one record per request, like the
    reconciler's): a direct save's judge calls are paid for like any other."""
    if isinstance(judge, LLMJudge) and judge.meter_for is None:
        return judge.metered(judge_meters(MongoUsageRecorder(db[LLM_USAGE])))
    return judge


def _unknown_type(memory_type: str) -> InputError:
    return InputError(
        f"unknown memory type {memory_type!r} (neither built in nor declared under "
        "memory.extraction.custom in project-config.yaml)",
        field="memory_type",
    )


class DirectTransport:
    """Reaches MongoDB directly; created lazily on first use.

    ``embedder`` defaults to :func:`~mongomem.adapters.embeddings.make_embedder` of
    ``settings.embedding`` (with no provider set: the local model when the
    ``local-embeddings`` extra is installed), made on the first save or search:
    turns and reads need no embedder. ``client`` lets an application share its
    client.
    ``actor`` is who deletions are recorded as (default: the caller's user id;
    the CLI records the operator).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        judge: Judge | None = None,
        thresholds: Thresholds | None = None,
        client: AsyncMongoClient[Document] | None = None,
        actor: str | None = None,
    ) -> None:
        self._settings = settings
        self._actor = actor
        self._types: tuple[str, ...] | None = None
        self._custom: dict[str, CustomTypeConfig] | None = None
        self._embedder = embedder
        self._judge = judge
        self._thresholds = thresholds
        self._client = client
        self._own_client = client is None
        self._store: MemoryStore | None = None
        self._stm: ShortTermMemory | None = None
        self._lock = asyncio.Lock()
        self._erasures: ErasureRegister | None = None
        self._turn_search: TurnSearch | None = None
        #: The optional reranker (off unless MONGOMEM_RERANK_BASE_URL is set).
        self._reranker = http_reranker(settings.rerank)

    async def _store_ready(self) -> MemoryStore:
        """The store (and short-term memory), set up on first use; needs no embedder."""
        async with self._lock:
            if self._store is None:
                if self._client is None:
                    self._client = connect(self._settings.mongodb)
                await reachable(self._client, self._settings.mongodb)  # one timeout, not one a step
                db = database(self._client, self._settings.mongodb)
                thresholds = self._thresholds or Thresholds.from_settings(self._settings.reconcile)
                store = MemoryStore(
                    db,
                    judge=_metered(self._judge, db),
                    thresholds=thresholds,
                    ledger_ttl_s=self._settings.reconcile.ledger_ttl_s,
                )
                await store.setup()
                stm = ShortTermMemory(db, self._settings.stm)
                await stm.ensure_indexes()
                self._store, self._stm = store, stm
            return self._store

    def _register(self, store: MemoryStore) -> ErasureRegister:
        if self._erasures is None:
            self._erasures = ErasureRegister(store.db, remember_absent=True)
        return self._erasures

    async def _ready(self) -> tuple[MemoryStore, Embedder]:
        """The store and the embedder: only saves and searches need the embedder."""
        store = await self._store_ready()
        if self._embedder is None:
            self._embedder = default_embedder(self._settings.embedding)
        return store, self._embedder

    async def _short_term(self) -> ShortTermMemory:
        await self._store_ready()
        assert self._stm is not None
        return self._stm

    async def save(
        self,
        who: Identity,
        memory_type: str,
        fields: dict[str, str],
        idempotency_key: str | None = None,
    ) -> SaveResult:
        store, embedder = await self._ready()
        kind = self._kind_of(memory_type)
        checked = kind.check(fields, strict=True)
        # The register and the scope's index are read beside the embedding call, not
        # before it (two round trips less on the save's path; a "not erased" answer
        # is also remembered for NOT_ERASED_TTL_S); the register's answer still comes
        # first: an erased user is refused whatever else went wrong, and nothing is
        # written before. An erasure's second sweep waits out answers up to
        # NOT_ERASED_TTL_S old, so an answer older than that by the time of the
        # write (a slow embedding) is read again just before it.
        register = self._register(store)
        since = time.monotonic()
        check = asyncio.ensure_future(
            register.refuse_erased(who.project_id, who.user_id, who.session_id)
        )
        scope = self._scope_of(who, memory_type)
        prepared = asyncio.ensure_future(store.prepare(scope, memory_type))
        try:
            fingerprint = None
            if idempotency_key is None:
                cid = stable_id("cand", "direct", uuid.uuid4().hex)
            else:  # see mongomem.sdk.idempotency
                key = check_idempotency_key(idempotency_key)
                cid = keyed_candidate_id(who, memory_type, key)
                fingerprint = request_fingerprint(memory_type, checked)
            text = kind.text(checked)
            [vector] = await embedder.embed([text])
        except asyncio.CancelledError:
            check.cancel()
            _drop(prepared)
            raise
        except BaseException:
            _drop(prepared)
            await check  # Erased first
            raise
        try:
            relied = await check
        except BaseException:
            _drop(prepared)
            raise
        await prepared
        if time.monotonic() - relied >= NOT_ERASED_TTL_S:
            await register.refuse_erased(who.project_id, who.user_id, who.session_id)
        # as stored (rounded up to the millisecond): never earlier than this moment
        now = ceil_millisecond(utcnow())
        evidence = Evidence(
            source="direct",
            ref=cid,
            session_id=who.session_id,
            user_id=who.user_id,
            text=text,
            at=now,
        )
        candidate = make_candidate(
            memory_type,
            scope,
            checked,
            vector,
            candidate_id=cid,
            evidence=evidence,
            created_at=now,
            model=embedder.name,
            kind=kind,
        )
        # Unkeyed, the candidate id is random: no retry can repeat it, so no ledger.
        out = await store.reconcile(
            candidate,
            fingerprint=fingerprint,
            ledger=idempotency_key is not None,
            read_since=since,
        )
        wait = (now - utcnow()).total_seconds()
        if wait > 0:  # under a millisecond: a moment after the return is after the save
            await asyncio.sleep(wait)
        return SaveResult(
            action=out.action,
            memory_id=out.memory_id,
            version=out.version,
            version_id=out.version_id,
            reason=out.reason,
        )

    async def get(self, who: Identity, memory_type: str, key: str) -> MemoryRecord | None:
        store = await self._store_ready()
        found = await store.get(self._scope_of(who, memory_type), memory_type, key)
        return None if found is None else record_of(found)

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]:
        scope = self._scope_of(who, memory_type)
        store, embedder = await self._ready()
        check_query(query)
        [vector] = await embed_queries(embedder, [query])
        prefix = _domain_prefix(memory_type, domain)
        depth = max(limit, self._settings.rerank.depth) if self._reranker else limit
        hits = await store.rank(scope, memory_type, query, vector, depth, prefix)
        found = [
            SearchHit[MemoryRecord](memory=record_of(v), score=s, ranks=hit_ranks(r))
            for v, s, r in hits
        ]
        if self._reranker is not None and found:
            order = await rerank(self._reranker, query, found, lambda h: h.memory.text)
            if order is not None:
                found = [
                    h.model_copy(
                        update={"ranks": h.ranks and h.ranks.model_copy(update={"rerank_score": s})}
                    )
                    for h, s in order
                ]
        return found[:limit]

    async def list_memories(
        self, who: Identity, memory_type: str, limit: int, domain: str | None
    ) -> list[MemoryRecord]:
        store = await self._store_ready()
        scope = self._scope_of(who, memory_type)
        prefix = _domain_prefix(memory_type, domain)
        found = await store.list_current(scope, memory_type, limit, prefix)
        return [record_of(v) for v in found]

    async def list_domains(self, who: Identity) -> list[str]:
        store = await self._store_ready()
        return await store.list_domains(who.project_id)

    async def build_context(
        self,
        who: Identity,
        query: str,
        include: Sequence[str],
        limit_per_type: int,
        max_chars: int,
        min_score: float | None,
        include_turns: int = 0,
    ) -> MemoryContext:
        check_query(query)
        return await compose_context(
            self, who, query, include, limit_per_type, max_chars, min_score, include_turns
        )

    async def turn_search(self) -> TurnSearch:
        """This transport's turn search (made on first use; it needs the embedder)."""
        store, embedder = await self._ready()
        if self._turn_search is None:
            search = TurnSearch(
                store.db,
                embedder,
                reranker=self._reranker,
                rerank_depth=self._settings.rerank.depth,
            )
            await search.ensure_indexes()
            self._turn_search = search
        return self._turn_search

    async def search_turns(self, who: Identity, q: TurnQuery) -> list[TurnHit]:
        check_query(q.query)
        search = await self.turn_search()
        return await search.search(who.project_id, who.user_id, q)

    async def history(self, who: Identity, memory_id: str) -> list[VersionRecord]:
        store = await self._store_ready()
        versions = await store.history(memory_id, who.scopes)
        return [version_record(v) for v in versions]

    async def delete(
        self, who: Identity, memory_id: str, reason: str | None
    ) -> DeleteResult | None:
        store = await self._store_ready()
        memory_id = check_memory_id(memory_id)
        reason = check_reason(reason)
        actor = self._actor or who.user_id
        found = await store.delete(memory_id, who.scopes, actor=actor, reason=reason)
        return None if found is None else delete_result(found)

    async def delete_by_key(
        self, who: Identity, memory_type: str, key: str, reason: str | None
    ) -> DeleteResult | None:
        store = await self._store_ready()
        scope = self._scope_of(who, memory_type)
        reason = check_reason(reason)
        current = await store.get(scope, memory_type, key)
        if current is None:
            return None
        actor = self._actor or who.user_id
        found = await store.delete(current.memory_id, [scope], actor=actor, reason=reason)
        return None if found is None else delete_result(found)

    def _browse_scopes(self, who: Identity, f: MemoryFilter) -> list[MemoryScope]:
        if f.memory_type is None:
            return list(who.scopes)
        return [self._scope_of(who, f.memory_type)]

    def custom_types(self) -> dict[str, CustomTypeConfig]:
        """The memory types ``project-config.yaml`` declares (``MONGOMEM_PROJECT_CONFIG``),
        by name; read once. Their memories are written by their extractors; the reads
        (get, search, list, browse, count) and deletions take them as built-in types."""
        if self._custom is None:
            path = self._settings.project_config
            declared = () if path is None else load_project_config(path).memory.extraction.custom
            self._custom = {c.name: c for c in declared}
        return self._custom

    def _kind_of(self, memory_type: str) -> Kind:
        """A built-in type's kind, or a declared custom type's (SPEC C4: a type's direct
        writes work whether or not its extraction runs); else :class:`InputError`."""
        if memory_type in KINDS:
            return KINDS[memory_type]
        custom = self.custom_types().get(memory_type)
        if custom is None:
            raise _unknown_type(memory_type)
        return custom_kind(custom)

    def _scope_of(self, who: Identity, memory_type: str) -> MemoryScope:
        """The caller's scope of ``memory_type``: a built-in type's, or a declared custom
        type's (its ``scope``: the user's or the project's); else :class:`InputError`."""
        if memory_type in KINDS:  # a built-in type: the project config is not read
            return who.scope(memory_type)
        custom = self.custom_types().get(memory_type)
        if custom is None:
            raise _unknown_type(memory_type)
        if custom.scope == "project":
            return MemoryScope(project_id=who.project_id)
        return MemoryScope(project_id=who.project_id, user_id=who.user_id)

    async def browse_memories(
        self, who: Identity, f: MemoryFilter, limit: int, cursor: str | None
    ) -> MemoryPage:
        store = await self._store_ready()
        found, following = await browse(
            store.memories, self._browse_scopes(who, f), f, limit, cursor
        )
        return MemoryPage(items=tuple(item_of(v) for v in found), next_cursor=following)

    async def count_memories(self, who: Identity, f: MemoryFilter) -> int:
        store = await self._store_ready()
        return await count(store.memories, self._browse_scopes(who, f), f)

    async def get_memory(self, who: Identity, memory_id: str) -> MemoryItem | None:
        store = await self._store_ready()
        found = await store.latest(check_memory_id(memory_id), who.scopes)
        return None if found is None else item_of(found)

    async def browse_sessions(
        self, who: Identity, limit: int, cursor: str | None, active_since: datetime | None
    ) -> SessionPage:
        stm = await self._short_term()
        return await stm.browse_sessions(who.project_id, who.user_id, limit, cursor, active_since)

    async def browse_turns(self, who: Identity, limit: int, cursor: str | None) -> TurnPage:
        stm = await self._short_term()
        return await stm.browse_turns(who.session(), limit, cursor)

    async def processing_status(self, who: Identity) -> ProcessingStatus:
        store = await self._store_ready()
        session = who.session()
        if self._types is None:  # the project config is read once
            self._types = enabled_types(self._settings)
        return await Progress(store.db).session_status(session, self._types)

    async def record_turn(
        self,
        who: Identity,
        role: Role | str,
        content: str,
        metadata: dict[str, Any] | None,
        at: datetime | None = None,
        speaker: str | None = None,
    ) -> Turn:
        stm = await self._short_term()
        check_deadline()  # a request past its deadline stores nothing
        turn = await stm.record_turn(who.session(), role, content, metadata, at=at, speaker=speaker)
        if self._turn_search is not None:
            self._turn_search.note_turn(who.project_id, who.user_id)
        return turn

    async def recent_turns(self, who: Identity, limit: int) -> list[Turn]:
        stm = await self._short_term()
        return await stm.recent_turns(who.session(), limit)

    async def end_session(self, who: Identity) -> SessionEnd:
        stm = await self._short_term()
        check_deadline()
        return await stm.end_session(who.session())

    async def list_sessions(self, who: Identity, limit: int) -> list[SessionSummary]:
        stm = await self._short_term()
        return await stm.list_sessions(who.project_id, who.user_id, limit)

    async def erase(
        self, project_id: str, user_id: str | None, session_id: str | None, *, confirm: bool
    ) -> ErasureResult:
        require_confirmation(confirm)
        store = await self._store_ready()
        target = Target(project_id=project_id, user_id=user_id, session_id=session_id)
        result = await erase(store.db, target, actor=self._actor or user_id or "sdk")
        if self._turn_search is not None and user_id is not None:
            self._turn_search.note_turn(project_id, user_id)
        return result

    def _embedder_id(self) -> tuple[str, int] | None:
        """The configured embedder's name and size (``None``: none is configured), read
        from the embedder given or else from the settings: naming the default embedder
        neither loads its model nor starts its client."""
        if self._embedder is None:
            return embedder_identity(default_settings(self._settings.embedding))
        if not self._embedder.dimensions:  # a stand-in that makes no vectors (the CLI's)
            return None
        return self._embedder.name, self._embedder.dimensions

    async def export_user(self, project_id: str, user_id: str) -> AsyncIterator[str]:
        from mongomem import __version__

        store = await self._store_ready()
        scope = MemoryScope(project_id=project_id, user_id=user_id)
        embedder = self._embedder_id()
        async for line in export_lines(store.db, scope, embedder, version=__version__):
            yield line

    async def import_user(
        self, project_id: str, user_id: str, lines: AsyncIterable[bytes | str]
    ) -> ImportResult:
        store, embedder = await self._ready()
        scope = MemoryScope(project_id=project_id, user_id=user_id)
        return await import_lines(
            store.db,
            scope,
            lines,
            embedder=embedder,
            register=self._register(store),
            bson_vector=store.bson_vectors,
        )

    async def close(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.close()
        self._client, self._store, self._stm = None, None, None


def _domain_prefix(memory_type: str, domain: str | None) -> str | None:
    if domain is None:
        return None
    if memory_type != MemoryType.TAXONOMIC:
        raise InputError("only taxonomic memories have a domain", field="domain")
    return domain.strip() + "/"


def _drop(task: asyncio.Future[Any]) -> None:
    """Give up a side task that lost its purpose (what it raised is not reported)."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
