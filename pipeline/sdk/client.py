"""The async SDK: :class:`AsyncMemory` and the bound context it hands out.

::

    memory = AsyncMemory(project_id="travel-agent")
    chat = memory.bind(MemoryRequestContext(user_id="user_1", session_id="thread_123"))
    await chat.save_semantic(label="home-airport", text="The user's home airport is Boston.")
    fact = await chat.get_semantic("home-airport")

Every call of a bound context acts for the identity resolved from its
context (:mod:`mongomem.sdk.identity`) and never reads or writes outside that
identity's scopes.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, cast

from mongomem.adapters.embeddings import Embedder
from mongomem.erasure.erase import ErasureResult
from mongomem.errors import ConfigError, InputError, ProcessingFailed, ProcessingTimeout
from mongomem.ltm import Judge, Thresholds
from mongomem.ltm.browse import make_filter
from mongomem.ltm.export import ExportResult, ImportResult
from mongomem.models import MemoryType, Role, SessionEnd, Turn, utcnow
from mongomem.operations.progress import ProcessingStatus
from mongomem.sdk.context import DEFAULT_CONTEXT_TYPES, check_context_arguments, compose_context
from mongomem.sdk.export_io import ExportSink, ImportSource, read_lines, write_export
from mongomem.sdk.idempotency import check_idempotency_key
from mongomem.sdk.identity import Identity, resolve_identity
from mongomem.sdk.models import (
    DeleteResult,
    Episode,
    MemoryContext,
    MemoryItem,
    MemoryPage,
    MemoryRecord,
    MemoryRequestContext,
    Procedure,
    SaveResult,
    SearchHit,
    SemanticMemory,
    TaxonomicTerm,
    VersionRecord,
    typed,
)
from mongomem.sdk.recall_time import check_as_of, matches_subject, value_at, with_value
from mongomem.sdk.time_boost import boost_by_time
from mongomem.sdk.transport import DirectTransport, MemoryTransport
from mongomem.settings import Settings, resolve_settings
from mongomem.stm.search import TurnHit, TurnQuery, turn_query
from mongomem.stm.turns import SessionPage, SessionSummary, TurnPage
from mongomem.time_expressions import find_time_window

if TYPE_CHECKING:  # the HTTP client (httpx) and TLS load only for a base_url
    from mongomem.adapters.tls import Verify
    from mongomem.sdk.http import HttpTransport

__all__ = ["DEFAULT_CONTEXT_TYPES", "AsyncBoundMemory", "AsyncMemory"]

M = TypeVar("M", bound=MemoryRecord)


class _FilteredSearch:
    """A :class:`~mongomem.sdk.context.Searcher` over a bound memory's filtered search."""

    def __init__(
        self, memory: AsyncBoundMemory, as_of: datetime | None, subject: str | None
    ) -> None:
        self._memory, self._as_of, self._subject = memory, as_of, subject

    async def search(
        self, who: Identity, memory_type: str, query: str, limit: int, domain: str | None
    ) -> list[SearchHit[MemoryRecord]]:
        return await self._memory._hits(
            memory_type, query, limit, domain, self._as_of, self._subject
        )

    async def search_turns(self, who: Identity, q: TurnQuery) -> list[TurnHit]:
        """Raw turns are not filtered by ``as_of``/``subject``: none are added."""
        return []


def _is_http(transport: MemoryTransport | None) -> TypeGuard[HttpTransport]:
    """Whether ``transport`` is an :class:`HttpTransport` (without loading httpx for it)."""
    http = sys.modules.get("mongomem.sdk.http")
    return http is not None and isinstance(transport, http.HttpTransport)


class AsyncMemory:
    """Long-term (and short-term) memory of one project.

    With ``base_url`` the calls go to the HTTP memory service there
    (:class:`~mongomem.sdk.HttpTransport`), which checks ``api_key``; ``verify``
    (an ``https://`` service's certificate: the path of a private CA's bundle, an
    :class:`ssl.SSLContext`, or the default ``True``, the system's CAs) goes with it.
    ``transport=HttpTransport(url)`` is the same, and such a transport
    without a key of its own uses ``api_key``. Otherwise the direct transport
    reaches MongoDB with ``settings`` (default: the environment) and does not
    use ``api_key``. Pass ``transport`` to use another one.
    """

    def __init__(
        self,
        *,
        project_id: str,
        api_key: str | None = None,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        judge: Judge | None = None,
        thresholds: Thresholds | None = None,
        transport: MemoryTransport | None = None,
        base_url: str | None = None,
        verify: Verify = True,
    ) -> None:
        self.project_id = project_id
        self.api_key = api_key
        if base_url is None and verify is not True:
            raise ConfigError(
                "verify goes with base_url: it checks the memory service's certificate"
            )
        if base_url is not None:
            if transport is not None:
                raise ConfigError("pass base_url or transport, not both")
            from mongomem.sdk.http import HttpTransport

            transport = HttpTransport(base_url, api_key=api_key, verify=verify)
        elif _is_http(transport):
            transport.use_api_key(api_key)
        if transport is None:
            transport = DirectTransport(
                settings or resolve_settings(),
                embedder=embedder,
                judge=judge,
                thresholds=thresholds,
            )
        self.transport = transport

    def bind(self, ctx: MemoryRequestContext) -> AsyncBoundMemory:
        """The memory as seen by the caller described by ``ctx``."""
        return AsyncBoundMemory(self.transport, resolve_identity(self.project_id, ctx))

    async def erase_user(self, user_id: str, *, confirm: bool = False) -> ErasureResult:
        """Erase a user of this project (SPEC J2): every turn, snapshot, memory, version,
        evidence, ledger and decision-log entry, usage record and processing status derived
        from them; project-scoped memories lose the user's evidence by lineage
        (:mod:`mongomem.erasure.erase`). Irreversible, so ``confirm=True`` is required; the user
        id is retired (later writes for it are refused). An unknown user is a no-op whose
        result says so (``erased`` is ``False``). Run again, it completes an interrupted
        erasure.
        """
        user = resolve_identity(self.project_id, MemoryRequestContext(user_id=user_id))
        return await self.transport.erase(self.project_id, user.user_id, None, confirm=confirm)

    async def erase_session(
        self, user_id: str, session_id: str, *, confirm: bool = False
    ) -> ErasureResult:
        """Erase one session of a user, as :meth:`erase_user` does a user."""
        who = resolve_identity(
            self.project_id, MemoryRequestContext(user_id=user_id, session_id=session_id)
        )
        assert who.session_id is not None
        return await self.transport.erase(
            self.project_id, who.user_id, who.session_id, confirm=confirm
        )

    async def erase_project(self, *, confirm: bool = False) -> ErasureResult:
        """Erase every user, session and memory of this project (direct clients only:
        over HTTP it is refused — one API key must not wipe a project)."""
        return await self.transport.erase(self.project_id, None, None, confirm=confirm)

    def export_lines(self, user_id: str) -> AsyncIterator[str]:
        """The export of a user's memory (SPEC J4), one JSON line at a time, as it is read
        (format: :mod:`mongomem.ltm.export_format`): a header, every version of every
        memory of the user's own scope with its evidence and turn ids, the decision log,
        an end line. Project-scoped (taxonomic) memories are the project's, not in it."""
        user = resolve_identity(self.project_id, MemoryRequestContext(user_id=user_id))
        return self.transport.export_user(self.project_id, user.user_id)

    async def export_user(self, user_id: str, out: ExportSink) -> ExportResult:
        """Write the export of a user's memory to ``out`` (a path or an open file), line
        by line (never whole in memory); a cut-short export raises
        :class:`~mongomem.errors.StorageError`. See :meth:`export_lines`."""
        return await write_export(self.project_id, user_id, self.export_lines(user_id), out)

    async def import_user(self, source: ImportSource, *, user_id: str) -> ImportResult:
        """Import an export (a path, an open file, or its lines) into ``user_id`` of this
        project: the same history, all or nothing, idempotent (:mod:`mongomem.ltm.export`).

        A bad line raises :class:`~mongomem.errors.InputError` naming its number and
        nothing of the import is stored; an erased user raises
        :class:`~mongomem.errors.Erased`. Vectors are embedded again when this side's
        embedder is not the export's.
        """
        user = resolve_identity(self.project_id, MemoryRequestContext(user_id=user_id))
        return await self.transport.import_user(self.project_id, user.user_id, read_lines(source))

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _limit(limit: int) -> int:
    if not 1 <= limit <= 1000:
        raise InputError("limit must be between 1 and 1000", field="limit")
    return limit


class AsyncBoundMemory:
    """Memory calls on behalf of one resolved identity."""

    def __init__(self, transport: MemoryTransport, identity: Identity) -> None:
        self._t = transport
        self.identity = identity

    # -- generic -----------------------------------------------------------------------

    async def _get(self, memory_type: str, key: str, model: type[M]) -> M | None:
        found = await self._t.get(self.identity, memory_type, key)
        return None if found is None else cast(M, typed(found))

    async def _search(
        self,
        memory_type: str,
        query: str,
        limit: int,
        model: type[M],
        domain: str | None = None,
        *,
        as_of: datetime | None = None,
        subject: str | None = None,
    ) -> list[SearchHit[M]]:
        hits = await self._hits(memory_type, query, _limit(limit), domain, as_of, subject)
        return [
            SearchHit[model](memory=cast(M, typed(h.memory)), score=h.score, ranks=h.ranks)  # type: ignore[valid-type]
            for h in hits
        ]

    async def _hits(
        self,
        memory_type: str,
        query: str,
        limit: int,
        domain: str | None,
        as_of: datetime | None,
        subject: str | None,
    ) -> list[SearchHit[MemoryRecord]]:
        """The transport's hits, then (SPEC L3, L5) each replaced by its value ``as_of``
        and kept only if about ``subject`` (:mod:`mongomem.sdk.recall_time`), and (SPEC
        M1) a time expression in ``query`` boosting those inside its window, resolved
        against ``as_of`` or now (:mod:`mongomem.sdk.time_boost`); filtered or boosted
        searches ask the ranker for more so that ``limit`` can still be filled."""
        at = check_as_of(as_of)
        window = find_time_window(query, at or utcnow())
        filtered = at is not None or subject is not None
        words = query if window is None else window.without(query)
        wide = min(1000, limit * 4) if filtered or window is not None else limit
        hits = await self._t.search(self.identity, memory_type, words, wide, domain)
        if window is not None:
            hits = boost_by_time(hits, window)
        if not filtered:
            return hits[:limit]
        out: list[SearchHit[MemoryRecord]] = []
        for hit in hits:
            record = hit.memory
            if at is not None:
                then = value_at(await self._t.history(self.identity, record.memory_id), at)
                if then is None:
                    continue
                record = with_value(record, then)
            if matches_subject(record, subject):
                out.append(SearchHit[MemoryRecord](memory=record, score=hit.score, ranks=hit.ranks))
        return out[:limit]

    async def _list(
        self, memory_type: str, limit: int, model: type[M], domain: str | None = None
    ) -> list[M]:
        found = await self._t.list_memories(self.identity, memory_type, _limit(limit), domain)
        return [cast(M, typed(r)) for r in found]

    async def _save(
        self, memory_type: str, fields: dict[str, str], idempotency_key: str | None
    ) -> SaveResult:
        if idempotency_key is None:
            return await self._t.save(self.identity, memory_type, fields)
        key = check_idempotency_key(idempotency_key)
        return await self._t.save(self.identity, memory_type, fields, idempotency_key=key)

    # -- semantic ----------------------------------------------------------------------

    async def save_semantic(
        self, label: str, text: str, *, idempotency_key: str | None = None
    ) -> SaveResult:
        """Save a fact; see :meth:`save_episode` for ``idempotency_key``."""
        fields = {"label": label, "text": text}
        return await self._save(MemoryType.SEMANTIC, fields, idempotency_key)

    async def get_semantic(self, label: str) -> SemanticMemory | None:
        return await self._get(MemoryType.SEMANTIC, label, SemanticMemory)

    async def search_semantic(
        self,
        query: str,
        limit: int = 5,
        *,
        as_of: datetime | None = None,
        subject: str | None = None,
    ) -> list[SearchHit[SemanticMemory]]:
        """Facts nearest to ``query``; ``as_of`` gives each as it was then (dropping those
        not stated yet), ``subject`` keeps those about one person (``"user"``: the user)."""
        return await self._search(
            MemoryType.SEMANTIC, query, limit, SemanticMemory, as_of=as_of, subject=subject
        )

    # -- episodic ----------------------------------------------------------------------

    async def save_episode(
        self, title: str, content: str, *, idempotency_key: str | None = None
    ) -> SaveResult:
        """Save an episode.

        Every save takes ``idempotency_key``: the same key again (same caller and
        memory type) answers the first call's result and changes nothing, so a
        save can be retried safely; the key with different content raises
        :class:`~mongomem.errors.InputError` (``field="idempotency_key"``). See
        :mod:`mongomem.sdk.idempotency`.
        """
        fields = {"title": title, "content": content}
        return await self._save(MemoryType.EPISODIC, fields, idempotency_key)

    async def search_episodes(
        self,
        query: str,
        limit: int = 5,
        *,
        as_of: datetime | None = None,
        subject: str | None = None,
    ) -> list[SearchHit[Episode]]:
        """Episodes nearest to ``query``; ``as_of`` and ``subject`` as for
        :meth:`search_semantic`."""
        return await self._search(
            MemoryType.EPISODIC, query, limit, Episode, as_of=as_of, subject=subject
        )

    async def list_episodes(self, limit: int = 50) -> list[Episode]:
        return await self._list(MemoryType.EPISODIC, limit, Episode)

    # -- procedural --------------------------------------------------------------------

    async def save_procedure(
        self,
        procedure: str,
        description: str,
        content: str,
        *,
        idempotency_key: str | None = None,
    ) -> SaveResult:
        """Save a procedure; see :meth:`save_episode` for ``idempotency_key``."""
        fields = {"name": procedure, "description": description, "content": content}
        return await self._save(MemoryType.PROCEDURAL, fields, idempotency_key)

    async def discover_procedures(self, query: str, limit: int = 5) -> list[SearchHit[Procedure]]:
        return await self._search(MemoryType.PROCEDURAL, query, limit, Procedure)

    async def get_procedure(self, name: str) -> Procedure | None:
        return await self._get(MemoryType.PROCEDURAL, name, Procedure)

    # -- taxonomic (project-wide) ------------------------------------------------------

    async def save_taxonomic(
        self, domain: str, term: str, definition: str, *, idempotency_key: str | None = None
    ) -> SaveResult:
        """Save a project-wide term; see :meth:`save_episode` for ``idempotency_key``."""
        fields = {"domain": domain, "term": term, "definition": definition}
        return await self._save(MemoryType.TAXONOMIC, fields, idempotency_key)

    async def get_taxonomic_term(self, domain: str, term: str) -> TaxonomicTerm | None:
        key = f"{domain.strip()}/{term.strip()}"
        return await self._get(MemoryType.TAXONOMIC, key, TaxonomicTerm)

    async def search_taxonomic(
        self, query: str, domain: str | None = None, limit: int = 5
    ) -> list[SearchHit[TaxonomicTerm]]:
        return await self._search(MemoryType.TAXONOMIC, query, limit, TaxonomicTerm, domain)

    async def list_domains(self) -> list[str]:
        return await self._t.list_domains(self.identity)

    # -- across types ------------------------------------------------------------------

    async def build_context(
        self,
        query: str,
        *,
        include: Sequence[str] = DEFAULT_CONTEXT_TYPES,
        limit_per_type: int = 5,
        max_chars: int = 4000,
        min_score: float | None = None,
        as_of: datetime | None = None,
        subject: str | None = None,
        include_turns: int = 0,
    ) -> MemoryContext:
        """Memories relevant to ``query``, structured and rendered within ``max_chars``.

        Semantic and episodic memories by default; add ``"procedural"`` and/or
        ``"taxonomic"`` to ``include`` to get those too. ``include_turns=k`` adds
        the ``k`` best raw turns of the user's whole history (:meth:`search_turns`),
        each with its date and session, in a last section within the same budget.
        Each line shows the memory's dates (when it was said; when it holds or
        happened, where known). ``as_of`` composes the context of what was current
        then, ``subject`` of the memories about one person (SPEC L3, L5; see
        :mod:`mongomem.sdk.recall_time`); those filtered contexts hold memories only.
        A time expression in ``query`` ("last May", "two weeks ago") boosts the
        memories and turns of its window, resolved against ``as_of``, else against
        now (SPEC M1; :mod:`mongomem.sdk.context`).
        """
        order = check_context_arguments(include, limit_per_type, max_chars, include_turns)
        if as_of is not None or subject is not None:
            check_as_of(as_of)
            searcher = _FilteredSearch(self, as_of, subject)
            return await compose_context(  # its searches resolve time against as_of
                searcher,
                self.identity,
                query,
                order,
                limit_per_type,
                max_chars,
                min_score,
                time_aware=False,
            )
        build = getattr(self._t, "build_context", None)
        if build is None:  # a transport written before the operation existed
            return await compose_context(
                self._t,
                self.identity,
                query,
                order,
                limit_per_type,
                max_chars,
                min_score,
                include_turns,
            )
        extra = {"include_turns": include_turns} if include_turns else {}
        context: MemoryContext = await build(
            self.identity, query, order, limit_per_type, max_chars, min_score, **extra
        )
        return context

    async def search_turns(
        self,
        query: str,
        limit: int = 10,
        *,
        sessions: Sequence[str] | None = None,
        speaker: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        neighbours: int = 0,
        as_of: datetime | None = None,
    ) -> list[TurnHit]:
        """The user's turns, across every session, best for ``query`` (SPEC M2).

        Ranked as memory search is: BM25 and cosine fused (each hit carries its
        ranks). ``sessions`` keeps turns of those sessions, ``speaker`` turns of
        that speaker (the turn's ``speaker``), ``since``/``until`` turns said in
        that time range (inclusive, aware datetimes); ``neighbours=n`` returns
        each hit with up to ``n`` turns before and after it in its session. A
        query over :data:`~mongomem.ranking.MAX_QUERY_CHARS`, ``since`` after
        ``until`` or a bad limit raises :class:`~mongomem.errors.InputError`.
        ``as_of`` is when the question is asked (default now): later turns are
        left out and a time expression in the query ("two weeks ago", "last
        May") boosts the turns said in its window.
        See :mod:`mongomem.stm.search` for when turns are embedded.
        """
        q = turn_query(
            query=query,
            limit=limit,
            sessions=None if sessions is None else tuple(sessions),
            speaker=speaker,
            since=since,
            until=until,
            neighbours=neighbours,
            as_of=as_of,
        )
        return await self._t.search_turns(self.identity, q)

    async def history(
        self, memory_id: str, *, as_of: datetime | None = None
    ) -> list[VersionRecord]:
        """Every version of one of this caller's memories in the order of the world (by
        when each value was said; empty if not theirs). ``as_of``: only what was stated
        by then, its last the value current then (SPEC L5; see :meth:`value_as_of`)."""
        versions = await self._t.history(self.identity, memory_id)
        at = check_as_of(as_of)
        if at is None:
            return versions
        then = value_at(versions, at)
        if then is None:
            return []
        stated = [v for v in versions if any(e.at <= at for e in v.evidence) and v != then]
        return [*stated, then]

    async def value_as_of(self, memory_id: str, at: datetime) -> VersionRecord | None:
        """What the memory was on ``at`` — the version current then (``None``: not yet
        stated, or deleted by then). SPEC L5."""
        at_ = check_as_of(at)
        assert at_ is not None
        return value_at(await self._t.history(self.identity, memory_id), at_)

    # -- deleting (SPEC J1) ------------------------------------------------------------

    async def delete_memory(
        self, memory_id: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        """Delete one of this caller's memories; ``None`` if it has none with this id.

        From the moment this returns, no read in any process returns the memory
        (get, search, list, ``build_context``); its history ends with a
        ``DELETE`` version that records the time, the actor (this caller's user
        id) and ``reason``. Deleting it again changes nothing and answers
        ``already_deleted=True``. Saving or extracting the same fact later is a
        fresh ADD: a new memory id, the old versions stay in the old history.
        See :mod:`mongomem.ltm.deletes`.
        """
        return await self._t.delete(self.identity, memory_id, reason)

    async def delete_by_key(
        self, memory_type: str, key: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        """Delete the current memory of ``memory_type`` with ``key`` (as
        :meth:`delete_memory`); ``None`` if there is none. Taxonomic keys are
        ``domain/term``."""
        return await self._t.delete_by_key(self.identity, memory_type, key, reason)

    async def delete_semantic(
        self, label: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        return await self.delete_by_key(MemoryType.SEMANTIC, label, reason=reason)

    async def delete_episode(self, title: str, *, reason: str | None = None) -> DeleteResult | None:
        return await self.delete_by_key(MemoryType.EPISODIC, title, reason=reason)

    async def delete_procedure(
        self, name: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        return await self.delete_by_key(MemoryType.PROCEDURAL, name, reason=reason)

    async def delete_taxonomic_term(
        self, domain: str, term: str, *, reason: str | None = None
    ) -> DeleteResult | None:
        key = f"{domain.strip()}/{term.strip()}"
        return await self.delete_by_key(MemoryType.TAXONOMIC, key, reason=reason)

    # -- custom types (SPEC C6) ----------------------------------------------------------

    async def save_custom(
        self,
        memory_type: str,
        fields: dict[str, str],
        *,
        idempotency_key: str | None = None,
    ) -> SaveResult:
        """Save a memory of a custom type ``project-config.yaml`` declares
        (``MONGOMEM_PROJECT_CONFIG``): its key fields, and any of its other fields (those
        left out stay unset); reconciled as its extractor's items are (SPEC C4: a type's
        direct writes work beside its extraction). See :meth:`save_episode` for
        ``idempotency_key``. An undeclared type or an undeclared field is an
        :class:`~mongomem.errors.InputError`."""
        return await self._save(memory_type, dict(fields), idempotency_key)

    async def get_custom(self, memory_type: str, key: str) -> MemoryRecord | None:
        """The current memory of a declared custom type under ``key`` (its key fields,
        ``/``-joined), or ``None``; delete one with :meth:`delete_by_key`."""
        return await self._t.get(self.identity, memory_type, key)

    # -- browsing (SPEC J3) -------------------------------------------------------------

    async def browse_memories(
        self,
        memory_type: str | None = None,
        *,
        status: str = "current",
        updated_since: datetime | None = None,
        key_prefix: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> MemoryPage:
        """A page of this caller's memory versions, newest first; one type, or all of them.

        ``status`` is ``current``, ``superseded`` or ``deleted`` (a deleted memory's
        ``DELETE`` version); ``updated_since`` keeps versions updated at or after
        it; ``key_prefix`` keys that start with it. Pass the page's
        ``next_cursor`` (with the same filters) for the next page: paging never
        skips nor repeats a version (see :mod:`mongomem.ltm.browse`).
        """
        f = make_filter(memory_type, status, updated_since, key_prefix)
        return await self._t.browse_memories(self.identity, f, _limit(limit), cursor)

    async def count_memories(
        self,
        memory_type: str | None = None,
        *,
        status: str = "current",
        updated_since: datetime | None = None,
        key_prefix: str | None = None,
    ) -> int:
        """How many versions :meth:`browse_memories` would list with these filters."""
        f = make_filter(memory_type, status, updated_since, key_prefix)
        return await self._t.count_memories(self.identity, f)

    async def get_memory(self, memory_id: str) -> MemoryItem | None:
        """The memory with this id as it stands (its ``DELETE`` version once deleted);
        ``None`` if it is not one of this caller's."""
        return await self._t.get_memory(self.identity, memory_id)

    async def browse_sessions(
        self, *, limit: int = 100, cursor: str | None = None, active_since: datetime | None = None
    ) -> SessionPage:
        """This user's sessions by id, a page at a time (``active_since``: a turn at or after)."""
        return await self._t.browse_sessions(self.identity, limit, cursor, active_since)

    async def browse_turns(self, *, limit: int = 100, cursor: str | None = None) -> TurnPage:
        """This context's session's turns, oldest first, a page at a time."""
        return await self._t.browse_turns(self.identity, limit, cursor)

    # -- processing status (SPEC J6) ----------------------------------------------------

    async def processing_status(self) -> ProcessingStatus:
        """How far extraction got with each snapshot of this context's session so far.

        Per snapshot and enabled memory type: ``pending``, ``done`` (its
        candidates are all reconciled; a snapshot with nothing of a type is done
        for it) or ``dead_lettered`` (with the error). Three indexed MongoDB reads
        sent together (snapshots, their progress, the last turn's seq); no Kafka
        call. Turns not yet promoted to a snapshot are not counted, but
        ``last_turn_seq`` shows them (see :mod:`mongomem.operations.progress`).
        """
        return await self._t.processing_status(self.identity)

    # The timeout is a parameter (not asyncio.timeout) so its error can name what is pending.
    async def wait_until_processed(
        self,
        timeout: float = 60.0,  # noqa: ASYNC109
        *,
        all_turns: bool = False,
        poll_s: float = 0.25,
    ) -> ProcessingStatus:
        """Wait until every snapshot of the session so far is done; its final status.

        With ``all_turns`` it also waits until every turn recorded so far is in
        a snapshot — use it after ``end_session``, or when the window closes by
        message count; without it, turns still in an open window are not waited
        for. Reads :meth:`processing_status` every ``poll_s`` seconds. Raises
        :class:`~mongomem.errors.ProcessingTimeout` after ``timeout`` seconds,
        naming every (snapshot, type) still pending, and
        :class:`~mongomem.errors.ProcessingFailed` as soon as nothing is pending
        but something was dead-lettered (it will not be done by waiting).
        """
        if not timeout > 0 or not poll_s > 0:
            raise InputError("timeout and poll_s must be positive", field="timeout")
        deadline = time.monotonic() + timeout
        while True:
            status = await self.processing_status()
            unsnapshotted = all_turns and status.last_turn_seq > status.last_snapshot_seq
            if status.state == "done" and not unsnapshotted:
                return status
            if status.state == "dead_lettered" and not unsnapshotted:
                failed = "; ".join(f"{s} ({t}): {e}" for s, t, e in status.where("dead_lettered"))
                raise ProcessingFailed(f"dead-lettered, so never done: {failed}")
            left = deadline - time.monotonic()
            if left <= 0:
                pending = ", ".join(f"{s} ({t})" for s, t, _ in status.where("pending"))
                if unsnapshotted:
                    first = status.last_snapshot_seq + 1
                    pending += f"{', ' if pending else ''}turns {first}-{status.last_turn_seq} "
                    pending += "(not in a snapshot yet)"
                raise ProcessingTimeout(
                    f"session {status.session_id!r} not processed after {timeout:g}s; "
                    f"still pending: {pending}"
                )
            await asyncio.sleep(min(poll_s, left))

    # -- short-term memory -------------------------------------------------------------

    async def record_turn(
        self,
        role: Role | str,
        content: str,
        metadata: dict[str, Any] | None = None,
        *,
        at: datetime | None = None,
        speaker: str | None = None,
    ) -> Turn:
        """Record one turn of this context's session (fast; no extraction happens here).

        ``speaker`` names who spoke besides the ``role`` (a display name or participant
        id, SPEC L3), for conversations between people: 1–128 characters without
        control characters, else :class:`~mongomem.errors.InputError` with
        ``field="speaker"`` and nothing is stored.

        ``at`` loads a turn of the past with its own time (backfills,
        evaluations; SPEC J7): a timezone-aware datetime, at most
        :data:`~mongomem.stm.turns.FUTURE_SKEW_S` seconds ahead of now, and not earlier
        than the session's previous turn — else
        :class:`~mongomem.errors.InputError` with ``field="at"`` and nothing is
        stored. The windowing stage windows such turns by their own times.
        """
        extra: dict[str, Any] = {}
        if at is not None:  # passed only when given: a transport written before them works
            extra["at"] = at
        if speaker is not None:
            extra["speaker"] = speaker
        return await self._t.record_turn(self.identity, role, content, metadata, **extra)

    async def recent_turns(self, limit: int = 50) -> list[Turn]:
        return await self._t.recent_turns(self.identity, limit)

    async def end_session(self) -> SessionEnd:
        """End this context's session now: its open window becomes a snapshot at once.

        Without waiting for the idle timeout, and deterministically: the end is
        an event in the turns stream (stored at the session's next seq), so a
        replay of the stream closes the same snapshot. Turns recorded after it
        start a new window. Not a turn: recent turns and sessions leave it out.
        """
        return await self._t.end_session(self.identity)

    async def list_sessions(self, limit: int = 100) -> list[SessionSummary]:
        return await self._t.list_sessions(self.identity, limit)
